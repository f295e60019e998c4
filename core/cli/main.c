/*
 * main.c -- the skipq command line: one binary, one function per command.
 *
 * Exit codes are a contract scripts rely on: 0 success, 1 runtime failure
 * (database unreachable, SQL refused), 2 usage, configuration or bad input.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/admin.h"
#include "cli/exec.h"
#include "cli/ndjson.h"
#include "client/migrate.h"
#include "common/config.h"
#include "common/conninfo.h"
#include "common/db.h"
#include "host/host.h"
#include "host/wproc.h"
#include "common/log.h"
#include "common/options_doc.h"
#include "skipq/plugin.h"
#include "skipq/skipq.h"
#include "cli/stats.h"
#include "common/util.h"
#include "web/web.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2
#define OPT_DATABASE 0x100 /* --database: no short form */

struct common {
    const char *config_path;
    const char *db;
    const char *database; /* --database NAME */
    bool every_database;  /* `skipq run`: without --database, serve every database of the file */
    struct sq_config *cfg;
};

static const char USAGE[] =
    "usage: skipq COMMAND [OPTIONS]\n"
    "\n"
    "commands:\n"
    "  migrate   create or upgrade the skipq schema\n"
    "  enqueue   add a job\n"
    "  run       run a host: load plugins, claim and run jobs\n"
    "  stats     show jobs per queue and kind, and the hosts serving them\n"
    "  top       a live view of throughput, backlog and hosts\n"
    "  jobs      list jobs, or show one with every attempt\n"
    "  retry     put dead jobs back to pending\n"
    "  cancel    cancel blocked, pending or running jobs\n"
    "  cron      show the cron schedules and their last ticks\n"
    "  limits    show per-kind limits, or clear one\n"
    "  pause     stop new claims of a queue or a kind\n"
    "  resume    let hosts claim a paused queue or kind again\n"
    "  web       serve the dashboard (queues, jobs, dead jobs, hosts) over HTTP\n"
    "  exec      run one handler of a plugin once, in this process (test and debug plugins)\n"
    "  version   print the version\n"
    "\n"
    "common options:\n"
    "  -c, --config FILE   the host's INI file\n"
    "      --db CONNINFO   database (URI or conninfo); overrides the INI's [database],\n"
    "                      which overrides $DATABASE_URL, which overrides libpq's PG* variables\n"
    "      --database NAME the INI's [database NAME] section (default: [database]), for a\n"
    "                      file that declares several; `run` serves them all without it\n"
    "  -h, --help          help for a command: skipq COMMAND --help\n"
    "\n"
    "exit status: 0 ok, 1 runtime failure, 2 usage, configuration or input error\n";

static int usage_error(const char *cmd, const char *fmt, const char *arg)
{
    char msg[1024]; /* arg is the user's, but a terminal is no place for its controls */
    snprintf(msg, sizeof msg, fmt, arg);
    fprintf(stderr, "skipq %s: ", cmd);
    sq_fput_text(stderr, msg, SIZE_MAX, 0);
    fprintf(stderr, "\nTry 'skipq %s --help'.\n", cmd);
    return EXIT_USAGE;
}

/* A flag's value refused: what is wrong with it, then what it must be. */
static int bad_flag(const char *cmd, const char *flag, const char *arg, const char *why, const char *want)
{
    fprintf(stderr, "skipq %s: %s: \"", cmd, flag);
    sq_fput_text(stderr, arg, SIZE_MAX, 0);
    fprintf(stderr, "\" %s; %s\nTry 'skipq %s --help'.\n", why, want, cmd);
    return EXIT_USAGE;
}

/* A whole-number flag within [min, max]: 0, or the exit code. */
static int int_flag(const char *cmd, const char *flag, const char *arg, int64_t min, int64_t max, int64_t *out)
{
    const char *why = sq_parse_int_why(arg, min, max, out);
    char want[96];
    snprintf(want, sizeof want, "it must be a whole number from %lld to %lld", (long long)min, (long long)max);
    return why ? bad_flag(cmd, flag, arg, why, want) : 0;
}

/* A duration flag (util.h: no sign, nan, inf or overflow): 0, or the exit code. */
static int duration_flag(const char *cmd, const char *flag, const char *arg, int64_t *out)
{
    const char *why = sq_parse_duration_why(arg, out);
    return why ? bad_flag(cmd, flag, arg, why, "give a duration such as 30, 30s, 500ms, 5m") : 0;
}

/* "skipq CMD: MSG" on stderr. MSG often quotes database text (a server
 * message repeats a value), so it is made visible first (util.h). */
static void print_error(const char *cmd, const char *msg)
{
    fprintf(stderr, "skipq %s: ", cmd);
    sq_fput_text(stderr, msg, SIZE_MAX, 0);
    fputc('\n', stderr);
}

/*
 * A password in --db is in the process list (/proc/PID/cmdline), which
 * every local user can read, for as long as skipq runs. Warn, naming the
 * routes that keep it out, and blank it in place, as database clients do:
 * the argument moves to the heap (getopt reads it there) and the bytes ps
 * shows become 'x'. Until this runs the password is visible, so it is a
 * mitigation, not a fix.
 */
static void scrub_db_passwords(int argc, char **argv)
{
    bool warned = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0)
            break;
        size_t off = strncmp(argv[i], "--db=", 5) == 0 ? 5 : 0;
        if (off == 0 && (strcmp(argv[i], "--db") != 0 || ++i >= argc))
            continue;
        struct sq_span pw[4];
        size_t n = sq_conninfo_passwords(argv[i] + off, pw, 4);
        char *copy = n ? strdup(argv[i]) : NULL;
        if (!copy)
            continue;
        if (!warned)
            fputs("skipq: warning: the --db value holds a password, which other local users can read in the process "
                  "list; skipq blanks it once it starts, but keep it off the command line: use a password file "
                  "(~/.pgpass, or $PGPASSFILE), $PGPASSWORD, or [database] in an INI file of mode 0600\n",
                  stderr);
        warned = true;
        for (size_t k = 0; k < n && k < 4; k++)
            memset(argv[i] + off + pw[k].start, 'x', pw[k].len);
        argv[i] = copy;
    }
}

/*
 * The connection string about to be used, when it comes from --db or
 * $DATABASE_URL (a [database] url was checked with the INI): a malformed
 * one is an input error, described without its text (conninfo.c).
 */
static int check_db_string(const struct common *c)
{
    const char *url = getenv("DATABASE_URL"), *what = NULL, *s = NULL;
    if (c->db && *c->db)
        what = "--db", s = c->db;
    else if (!(c->cfg && c->cfg->database.ndb > 0) && url && *url)
        what = "DATABASE_URL", s = url;
    char why[256];
    if (s && !sq_conninfo_check(s, why, sizeof why)) {
        fprintf(stderr, "skipq: %s: %s\n", what, why);
        return EXIT_USAGE;
    }
    return 0;
}

