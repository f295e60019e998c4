/*
 * test_hostile_path.c -- no object another role plants in schema public ever
 * runs in a session of skipq's.
 *
 * PostgreSQL resolves an unqualified function, operator or type along the
 * session's search_path and prefers pg_catalog only among equally good
 * matches. A role that may create in public (the database owner on
 * PostgreSQL 15, every role on 14 and older) can therefore plant an exact
 * match such as public.*(bigint, interval) that beats the built-in, and run
 * code as whoever runs skipq -- a superuser, often. skipq answers twice:
 * every direct session starts with search_path = pg_catalog, pg_temp (the
 * startup packet's options, core/common/db.c), and every statement names its
 * built-ins by schema, which is all there is behind a pooler in transaction
 * mode (core/host/queue.c, "SCHEMA-QUALIFIED SQL").
 *
 * The attacker here is a role without superuser that may create in public.
 * Two plantings (the SQL files next to this one say what and why):
 * - "exact": hostile_path_traps.sql, exact-match overloads for every
 *   construct skipq's SQL used to resolve through a cast or a polymorphic
 *   built-in, under the default search_path ("$user", public);
 * - "shadow": those, plus hostile_path_shadow.sql: the attacker owns the
 *   database and sets its search_path to "public, pg_catalog", and public
 *   holds a duplicate of every pg_catalog operator on the types skipq uses,
 *   of every overload of every built-in function skipq calls (the list
 *   below, checked against core/), and domains named like the types skipq
 *   casts to.
 * Each is run directly and behind pgbouncer (pooler = transaction, where
 * nothing is pinned and only the qualified SQL protects). The workload is
 * what a superuser's host and CLI do: a drain with retries and a permanent
 * failure, a transactional handler, dependencies, serial keys, unique keys,
 * limits, aging, cron, retention, lease reaping after kill -9, a reconnect,
 * a shutdown's release, the client library's enqueue and COPY, stats, top,
 * jobs, retry, cancel and migrate. Every trap records its call in
 * public.pwned and public.pwned_calls; both must stay empty.
 *
 * The test's own sessions pin their own search_path (pinned()), so its
 * checks never trip a trap; th_db's own connection is not used once the
 * traps are planted.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/config.h"
#include "common/db.h"
#include "harness.h"
#include "skipq/skipq.h"

#ifndef SKIPQ_SOURCE_DIR
#error "SKIPQ_SOURCE_DIR must be defined"
#endif

/*
 * Every pg_catalog function skipq's SQL in core/ calls by name
 * (pg_catalog.NAME(...)): the shadow planting duplicates every overload of
 * each. The test every_builtin_core_calls_is_named_by_schema_and_shadowed
 * fails, naming it, when core/ calls one that is missing here.
 */
static const char *const CALLED_FUNCTIONS[] = {
    "aclexplode", "array_to_json", "array_to_string", "cardinality", "ceil", "clock_timestamp", "count",
    "current_database", "current_setting",
    "date_part", "date_trunc", "floor", "format", "has_function_privilege", "has_table_privilege", "jsonb_pretty",
    "jsonb_typeof", "left", "length", "lower", "max", "min", "now", "octet_length", "percentile_cont",
    "pg_backend_pid", "pg_describe_object", "pg_get_userbyid", "pg_is_in_recovery", "pg_terminate_backend",
    "pg_try_advisory_xact_lock", "regexp_replace", "round", "row_number", "set_config", "split_part", "strpos", "sum",
    "to_char", "to_jsonb", "to_regclass", "to_regnamespace", "to_timestamp", "unnest",
};
#define NCALLED (sizeof CALLED_FUNCTIONS / sizeof CALLED_FUNCTIONS[0])

/* ---- sessions ----------------------------------------------------------------------- */

/* A session of the test's own, pinned as skipq pins its sessions. */
static PGconn *pinned(const char *conninfo)
{
    char ci[900];
    snprintf(ci, sizeof ci, "%s options='-c search_path=pg_catalog,pg_temp'", conninfo);
    PGconn *c = PQconnectdb(ci);
    cr_assert_eq(PQstatus(c), CONNECTION_OK, "connect %s: %s", ci, PQerrorMessage(c));
    PQclear(PQexec(c, "SET client_min_messages = warning"));
    return c;
}

static char *slurp_file(const char *path)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "cannot read %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    char *s = malloc((size_t)n + 1);
    cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

static void exec_file(PGconn *c, const char *name)
{
    char path[600];
    snprintf(path, sizeof path, "%s/tests/%s", SKIPQ_SOURCE_DIR, name);
    char *sql = slurp_file(path);
    PGresult *r = PQexec(c, sql);
    cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", name,
              PQerrorMessage(c));
    PQclear(r);
    free(sql);
}

/* ---- the attacker ------------------------------------------------------------------- */

/* Roles are cluster-wide: the attacker is named after the test's database,
 * and goes (with the database it may own) when the test process exits. */
static char attacker[96], attacked_db[64];

static void drop_attacker(void)
{
    char ci[700], sql[400];
    snprintf(ci, sizeof ci, "%s dbname=%s options='-c search_path=pg_catalog,pg_temp'", th_admin_conninfo(),
             attacked_db);
    PGconn *c = PQconnectdb(ci);
    if (PQstatus(c) == CONNECTION_OK) {
        snprintf(sql, sizeof sql, "ALTER DATABASE %s OWNER TO CURRENT_USER; DROP OWNED BY %s; DROP ROLE %s",
                 attacked_db, attacker, attacker);
        PQclear(PQexec(c, sql));
    }
    PQfinish(c);
}

