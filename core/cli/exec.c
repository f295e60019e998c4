/*
 * exec.c -- `skipq exec PLUGIN.so KIND PAYLOAD`: the way to try and debug a
 * handler. It loads the plugin with every check a host makes (host/exec.c,
 * the host's own loader and service table), calls the handler once in this
 * process on the payload, and prints what came of it: outcome, error,
 * retry delay, output, log lines, duration. With --db the handler's
 * skipq_job_conn() is a real transaction, rolled back unless --commit; the
 * payload is then handed over as jsonb renders it, as on a host.
 *
 * Exit status, for scripts: 0 done, 1 retry or fail, 2 usage or load error
 * (missing file, wrong ABI, bad [plugin] section, unknown kind, invalid
 * JSON).
 */
#include "cli/exec.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "common/log.h"
#include "common/util.h"
#include "host/exec.h"
#include "host/plugin_keys.h"

#define EXIT_NOT_DONE 1
#define EXIT_USAGE 2

static const char HELP[] =
    "usage: skipq exec [OPTIONS] PLUGIN.so KIND [PAYLOAD | -]\n"
    "       skipq exec --help-plugin PLUGIN.so\n"
    "\n"
    "Load PLUGIN.so as a host would (path and permission checks, ABI, declared\n"
    "keys, init), run the handler of KIND once on PAYLOAD (a JSON object; - reads\n"
    "it from standard input; default {}), and print the outcome, the error, the\n"
    "retry delay, the output, the handler's log lines and the duration.\n"
    "\n"
    "options:\n"
    "  -c, --config FILE      the plugin's [plugin NAME] section from FILE (a host's\n"
    "                         INI file, or one holding just that section)\n"
    "      --section NAME     which [plugin NAME] section, when FILE has several\n"
    "      --db CONNINFO      skipq_job_conn() gets a connection to this database,\n"
    "                         in a transaction rolled back after the handler\n"
    "      --commit           commit that transaction if the handler returns done\n"
    "      --attempt N        the attempt number the handler sees (default 1)\n"
    "      --max-attempts N   the job's max_attempts it sees (default 5)\n"
    "      --timeout DURATION the kind's timeout: should-stop and the deadline (default none)\n"
    "      --stop-after DURATION  should-stop turns true after this long (a shutdown)\n"
    "      --help-plugin      print the plugin's declared keys and exit\n"
    "\n"
    "exit status: 0 done, 1 retry or fail, 2 usage or load error\n";

static int usage(const char *fmt, const char *arg)
{
    fputs("skipq exec: ", stderr);
    char msg[2048];
    snprintf(msg, sizeof msg, fmt, arg);
    sq_fput_text(stderr, msg, SIZE_MAX, 0);
    fputs("\nTry 'skipq exec --help'.\n", stderr);
    return EXIT_USAGE;
}

static char *read_all(FILE *f)
{
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    for (size_t n; buf && (n = fread(buf + len, 1, cap - len - 1, f)) > 0;) {
        len += n;
        if (len + 1 == cap) {
            char *b = realloc(buf, cap *= 2);
            if (!b)
                free(buf);
            buf = b;
        }
    }
    if (buf)
        buf[len] = '\0';
    return buf;
}

static char *read_path(const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return NULL;
    char *text = read_all(f);
    fclose(f);
    return text;
}

struct args {
    const char *config, *section, *db, *plugin, *kind, *payload;
    bool commit, help_plugin;
    struct sq_exec_opts o;
};

static int parse(int argc, char **argv, struct args *a)
{
    static const struct option opts[] = {
        {"config", required_argument, NULL, 'c'},     {"section", required_argument, NULL, 'S'},
        {"db", required_argument, NULL, 'd'},         {"commit", no_argument, NULL, 'C'},
        {"attempt", required_argument, NULL, 'a'},    {"max-attempts", required_argument, NULL, 'm'},
        {"timeout", required_argument, NULL, 't'},    {"stop-after", required_argument, NULL, 's'},
        {"help-plugin", no_argument, NULL, 'P'},      {"help", no_argument, NULL, 'h'},
        {0, 0, 0, 0}};
    int o;
    int64_t v;
    optind = 1;
    while ((o = getopt_long(argc, argv, "+c:h", opts, NULL)) != -1) {
        switch (o) {
        case 'h':
            fputs(HELP, stdout);
            return 0;
        case 'c': a->config = optarg; break;
        case 'S': a->section = optarg; break;
        case 'd': a->db = optarg; break;
        case 'C': a->commit = true; break;
        case 'P': a->help_plugin = true; break;
        case 'a':
        case 'm':
            if (!sq_parse_int(optarg, 1, 100000, &v))
                return usage(o == 'a' ? "--attempt: \"%s\" is not a whole number from 1 to 100000"
                                      : "--max-attempts: \"%s\" is not a whole number from 1 to 100000",
                             optarg);
            *(o == 'a' ? &a->o.attempt : &a->o.max_attempts) = (int)v;
            break;
        case 't':
        case 's':
            if (!sq_parse_duration_ms(optarg, &v) || v <= 0)
                return usage(o == 't' ? "--timeout: \"%s\" is not a duration (500ms, 10s, 5m)"
                                      : "--stop-after: \"%s\" is not a duration (500ms, 10s, 5m)",
                             optarg);
            *(o == 't' ? &a->o.timeout_ms : &a->o.stop_after_ms) = v;
            break;
        default:
            return usage("%s", "invalid option");
        }
    }
    int need = a->help_plugin ? 1 : 2;
    if (argc - optind < need)
        return usage("%s", a->help_plugin ? "missing PLUGIN.so" : "missing PLUGIN.so or KIND");
    a->plugin = argv[optind++];
    a->kind = a->help_plugin ? NULL : argv[optind++];
    a->payload = optind < argc ? argv[optind++] : "{}";
    if (optind < argc)
        return usage("unexpected argument \"%s\"", argv[optind]);
    if (a->commit && !a->db)
        return usage("%s", "--commit needs --db");
    return -1;
}