/*
 * Load -c FILE if given, cut to the database --database names. A file that
 * declares only named databases has no default one: a command must say
 * which (`skipq run` serves them all), rather than fall back on the
 * environment's.
 */
static int load_config(struct common *c)
{
    if (!c->config_path) {
        if (!c->database)
            return 0;
        fprintf(stderr, "skipq: --database %s names a section of the INI file: give it with -c FILE\n", c->database);
        return EXIT_USAGE;
    }
    char err[1024];
    if (c->every_database && !c->database) { /* skipq run: the whole file */
        if (!(c->cfg = sq_config_load(c->config_path, err, sizeof err))) {
            fprintf(stderr, "skipq: %s\n", err);
            return EXIT_USAGE;
        }
        if (c->cfg->ndatabases && c->db) {
            fprintf(stderr, "skipq: %s declares several databases: --db replaces one of them; say which with "
                            "--database NAME\n", c->config_path);
            sq_config_free(c->cfg);
            c->cfg = NULL;
            return EXIT_USAGE;
        }
        return 0;
    }
    if (!(c->cfg = sq_config_load_one(c->config_path, c->database, c->db != NULL, err, sizeof err))) {
        fprintf(stderr, "skipq: %s\n", err);
        return EXIT_USAGE;
    }
    return 0;
}

static PGconn *connect_db(struct common *c, const char *application_name);

/* Load -c FILE (if given) and connect; *rc gets the exit code on failure. */
static PGconn *open_db(struct common *c, const char *application_name, int *rc)
{
    if ((*rc = load_config(c)) != 0)
        return NULL;
    if ((*rc = check_db_string(c)) != 0) {
        sq_config_free(c->cfg);
        c->cfg = NULL;
        return NULL;
    }
    PGconn *conn = connect_db(c, application_name);
    sq_config_free(c->cfg);
    c->cfg = NULL;
    if (!conn)
        *rc = EXIT_RUNTIME;
    return conn;
}

static PGconn *connect_db(struct common *c, const char *application_name)
{
    struct sq_dbparams p;
    char err[1024];
    if (!sq_dbparams_build(&p, c->cfg, c->db, application_name)) {
        fprintf(stderr, "skipq: out of memory\n");
        return NULL;
    }
    PGconn *conn = sq_db_connect(&p, err, sizeof err);
    sq_dbparams_free(&p);
    if (!conn) {
        fputs("skipq: cannot connect to the database: ", stderr);
        sq_fput_text(stderr, err, SIZE_MAX, 0);
        fputc('\n', stderr);
    }
    return conn;
}

/* getopt_long for a command, with the common options folded in. Returns -1
 * when done, '?' on error, 'h' for help, or the option's val. */
static int next_opt(int argc, char **argv, const char *shortopts, const struct option *extra, struct common *c)
{
    struct option longopts[24];
    int n = 0;
    longopts[n++] = (struct option){"config", required_argument, NULL, 'c'};
    longopts[n++] = (struct option){"db", required_argument, NULL, 'D'};
    longopts[n++] = (struct option){"database", required_argument, NULL, OPT_DATABASE};
    longopts[n++] = (struct option){"help", no_argument, NULL, 'h'};
    for (; extra && extra->name && n < 23; extra++)
        longopts[n++] = *extra;
    longopts[n] = (struct option){0, 0, 0, 0};
    char so[64];
    snprintf(so, sizeof so, "c:h%s", shortopts);
    for (;;) {
        int o = getopt_long(argc, argv, so, longopts, NULL);
        if (o == 'c')
            c->config_path = optarg;
        else if (o == 'D')
            c->db = optarg;
        else if (o == OPT_DATABASE)
            c->database = optarg;
        else
            return o;
    }
}

/*
 * For commands with no options of their own: parse the common ones.
 * Returns -1 to go on, or the exit code (0 after --help).
 */
static int common_options_only(const char *cmd, const char *help, int argc, char **argv, struct common *c)
{
    int o;
    while ((o = next_opt(argc, argv, "", NULL, c)) != -1) {
        if (o == 'h') {
            fputs(help, stdout);
            return 0;
        }
        return usage_error(cmd, "%s", "invalid option");
    }
    return -1;
}

/* For commands whose only option of their own is --json: parse it and the
 * common ones. Returns -1 to go on, or the exit code (0 after --help). */
static int json_options_only(const char *cmd, const char *help, int argc, char **argv, struct common *c, bool *json)
{
    static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, {0, 0, 0, 0}};
    int o;
    while ((o = next_opt(argc, argv, "", opts, c)) != -1) {
        if (o == 'h') {
            fputs(help, stdout);
            return 0;
        }
        if (o != 'j')
            return usage_error(cmd, "%s", "invalid option");
        *json = true;
    }
    return -1;
}

/* ---- migrate -------------------------------------------------------------- */

/* Migrate's wait for another session's lock: say who holds it. */
static void migrate_waiting(const char *msg, void *arg)
{
    (void)arg;
    print_error("migrate", msg);
}

static int cmd_migrate(int argc, char **argv)
{
    static const char help[] = "usage: skipq migrate [-c FILE [--database NAME]] [--db CONNINFO] [--wait DURATION]\n\n"
                               "Create the skipq schema or bring it up to date. Safe to run again, and\n"
                               "safe when several hosts run it at once.\n\n"
                               "      --wait DURATION  how long to wait for another session's migration lock\n"
                               "                       (default 60s; 0: not at all); it says who holds it,\n"
                               "                       and fails naming them at the end\n";
    static const struct option opts[] = {{"wait", required_argument, NULL, 'W' + 256}, {0, 0, 0, 0}};
    struct common c = {0};
    int64_t wait_ms = SQ_MIGRATE_WAIT_MS;
    int o;
    while ((o = next_opt(argc, argv, "", opts, &c)) != -1) {
        if (o == 'h') {
            fputs(help, stdout);
            return 0;
        }
        if (o != 'W' + 256)
            return usage_error("migrate", "%s", "invalid option");
        if (duration_flag("migrate", "--wait", optarg, &wait_ms))
            return EXIT_USAGE;
    }
    if (optind < argc)
        return usage_error("migrate", "unexpected argument \"%s\"", argv[optind]);
    int rc;
    PGconn *conn = open_db(&c, "skipq migrate", &rc);
    if (!conn)
        return rc;
    char err[SKIPQ_ERRBUF_SIZE];
    int applied = 0;
    skipq_rc r = sq_migrate(conn, wait_ms, migrate_waiting, NULL, &applied, err, sizeof err);
    PQfinish(conn);
    if (r != SKIPQ_OK) {
        print_error("migrate", err);
        return EXIT_RUNTIME;
    }
    printf("skipq schema at version %d (%d migration%s applied)\n", skipq_schema_version_required(), applied,
           applied == 1 ? "" : "s");
    return 0;
}

/* ---- enqueue ---------------------------------------------------------------- */

