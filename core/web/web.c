/*
 * web.c -- `skipq web`: the dashboard. A process of its own that reads the
 * database (never a host's memory) and serves one page, its assets
 * (compiled in) and a JSON API over HTTP.
 *
 * DESIGN
 * - Who may use it. On a loopback address it needs no token, but answers
 *   only requests whose Host is a loopback name or address (a page on
 *   another site that rebinds its own name to 127.0.0.1 gets 403) and none
 *   that a proxy forwarded (a proxy makes the port public). Anywhere else
 *   --token-file is required (a file of mode 0600 or stricter) and every
 *   request needs the token: `Authorization: Bearer TOKEN`, or the cookie
 *   a browser gets from opening /?token=TOKEN once (HttpOnly,
 *   SameSite=Strict, a random value per process, never the token itself;
 *   the login answers with a redirect, so the token leaves the address
 *   bar). Tokens are compared in constant time.
 * - Actions (retry, cancel, pause, resume) are POSTs of JSON carrying
 *   X-CSRF-Token, a random value per process that only a same-origin page
 *   can read (GET /api/session; no CORS), so another site cannot make the
 *   operator's browser act. They are refused with --read-only, and when the
 *   role connected cannot act (no UPDATE on the job tables, no EXECUTE on
 *   skipq.pause/resume -- e.g. skipq_reader from sql/roles.sql): the page
 *   hides them then. Each calls the function the CLI calls, with its rules.
 * - The database. One session, set up once per connection: ISO dates in
 *   UTC (rows become JSON with ISO 8601 times), a statement timeout (every
 *   request is answered within the server's deadline), jit off (the stats
 *   statement's estimate crosses jit_above_cost, and compiling it took 1.7
 *   of its 1.8 s on a million jobs; it runs in 0.13 s without), and with
 *   --read-only default_transaction_read_only, so no statement can write.
 *   A lost session is dropped and made again at the next request. Every
 *   statement is parameterised; none is built from request text.
 */
#include "web/web.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#include "common/config.h"
#include "common/conninfo.h"
#include "common/log.h"
#include "common/util.h"
#include "skipq/skipq.h"
#include "web/assets.h"
#include "web/server.h"
#include "web/actions.h"
#include "web/api.h"
#include "web/session.h"

#define EXIT_RUNTIME 1
#define EXIT_USAGE 2
#define DEFAULT_LISTEN "127.0.0.1:9470"
#define TOKEN_MIN 16
#define TOKEN_MAX 512
#define COOKIE "skipq_session"

static const char HELP[] =
    "usage: skipq web [--listen ADDRESS:PORT] [--read-only] [--token-file PATH] [-c FILE [--database NAME]]\n"
    "                 [--db CONNINFO]\n\n"
    "Serve the dashboard: queues and kinds with their backlog, throughput and\n"
    "failures over the last hour and day; jobs with filters and every attempt;\n"
    "dead jobs grouped by kind and error, to retry; hosts, cron schedules, kind\n"
    "limits; pause and resume. It reads the database only.\n\n"
    "  -l, --listen ADDR:PORT  where to listen (default " DEFAULT_LISTEN "); a numeric IPv4\n"
    "                          address or [IPv6]. Anything but a loopback address needs\n"
    "                          --token-file\n"
    "  -t, --token-file PATH   every request must carry the token in PATH (mode 0600,\n"
    "                          16 to 512 of A-Z a-z 0-9 - . _ ~): header\n"
    "                          \"Authorization: Bearer TOKEN\", or open /?token=TOKEN once\n"
    "  -r, --read-only         no retry, cancel, pause or resume\n"
    "  -c, --config FILE       read [database] from FILE\n"
    "      --database NAME     read [database NAME] from FILE instead (one dashboard\n"
    "                          per database)\n"
    "      --db CONNINFO       database (URI or conninfo)\n\n"
    "Put TLS in front with a reverse proxy (docs/web.md). Stops on SIGINT or SIGTERM.\n";

/* ---- options ---------------------------------------------------------------------------- */

