/*
 * test_config.c -- sq_config_load(): what a good INI file turns into, and the
 * exact "FILE:LINE: message" a bad one gets; and that the option table,
 * the example file, the generated reference and reload.c agree. No
 * database needed.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "common/options.h"
#include "common/options_doc.h"
#include "common/util.h"
#include "harness.h"
#include "host/reload.h"

/* Load `text` written as `file`; on success *path_out holds the path. */
static struct sq_config *load_text(const char *file, const char *text, char *err, size_t errlen, char **path_out)
{
    char *path = th_write_file(file, text);
    err[0] = '\0';
    struct sq_config *cfg = sq_config_load(path, err, errlen);
    if (path_out)
        *path_out = path;
    else
        free(path);
    return cfg;
}

static struct sq_config *load_ok(const char *file, const char *text)
{
    char err[1024];
    struct sq_config *cfg = load_text(file, text, err, sizeof err, NULL);
    cr_assert_not_null(cfg, "%s should load, got: %s", file, err);
    return cfg;
}

/*
 * Loading `text` must fail with an error that starts with exactly
 * "PATH:LINE: " (or "PATH: " when line is 0) and contains each of the
 * (up to three, NULL-terminated) needles.
 */
static void expect_error(const char *file, const char *text, int line, const char *n1, const char *n2,
                         const char *n3)
{
    char err[1024];
    char *path = NULL;
    struct sq_config *cfg = load_text(file, text, err, sizeof err, &path);
    cr_assert_null(cfg, "%s loaded but should have been refused:\n%s", file, text);
    char prefix[700];
    if (line > 0)
        snprintf(prefix, sizeof prefix, "%s:%d: ", path, line);
    else
        snprintf(prefix, sizeof prefix, "%s: ", path);
    cr_assert(strncmp(err, prefix, strlen(prefix)) == 0, "error \"%s\" does not start with \"%s\"", err, prefix);
    const char *needles[] = {n1, n2, n3};
    for (int i = 0; i < 3; i++)
        if (needles[i])
            cr_assert_not_null(strstr(err, needles[i]), "error \"%s\" does not mention \"%s\"", err, needles[i]);
    free(path);
}

static const struct sq_group_conf *group(const struct sq_config *cfg, const char *queue)
{
    for (size_t i = 0; i < cfg->ngroups; i++)
        if (strcmp(cfg->groups[i].queue, queue) == 0)
            return &cfg->groups[i];
    cr_assert_fail("no group for queue \"%s\"", queue);
    return NULL;
}

static const struct sq_plugin_conf *plugin(const struct sq_config *cfg, const char *name)
{
    for (size_t i = 0; i < cfg->nplugins; i++)
        if (strcmp(cfg->plugins[i].name, name) == 0)
            return &cfg->plugins[i];
    cr_assert_fail("no plugin section \"%s\"", name);
    return NULL;
}

static const char *plugin_value(const struct sq_plugin_conf *p, const char *key)
{
    for (size_t i = 0; i < p->nkv; i++)
        if (strcmp(p->kv[i].key, key) == 0)
            return p->kv[i].value;
    return NULL;
}

/* ---- a good file ---------------------------------------------------------------- */

static const char GOOD[] =
    "; a full host configuration\n"                  /* 1 */
    "# comments of both kinds\n"                     /* 2 */
    "[database]\n"                                   /* 3 */
    "host = /tmp/skipq-sock\n"                       /* 4 */
    "port = 5433\n"                                  /* 5 */
    "dbname = jobs\n"                                /* 6 */
    "user = worker\n"                                /* 7 */
    "\n"                                             /* 8 */
    "[host]\n"                                       /* 9 */
    "name = box-1\n"                                 /* 10 */
    "poll_interval = 250ms\n"                        /* 11 */
    "lease = 5m\n"                                   /* 12 */
    "heartbeat = 30s\n"                              /* 13 */
    "shutdown_grace = 1h\n"                          /* 14 */
    "log_level = debug\n"                            /* 15 */
    "\n"                                             /* 16 */
    "[plugin mail]\n"                                /* 17 */
    "path = /usr/lib/skipq/mail.so\n"                /* 18 */
    "smtp_host = mail.example.com\n"                 /* 19 */
    "from = Jobs <jobs@example.com>\n"               /* 20 */
    "\n"                                             /* 21 */
    "[plugin noop]\n"                                /* 22 */
    "path = noop.so\n"                               /* 23 */
    "\n"                                             /* 24 */
    "[queue default]\n"                              /* 25 */
    "threads = 4\n"                                  /* 26 */
    "kinds = mail.send, mail.bounce ; two kinds\n"   /* 27 */
    "\n"                                             /* 28 */
    "[queue bulk]\n"                                 /* 29 */
    "threads = 252\n"                                /* 30 */
    "\n"                                             /* 31 */
    "[kind mail.send]\n"                             /* 32 */
    "max_attempts = 7\n"                             /* 33 */
    "backoff_base = 2s\n"                            /* 34 */
    "backoff_cap = 10m\n"                            /* 35 */
    "lease = 2m\n"                                   /* 36 */
    "timeout = 90s\n"                                /* 37 */
    "\n"                                             /* 38 */
    "[kind mail.bounce]\n"                           /* 39 */
    "max_attempts = 1\n";                            /* 40 */

