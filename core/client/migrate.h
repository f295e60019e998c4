/* migrate.h -- the embedded migrations (generated from sql/ at build time),
 * and skipq_migrate() with its wait for the migration lock made explicit:
 * how long, and who is told that it waits (the CLI's `migrate --wait`,
 * the tests). */
#ifndef SQ_MIGRATE_H
#define SQ_MIGRATE_H

#include <stdint.h>

#include "skipq/skipq.h"

/* How long skipq_migrate() waits for another session's migration lock. */
#define SQ_MIGRATE_WAIT_MS 60000

/* Told once, when migrate starts to wait, who holds the lock (database
 * text inside: print it with sq_fput_text). */
typedef void (*sq_migrate_waiting)(const char *msg, void *arg);

/* skipq_migrate(), waiting at most wait_ms (0: not at all) for the
 * migration lock, and calling waiting (if not NULL) when it starts to. */
skipq_rc sq_migrate(struct pg_conn *conn, int64_t wait_ms, sq_migrate_waiting waiting, void *arg, int *applied_out,
                    char *errbuf, size_t errlen);

struct sq_migration {
    int version;
    const char *name;
    const char *sql;
};

extern const struct sq_migration sq_migrations[];
extern const int sq_migration_count;

#endif