static int usage(const char *fmt, const char *arg)
{
    fputs("skipq web: ", stderr);
    char msg[700];
    snprintf(msg, sizeof msg, fmt, arg);
    sq_fput_text(stderr, msg, SIZE_MAX, 0);
    fputs("\nTry 'skipq web --help'.\n", stderr);
    return EXIT_USAGE;
}

static bool loopback(const struct sockaddr_storage *a)
{
    if (a->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)a)->sin_addr.s_addr) >> 24) == 127;
    const struct in6_addr *a6 = &((const struct sockaddr_in6 *)a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(a6) ||
           (IN6_IS_ADDR_V4MAPPED(a6) && a6->s6_addr[12] == 127);
}

static bool token_char(char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '-' ||
           ch == '.' || ch == '_' || ch == '~';
}

/* Read the token: a regular file, ours, not open to group or others. */
static int read_token(const char *path, char **out)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    struct stat st;
    char buf[TOKEN_MAX + 64];
    if (fd < 0 || fstat(fd, &st) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        fprintf(stderr, "skipq web: --token-file %s: %s\n", path, strerror(e));
        return EXIT_USAGE;
    }
    const char *why = !S_ISREG(st.st_mode)            ? "is not a regular file"
                      : st.st_uid != geteuid()        ? "belongs to another user"
                      : (st.st_mode & 077) != 0       ? "is open to group or others (chmod 600 it)"
                                                      : NULL;
    ssize_t n = why ? 0 : read(fd, buf, sizeof buf - 1);
    close(fd);
    if (!why && n < 0)
        why = "cannot be read";
    buf[n > 0 ? n : 0] = '\0';
    char *t = sq_trim(buf);
    size_t len = strlen(t), ok = 0;
    while (ok < len && token_char(t[ok]))
        ok++;
    if (!why && (len < TOKEN_MIN || len > TOKEN_MAX || ok != len))
        why = "must hold one token of 16 to 512 characters of A-Z a-z 0-9 - . _ ~ (e.g. `openssl rand -hex 32`)";
    if (why) {
        fprintf(stderr, "skipq web: --token-file %s %s\n", path, why);
        return EXIT_USAGE;
    }
    *out = strdup(t);
    explicit_bzero(buf, sizeof buf);
    return *out ? 0 : EXIT_RUNTIME;
}

static bool random_hex(char *out, size_t bytes)
{
    unsigned char r[32];
    if (bytes > sizeof r || getrandom(r, bytes, 0) != (ssize_t)bytes)
        return false;
    for (size_t i = 0; i < bytes; i++)
        snprintf(out + 2 * i, 3, "%02x", r[i]);
    return true;
}

/* ---- who may ask -------------------------------------------------------------------------- */

static bool same_secret(const char *given, const char *want)
{
    size_t n = strlen(want), g = given ? strlen(given) : 0;
    unsigned char d = given && g == n ? 0 : 1;
    for (size_t i = 0; i < n; i++)
        d |= (unsigned char)(want[i] ^ (given && i < g ? given[i] : 0));
    return d == 0;
}

static const char *header(struct MHD_Connection *c, const char *name)
{
    return MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
}

/* The host part of a Host header is "localhost" or a loopback address. */
static bool loopback_host(const char *host)
{
    char h[128];
    if (!host || strlen(host) >= sizeof h)
        return false;
    strcpy(h, host);
    char *end = h[0] == '[' ? strchr(h, ']') : strrchr(h, ':');
    if (h[0] == '[' && !end)
        return false;
    if (end)
        *end = '\0';
    const char *name = h[0] == '[' ? h + 1 : h;
    struct sockaddr_storage a = {0};
    if (strcasecmp(name, "localhost") == 0)
        return true;
    if (inet_pton(AF_INET, name, &((struct sockaddr_in *)&a)->sin_addr) == 1)
        a.ss_family = AF_INET;
    else if (inet_pton(AF_INET6, name, &((struct sockaddr_in6 *)&a)->sin6_addr) == 1)
        a.ss_family = AF_INET6;
    else
        return false;
    return loopback(&a);
}