enum planting { EXACT, SHADOW };

static void plant(const struct th_db *db, PGconn *chk, enum planting what)
{
    snprintf(attacker, sizeof attacker, "%s_m", db->name);
    snprintf(attacked_db, sizeof attacked_db, "%s", db->name);
    atexit(drop_attacker);
    th_execf(chk, "CREATE ROLE %s NOLOGIN; GRANT CREATE ON SCHEMA public TO %s", attacker, attacker);
    if (what == SHADOW)
        th_execf(chk, "ALTER DATABASE %s OWNER TO %s", db->name, attacker);
    th_execf(chk, "SET ROLE %s", attacker);
    cr_assert_eq(th_scalar(chk, "SELECT rolsuper::int FROM pg_roles WHERE rolname = current_user"), 0);
    exec_file(chk, "hostile_path_traps.sql");
    if (what == SHADOW) {
        char list[1024] = "";
        for (size_t i = 0; i < NCALLED; i++)
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "," : "", CALLED_FUNCTIONS[i]);
        th_execf(chk, "SELECT set_config('hostile.functions', '%s', false)", list);
        exec_file(chk, "hostile_path_shadow.sql");
        th_execf(chk, "ALTER DATABASE %s SET search_path = public, pg_catalog", db->name);
        cr_assert_gt(th_scalar(chk, "SELECT count(*) FROM public.shadowed WHERE planted AND what LIKE 'operator %'"),
                     250, "too few operators duplicated");
    }
    th_execf(chk, "RESET ROLE");
}

/* Nothing planted ran: no row in public.pwned, the sequence never used. */
static void expect_untouched(PGconn *chk)
{
    PGresult *r = th_query(chk, "SELECT count(*), coalesce(string_agg(DISTINCT what || ' as ' || who, '; '), '')"
                                "  FROM public.pwned");
    long long n = strtoll(PQgetvalue(r, 0, 0), NULL, 10);
    cr_expect_eq(n, 0, "hostile objects ran %lld time(s): %s", n, PQgetvalue(r, 0, 1));
    PQclear(r);
    cr_expect_eq(th_scalar(chk, "SELECT is_called::int FROM public.pwned_calls"), 0,
                 "a hostile object ran in a transaction that rolled back");
}

/* ---- the workload ------------------------------------------------------------------- */

struct env {
    struct th_db db;
    struct th_db via; /* through pgbouncer when pooled */
    struct th_pgbouncer pgb;
    bool pooled;
    PGconn *chk;      /* the test's own, pinned */
    char db_section[1400];
    char *cli_ini; /* [database] as the hosts have it */
    const char *session_path; /* what a worker's session has */
    char ledger[400];
};

static void env_start(struct env *e, enum planting what, bool pooled)
{
    memset(e, 0, sizeof *e);
    e->pooled = pooled;
    th_db_new(&e->db);
    e->chk = pinned(e->db.conninfo);
    /* Before the pooler opens any server session: each must see what the
     * attacker set on the database. */
    plant(&e->db, e->chk, what);
    /* The notes the transactional handler writes record the search_path of
     * the session they were written in: the worker's. */
    th_execf(e->chk, "CREATE TABLE public.skipq_notes (job_id bigint, execution_id bigint, note text);"
                     "CREATE FUNCTION public.note_session_path() RETURNS trigger LANGUAGE plpgsql AS"
                     " $$BEGIN NEW.note := pg_catalog.current_setting('search_path'); RETURN NEW; END$$;"
                     "CREATE TRIGGER note_session_path BEFORE INSERT ON public.skipq_notes"
                     " FOR EACH ROW EXECUTE FUNCTION public.note_session_path()");
    e->session_path = pooled ? (what == SHADOW ? "public, pg_catalog" : "\"$user\", public") : "pg_catalog,pg_temp";
    if (pooled) {
        th_pgbouncer_start(&e->pgb, 4);
        th_pgbouncer_db(&e->pgb, &e->db, &e->via);
        snprintf(e->db_section, sizeof e->db_section,
                 "[database]\nurl = %s\npooler = transaction\nlisten_conninfo = %s\n", e->via.conninfo,
                 e->db.conninfo);
    } else {
        snprintf(e->db_section, sizeof e->db_section, "[database]\nurl = %s\n", e->db.conninfo);
    }
    e->cli_ini = th_write_file("cli.ini", e->db_section);
    snprintf(e->ledger, sizeof e->ledger, "%s/ledger", th_tmpdir());
}

/* An application's session: whatever search_path the database gives.
 * After server sessions were cut, pgbouncer fails the first statement on
 * each dead one it still holds: try until one works. */
static PGconn *app_session(const struct env *e)
{
    for (int tries = 0;; tries++) {
        PGconn *c = PQconnectdb(e->pooled ? e->via.conninfo : e->db.conninfo);
        cr_assert_eq(PQstatus(c), CONNECTION_OK, "%s", PQerrorMessage(c));
        PGresult *r = PQexec(c, "SELECT 1");
        bool ok = PQresultStatus(r) == PGRES_TUPLES_OK;
        PQclear(r);
        if (ok)
            return c;
        cr_assert_lt(tries, 20, "no working session: %s", PQerrorMessage(c));
        PQfinish(c);
        usleep(100000);
    }
}

