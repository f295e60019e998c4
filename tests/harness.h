/*
 * harness.h -- what every skipq test needs: a fresh migrated database of its
 * own on the throwaway server that scripts/test.sh started, INI files, host
 * processes, and polling with a deadline instead of sleeps; and, for the
 * suites that need them, servers of their own (a private PostgreSQL cluster
 * to restart, pgbouncer in front of a server).
 *
 * Criterion runs each test in its own process, several at once, so each test
 * gets its own database (th_db_new) and nothing is shared between tests.
 * Everything a test starts -- hosts, poolers, clusters, scratch files -- is
 * stopped or removed when its process exits, however it ends.
 *
 * Sections: databases and queries; waiting; files and commands; hosts and
 * the CLI; invariants; servers (harness_servers.c).
 */
#ifndef SKIPQ_TEST_HARNESS_H
#define SKIPQ_TEST_HARNESS_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- databases and queries ---------------------------------------------------------------- */

struct th_db {
    char name[64];
    char conninfo[512]; /* for this test's database */
    PGconn *conn;       /* an open connection to it */
};

/* Admin conninfo from $SKIPQ_TEST_DB (fails the test if unset). */
const char *th_admin_conninfo(void);
/* Create and migrate a database for this test; registers cleanup at exit. */
void th_db_new(struct th_db *db);
/* Open another connection to the test database. */
PGconn *th_connect(const struct th_db *db);