#define FILE_BATCH_JOBS 5000
#define FILE_BATCH_BYTES (8u << 20)
#define OID_JSONB 3802
#define OID_JSONB_ARRAY 3807
#define ARRAY_HEADER 20 /* ndim, flags, element type, size, lower bound */

/*
 * One batch of lines as a binary jsonb[] parameter. Each line reaches the
 * server as an array element of its own and is parsed there on its own, so
 * a line is exactly one JSON value or the batch is refused. (Joining the
 * lines into one JSON text, as skipq once did, let two bad lines make good
 * jobs: `{"ids":[1` and `2]},{...}` joined into valid JSON.) The binary
 * form needs no quoting, so building it costs a copy per line.
 */
struct file_batch {
    char *buf; /* header, then per line: int32 length, jsonb version 1, text */
    size_t len, cap;
    long *lines;      /* file line of each element */
    size_t *offsets;  /* where each element's text starts in buf */
    size_t n;
};

static void put32(char *p, uint32_t v)
{
    p[0] = (char)(v >> 24);
    p[1] = (char)(v >> 16);
    p[2] = (char)(v >> 8);
    p[3] = (char)v;
}

static uint32_t get32(const char *p)
{
    const unsigned char *u = (const unsigned char *)p;
    return (uint32_t)u[0] << 24 | (uint32_t)u[1] << 16 | (uint32_t)u[2] << 8 | u[3];
}

static void batch_reset(struct file_batch *b)
{
    put32(b->buf, 1);          /* one dimension */
    put32(b->buf + 4, 0);      /* no NULLs */
    put32(b->buf + 8, OID_JSONB);
    put32(b->buf + 16, 1);     /* lower bound; the size goes in at flush */
    b->len = ARRAY_HEADER;
    b->n = 0;
}

static bool batch_append(struct file_batch *b, const char *line, size_t n, long lineno)
{
    if (b->len + n + 5 > b->cap) {
        size_t cap = (b->len + n + 5) * 2;
        char *nb = realloc(b->buf, cap);
        if (!nb)
            return false;
        b->buf = nb;
        b->cap = cap;
    }
    put32(b->buf + b->len, (uint32_t)n + 1);
    b->buf[b->len + 4] = 1; /* jsonb's binary format: a version byte, then the text */
    memcpy(b->buf + b->len + 5, line, n);
    b->offsets[b->n] = b->len + 5;
    b->lines[b->n++] = lineno;
    b->len += n + 5;
    return true;
}

/* The server refused the batch: the line to blame and why. enqueue_many
 * names its element ("job N: ..."); a JSON error names nothing, so each
 * line is parsed again on its own until one fails. */
static long blame_line(PGconn *conn, const struct file_batch *b, const char *err, char *why, size_t whylen)
{
    static const char tag[] = "enqueue_many: job ";
    const char *j = strstr(err, tag);
    char *end = NULL;
    long i = j ? strtol(j + sizeof tag - 1, &end, 10) : -1;
    if (i >= 0 && (size_t)i < b->n && end != j + sizeof tag - 1) {
        /* "skipq.enqueue_many: job 3: kind must be ..." -> "kind must be ..." */
        snprintf(why, whylen, "%s", strncmp(end, ": ", 2) == 0 ? end + 2 : err);
        return b->lines[i];
    }
    for (size_t k = 0; k < b->n; k++) {
        const char *text = b->buf + b->offsets[k];
        char *line = strndup(text, get32(text - 5) - 1);
        const char *params[1] = {line};
        PGresult *r = line ? PQexecParams(conn, "SELECT $1::pg_catalog.jsonb", 1, NULL, params, NULL, NULL, 0) : NULL;
        bool bad = r && PQresultStatus(r) != PGRES_TUPLES_OK;
        if (bad) {
            const char *detail = PQresultErrorField(r, PG_DIAG_MESSAGE_DETAIL);
            char m[256];
            sq_db_error(conn, r, m, sizeof m);
            snprintf(why, whylen, "invalid JSON (each line must be one JSON object): %s%s%s", m,
                     detail ? ": " : "", detail ? detail : "");
        }
        PQclear(r);
        free(line);
        if (bad)
            return b->lines[k];
    }
    return 0;
}

/* Send one batch; 0, or the exit code once the failure is reported and
 * the transaction rolled back. */
static int flush_batch(PGconn *conn, struct file_batch *b, const char *path, int64_t *total)
{
    put32(b->buf + 12, (uint32_t)b->n);
    const char *values[1] = {b->buf};
    const Oid types[1] = {OID_JSONB_ARRAY};
    const int lengths[1] = {(int)b->len}, formats[1] = {1};
    PGresult *res = PQexecParams(conn,
                                 "SELECT pg_catalog.count(*)"
                                 "  FROM skipq.enqueue_many(pg_catalog.to_jsonb($1::pg_catalog.jsonb[]))",
                                 1, types, values, lengths, formats, 0);
    char err[SKIPQ_ERRBUF_SIZE], why[SKIPQ_ERRBUF_SIZE + 64], msg[2 * SKIPQ_ERRBUF_SIZE];
    if (PQresultStatus(res) == PGRES_TUPLES_OK && strtoll(PQgetvalue(res, 0, 0), NULL, 10) == (long long)b->n) {
        *total += (int64_t)b->n;
        PQclear(res);
        batch_reset(b);
        return 0;
    }
    bool failed = PQresultStatus(res) != PGRES_TUPLES_OK;
    if (failed)
        sq_db_error(conn, res, err, sizeof err);
    else
        snprintf(err, sizeof err, "the server enqueued %s jobs for %zu lines", PQgetvalue(res, 0, 0), b->n);
    PQclear(res);
    const char *st = sq_db_last_sqlstate();
    bool input = failed && strncmp(st, "22", 2) == 0; /* data exception: the file's fault */
    PQclear(PQexec(conn, "ROLLBACK"));
    long at = input ? blame_line(conn, b, err, why, sizeof why) : 0;
    if (at)
        snprintf(msg, sizeof msg, "%s:%ld: %s", path, at, why);
    else if (failed && (!strcmp(st, "42883") || !strcmp(st, "3F000") || !strcmp(st, "42P01")))
        snprintf(msg, sizeof msg, "%s: the skipq schema is missing or outdated (run `skipq migrate`): %s", path, err);
    else
        snprintf(msg, sizeof msg, "%s: %s", path, err);
    print_error("enqueue", msg);
    print_error("enqueue", "nothing was enqueued");
    return input ? EXIT_USAGE : EXIT_RUNTIME;
}

/*
 * `skipq enqueue --file`: one job object per line, all in one transaction
 * (the file is enqueued whole or not at all), sent in batches through
 * skipq.enqueue_many(), with a progress line every second on stderr. A
 * line is checked here for what the server cannot see (a NUL byte ends a
 * C string, so it would silently cut the line) and parsed by the server
 * on its own (struct file_batch); the per-line check is cli/ndjson.c.
 */