static char *host_ini(const struct env *e, const char *name, const char *sections)
{
    char *buf = malloc(16384);
    int n = snprintf(buf, 16384,
                     "%s\n[host]\nname = %s\nlease = 2s\nheartbeat = 500ms\npoll_interval = 50ms\n"
                     "shutdown_grace = 1s\nlog_level = info\n\n"
                     "[plugin testkit]\npath = %s/testkit.so\nledger = %s\n\n"
                     "[plugin notes]\npath = %s/txn_note.so\ntable = public.skipq_notes\n\n%s",
                     e->db_section, name, SKIPQ_PLUGIN_DIR, e->ledger, SKIPQ_PLUGIN_DIR, sections);
    cr_assert_lt(n, 16384);
    char file[128];
    snprintf(file, sizeof file, "%s.ini", name);
    char *path = th_write_file(file, buf);
    free(buf);
    return path;
}

static int64_t enqueue(PGconn *app, const char *kind, const char *payload, const skipq_enqueue_opts *o)
{
    char err[SKIPQ_ERRBUF_SIZE];
    int64_t id = 0;
    cr_assert_eq(skipq_enqueue(app, kind, payload, o, &id, err, sizeof err), SKIPQ_OK, "enqueue: %s", err);
    return id;
}

/* The CLI as an operator runs it, with the host's [database]. */
#define CLI(e, out, ...) cli_run((e), (out), __VA_ARGS__, "-c", (e)->cli_ini, (const char *)NULL)
static int cli_run(const struct env *e, char **out, ...)
{
    (void)e;
    const char *a[12] = {0};
    va_list ap;
    va_start(ap, out);
    for (int i = 0; i < 11 && (a[i] = va_arg(ap, const char *)) != NULL; i++)
        ;
    va_end(ap);
    char *err = NULL;
    int st = th_cli(out, &err, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], (const char *)NULL);
    cr_expect_eq(st, 0, "skipq %s %s: exit %d: %s", a[0], a[1] ? a[1] : "", st, err);
    free(err);
    return st;
}

/* What ran of the planted objects, for failure messages. */
static const char *pwned_summary(PGconn *chk)
{
    static char text[2048];
    PGresult *r = th_query(chk, "SELECT count(*) || ' call(s): ' || coalesce(string_agg(DISTINCT what || ' as ' || who,"
                                " '; '), '') FROM public.pwned");
    snprintf(text, sizeof text, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    return text;
}

static long long wait_for(PGconn *chk, long long want, int timeout_ms, struct host *h, const char *sql)
{
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        long long v = th_scalar(chk, sql);
        if (v == want)
            return v;
        if (th_now_ms() > end) {
            cr_log_error("gave up waiting for %s; planted objects ran %s", sql, pwned_summary(chk));
            return v;
        }
        if (h && h->pid && host_exited(h) >= 0) {
            char *log = slurp_log(h);
            cr_assert_fail("host %s exited while waiting for %s (planted objects ran %s):\n%s", h->name, sql,
                           pwned_summary(chk), log);
        }
        usleep(50000);
    }
}

/* Phase 1: a host dies by SIGKILL holding a job; returns that job's id. */
static int64_t orphan_a_job(struct env *e, PGconn *app)
{
    struct host b = {.name = "victim"};
    b.ini = host_ini(e, b.name, "[queue slow]\nthreads = 1\nkinds = test\n");
    host_start(&b);
    skipq_enqueue_opts slow = {.queue = "slow"};
    int64_t id = enqueue(app, "test", "{\"sleep_ms\": 1500}", &slow);
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'running'", (long long)id);
    cr_assert_eq(wait_for(e->chk, 1, 30000, &b, sql), 1, "the victim host never ran the job");
    kill(b.pid, SIGKILL);
    host_wait_exit(&b, 10000);
    return id;
}

struct jobs {
    int64_t orphan, retry, permanent, delayed, parent, child, unique, unique_again;
    int plain; /* kind test, queue default: done on the first attempt */
};