Test(config, good_file_parses_with_the_right_values, .timeout = 60)
{
    struct sq_config *cfg = load_ok("good.ini", GOOD);

    cr_assert_eq(cfg->database.ndb, 4);
    const char *db_keys[] = {"host", "port", "dbname", "user"};
    const char *db_values[] = {"/tmp/skipq-sock", "5433", "jobs", "worker"};
    for (size_t i = 0; i < 4; i++) {
        cr_expect_str_eq(cfg->database.db[i].key, db_keys[i]);
        cr_expect_str_eq(cfg->database.db[i].value, db_values[i]);
    }
    cr_expect_not(cfg->database.db_has_password);

    cr_expect_str_eq(cfg->host_name, "box-1");
    cr_expect_eq(cfg->poll_ms, 250);
    cr_expect_eq(cfg->lease_ms, 5 * 60 * 1000);
    cr_expect_eq(cfg->heartbeat_ms, 30 * 1000);
    cr_expect_eq(cfg->grace_ms, 3600 * 1000);
    cr_expect_eq(cfg->log_level, SQ_LOG_DEBUG);

    cr_assert_eq(cfg->nplugins, 2);
    const struct sq_plugin_conf *mail = plugin(cfg, "mail");
    cr_expect_str_eq(mail->path, "/usr/lib/skipq/mail.so");
    cr_expect_eq(mail->line, 17);
    /* every key of the section is passed through to the plugin, path included */
    cr_assert_eq(mail->nkv, 3);
    cr_expect_str_eq(mail->kv[0].key, "path");
    cr_expect_str_eq(plugin_value(mail, "smtp_host"), "mail.example.com");
    cr_expect_str_eq(plugin_value(mail, "from"), "Jobs <jobs@example.com>");
    cr_expect_str_eq(plugin(cfg, "noop")->path, "noop.so");

    cr_assert_eq(cfg->ngroups, 2);
    const struct sq_group_conf *def = group(cfg, "default");
    cr_expect_eq(def->threads, 4);
    cr_expect_eq(def->line, 25);
    cr_assert_eq(def->nkinds, 2, "kinds = mail.send, mail.bounce ; comment gave %zu kinds", def->nkinds);
    cr_expect_str_eq(def->kinds[0], "mail.send");
    cr_expect_str_eq(def->kinds[1], "mail.bounce");
    const struct sq_group_conf *bulk = group(cfg, "bulk");
    cr_expect_eq(bulk->threads, 252);
    cr_expect_null(bulk->kinds, "no kinds key means every kind");
    cr_expect_eq(bulk->nkinds, 0);

    cr_assert_eq(cfg->nkinds, 2);
    const struct sq_kind_conf *send = sq_config_kind(cfg, "mail.send");
    cr_assert_not_null(send);
    cr_expect_eq(send->max_attempts, 7);
    cr_expect_eq(send->backoff_base_ms, 2000);
    cr_expect_eq(send->backoff_cap_ms, 10 * 60 * 1000);
    cr_expect_eq(send->lease_ms, 2 * 60 * 1000);
    cr_expect_eq(send->timeout_ms, 90 * 1000);
    cr_expect_eq(send->line, 32);
    const struct sq_kind_conf *bounce = sq_config_kind(cfg, "mail.bounce");
    cr_assert_not_null(bounce);
    cr_expect_eq(bounce->max_attempts, 1);
    cr_expect_eq(bounce->backoff_base_ms, SQ_DEFAULT_BACKOFF_BASE_MS);
    cr_expect_eq(bounce->backoff_cap_ms, SQ_DEFAULT_BACKOFF_CAP_MS);
    cr_expect_eq(bounce->lease_ms, 0, "no lease key: the host's lease");
    cr_expect_eq(bounce->timeout_ms, 0, "no timeout key: no timeout");
    cr_expect_null(sq_config_kind(cfg, "mail"));

    char err[512];
    cr_expect(sq_config_check_runnable(cfg, err, sizeof err), "%s", err);
    sq_config_free(cfg);
}

Test(config, defaults_when_sections_are_absent, .timeout = 60)
{
    struct sq_config *cfg = load_ok("min.ini", "[queue default]\n");
    cr_expect_eq(cfg->database.ndb, 0);
    cr_expect_null(cfg->host_name);
    cr_expect_eq(cfg->poll_ms, 1000);
    cr_expect_eq(cfg->lease_ms, 30000);
    cr_expect_eq(cfg->heartbeat_ms, 10000);
    cr_expect_eq(cfg->grace_ms, 30000);
    cr_expect_eq(cfg->log_level, SQ_LOG_INFO);
    cr_expect_eq(cfg->nplugins, 0);
    cr_expect_eq(cfg->nkinds, 0);
    sq_config_free(cfg);
}

Test(config, duration_spellings, .timeout = 60)
{
    struct sq_config *cfg = load_ok("dur.ini",
                                    "[host]\n"
                                    "poll_interval = 1.5s\n"
                                    "lease = 2\n"
                                    "heartbeat = 100ms\n"
                                    "shutdown_grace = 0\n"
                                    "[kind k]\n"
                                    "backoff_base = 0ms\n"
                                    "backoff_cap = 2d\n");
    cr_expect_eq(cfg->poll_ms, 1500);
    cr_expect_eq(cfg->lease_ms, 2000, "a bare number is seconds");
    cr_expect_eq(cfg->heartbeat_ms, 100);
    cr_expect_eq(cfg->grace_ms, 0);
    const struct sq_kind_conf *k = sq_config_kind(cfg, "k");
    cr_assert_not_null(k);
    cr_expect_eq(k->backoff_base_ms, 0);
    cr_expect_eq(k->backoff_cap_ms, 2LL * 86400 * 1000);
    sq_config_free(cfg);
}

Test(config, database_url_becomes_dbname_and_marks_a_password, .timeout = 60)
{
    struct sq_config *cfg = load_ok("url.ini", "[database]\n"
                                               "url = postgresql://u:secret@db.example.com/jobs\n"
                                               "application_name = app\n");
    cr_assert_eq(cfg->database.ndb, 2);
    cr_expect_str_eq(cfg->database.db[0].key, "dbname");
    cr_expect_str_eq(cfg->database.db[0].value, "postgresql://u:secret@db.example.com/jobs");
    cr_expect_str_eq(cfg->database.db[1].key, "application_name");
    cr_expect(cfg->database.db_has_password);
    sq_config_free(cfg);
}

Test(config, bom_and_crlf_parse_fine, .timeout = 60)
{
    struct sq_config *cfg = load_ok("crlf.ini", "\xEF\xBB\xBF[host]\r\n"
                                                "name = crlf-box\r\n"
                                                "lease = 20s\r\n"
                                                "\r\n"
                                                "[plugin p]\r\n"
                                                "path = /opt/p.so\r\n"
                                                "[queue q]\r\n"
                                                "kinds = a, b\r\n");
    cr_expect_str_eq(cfg->host_name, "crlf-box");
    cr_expect_eq(cfg->lease_ms, 20000);
    cr_assert_eq(cfg->nplugins, 1);
    cr_expect_str_eq(cfg->plugins[0].path, "/opt/p.so", "CR left in the value: \"%s\"", cfg->plugins[0].path);
    cr_expect_eq(cfg->plugins[0].line, 5);
    const struct sq_group_conf *q = group(cfg, "q");
    cr_assert_eq(q->nkinds, 2);
    cr_expect_str_eq(q->kinds[1], "b");
    sq_config_free(cfg);
}

Test(config, crlf_errors_keep_the_users_line_numbers, .timeout = 60)
{
    expect_error("crlf_bad.ini", "\xEF\xBB\xBF[host]\r\nname = x\r\nleese = 20s\r\n", 3, "unknown key \"leese\"",
                 "[host]", NULL);
}

