/*
 * skipq/plugin.h -- the whole contract between the skipq host and a plugin.
 *
 * If it is not in this header, it is not API. A plugin is a shared object
 * (.so) that the host loads with dlopen(RTLD_NOW | RTLD_LOCAL). It exports
 * exactly one symbol, written for it by SKIPQ_PLUGIN(): a function that
 * returns a descriptor with the ABI magic and version the plugin was built
 * against. The host checks that descriptor before it calls anything else and
 * refuses a plugin built for another ABI major, or for a newer minor than the
 * host knows, with a message naming both versions.
 *
 * Host services reach the plugin through a function table (skipq_host_api),
 * never through symbols exported by the host, so a plugin links against
 * nothing from skipq. The static inline helpers below call through that table.
 *
 * Lifecycle (the host owns it):
 *   1. load + ABI check;
 *   2. init(plugin): read your INI keys, register handlers by kind;
 *   3. handlers run on worker threads, many at once;
 *   4. shutdown(plugin), once, after every worker thread has stopped;
 *   5. dlclose.
 *
 * ABI versioning: MAJOR changes break plugins; MINOR only appends (new
 * fields at the end of skipq_host_api, new helpers). A plugin built for
 * 1.0 loads in a 1.x host; a plugin built for 1.2 is refused by a 1.1 host.
 *
 * Changelog:
 *   1.0  first release.
 */
#ifndef SKIPQ_PLUGIN_H
#define SKIPQ_PLUGIN_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The ABI this header describes. Fixed here, never taken from the build: a
 * plugin that claims another version must write its descriptor itself (as
 * tests/fixtures/bad_abi.c does), and -DSKIPQ_ABI_MAJOR=... on a compiler's
 * command line is a redefinition the compiler reports.
 */
#define SKIPQ_ABI_MAGIC 0x534b5051u /* "SKPQ" */
#define SKIPQ_ABI_MAJOR 1
#define SKIPQ_ABI_MINOR 0

/*
 * Error codes and message sizes (skipq.h tells the same story):
 * - Each public header has one status enum, numbered from 0 and appended to
 *   only: a value is never renumbered or reused. skipq_plugin_rc
 *   (SKIPQ_PLUGIN_E*, here) is what the host's calls return to a plugin;
 *   skipq_rc (SKIPQ_E*, in skipq.h) is what libskipq's calls return. They
 *   are two enums, not one: 0 is success and 1 a bad argument in both, but
 *   past that a number means one thing in each (SKIPQ_PLUGIN_ENOMEM is 4
 *   since ABI 1.0, SKIPQ_ENOMEM is 3), so compare a value only with the
 *   names of its own enum. A handler's outcome (skipq_outcome) is not a
 *   status: it says what becomes of the job.
 * - Two sizes, one per direction. SKIPQ_ERROR_SIZE (1024) is the longest
 *   message the host keeps from you: a handler's error for one attempt
 *   (skipq_job_error), cut to SKIPQ_ERROR_SIZE - 1 bytes. SKIPQ_ERRBUF_SIZE
 *   (512, skipq.h) is the buffer you hand libskipq for a message it writes.
 */
/* Longest error message the host keeps for one attempt (bytes, with NUL). */
#define SKIPQ_ERROR_SIZE 1024

/* What a handler returns. Numbered; values are never reused. */
typedef enum skipq_outcome {
    SKIPQ_DONE = 0,  /* success: the job becomes "done" */
    SKIPQ_RETRY = 1, /* transient failure: retried after a backoff until
                        max_attempts, then "dead" */
    SKIPQ_FAIL = 2   /* permanent failure: the job becomes "dead" now */
} skipq_outcome;

/* Status codes of host calls made by plugins. */
typedef enum skipq_plugin_rc {
    SKIPQ_PLUGIN_OK = 0,
    SKIPQ_PLUGIN_EINVAL = 1, /* bad argument (empty or malformed kind, NULL fn) */
    SKIPQ_PLUGIN_EEXIST = 2, /* kind already registered */
    SKIPQ_PLUGIN_ESTATE = 3, /* called outside init */
    SKIPQ_PLUGIN_ENOMEM = 4
} skipq_plugin_rc;