/* Phase 2: everything the client library does, on an application's session. */
static void enqueue_all(PGconn *app, struct jobs *j)
{
    for (int i = 0; i < 20; i++)
        enqueue(app, "test", "{}", NULL);
    j->plain = 20;
    skipq_enqueue_opts fast = {.max_attempts = 5};
    j->retry = enqueue(app, "test", "{\"fail_times\": 2, \"retry_in_ms\": 50}", &fast);
    j->permanent = enqueue(app, "test", "{\"permanent\": \"refused\"}", NULL);
    skipq_enqueue_opts notes = {.queue = "notes"};
    enqueue(app, "note.write", "{\"note\": \"one\"}", &notes);
    enqueue(app, "note.write", "{\"note\": \"two\"}", &notes);
    skipq_enqueue_opts later = {.delay_ms = 3600 * 1000};
    j->delayed = enqueue(app, "test", "{}", &later);
    j->parent = enqueue(app, "test", "{\"sleep_ms\": 100}", NULL);
    int64_t parents[1] = {j->parent};
    skipq_enqueue_opts dep = {.depends_on = parents, .depends_on_count = 1, .priority = 3};
    j->child = enqueue(app, "test", "{}", &dep);
    skipq_enqueue_opts serial = {.ordering_key = "serial"};
    enqueue(app, "test", "{}", &serial);
    enqueue(app, "test", "{}", &serial);
    skipq_enqueue_opts uniq = {.unique_key = "only-once", .unique_for_ms = 3600 * 1000};
    j->unique = enqueue(app, "test", "{}", &uniq);
    j->unique_again = enqueue(app, "test", "{}", &uniq);
    j->plain += 5; /* parent, child, two serial, one unique */
    char err[SKIPQ_ERRBUF_SIZE];
    int64_t n = 0;
    cr_assert_eq(skipq_enqueue_many(app, "[{\"kind\": \"test\"}, {\"kind\": \"test\", \"priority\": 2}]", &n, err,
                                    sizeof err),
                 SKIPQ_OK, "%s", err);
    cr_assert_eq(n, 2);
    skipq_copy *cp = NULL;
    cr_assert_eq(skipq_copy_begin(app, &cp, err, sizeof err), SKIPQ_OK, "%s", err);
    for (int i = 0; i < 10; i++)
        cr_assert_eq(skipq_copy_add(cp, "test", "{\"copied\": true}", NULL, err, sizeof err), SKIPQ_OK, "%s", err);
    cr_assert_eq(skipq_copy_end(cp, &n, err, sizeof err), SKIPQ_OK, "%s", err);
    cr_assert_eq(n, 10);
    j->plain += 12;
}

static const char HOST_SECTIONS[] =
    "[queue default]\nthreads = 2\nkinds = test\nbatch = 4\npriority_aging = 100ms\n\n"
    "[queue notes]\nthreads = 1\nkinds = note.write\n\n"
    "[queue slow]\nthreads = 1\nkinds = test\n\n"
    "[kind note.write]\nmax_running = 2\n\n"
    "[retention]\ndone = 1h\ninterval = 200ms\n\n"
    "[cron tick]\nschedule = * * * * *\nkind = test\npayload = {\"from\": \"cron\"}\n\n";

/* Jobs still to run (the one delayed by an hour aside). */
#define OPEN_SQL \
    "SELECT count(*) FROM skipq.jobs WHERE status IN ('blocked', 'pending', 'running')" \
    " AND run_at <= now() + interval '1 minute'"

static void cli_checks(struct env *e, struct jobs *j, struct host *h)
{
    char *out = NULL, id[24];
    CLI(e, &out, "stats");
    cr_expect_not_null(strstr(out, "default"), "stats:\n%s", out);
    free(out);
    CLI(e, &out, "stats", "--json");
    cr_expect_not_null(strstr(out, "\"hosts\":[{"), "stats --json:\n%s", out);
    free(out);
    CLI(e, &out, "top", "--iterations", "1");
    free(out);
    CLI(e, &out, "top", "--iterations", "1", "--json");
    free(out);
    CLI(e, &out, "jobs", "list");
    free(out);
    CLI(e, &out, "jobs", "list", "--status", "dead", "--json");
    cr_expect_not_null(strstr(out, "refused"), "jobs list --status dead:\n%s", out);
    free(out);
    snprintf(id, sizeof id, "%lld", (long long)j->retry);
    CLI(e, &out, "jobs", "show", id);
    free(out);
    CLI(e, &out, "jobs", "show", id, "--json");
    free(out);
    CLI(e, &out, "cron");
    free(out);
    CLI(e, &out, "limits");
    cr_expect_not_null(strstr(out, "note.write"), "limits:\n%s", out);
    free(out);
    snprintf(id, sizeof id, "%lld", (long long)j->delayed);
    CLI(e, &out, "cancel", id);
    free(out);
    cr_expect_eq(th_scalarf(e->chk, "SELECT count(*) FROM skipq.jobs WHERE id = %s AND status = 'cancelled'", id), 1);
    CLI(e, &out, "retry", id);
    free(out);
    CLI(e, &out, "retry", "--dead");
    cr_expect_eq(atoi(out), 1, "retry --dead: %s", out);
    free(out);
    CLI(e, &out, "enqueue", "test", "{\"from\": \"cli\"}");
    free(out);
    char *file = th_write_file("jobs.jsonl", "{\"kind\": \"test\"}\n{\"kind\": \"test\", \"payload\": {\"n\": 2}}\n");
    CLI(e, &out, "enqueue", "--file", file);
    free(out);
    free(file);
    j->plain += 4; /* the cancelled-then-retried job, and three from the CLI */
    CLI(e, &out, "migrate");
    cr_expect_not_null(strstr(out, "(0 migrations applied)"), "migrate:\n%s", out);
    free(out);
    cr_expect_eq(wait_for(e->chk, 0, 30000, h, OPEN_SQL), 0, "jobs left after the CLI's");
}