Test(config, indented_key_is_its_own_key_not_a_continuation, .timeout = 60)
{
    struct sq_config *cfg = load_ok("indent.ini", "[plugin p]\n"
                                                  "path = /opt/p.so\n"
                                                  "    color = blue\n"
                                                  "[queue q]\n"
                                                  "kinds = a\n"
                                                  "\tthreads = 3\n");
    const struct sq_plugin_conf *p = plugin(cfg, "p");
    cr_expect_str_eq(p->path, "/opt/p.so");
    cr_expect_eq(p->nkv, 2);
    cr_expect_str_eq(plugin_value(p, "color"), "blue");
    const struct sq_group_conf *q = group(cfg, "q");
    cr_assert_eq(q->nkinds, 1);
    cr_expect_str_eq(q->kinds[0], "a");
    cr_expect_eq(q->threads, 3);
    sq_config_free(cfg);
}

Test(config, indented_line_without_equals_is_an_error, .timeout = 60)
{
    /* with continuations this would silently become part of path */
    expect_error("indent_bad.ini", "[plugin p]\npath = /opt/p.so\n    /more.so\n", 3, "key = value", NULL, NULL);
}

Test(config, a_190_character_line_is_accepted, .timeout = 60)
{
    char text[512];
    char value[200];
    /* "k = " is 4 characters: 186 more make exactly 190 */
    memset(value, 'v', 186);
    value[186] = '\0';
    snprintf(text, sizeof text, "[plugin p]\npath = /opt/p.so\nk = %s\n", value);
    struct sq_config *cfg = load_ok("line190.ini", text);
    const char *v = plugin_value(plugin(cfg, "p"), "k");
    cr_assert_not_null(v);
    cr_expect_str_eq(v, value, "a 190-character line came back changed");
    sq_config_free(cfg);
}

/* ---- errors: exact FILE:LINE: prefix and a message naming the problem ---- */

Test(config, unknown_key_in_database, .timeout = 60)
{
    expect_error("e.ini", "[database]\nhost = x\npasword = s\n", 3, "unknown key \"pasword\"", "[database]", NULL);
}

Test(config, unknown_key_in_host, .timeout = 60)
{
    expect_error("e.ini", "[database]\nhost = x\n\n[host]\nname = a\nthreads = 3\n", 6, "unknown key \"threads\"",
                 "[host]", NULL);
}

Test(config, unknown_key_in_queue, .timeout = 60)
{
    expect_error("e.ini", "[queue mail]\nthreads = 2\nkind = a\n", 3, "unknown key \"kind\"", "[queue mail]", NULL);
}

Test(config, unknown_key_in_kind, .timeout = 60)
{
    expect_error("e.ini", "[kind mail.send]\nmax_attempts = 3\nmax_attempt = 4\n", 3, "unknown key \"max_attempt\"",
                 "[kind mail.send]", NULL);
}

Test(config, unknown_section, .timeout = 60)
{
    expect_error("e.ini", "[host]\nname = a\n[hosts]\nname = b\n", 4, "unknown section [hosts]", NULL, NULL);
}

Test(config, section_word_without_a_name_is_unknown, .timeout = 60)
{
    expect_error("e.ini", "[queue]\nthreads = 2\n", 2, "unknown section [queue]", NULL, NULL);
}

Test(config, missing_equals, .timeout = 60)
{
    expect_error("e.ini", "[queue q]\nthreads 4\n", 2, "expected \"key = value\"", NULL, NULL);
}

Test(config, colon_is_not_a_separator, .timeout = 60)
{
    expect_error("e.ini", "[queue q]\nthreads: 4\n", 2, "expected \"key = value\"", NULL, NULL);
}

Test(config, duplicate_key, .timeout = 60)
{
    expect_error("e.ini", "[host]\nlease = 30s\nname = a\nlease = 60s\n", 4, "duplicate key \"lease\"", "[host]",
                 NULL);
}

Test(config, duplicate_key_in_plugin_section, .timeout = 60)
{
    expect_error("e.ini", "[plugin p]\npath = /a.so\npath = /b.so\n", 3, "duplicate key \"path\"", "[plugin p]",
                 NULL);
}

Test(config, duplicate_section, .timeout = 60)
{
    expect_error("e.ini", "[queue q]\nthreads = 2\n\n[kind k]\nmax_attempts = 2\n[queue q]\nthreads = 5\n", 6,
                 "duplicate section [queue q]", "first at line 1", NULL);
}

Test(config, duplicate_section_spelled_with_two_spaces, .timeout = 60)
{
    /* "[queue  q]" configures the same queue as "[queue q]": a second
     * threads line must not silently override the first */
    expect_error("e.ini", "[queue q]\nthreads = 2\n[queue  q]\nthreads = 5\n", 3, "q", NULL, NULL);
}

Test(config, line_longer_than_190, .timeout = 60)
{
    char text[512];
    char value[200];
    memset(value, 'v', 187); /* "k = " + 187 = 191 characters */
    value[187] = '\0';
    snprintf(text, sizeof text, "[plugin p]\npath = /opt/p.so\n\nk = %s\n", value);
    expect_error("long.ini", text, 4, "191 characters", "190", NULL);
}

Test(config, line_longer_than_inih_buffer, .timeout = 60)
{
    /* 250 characters: inih alone would split this into two lines */
    char text[600];
    char value[300];
    memset(value, 'v', 244); /* "url = " + 244 = 250 characters */
    value[244] = '\0';
    snprintf(text, sizeof text, "[database]\nurl = %s\n", value);
    expect_error("long2.ini", text, 2, "250 characters", "190", NULL);
}

Test(config, key_outside_any_section, .timeout = 60)
{
    expect_error("e.ini", "; header comment\nlease = 30s\n[host]\nname = a\n", 2, "\"lease\"", "outside any [section]",
                 NULL);
}

Test(config, threads_zero, .timeout = 60)
{
    expect_error("e.ini", "[queue q]\nthreads = 0\n", 2, "threads", "\"0\"", "1 to 256");
}

Test(config, threads_too_many, .timeout = 60)
{
    expect_error("e.ini", "[queue q]\nkinds = a\nthreads = 100000\n", 3, "threads", "\"100000\"", "1 to 256");
}

Test(config, threads_not_a_number, .timeout = 60)
{
    expect_error("e.ini", "[queue q]\nthreads = abc\n", 2, "threads", "\"abc\"", NULL);
}

Test(config, threads_trailing_garbage, .timeout = 60)
{
    expect_error("e.ini", "[queue q]\nthreads = 4x\n", 2, "threads", "\"4x\"", NULL);
}

Test(config, bad_duration, .timeout = 60)
{
    expect_error("e.ini", "[host]\nname = a\nlease = 30 seconds\n", 3, "lease", "\"30 seconds\"",
                 "is not a duration");
}

Test(config, negative_duration, .timeout = 60)
{
    expect_error("e.ini", "[kind k]\nbackoff_base = -5s\n", 2, "backoff_base", "\"-5s\"", "is not a duration");
}