static int enqueue_file(PGconn *conn, const char *path)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "r");
    if (!f) {
        fprintf(stderr, "skipq enqueue: cannot open %s: %s\n", path, strerror(errno));
        return EXIT_USAGE;
    }
    struct file_batch b = {.buf = malloc(4096), .cap = 4096};
    b.lines = calloc(FILE_BATCH_JOBS, sizeof *b.lines);
    b.offsets = calloc(FILE_BATCH_JOBS, sizeof *b.offsets);
    char *line = NULL;
    size_t cap = 0;
    long lineno = 0;
    int64_t total = 0, t0 = sq_now_ms(), last_report = t0;
    int rc = EXIT_RUNTIME;
    char err[SKIPQ_ERRBUF_SIZE];
    if (!b.buf || !b.lines || !b.offsets) {
        fprintf(stderr, "skipq enqueue: out of memory\n");
        goto out;
    }
    batch_reset(&b);
    if (!sq_db_exec(conn, "BEGIN", err, sizeof err)) {
        print_error("enqueue", err);
        goto out;
    }
    for (;;) {
        ssize_t got = getline(&line, &cap, f);
        if (got >= 0) {
            lineno++;
            char *t = sq_ndjson_line(line, (size_t)got, err, sizeof err);
            if (!t) {
                char msg[SKIPQ_ERRBUF_SIZE + 700];
                snprintf(msg, sizeof msg, "%s:%ld: %s", path, lineno, err);
                print_error("enqueue", msg);
                rc = EXIT_USAGE;
                goto rollback;
            }
            if (!*t)
                continue;
            if (!batch_append(&b, t, strlen(t), lineno)) {
                fprintf(stderr, "skipq enqueue: out of memory\n");
                goto rollback;
            }
        }
        if (b.n > 0 && (got < 0 || b.n == FILE_BATCH_JOBS || b.len >= FILE_BATCH_BYTES)) {
            if ((rc = flush_batch(conn, &b, path, &total)) != 0)
                goto out;
            rc = EXIT_RUNTIME;
            int64_t now = sq_now_ms();
            if (now - last_report >= 1000) {
                fprintf(stderr, "skipq enqueue: %" PRId64 " jobs sent (%.0f/s), not yet committed\n", total,
                        total * 1000.0 / (double)(now - t0 ? now - t0 : 1));
                last_report = now;
            }
        }
        if (got < 0)
            break;
    }
    if (ferror(f)) {
        fprintf(stderr, "skipq enqueue: cannot read %s: %s\n", path, strerror(errno));
        goto rollback;
    }
    if (!sq_db_exec(conn, "COMMIT", err, sizeof err)) {
        fprintf(stderr, "skipq enqueue: commit failed, nothing was enqueued: ");
        sq_fput_text(stderr, err, SIZE_MAX, 0);
        fputc('\n', stderr);
        goto out;
    }
    printf("%" PRId64 "\n", total);
    rc = 0;
    goto out;
rollback:
    PQclear(PQexec(conn, "ROLLBACK"));
    fprintf(stderr, "skipq enqueue: nothing was enqueued\n");
out:
    free(b.buf);
    free(b.lines);
    free(b.offsets);
    free(line);
    if (f != stdin)
        fclose(f);
    return rc;
}

static char *read_stdin(void)
{
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t r = fread(buf + n, 1, cap - n - 1, stdin);
        n += r;
        if (r == 0)
            break;
        if (n + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb)
                free(buf);
            buf = nb;
        }
    }
    if (buf)
        buf[n] = '\0';
    return buf;
}

/* Job ids collected from repeated, comma-separated --depends-on options. */
struct id_list {
    int64_t *v;
    size_t n, cap;
};

/* Add "ID[,ID...]" to l; the exit code (2 for a bad id), or 0. */
static int id_list_parse(struct id_list *l, const char *arg)
{
    char *copy = strdup(arg);
    if (!copy) {
        fprintf(stderr, "skipq enqueue: out of memory\n");
        return EXIT_RUNTIME;
    }
    int rc = 0;
    char *save = NULL;
    for (char *tok = strtok_r(copy, ",", &save); tok && !rc; tok = strtok_r(NULL, ",", &save)) {
        int64_t id;
        if (!sq_parse_int(sq_trim(tok), 1, INT64_MAX, &id)) {
            rc = usage_error("enqueue", "--depends-on: \"%s\" is not a job id", tok);
            break;
        }
        if (l->n == l->cap) {
            size_t cap = l->cap ? l->cap * 2 : 8;
            int64_t *nv = realloc(l->v, cap * sizeof *nv);
            if (!nv) {
                fprintf(stderr, "skipq enqueue: out of memory\n");
                rc = EXIT_RUNTIME;
                break;
            }
            l->v = nv;
            l->cap = cap;
        }
        l->v[l->n++] = id;
    }
    if (!rc && l->n == 0)
        rc = usage_error("enqueue", "--depends-on: \"%s\" names no job id", arg);
    free(copy);
    return rc;
}

static int enqueue_one(struct common *cm, skipq_enqueue_opts *eo, int argc, char **argv);