/* Every session of the host dies; the threads reconnect, recover, go on. */
static void cut_every_session(struct env *e, struct jobs *j, struct host *h)
{
    th_execf(e->chk, "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
                     " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                     "   AND backend_type = 'client backend'");
    PGconn *app = app_session(e);
    for (int i = 0; i < 5; i++)
        enqueue(app, "test", "{\"after\": \"reconnect\"}", NULL);
    PQfinish(app);
    j->plain += 5;
    cr_expect_eq(wait_for(e->chk, 0, 60000, h, OPEN_SQL), 0, "jobs left after the sessions were cut");
}

/* SIGTERM with a job that ignores the stop request: released at once. */
static void release_at_shutdown(struct env *e, struct host *h)
{
    PGconn *app = app_session(e);
    skipq_enqueue_opts slow = {.queue = "slow"};
    int64_t id = enqueue(app, "test", "{\"sleep_ms\": 20000, \"ignore_stop\": true}", &slow);
    PQfinish(app);
    char sql[200];
    snprintf(sql, sizeof sql, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'running'", (long long)id);
    cr_assert_eq(wait_for(e->chk, 1, 30000, h, sql), 1);
    cr_expect_eq(host_stop(h, 15000), 0);
    cr_expect_eq(th_scalarf(e->chk,
                            "SELECT count(*) FROM skipq.jobs j JOIN skipq.job_executions x ON x.job_id = j.id"
                            " WHERE j.id = %lld AND j.status = 'pending' AND x.status = 'interrupted'",
                            (long long)id),
                 1, "the long job was not released at shutdown");
}

static void check_outcomes(struct env *e, const struct jobs *j)
{
    PGconn *c = e->chk;
    cr_expect_eq(th_scalarf(c, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'done' AND attempts = 2",
                            (long long)j->orphan),
                 1, "the orphaned job was not reaped and done");
    cr_expect_eq(th_scalarf(c, "SELECT count(*) FROM skipq.job_executions WHERE job_id = %lld AND status = 'lost'",
                            (long long)j->orphan),
                 1);
    cr_expect_eq(th_scalarf(c, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'done' AND attempts = 3",
                            (long long)j->retry),
                 1, "the retried job");
    cr_expect_eq(th_scalarf(c, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'dead' AND attempts = 2",
                            (long long)j->permanent),
                 1, "the permanent failure, retried once by `retry --dead`");
    cr_expect_eq(th_scalarf(c, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'done'"
                               " AND finished_at > (SELECT finished_at FROM skipq.jobs WHERE id = %lld)",
                            (long long)j->child, (long long)j->parent),
                 1, "the child ran after its parent");
    cr_expect_eq(j->unique_again, j->unique, "a unique key gave a second job");
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM public.skipq_notes"), 2, "the transactional notes");
    /* Direct: pinned from the start. Behind the pooler: nothing set, so
     * only the qualified SQL kept the traps out. */
    cr_expect_eq(th_scalarf(c, "SELECT count(*) FROM public.skipq_notes WHERE note = '%s'", e->session_path), 2,
                 "the worker's session did not have search_path %s", e->session_path);
    /* One tick, or two when the test ran across a minute's end. */
    long long ticks = th_scalar(c, "SELECT count(*) FROM skipq.jobs WHERE payload @> '{\"from\": \"cron\"}'"
                                   " AND status = 'done'");
    cr_expect(ticks == 1 || ticks == 2, "%lld cron ticks done", ticks);
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs WHERE queue = 'old'"), 0, "retention");
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.jobs WHERE status = 'done' AND attempts = 1"
                              " AND kind = 'test' AND queue = 'default'"),
                 (long long)j->plain + ticks, "plain jobs done on their first attempt");
    int64_t *ids = NULL;
    size_t n = th_read_ledger(e->ledger, &ids);
    PGresult *r = th_query(c, "SELECT id FROM skipq.jobs WHERE status = 'done' AND attempts = 1 AND kind = 'test'");
    for (int i = 0; i < PQntuples(r); i++) {
        int64_t id = strtoll(PQgetvalue(r, i, 0), NULL, 10);
        int seen = 0;
        for (size_t k = 0; k < n; k++)
            seen += ids[k] == id;
        cr_expect_eq(seen, 1, "job %lld ran %d times", (long long)id, seen);
    }
    PQclear(r);
    free(ids);
    th_check_invariants(c);
}

static void run_workload(struct env *e)
{
    PGconn *c = e->chk;
    /* A missed cron tick, and finished jobs old enough for retention. */
    th_execf(c, "INSERT INTO skipq.cron_state (name, schedule, timezone, last_tick)"
                " VALUES ('tick', '* * * * *', 'UTC', date_trunc('minute', now()) - interval '5 minutes')");
    th_execf(c, "INSERT INTO skipq.jobs (queue, kind, status, created_at, run_at, finished_at)"
                " SELECT 'old', 'test', 'done', now() - interval '3 hours', now() - interval '3 hours',"
                "        now() - interval '3 hours' FROM generate_series(1, 5)");
    struct jobs j = {0};
    PGconn *app = app_session(e);
    j.orphan = orphan_a_job(e, app);

    char sections[2048];
    snprintf(sections, sizeof sections, "%s[metrics]\nlisten = 127.0.0.1:%d\n", HOST_SECTIONS, th_free_port());
    struct host h = {.name = "host"};
    h.ini = host_ini(e, h.name, sections);
    host_start(&h);
    enqueue_all(app, &j);
    PQfinish(app);
    cr_assert_eq(wait_for(c, 0, 60000, &h, OPEN_SQL), 0, "the queue did not drain");
    cr_expect_eq(wait_for(c, 0, 30000, &h, "SELECT count(*) FROM skipq.jobs WHERE queue = 'old'"), 0,
                 "retention did not delete the old jobs");
    cli_checks(e, &j, &h);
    cut_every_session(e, &j, &h);
    check_outcomes(e, &j);
    release_at_shutdown(e, &h);
    th_assert_clean_log(h.ini);
    expect_untouched(c);
}

