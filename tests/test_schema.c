/*
 * test_schema.c -- docs/schema.sql is the schema a fresh `skipq migrate`
 * builds. Migrations re-create functions and views as they go, so the
 * current schema is readable in one file only if something keeps that
 * file current: this test migrates a new database, dumps it with
 * scripts/schema-dump.sh (the script that writes the file) and fails,
 * with the difference and the command that regenerates the file, when
 * they differ.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define SCHEMA_SQL SKIPQ_SOURCE_DIR "/docs/schema.sql"

Test(schema, docs_schema_sql_is_what_migrate_builds, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    const char *dumped = th_tmp_path("schema.sql");
    th_sh("'%s/scripts/schema-dump.sh' '%s' > '%s'", SKIPQ_SOURCE_DIR, db.conninfo, dumped);
    char *want = th_read_file(SCHEMA_SQL), *got = th_read_file(dumped);
    if (strcmp(want, got) != 0) {
        char cmd[2048];
        snprintf(cmd, sizeof cmd, "diff -u '%s' '%s' | head -n 60", SCHEMA_SQL, dumped);
        FILE *p = popen(cmd, "r");
        char diff[8192] = "";
        size_t n = p ? fread(diff, 1, sizeof diff - 1, p) : 0;
        diff[n] = '\0';
        if (p)
            pclose(p);
        cr_assert_fail("docs/schema.sql is not the schema a fresh migrate builds; regenerate it with\n"
                       "    scripts/schema-dump.sh --update %s\nand commit it. The difference (first lines):\n%s",
                       SKIPQ_BIN, diff);
    }
    free(want);
    free(got);
}