static int cmd_enqueue(int argc, char **argv)
{
    static const char help[] =
        "usage: skipq enqueue KIND [JSON] [OPTIONS]\n"
        "       skipq enqueue --file FILE [-c FILE [--database NAME]] [--db CONNINFO]\n\n"
        "Add one job of KIND with the JSON payload (default {}; '-' reads it from\n"
        "standard input) and print its id.\n\n"
        "With --file, FILE ('-': standard input) holds one job per line as a JSON\n"
        "object: {\"kind\": \"...\", \"payload\": {...}, \"queue\": \"...\", \"priority\": N,\n"
        "\"delay_ms\": N or \"run_at\": \"timestamp\", \"max_attempts\": N, \"unique_key\": \"...\",\n"
        "\"unique_for_ms\": N, \"ordering_key\": \"...\", \"depends_on\": [ID, ...]} (only kind is\n"
        "required). The file is enqueued in one transaction, whole or not at all; a bad\n"
        "line is reported as FILE:LINE. Prints the number of jobs added.\n\n"
        "  -f, --file FILE         enqueue every job in FILE\n"
        "  -q, --queue NAME        queue (default \"default\")\n"
        "  -p, --priority N        higher runs first (default 0)\n"
        "  -d, --delay DURATION    run no earlier than now + DURATION (30, 30s, 500ms, 5m)\n"
        "  -m, --max-attempts N    attempts before the job is dead (default: the INI's\n"
        "                          [kind KIND] max_attempts, else 5)\n"
        "  -u, --unique-key KEY    while a job of KIND with KEY is blocked, pending or running,\n"
        "                          print its id instead of adding a job (and say so on\n"
        "                          standard error)\n"
        "      --unique-for DURATION  with --unique-key: hold KEY this long after the\n"
        "                          enqueue, even once the job has finished (e.g. 1h)\n"
        "  -o, --ordering-key KEY  jobs of the queue with the same KEY run one at a time, in\n"
        "                          enqueue order\n"
        "  -a, --depends-on IDS    run only after jobs IDS (comma-separated, or repeat the\n"
        "                          option) are all done; dead if one dies or is cancelled\n"
        "  -c, --config FILE       read [database] and [kind] defaults from FILE\n"
        "      --db CONNINFO       database to use\n";
    static const struct option opts[] = {{"queue", required_argument, NULL, 'q'},
                                         {"priority", required_argument, NULL, 'p'},
                                         {"delay", required_argument, NULL, 'd'},
                                         {"max-attempts", required_argument, NULL, 'm'},
                                         {"file", required_argument, NULL, 'f'},
                                         {"unique-key", required_argument, NULL, 'u'},
                                         {"unique-for", required_argument, NULL, 'U' + 256},
                                         {"ordering-key", required_argument, NULL, 'o'},
                                         {"depends-on", required_argument, NULL, 'a'},
                                         {0, 0, 0, 0}};
    struct common c = {0};
    skipq_enqueue_opts eo = {0};
    struct id_list parents = {0};
    int existing = 0;
    eo.existing_out = &existing;
    const char *file = NULL;
    bool per_job_option = false;
    int64_t v;
    int o;
    /* Permute so options may follow KIND and JSON. */
    optind = 1;
    int rc = 0;
    while (rc == 0 && (o = next_opt(argc, argv, "q:p:d:m:f:u:o:a:", opts, &c)) != -1) {
        per_job_option |= o != 'f' && o != 'h' && o != '?';
        switch (o) {
        case 'h':
            fputs(help, stdout);
            free(parents.v);
            return 0;
        case 'u':
            eo.unique_key = optarg;
            break;
        case 'U' + 256:
            rc = duration_flag("enqueue", "--unique-for", optarg, &eo.unique_for_ms);
            if (!rc && eo.unique_for_ms <= 0)
                rc = bad_flag("enqueue", "--unique-for", optarg, "is not positive", "give e.g. 30s, 5m, 1h");
            break;
        case 'o':
            eo.ordering_key = optarg;
            break;
        case 'a':
            rc = id_list_parse(&parents, optarg);
            break;
        case 'f':
            file = optarg;
            break;
        case 'q':
            eo.queue = optarg;
            break;
        case 'p':
            if (!(rc = int_flag("enqueue", "--priority", optarg, -1000000, 1000000, &v)))
                eo.priority = (int)v;
            break;
        case 'd':
            rc = duration_flag("enqueue", "--delay", optarg, &eo.delay_ms);
            break;
        case 'm':
            if (!(rc = int_flag("enqueue", "--max-attempts", optarg, 1, 100000, &v)))
                eo.max_attempts = (int)v;
            break;
        default:
            rc = usage_error("enqueue", "%s", "invalid option");
        }
    }
    if (rc == 0 && eo.unique_for_ms && !eo.unique_key)
        rc = usage_error("enqueue", "%s", "--unique-for goes with --unique-key");
    if (rc == 0 && file && (optind < argc || per_job_option))
        rc = usage_error("enqueue", "%s", "--file takes no KIND, JSON or per-job options: each line says its own");
    if (rc) {
        free(parents.v);
        return rc;
    }
    eo.depends_on = parents.v;
    eo.depends_on_count = parents.n;
    if (file) {
        PGconn *conn = open_db(&c, "skipq enqueue", &rc);
        if (!conn)
            return rc;
        rc = enqueue_file(conn, file);
        PQfinish(conn);
        return rc;
    }
    rc = enqueue_one(&c, &eo, argc, argv);
    free(parents.v);
    return rc;
}

/* `skipq enqueue KIND [JSON]` once the options are parsed. */
static int enqueue_one(struct common *cm, skipq_enqueue_opts *eo, int argc, char **argv)
{
    struct common c = *cm;
    if (optind >= argc)
        return usage_error("enqueue", "%s", "missing KIND");
    const char *kind = argv[optind++];
    const char *payload = optind < argc ? argv[optind++] : "{}";
    if (optind < argc)
        return usage_error("enqueue", "unexpected argument \"%s\"", argv[optind]);
    int rc = load_config(&c);
    if (!rc && (rc = check_db_string(&c)) != 0)
        sq_config_free(c.cfg);
    if (rc)
        return rc;
    if (!eo->max_attempts && c.cfg) {
        const struct sq_kind_conf *k = sq_config_kind(c.cfg, kind);
        if (k && k->max_attempts)
            eo->max_attempts = k->max_attempts;
    }
    char *owned = NULL;
    if (strcmp(payload, "-") == 0 && !(payload = owned = read_stdin())) {
        sq_config_free(c.cfg);
        fprintf(stderr, "skipq enqueue: cannot read the payload from standard input\n");
        return EXIT_RUNTIME;
    }
    PGconn *conn = connect_db(&c, "skipq enqueue");
    sq_config_free(c.cfg);
    if (!conn) {
        free(owned);
        return EXIT_RUNTIME;
    }
    char err[SKIPQ_ERRBUF_SIZE];
    int64_t id = 0;
    skipq_rc r = skipq_enqueue(conn, kind, payload, eo, &id, err, sizeof err);
    PQfinish(conn);
    free(owned);
    if (r != SKIPQ_OK) {
        print_error("enqueue", err);
        return r == SKIPQ_EINVAL ? EXIT_USAGE : EXIT_RUNTIME;
    }
    if (*eo->existing_out) {
        fprintf(stderr, "skipq enqueue: existing: job %" PRId64 " holds unique key \"", id);
        sq_fput_text(stderr, eo->unique_key, SIZE_MAX, 0);
        fputs("\"; nothing added\n", stderr);
    }
    printf("%" PRId64 "\n", id);
    return 0;
}

/* ---- run -------------------------------------------------------------------------- */

static int cmd_run(int argc, char **argv)
{
    static const char help[] =
        "usage: skipq run -c FILE [--db CONNINFO] [--database NAME]\n\n"
        "Load the plugins named in FILE and run its thread groups until SIGTERM or\n"
        "SIGINT. The first signal stops claims and lets running jobs finish within\n"
        "[host] shutdown_grace; a second one exits at once.\n";
    struct common c = {0};
    int done = common_options_only("run", help, argc, argv, &c);
    if (done >= 0)
        return done;
    if (optind < argc)
        return usage_error("run", "unexpected argument \"%s\"", argv[optind]);
    if (!c.config_path)
        return usage_error("run", "%s", "missing -c FILE");
    c.every_database = true;
    /* From here on a SIGTERM means "stop cleanly", even during start-up:
     * keep it pending until the host's signal loop takes it. */
    sigset_t set;
    sq_host_block_signals(&set);
    int rc = load_config(&c);
    if (!rc && (rc = check_db_string(&c)) != 0)
        sq_config_free(c.cfg);
    if (rc)
        return rc;
    sq_wproc_run_if_asked(c.cfg, c.db); /* a host's worker process never returns from it */
    rc = sq_host_run(c.cfg, c.db);
    sq_config_free(c.cfg);
    return rc;
}