static void env_stop(struct env *e)
{
    if (e->pooled) {
        PQfinish(e->via.conn);
        th_pgbouncer_stop(&e->pgb);
    }
    PQfinish(e->chk);
}

Test(hostile_path, exact_overloads_in_public_never_run_in_direct_sessions, .timeout = 180)
{
    struct env e;
    env_start(&e, EXACT, false);
    run_workload(&e);
    env_stop(&e);
}

Test(hostile_path, exact_overloads_in_public_never_run_behind_pgbouncer, .timeout = 180)
{
    struct env e;
    env_start(&e, EXACT, true);
    run_workload(&e);
    env_stop(&e);
}

Test(hostile_path, a_shadowed_catalog_never_runs_in_pinned_direct_sessions, .timeout = 180)
{
    struct env e;
    env_start(&e, SHADOW, false);
    run_workload(&e);
    env_stop(&e);
}

Test(hostile_path, a_shadowed_catalog_never_runs_behind_pgbouncer, .timeout = 180)
{
    struct env e;
    env_start(&e, SHADOW, true);
    run_workload(&e);
    env_stop(&e);
}

/* ---- the pin itself ---------------------------------------------------------------- */

static const char *show(PGconn *c, const char *setting)
{
    static char v[256];
    char sql[128];
    snprintf(sql, sizeof sql, "SELECT pg_catalog.current_setting('%s')", setting);
    PGresult *r = th_query(c, sql);
    snprintf(v, sizeof v, "%s", PQgetvalue(r, 0, 0));
    PQclear(r);
    return v;
}

/* Connect as skipq would with cfg and flag; check the session's settings. */
static void expect_session(const struct sq_config *cfg, const char *flag, bool pinned_want, const char *path_want,
                           const char *timeout_want)
{
    struct sq_dbparams p;
    char err[512];
    cr_assert(sq_dbparams_build(&p, cfg, flag, "hostile-path"));
    cr_expect_eq(sq_dbparams_pinned(&p), pinned_want);
    PGconn *c = sq_db_connect(&p, err, sizeof err);
    cr_assert_not_null(c, "connect: %s", err);
    char path[256];
    snprintf(path, sizeof path, "%s", show(c, "search_path"));
    cr_expect_str_eq(path, path_want, "search_path %s (flag %s)", path, flag ? flag : "-");
    const char *timeout = show(c, "statement_timeout");
    cr_expect_str_eq(timeout, timeout_want, "statement_timeout %s: the user's options lost (flag %s)", timeout,
                     flag ? flag : "-");
    PQfinish(c);
    sq_dbparams_free(&p);
}

static struct sq_config *load_ini(const char *name, const char *text)
{
    char *path = th_write_file(name, text), err[1024];
    struct sq_config *cfg = sq_config_load(path, err, sizeof err);
    cr_assert_not_null(cfg, "%s", err);
    free(path);
    return cfg;
}

Test(hostile_path, sessions_start_pinned_and_keep_the_users_options, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    /* Neither the database's nor the role's settings can move it. */
    th_execf(db.conn, "ALTER DATABASE %s SET search_path = public, pg_catalog", db.name);
    char flag[1200], ini[2600];

    /* A conninfo: the user's options stay, their search_path loses. */
    snprintf(flag, sizeof flag, "%s options='-c statement_timeout=4321 -c search_path=public'", db.conninfo);
    expect_session(NULL, flag, true, "pg_catalog,pg_temp", "4321ms");

    /* A URI, options percent-encoded in it. */
    PQconninfoOption *o = PQconninfoParse(db.conninfo, NULL);
    const char *host = "", *port = "", *user = "";
    for (PQconninfoOption *k = o; k->keyword; k++) {
        if (k->val && strcmp(k->keyword, "host") == 0)
            host = k->val;
        if (k->val && strcmp(k->keyword, "port") == 0)
            port = k->val;
        if (k->val && strcmp(k->keyword, "user") == 0)
            user = k->val;
    }
    snprintf(flag, sizeof flag, "postgresql:///%s?host=%s&port=%s&user=%s&options=-c%%20statement_timeout%%3D4322",
             db.name, host, port, user);
    PQconninfoFree(o);
    expect_session(NULL, flag, true, "pg_catalog,pg_temp", "4322ms");

    /* The INI: options after a url that has its own wins, as in libpq. */
    snprintf(ini, sizeof ini, "[database]\nurl = %s options='-c statement_timeout=1111'\noptions = -c statement_timeout=2222\n",
             db.conninfo);
    struct sq_config *cfg = load_ini("options.ini", ini);
    expect_session(cfg, NULL, true, "pg_catalog,pg_temp", "2222ms");
    sq_config_free(cfg);

    /* $PGOPTIONS, when nothing else sets options. */
    setenv("PGOPTIONS", "-c statement_timeout=3333", 1);
    expect_session(NULL, db.conninfo, true, "pg_catalog,pg_temp", "3333ms");
    unsetenv("PGOPTIONS");

    /* pooler = transaction: nothing is sent, nothing is set. */
    snprintf(ini, sizeof ini, "[database]\nurl = %s\npooler = transaction\n", db.conninfo);
    cfg = load_ini("pooled.ini", ini);
    expect_session(cfg, NULL, false, "public, pg_catalog", "0");
    sq_config_free(cfg);
}

