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
 *   1. load + ABI check; a 1.1 plugin's declared keys (config_keys) are
 *      checked against its [plugin NAME] section: an unknown key or a bad
 *      value stops the host with FILE:LINE and exit status 2;
 *   2. init(plugin): read your INI keys, register handlers by kind;
 *   3. handlers run on worker threads, many at once;
 *   4. shutdown(plugin), once, after every handler has returned (see "The
 *      stop contract" below: if the host gives up on a handler, it exits
 *      without calling shutdown() at all);
 *   5. dlclose.
 *
 * ABI versioning: MAJOR changes break plugins; MINOR only appends (new
 * fields at the end of skipq_host_api, new helpers). A plugin built for
 * 1.0 loads in a 1.x host; a plugin built for 1.2 is refused by a 1.1 host.
 *
 * Changelog:
 *   1.0  first release.
 *   1.1  declared, typed configuration keys (skipq_config_key, SKIPQ_PLUGIN_KEYS)
 *        checked by the host at load and on SIGHUP; typed getters
 *        (skipq_config_int/_bool/_duration_ms/_size); skipq_config_error();
 *        skipq_job_deadline_ms(); skipq_job_output(); the stop contract
 *        stated and honoured at shutdown; new status codes
 *        SKIPQ_PLUGIN_ENOENT and SKIPQ_PLUGIN_ETOOBIG.
 *
 * THE PAYLOAD. job->payload is the job's jsonb column rendered as text:
 * PostgreSQL's rendering, not the bytes the producer sent. Keys come back
 * sorted by length then bytes, duplicate keys keep the last, whitespace is
 * jsonb's (", " and ": "), numbers keep their digits. Parse it with a JSON
 * library; never compare it or sign it as bytes. When the exact bytes
 * matter (a body you sign with HMAC, a webhook you forward verbatim),
 * enqueue them as a JSON *string* inside the payload -- {"body": "<the
 * bytes, JSON-escaped>"} -- and decode that string in the handler: a JSON
 * string's value survives jsonb unchanged (plugins/webhook.c does this).
 *
 * THE STOP CONTRACT.
 * - skipq_job_should_stop() is one atomic load: cheap enough to call from a
 *   progress callback (libcurl's XFERINFOFUNCTION) or every loop iteration.
 * - It turns true when: the kind's `timeout` is reached; the job's lease was
 *   lost or could not be renewed in time; an operator cancelled the job;
 *   the host is shutting down and its `shutdown_grace` has run out.
 * - What becomes of your return after it turned true:
 *     timeout: the attempt is a retry ("timed out after Nms"), whatever you
 *       return, unless you return SKIPQ_FAIL (then dead);
 *     lease lost / cancelled: nothing you return is recorded (the job is no
 *       longer this attempt's; a handler's transaction is rolled back);
 *     shutdown: the host waits SKIPQ_STOP_WINDOW_MS (2 s) more for handlers
 *       told to stop; one that returns within it has its outcome and error
 *       recorded as returned (return SKIPQ_RETRY with a reason, and the job
 *       runs again on another host after its backoff). Handlers still
 *       running after the window have their jobs released back to pending
 *       ("interrupted", uncharged), and the host exits *without* calling
 *       shutdown() or unloading the plugin, so no plugin code is unmapped
 *       under a running handler. shutdown() runs only when every handler
 *       has returned.
 * - skipq_job_deadline_ms() says how long the handler has left before it is
 *   told to stop by a timeout or the end of the shutdown grace: size your
 *   own I/O timeouts under it.
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
#define SKIPQ_ABI_MINOR 1

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
/* Longest output (JSON text, bytes) skipq_job_output() takes. (1.1) */
#define SKIPQ_OUTPUT_SIZE 65536
/* How long, after should_stop turns true at shutdown, the host still waits
 * for a handler to return and records what it returns (ms). (1.1) */
#define SKIPQ_STOP_WINDOW_MS 2000

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
    SKIPQ_PLUGIN_ENOMEM = 4,
    SKIPQ_PLUGIN_ENOENT = 5, /* (1.1) no value for the key, and no default */
    SKIPQ_PLUGIN_ETOOBIG = 6 /* (1.1) output longer than SKIPQ_OUTPUT_SIZE */
} skipq_plugin_rc;

/*
 * (1.1) Declared configuration keys. A plugin that declares its keys (a
 * NULL-terminated array given to SKIPQ_PLUGIN_KEYS) gets its [plugin NAME]
 * section checked by the host, at load and on SIGHUP, like every other
 * section: a key it did not declare, or a value that is not of its type or
 * outside [min, max], stops the host with FILE:LINE and exit status 2 (on
 * SIGHUP: logged, and the running configuration kept). `path` is the host's
 * and never declared. A plugin that declares nothing (a 1.0 plugin, or
 * SKIPQ_PLUGIN) gets every key passed through unchecked, as in 1.0.
 *
 * Types and how a value is written in the INI file:
 *   STRING   any text
 *   INT      a whole number
 *   BOOL     on/off, true/false, yes/no, 1/0
 *   DURATION 500ms, 10s, 5m, 2h, 1d (a bare number is seconds); read in ms
 *   SIZE     65536, 64KiB, 16MiB, 1GiB; read in bytes
 * min and max bound INT, DURATION (ms) and SIZE (bytes) values, defaults
 * included; min == max == 0 means no bound but the type's (DURATION and
 * SIZE are never negative).
 */
typedef enum skipq_config_type {
    SKIPQ_CONFIG_STRING = 0,
    SKIPQ_CONFIG_INT = 1,
    SKIPQ_CONFIG_BOOL = 2,
    SKIPQ_CONFIG_DURATION = 3,
    SKIPQ_CONFIG_SIZE = 4
} skipq_config_type;

typedef struct skipq_config_key {
    const char *name;       /* NULL ends the array */
    skipq_config_type type;
    const char *def;        /* the default, written as in the INI ("10s"); NULL: none */
    int64_t min, max;       /* see above */
    const char *help;       /* one line, for `skipq exec --help-plugin` and the docs */
} skipq_config_key;

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
    /* 1.1: a plugin built for 1.1 only loads in a host whose table has these */
    int (*config_value)(skipq_plugin *p, const char *key, skipq_config_type type, int64_t *out);
    void (*config_verror)(skipq_plugin *p, const char *key, const char *fmt, va_list ap);
    int64_t (*job_deadline_ms)(const skipq_job *job);
    int (*job_output)(skipq_job *job, const char *json, size_t len);
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
 * string is owned by the host and lives until shutdown() returns. (1.1: for
 * a declared key not in the section, its default.)
 */
static inline const char *skipq_config(skipq_plugin *p, const char *key)
{
    return p->api->config_get(p, key);
}

/*
 * (1.1) Typed getters, init only: the value of `key` (its default when the
 * section does not set it) parsed as the type, into *out. Returns
 * SKIPQ_PLUGIN_OK; SKIPQ_PLUGIN_ENOENT when there is neither a value nor a
 * default (*out untouched: set your fallback first); SKIPQ_PLUGIN_EINVAL
 * when the value is not of that type (never for a declared key of that
 * type: the host checked it before init). A key need not be declared.
 */
static inline int skipq_config_int(skipq_plugin *p, const char *key, int64_t *out)
{
    return p->api->config_value(p, key, SKIPQ_CONFIG_INT, out);
}
static inline int skipq_config_bool(skipq_plugin *p, const char *key, int *out)
{
    int64_t v;
    int rc = p->api->config_value(p, key, SKIPQ_CONFIG_BOOL, &v);
    if (rc == SKIPQ_PLUGIN_OK)
        *out = (int)v;
    return rc;
}
static inline int skipq_config_duration_ms(skipq_plugin *p, const char *key, int64_t *out)
{
    return p->api->config_value(p, key, SKIPQ_CONFIG_DURATION, out);
}
static inline int skipq_config_size(skipq_plugin *p, const char *key, int64_t *out)
{
    return p->api->config_value(p, key, SKIPQ_CONFIG_SIZE, out);
}

/*
 * (1.1) Report a configuration error of your own (a URL that does not
 * parse, two keys that contradict each other), in init, then return
 * non-zero from init. The host prints it as every config error:
 * "FILE:LINE: [plugin NAME] KEY: MESSAGE" (the key's line, else the
 * section's; key may be NULL) and exits with status 2.
 */
__attribute__((format(printf, 3, 4))) static inline void skipq_config_error(skipq_plugin *p, const char *key,
                                                                            const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    p->api->config_verror(p, key, fmt, ap);
    va_end(ap);
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
 * grace period ran out. Long handlers should poll it and return early. One
 * atomic load; see "THE STOP CONTRACT" at the top for what becomes of the
 * return that follows.
 */
static inline int skipq_job_should_stop(const skipq_job *job) { return job->api->job_should_stop(job); }

/*
 * (1.1) Milliseconds left before this handler is told to stop by the kind's
 * `timeout` or, once the host is shutting down, by the end of its grace
 * period (whichever is sooner; 0 when already past); -1 when neither
 * applies. Size your own I/O timeouts under it.
 */
static inline int64_t skipq_job_deadline_ms(const skipq_job *job) { return job->api->job_deadline_ms(job); }

/*
 * (1.1) The attempt's result: `json` (`len` bytes, not NUL-terminated
 * necessarily) must be one valid JSON value of at most SKIPQ_OUTPUT_SIZE
 * bytes. It is recorded in skipq.job_executions.output (jsonb) of this
 * attempt when its outcome is recorded -- whatever the outcome -- and shown
 * by `skipq jobs show`. A later call replaces an earlier one. Returns
 * SKIPQ_PLUGIN_OK, SKIPQ_PLUGIN_EINVAL (not JSON: nothing kept),
 * SKIPQ_PLUGIN_ETOOBIG or SKIPQ_PLUGIN_ENOMEM.
 */
static inline int skipq_job_output(skipq_job *job, const char *json, size_t len)
{
    return job->api->job_output(job, json, len);
}

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
    /* 1.1: the declared keys (NULL-terminated), or NULL for none declared. */
    const skipq_config_key *config_keys;
} skipq_plugin_info;

#define SKIPQ_PLUGIN_SYMBOL "skipq_plugin_describe"

/*
 * Declare the plugin, once, in one source file:
 *
 *     SKIPQ_PLUGIN("mail", "1.0.0", mail_init, mail_shutdown);
 *
 * or, declaring its keys (1.1):
 *
 *     static const skipq_config_key mail_keys[] = {
 *         {"smtp_url", SKIPQ_CONFIG_STRING, "smtp://localhost", 0, 0, "where to send"},
 *         {"timeout", SKIPQ_CONFIG_DURATION, "10s", 1, 600000, "per message"},
 *         {NULL}};
 *     SKIPQ_PLUGIN_KEYS("mail", "1.0.0", mail_init, mail_shutdown, mail_keys);
 */
#define SKIPQ_PLUGIN_KEYS(name_, version_, init_, shutdown_, keys_)                       \
    __attribute__((visibility("default"))) const skipq_plugin_info *skipq_plugin_describe(void); \
    __attribute__((visibility("default"))) const skipq_plugin_info *skipq_plugin_describe(void) \
    {                                                                                      \
        static const skipq_plugin_info info = {SKIPQ_ABI_MAGIC, SKIPQ_ABI_MAJOR,            \
                                               SKIPQ_ABI_MINOR, sizeof(skipq_plugin_info), \
                                               (name_), (version_), (init_), (shutdown_),  \
                                               (keys_)};                                   \
        return &info;                                                                      \
    }
#define SKIPQ_PLUGIN(name_, version_, init_, shutdown_) SKIPQ_PLUGIN_KEYS(name_, version_, init_, shutdown_, NULL)

#ifdef __cplusplus
}
#endif
#endif /* SKIPQ_PLUGIN_H */