/* ---- jobs, retry, cancel --------------------------------------------------------------- */

/* Exit code for a failed admin statement: bad input (class 22) is 2. */
static int admin_failed(const char *cmd, const char *err)
{
    print_error(cmd, err);
    return strncmp(sq_db_last_sqlstate(), "22", 2) == 0 ? EXIT_USAGE : EXIT_RUNTIME;
}

/* Parse argv[optind..] as job ids into a malloc'd array. */
static int parse_ids(const char *cmd, int argc, char **argv, int64_t **ids, size_t *n)
{
    *n = 0;
    *ids = calloc((size_t)(argc > optind ? argc - optind : 1), sizeof **ids);
    if (!*ids)
        return EXIT_RUNTIME;
    for (int i = optind; i < argc; i++) {
        int64_t v;
        if (!sq_parse_int(argv[i], 1, INT64_MAX, &v)) {
            free(*ids);
            return usage_error(cmd, "\"%s\" is not a job id", argv[i]);
        }
        (*ids)[(*n)++] = v;
    }
    return 0;
}

/* What retry and cancel do once their arguments are parsed. */
struct id_action {
    const char *cmd;    /* "retry", "cancel" */
    const char *done;   /* printed after the count */
    const int64_t *ids; /* NULL: by filter */
    size_t n;
    const struct sq_job_filter *filter;
    int extra; /* retry only */
};

/* Connect, run the action, print "N job(s) ..."; returns the exit code. */
static int run_id_action(struct common *c, const struct id_action *a)
{
    char app[32], err[512];
    snprintf(app, sizeof app, "skipq %s", a->cmd);
    int rc;
    PGconn *conn = open_db(c, app, &rc);
    if (!conn)
        return rc;
    long r = strcmp(a->cmd, "retry") == 0 ? sq_admin_retry(conn, a->ids, a->n, a->filter, a->extra, err, sizeof err)
                                          : sq_admin_cancel(conn, a->ids, a->n, err, sizeof err);
    if (r < 0)
        rc = admin_failed(a->cmd, err);
    else
        printf("%ld job(s) %s\n", r, a->done);
    PQfinish(conn);
    return rc;
}

static int cmd_jobs(int argc, char **argv)
{
    static const char help[] =
        "usage: skipq jobs list [--status S] [--queue Q] [--kind K] [--limit N] [--json]\n"
        "       skipq jobs show ID [--json]\n\n"
        "list: the newest jobs first (default 50). show: one job, its payload and\n"
        "every attempt (worker, start, finish, duration, outcome, error).\n";
    static const struct option opts[] = {{"status", required_argument, NULL, 's'},
                                         {"queue", required_argument, NULL, 'q'},
                                         {"kind", required_argument, NULL, 'k'},
                                         {"limit", required_argument, NULL, 'n'},
                                         {"json", no_argument, NULL, 'j'},
                                         {0, 0, 0, 0}};
    struct common c = {0};
    struct sq_job_filter f = {0};
    bool json = false;
    int64_t v;
    int o;
    while ((o = next_opt(argc, argv, "", opts, &c)) != -1) {
        switch (o) {
        case 'h':
            fputs(help, stdout);
            return 0;
        case 's':
            f.status = optarg;
            break;
        case 'q':
            f.queue = optarg;
            break;
        case 'k':
            f.kind = optarg;
            break;
        case 'n':
            if (int_flag("jobs", "--limit", optarg, 1, 100000, &v))
                return EXIT_USAGE;
            f.limit = (int)v;
            break;
        case 'j':
            json = true;
            break;
        default:
            return usage_error("jobs", "%s", "invalid option");
        }
    }
    if (optind >= argc)
        return usage_error("jobs", "%s", "missing list or show");
    const char *sub = argv[optind++];
    int64_t id = 0;
    if (strcmp(sub, "show") == 0) {
        if (optind + 1 != argc || !sq_parse_int(argv[optind], 1, INT64_MAX, &id))
            return usage_error("jobs", "%s", "show takes one job id");
    } else if (strcmp(sub, "list") != 0 || optind < argc) {
        return usage_error("jobs", "unexpected \"%s\"", optind < argc ? argv[optind] : sub);
    }
    if (f.status && strcmp(f.status, "blocked") && strcmp(f.status, "pending") && strcmp(f.status, "running") &&
        strcmp(f.status, "done") && strcmp(f.status, "dead") && strcmp(f.status, "cancelled"))
        return usage_error("jobs", "--status: \"%s\" is not blocked, pending, running, done, dead or cancelled",
                           f.status);
    int rc;
    PGconn *conn = open_db(&c, "skipq jobs", &rc);
    if (!conn)
        return rc;
    char err[512];
    if (id) {
        int r = sq_admin_show(conn, stdout, id, json, err, sizeof err);
        rc = r == 1 ? 0 : r == 0 ? (print_error("jobs", err), EXIT_RUNTIME) : admin_failed("jobs", err);
    } else {
        rc = sq_admin_list(conn, stdout, &f, json, err, sizeof err) ? 0 : admin_failed("jobs", err);
    }
    PQfinish(conn);
    return rc;
}

static int cmd_retry(int argc, char **argv)
{
    static const char help[] =
        "usage: skipq retry ID... [--attempts N]\n"
        "       skipq retry --dead [--kind K] [--queue Q] [--since TIMESTAMP] [--attempts N]\n\n"
        "Put dead jobs (and, by id, cancelled ones) back to pending, to run now.\n"
        "Attempts are extended, not reset: a job gets N more (default 1), so\n"
        "max_attempts becomes attempts + N and its earlier attempts stay on record.\n"
        "--since: only jobs that died at or after TIMESTAMP. Prints how many.\n";
    static const struct option opts[] = {{"dead", no_argument, NULL, 'D' + 256},
                                         {"kind", required_argument, NULL, 'k'},
                                         {"queue", required_argument, NULL, 'q'},
                                         {"since", required_argument, NULL, 'S'},
                                         {"attempts", required_argument, NULL, 'a'},
                                         {0, 0, 0, 0}};
    struct common c = {0};
    struct sq_job_filter f = {0};
    bool dead = false;
    int extra = 1;
    int64_t v;
    int o;
    while ((o = next_opt(argc, argv, "", opts, &c)) != -1) {
        switch (o) {
        case 'h':
            fputs(help, stdout);
            return 0;
        case 'D' + 256:
            dead = true;
            break;
        case 'k':
            f.kind = optarg;
            break;
        case 'q':
            f.queue = optarg;
            break;
        case 'S':
            f.since = optarg;
            break;
        case 'a':
            if (int_flag("retry", "--attempts", optarg, 1, 100000, &v))
                return EXIT_USAGE;
            extra = (int)v;
            break;
        default:
            return usage_error("retry", "%s", "invalid option");
        }
    }
    if (dead == (optind < argc))
        return usage_error("retry", "%s", "give job ids, or --dead with optional filters (not both)");
    if (!dead && (f.kind || f.queue || f.since))
        return usage_error("retry", "%s", "--kind, --queue and --since go with --dead");
    int64_t *ids = NULL;
    size_t n = 0;
    int rc = dead ? 0 : parse_ids("retry", argc, argv, &ids, &n);
    if (rc)
        return rc;
    struct id_action a = {"retry", "back to pending", ids, n, &f, extra};
    rc = run_id_action(&c, &a);
    free(ids);
    return rc;
}