Test(config, unknown_duration_unit, .timeout = 60)
{
    expect_error("e.ini", "[host]\npoll_interval = 5x\n", 2, "poll_interval", "\"5x\"", NULL);
}

Test(config, host_lease_below_minimum, .timeout = 60)
{
    expect_error("e.ini", "[host]\nlease = 500ms\n", 2, "lease", "too short", NULL);
}

Test(config, bad_log_level, .timeout = 60)
{
    expect_error("e.ini", "[host]\nlog_level = loud\n", 2, "log_level", "\"loud\"", NULL);
}

Test(config, heartbeat_not_shorter_than_lease, .timeout = 60)
{
    /* the file and the [host] section's line, like every other semantic error */
    expect_error("e.ini", "[database]\nhost = x\n[host]\nlease = 10s\nheartbeat = 10s\n", 3, "heartbeat", "lease",
                 NULL);
}

Test(config, heartbeat_versus_default_lease_names_both, .timeout = 60)
{
    char err[1024];
    struct sq_config *cfg = load_text("e.ini", "[host]\nheartbeat = 45s\n", err, sizeof err, NULL);
    cr_assert_null(cfg);
    cr_expect_not_null(strstr(err, "45000ms"), "%s", err);
    cr_expect_not_null(strstr(err, "30000ms"), "%s", err);
}

Test(config, kind_lease_not_longer_than_heartbeat, .timeout = 60)
{
    expect_error("e.ini", "[host]\nheartbeat = 5s\nlease = 60s\n\n[kind slow]\nmax_attempts = 2\nlease = 5s\n", 5,
                 "[kind slow]", "lease must be longer than [host] heartbeat", "5000ms");
}

Test(config, connections_default_to_one_per_thread_up_to_eight_then_one_per_batch, .timeout = 60)
{
    struct sq_config *cfg = load_ok("conns.ini", "[queue a]\nthreads = 3\n[queue b]\nthreads = 64\n"
                                                 "[queue c]\nthreads = 64\nconnections = 2\n"
                                                 "[queue d]\nthreads = 4\nisolation = process\n"
                                                 "[queue e]\nthreads = 128\nbatch = 32\n[queue f]\nthreads = 8\n");
    cr_expect_eq(sq_config_connections(group(cfg, "a")), 3);
    cr_expect_eq(sq_config_connections(group(cfg, "b")), 2, "64 threads with batch 64: two sessions");
    cr_expect_eq(sq_config_connections(group(cfg, "e")), 4, "128 threads with batch 32: one session per 32");
    cr_expect_eq(sq_config_connections(group(cfg, "f")), 8, "eight threads: one session each");
    cr_expect_eq(sq_config_connections(group(cfg, "c")), 2);
    cr_expect_eq(sq_config_connections(group(cfg, "d")), 4, "a worker process has a session of its own");
    sq_config_free(cfg);
}

Test(config, more_connections_than_threads_is_refused, .timeout = 60)
{
    expect_error("e.ini", "[queue q]\nthreads = 2\nconnections = 4\n", 1, "[queue q]", "connections (4)",
                 "threads (2)");
}

Test(config, connections_with_process_isolation_is_refused, .timeout = 60)
{
    expect_error("e.ini", "[queue q]\nthreads = 8\nconnections = 2\nisolation = process\n", 1, "[queue q]",
                 "connections", "isolation = thread");
}

Test(config, backoff_base_larger_than_cap, .timeout = 60)
{
    expect_error("e.ini", "[queue q]\nthreads = 1\n[kind k]\nbackoff_base = 10m\nbackoff_cap = 1m\n", 3, "[kind k]",
                 "backoff_base", "backoff_cap");
}

Test(config, missing_file_names_the_path, .timeout = 60)
{
    char path[600];
    snprintf(path, sizeof path, "%s/does-not-exist.ini", th_tmpdir());
    char err[1024];
    struct sq_config *cfg = sq_config_load(path, err, sizeof err);
    cr_assert_null(cfg);
    char prefix[700];
    snprintf(prefix, sizeof prefix, "%s: ", path);
    cr_expect(strncmp(err, prefix, strlen(prefix)) == 0, "\"%s\" does not start with \"%s\"", err, prefix);
    cr_expect_not_null(strstr(err, "No such file"), "%s", err);
}

Test(config, plugin_section_without_path, .timeout = 60)
{
    expect_error("e.ini", "[host]\nname = a\n\n[plugin mail]\nsmtp_host = x\n", 4, "[plugin mail]", "no path", NULL);
}

Test(config, empty_plugin_section_is_not_ignored, .timeout = 60)
{
    /* a [plugin NAME] header alone still asks for a plugin: it has no path */
    expect_error("e.ini", "[host]\nname = a\n\n[plugin mail]\n\n[queue q]\nthreads = 1\n", 4, "[plugin mail]",
                 "no path", NULL);
}

Test(config, plugin_path_empty, .timeout = 60)
{
    expect_error("e.ini", "[plugin p]\npath =\n", 2, "[plugin p]", "path must not be empty", NULL);
}

Test(config, empty_queue_section_serves_the_queue, .timeout = 60)
{
    /* [queue NAME] alone means one thread serving every kind, as documented
     * by the defaults (threads = 1, no kinds key); it must not vanish */
    struct sq_config *cfg = load_ok("emptyq.ini", "[queue bulk]\n\n[queue mail]\nthreads = 2\n");
    cr_expect_eq(cfg->ngroups, 2, "[queue bulk] without keys was dropped: %zu group(s)", cfg->ngroups);
    sq_config_free(cfg);
}

Test(config, bad_kind_name_in_queue_kinds, .timeout = 60)
{
    expect_error("e.ini", "[queue q]\nkinds = a, b c\n", 2, "\"b c\"", "not a valid kind name", NULL);
}

Test(config, empty_kinds_list, .timeout = 60)
{
    expect_error("e.ini", "[queue q]\nkinds = ,\n", 2, "kinds", "empty list", NULL);
}

Test(config, invalid_queue_name, .timeout = 60)
{
    expect_error("e.ini", "[queue mail/out]\nthreads = 1\n", 2, "[queue mail/out]", NULL, NULL);
}

Test(config, section_header_without_closing_bracket, .timeout = 60)
{
    expect_error("e.ini", "[host]\nname = a\n[queue q\nthreads = 1\n", 3, "']'", NULL, NULL);
}

Test(config, max_attempts_zero, .timeout = 60)
{
    expect_error("e.ini", "[kind k]\nmax_attempts = 0\n", 2, "max_attempts", "\"0\"", NULL);
}