/*
 * A pooler that refuses `options` ("unsupported startup parameter", as
 * pgbouncer does unless told to ignore it) with pooler = none: skipq
 * connects without it, says so once per process, and works -- its
 * statements are safe unpinned. (Here the pooler is in transaction mode, so
 * a host's prepared statements collide, as test_pooler shows; the CLI keeps
 * none.)
 */
Test(hostile_path, a_pooler_that_refuses_options_gets_unpinned_sessions_and_says_so, .timeout = 120)
{
    struct th_db db, via;
    th_db_new(&db);
    struct th_pgbouncer pgb;
    th_pgbouncer_start(&pgb, 4);
    th_pgbouncer_db(&pgb, &db, &via);
    th_execf(db.conn, "SELECT skipq.enqueue('test', '{}')");
    char *out = NULL, *err = NULL;
    cr_expect_eq(th_cli(&out, &err, "stats", "--db", via.conninfo, NULL), 0, "stats: %s", err);
    cr_expect_not_null(strstr(out, "default"), "%s", out);
    const char *note = "refused the startup parameter options";
    const char *first = strstr(err, note);
    cr_expect(first && !strstr(first + 1, note), "want the note once on stderr:\n%s", err);
    free(out);
    free(err);

    char ini_text[1200];
    snprintf(ini_text, sizeof ini_text,
             "[database]\nurl = %s\n\n[host]\nname = refused\nheartbeat = 500ms\nlease = 3s\n\n"
             "[plugin testkit]\npath = %s/testkit.so\n\n[queue default]\nthreads = 1\n",
             via.conninfo, SKIPQ_PLUGIN_DIR);
    char *ini = th_write_file("refused.ini", ini_text);
    pid_t pid = th_host_start(ini);
    int64_t end = th_now_ms() + 20000;
    char *log = th_host_log(ini);
    while (!strstr(log, "started as") && th_now_ms() < end) {
        free(log);
        usleep(50000);
        log = th_host_log(ini);
    }
    th_host_stop(pid, 15000);
    free(log);
    log = th_host_log(ini);
    first = strstr(log, note);
    cr_expect(first && !strstr(first + 1, note), "want the note once in the host's log:\n%s", log);
    free(log);
    PQfinish(via.conn);
    th_pgbouncer_stop(&pgb);
}

/* ---- the functions of schema skipq -------------------------------------------------- */

#define UNPINNED_SQL                                                                                        \
    "SELECT count(*), coalesce(string_agg(p.oid::regprocedure::text, ', '), '') FROM pg_proc p"             \
    " WHERE p.pronamespace = 'skipq'::regnamespace"                                                          \
    "   AND NOT ('search_path=pg_catalog, pg_temp' = ANY (coalesce(p.proconfig, '{}')))"

