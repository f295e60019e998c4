/*
 * test_exec.c -- `skipq exec PLUGIN.so KIND PAYLOAD`: one handler call in
 * the CLI's own process, with the host's loader and services. It prints
 * outcome, error, retry delay, output, log lines and duration; exits 0 done,
 * 1 retry or fail, 2 on bad input (missing file, wrong ABI, unknown kind,
 * invalid JSON, a typo in the plugin's section). With --db the handler's
 * transaction is rolled back unless --commit. Fixtures: typed.so, abi10.so,
 * bad_abi.so; the txn_note example.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

#define FIXTURE(name) SKIPQ_FIXTURE_DIR "/" name ".so"

static void expect_has(const char *text, const char *needle)
{
    cr_expect(strstr(text, needle) != NULL, "wanted \"%s\" in:\n%s", needle, text);
}

Test(exec, runs_a_handler_once_and_prints_what_came_of_it)
{
    char *out = NULL, *err = NULL;
    int st = th_cli(&out, &err, "exec", FIXTURE("typed"), "typed", "{\"a\": 1}", NULL);
    cr_expect_eq(st, 0, "%s%s", out, err);
    expect_has(out, "outcome:  done\n");
    expect_has(out, "error:    (none)\n");
    expect_has(out, "output:   {\"greeting\": \"hi\", \"count\": 3,");
    expect_has(out, "\"deadline_ms\": -1");
    expect_has(out, "duration: ");
    free(out), free(err);
    /* --timeout is the kind's: the deadline follows it */
    st = th_cli(&out, &err, "exec", "--timeout", "30s", FIXTURE("typed"), "typed", NULL);
    cr_expect_eq(st, 0, "%s%s", out, err);
    cr_expect(strstr(out, "\"deadline_ms\": 29") || strstr(out, "\"deadline_ms\": 30000"), "%s", out);
    free(out), free(err);
}

Test(exec, prints_the_handlers_log_lines_and_loads_a_1_0_plugin)
{
    char *out = NULL, *err = NULL;
    int st = th_cli(&out, &err, "exec", FIXTURE("abi10"), "abi10", NULL);
    cr_expect_eq(st, 0, "%s%s", out, err);
    expect_has(out, "log:\n  job 1 (abi10): abi10 ran\n");
    free(out), free(err);
}

Test(exec, a_retry_exits_1_with_the_handlers_error_and_should_stop_can_be_raised)
{
    char *out = NULL, *err = NULL;
    int st = th_cli(&out, &err, "exec", "--stop-after", "100ms", FIXTURE("typed"), "typed", "{\"until_stop\": 1}", NULL);
    cr_expect_eq(st, 1, "%s%s", out, err);
    expect_has(out, "outcome:  retry\n");
    expect_has(out, "error:    stopped on request after ");
    free(out), free(err);
}

Test(exec, bad_input_exits_2_with_a_clear_error)
{
    static const struct {
        const char *plugin, *kind, *payload, *want;
    } cases[] = {
        {"/nonexistent/x.so", "k", "{}", "cannot load plugin \"x\" from /nonexistent/x.so: No such file or directory"},
        {FIXTURE("bad_abi"), "bad.abi", "{}", "was built for skipq plugin ABI 2.3; this host provides ABI 1.1"},
        {FIXTURE("typed"), "nokind", "{}", "plugin \"typed\" registers no kind \"nokind\" (it registers: typed)"},
        {FIXTURE("typed"), "typed", "{\"a\": ", "the payload is not valid JSON: {\"a\": "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = NULL, *err = NULL;
        int st = th_cli(&out, &err, "exec", cases[i].plugin, cases[i].kind, cases[i].payload, NULL);
        cr_expect_eq(st, 2, "case %zu exited %d:\n%s%s", i, st, out, err);
        expect_has(err, cases[i].want);
        free(out), free(err);
    }
    char *out = NULL, *err = NULL;
    cr_expect_eq(th_cli(&out, &err, "exec", FIXTURE("typed"), NULL), 2);
    expect_has(err, "missing PLUGIN.so or KIND");
    free(out), free(err);
}

Test(exec, a_typo_in_the_plugins_section_exits_2_with_file_and_line)
{
    char *ini = th_write_file("typed.ini", "[plugin typed]\ncount = 4\n\ntimout = 1s\n");
    char *out = NULL, *err = NULL;
    int st = th_cli(&out, &err, "exec", "-c", ini, FIXTURE("typed"), "typed", NULL);
    cr_expect_eq(st, 2, "%s%s", out, err);
    char want[512];
    snprintf(want, sizeof want, "%s:4: unknown key \"timout\" in [plugin typed]", ini);
    expect_has(err, want);
    free(out), free(err);
    ini = th_write_file("typed2.ini", "[plugin typed]\ncount = 4\n");
    st = th_cli(&out, &err, "exec", "-c", ini, FIXTURE("typed"), "typed", NULL);
    cr_expect_eq(st, 0, "%s%s", out, err);
    expect_has(out, "\"count\": 4");
    free(out), free(err);
}

Test(exec, help_plugin_lists_the_declared_keys)
{
    char *out = NULL, *err = NULL;
    cr_expect_eq(th_cli(&out, &err, "exec", "--help-plugin", FIXTURE("typed"), NULL), 0, "%s", err);
    expect_has(out, "plugin typed 1.1.0 (ABI 1.1)");
    expect_has(out, "| `count` | integer | `3` | 1 to 10 | a number from 1 to 10 |");
    free(out), free(err);
}

Test(exec, with_db_the_handlers_transaction_is_rolled_back_unless_commit, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_execf(db.conn, "CREATE TABLE public.skipq_notes (job_id bigint, execution_id bigint, note text)");
    char *out = NULL, *err = NULL;
    int st = th_cli(&out, &err, "exec", "--db", db.conninfo, SKIPQ_PLUGIN_DIR "/txn_note.so", "note.write",
                    "{\"b\":1,  \"a\":2}", NULL);
    cr_expect_eq(st, 0, "%s%s", out, err);
    expect_has(out, "database: the handler's transaction was rolled back");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM public.skipq_notes"), 0);
    free(out), free(err);
    st = th_cli(&out, &err, "exec", "--db", db.conninfo, "--commit", SKIPQ_PLUGIN_DIR "/txn_note.so", "note.write",
                "{\"b\":1,  \"a\":2}", NULL);
    cr_expect_eq(st, 0, "%s%s", out, err);
    expect_has(out, "database: the handler's transaction was committed");
    /* the payload it saw is jsonb's rendering, as on a host */
    th_expect_text(db.conn, "{\"a\": 2, \"b\": 1}", "SELECT note FROM public.skipq_notes");
    free(out), free(err);
}