static void print_report(const struct sq_exec_result *r)
{
    static const char *const names[] = {"done", "retry", "fail"};
    printf("outcome:  %s\n", names[r->outcome]);
    fputs("error:    ", stdout);
    sq_fput_text(stdout, r->error[0] ? r->error : "(none)", SIZE_MAX, 0);
    if (r->retry_in_ms >= 0)
        printf("\nretry_in: %" PRId64 "ms\n", r->retry_in_ms);
    else
        fputs("\nretry_in: (the kind's backoff)\n", stdout);
    fputs("output:   ", stdout);
    sq_fput_text(stdout, r->output ? r->output : "(none)", SIZE_MAX, 0);
    printf("\nduration: %.3fms\n", (double)r->duration_us / 1000.0);
    if (r->used_conn)
        printf("database: the handler's transaction was %s\n", r->committed ? "committed" : "rolled back");
    fputs("log:\n", stdout);
    for (const char *p = r->logs; *p;) {
        const char *eol = strchr(p, '\n');
        size_t n = eol ? (size_t)(eol - p) : strlen(p);
        char line[2048];
        snprintf(line, sizeof line, "%.*s", (int)(n < sizeof line ? n : sizeof line - 1), p);
        fputs("  ", stdout);
        sq_fput_text(stdout, line, SIZE_MAX, 0);
        fputc('\n', stdout);
        p += n + (eol != NULL);
    }
}

static int run(struct args *a, struct sq_exec *x)
{
    char err[2048];
    PGconn *conn = NULL;
    if (a->db && !(conn = PQconnectdb(a->db), conn && PQstatus(conn) == CONNECTION_OK)) {
        fprintf(stderr, "skipq exec: cannot connect to the database: %s", conn ? PQerrorMessage(conn) : "out of memory\n");
        PQfinish(conn);
        return EXIT_NOT_DONE;
    }
    char *stdin_text = NULL;
    if (strcmp(a->payload, "-") == 0 && !(a->payload = stdin_text = read_all(stdin))) {
        PQfinish(conn);
        return usage("%s", "cannot read the payload from standard input");
    }
    a->o.conn = conn;
    a->o.commit = a->commit;
    struct sq_exec_result r;
    bool bad_input;
    int rc;
    if (!sq_exec_run(x, a->kind, a->payload, &a->o, &r, &bad_input, err, sizeof err)) {
        rc = bad_input ? usage("%s", err) : (fprintf(stderr, "skipq exec: %s\n", err), EXIT_NOT_DONE);
    } else {
        print_report(&r);
        rc = r.outcome == SKIPQ_DONE ? 0 : EXIT_NOT_DONE;
        sq_exec_result_free(&r);
    }
    free(stdin_text);
    PQfinish(conn);
    return rc;
}

int sq_cli_exec(int argc, char **argv)
{
    struct args a = {0};
    int rc = parse(argc, argv, &a);
    if (rc >= 0)
        return rc;
    char err[2048];
    char *text = NULL;
    if (a.config && !(text = read_path(a.config))) {
        snprintf(err, sizeof err, "cannot read %s", a.config);
        return usage("%s", err);
    }
    struct sq_exec *x = sq_exec_new(text, a.config, a.section, err, sizeof err);
    free(text);
    if (!x)
        return usage("%s", err);
    if (!sq_exec_load(x, a.plugin, NULL, err, sizeof err)) {
        fprintf(stderr, "skipq exec: ");
        sq_fput_text(stderr, err, SIZE_MAX, 0);
        fputc('\n', stderr);
        sq_exec_free(x);
        return EXIT_USAGE;
    }
    if (a.help_plugin) {
        const skipq_plugin_info *info = sq_exec_info(x);
        printf("plugin %s %s (ABI %u.%u)\n\n", info->name ? info->name : "?", info->version ? info->version : "",
               info->abi_major, info->abi_minor);
        sq_plugin_keys_print(stdout, info->abi_minor >= 1 ? info->config_keys : NULL);
        rc = 0;
    } else {
        rc = run(&a, x);
    }
    sq_exec_free(x);
    return rc;
}