static enum MHD_Result reply_json(struct MHD_Connection *conn, unsigned status, json_object *o, int64_t t0,
                                  const char *const *headers)
{
    const char *text = json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    char timing[64];
    snprintf(timing, sizeof timing, "app;dur=%.1f", (double)(sq_now_us() - t0) / 1000.0);
    const char *h[8] = {"Server-Timing", timing, NULL};
    for (size_t i = 0; headers && headers[i] && i < 4; i++)
        h[2 + i] = headers[i];
    enum MHD_Result r = sq_server_reply(conn, status, "application/json; charset=utf-8", "no-store", text,
                                        strlen(text), false, h);
    json_object_put(o);
    return r;
}

static enum MHD_Result reply_error(struct MHD_Connection *conn, unsigned status, const char *msg)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "error", json_object_new_string(msg));
    return reply_json(conn, status, o, sq_now_us(), NULL);
}

/* Why this request may not go on (403), or NULL. Sets *login when it is a
 * correct /?token= login, to be answered with the cookie. */
static const char *refused(struct sq_web *w, struct MHD_Connection *conn, bool api, bool *login)
{
    *login = false;
    if (!w->token) {
        if (header(conn, "X-Forwarded-For") || header(conn, "Forwarded") || header(conn, "X-Forwarded-Host") ||
            header(conn, "X-Real-IP"))
            return "this request came through a proxy, which makes the dashboard public: start skipq web with "
                   "--token-file";
        const char *host = header(conn, MHD_HTTP_HEADER_HOST);
        if (host && !loopback_host(host))
            return "the Host header names another site (a page rebinding its name to this address?); open the "
                   "dashboard by a loopback address or localhost";
        return NULL;
    }
    /* A login is a page's, never an API call's: a token in a URL ends up
     * in logs, so the API takes it in a header or the cookie only. */
    const char *given = api ? NULL : MHD_lookup_connection_value(conn, MHD_GET_ARGUMENT_KIND, "token");
    if (given) {
        *login = same_secret(given, w->token);
        return *login ? NULL : "wrong token";
    }
    const char *auth = header(conn, MHD_HTTP_HEADER_AUTHORIZATION);
    if (auth && strncasecmp(auth, "Bearer ", 7) == 0)
        return same_secret(auth + 7, w->token) ? NULL : "wrong token";
    if (auth)
        return "the Authorization header must be \"Bearer TOKEN\"";
    const char *cookie = MHD_lookup_connection_value(conn, MHD_COOKIE_KIND, COOKIE);
    if (cookie)
        return same_secret(cookie, w->session) ? NULL : "the session has ended (skipq web restarted): log in again";
    return "a token is required: open /?token=TOKEN once, or send \"Authorization: Bearer TOKEN\"";
}

/* A POST's own checks: its CSRF token, JSON, and whether we may act. */
static const char *refused_action(struct sq_web *w, struct MHD_Connection *conn)
{
    const char *site = header(conn, "Sec-Fetch-Site");
    if (site && strcmp(site, "same-origin") != 0 && strcmp(site, "none") != 0)
        return "an action must come from the dashboard's own page";
    if (!same_secret(header(conn, "X-CSRF-Token"), w->csrf))
        return "missing or wrong X-CSRF-Token (reload the page)";
    if (w->read_only)
        return "skipq web runs with --read-only";
    if (!w->can_act) {
        static char why[400];
        snprintf(why, sizeof why, "role \"%s\" cannot act: %s", w->role, w->cannot_act);
        return why;
    }
    return NULL;
}

/* ---- routes ---------------------------------------------------------------------------------- */

struct route {
    const char *path; /* ending in '/': a prefix, the rest passed as `tail` */
    bool post;
    web_handler fn;
};

