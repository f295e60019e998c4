/* config.h -- the INI file of a skipq host, parsed into one struct. */
#ifndef SQ_CONFIG_H
#define SQ_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/cron.h"
#include "common/options.h"

#define SQ_CONFIG_MAX_LINE 190 /* longest line we accept; inih cuts at 197 */
#define SQ_MAX_THREADS 256
#define SQ_MAX_BATCH 1000

struct sq_kv {
    char *key;
    char *value;
    int line; /* where the key is set ([plugin] sections: for FILE:LINE messages) */
};

struct sq_plugin_conf {
    char *name;
    char *path;
    struct sq_kv *kv; /* every key of the section, `path` included */
    size_t nkv;
    int line;
};

/* The structs below are filled through the option table (options.c): a
 * field's key, default and range are in its row there. A named section's
 * struct begins with its NAME. */

/* [queue NAME]: one group of threads serving one queue. */
struct sq_group_conf {
    char *queue;
    char *database; /* [database NAME] its jobs are in; NULL: the default one */
    int threads;
    int connections; /* sessions the threads claim through; 0: auto (sq_config_connections) */
    int batch;    /* most jobs a thread claims per round trip */
    char **kinds; /* NULL: every kind a plugin registered */
    size_t nkinds;
    int64_t aging_ms; /* priority_aging: +1 priority per this much waiting; 0 = off */
    int aging_cap;    /* priority_aging_cap: aging never raises a priority above this */
    int isolation;    /* enum sq_isolation */
    int max_jobs;     /* max_jobs_per_worker (process mode); 0 = none */
    int64_t max_memory; /* bytes of resident memory per worker process; 0 = none */
    int line;
};

/* [queue] isolation: where a group's handlers run. */
enum sq_isolation { SQ_ISOLATION_THREAD = 0, SQ_ISOLATION_PROCESS = 1 };

/* [kind NAME]: retry policy and lease for one kind. */
struct sq_kind_conf {
    char *name;
    int max_attempts;         /* default for `skipq enqueue -c`; 0 = schema default */
    int keep_done;            /* 1 keep done jobs, 0 they leave skipq.jobs; -1 not set here */
    int64_t backoff_base_ms;
    int64_t backoff_cap_ms;
    int64_t lease_ms;         /* 0 = the host's lease */
    int64_t timeout_ms;       /* 0 = none: a handler may run as long as it heartbeats */
    int max_running;          /* global limit on running jobs of the kind; 0 = none */
    int rate;                 /* most claims per rate_unit; 0 = none */
    const char *rate_unit;    /* "second" or "minute" */
    int line;
};

/* What a cron schedule does with ticks missed while no host ran it. */
enum sq_catch_up { SQ_CATCH_UP_LATEST = 0, SQ_CATCH_UP_ALL = 1, SQ_CATCH_UP_NONE = 2 };

/* [cron NAME]: enqueue a job at every tick of a schedule. */
struct sq_cron_conf {
    char *name;
    char *schedule; /* as written */
    struct sq_cron cron;
    char *timezone; /* IANA name; checked against the database at start */
    char *kind;
    char *queue;
    char *payload;  /* JSON text; checked by the database at start */
    int priority;
    int max_attempts;
    enum sq_catch_up catch_up;
    char *database; /* [database NAME] its jobs go to; NULL: the default one */
    int line;
};

/* [database] or [database NAME]: where one database's sessions connect. */
struct sq_db_conf {
    char *name;       /* NULL: the unnamed [database] ("default"), or the environment without one */
    struct sq_kv *db; /* libpq keywords, in file order */
    size_t ndb;
    bool db_has_password;
    /* pooler = transaction: the sessions go through a pooler in
     * transaction mode, so skipq keeps no state in them (no named prepared
     * statements, no session settings, no LISTEN). */
    bool pooled;
    char *listen_conninfo; /* direct session for LISTEN; NULL: none */
    int line;              /* of the section's header; 0: not in the file */
};

/* The name the unnamed [database] goes by in `database = `, --database,
 * logs and metric labels. */
#define SQ_DEFAULT_DATABASE "default"