static int cmd_cancel(int argc, char **argv)
{
    static const char help[] =
        "usage: skipq cancel ID...\n\n"
        "Cancel blocked, pending or running jobs. A running job's handler is asked to stop\n"
        "(skipq_job_should_stop) at its host's next heartbeat; whatever it returns,\n"
        "the job stays cancelled, never done. Prints how many were cancelled.\n";
    struct common c = {0};
    int done = common_options_only("cancel", help, argc, argv, &c);
    if (done >= 0)
        return done;
    if (optind >= argc)
        return usage_error("cancel", "%s", "missing job ids");
    int64_t *ids = NULL;
    size_t n = 0;
    int rc = parse_ids("cancel", argc, argv, &ids, &n);
    if (rc)
        return rc;
    struct id_action a = {"cancel", "cancelled", ids, n, NULL, 0};
    rc = run_id_action(&c, &a);
    free(ids);
    return rc;
}

/* ---- cron and limits ------------------------------------------------------------------- */

static int cmd_cron(int argc, char **argv)
{
    static const char help[] = "usage: skipq cron [--json] [-c FILE [--database NAME]] [--db CONNINFO]\n\n"
                               "The cron schedules hosts have registered ([cron NAME] sections), with the\n"
                               "last tick each has enqueued.\n";
    struct common c = {0};
    bool json = false;
    int done = json_options_only("cron", help, argc, argv, &c, &json);
    if (done >= 0)
        return done;
    if (optind < argc)
        return usage_error("cron", "unexpected argument \"%s\"", argv[optind]);
    int rc;
    PGconn *conn = open_db(&c, "skipq cron", &rc);
    if (!conn)
        return rc;
    char err[512];
    rc = sq_admin_cron(conn, stdout, json, err, sizeof err) ? 0 : admin_failed("cron", err);
    PQfinish(conn);
    return rc;
}

static int cmd_limits(int argc, char **argv)
{
    static const char help[] =
        "usage: skipq limits [--json] [-c FILE [--database NAME]] [--db CONNINFO]\n"
        "       skipq limits clear KIND [-c FILE [--database NAME]] [--db CONNINFO]\n\n"
        "Per-kind limits in force on every host (max_running, rate), with the jobs of\n"
        "the kind running now and the claims in the current rate window. Hosts set\n"
        "them at start from [kind NAME]; `clear` removes a kind's limits (hosts stop\n"
        "enforcing them within a heartbeat, and set them again when they restart\n"
        "with them in their INI).\n";
    struct common c = {0};
    bool json = false;
    int done = json_options_only("limits", help, argc, argv, &c, &json);
    if (done >= 0)
        return done;
    bool clear = optind < argc && strcmp(argv[optind], "clear") == 0;
    if (clear && (optind + 2 != argc || !sq_valid_name(argv[optind + 1])))
        return usage_error("limits", "%s", "clear takes one kind name");
    if (!clear && optind < argc)
        return usage_error("limits", "unexpected argument \"%s\"", argv[optind]);
    int rc;
    PGconn *conn = open_db(&c, "skipq limits", &rc);
    if (!conn)
        return rc;
    char err[512];
    if (clear) {
        long n = sq_admin_limits_clear(conn, argv[optind + 1], err, sizeof err);
        if (n >= 0)
            printf("%s\n", n ? "limits cleared" : "no limits for that kind");
        rc = n >= 0 ? 0 : admin_failed("limits", err);
    } else {
        rc = sq_admin_limits(conn, stdout, json, err, sizeof err) ? 0 : admin_failed("limits", err);
    }
    PQfinish(conn);
    return rc;
}

/* ---- pause and resume ------------------------------------------------------------------ */

/* `skipq pause` and `skipq resume` (argv[0] says which). */
static int cmd_pause(int argc, char **argv)
{
    static const char help[] =
        "usage: skipq pause --queue Q | --kind K [-c FILE [--database NAME]] [--db CONNINFO]\n"
        "       skipq resume --queue Q | --kind K [-c FILE [--database NAME]] [--db CONNINFO]\n\n"
        "pause: no host claims jobs of queue Q (any kind), or of kind K (on any queue),\n"
        "until it is resumed; hosts stop within one heartbeat and jobs already running\n"
        "finish. Enqueues, cron ticks and retries go on filling the queue.\n"
        "resume: claims start again. `skipq stats` and `skipq top` list what is paused.\n";
    static const struct option opts[] = {{"queue", required_argument, NULL, 'q'},
                                         {"kind", required_argument, NULL, 'k'},
                                         {0, 0, 0, 0}};
    const char *cmd = strcmp(argv[0], "pause") == 0 ? "pause" : "resume";
    struct common c = {0};
    const char *scope = NULL, *name = NULL;
    int o;
    while ((o = next_opt(argc, argv, "", opts, &c)) != -1) {
        if (o == 'h') {
            fputs(help, stdout);
            return 0;
        }
        if ((o != 'q' && o != 'k') || scope)
            return usage_error(cmd, "%s", scope ? "give one of --queue and --kind, once" : "invalid option");
        scope = o == 'q' ? "queue" : "kind";
        name = optarg;
    }
    if (!scope)
        return usage_error(cmd, "%s", "give --queue Q or --kind K");
    if (optind < argc)
        return usage_error(cmd, "unexpected argument \"%s\"", argv[optind]);
    if (!sq_valid_name(name))
        return bad_flag(cmd, strcmp(scope, "queue") == 0 ? "--queue" : "--kind", name, "is not a valid name",
                        "use 1 to 128 of A-Z a-z 0-9 _ . : -");
    int rc;
    PGconn *conn = open_db(&c, strcmp(cmd, "pause") == 0 ? "skipq pause" : "skipq resume", &rc);
    if (!conn)
        return rc;
    char err[512];
    long n = sq_admin_pause(conn, scope, name, strcmp(cmd, "pause") == 0, err, sizeof err);
    PQfinish(conn);
    if (n < 0)
        return admin_failed(cmd, err);
    printf("%s \"", scope);
    sq_fput_text(stdout, name, SIZE_MAX, 0);
    printf("\" %s\n", n ? (strcmp(cmd, "pause") == 0 ? "paused" : "resumed")
                         : (strcmp(cmd, "pause") == 0 ? "was already paused" : "was not paused"));
    return 0;
}