static const struct route ROUTES[] = {
    {"/api/session", false, web_api_session}, {"/api/overview", false, web_api_overview},
    {"/api/throughput", false, web_api_throughput}, {"/api/jobs", false, web_api_jobs},
    {"/api/jobs/", false, web_api_job},         {"/api/dead", false, web_api_dead},
    {"/api/dead/jobs", false, web_api_dead_jobs}, {"/api/hosts", false, web_api_hosts},
    {"/api/retry", true, web_act_retry},        {"/api/cancel", true, web_act_cancel},
    {"/api/pause", true, web_act_pause},        {"/api/resume", true, web_act_resume},
};

static enum MHD_Result serve_api(struct sq_web *w, const struct sq_request *r, bool post)
{
    const struct route *rt = NULL;
    const char *tail = "";
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0] && !rt; i++) {
        size_t n = strlen(ROUTES[i].path);
        bool prefix = ROUTES[i].path[n - 1] == '/';
        if (prefix ? strncmp(r->url, ROUTES[i].path, n) == 0 && r->url[n] : strcmp(r->url, ROUTES[i].path) == 0) {
            rt = &ROUTES[i];
            tail = r->url + (prefix ? n : 0);
        }
    }
    if (!rt)
        return reply_error(r->conn, MHD_HTTP_NOT_FOUND, "no such API route");
    if (rt->post != post)
        return reply_error(r->conn, MHD_HTTP_METHOD_NOT_ALLOWED, post ? "use GET" : "use POST");
    if (post) {
        const char *why = refused_action(w, r->conn);
        if (why)
            return reply_error(r->conn, MHD_HTTP_FORBIDDEN, why);
        if (r->body_too_big)
            return reply_error(r->conn, MHD_HTTP_CONTENT_TOO_LARGE, "the request body is too large");
        const char *type = header(r->conn, MHD_HTTP_HEADER_CONTENT_TYPE);
        if (!type || strncasecmp(type, "application/json", 16) != 0)
            return reply_error(r->conn, MHD_HTTP_UNSUPPORTED_MEDIA_TYPE, "send JSON (Content-Type: application/json)");
    }
    int64_t t0 = sq_now_us();
    struct web_call c = {.w = w, .conn = r->conn, .body = r->body, .body_len = r->body_len};
    unsigned status = rt->fn(&c, tail);
    web_end(&c);
    if (status >= 300) {
        json_object_put(c.out);
        if (status >= 500)
            log_warn("%s %s: %u %s", r->method, r->url, status, c.err);
        json_object *o = json_object_new_object();
        json_object_object_add(o, "error", json_object_new_string(c.err[0] ? c.err : "failed"));
        return reply_json(r->conn, status, o, t0, NULL);
    }
    return reply_json(r->conn, status, c.out ? c.out : json_object_new_object(), t0, NULL);
}

static enum MHD_Result serve_asset(const struct sq_request *r)
{
    const char *path = strcmp(r->url, "/") == 0 ? "/index.html" : r->url;
    for (int i = 0; i < sq_web_asset_count; i++) {
        const struct sq_web_asset *a = &sq_web_assets[i];
        if (strcmp(a->path, path) == 0)
            return sq_server_reply(r->conn, MHD_HTTP_OK, a->type, "no-cache", a->data, a->len, true, NULL);
    }
    static const char msg[] = "not found\n";
    return sq_server_reply(r->conn, MHD_HTTP_NOT_FOUND, "text/plain; charset=utf-8", "no-store", msg,
                           sizeof msg - 1, true, NULL);
}

/* The cookie a correct /?token= login gets, and a redirect to /. */
static enum MHD_Result serve_login(struct sq_web *w, struct MHD_Connection *conn)
{
    const char *proto = header(conn, "X-Forwarded-Proto");
    char cookie[200];
    snprintf(cookie, sizeof cookie, COOKIE "=%s; Path=/; HttpOnly; SameSite=Strict%s", w->session,
             proto && strcasecmp(proto, "https") == 0 ? "; Secure" : "");
    const char *h[] = {"Set-Cookie", cookie, MHD_HTTP_HEADER_LOCATION, "/", NULL};
    static const char msg[] = "logged in\n";
    return sq_server_reply(conn, MHD_HTTP_SEE_OTHER, "text/plain; charset=utf-8", "no-store", msg, sizeof msg - 1,
                           true, h);
}