Test(hostile_path, every_function_in_schema_skipq_pins_its_search_path, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    cr_assert_gt(th_scalar(db.conn, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'skipq'::regnamespace"), 5);
    PGresult *r = th_query(db.conn, UNPINNED_SQL);
    cr_expect_str_eq(PQgetvalue(r, 0, 0), "0",
                     "functions in schema skipq without SET search_path = pg_catalog, pg_temp: %s",
                     PQgetvalue(r, 0, 1));
    PQclear(r);
    /* The check names one that does not. */
    th_execf(db.conn, "CREATE FUNCTION skipq.unpinned_probe() RETURNS int LANGUAGE sql AS 'SELECT 1'");
    r = th_query(db.conn, UNPINNED_SQL);
    cr_expect_str_eq(PQgetvalue(r, 0, 1), "skipq.unpinned_probe()");
    PQclear(r);
}

/* ---- the SQL in core/ --------------------------------------------------------------- */

struct lint {
    const char *file;
    char **procs; /* pg_catalog's function names, sorted */
    int nprocs;
    char problems[8192];
    size_t used;
    bool called_seen[NCALLED];
    bool coverage; /* check pg_catalog.NAME( against CALLED_FUNCTIONS */
};

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void problem(struct lint *l, int line, const char *fmt, const char *what)
{
    if (l->used + 200 >= sizeof l->problems)
        return;
    l->used += (size_t)snprintf(l->problems + l->used, sizeof l->problems - l->used, "\n  %s:%d: ", l->file, line);
    l->used += (size_t)snprintf(l->problems + l->used, sizeof l->problems - l->used, fmt, what);
}

static bool is_ident(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* One string literal's text (escapes left in: they never touch a name). */
static void lint_literal(struct lint *l, const char *s, size_t n, int line)
{
    static const char *const syntax[] = {"extract", "position", "substring", "overlay", "trim"};
    static const char *const hiding[] = {" IN (", "DISTINCT FROM", " BETWEEN ", "NULLIF(", " LIKE ", "USING (",
                                         "NATURAL "};
    char lit[4096];
    snprintf(lit, sizeof lit, "%.*s", (int)(n < sizeof lit ? n : sizeof lit - 1), s);
    for (size_t i = 0; lit[i]; i++) {
        if (!is_ident(lit[i]) || (i > 0 && is_ident(lit[i - 1])))
            continue;
        size_t e = i;
        while (is_ident(lit[e]))
            e++;
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)(e - i), lit + i);
        if (i >= 2 && lit[i - 1] == ':' && lit[i - 2] == ':' && strncmp(lit + i, "pg_catalog.", 11) != 0 &&
            strncmp(lit + i, "skipq.", 6) != 0)
            problem(l, line, "a cast to %s not named by schema", name);
        if (lit[e] != '(' || strncmp(lit + e, "(s)", 3) == 0) /* "host(s)" in a message */
            continue;
        bool qualified = i >= 11 && strncmp(lit + i - 11, "pg_catalog.", 11) == 0;
        if (qualified && l->coverage) {
            bool listed = false;
            for (size_t k = 0; k < NCALLED; k++)
                if (strcmp(CALLED_FUNCTIONS[k], name) == 0)
                    listed = l->called_seen[k] = true;
            if (!listed)
                problem(l, line, "pg_catalog.%s() is missing from CALLED_FUNCTIONS (no shadow is planted for it)",
                        name);
        }
        if (qualified || (i > 0 && lit[i - 1] == '.'))
            continue;
        const char *key = name;
        if (!bsearch(&key, l->procs, (size_t)l->nprocs, sizeof *l->procs, cmp_str))
            continue;
        bool ok = false;
        for (size_t k = 0; k < sizeof syntax / sizeof *syntax; k++)
            ok = ok || strcmp(name, syntax[k]) == 0;
        if (!ok)
            problem(l, line, "%s() not named by schema", name);
    }
    for (size_t k = 0; k < sizeof hiding / sizeof *hiding; k++)
        if (strstr(lit, hiding[k]))
            problem(l, line, "\"%s\" looks an operator up by name", hiding[k]);
}

/* Every string literal of a C file, comments and character constants skipped. */
static void lint_file(struct lint *l, const char *path)
{
    char *src = slurp_file(path);
    int line = 1;
    for (char *p = src; *p; p++) {
        if (*p == '\n') {
            line++;
        } else if (p[0] == '/' && p[1] == '*') {
            for (p += 2; *p && !(p[0] == '*' && p[1] == '/'); p++)
                line += *p == '\n';
            if (!*p)
                break;
            p++;
        } else if (p[0] == '/' && p[1] == '/') {
            while (p[1] && p[1] != '\n')
                p++;
        } else if (*p == '\'') {
            for (p++; *p && *p != '\''; p++)
                if (*p == '\\' && p[1])
                    p++;
            if (!*p)
                break;
        } else if (*p == '"') {
            char *start = ++p;
            for (; *p && *p != '"'; p++)
                if (*p == '\\' && p[1])
                    p++;
            lint_literal(l, start, (size_t)(p - start), line);
            if (!*p)
                break;
        }
    }
    free(src);
}

static void lint_dir(struct lint *l, const char *dir)
{
    char path[700];
    snprintf(path, sizeof path, "%s/%s", SKIPQ_SOURCE_DIR, dir);
    DIR *d = opendir(path);
    cr_assert_not_null(d, "%s", path);
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (de->d_type == DT_DIR && de->d_name[0] != '.') { /* core/common, core/host, ... */
            char sub[700];
            snprintf(sub, sizeof sub, "%s/%s", dir, de->d_name);
            lint_dir(l, sub);
            continue;
        }
        if (n < 3 || strcmp(de->d_name + n - 2, ".c") != 0)
            continue;
        char file[800];
        snprintf(file, sizeof file, "%s/%s", path, de->d_name);
        l->file = de->d_name;
        lint_file(l, file);
    }
    closedir(d);
}

/*
 * The statements in core/ (and the benchmark's) name every built-in function
 * and type by schema and use no syntax that looks an operator up by name;
 * every pg_catalog function core/ calls is in CALLED_FUNCTIONS (so the
 * shadow planting duplicates it), and every name there is still called.
 * Operators written bare are left to the planted duplicates above.
 */
Test(hostile_path, every_builtin_core_calls_is_named_by_schema_and_shadowed_here, .timeout = 60)
{
    PGconn *c = pinned(th_admin_conninfo());
    PGresult *r = th_query(c, "SELECT DISTINCT proname FROM pg_proc WHERE pronamespace = 'pg_catalog'::regnamespace");
    static struct lint l;
    l.nprocs = PQntuples(r);
    l.procs = calloc((size_t)l.nprocs, sizeof *l.procs);
    for (int i = 0; i < l.nprocs; i++)
        l.procs[i] = strdup(PQgetvalue(r, i, 0));
    qsort(l.procs, (size_t)l.nprocs, sizeof *l.procs, cmp_str);
    PQclear(r);
    PQfinish(c);
    l.coverage = true;
    lint_dir(&l, "core");
    l.coverage = false;
    lint_dir(&l, "bench");
    l.file = "CALLED_FUNCTIONS";
    for (size_t k = 0; k < NCALLED; k++)
        if (!l.called_seen[k])
            problem(&l, 0, "CALLED_FUNCTIONS lists %s, which core/ no longer calls", CALLED_FUNCTIONS[k]);
    cr_expect_eq(l.used, 0, "SQL that is not safe under any search_path:%s", l.problems);
}
