/*
 * test_security_cli.c -- what the command line gives away or lets others
 * do through it: connection strings and passwords in messages (a '%' typo
 * made libpq quote the password), passwords in the process list, and
 * database text that drives the operator's terminal (ESC, OSC, C1 bytes in
 * a key, an error or a host name).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "skipq/skipq.h"
#include "common/util.h"

/* The password every test here hides, and a URI for db that carries it. */
#define SECRET "Hunter2-s3cret"

static char *uri_with_password(const struct th_db *db, const char *password)
{
    PQconninfoOption *opts = PQconninfoParse(db->conninfo, NULL);
    cr_assert_not_null(opts);
    const char *host = "", *port = "", *user = "", *dbname = "";
    for (PQconninfoOption *o = opts; o->keyword; o++) {
        const char *v = o->val ? o->val : "";
        if (!strcmp(o->keyword, "host"))
            host = v;
        else if (!strcmp(o->keyword, "port"))
            port = v;
        else if (!strcmp(o->keyword, "user"))
            user = v;
        else if (!strcmp(o->keyword, "dbname"))
            dbname = v;
    }
    char *uri = malloc(1024);
    snprintf(uri, 1024, "postgresql://%s:%s@/%s?host=%s&port=%s", user, password, dbname, host, port);
    PQconninfoFree(opts);
    return uri;
}

static void expect_no_secret(const char *what, const char *text)
{
    cr_expect_null(strstr(text, "Hunter2"), "%s shows the password: %s", what, text);
}

/* ---- 6: a malformed connection string is described, never quoted ------------------ */

Test(security_cli, a_percent_typo_in_a_password_is_described_and_never_echoed, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *uri = uri_with_password(&db, "pa%zz" SECRET);
    const char *says = "the connection URI has an invalid percent-encoding";
    char *out, *err;

    /* --db */
    cr_expect_eq(th_cli(&out, &err, "stats", "--db", uri, NULL), 2, "%s", err);
    cr_expect(strstr(err, "--db: ") && strstr(err, says), "%s", err);
    expect_no_secret("stderr (--db)", err);
    expect_no_secret("stdout (--db)", out);
    free(out);
    free(err);

    /* $DATABASE_URL */
    setenv("DATABASE_URL", uri, 1);
    cr_expect_eq(th_cli(&out, &err, "stats", NULL), 2, "%s", err);
    unsetenv("DATABASE_URL");
    cr_expect(strstr(err, "DATABASE_URL: ") && strstr(err, says), "%s", err);
    expect_no_secret("stderr (DATABASE_URL)", err);
    free(out);
    free(err);

    /* [database] url, for the CLI and for a host */
    char text[1400], where[700];
    snprintf(text, sizeof text, "[database]\nurl = %s\n", uri);
    char *ini = th_write_file("url.ini", text);
    snprintf(where, sizeof where, "%s:2: [database] url: %s", ini, says);
    cr_expect_eq(th_cli(&out, &err, "stats", "-c", ini, NULL), 2, "%s", err);
    cr_expect(strstr(err, where), "stderr lacks \"%s\": %s", where, err);
    expect_no_secret("stderr ([database] url)", err);
    free(out);
    free(err);
    cr_expect_eq(th_cli(&out, &err, "run", "-c", ini, NULL), 2, "%s", err);
    cr_expect(strstr(err, where), "run: stderr lacks \"%s\": %s", where, err);
    expect_no_secret("run's output ([database] url)", err);
    free(out);
    free(err);

    /* listen_conninfo, in a host's log */
    char *host_ini = th_host_ini(&db, "listen", NULL, NULL, "[queue default]\nthreads = 1\n");
    char *base = th_slurp(host_ini), *at = strstr(base, "[database]\n");
    cr_assert_not_null(at);
    snprintf(text, sizeof text, "%.*s[database]\nlisten_conninfo = %s\n%s", (int)(at - base), base, uri,
             at + strlen("[database]\n"));
    char *bad_ini = th_write_file("listen.ini", text);
    pid_t pid = th_host_start(bad_ini);
    cr_expect_eq(th_wait_exit(pid, 20000), 2);
    char *log = th_host_log(bad_ini);
    cr_expect(strstr(log, "[database] listen_conninfo: ") && strstr(log, says), "%s", log);
    cr_expect(strstr(log, ":2: ") || strstr(log, ":3: "), "no FILE:LINE: %s", log);
    expect_no_secret("host log (listen_conninfo)", log);
    free(log);
    free(base);

    /* Other ways a malformed URI puts a password in a message. */
    static const char *const shapes[] = {
        "postgresql://u:Hunter2@s3cret@localhost/db",   /* '@' unencoded: "ss@localhost" was a host name */
        "postgresql://u:Hunter2/s3cret@localhost/db",   /* '/' unencoded: "Hunter2" was a port */
        "postgresql:/u:Hunter2-s3cret@localhost/db",    /* not a URI: the server repeated it as a database name */
        "host=localhost password=Hunter2 s3cret",       /* a blank unquoted: libpq quoted the word */
        "host=localhost password=s3cret Hunter2=x",     /* ... or took it for a keyword */
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        cr_expect_eq(th_cli(&out, &err, "stats", "--db", shapes[i], NULL), 2, "shape %zu: %s", i, err);
        cr_expect(strstr(err, "skipq: --db: "), "shape %zu: %s", i, err);
        expect_no_secret("stderr (malformed --db)", err);
        free(out);
        free(err);
    }
    /* A typo of a keyword is named, with the keyword meant. */
    cr_expect_eq(th_cli(NULL, &err, "stats", "--db", "host=localhost pasword=x", NULL), 2);
    cr_expect(strstr(err, "unknown keyword \"pasword\" (did you mean \"password\"?)"), "%s", err);
    free(err);
    free(uri);
}

