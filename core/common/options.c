/*
 * options.c -- the option table: every INI key once, and the parsers of
 * its types.
 *
 * Why a table: a key that lives in one row cannot be parsed in one place,
 * defaulted in another and forgotten by reload.c or the docs. The row's
 * type picks the parser and the refusal message ("[queue q] threads: "0"
 * is out of range; it must be a whole number from 1 to 256"), so every key
 * of a type is refused the same way, with the range the reference shows.
 * The few keys whose values need more than their type (a connection
 * string that must parse like libpq's, a listen address, a cron
 * expression) keep a check function beside their row.
 */
#include "common/options.h"

#include <libpq-fe.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/config.h"
#include "common/conninfo.h"
#include "common/cron.h"
#include "common/log.h"
#include "common/util.h"

/* Every named section's struct begins with its NAME. */
_Static_assert(offsetof(struct sq_plugin_conf, name) == 0, "[plugin NAME] first");
_Static_assert(offsetof(struct sq_group_conf, queue) == 0, "[queue NAME] first");
_Static_assert(offsetof(struct sq_kind_conf, name) == 0, "[kind NAME] first");
/* The [database] rows serve [database NAME] too (config.h). */
_Static_assert(offsetof(struct sq_config, database) == 0, "[database] first");
_Static_assert(offsetof(struct sq_cron_conf, name) == 0, "[cron NAME] first");