Test(config, runnable_needs_plugins_and_queues, .timeout = 60)
{
    char err[512];
    struct sq_config *cfg = load_ok("noplug.ini", "[queue q]\nthreads = 1\n");
    cr_expect_not(sq_config_check_runnable(cfg, err, sizeof err));
    cr_expect_not_null(strstr(err, "[plugin NAME]"), "%s", err);
    sq_config_free(cfg);

    cfg = load_ok("noqueue.ini", "[plugin p]\npath = /opt/p.so\n");
    cr_expect_not(sq_config_check_runnable(cfg, err, sizeof err));
    cr_expect_not_null(strstr(err, "[queue NAME]"), "%s", err);
    sq_config_free(cfg);

    cfg = load_ok("toomany.ini", "[plugin p]\npath = /opt/p.so\n[queue a]\nthreads = 200\n[queue b]\nthreads = 57\n");
    cr_expect_not(sq_config_check_runnable(cfg, err, sizeof err));
    cr_expect_not_null(strstr(err, "257 threads"), "%s", err);
    sq_config_free(cfg);
}

Test(config, text_after_a_section_header_is_refused, .timeout = 60)
{
    expect_error("after.ini", "[queue a]threads = 999\n", 1, "text after the section header", "[queue a]", NULL);
}

Test(config, kinds_list_with_empty_or_repeated_entries_is_refused, .timeout = 60)
{
    expect_error("empty.ini", "[queue a]\nkinds = test,,\n", 2, "kinds", "not a valid kind name", NULL);
    expect_error("twice.ini", "[queue a]\nkinds = test, test\n", 2, "kinds", "listed twice", NULL);
}

Test(config, synchronous_commit_and_batch, .timeout = 60)
{
    struct sq_config *cfg = load_ok("sync.ini", "[host]\nsynchronous_commit = off\n[queue a]\nbatch = 50\n");
    cr_expect_not(cfg->synchronous_commit);
    cr_expect_eq(group(cfg, "a")->batch, 50);
    sq_config_free(cfg);
    expect_error("batch.ini", "[queue a]\nbatch = 0\n", 2, "batch", "1 to 1000", NULL);
    expect_error("sync2.ini", "[host]\nsynchronous_commit = maybe\n", 2, "synchronous_commit", "maybe", NULL);
}

/* ---- scheduling keys: [cron NAME], [kind] limits, [queue] aging ---------------------- */

Test(config, scheduling_keys_parse_with_defaults, .timeout = 60)
{
    struct sq_config *cfg = load_ok("sched.ini", "[queue q]\npriority_aging = 30s\npriority_aging_cap = 50\n"
                                                 "[queue r]\n"
                                                 "[kind k]\nmax_attempts = 7\nmax_running = 4\nrate = 10/s\n"
                                                 "[kind m]\nrate = 100 / min\n"
                                                 "[cron nightly]\nschedule = 30 2 * * MON-FRI\nkind = k\n"
                                                 "[cron full]\nschedule = @hourly\nkind = m\ntimezone = Europe/Paris\n"
                                                 "queue = q\npayload = {\"a\": 1}\npriority = -5\nmax_attempts = 2\n"
                                                 "catch_up = all\n");
    cr_expect_eq(group(cfg, "q")->aging_ms, 30000);
    cr_expect_eq(group(cfg, "q")->aging_cap, 50);
    cr_expect_eq(group(cfg, "r")->aging_ms, 0);
    cr_expect_eq(group(cfg, "r")->aging_cap, 1000000);
    const struct sq_kind_conf *k = sq_config_kind(cfg, "k"), *m = sq_config_kind(cfg, "m");
    cr_expect_eq(k->max_running, 4);
    cr_expect_eq(k->rate, 10);
    cr_expect_str_eq(k->rate_unit, "second");
    cr_expect_eq(m->max_running, 0);
    cr_expect_eq(m->rate, 100);
    cr_expect_str_eq(m->rate_unit, "minute");
    cr_assert_eq(cfg->ncrons, 2);
    const struct sq_cron_conf *n = &cfg->crons[0], *f = &cfg->crons[1];
    cr_expect_str_eq(n->name, "nightly");
    cr_expect_str_eq(n->schedule, "30 2 * * MON-FRI");
    cr_expect_str_eq(n->timezone, "UTC");
    cr_expect_str_eq(n->queue, "default");
    cr_expect_str_eq(n->payload, "{}");
    cr_expect_eq(n->priority, 0);
    cr_expect_eq(n->max_attempts, 7); /* the kind's */
    cr_expect_eq(n->catch_up, SQ_CATCH_UP_LATEST);
    cr_expect_eq(n->cron.hours, 1u << 2);
    cr_expect_str_eq(f->timezone, "Europe/Paris");
    cr_expect_str_eq(f->queue, "q");
    cr_expect_str_eq(f->payload, "{\"a\": 1}");
    cr_expect_eq(f->priority, -5);
    cr_expect_eq(f->max_attempts, 2);
    cr_expect_eq(f->catch_up, SQ_CATCH_UP_ALL);
    sq_config_free(cfg);
}

Test(config, bad_scheduling_keys, .timeout = 60)
{
    expect_error("e.ini", "[queue q]\npriority_aging = 10ms\n", 2, "[queue q] priority_aging", "too short", NULL);
    expect_error("e.ini", "[queue q]\npriority_aging_cap = 2000000\n", 2, "priority_aging_cap", NULL, NULL);
    expect_error("e.ini", "[kind k]\nmax_running = 0\n", 2, "[kind k] max_running", NULL, NULL);
    expect_error("e.ini", "[kind k]\nrate = 5/hour\n", 2, "[kind k] rate", "N/s or N/min", NULL);
    expect_error("e.ini", "[cron c]\nkind = k\n\n", 1, "[cron c] has no schedule", NULL, NULL);
    expect_error("e.ini", "[host]\n[cron c]\nschedule = 0 0 31 2 *\n", 3, "[cron c] schedule", "never matches", NULL);
    expect_error("e.ini", "[cron c]\nschedule = @daily\nkind = bad kind\n", 3, "[cron c] kind", NULL, NULL);
    expect_error("e.ini", "[cron c]\nschedule = @daily\nkind = k\npayload = [1]\n", 4, "payload", "JSON object",
                 NULL);
    expect_error("e.ini", "[cron c]\nschedule = @daily\nkind = k\ntimezone = Europe/Paris;rm\n", 4, "timezone", NULL,
                 NULL);
    expect_error("e.ini", "[cron c]\nschedule = @daily\nkind = k\ncatch_up = sometimes\n", 4, "catch_up", NULL, NULL);
    expect_error("e.ini", "[cron c d]\nschedule = @daily\n", 1, "exactly one space", NULL, NULL);
}

/* ---- numbers that are not: every duration and whole-number key ----------------------- */

