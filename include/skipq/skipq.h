/*
 * skipq/skipq.h -- the client API of libskipq: enqueue jobs and manage the
 * schema from any C program that already has a libpq connection.
 *
 * Every call takes the caller's PGconn and runs on it, so a job enqueued
 * inside the caller's open transaction exists if and only if that
 * transaction commits. Calls return a skipq_rc; when one fails, `errbuf`
 * (if not NULL) receives a NUL-terminated message naming what was wrong.
 * SKIPQ_ERRBUF_SIZE bytes are always enough.
 *
 * Thread safety: libskipq keeps no global state; use one PGconn per thread.
 *
 * Error codes and message sizes (plugin.h tells the same story):
 * - Each public header has one status enum, numbered from 0 and appended to
 *   only: a value is never renumbered or reused. skipq_rc (SKIPQ_E*, here)
 *   is what libskipq's calls return; skipq_plugin_rc (SKIPQ_PLUGIN_E*, in
 *   plugin.h) is what the host's calls return to a plugin. They are two
 *   enums, not one: 0 is success and 1 a bad argument in both, but past
 *   that a number means one thing in each (SKIPQ_ENOMEM is 3,
 *   SKIPQ_PLUGIN_ENOMEM is 4, as plugins built for ABI 1.0 have it), so
 *   compare a value only with the names of its own enum.
 * - Two sizes, one per direction. SKIPQ_ERRBUF_SIZE (512) is the buffer you
 *   hand skipq for a message it writes: every call's message fits in it, and
 *   a smaller buffer gets the message cut, still NUL-terminated.
 *   SKIPQ_ERROR_SIZE (1024, plugin.h) is the longest message skipq keeps
 *   from you: a handler's error for one attempt, cut beyond it.
 *
 * Binary compatibility: libskipq.so exports only the skipq_* calls of this
 * header and version.h (SKIPQ_API). Its SONAME (libskipq.so.N) changes when
 * a call, or a struct a program fills in (skipq_enqueue_opts), changes in a
 * way a program built against the older header would notice; new fields
 * are appended at the end and come with a new SONAME.
 */
#ifndef SKIPQ_SKIPQ_H
#define SKIPQ_SKIPQ_H

#include <stddef.h>
#include <stdint.h>

#include "skipq/export.h"
#include "skipq/version.h" /* SKIPQ_VERSION, skipq_version() */