/* ---- 7: a password on the command line is warned about and blanked ------------------ */

/* Start skipq with `args` (NULL-terminated), output to files; returns its pid. */
static pid_t spawn(const char *const *args, const char *out, const char *err)
{
    pid_t pid = fork();
    cr_assert_neq(pid, -1);
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(o, 1);
        dup2(e, 2);
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* as the harness's own children */
        const char *asan = getenv("SKIPQ_CHILD_ASAN_OPTIONS");
        if (asan)
            setenv("ASAN_OPTIONS", asan, 1);
        execv(SKIPQ_BIN, (char *const *)args);
        _exit(127);
    }
    return pid;
}

/* /proc/PID/cmdline, NULs turned into blanks. */
static char *cmdline(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cmdline", (int)pid);
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f);
    char *buf = calloc(1, 8192);
    size_t n = fread(buf, 1, 8191, f);
    fclose(f);
    for (size_t i = 0; i < n; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
    return buf;
}

/* Wait until `file` holds `needle`; fails the test after timeout_ms. */
static void wait_for_text(const char *file, const char *needle, int timeout_ms)
{
    for (int64_t end = th_now_ms() + timeout_ms;;) {
        char *text = th_slurp(file);
        bool found = strstr(text, needle) != NULL;
        free(text);
        if (found)
            return;
        cr_assert(th_now_ms() < end, "%s never showed \"%s\"", file, needle);
        usleep(20000);
    }
}

static void expect_blanked_while_running(const char *const *args, const char *ready_file, const char *ready,
                                         const char *err_file)
{
    char out_file[600];
    snprintf(out_file, sizeof out_file, "%s/spawn.out", th_tmpdir());
    unlink(ready_file);
    unlink(err_file);
    pid_t pid = spawn(args, strcmp(ready_file, err_file) ? ready_file : out_file, err_file);
    wait_for_text(ready_file, ready, 20000);
    char *cmd = cmdline(pid);
    cr_expect_null(strstr(cmd, "Hunter2"), "the password is in /proc/%d/cmdline: %s", (int)pid, cmd);
    cr_expect_not_null(strstr(cmd, "xxxxxxxxxxxxxx"), "the password's place is not blanked: %s", cmd);
    cr_expect_not_null(strstr(cmd, "--db"), "%s", cmd);
    free(cmd);
    kill(pid, SIGTERM);
    cr_expect_eq(th_wait_exit(pid, 20000), 0);
    char *err = th_slurp(err_file);
    cr_expect(strstr(err, "warning: the --db value holds a password") && strstr(err, "PGPASSFILE") &&
                  strstr(err, "PGPASSWORD") && strstr(err, "0600"),
              "no warning naming the safer routes: %s", err);
    expect_no_secret("stderr", err);
    free(err);
}