static const struct {
    const char *section, *key;
} DURATION_KEYS[] = {
    {"host", "poll_interval"},  {"host", "lease"},          {"host", "heartbeat"},      {"host", "shutdown_grace"},
    {"retention", "done"},      {"retention", "dead"},      {"retention", "cancelled"}, {"retention", "interval"},
    {"metrics", "unhealthy_after"}, {"queue q", "priority_aging"}, {"kind k", "backoff_base"},
    {"kind k", "backoff_cap"},  {"kind k", "lease"},        {"kind k", "timeout"},
};

static const struct {
    const char *section, *key;
} INT_KEYS[] = {
    {"retention", "batch"},   {"queue q", "threads"},   {"queue q", "batch"}, {"queue q", "priority_aging_cap"},
    {"kind k", "max_attempts"}, {"kind k", "max_running"}, {"cron c", "priority"}, {"cron c", "max_attempts"},
};

/* Each value is refused before any conversion (a non-finite double
 * converted to an integer is undefined behaviour: this suite runs under
 * UBSan too), with what is wrong with it. */
Test(config, non_finite_and_out_of_range_durations_are_refused_with_what_is_wrong, .timeout = 60)
{
    static const struct {
        const char *value, *says;
    } bad[] = {
        {"nan", "\"nan\" is not a number"},
        {"NaN", "\"NaN\" is not a number"},
        {"inf", "\"inf\" is not a number"},
        {"infinity", "\"infinity\" is not a number"},
        {"-inf", "take no sign"},
        {"-0", "take no sign"},
        {"+5s", "take no sign"},
        {"1e300", "\"1e300\" is too long (maximum 365250d"},
        {"1e30s", "\"1e30s\" is too long"},
        {"1e999", "is too long"},
        {"99999999999999999999999", "is too long"},
        {"365251d", "is too long"},
        {"30s junk", "is not a duration"},
        {"0x10", "is not a duration"},
        {"5e", "is not a duration"},
        {".", "is not a duration"},
    };
    for (size_t k = 0; k < sizeof DURATION_KEYS / sizeof DURATION_KEYS[0]; k++) {
        for (size_t v = 0; v < sizeof bad / sizeof bad[0]; v++) {
            char text[256], where[96];
            snprintf(text, sizeof text, "[%s]\n%s = %s\n", DURATION_KEYS[k].section, DURATION_KEYS[k].key,
                     bad[v].value);
            snprintf(where, sizeof where, "[%s] %s: ", DURATION_KEYS[k].section, DURATION_KEYS[k].key);
            expect_error("d.ini", text, 2, where, bad[v].says, NULL);
        }
    }
    /* The edges that are fine. */
    struct sq_config *cfg = load_ok("edge.ini", "[retention]\ndone = 365250d\ndead = 1.5e3ms\ncancelled = .5s\n");
    cr_expect_eq(cfg->keep_done_ms, 365250LL * 86400000LL);
    cr_expect_eq(cfg->keep_dead_ms, 1500);
    cr_expect_eq(cfg->keep_cancelled_ms, 500);
    sq_config_free(cfg);
}

Test(config, non_numbers_and_out_of_range_whole_numbers_are_refused_with_what_is_wrong, .timeout = 60)
{
    static const struct {
        const char *value, *says;
    } bad[] = {
        {"nan", "\"nan\" is not a number"},
        {"inf", "\"inf\" is not a number"},
        {"-inf", "\"-inf\" is not a number"},
        {"1e300", "\"1e300\" is not a whole number"},
        {"1.5", "is not a whole number"},
        {"99999999999999999999", "is out of range"},
        {"-99999999999999999999", "is out of range"},
        {"9223372036854775808", "is out of range"},
        {"4x", "\"4x\" is not a whole number"},
        {"+5", "without '+'"},
        {" 5", "is not a number"},
        {"0x10", "is not a whole number"},
    };
    for (size_t k = 0; k < sizeof INT_KEYS / sizeof INT_KEYS[0]; k++) {
        for (size_t v = 0; v < sizeof bad / sizeof bad[0]; v++) {
            char text[256], where[96];
            /* inih trims values, so " 5" reaches skipq as "5": quote-free
             * leading blanks are checked through sq_parse_int_why below. */
            if (bad[v].value[0] == ' ')
                continue;
            snprintf(text, sizeof text, "[%s]\n%s = %s\n", INT_KEYS[k].section, INT_KEYS[k].key, bad[v].value);
            snprintf(where, sizeof where, "[%s] %s: ", INT_KEYS[k].section, INT_KEYS[k].key);
            expect_error("i.ini", text, 2, where, bad[v].says, "it must be a whole number from");
        }
    }
    int64_t out = 7;
    cr_expect_str_eq(sq_parse_int_why(" 5", 0, 10, &out), "is not a number");
    cr_expect_null(sq_parse_int_why("-0", -5, 5, &out));
    cr_expect_eq(out, 0);
    expect_error("i.ini", "[kind k]\nmax_attempts = -0\n", 2, "\"-0\" is out of range", NULL, NULL);
    expect_error("r.ini", "[kind k]\nrate = nan/s\n", 2, "[kind k] rate", "N is not a number", NULL);
    expect_error("r.ini", "[kind k]\nrate = 1e9/min\n", 2, "[kind k] rate", "N is not a whole number", NULL);
    expect_error("p.ini", "[metrics]\nlisten = 127.0.0.1:nan\n", 2, "[metrics] listen", "port", NULL);
}

/* The fuzz corpus for the INI loader: each file says on its first line
 * what loading it must give ("; expect ok" or "; expect LINE: TEXT"). */
Test(config, the_corpus_loads_as_each_file_expects, .timeout = 60)
{
    const char *dir = SKIPQ_SOURCE_DIR "/tests/fuzz/corpus/ini";
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "%s", dir);
    int files = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.')
            continue;
        char path[600], head[300] = "", err[1024] = "";
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        FILE *f = fopen(path, "r");
        cr_assert_not_null(f);
        cr_assert_not_null(fgets(head, sizeof head, f), "%s is empty", path);
        fclose(f);
        head[strcspn(head, "\n")] = '\0';
        files++;
        struct sq_config *cfg = sq_config_load(path, err, sizeof err);
        int line = 0, n = 0;
        if (strcmp(head, "; expect ok") == 0) {
            cr_expect_not_null(cfg, "%s: %s", e->d_name, err);
        } else {
            cr_assert(sscanf(head, "; expect %d: %n", &line, &n) == 1 && n > 0, "%s: no expectation line", path);
            char prefix[700];
            snprintf(prefix, sizeof prefix, "%s:%d: ", path, line);
            cr_expect_null(cfg, "%s loaded", e->d_name);
            cr_expect(strncmp(err, prefix, strlen(prefix)) == 0, "%s: \"%s\" is not at line %d", e->d_name, err,
                      line);
            cr_expect_not_null(strstr(err, head + n), "%s: \"%s\" does not say \"%s\"", e->d_name, err, head + n);
        }
        sq_config_free(cfg);
    }
    closedir(d);
    cr_expect_geq(files, 10);
}