static enum MHD_Result on_request(void *cls, const struct sq_request *r)
{
    struct sq_web *w = cls;
    bool get = strcmp(r->method, "GET") == 0 || strcmp(r->method, "HEAD") == 0;
    bool post = strcmp(r->method, "POST") == 0;
    bool api = strncmp(r->url, "/api/", 5) == 0;
    bool login = false;
    const char *why = refused(w, r->conn, api, &login);
    if (why) {
        if (api)
            return reply_error(r->conn, MHD_HTTP_FORBIDDEN, why);
        char msg[400];
        snprintf(msg, sizeof msg, "skipq web: %s\n", why);
        return sq_server_reply(r->conn, MHD_HTTP_FORBIDDEN, "text/plain; charset=utf-8", "no-store", msg,
                               strlen(msg), false, NULL);
    }
    if (login && get)
        return serve_login(w, r->conn);
    if (!get && !post)
        return reply_error(r->conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET, HEAD and POST");
    if (api)
        return serve_api(w, r, post);
    if (post)
        return reply_error(r->conn, MHD_HTTP_METHOD_NOT_ALLOWED, "use GET");
    return serve_asset(r);
}

/* ---- the command --------------------------------------------------------------------------- */

struct opts {
    const char *listen, *token_file, *config, *db, *database;
    bool read_only;
};

static int parse_options(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {{"listen", required_argument, NULL, 'l'},
                                             {"token-file", required_argument, NULL, 't'},
                                             {"read-only", no_argument, NULL, 'r'},
                                             {"config", required_argument, NULL, 'c'},
                                             {"db", required_argument, NULL, 'D'},
                                             {"database", required_argument, NULL, 'B'},
                                             {"help", no_argument, NULL, 'h'},
                                             {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "l:t:rc:h", longopts, NULL)) != -1) {
        switch (c) {
        case 'l': o->listen = optarg; break;
        case 't': o->token_file = optarg; break;
        case 'r': o->read_only = true; break;
        case 'c': o->config = optarg; break;
        case 'D': o->db = optarg; break;
        case 'B': o->database = optarg; break;
        case 'h': fputs(HELP, stdout); return 0;
        default: return usage("%s", "invalid option");
        }
    }
    if (optind < argc)
        return usage("unexpected argument \"%s\"", argv[optind]);
    return -1;
}

/* -c, --db and $DATABASE_URL as the other commands take them. */
static int database_params(struct sq_web *w, const struct opts *o)
{
    char err[1024];
    if (o->database && !o->config) {
        fprintf(stderr, "skipq web: --database %s names a section of the INI file: give it with -c FILE\n",
                o->database);
        return EXIT_USAGE;
    }
    if (o->config && !(w->cfg = sq_config_load_one(o->config, o->database, o->db && *o->db, err, sizeof err))) {
        fprintf(stderr, "skipq web: %s\n", err);
        return EXIT_USAGE;
    }
    if (w->cfg && w->cfg->database.pooled) {
        fprintf(stderr, "skipq web: %s: [database%s%s] pooler = transaction: the dashboard keeps session settings "
                        "(time zone, statement timeout, read-only); connect it to the server or to a pooler in "
                        "session mode\n", o->config, o->database ? " " : "", o->database ? o->database : "");
        return EXIT_USAGE;
    }
    const char *url = getenv("DATABASE_URL"), *what = NULL, *s = NULL;
    if (o->db && *o->db)
        what = "--db", s = o->db;
    else if (!(w->cfg && w->cfg->database.ndb > 0) && url && *url)
        what = "DATABASE_URL", s = url;
    if (s && !sq_conninfo_check(s, err, sizeof err)) {
        fprintf(stderr, "skipq: %s: %s\n", what, err);
        return EXIT_USAGE;
    }
    if (!sq_dbparams_build(&w->params, w->cfg, o->db, "skipq web")) {
        fprintf(stderr, "skipq web: out of memory\n");
        return EXIT_RUNTIME;
    }
    return 0;
}