/* Log levels for skipq_plugin_log() / skipq_job_log(). */
enum { SKIPQ_LOG_ERROR = 0, SKIPQ_LOG_WARN = 1, SKIPQ_LOG_INFO = 2, SKIPQ_LOG_DEBUG = 3 };

typedef struct skipq_host_api skipq_host_api;
struct pg_conn; /* libpq's PGconn; include <libpq-fe.h> to use it */

/*
 * One job attempt, as a handler sees it. Everything is read-only and
 * borrowed: valid until the handler returns. Copy what you keep.
 */
typedef struct skipq_job {
    const skipq_host_api *api; /* private: used by the helpers below */
    int64_t id;                /* skipq.jobs.id */
    int64_t execution_id;      /* skipq.job_executions.id of this attempt */
    const char *queue;
    const char *kind;
    const char *payload;       /* JSON text, NUL-terminated */
    size_t payload_len;        /* strlen(payload) */
    int attempt;               /* 1 for the first run */
    int max_attempts;
} skipq_job;

/*
 * A loaded plugin, as init() and shutdown() see it. Opaque but for the api
 * pointer the helpers use.
 */
typedef struct skipq_plugin {
    const skipq_host_api *api; /* private */
} skipq_plugin;

/*
 * A handler. Called on a worker thread, possibly on many threads at once
 * for different jobs: anything it shares between calls must be thread-safe.
 * `userdata` is the pointer given to skipq_register().
 */
typedef skipq_outcome (*skipq_handler_fn)(skipq_job *job, void *userdata);

/* Host services. Appended to only; check `size` before using a new field. */
struct skipq_host_api {
    uint32_t size; /* sizeof(skipq_host_api) of the host */
    uint16_t abi_major;
    uint16_t abi_minor;
    /* init only */
    int (*register_handler)(skipq_plugin *p, const char *kind, skipq_handler_fn fn, void *userdata);
    const char *(*config_get)(skipq_plugin *p, const char *key);
    void (*plugin_set_state)(skipq_plugin *p, void *state);
    void *(*plugin_state)(skipq_plugin *p);
    void (*plugin_vlog)(skipq_plugin *p, int level, const char *fmt, va_list ap);
    /* handlers only, on the job's own thread */
    void (*job_verror)(skipq_job *job, const char *fmt, va_list ap);
    void (*job_retry_in)(skipq_job *job, int64_t delay_ms);
    struct pg_conn *(*job_conn)(skipq_job *job);
    int (*job_should_stop)(const skipq_job *job);
    void (*job_vlog)(skipq_job *job, int level, const char *fmt, va_list ap);
};

/* ---- init-time helpers --------------------------------------------------- */

/*
 * Register `fn` for jobs of `kind`. Only valid inside init(). Returns
 * SKIPQ_PLUGIN_EEXIST if any plugin already registered the kind (the host
 * then refuses to start), SKIPQ_PLUGIN_EINVAL for an empty or malformed kind.
 */
static inline int skipq_register(skipq_plugin *p, const char *kind, skipq_handler_fn fn, void *userdata)
{
    return p->api->register_handler(p, kind, fn, userdata);
}

/*
 * Value of `key` in the plugin's [plugin NAME] INI section, or NULL. The
 * string is owned by the host and lives until shutdown() returns.
 */
static inline const char *skipq_config(skipq_plugin *p, const char *key)
{
    return p->api->config_get(p, key);
}

/* One pointer of plugin state, kept by the host for the plugin. */
static inline void skipq_set_state(skipq_plugin *p, void *state) { p->api->plugin_set_state(p, state); }
static inline void *skipq_state(skipq_plugin *p) { return p->api->plugin_state(p); }