Test(config, claim_bytes_spellings_and_refusals, .timeout = 60)
{
    static const struct {
        const char *value;
        int64_t bytes;
    } good[] = {{"1", 1}, {"65536", 65536}, {"64kB", 65536}, {"64KiB", 65536}, {"16MiB", 16LL << 20},
                {"16MB", 16LL << 20}, {"1GiB", 1LL << 30}, {"512B", 512}};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char text[64];
        snprintf(text, sizeof text, "[host]\nclaim_bytes = %s\n", good[i].value);
        struct sq_config *cfg = load_ok("cb.ini", text);
        cr_expect_eq(cfg->claim_bytes, good[i].bytes, "%s", good[i].value);
        sq_config_free(cfg);
    }
    struct sq_config *cfg = load_ok("cb.ini", "[queue q]\n");
    cr_expect_eq(cfg->claim_bytes, 32LL << 20, "the default is 32 MiB");
    sq_config_free(cfg);
    static const char *const bad[] = {"0", "-1", "2GiB", "16 MiB", "16mb", "1.5MiB", "nan", "99999999999999999999",
                                      "9223372036854775807GiB", "MiB", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char text[96];
        snprintf(text, sizeof text, "[host]\nname = a\nclaim_bytes = %s\n", bad[i]);
        expect_error("cb.ini", text, 3, "[host] claim_bytes", "from 1 byte to 1GiB", NULL);
    }
}

/* The example configuration is valid, scheduling sections included. */
Test(config, example_file_parses, .timeout = 60)
{
    char err[1024];
    struct sq_config *cfg = sq_config_load(SKIPQ_SOURCE_DIR "/conf/skipq.ini", err, sizeof err);
    cr_assert_not_null(cfg, "%s", err);
    cr_expect_eq(cfg->ncrons, 1);
    sq_config_free(cfg);
}

/* ---- the option table and what is made from it ------------------------------------------ */

/* The key a line of the example shows: "key = ..." or, commented out,
 * ";key = ..." (no blank after the ';': prose comments have one). */
static bool example_key(const char *line, char *key, size_t n)
{
    const char *p = line;
    if (*p == ';' || *p == '#')
        p++;
    size_t len = strspn(p, "abcdefghijklmnopqrstuvwxyz_");
    const char *eq = p + len + strspn(p + len, " \t");
    if (len == 0 || len >= n || *eq != '=')
        return false;
    memcpy(key, p, len);
    key[len] = '\0';
    return true;
}

/* The section a header line opens; -1 for any other line. */
static int example_section(const char *line)
{
    char word[32];
    size_t len = strcspn(line + 1, " ]");
    if (line[0] != '[' || len >= sizeof word)
        return -1;
    memcpy(word, line + 1, len);
    word[len] = '\0';
    return sq_opt_section_find(word, line[1 + len] == ' ');
}

Test(config, the_example_file_shows_every_key_of_the_option_table, .timeout = 60)
{
    const char *path = SKIPQ_SOURCE_DIR "/conf/skipq.ini";
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s", path);
    bool shown[256] = {false};
    cr_assert_lt(sq_noptions, sizeof shown / sizeof shown[0]);
    char line[400], key[64];
    int section = -1, lineno = 0;
    while (fgets(line, sizeof line, f)) {
        lineno++;
        if (line[0] == '[') {
            section = example_section(line);
            cr_assert_geq(section, 0, "%s:%d: a section the option table does not have: %s", path, lineno, line);
            continue;
        }
        if (section < 0 || !example_key(line, key, sizeof key))
            continue;
        const struct sq_option *o = sq_option_find((enum sq_opt_section)section, key);
        cr_expect(o || sq_option_pass((enum sq_opt_section)section), "%s:%d: [%s] %s is no key of the option table",
                  path, lineno, sq_opt_sections[section].word, key);
        if (o)
            shown[o - sq_options] = true;
    }
    fclose(f);
    for (size_t i = 0; i < sq_noptions; i++)
        cr_expect(shown[i] || sq_options[i].type == SQ_OPT_PASS,
                  "%s has no [%s%s] %s: add it, at least commented out as \";%s = ...\"", path,
                  sq_opt_sections[sq_options[i].section].word, sq_opt_sections[sq_options[i].section].named ? " NAME" : "",
                  sq_options[i].key, sq_options[i].key);
}

Test(config, the_reference_in_the_docs_is_the_option_tables, .timeout = 60)
{
    char err[1024];
    const char *doc = SKIPQ_SOURCE_DIR "/docs/configuration.md";
    cr_expect(sq_options_reference_update(doc, false, err, sizeof err),
              "%s\n(from this build: %s config --reference %s, or cmake --build BUILD --target config-reference)", err,
              SKIPQ_BIN, doc);
}

Test(config, every_live_key_has_a_place_in_the_running_host, .timeout = 60)
{
    const char *key = sq_reload_check();
    cr_expect_null(key, "\"%s\": the option table and reload.c's live[] disagree on whether it applies live", key);
}

/* The field a row names has the size its type stores. */
static bool field_fits(const struct sq_option *o)
{
    switch (o->type) {
    case SQ_OPT_DURATION:
    case SQ_OPT_SIZE:
        return o->size == sizeof(int64_t);
    case SQ_OPT_INT:
    case SQ_OPT_RATE:
        return o->size == sizeof(int);
    case SQ_OPT_BOOL:
        return o->size == sizeof(bool);
    case SQ_OPT_ENUM:
        return o->size == sizeof(int) || o->size == sizeof(bool);
    case SQ_OPT_STRING:
    case SQ_OPT_NAME:
        return o->size == sizeof(char *);
    default:
        return true;
    }
}

/* Every row's default is a value its own parser accepts, and a section
 * made of defaults passes the loader (a table typo fails here, not in a
 * user's file). */