static bool check_schema(PGconn *conn)
{
    char err[512];
    int version = 0;
    if (skipq_schema_version(conn, &version, err, sizeof err) != SKIPQ_OK) {
        fputs("skipq web: cannot read the skipq schema version: ", stderr);
        sq_fput_text(stderr, err, SIZE_MAX, 0);
        fputc('\n', stderr);
        return false;
    }
    if (version < skipq_schema_version_required()) {
        fprintf(stderr, "skipq web: the skipq schema is at version %d; this skipq needs %d: run `skipq migrate`\n",
                version, skipq_schema_version_required());
        return false;
    }
    return true;
}

static int serve(struct sq_web *w, const struct sockaddr_storage *addr, socklen_t addrlen)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigprocmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);
    int stop = signalfd(-1, &set, SFD_CLOEXEC);
    char err[512];
    struct sq_server *s = stop >= 0 ? sq_server_start(addr, addrlen, w->listen, on_request, w, err, sizeof err) : NULL;
    if (!s) {
        fprintf(stderr, "skipq web: %s\n", stop < 0 ? strerror(errno) : err);
        if (stop >= 0)
            close(stop);
        return EXIT_RUNTIME;
    }
    log_info("serving the dashboard on http://%s/ as role \"%s\": %s%s%s", w->listen, w->role,
             w->read_only ? "read-only (--read-only)" : w->can_act ? "actions allowed" : "read-only: ",
             !w->read_only && !w->can_act ? w->cannot_act : "", w->token ? "; a token is required" : "");
    bool ok = sq_server_run(s, stop, err, sizeof err);
    if (!ok)
        log_error("%s", err);
    else
        log_info("stopping");
    sq_server_stop(s);
    close(stop);
    return ok ? 0 : EXIT_RUNTIME;
}

int sq_web_main(int argc, char **argv)
{
    struct opts o = {.listen = DEFAULT_LISTEN};
    int rc = parse_options(argc, argv, &o);
    if (rc >= 0)
        return rc;
    struct sockaddr_storage addr;
    socklen_t addrlen;
    char err[512];
    if (!sq_parse_listen(o.listen, &addr, &addrlen, err, sizeof err))
        return usage("--listen: %s", err);
    if (!loopback(&addr) && !o.token_file)
        return usage("--listen %s is not a loopback address: give --token-file too (and put TLS in front: "
                     "docs/web.md)", o.listen);
    struct sq_web w = {.read_only = o.read_only, .listen = o.listen};
    sq_log_set_thread("web");
    if ((o.token_file && (rc = read_token(o.token_file, &w.token)) != 0) || (rc = database_params(&w, &o)) != 0)
        goto out;
    rc = EXIT_RUNTIME;
    if (!random_hex(w.session, 32) || !random_hex(w.csrf, 32)) {
        fprintf(stderr, "skipq web: no random numbers: %s\n", strerror(errno));
        goto out;
    }
    PGconn *first = sq_db_connect(&w.params, err, sizeof err);
    if (!first) {
        fputs("skipq web: cannot connect to the database: ", stderr);
        sq_fput_text(stderr, err, SIZE_MAX, 0);
        fputc('\n', stderr);
        goto out;
    }
    bool ok = check_schema(first);
    PQfinish(first);
    if (!ok)
        goto out;
    if (!(w.conn = web_connect(&w, err, sizeof err))) {
        fputs("skipq web: cannot set up the database session: ", stderr);
        sq_fput_text(stderr, err, SIZE_MAX, 0);
        fputc('\n', stderr);
        goto out;
    }
    rc = serve(&w, &addr, addrlen);
out:
    if (w.conn)
        PQfinish(w.conn);
    sq_dbparams_free(&w.params);
    sq_config_free(w.cfg);
    if (w.token)
        explicit_bzero(w.token, strlen(w.token));
    free(w.token);
    return rc;
}