Test(security_cli, a_password_in_db_is_warned_about_and_blanked_from_the_process_list, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    char *uri = uri_with_password(&db, SECRET);
    char out[600], err[600], kw[1200];
    snprintf(out, sizeof out, "%s/top.out", th_tmpdir());
    snprintf(err, sizeof err, "%s/top.err", th_tmpdir());

    /* skipq top, password in a URI's user information */
    const char *top[] = {SKIPQ_BIN, "top", "--interval", "1s", "--db", uri, NULL};
    expect_blanked_while_running(top, out, "skipq top", err);

    /* ... and as a password= keyword, given as --db=VALUE */
    snprintf(kw, sizeof kw, "--db=%s password=%s", db.conninfo, SECRET);
    const char *top_kw[] = {SKIPQ_BIN, "top", "--interval", "1s", kw, NULL};
    expect_blanked_while_running(top_kw, out, "skipq top", err);

    /* skipq run, through a host's whole life */
    char *ini = th_host_ini(&db, "argv", NULL, NULL, "[queue default]\nthreads = 1\n");
    const char *run[] = {SKIPQ_BIN, "run", "-c", ini, "--db", uri, NULL};
    expect_blanked_while_running(run, err, "started as", err);

    /* No password, no warning. */
    char *e = NULL;
    cr_expect_eq(th_cli(NULL, &e, "stats", "--db", db.conninfo, NULL), 0);
    cr_expect_null(strstr(e, "warning"), "%s", e);
    free(e);
    free(uri);
}

/* ---- 8: database text never drives the terminal ------------------------------------- */

/* OSC title, clear screen, CR LF and a fake line, OSC 52 clipboard write,
 * C1 CSI (U+009B) and DEL. */
#define HOSTILE "\x1b]0;pwned\x07\x1b[2J\r\nFAKE LINE\x1b]52;c;cGF3bmVk\x07 \xc2\x9b" "31m\x7f end"

/* No byte of `text` may reach a terminal as a control: only '\n' below
 * 0x20, no DEL, no C1, and valid UTF-8. */
static void expect_inert(const char *what, const char *text)
{
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        cr_assert(*p >= 0x20 || *p == '\n', "%s: raw control byte 0x%02x at %zu", what, *p,
                  (size_t)(p - (const unsigned char *)text));
        cr_assert(*p != 0x7f, "%s: raw DEL", what);
        cr_assert(!(p[0] == 0xc2 && p[1] >= 0x80 && p[1] <= 0x9f), "%s: raw C1 control", what);
    }
    cr_assert_null(sq_utf8_invalid(text), "%s: invalid UTF-8", what);
    cr_expect_null(strstr(text, "\nFAKE LINE"), "%s: a value made a line of its own", what);
}

/* JSON output: valid JSON (PostgreSQL parses it) whose value at `path`
 * is exactly HOSTILE. */
static void expect_json_holds(PGconn *conn, const char *what, const char *json, const char *path)
{
    const char *params[3] = {json, path, HOSTILE};
    PGresult *r = PQexecParams(conn, "SELECT (($1::jsonb) #>> $2::text[]) = $3", 3, NULL, params, NULL, NULL, 0);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s: not JSON: %s\n%s", what, PQresultErrorMessage(r), json);
    cr_expect_str_eq(PQgetvalue(r, 0, 0), "t", "%s: %s is not the planted text: %s", what, path, json);
    PQclear(r);
}