struct sq_config {
    /* First, so that the [database] rows of the option table (offsets into
     * struct sq_config) are offsets into every struct sq_db_conf as well:
     * [database NAME] sections are parsed through the same rows. */
    struct sq_db_conf database;
    char *path;
    /* [host] */
    char *host_name;
    int64_t poll_ms, lease_ms, heartbeat_ms, grace_ms;
    int64_t reply_timeout_ms; /* a worker's or the heartbeat's call with no reply for this long is cut; 0: never */
    int log_level;
    bool synchronous_commit; /* false: SET synchronous_commit = off on skipq's sessions */
    bool handoff;            /* idle threads take new jobs from the enqueue's commit (sql/060_handoff.sql) */
    int64_t claim_bytes;     /* most payload bytes one claim takes (always at least one job) */
    /* [retention]: delete finished jobs older than these (0: keep) */
    int64_t keep_done_ms, keep_dead_ms, keep_cancelled_ms;
    int64_t retention_interval_ms;
    int retention_batch;
    /* [metrics]: off unless `listen` is set */
    char *metrics_listen; /* as written, for logs */
    struct sockaddr_storage metrics_addr;
    socklen_t metrics_addrlen;
    int64_t metrics_unhealthy_ms; /* /healthz turns 503 after this long without progress */
    int metrics_line;             /* line of the [metrics] header */
    struct sq_plugin_conf *plugins;
    size_t nplugins;
    struct sq_group_conf *groups;
    size_t ngroups;
    struct sq_kind_conf *kinds;
    size_t nkinds;
    struct sq_cron_conf *crons;
    size_t ncrons;
    struct sq_kind_conf kind_defaults; /* what a kind without [kind NAME] gets */
    struct sq_db_conf *databases; /* [database NAME] sections */
    size_t ndatabases;
    /* Non-NULL in a view (sq_config_view): the configuration it was cut
     * from, which owns everything but the view's own arrays. */
    const struct sq_config *view_of;
    bool view_owns; /* freeing the view frees view_of too */
};

/* Defaults of the [kind] policy, used for kinds without a section. */
#define SQ_DEFAULT_BACKOFF_BASE_MS 1000
#define SQ_DEFAULT_BACKOFF_CAP_MS 3600000
/* Default of [host] claim_bytes: most payload bytes one claim takes. */
#define SQ_CLAIM_BYTES_DEFAULT (32LL << 20)

/* Parse "HOST:PORT" (numeric IPv4) or "[IPV6]:PORT"; false with a message. */
bool sq_parse_listen(const char *value, struct sockaddr_storage *addr, socklen_t *len, char *err, size_t errlen);

/*
 * Load and validate `path`. On failure returns NULL and writes
 * "FILE:LINE: message" (or "FILE: message") into err.
 */
struct sq_config *sq_config_load(const char *path, char *err, size_t errlen);
void sq_config_free(struct sq_config *cfg);
/* The [kind NAME] section for `kind`, or NULL. */
/* How many database sessions group g claims and records through: its
 * `connections`, or with 0 (auto) one per thread up to SQ_AUTO_CONNECTIONS
 * threads, and past that one per `batch` threads, at least two. */
int sq_config_connections(const struct sq_group_conf *g);
#define SQ_AUTO_CONNECTIONS 8

const struct sq_kind_conf *sq_config_kind(const struct sq_config *cfg, const char *kind);
/* The policy `kind` runs with: its [kind NAME] section, or the defaults. */
const struct sq_kind_conf *sq_config_kind_policy(const struct sq_config *cfg, const char *kind);
/* Any section, for code that walks the option table: how many structs
 * section s has (1 for [database], [host], [retention], [metrics], whose
 * struct is cfg itself), the i-th, and a named one by NAME (or NULL). */
size_t sq_config_count(const struct sq_config *cfg, enum sq_opt_section s);
const void *sq_config_section(const struct sq_config *cfg, enum sq_opt_section s, size_t i);
const void *sq_config_find(const struct sq_config *cfg, enum sq_opt_section s, const char *name);
/*
 * One database of a file that declares several ([database NAME]): a
 * configuration that reads like a file with only that database -- its
 * `database` is that section, its groups and schedules those with
 * `database = NAME` -- sharing everything else with cfg, which must outlive
 * it. name NULL or "default": the unnamed [database]. NULL with a message
 * naming the databases the file has when there is no such section.
 * sq_config_free frees a view's own arrays only.
 */
struct sq_config *sq_config_view(const struct sq_config *cfg, const char *name, char *err, size_t errlen);
/*
 * What a command that works on one database reads: `path`, cut to
 * [database name] (sq_config_view; freeing it frees the file). Without a
 * name, the file's unnamed [database]; a file whose databases are all named
 * has none, so that is an error naming them unless db_given (a connection
 * string given on the command line replaces it). NULL with a message.
 */
struct sq_config *sq_config_load_one(const char *path, const char *name, bool db_given, char *err, size_t errlen);
/* "default", or the [database NAME] a view or a section is about. */
const char *sq_config_database_name(const struct sq_db_conf *d);
/* The database a view is cut to (its name, for --database), or NULL for a
 * whole file. */
const char *sq_config_view_database(const struct sq_config *cfg);
/* Does group or schedule `database` (NULL: the default) name d? */
bool sq_config_database_is(const struct sq_db_conf *d, const char *database);
/* Check what `skipq run` needs beyond a parsable file (groups, plugins). */
bool sq_config_check_runnable(const struct sq_config *cfg, char *err, size_t errlen);

#endif