/* Log through the host (time, level, thread and plugin name are added). */
__attribute__((format(printf, 3, 4))) static inline void skipq_plugin_log(skipq_plugin *p, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    p->api->plugin_vlog(p, level, fmt, ap);
    va_end(ap);
}

/* ---- handler-time helpers (call only on the job's own thread) ------------- */

/*
 * Set the error message of this attempt (kept in skipq.jobs.last_error and
 * skipq.job_executions.error; truncated to SKIPQ_ERROR_SIZE - 1 bytes).
 */
__attribute__((format(printf, 2, 3))) static inline void skipq_job_error(skipq_job *job, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    job->api->job_verror(job, fmt, ap);
    va_end(ap);
}

/* With SKIPQ_RETRY: retry after `delay_ms` instead of the kind's backoff. */
static inline void skipq_job_retry_in(skipq_job *job, int64_t delay_ms) { job->api->job_retry_in(job, delay_ms); }

/*
 * The worker thread's own connection, inside a transaction the host opened
 * for this attempt (READ COMMITTED). Your writes commit in the same
 * transaction that marks the job done, and roll back if the handler returns
 * anything but SKIPQ_DONE or if the completion is fenced (the job's lease was
 * lost and another worker owns it now). Returns NULL if the database cannot
 * be reached; then return SKIPQ_RETRY.
 *
 * Do not COMMIT, ROLLBACK, close the connection or leave it in a failed
 * state you did not cause. A handler that never calls this holds no
 * transaction open while it runs.
 */
static inline struct pg_conn *skipq_job_conn(skipq_job *job) { return job->api->job_conn(job); }

/*
 * Non-zero once the host wants this handler to stop: the lease was lost,
 * the job was cancelled or timed out, or the host is shutting down and the
 * grace period ran out. Long handlers should poll it and return early.
 */
static inline int skipq_job_should_stop(const skipq_job *job) { return job->api->job_should_stop(job); }

__attribute__((format(printf, 3, 4))) static inline void skipq_job_log(skipq_job *job, int level, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    job->api->job_vlog(job, level, fmt, ap);
    va_end(ap);
}

/* ---- the plugin descriptor ------------------------------------------------ */

typedef struct skipq_plugin_info {
    uint32_t magic;       /* SKIPQ_ABI_MAGIC */
    uint16_t abi_major;   /* SKIPQ_ABI_MAJOR the plugin was built with */
    uint16_t abi_minor;   /* SKIPQ_ABI_MINOR the plugin was built with */
    uint32_t struct_size; /* sizeof(skipq_plugin_info) */
    const char *name;     /* for logs */
    const char *version;  /* the plugin's own version, for logs */
    /* Register handlers; return 0 on success, non-zero to refuse to start
     * (log why with skipq_plugin_log first, and free what you allocated:
     * shutdown is not called after a failed init). Required. */
    int (*init)(skipq_plugin *p);
    /* Release what a successful init() set up. Optional (may be NULL). */
    void (*shutdown)(skipq_plugin *p);
} skipq_plugin_info;

#define SKIPQ_PLUGIN_SYMBOL "skipq_plugin_describe"

/*
 * Declare the plugin, once, in one source file:
 *
 *     SKIPQ_PLUGIN("mail", "1.0.0", mail_init, mail_shutdown);
 */
#define SKIPQ_PLUGIN(name_, version_, init_, shutdown_)                                    \
    __attribute__((visibility("default"))) const skipq_plugin_info *skipq_plugin_describe(void); \
    __attribute__((visibility("default"))) const skipq_plugin_info *skipq_plugin_describe(void) \
    {                                                                                      \
        static const skipq_plugin_info info = {SKIPQ_ABI_MAGIC, SKIPQ_ABI_MAJOR,            \
                                               SKIPQ_ABI_MINOR, sizeof(skipq_plugin_info), \
                                               (name_), (version_), (init_), (shutdown_)}; \
        return &info;                                                                      \
    }

#ifdef __cplusplus
}
#endif
#endif /* SKIPQ_PLUGIN_H */