#ifdef __cplusplus
extern "C" {
#endif

#define SKIPQ_ERRBUF_SIZE 512

struct pg_conn;

typedef enum skipq_rc {
    SKIPQ_OK = 0,
    SKIPQ_EINVAL = 1,   /* bad argument: the message names it; nothing written */
    SKIPQ_EDB = 2,      /* the database refused or could not be reached */
    SKIPQ_ENOMEM = 3,
    SKIPQ_ESCHEMA = 4,  /* schema missing or older/newer than this library */
    SKIPQ_ENOTFOUND = 5
} skipq_rc;

/* A static, human-readable name for `rc`. */
SKIPQ_API const char *skipq_strerror(skipq_rc rc);

/* Options for skipq_enqueue(). Zero-initialise, then set what you need. */
typedef struct skipq_enqueue_opts {
    const char *queue;   /* NULL: "default" */
    int priority;        /* higher runs first; default 0 */
    int64_t delay_ms;    /* run no earlier than now() + delay; default 0 */
    int max_attempts;    /* 0: the kind's default (skipq.kind_defaults), else 5 */
    /* Scheduling (NULL / 0: not used). */
    const char *unique_key;     /* while a job of this kind with this key is blocked, pending
                                   or running, return its id instead of adding a job */
    int64_t unique_for_ms;      /* with unique_key: the key also holds this long after the
                                   enqueue, even once the job has finished */
    const char *ordering_key;   /* jobs of one queue with the same key run one at a time, in
                                   enqueue order */
    const int64_t *depends_on;  /* parent job ids: the job runs once every parent is done, */
    size_t depends_on_count;    /* and is dead if one ends dead or cancelled */
    int *existing_out;          /* if not NULL: set to 1 when unique_key returned an existing
                                   job's id, 0 when a job was added */
} skipq_enqueue_opts;

/*
 * Enqueue one job of `kind` with JSON `payload` (NULL means "{}"). On success
 * stores the new job id in *id_out (if not NULL): with a unique_key that
 * another job holds, that job's id (and *opts->existing_out = 1). Runs inside
 * whatever transaction `conn` has open. Invalid JSON, an empty kind or queue,
 * max_attempts < 1, a key of more than 256 characters or a parent id that
 * does not exist give SKIPQ_EINVAL and write nothing.
 */
SKIPQ_API skipq_rc skipq_enqueue(struct pg_conn *conn, const char *kind, const char *payload,
                                 const skipq_enqueue_opts *opts, int64_t *id_out, char *errbuf, size_t errbuf_len);

/*
 * Enqueue many jobs in one statement. `jobs_json` is a JSON array of
 * objects: {"kind": "...", "payload": {...}, "queue": "...", "priority": N,
 * "run_at": "timestamp" or "delay_ms": N, "max_attempts": N}; only "kind" is
 * required. The whole batch is checked before anything is written; the
 * message of an SKIPQ_EINVAL names the first bad element (0-based) and why.
 * On success *count_out (if not NULL) receives the number of jobs added.
 */
SKIPQ_API skipq_rc skipq_enqueue_many(struct pg_conn *conn, const char *jobs_json, int64_t *count_out,
                                      char *errbuf, size_t errbuf_len);

/*
 * The bulk path: stream jobs into skipq.jobs with one COPY statement, the
 * fastest way in (no JSON array to build, no PL/pgSQL per job).
 *
 *     skipq_copy *cp;
 *     if (skipq_copy_begin(conn, &cp, err, sizeof err) != SKIPQ_OK) ...
 *     for (...) if (skipq_copy_add(cp, "email.send", json, &opts, err, sizeof err) != SKIPQ_OK) ...
 *     if (skipq_copy_end(cp, &n, err, sizeof err) != SKIPQ_OK) ...   (frees cp)
 *
 * skipq_copy_add() checks each job as skipq_enqueue() would (kind and queue
 * names, priority, max_attempts, a delay of at most 10 years, the payload
 * size limit; unique_key, ordering_key and depends_on need skipq_enqueue())
 * and refuses a bad one with SKIPQ_EINVAL naming it (0-based);
 * the refused job is not added and the others stay. JSON validity is checked
 * by the server: skipq_copy_end() then fails with SKIPQ_EINVAL naming the
 * job, and writes nothing. All jobs commit together, in the caller's
 * transaction if one is open. Delays count from the server's now() at
 * skipq_copy_begin(). Between begin and end the connection is busy with the
 * COPY: run nothing else on it. skipq_copy_abort() cancels and frees.
 * The role needs INSERT on skipq.jobs' columns (sql/roles.sql: skipq_bulk).
 */
typedef struct skipq_copy skipq_copy;
SKIPQ_API skipq_rc skipq_copy_begin(struct pg_conn *conn, skipq_copy **out, char *errbuf, size_t errbuf_len);
SKIPQ_API skipq_rc skipq_copy_add(skipq_copy *cp, const char *kind, const char *payload,
                                  const skipq_enqueue_opts *opts, char *errbuf, size_t errbuf_len);
SKIPQ_API skipq_rc skipq_copy_end(skipq_copy *cp, int64_t *count_out, char *errbuf, size_t errbuf_len);
SKIPQ_API void skipq_copy_abort(skipq_copy *cp);

/*
 * Bring the skipq schema up to date. Idempotent; safe when several hosts run
 * it at once (they serialise on a lock of skipq.schema_migrations, or before
 * the schema exists an advisory lock; one waits at most 60 s for another,
 * then fails with SKIPQ_EDB, naming the holder's pid and role). *applied_out
 * (if not NULL) receives the number of migrations applied by this call.
 * Before changing anything it refuses (SKIPQ_ESCHEMA, the message naming the
 * object and its owner) a schema skipq, or an object in it, owned by a role
 * that is neither the connection's current_user, a role current_user is a
 * member of, nor a superuser; and CREATE on the schema granted to such a
 * role.
 */
SKIPQ_API skipq_rc skipq_migrate(struct pg_conn *conn, int *applied_out, char *errbuf, size_t errbuf_len);

/* The schema version this library needs, and the one in the database (0 if
 * none). */
SKIPQ_API int skipq_schema_version_required(void);
SKIPQ_API skipq_rc skipq_schema_version(struct pg_conn *conn, int *version_out, char *errbuf, size_t errbuf_len);

#ifdef __cplusplus
}
#endif
#endif /* SKIPQ_SKIPQ_H */