Test(config, every_default_is_within_its_rows_range, .timeout = 60)
{
    for (size_t i = 0; i < sq_noptions; i++) {
        const struct sq_option *o = &sq_options[i];
        if (o->type == SQ_OPT_INT)
            cr_expect(o->def == 0 || (o->def >= o->min && o->def <= o->max), "%s: default %lld out of range", o->key,
                      (long long)o->def);
        if (o->type == SQ_OPT_DURATION || o->type == SQ_OPT_SIZE)
            cr_expect(o->def == 0 || o->def >= o->min, "%s: default %lld below its minimum", o->key,
                      (long long)o->def);
        if (o->type == SQ_OPT_SIZE)
            cr_expect_leq(o->def, o->max, "%s", o->key);
        cr_expect(o->help || o->type == SQ_OPT_LIBPQ, "[%s] %s has no help", sq_opt_sections[o->section].word,
                  o->key);
        cr_expect(field_fits(o), "%s: a field of %zu bytes for its type", o->key, o->size);
    }
    struct sq_config *cfg = load_ok("defaults.ini", "[kind k]\n[queue q]\n[plugin p]\npath = p.so\n"
                                                    "[cron c]\nschedule = @daily\nkind = k\n");
    const struct sq_kind_conf *k = sq_config_kind(cfg, "k");
    cr_assert_not_null(k);
    cr_expect_eq(k->backoff_base_ms, cfg->kind_defaults.backoff_base_ms);
    cr_expect_eq(k->backoff_cap_ms, cfg->kind_defaults.backoff_cap_ms);
    cr_expect_eq(sq_config_kind_policy(cfg, "other"), &cfg->kind_defaults);
    cr_expect_eq(sq_config_kind_policy(cfg, "k"), k);
    sq_config_free(cfg);
}

/* `skipq config --reference FILE` refreshes the part between the markers
 * and keeps the hand-written text around it; without FILE it prints. */
Test(config, the_reference_command_rewrites_only_its_part_of_the_file, .timeout = 60)
{
    static const char head[] = "# Title\n\nhand-written\n\n" SQ_REFERENCE_BEGIN "\n";
    static const char tail[] = SQ_REFERENCE_END "\n\nafter\n";
    char text[512];
    snprintf(text, sizeof text, "%sstale\n%s", head, tail);
    char *doc = th_write_file("reference.md", text), err[1024], *out = NULL, *errout = NULL;
    cr_expect_not(sq_options_reference_update(doc, false, err, sizeof err));
    cr_expect_not_null(strstr(err, "is out of date"), "%s", err);
    cr_assert_eq(th_cli(&out, &errout, "config", "--reference", doc, NULL), 0, "%s", errout);
    free(out);
    free(errout);
    cr_expect(sq_options_reference_update(doc, false, err, sizeof err), "%s", err);
    cr_assert_eq(th_cli(&out, &errout, "config", "--reference", NULL), 0, "%s", errout);
    cr_expect_eq(strncmp(out, "## Keys\n", 8), 0, "%.80s", out);
    FILE *f = fopen(doc, "r");
    cr_assert_not_null(f);
    static char got[65536];
    size_t n = fread(got, 1, sizeof got - 1, f);
    fclose(f);
    got[n] = '\0';
    cr_assert_lt(n, sizeof got - 1);
    cr_expect_eq(strncmp(got, head, strlen(head)), 0, "the text before the markers changed:\n%.300s", got);
    cr_expect(n > strlen(tail) && strcmp(got + n - strlen(tail), tail) == 0, "the text after them changed");
    cr_expect_not_null(strstr(got, out), "the generated part is not what stdout gets");
    free(out);
    free(errout);
    free(doc);
    cr_expect_eq(th_cli(NULL, NULL, "config", "--reference", "/nonexistent/x.md", NULL), 1);
    cr_expect_eq(th_cli(NULL, NULL, "config", NULL), 2);
}

/* [database NAME]: the same keys as [database], and each [queue] or [cron]
 * names its database; a view reads like a file with only that one. */
Test(config, named_databases_and_the_views_a_host_runs, .timeout = 60)
{
    struct sq_config *cfg = load_ok("dbs.ini", "[database]\nhost = /run/a\ndbname = app\n\n"
                                               "[database eu]\nurl = postgresql://u:pw@eu.example.com/app\n"
                                               "pooler = transaction\n\n"
                                               "[queue mail]\n\n[queue eu-mail]\ndatabase = eu\nthreads = 3\n\n"
                                               "[cron tick]\nschedule = @hourly\nkind = k\ndatabase = eu\n");
    cr_assert_eq(cfg->database.ndb, 2);
    cr_expect_null(cfg->database.name);
    cr_expect_not(cfg->database.pooled);
    cr_assert_eq(cfg->ndatabases, 1);
    cr_expect_str_eq(cfg->databases[0].name, "eu");
    cr_expect(cfg->databases[0].pooled);
    cr_expect(cfg->databases[0].db_has_password, "a password in [database eu] counts");
    cr_expect_eq(cfg->databases[0].line, 5);

    char err[512];
    struct sq_config *eu = sq_config_view(cfg, "eu", err, sizeof err);
    cr_assert_not_null(eu, "%s", err);
    cr_expect_str_eq(sq_config_database_name(&eu->database), "eu");
    cr_expect(eu->database.pooled);
    cr_assert_eq(eu->ngroups, 1);
    cr_expect_str_eq(eu->groups[0].queue, "eu-mail");
    cr_expect_eq(eu->groups[0].threads, 3);
    cr_expect_eq(eu->ncrons, 1);
    struct sq_config *def = sq_config_view(cfg, NULL, err, sizeof err);
    cr_assert_not_null(def, "%s", err);
    cr_expect_str_eq(sq_config_database_name(&def->database), "default");
    cr_assert_eq(def->ngroups, 1);
    cr_expect_str_eq(def->groups[0].queue, "mail");
    cr_expect_eq(def->ncrons, 0);
    cr_expect_null(sq_config_view(cfg, "us", err, sizeof err));
    cr_expect_not_null(strstr(err, "no [database us] section (its databases: default, eu)"), "%s", err);
    sq_config_free(eu);
    sq_config_free(def);
    sq_config_free(cfg);
}

Test(config, a_database_that_is_not_declared_is_refused, .timeout = 60)
{
    expect_error("e.ini", "[database eu]\nhost = x\n\n[queue q]\ndatabase = us\n", 4,
                 "[queue q] database = us: the file has no [database us] section", "(its databases: eu)", NULL);
    expect_error("e.ini", "[cron c]\nschedule = @daily\nkind = k\ndatabase = eu\n", 1,
                 "[cron c] database = eu: the file has no [database eu] section", NULL, NULL);
    expect_error("e.ini", "[database]\nhost = x\n\n[database default]\nhost = y\n", 5,
                 "\"default\" is the name of the unnamed [database] section", NULL, NULL);
    expect_error("e.ini", "[database eu]\nhots = x\n", 2, "unknown key \"hots\"", "[database eu]", NULL);
    expect_error("e.ini", "[host]\nsynchronous_commit = off\n\n[database eu]\npooler = transaction\n", 1,
                 "cannot be used with [database eu] pooler = transaction", NULL, NULL);
}