/* Plant HOSTILE wherever a producer, a worker or a handler can put text. */
static int64_t plant(const struct th_db *db)
{
    char err[SKIPQ_ERRBUF_SIZE];
    int64_t id = 0;
    skipq_enqueue_opts o = {.unique_key = HOSTILE, .ordering_key = HOSTILE};
    char payload[256];
    snprintf(payload, sizeof payload, "{\"t\": \"%s\"}", "\\u001b]0;pwned\\u0007\xc2\x9b\x7f");
    cr_assert_eq(skipq_enqueue(db->conn, "k", payload, &o, &id, err, sizeof err), SKIPQ_OK, "%s", err);
    char idtext[24];
    snprintf(idtext, sizeof idtext, "%lld", (long long)id);
    const char *params[2] = {HOSTILE, idtext};
    static const char *const sql[] = {
        "UPDATE skipq.jobs SET status = 'dead', attempts = 1, finished_at = now(), last_error = $1"
        " WHERE id = $2::bigint",
        "INSERT INTO skipq.job_executions (job_id, attempt, worker, status, started_at, finished_at, error)"
        " VALUES ($2::bigint, 1, $1, 'dead', now() - interval '1 second', now(), $1)",
        "SELECT skipq.host_beat('h:1', $1, $1, 1, $1, 1, ARRAY['default/k', 'default/' || $1], 60000, true)"
        " WHERE $2::bigint IS NOT NULL",
        "INSERT INTO skipq.cron_state (name, schedule, timezone, last_tick) SELECT 'c', $1, $1, now()"
        " WHERE $2::bigint IS NOT NULL",
    };
    for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++) {
        PGresult *r = PQexecParams(db->conn, sql[i], 2, NULL, params, NULL, NULL, 0);
        cr_assert(PQresultStatus(r) == PGRES_COMMAND_OK || PQresultStatus(r) == PGRES_TUPLES_OK, "%s: %s", sql[i],
                  PQresultErrorMessage(r));
        PQclear(r);
    }
    th_execf(db->conn, "INSERT INTO skipq.kind_limits (kind, max_running) VALUES ('k', 2)");
    return id;
}

/* th_cli with up to four arguments from an array, then --db. */
static int cli_args(char **out, char **err, const char *const a[5], const char *conninfo)
{
    int n = 0;
    while (n < 4 && a[n])
        n++;
    switch (n) {
    case 1: return th_cli(out, err, a[0], "--db", conninfo, NULL);
    case 2: return th_cli(out, err, a[0], a[1], "--db", conninfo, NULL);
    case 3: return th_cli(out, err, a[0], a[1], a[2], "--db", conninfo, NULL);
    default: return th_cli(out, err, a[0], a[1], a[2], a[3], "--db", conninfo, NULL);
    }
}