/* Run a query; fails the test on error. Result must be PQclear'ed. */
PGresult *th_query(PGconn *conn, const char *sql);
/* First column of the first row as an integer; fails the test on error. */
long long th_scalar(PGconn *conn, const char *sql);
/* Like th_scalar with printf-style SQL (test-built SQL only). */
long long th_scalarf(PGconn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void th_execf(PGconn *conn, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The first column of the one row, malloc'd; NULL for SQL NULL. */
char *th_textf(PGconn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Expect the text th_textf gives to be `want` (NULL: SQL NULL). */
void th_expect_text(PGconn *c, const char *want, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Run sql; its SQLSTATE, "" if it worked (static storage). */
const char *th_sqlstate(PGconn *c, const char *sql);
/* A copy of db that connects (and whose hosts connect) as <db>_<suffix>. */
struct th_db th_db_as_role(const struct th_db *db, const char *suffix);

/* Enqueue through the C API; fails the test on error. */
int64_t th_enqueue(PGconn *conn, const char *kind, const char *payload, const char *queue, int priority,
                   int max_attempts);

/* sql/roles.sql, then login roles <db>_w and <db>_w2 (skipq_worker), <db>_e
 * (skipq_enqueuer) and <db>_b (skipq_bulk). */
void th_apply_roles(const struct th_db *db);

/* ---- waiting ------------------------------------------------------------------------------- */

int64_t th_now_ms(void);
/* Poll `sql` until it returns `want` or timeout_ms passes; returns the last value. */
long long th_wait_scalar(PGconn *conn, long long want, int timeout_ms, const char *sql);

/* ---- files and commands -------------------------------------------------------------------- */

/* A unique scratch directory for this test (under $TMPDIR or /tmp). */
const char *th_tmpdir(void);
/* th_tmpdir()/rel, in static storage (eight at a time). */
const char *th_tmp_path(const char *rel);
/* Write a file into th_tmpdir(); returns its path (malloc'd). */
char *th_write_file(const char *name, const char *content);
/* A whole file (malloc'd); fails the test if it cannot be read. */
char *th_read_file(const char *path);
/* A whole file (malloc'd), or "" if it cannot be read (a log not yet written). */
char *th_slurp(const char *path);
/* Run a shell command (printf-style); fails the test unless it exits 0. */
void th_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A job id as text (malloc'd), for CLI arguments. */
char *th_id_text(int64_t id);
/* $SKIPQ_HAMMER_SCALE, a number in (0, 100], or 1: how much bigger the
 * load tests run; th_scaled(base, min) is base times it, at least min. */
double th_scale(void);
int th_scaled(int base, int min);
/* Make the rpath fixtures' directories next to fixtures/rpath/safe: open
 * (world-writable, with a world-writable libsqdep.so) and loose (safe, with
 * a group-writable one); unsets SKIPQ_SQDEP_LOADED. */
void th_rpath_dirs(void);

/* ---- hosts and the CLI --------------------------------------------------------------------- */

/*
 * The [database] section for db plus a [host] section with fast test timings
 * (poll 50ms, lease 3s, heartbeat 500ms, shutdown_grace 5s; poll_interval
 * and shutdown_grace unless host_extra sets them; host_extra may add other
 * [host] keys)
 * and the testkit plugin writing to `ledger` (may be NULL). `extra` is
 * appended verbatim (queues, kinds, other plugins). Returns the INI path.
 */
char *th_host_ini(const struct th_db *db, const char *name, const char *host_extra, const char *ledger,
                  const char *extra);

/*
 * Start `skipq run -c ini` with stderr+stdout to <ini>.log. Hosts never
 * outlive the test: any still running at exit are killed, and each dies with
 * the test process (a Criterion timeout kills it with SIGKILL, which runs no
 * exit handler).
 */
pid_t th_host_start(const char *ini);
/* Exit status of a host that has exited (not reaped), else -1. */
int th_host_exited(pid_t pid);
/* The host's log so far (malloc'd). */
char *th_host_log(const char *ini);
/* Poll the host's log until it holds needle or timeout_ms passes; whether it does. */
bool th_wait_log(const char *ini, const char *needle, int timeout_ms);
/* SIGTERM the host and wait up to timeout_ms for it; returns its exit status
 * (or -1 if it had to be killed). */
int th_host_stop(pid_t pid, int timeout_ms);
/* Wait for a child to exit on its own; returns exit status, -1 on timeout. */
int th_wait_exit(pid_t pid, int timeout_ms);
/* Fail the test if a host log holds a sanitizer report. */
void th_assert_clean_log(const char *ini);

/* A named host process and its INI, for suites that juggle several. */
struct host {
    const char *name;
    char *ini;
    pid_t pid; /* 0 once reaped */
};
void host_start(struct host *h);
/* SIGTERM and wait; the exit status, or -1 if it had to be killed. */
int host_stop(struct host *h, int timeout_ms);
/* Wait for the host to exit on its own; exit status, -1 on timeout. */
int host_wait_exit(struct host *h, int timeout_ms);
int host_exited(const struct host *h);
char *slurp_log(const struct host *h);

/*
 * Poll `sql` every poll_ms until it returns at least `want` or timeout_ms
 * passes; returns the last value. Fails at once, with the log, if one of
 * the nh hosts `hs` exits meanwhile.
 */
long long th_wait_at_least(PGconn *conn, long long want, int timeout_ms, int poll_ms, struct host *const *hs,
                           int nh, const char *sql);

/*
 * Worker isolation for a whole run of a suite: $SKIPQ_TEST_ISOLATION is
 * "thread" (or unset) or "process"; anything else fails the test. In
 * process mode th_host_start gives every [queue NAME] section of the INI
 * `isolation = process` (unless the section sets isolation itself) before
 * the host reads it, so a suite written for thread mode runs unchanged with
 * worker processes: tests/CMakeLists.txt registers hammer, faults and chaos a
 * second time that way (hammer_process, ...). There is no implicit default
 * group to convert: a host without a [queue] section refuses to run.
 */
bool th_process_mode(void);

/* Send sig to a host and to every process it started, descendants first
 * for SIGCONT and last otherwise: freezing (SIGSTOP) a host in process mode
 * freezes its worker processes too, as a paused machine would. SIGKILL
 * stops them all first, so they die as one (a machine lost): no process
 * sees another die and acts on it. */
void th_host_signal_all(pid_t pid, int sig);
/* The processes a host started (its worker processes in process mode) and
 * theirs, children first, into out; how many. */
int th_host_descendants(pid_t pid, pid_t *out, int max);

/*
 * For tests whose handlers crash on purpose: hosts started after this call
 * die of the signal a handler raises (handle_segv=0, so the ASan and TSan
 * runtimes report no "deadly signal" of their own and the process ends by
 * SIGSEGV as in a release build), and skip leak checks at exit (a worker
 * that exit()s from a handler leaves what it held).
 */
void th_child_raw_crashes(void);

/* Run the skipq CLI; returns its exit status. out/err (if not NULL) receive
 * malloc'd stdout and stderr. */
int th_cli(char **out, char **err, const char *arg0, ...);

/* Read a ledger written by the testkit plugin; returns number of lines and
 * fills job_ids (malloc'd) if not NULL. */
size_t th_read_ledger(const char *path, int64_t **job_ids);
/* Poll the ledger until it has n lines (n handlers have started) or
 * timeout_ms passes; whether it has. A claimed job is 'running' a moment
 * before its handler starts, and a SIGTERM in between gives it back
 * unstarted: tests about started handlers wait for this, not for 'running'. */
bool th_wait_ledger(const char *path, size_t n, int timeout_ms);

/* ---- invariants ---------------------------------------------------------------------------- */

/*
 * The invariants every scenario must leave behind:
 *  - no job has two 'done' executions;
 *  - attempts equals the number of execution rows (a 'crashed' one, whose
 *    worker process died under it, counts like any other);
 *  - at most one open ('running') execution per job;
 *  - no job is 'running' with a lease expired more than 5 s ago, and every
 *    running job's current execution is open;
 *  - 'dead' only when attempts ran out (the last execution may then be
 *    'crashed' as well as 'dead'), the last execution says dead (permanent
 *    failure), or a parent (depends_on) ended dead or cancelled before the
 *    job ever ran;
 *  - every 'done' job's current_execution_id is its one 'done' execution;
 *  - an execution that says its job left skipq.jobs (queue set: [kind]
 *    keep_done = off) is done, and its job is gone.
 * Fails the test with the offending job ids.
 */
void th_check_invariants(PGconn *conn);

/* GET http://127.0.0.1:port/path with the curl binary (a real HTTP client):
 * the body (malloc'd) and the HTTP status (0: nothing answered). */
char *th_http_get(int port, const char *path, int *status);

/* ---- servers (harness_servers.c) ----------------------------------------------------------- */

/* A port on 127.0.0.1 that nothing listens on right now. */
int th_free_port(void);

/*
 * A private PostgreSQL 15 cluster (scripts/pg.sh) in /tmp/skipq-TAG-PID, on
 * a free port, for tests that restart or stop the server: never the shared
 * one. It is destroyed when the test process exits. th_cluster_use makes
 * it this process's test server ($SKIPQ_TEST_DB), so th_db_new creates
 * databases there.
 */
struct th_cluster {
    char dir[128];
    int port;
    char conninfo[512]; /* admin conninfo, as pg.sh prints it */
};
void th_cluster_start(struct th_cluster *c, const char *tag);
void th_cluster_use(const struct th_cluster *c);
/* pg.sh restart DIR fast|immediate; fails the test if it fails. */
void th_cluster_restart(const struct th_cluster *c, const char *mode);

/* th_scalar on db->conn, reconnecting (for up to 20 s) while the server
 * restarts. */
long long th_robust_scalar(struct th_db *db, const char *sql);
/* Poll it until it returns want (th_wait_robust) or at least want
 * (th_wait_robust_at_least), or timeout_ms passes; the last value. */
long long th_wait_robust(struct th_db *db, long long want, int timeout_ms, const char *sql);
long long th_wait_robust_at_least(struct th_db *db, long long want, int timeout_ms, const char *sql);

/*
 * pgbouncer 1.18 in front of the test server ($SKIPQ_TEST_DB): pool_mode =
 * transaction, default_pool_size = pool_size, auth_type = trust, listening
 * on 127.0.0.1 at a free port, every database of the server reachable by its
 * name. It runs as a child of the test (as user postgres when the test runs
 * as root, since pgbouncer refuses root) in a directory of its own; at exit
 * it is killed if still running and its directory removed.
 */
struct th_pgbouncer {
    char dir[128]; /* pgbouncer.ini, userlist.txt, pgbouncer.log */
    int port;
    int pool_size;
    pid_t pid; /* 0: not running */
};
void th_pgbouncer_start(struct th_pgbouncer *b, int pool_size);
/* SIGTERM (immediate shutdown) and wait; the files stay. */
void th_pgbouncer_stop(struct th_pgbouncer *b);
/* Start again, on the same port, after th_pgbouncer_stop. */
void th_pgbouncer_restart(struct th_pgbouncer *b);
/* A copy of db whose conninfo (and connection) goes through the pooler. */
void th_pgbouncer_db(const struct th_pgbouncer *b, const struct th_db *db, struct th_db *out);
/* The pooler's log so far (malloc'd). */
char *th_pgbouncer_log(const struct th_pgbouncer *b);

#endif