static bool refuse(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool refuse(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return false;
}

/* ---- the few keys that need more than their type --------------------------- */

/* libpq calls a URI or conninfo string in dbname "expansion"; the file
 * spells it `url`. Its text is never quoted back (it may hold a password). */
static bool check_url(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                      size_t errlen)
{
    char why[256];
    if (!sq_conninfo_check(value, why, sizeof why))
        return refuse(err, errlen, "[%s] %s: %s", sect, o->key, why);
    if (strstr(value, "password") || strchr(value, '@'))
        ((struct sq_db_conf *)obj)->db_has_password = true;
    return true;
}

static bool check_password(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                           size_t errlen)
{
    (void)o, (void)sect, (void)value, (void)err, (void)errlen;
    ((struct sq_db_conf *)obj)->db_has_password = true;
    return true;
}

/* listen_conninfo must parse as libpq would, so a typo stops the host at
 * start-up instead of leaving it without wake-ups. The message says what is
 * wrong without quoting the value, which may hold a password (conninfo.c). */
static bool check_listen_conninfo(const struct sq_option *o, void *obj, const char *sect, const char *value,
                                  char *err, size_t errlen)
{
    (void)o;
    if (!*value)
        return refuse(err, errlen, "[%s] listen_conninfo must not be empty (leave the key out to poll only)", sect);
    char why[256];
    if (!sq_conninfo_is_string(value))
        return refuse(err, errlen, "[%s] listen_conninfo: not a URI (postgresql://...) or keyword=value pairs", sect);
    if (!sq_conninfo_check(value, why, sizeof why))
        return refuse(err, errlen, "[%s] listen_conninfo: %s", sect, why);
    PQconninfoOption *opts = PQconninfoParse(value, NULL);
    if (!opts)
        return refuse(err, errlen, "out of memory");
    for (PQconninfoOption *p = opts; p->keyword; p++)
        if (strcmp(p->keyword, "password") == 0 && p->val && *p->val)
            ((struct sq_db_conf *)obj)->db_has_password = true;
    PQconninfoFree(opts);
    return true;
}

static bool check_listen(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                         size_t errlen)
{
    struct sq_config *cfg = obj;
    char why[256];
    if (!sq_parse_listen(value, &cfg->metrics_addr, &cfg->metrics_addrlen, why, sizeof why))
        return refuse(err, errlen, "[%s] %s: %s", sect, o->key, why);
    return true;
}

static bool check_schedule(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                           size_t errlen)
{
    char why[256];
    if (!sq_cron_parse(value, &((struct sq_cron_conf *)obj)->cron, why, sizeof why))
        return refuse(err, errlen, "[%s] %s: %s", sect, o->key, why);
    return true;
}

/* The name goes to the database as text; a shape check keeps a typo (or
 * anything odd) out of the file with FILE:LINE. */
static bool check_timezone(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                           size_t errlen)
{
    (void)obj;
    static const char ok[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789/_+-";
    if (!*value || strlen(value) > 64 || strspn(value, ok) != strlen(value))
        return refuse(err, errlen, "[%s] %s: \"%s\" is not a time zone name (e.g. UTC, Europe/Paris)", sect, o->key,
                      value);
    return true;
}

static bool check_payload(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                          size_t errlen)
{
    (void)obj;
    if (value[0] != '{')
        return refuse(err, errlen, "[%s] %s: must be a JSON object ({...})", sect, o->key);
    return true;
}

/* ---- the table -------------------------------------------------------------------- */

#define FIELD(T, f) .offset = offsetof(T, f), .size = sizeof(((T *)0)->f)
#define CFG(f) FIELD(struct sq_config, f)
#define PLUGIN(f) FIELD(struct sq_plugin_conf, f)
#define QUEUE(f) FIELD(struct sq_group_conf, f)
#define KIND(f) FIELD(struct sq_kind_conf, f)
#define CRON(f) FIELD(struct sq_cron_conf, f)
#define DB_KV CFG(database.db), .aux = offsetof(struct sq_config, database.ndb)
/* A libpq keyword handed over as it is. */
#define LIBPQ(k) {SQ_SECT_DATABASE, k, SQ_OPT_LIBPQ, DB_KV}

static const struct sq_opt_choice pooler_choices[] = {{"none", 0, false}, {"transaction", 1, false}, {NULL, 0, false}};
static const struct sq_opt_choice level_choices[] = {{"error", SQ_LOG_ERROR, false}, {"warn", SQ_LOG_WARN, false},
                                                     {"info", SQ_LOG_INFO, false},   {"debug", SQ_LOG_DEBUG, false},
                                                     {"warning", SQ_LOG_WARN, true}, {NULL, 0, false}};
/* A [kind] keep_done; not set at all is -1 (the option's default). */
static const struct sq_opt_choice keep_done_choices[] = {
    {"on", 1, false},  {"off", 0, false}, {"yes", 1, true}, {"no", 0, true},
    {"true", 1, true}, {"false", 0, true}, {"1", 1, true},  {"0", 0, true}, {NULL, 0, false}};
static const struct sq_opt_choice isolation_choices[] = {
    {"thread", SQ_ISOLATION_THREAD, false}, {"process", SQ_ISOLATION_PROCESS, false}, {NULL, 0, false}};
static const struct sq_opt_choice catch_up_choices[] = {{"latest", SQ_CATCH_UP_LATEST, false},
                                                        {"all", SQ_CATCH_UP_ALL, false},
                                                        {"none", SQ_CATCH_UP_NONE, false},
                                                        {NULL, 0, false}};

const struct sq_opt_section_def sq_opt_sections[SQ_SECT_COUNT] = {
    [SQ_SECT_DATABASE] = {"database", false, 0, offsetof(struct sq_config, database.line), NULL, SQ_ABSENT_NONE,
                          "How to reach PostgreSQL. The keys are libpq's connection keywords, handed to libpq as "
                          "keywords (never pasted into a string). Precedence: `skipq --db`, then this section, then "
                          "`$DATABASE_URL`, then libpq's `PG*` variables and defaults. A host can serve queues in "
                          "several databases: each `[database NAME]` section takes the same keys, a `[queue]` or "
                          "`[cron]` section names its database with `database = NAME`, and those without it use "
                          "this section (called `default`). See [Several databases](#several-databases)."},
    [SQ_SECT_HOST] = {"host", false, 0, SIZE_MAX, NULL, SQ_ABSENT_NONE, "The host process, `skipq run`."},
    [SQ_SECT_RETENTION] = {"retention", false, 0, SIZE_MAX, NULL, SQ_ABSENT_NONE,
                           "Delete finished jobs (and their executions) some time after they finish. Absent keys "
                           "keep them forever. One host at a time does the work, in small batches, on its heartbeat "
                           "thread."},
    [SQ_SECT_METRICS] = {"metrics", false, 0, offsetof(struct sq_config, metrics_line), NULL, SQ_ABSENT_NONE,
                         "Prometheus metrics at `/metrics` and liveness at `/healthz` (HTTP, no authentication: keep "
                         "it on localhost or a private interface). Off unless `listen` is set."},
    [SQ_SECT_PLUGIN] = {"plugin", true, sizeof(struct sq_plugin_conf), offsetof(struct sq_plugin_conf, line),
                        "plugin names use only letters, digits and _.:-", SQ_ABSENT_NONE,
                        "One section per plugin. Every key of the section, `path` included, is handed to the "
                        "plugin's `init()` (`skipq_config()`)."},
    [SQ_SECT_QUEUE] = {"queue", true, sizeof(struct sq_group_conf), offsetof(struct sq_group_conf, line),
                       "queue names are 1-128 characters of letters, digits and _.:-", SQ_ABSENT_NONE,
                       "One group of threads serving queue NAME: they run the jobs of this queue whose kind has a "
                       "handler, claimed through the group's database sessions (`connections`). A section without "
                       "keys serves NAME with the defaults."},
    [SQ_SECT_KIND] = {"kind", true, sizeof(struct sq_kind_conf), offsetof(struct sq_kind_conf, line),
                      "kind names are 1-128 characters of letters, digits and _.:-", SQ_ABSENT_DEFAULTS,
                      "Retry policy, lease, timeout and global limits of one kind. Kinds without a section use the "
                      "defaults."},
    [SQ_SECT_CRON] = {"cron", true, sizeof(struct sq_cron_conf), offsetof(struct sq_cron_conf, line),
                      "cron names are 1-128 characters of letters, digits and _.:-", SQ_ABSENT_NONE,
                      "Enqueue a job at every tick of a schedule. Every host with the section runs it; each tick is "
                      "enqueued exactly once however many hosts do."},
};

const struct sq_option sq_options[] = {
    /* [database] */
    {SQ_SECT_DATABASE, "url", SQ_OPT_LIBPQ, DB_KV, .libpq = "dbname", .check = check_url,
     .help = "a `postgres://` URI or a `key=value` conninfo string (libpq's dbname expansion)"},
    LIBPQ("host"), LIBPQ("hostaddr"), LIBPQ("port"), LIBPQ("dbname"), LIBPQ("user"),
    {SQ_SECT_DATABASE, "password", SQ_OPT_LIBPQ, DB_KV, .check = check_password,
     .help = "prefer a password file (`passfile`, `~/.pgpass`): skipq warns when a file holding a password is "
             "readable by group or others"},
    LIBPQ("passfile"), LIBPQ("service"), LIBPQ("sslmode"), LIBPQ("sslrootcert"), LIBPQ("sslcert"),
    LIBPQ("sslkey"), LIBPQ("sslcrl"), LIBPQ("gssencmode"),
    {SQ_SECT_DATABASE, "application_name", SQ_OPT_LIBPQ, DB_KV,
     .shown = "`skipq`; `skipq COMMAND` for the command line",
     .help = "how skipq's sessions show in `pg_stat_activity`"},
    LIBPQ("connect_timeout"),
    {SQ_SECT_DATABASE, "options", SQ_OPT_LIBPQ, DB_KV,
     .help = "skipq appends `-c search_path=pg_catalog,pg_temp` (yours, from here, the URL or `$PGOPTIONS`, are "
             "kept; its `search_path` wins), except with `pooler = transaction`. The `options` of a "
             "`pg_service.conf` entry named with `service` are not seen (libpq applies them only when `options` is "
             "unset): set them here instead"},
    LIBPQ("target_session_attrs"), LIBPQ("keepalives"), LIBPQ("keepalives_idle"), LIBPQ("keepalives_interval"),
    LIBPQ("keepalives_count"), LIBPQ("tcp_user_timeout"),
    {SQ_SECT_DATABASE, "pooler", SQ_OPT_ENUM, CFG(database.pooled), .def = 0, .choices = pooler_choices,
     .what = "is not none or transaction (a pooler in session mode needs none)",
     .help = "`transaction` when the connection goes through a pooler in transaction mode (pgbouncer `pool_mode = "
             "transaction`): see [Behind a connection pooler](#behind-a-connection-pooler). A pooler in session mode "
             "needs `none`"},
    {SQ_SECT_DATABASE, "listen_conninfo", SQ_OPT_STRING, CFG(database.listen_conninfo), .check = check_listen_conninfo,
     .shown = "none",
     .help = "a URI or conninfo for a direct connection (not through the pooler) used only for `LISTEN`; refused "
             "when libpq cannot parse it. Without it, a host with `pooler = transaction` does not listen and relies "
             "on polling"},

    /* [host] */
    {SQ_SECT_HOST, "name", SQ_OPT_STRING, CFG(host_name), .min = 1, .max = 64, .shown = "the hostname",
     .help = "recorded as `NAME:PID:THREAD` in `skipq.jobs.locked_by` and `job_executions.worker`"},
    {SQ_SECT_HOST, "poll_interval", SQ_OPT_DURATION, CFG(poll_ms), .def = 1000, .min = 1, .flags = SQ_OPT_LIVE,
     .help = "how long an idle thread waits before it polls for runnable jobs again"},
    {SQ_SECT_HOST, "handoff", SQ_OPT_BOOL, CFG(handoff), .def = true,
     .help = "an idle thread registers as waiting, and an enqueue that commits meanwhile claims its job for it "
             "(docs/design.md, \"Hand-over at enqueue\"): the handler starts about 0.2 ms sooner after the "
             "enqueue's commit, while the enqueue itself takes 0.2-0.5 ms longer (bench/README.md). `off`: idle "
             "threads are woken and claim. Threads that share a session with others, or run in worker processes, "
             "never register"},
    {SQ_SECT_HOST, "lease", SQ_OPT_DURATION, CFG(lease_ms), .def = 30000, .min = 1000,
     .help = "a claimed job stays this host's for this long without a heartbeat; if the host dies, another re-runs "
             "the job once the lease has expired"},
    {SQ_SECT_HOST, "heartbeat", SQ_OPT_DURATION, CFG(heartbeat_ms), .def = 10000, .min = 100,
     .help = "how often leases of running jobs are renewed and expired leases of dead hosts swept; must be shorter "
             "than `lease`"},
    {SQ_SECT_HOST, "reply_timeout", SQ_OPT_DURATION, CFG(reply_timeout_ms), .def = 60000, .min = 0,
     .help = "a database call of a worker or of the heartbeat (a claim, an outcome, a lease renewal; never a "
             "handler's own) that gets no reply for this long is given up: a worker thread drops its connection "
             "and reconnects, a worker process (`isolation = process`) is replaced, and jobs it held come back "
             "through their leases. It guards against a network path that swallows bytes while still answering "
             "TCP keepalives, where `tcp_user_timeout` never fires and the call would wait forever. 0: never"},
    {SQ_SECT_HOST, "shutdown_grace", SQ_OPT_DURATION, CFG(grace_ms), .def = 30000,
     .help = "after SIGTERM/SIGINT, how long running handlers get to finish; jobs still running then go back to "
             "pending at once (the attempt is recorded as interrupted and does not use up the job's budget)"},
    {SQ_SECT_HOST, "log_level", SQ_OPT_ENUM, CFG(log_level), .def = SQ_LOG_INFO, .choices = level_choices,
     .what = "is not one of error, warn, info, debug", .flags = SQ_OPT_LIVE | SQ_OPT_ANYCASE,
     .help = "the least severe messages logged"},
    {SQ_SECT_HOST, "synchronous_commit", SQ_OPT_BOOL, CFG(synchronous_commit), .def = true,
     .help = "`off` makes skipq's own sessions (claims, outcomes, heartbeats, and the transactions of handlers that "
             "use the job's connection) commit without waiting for the WAL flush: faster, and a commit lost in a "
             "server crash only re-runs a job. With `on`, a claim that records no outcome still commits without "
             "waiting: losing it only puts the job back to pending. Enqueues are unaffected. `off` is refused with "
             "`pooler = transaction` (set it on the role instead: `ALTER ROLE ... SET synchronous_commit = off`)"},
    {SQ_SECT_HOST, "claim_bytes", SQ_OPT_SIZE, CFG(claim_bytes), .def = SQ_CLAIM_BYTES_DEFAULT, .min = 1,
     .max = 1LL << 30, .flags = SQ_OPT_LIVE,
     .help = "most payload bytes (the JSON text handlers receive) one claim takes: the claim stops adding jobs, "
             "best first, before their payloads pass it, but always takes at least one. A thread holds one claim at "
             "a time, so a host's payloads in memory are bounded by about threads × `claim_bytes`, whatever `batch` "
             "says"},

    /* [retention] */
    {SQ_SECT_RETENTION, "done", SQ_OPT_DURATION, CFG(keep_done_ms), .shown = "keep",
     .help = "delete `done` jobs (and their executions) this long after they finished, e.g. `7d`"},
    {SQ_SECT_RETENTION, "dead", SQ_OPT_DURATION, CFG(keep_dead_ms), .shown = "keep",
     .help = "the same for `dead` jobs"},
    {SQ_SECT_RETENTION, "cancelled", SQ_OPT_DURATION, CFG(keep_cancelled_ms), .shown = "keep",
     .help = "the same for `cancelled` jobs"},
    {SQ_SECT_RETENTION, "interval", SQ_OPT_DURATION, CFG(retention_interval_ms), .def = 60000, .min = 100,
     .help = "how often a host runs a retention round (on its heartbeat thread; one host at a time, by a row lock in skipq.housekeeping)"},
    {SQ_SECT_RETENTION, "batch", SQ_OPT_INT, CFG(retention_batch), .def = 1000, .min = 1, .max = 100000,
     .help = "jobs deleted per statement; a round stops after a short batch or one second. A round that stops on "
             "time with more to delete is followed by one at every heartbeat, each taking up to half the heartbeat "
             "interval, until a batch comes back short. Only jobs already counted in the totals of `skipq stats` are "
             "deleted, so totals survive retention"},

    /* [metrics] */
    {SQ_SECT_METRICS, "listen", SQ_OPT_STRING, CFG(metrics_listen), .check = check_listen, .shown = "off",
     .help = "`HOST:PORT` to serve `/metrics` and `/healthz` on: a numeric IPv4 address (`127.0.0.1:9464`, "
             "`0.0.0.0:9464`) or an IPv6 one in brackets (`[ADDRESS]:PORT`). A port in use stops the host with exit "
             "status 1"},
    {SQ_SECT_METRICS, "unhealthy_after", SQ_OPT_DURATION, CFG(metrics_unhealthy_ms), .def = 30000, .min = 1000,
     .help = "`/healthz` answers 503 once a thread has made no progress, or the database has been unreachable, for "
             "this long"},

    /* [plugin NAME] */
    {SQ_SECT_PLUGIN, "path", SQ_OPT_STRING, PLUGIN(path), .min = 1, .flags = SQ_OPT_REQUIRED,
     .help = "the plugin's `.so`: absolute, or relative to the INI file's directory"},
    {SQ_SECT_PLUGIN, "*", SQ_OPT_PASS, PLUGIN(kv), .aux = offsetof(struct sq_plugin_conf, nkv),
     .help = "handed to the plugin (`skipq_config()`), which says what it takes"},

    /* [queue NAME] */
    {SQ_SECT_QUEUE, "threads", SQ_OPT_INT, QUEUE(threads), .def = 1, .min = 1, .max = SQ_MAX_THREADS,
     .help = "threads serving queue NAME: how many of its jobs run at once (at most 256 in all the host's queues)"},
    {SQ_SECT_QUEUE, "connections", SQ_OPT_INT, QUEUE(connections), .def = 0, .min = 0, .max = SQ_MAX_THREADS,
     .shown = "auto: one per thread up to 8 threads; past 8, one per `batch` threads, at least 2",
     .help = "database sessions the group's threads claim and record through. With fewer sessions than threads, "
             "each session claims for a share of the threads and records their outcomes together, claiming the "
             "next jobs while the last ones run: many slow (I/O-bound) handlers on few server backends. A handler "
             "that asks for the job's connection (`skipq_job_conn`) gets a session of its own thread, opened on "
             "first use and kept, so its writes still commit with the job's done marker. With `isolation = "
             "process` each worker process has one session"},
    {SQ_SECT_QUEUE, "database", SQ_OPT_NAME, QUEUE(database), .what = "database", .shown = "`default`, the unnamed [database]",
     .help = "the `[database NAME]` section whose jobs this group runs; naming one the file does not declare is an "
             "error"},
    {SQ_SECT_QUEUE, "kinds", SQ_OPT_LIST, QUEUE(kinds), .aux = offsetof(struct sq_group_conf, nkinds),
     .what = "kind", .shown = "every kind a plugin registered",
     .help = "comma-separated kinds this group serves; naming a kind no plugin registered is an error"},
    {SQ_SECT_QUEUE, "batch", SQ_OPT_INT, QUEUE(batch), .def = 64, .min = 1, .max = SQ_MAX_BATCH,
     .help = "most jobs one thread claims per round trip. The claim adapts to the backlog's depth and to how long "
             "jobs take: a thread claims one job at a time, doubles its claim while claims come back full (a deep "
             "backlog) and their jobs ran within 100 ms, falls back to what came when a claim is short, and scales "
             "the next claim to what fits in 100 ms when jobs took longer, so slow jobs are claimed one at a time "
             "and shared between threads and hosts. Claimed jobs wait their turn on that thread, holding their "
             "leases; set 1 to claim one job per round trip always. A session shared by several threads "
             "(`connections`) claims up to `batch` jobs for them all: more than one per thread only while its "
             "claims' jobs ran within 100 ms, so slow jobs go one per thread. Many short I/O-bound handlers on "
             "shared sessions run faster with `batch = 1000`: fewer, larger claims (bench/README.md)"},
    {SQ_SECT_QUEUE, "priority_aging", SQ_OPT_DURATION, QUEUE(aging_ms), .min = 100, .shown = "off",
     .help = "a pending job's priority rises by 1 for every this much it has waited since its `run_at`, so a "
             "steady stream of higher-priority jobs cannot starve it (never lowered; applied on heartbeat rounds, "
             "one host per queue at a time)"},
    {SQ_SECT_QUEUE, "isolation", SQ_OPT_ENUM, QUEUE(isolation), .def = SQ_ISOLATION_THREAD,
     .choices = isolation_choices, .what = "is not thread or process",
     .help = "`thread`: the group's handlers run on threads of the host process. `process`: each of the group's "
             "`threads` is a worker process that the host starts and watches; a handler that crashes, exits, leaks "
             "past `max_memory` or runs past its kind's `timeout` costs that job one attempt (recorded as "
             "`crashed`, with the cause) and that one process, which is replaced, instead of the whole host. "
             "See [Process isolation](operations.md#process-isolation)"},
    {SQ_SECT_QUEUE, "max_jobs_per_worker", SQ_OPT_INT, QUEUE(max_jobs), .def = 0, .min = 0, .max = 1000000000,
     .help = "with `isolation = process`: a worker process that has run this many jobs finishes the jobs it holds, "
             "exits and is replaced at once (slow leaks, fragmentation); 0: never"},
    {SQ_SECT_QUEUE, "max_memory", SQ_OPT_SIZE, QUEUE(max_memory), .def = 0, .min = 0, .max = 1LL << 40,
     .help = "with `isolation = process`: most resident memory of one worker process. Over it between jobs, the "
             "process exits and is replaced; over it while a handler runs (the host samples every 100 ms), the "
             "process is killed and that attempt is `crashed` with \"exceeded max_memory\"; 0: no limit"},
    {SQ_SECT_QUEUE, "priority_aging_cap", SQ_OPT_INT, QUEUE(aging_cap), .def = 1000000, .min = -1000000,
     .max = 1000000, .help = "aging never raises a priority above this"},

    /* [kind NAME] */
    {SQ_SECT_KIND, "max_attempts", SQ_OPT_INT, KIND(max_attempts), .min = 1, .max = 100000, .flags = SQ_OPT_LIVE,
     .shown = "the schema's (5)",
     .help = "attempts before a job is dead, for every job of the kind enqueued without its own "
             "(`skipq.enqueue()`, `enqueue_many`, COPY, cron, the CLI): the host registers it in "
             "`skipq.kind_defaults` at start and on SIGHUP; the last host to write it sets it"},
    {SQ_SECT_KIND, "keep_done", SQ_OPT_ENUM, KIND(keep_done), .def = -1, .choices = keep_done_choices,
     .what = "is not on or off", .flags = SQ_OPT_LIVE | SQ_OPT_ANYCASE,
     .shown = "what `skipq.kind_options` says (on, unless a host set it off)",
     .help = "`off`: a job of this kind that ends done leaves `skipq.jobs` in the transaction that records it, "
             "and its execution rows in `skipq.job_executions` (who ran it, when, its output; queue and kind "
             "written on them) are its history, kept until `[retention] done`. About 15 % less server CPU "
             "and WAL per job. Jobs with an ordering key, dependents or a uniqueness window keep their row, as do "
             "dead and cancelled jobs. The host registers it in `skipq.kind_options` at start and on SIGHUP; the "
             "last host to write it sets it for every host (removing the key changes nothing: set it `on`)"},
    {SQ_SECT_KIND, "backoff_base", SQ_OPT_DURATION, KIND(backoff_base_ms), .def = SQ_DEFAULT_BACKOFF_BASE_MS,
     .flags = SQ_OPT_LIVE,
     .help = "retry n waits between d/2 and d, where d is the smaller of `backoff_cap` and `backoff_base` · "
             "2^(n−1); a handler may choose its own delay instead"},
    {SQ_SECT_KIND, "backoff_cap", SQ_OPT_DURATION, KIND(backoff_cap_ms), .def = SQ_DEFAULT_BACKOFF_CAP_MS,
     .flags = SQ_OPT_LIVE, .help = "the longest retry delay; at least `backoff_base`"},
    {SQ_SECT_KIND, "lease", SQ_OPT_DURATION, KIND(lease_ms), .min = 1000, .shown = "`[host] lease`",
     .help = "lease for this kind's jobs; must be longer than `[host] heartbeat`"},
    {SQ_SECT_KIND, "timeout", SQ_OPT_DURATION, KIND(timeout_ms), .min = 1, .flags = SQ_OPT_LIVE, .shown = "none",
     .help = "longest a handler may run (for handlers started after a reload). Past it (checked every heartbeat) "
             "the handler is asked to stop, its lease is no longer renewed, and the attempt fails: retried or dead "
             "by the usual rules, with `last_error` \"timed out\" (or \"lease expired\" if the handler never "
             "returns; it then costs one thread until it does)"},
    {SQ_SECT_KIND, "max_running", SQ_OPT_INT, KIND(max_running), .min = 1, .max = 1000000, .shown = "none",
     .help = "most jobs of this kind running at once across all hosts, enforced at claim time in the database"},
    {SQ_SECT_KIND, "rate", SQ_OPT_RATE, KIND(rate), .aux = offsetof(struct sq_kind_conf, rate_unit), .min = 1,
     .max = 1000000, .shown = "none",
     .help = "most claims of this kind per second (`N/s`) or minute (`N/min`) across all hosts, in whole-second "
             "(whole-minute) windows of the database clock. A host writes its limits for a kind to "
             "`skipq.kind_limits` when it starts (with `max_running`: the last host to start wins) and every host "
             "enforces every row there; `skipq limits clear KIND` removes them"},

    /* [cron NAME] */
    {SQ_SECT_CRON, "schedule", SQ_OPT_STRING, CRON(schedule), .check = check_schedule, .flags = SQ_OPT_REQUIRED,
     .help = "5 fields (minute hour day-of-month month day-of-week: `*`, `N`, `N-M`, lists, `/STEP`, `JAN`-`DEC`, "
             "`SUN`-`SAT`) or `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`; "
             "one that can never match is refused"},
    {SQ_SECT_CRON, "timezone", SQ_OPT_STRING, CRON(timezone), .def_str = "UTC", .check = check_timezone,
     .help = "IANA time zone the schedule's wall clock is read in; checked by the database at start"},
    {SQ_SECT_CRON, "kind", SQ_OPT_NAME, CRON(kind), .what = "kind", .flags = SQ_OPT_REQUIRED,
     .help = "kind of the enqueued jobs"},
    {SQ_SECT_CRON, "queue", SQ_OPT_NAME, CRON(queue), .what = "queue", .def_str = "default",
     .help = "their queue"},
    {SQ_SECT_CRON, "database", SQ_OPT_NAME, CRON(database), .what = "database", .shown = "`default`, the unnamed [database]",
     .help = "the `[database NAME]` section the jobs are enqueued in; this host must serve a queue there"},
    {SQ_SECT_CRON, "payload", SQ_OPT_STRING, CRON(payload), .def_str = "{}", .check = check_payload,
     .help = "their payload, a JSON object (checked by the database at start)"},
    {SQ_SECT_CRON, "priority", SQ_OPT_INT, CRON(priority), .min = -1000000, .max = 1000000,
     .help = "their priority"},
    {SQ_SECT_CRON, "max_attempts", SQ_OPT_INT, CRON(max_attempts), .min = 1, .max = 100000,
     .shown = "the kind's default (see [kind] `max_attempts`)", .help = "their attempt budget"},
    {SQ_SECT_CRON, "catch_up", SQ_OPT_ENUM, CRON(catch_up), .def = SQ_CATCH_UP_LATEST, .choices = catch_up_choices,
     .help = "ticks missed while no host ran the schedule: `latest` enqueues the most recent, `all` each of them "
             "(oldest first, up to 1000 per round), `none` none (a tick counts as missed when no host saw it within "
             "60s or 2 × `heartbeat`, whichever is longer)"},
};
const size_t sq_noptions = sizeof sq_options / sizeof sq_options[0];

/* ---- looking rows up ---------------------------------------------------------------- */

/* Before item i of n in "a, b or c". */
static const char *list_sep(int i, int n)
{
    return i == 0 ? "" : i + 1 == n ? " or " : ", ";
}

int sq_opt_section_find(const char *word, bool named)
{
    for (int s = 0; s < SQ_SECT_COUNT; s++)
        if (sq_opt_sections[s].named == named && strcmp(sq_opt_sections[s].word, word) == 0)
            return s;
    return -1;
}

void sq_opt_section_list(char *buf, size_t n)
{
    size_t used = 0;
    buf[0] = '\0';
    for (int s = 0; s < SQ_SECT_COUNT && used < n; s++)
        used += (size_t)snprintf(buf + used, n - used, "%s[%s%s]", list_sep(s, SQ_SECT_COUNT),
                                 sq_opt_sections[s].word, sq_opt_sections[s].named ? " NAME" : "");
}

const struct sq_option *sq_option_find(enum sq_opt_section s, const char *key)
{
    for (size_t i = 0; i < sq_noptions; i++)
        if (sq_options[i].section == s && sq_options[i].type != SQ_OPT_PASS && strcmp(sq_options[i].key, key) == 0)
            return &sq_options[i];
    return NULL;
}

const struct sq_option *sq_option_pass(enum sq_opt_section s)
{
    for (size_t i = 0; i < sq_noptions; i++)
        if (sq_options[i].section == s && sq_options[i].type == SQ_OPT_PASS)
            return &sq_options[i];
    return NULL;
}

bool sq_option_owns(const struct sq_option *o)
{
    for (const struct sq_option *p = sq_options; p < o; p++)
        if (p->section == o->section && p->offset == o->offset)
            return false;
    return true;
}

/* ---- fields ------------------------------------------------------------------------- */

static void *field(void *obj, size_t offset)
{
    return (char *)obj + offset;
}

static const void *cfield(const void *obj, size_t offset)
{
    return (const char *)obj + offset;
}

/* Numbers, bools and enums live in bool, int or int64_t fields, told
 * apart by their size. */
_Static_assert(sizeof(bool) < sizeof(int) && sizeof(int) < sizeof(int64_t), "field sizes differ");
static void put_int(const struct sq_option *o, void *obj, int64_t v)
{
    void *f = field(obj, o->offset);
    if (o->size == sizeof(int64_t)) {
        memcpy(f, &v, sizeof v);
    } else if (o->size == sizeof(int)) {
        int i = (int)v;
        memcpy(f, &i, sizeof i);
    } else {
        bool b = v != 0;
        memcpy(f, &b, sizeof b);
    }
}

int64_t sq_option_int(const struct sq_option *o, const void *obj)
{
    const void *f = cfield(obj, o->offset);
    if (o->size == sizeof(int64_t)) {
        int64_t v;
        memcpy(&v, f, sizeof v);
        return v;
    }
    if (o->size == sizeof(int)) {
        int i;
        memcpy(&i, f, sizeof i);
        return i;
    }
    bool b;
    memcpy(&b, f, sizeof b);
    return b;
}

static char **str_field(const struct sq_option *o, void *obj)
{
    return field(obj, o->offset);
}

static bool set_str(char **f, const char *value, char *err, size_t errlen)
{
    char *copy = strdup(value);
    if (!copy)
        return refuse(err, errlen, "out of memory");
    free(*f);
    *f = copy;
    return true;
}

static bool append_kv(const struct sq_option *o, void *obj, const char *key, const char *value, char *err,
                      size_t errlen)
{
    struct sq_kv **list = field(obj, o->offset);
    size_t *n = field(obj, o->aux);
    struct sq_kv *kv = realloc(*list, (*n + 1) * sizeof *kv);
    if (!kv)
        return refuse(err, errlen, "out of memory");
    *list = kv;
    kv[*n].key = strdup(o->libpq ? o->libpq : key);
    kv[*n].value = strdup(value);
    if (!kv[*n].key || !kv[*n].value) {
        free(kv[*n].key);
        free(kv[*n].value);
        return refuse(err, errlen, "out of memory");
    }
    (*n)++;
    return true;
}

/* ---- parsing one value, by type -------------------------------------------------------- */

static bool set_duration(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                         size_t errlen)
{
    int64_t ms;
    const char *why = sq_parse_duration_why(value, &ms);
    if (why)
        return refuse(err, errlen, "[%s] %s: \"%s\" %s", sect, o->key, value, why);
    if (ms < o->min)
        return refuse(err, errlen, "[%s] %s: %s is too short (minimum %lldms)", sect, o->key, value,
                      (long long)o->min);
    put_int(o, obj, ms);
    return true;
}

static bool set_int(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                    size_t errlen)
{
    int64_t v;
    const char *why = sq_parse_int_why(value, o->min, o->max, &v);
    if (why)
        return refuse(err, errlen, "[%s] %s: \"%s\" %s; it must be a whole number from %lld to %lld", sect, o->key,
                      value, why, (long long)o->min, (long long)o->max);
    put_int(o, obj, v);
    return true;
}

static bool set_size(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                     size_t errlen)
{
    int64_t v;
    if (!sq_parse_bytes(value, &v) || v < o->min || v > o->max) {
        char lo[32], hi[32];
        sq_opt_format_size(o->min, lo, sizeof lo);
        sq_opt_format_size(o->max, hi, sizeof hi);
        return refuse(err, errlen, "[%s] %s: \"%s\" must be a size from %s to %s (e.g. 16MiB, 65536)", sect, o->key,
                      value, lo, hi);
    }
    put_int(o, obj, v);
    return true;
}

static bool set_bool(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                     size_t errlen)
{
    bool b;
    if (!sq_parse_bool(value, &b))
        return refuse(err, errlen, "[%s] %s: \"%s\" is not on or off", sect, o->key, value);
    put_int(o, obj, b);
    return true;
}

static bool set_enum(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                     size_t errlen)
{
    for (const struct sq_opt_choice *c = o->choices; c->name; c++) {
        if ((o->flags & SQ_OPT_ANYCASE) ? strcasecmp(c->name, value) == 0 : strcmp(c->name, value) == 0) {
            put_int(o, obj, c->value);
            return true;
        }
    }
    if (o->what)
        return refuse(err, errlen, "[%s] %s: \"%s\" %s", sect, o->key, value, o->what);
    /* "is not latest, all or none" */
    char list[200] = "";
    int count = 0, i = 0;
    for (const struct sq_opt_choice *c = o->choices; c->name; c++)
        count += !c->alias;
    size_t n = 0;
    for (const struct sq_opt_choice *c = o->choices; c->name && n < sizeof list; c++)
        if (!c->alias)
            n += (size_t)snprintf(list + n, sizeof list - n, "%s%s", list_sep(i++, count), c->name);
    return refuse(err, errlen, "[%s] %s: \"%s\" is not %s", sect, o->key, value, list);
}

static bool set_string(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                       size_t errlen)
{
    size_t len = strlen(value);
    if (o->max && (len < (size_t)o->min || len > (size_t)o->max))
        return refuse(err, errlen, "[%s] %s must be %lld to %lld characters", sect, o->key, (long long)o->min,
                      (long long)o->max);
    if (o->min && len < (size_t)o->min)
        return refuse(err, errlen, "[%s] %s must not be empty", sect, o->key);
    return set_str(str_field(o, obj), value, err, errlen);
}

static bool set_name(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                     size_t errlen)
{
    if (!sq_valid_name(value))
        return refuse(err, errlen, "[%s] %s: \"%s\" is not a valid %s name", sect, o->key, value, o->what);
    return set_str(str_field(o, obj), value, err, errlen);
}

/* The unit of a rate as the database's date_trunc() names it; NULL: none. */
static const char *rate_unit(const char *unit)
{
    if (strcmp(unit, "s") == 0 || strcmp(unit, "second") == 0 || strcmp(unit, "sec") == 0)
        return "second";
    if (strcmp(unit, "min") == 0 || strcmp(unit, "minute") == 0)
        return "minute";
    return NULL;
}

/* rate = N/s (N/second, N/sec) or N/min (N/minute). */
static bool set_rate(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                     size_t errlen)
{
    char num[32];
    const char *slash = strchr(value, '/');
    size_t n = slash ? (size_t)(slash - value) : 0;
    if (slash && n < sizeof num) {
        memcpy(num, value, n);
        num[n] = '\0';
        const char *unit = slash + 1;
        while (*unit == ' ')
            unit++;
        int64_t v;
        const char *why = sq_parse_int_why(sq_trim(num), o->min, o->max, &v);
        if (why)
            return refuse(err, errlen,
                          "[%s] %s: \"%s\": N %s; write N/s or N/min with N from %lld to %lld (e.g. 10/s, 100/min)",
                          sect, o->key, value, why, (long long)o->min, (long long)o->max);
        const char *per = rate_unit(unit);
        if (per) {
            put_int(o, obj, v);
            *(const char **)field(obj, o->aux) = per;
            return true;
        }
    }
    return refuse(err, errlen, "[%s] %s: \"%s\" is not N/s or N/min with N from %lld to %lld (e.g. 10/s, 100/min)",
                  sect, o->key, value, (long long)o->min, (long long)o->max);
}

/* A comma-separated list of names, none twice. */
static bool set_list(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                     size_t errlen)
{
    char ***out = field(obj, o->offset);
    size_t *n = field(obj, o->aux);
    if (strspn(value, ", \t") == strlen(value))
        return refuse(err, errlen, "[%s] %s: empty list (leave the key out to serve every %s)", sect, o->key,
                      o->what);
    char *copy = strdup(value);
    if (!copy)
        return refuse(err, errlen, "out of memory");
    bool ok = true;
    for (char *next = copy; ok && next;) {
        char *tok = next;
        next = strchr(next, ',');
        if (next)
            *next++ = '\0';
        tok = sq_trim(tok);
        bool dup = false;
        for (size_t i = 0; i < *n && !dup; i++)
            dup = strcmp((*out)[i], tok) == 0;
        char **grown = NULL;
        if (!sq_valid_name(tok))
            ok = refuse(err, errlen, "[%s] %s: \"%s\" is not a valid %s name", sect, o->key, tok, o->what);
        else if (dup)
            ok = refuse(err, errlen, "[%s] %s: \"%s\" is listed twice", sect, o->key, tok);
        else if (!(grown = realloc(*out, (*n + 1) * sizeof *grown)) || !(grown[*n] = strdup(tok)))
            ok = refuse(err, errlen, "out of memory");
        if (grown)
            *out = grown;
        if (ok)
            (*n)++;
    }
    free(copy);
    return ok;
}

typedef bool parse_fn(const struct sq_option *o, void *obj, const char *sect, const char *value, char *err,
                      size_t errlen);

/* Each type: its parser, its name in the reference, and what its values
 * look like there. */
static const struct {
    parse_fn *parse; /* NULL: appended to a key/value list */
    const char *name, *help;
} types[] = {
    [SQ_OPT_STRING] = {set_string, "text", "the rest of the line (` ;` starts a comment), trimmed"},
    [SQ_OPT_NAME] = {set_name, "name", "1 to 128 letters, digits and `_.:-`"},
    [SQ_OPT_INT] = {set_int, "whole number", "digits, with an optional `-`; no `+`, fraction or exponent"},
    [SQ_OPT_BOOL] = {set_bool, "on/off", "`on` or `off` (also `yes`/`no`, `true`/`false`, `1`/`0`, in any case)"},
    [SQ_OPT_DURATION] = {set_duration, "duration",
                         "seconds, or a number with `ms`, `s`, `m` (or `min`), `h`, `d` (a fraction or exponent is "
                         "fine: `1.5s`, `2e3ms`); no sign, no `nan` or `inf`, and at most 1000 years (`365250d`)"},
    [SQ_OPT_SIZE] = {set_size, "size",
                     "bytes, or a whole number with `B`, `kB`/`KiB`, `MB`/`MiB`, `GB`/`GiB` (powers of 1024), no "
                     "space before the unit"},
    [SQ_OPT_ENUM] = {set_enum, "one of", "one of the words the table lists"},
    [SQ_OPT_RATE] = {set_rate, "rate", "`N/s` (or `N/sec`, `N/second`) or `N/min` (or `N/minute`)"},
    [SQ_OPT_LIST] = {set_list, "list", "names separated by commas, none twice"},
    [SQ_OPT_LIBPQ] = {NULL, "libpq", "handed to libpq as it is, in file order"},
    [SQ_OPT_PASS] = {NULL, "any", "handed to the plugin as it is"},
};

bool sq_opt_type_numeric(enum sq_opt_type t)
{
    return t == SQ_OPT_INT || t == SQ_OPT_BOOL || t == SQ_OPT_DURATION || t == SQ_OPT_SIZE || t == SQ_OPT_ENUM;
}

const char *sq_opt_type_name(enum sq_opt_type t)
{
    return types[t].name;
}

const char *sq_opt_type_help(enum sq_opt_type t)
{
    return types[t].help;
}

bool sq_option_set(const struct sq_option *o, void *obj, const char *sect, const char *key, const char *value,
                   char *err, size_t errlen)
{
    if (o->check && !o->check(o, obj, sect, value, err, errlen))
        return false;
    if (!types[o->type].parse)
        return append_kv(o, obj, key, value, err, errlen);
    return types[o->type].parse(o, obj, sect, value, err, errlen);
}

/* ---- whole sections --------------------------------------------------------------------- */

bool sq_options_defaults(enum sq_opt_section s, void *obj)
{
    for (size_t i = 0; i < sq_noptions; i++) {
        const struct sq_option *o = &sq_options[i];
        if (o->section != s || !sq_option_owns(o))
            continue;
        if (sq_opt_type_numeric(o->type))
            put_int(o, obj, o->def);
        else if (o->def_str && !(*str_field(o, obj) = strdup(o->def_str)))
            return false; /* lists, rates and key/value lists have no default */
    }
    return true;
}

static void free_kv(struct sq_kv *kv, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        free(kv[i].key);
        free(kv[i].value);
    }
    free(kv);
}

void sq_options_free(enum sq_opt_section s, void *obj)
{
    for (size_t i = 0; i < sq_noptions; i++) {
        const struct sq_option *o = &sq_options[i];
        if (o->section != s || !sq_option_owns(o))
            continue;
        if (o->type == SQ_OPT_STRING || o->type == SQ_OPT_NAME) {
            free(*str_field(o, obj));
        } else if (o->type == SQ_OPT_LIST) {
            char **list = *(char ***)field(obj, o->offset);
            size_t n = *(size_t *)field(obj, o->aux);
            for (size_t k = 0; k < n; k++)
                free(list[k]);
            free(list);
        } else if (o->type == SQ_OPT_LIBPQ || o->type == SQ_OPT_PASS) {
            free_kv(*(struct sq_kv **)field(obj, o->offset), *(size_t *)field(obj, o->aux));
        }
    }
}

static bool same_str(const char *a, const char *b)
{
    return (!a && !b) || (a && b && strcmp(a, b) == 0);
}

bool sq_option_same(const struct sq_option *o, const void *a, const void *b)
{
    switch (o->type) {
    case SQ_OPT_STRING:
    case SQ_OPT_NAME:
        return same_str(*(char *const *)cfield(a, o->offset), *(char *const *)cfield(b, o->offset));
    case SQ_OPT_RATE:
        if (!same_str(*(const char *const *)cfield(a, o->aux), *(const char *const *)cfield(b, o->aux)))
            return false;
        return sq_option_int(o, a) == sq_option_int(o, b);
    case SQ_OPT_LIST: {
        char *const *la = *(char **const *)cfield(a, o->offset), *const *lb = *(char **const *)cfield(b, o->offset);
        size_t na = *(const size_t *)cfield(a, o->aux), nb = *(const size_t *)cfield(b, o->aux);
        if (na != nb || !la != !lb)
            return false;
        for (size_t i = 0; i < na; i++)
            if (strcmp(la[i], lb[i]) != 0)
                return false;
        return true;
    }
    case SQ_OPT_LIBPQ:
    case SQ_OPT_PASS: {
        const struct sq_kv *ka = *(struct sq_kv *const *)cfield(a, o->offset),
                           *kb = *(struct sq_kv *const *)cfield(b, o->offset);
        size_t na = *(const size_t *)cfield(a, o->aux), nb = *(const size_t *)cfield(b, o->aux);
        if (na != nb)
            return false;
        for (size_t i = 0; i < na; i++)
            if (strcmp(ka[i].key, kb[i].key) != 0 || strcmp(ka[i].value, kb[i].value) != 0)
                return false;
        return true;
    }
    default:
        return sq_option_int(o, a) == sq_option_int(o, b);
    }
}

/* ---- showing values ------------------------------------------------------------------------- */

void sq_opt_format_duration(int64_t ms, char *buf, size_t n)
{
    static const struct {
        int64_t ms;
        const char *unit;
    } units[] = {{86400000, "d"}, {3600000, "h"}, {60000, "m"}, {1000, "s"}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (ms != 0 && ms % units[i].ms == 0) {
            snprintf(buf, n, "%lld%s", (long long)(ms / units[i].ms), units[i].unit);
            return;
        }
    }
    snprintf(buf, n, "%lldms", (long long)ms);
}

void sq_opt_format_size(int64_t bytes, char *buf, size_t n)
{
    static const struct {
        int64_t bytes;
        const char *unit;
    } units[] = {{1LL << 30, "GiB"}, {1LL << 20, "MiB"}, {1LL << 10, "KiB"}};
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (bytes != 0 && bytes % units[i].bytes == 0) {
            snprintf(buf, n, "%lld%s", (long long)(bytes / units[i].bytes), units[i].unit);
            return;
        }
    }
    snprintf(buf, n, "%lld byte%s", (long long)bytes, bytes == 1 ? "" : "s");
}