Test(security_cli, control_characters_in_database_text_never_reach_the_terminal, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    int64_t id = plant(&db);
    char idtext[24];
    snprintf(idtext, sizeof idtext, "%lld", (long long)id);
    static const struct {
        const char *args[5];
        const char *visible; /* must appear in stdout */
    } text_cmds[] = {
        {{"jobs", "list", NULL}, "\\x1b]0;pwned\\x07\\x1b[2J\\r\\nFAKE"},
        {{"jobs", "show", "ID", NULL}, "\\u009b31m\\x7f end"},
        {{"stats", NULL}, "\\x1b]52;c;cGF3bmVk\\x07"},
        {{"top", "-n", "1", NULL}, "\\x1b]0;pwned"},
        {{"cron", NULL}, "\\x1b]0;pwned"},
        {{"limits", NULL}, "k"},
    };
    for (size_t i = 0; i < sizeof text_cmds / sizeof text_cmds[0]; i++) {
        const char *a[5];
        for (int k = 0; k < 5; k++)
            a[k] = text_cmds[i].args[k] && !strcmp(text_cmds[i].args[k], "ID") ? idtext : text_cmds[i].args[k];
        char *out = NULL, *err = NULL;
        int st = cli_args(&out, &err, a, db.conninfo);
        cr_expect_eq(st, 0, "skipq %s: %s", a[0], err);
        expect_inert(a[0], out);
        expect_inert(a[0], err);
        cr_expect_not_null(strstr(out, text_cmds[i].visible), "skipq %s %s: \"%s\" not shown:\n%s", a[0],
                           a[1] ? a[1] : "", text_cmds[i].visible, out);
        free(out);
        free(err);
    }
    /* --json: escaped as JSON, and the same text. */
    static const struct {
        const char *args[5];
        const char *path;
    } json_cmds[] = {
        {{"jobs", "list", "--json", NULL}, "{0,last_error}"}, {{"jobs", "show", "ID", "--json", NULL}, "{job,0,unique_key}"},
        {{"jobs", "show", "ID", "--json", NULL}, "{executions,0,error}"},
        {{"stats", "--json", NULL}, "{hosts,0,hostname}"},
        {{"top", "-n", "1", "--json", NULL}, "{last_error,error}"},
        {{"cron", "--json", NULL}, "{0,schedule}"},
    };
    for (size_t i = 0; i < sizeof json_cmds / sizeof json_cmds[0]; i++) {
        const char *a[5];
        for (int k = 0; k < 5; k++)
            a[k] = json_cmds[i].args[k] && !strcmp(json_cmds[i].args[k], "ID") ? idtext : json_cmds[i].args[k];
        char *out = NULL, *err = NULL;
        int st = cli_args(&out, &err, a, db.conninfo);
        cr_expect_eq(st, 0, "skipq %s --json: %s", a[0], err);
        expect_inert(a[0], out);
        expect_json_holds(db.conn, a[0], out, json_cmds[i].path);
        free(out);
        free(err);
    }
    /* Error messages quote values: a refused --since is repeated by the server. */
    char *err = NULL;
    cr_expect_eq(th_cli(NULL, &err, "retry", "--dead", "--since", HOSTILE, "--db", db.conninfo, NULL), 2);
    expect_inert("retry's error", err);
    cr_expect_not_null(strstr(err, "\\x1b]0;pwned"), "%s", err);
    free(err);
    cr_expect_eq(th_cli(NULL, &err, "jobs", "list", "--status", HOSTILE, "--db", db.conninfo, NULL), 2);
    expect_inert("a usage error", err);
    free(err);
}

/* The helper every table and message goes through, on what a UTF-8
 * database cannot hold: invalid UTF-8 (a SQL_ASCII database, a truncated
 * message). */
Test(security_cli, the_escaping_helper_shows_every_control_and_invalid_byte, .timeout = 30)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    size_t w = sq_fput_text(f, "a\xff\xc3(\x1b[2J\xe2\x82 caf\xc3\xa9\t\xc2\x85\x7f" "b\xe2\x82", SIZE_MAX, 0);
    fclose(f);
    cr_expect_str_eq(buf, "a\\xff\\xc3(\\x1b[2J\\xe2\\x82 caf\xc3\xa9\\t\\u0085\\x7fb\\xe2\\x82");
    cr_expect_eq(w, sq_text_width("a\xff\xc3(\x1b[2J\xe2\x82 caf\xc3\xa9\t\xc2\x85\x7f" "b\xe2\x82"));
    expect_inert("sq_fput_text", buf);
    free(buf);
    /* Truncation and padding count columns, never cutting a character. */
    f = open_memstream(&buf, &len);
    sq_fput_text(f, "\xc3\xa9\xc3\xa9\x1b\xc3\xa9", 4, 6);
    fclose(f);
    cr_expect_str_eq(buf, "\xc3\xa9\xc3\xa9    ", "a cut escape is left out whole, then padding");
    free(buf);
    /* JSON: the same controls as \u escapes, and valid UTF-8 kept. */
    f = open_memstream(&buf, &len);
    sq_json_string(f, "\x1b\xc2\x9b\x7f\"\\\xc3\xa9");
    fclose(f);
    cr_expect_str_eq(buf, "\"\\u001b\\u009b\\u007f\\\"\\\\\xc3\xa9\"");
    free(buf);
}