/* ---- stats ------------------------------------------------------------------------- */

static int cmd_stats(int argc, char **argv)
{
    static const char help[] =
        "usage: skipq stats [--json] [-c FILE [--database NAME]] [--db CONNINFO]\n\n"
        "Per queue and kind: jobs ready to run now, scheduled for later, blocked on\n"
        "their parents (depends_on), running,\n"
        "running past their lease (expired), the age of the oldest ready job, done\n"
        "and dead in the last hour and in total, cancelled, and p50/p95/p99 handler\n"
        "durations of the last hour's attempts. Then a line for every kind with\n"
        "ready jobs that no live host serves, and the registered hosts.\n"
        "--json prints one object: {\"queues\": [...], \"unserved\": [...],\n"
        "\"hosts\": [...], \"totals_since\": \"...\"}.\n";
    struct common c = {0};
    bool json = false;
    int done = json_options_only("stats", help, argc, argv, &c, &json);
    if (done >= 0)
        return done;
    if (optind < argc)
        return usage_error("stats", "unexpected argument \"%s\"", argv[optind]);
    int rc;
    PGconn *conn = open_db(&c, "skipq stats", &rc);
    if (!conn)
        return rc;
    char err[512];
    bool ok = sq_stats_print(conn, stdout, json, err, sizeof err);
    PQfinish(conn);
    if (!ok) {
        print_error("stats", err);
        return EXIT_RUNTIME;
    }
    return 0;
}

/* ---- top --------------------------------------------------------------------------- */

/* --interval: whole milliseconds (1000), or a duration with a unit (1s,
 * 500ms), from 100ms to 1h. */
static int top_interval(const char *arg, int64_t *ms)
{
    static const char want[] = "give milliseconds or a duration (1000, 1s, 500ms) from 100ms to 1h";
    const char *why = arg[strspn(arg, "0123456789")] == '\0' ? sq_parse_int_why(arg, 100, 3600000, ms)
                                                             : sq_parse_duration_why(arg, ms);
    if (!why && (*ms < 100 || *ms > 3600000))
        why = "is out of range";
    return why ? bad_flag("top", "--interval", arg, why, want) : 0;
}

static int cmd_top(int argc, char **argv)
{
    static const char help[] =
        "usage: skipq top [--interval TIME] [--iterations N] [--json] [-c FILE [--database NAME]] [--db CONNINFO]\n\n"
        "A live view, refreshed every second until SIGINT or SIGTERM: done/s and\n"
        "failed/s over the last 10 seconds (or the interval, if longer), per queue\n"
        "the backlog (ready, scheduled), running and expired jobs, rates and dead\n"
        "jobs of the last hour; live hosts and their threads; the latest error.\n\n"
        "  -i, --interval TIME   time between refreshes: milliseconds, or a duration\n"
        "                        with a unit (500ms, 2s, 1m); 100ms to 1h (default 1000)\n"
        "  -n, --iterations N    stop after N refreshes (default: run until stopped)\n"
        "      --json            one JSON object per refresh, one per line\n"
        "The screen is cleared between refreshes only when standard output is a terminal.\n";
    static const struct option opts[] = {{"interval", required_argument, NULL, 'i'},
                                         {"iterations", required_argument, NULL, 'n'},
                                         {"json", no_argument, NULL, 'j'},
                                         {0, 0, 0, 0}};
    struct common c = {0};
    struct sq_top_opts t = {.interval_ms = 1000};
    int64_t v;
    int o;
    while ((o = next_opt(argc, argv, "i:n:", opts, &c)) != -1) {
        switch (o) {
        case 'h':
            fputs(help, stdout);
            return 0;
        case 'i':
            if (top_interval(optarg, &t.interval_ms))
                return EXIT_USAGE;
            break;
        case 'n':
            if (int_flag("top", "--iterations", optarg, 1, 1000000000, &v))
                return EXIT_USAGE;
            t.iterations = (long)v;
            break;
        case 'j':
            t.json = true;
            break;
        default:
            return usage_error("top", "%s", "invalid option");
        }
    }
    if (optind < argc)
        return usage_error("top", "unexpected argument \"%s\"", argv[optind]);
    t.window_ms = t.interval_ms > 10000 ? t.interval_ms : 10000;
    t.clear = !t.json && isatty(STDOUT_FILENO);
    int rc;
    PGconn *conn = open_db(&c, "skipq top", &rc);
    if (!conn)
        return rc;
    char err[512];
    rc = sq_top_run(conn, stdout, &t, err, sizeof err) == 0 ? 0 : EXIT_RUNTIME;
    if (rc)
        print_error("top", err);
    PQfinish(conn);
    return rc;
}

/* Not in the usage: `skipq config --reference [FILE]` writes the
 * configuration reference from the option table, to stdout or between the
 * markers of FILE (docs/configuration.md). */
static int cmd_config(int argc, char **argv)
{
    static const char help[] = "usage: skipq config --reference [FILE]\n\n"
                               "Write the configuration reference (markdown) from the option table: to stdout,\n"
                               "or between the generated-part markers of FILE (docs/configuration.md).\n";
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(help, stdout);
        return 0;
    }
    if (argc < 2 || argc > 3 || strcmp(argv[1], "--reference") != 0)
        return usage_error("config", "%s", "expected --reference [FILE]");
    if (argc == 2) {
        sq_options_reference(stdout);
        return fflush(stdout) == 0 ? 0 : EXIT_RUNTIME;
    }
    char err[1024];
    if (!sq_options_reference_update(argv[2], true, err, sizeof err)) {
        print_error("config", err);
        return EXIT_RUNTIME;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(USAGE, stderr);
        return EXIT_USAGE;
    }
    scrub_db_passwords(argc, argv);
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("skipq %s (schema %d, plugin ABI %d.%d, libpq %d)\n", SKIPQ_VERSION, skipq_schema_version_required(),
               SKIPQ_ABI_MAJOR, SKIPQ_ABI_MINOR, PQlibVersion());
        return 0;
    }
    static const struct {
        const char *name;
        int (*fn)(int, char **);
    } cmds[] = {{"migrate", cmd_migrate}, {"enqueue", cmd_enqueue}, {"run", cmd_run},  {"stats", cmd_stats},
                {"jobs", cmd_jobs},       {"retry", cmd_retry},     {"cancel", cmd_cancel}, {"top", cmd_top},
                {"cron", cmd_cron},       {"limits", cmd_limits},   {"config", cmd_config}, {"pause", cmd_pause},
                {"resume", cmd_pause},    {"web", sq_web_main},     {"exec", sq_cli_exec}};
    for (size_t i = 0; i < sizeof cmds / sizeof cmds[0]; i++)
        if (strcmp(cmd, cmds[i].name) == 0)
            return cmds[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "skipq: unknown command \"%s\"\n\n%s", cmd, USAGE);
    return EXIT_USAGE;
}
