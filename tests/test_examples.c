/*
 * test_examples.c -- the example plugins, webhook and ledger, through the
 * plugin test kit (the host's loader and services), against a local HTTP
 * server this test starts (libmicrohttpd, one thread per connection):
 * webhook posts the body byte for byte with its headers; 2xx done with the
 * status in the output, 5xx and timeouts retry, 429 retries after its
 * Retry-After (capped), other 4xx fail, should-stop aborts the transfer at
 * once, and the kind's deadline cuts its own timeout. ledger checks its
 * typed fields and writes in the job's transaction (rolled back by the kit;
 * committed through `skipq exec --commit`).
 */
#include <criterion/criterion.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "harness.h"
#include "skipq/plugin_test.h"

#define WEBHOOK SKIPQ_PLUGIN_DIR "/webhook.so"
#define LEDGER SKIPQ_PLUGIN_DIR "/ledger.so"

/* ---- the server ------------------------------------------------------------------------------ */

static struct MHD_Daemon *server;
static int port;
static pthread_mutex_t seen_lock = PTHREAD_MUTEX_INITIALIZER;
static char seen_body[4096], seen_sig[256], seen_type[256];

struct upload {
    char buf[4096];
    size_t len;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, const char *text, const char *after)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_MUST_COPY);
    if (after)
        MHD_add_response_header(r, "Retry-After", after);
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                              const char *version, const char *data, size_t *size, void **state)
{
    (void)cls, (void)method, (void)version;
    struct upload *u = *state;
    if (!u) {
        *state = calloc(1, sizeof *u);
        return *state ? MHD_YES : MHD_NO;
    }
    if (*size) {
        size_t take = *size < sizeof u->buf - 1 - u->len ? *size : sizeof u->buf - 1 - u->len;
        memcpy(u->buf + u->len, data, take);
        u->len += take;
        *size = 0;
        return MHD_YES;
    }
    if (strcmp(url, "/echo") == 0) {
        const char *sig = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Signature");
        const char *type = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type");
        pthread_mutex_lock(&seen_lock);
        memcpy(seen_body, u->buf, u->len + 1);
        snprintf(seen_sig, sizeof seen_sig, "%s", sig ? sig : "");
        snprintf(seen_type, sizeof seen_type, "%s", type ? type : "");
        pthread_mutex_unlock(&seen_lock);
        return reply(c, 200, "thanks \"you\"", NULL);
    }
    if (strcmp(url, "/slow") == 0) {
        struct timespec ts = {2, 0};
        nanosleep(&ts, NULL);
        return reply(c, 200, "late", NULL);
    }
    if (strncmp(url, "/status/", 8) == 0)
        return reply(c, (unsigned)atoi(url + 8), "status",
                     MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "after"));
    return reply(c, 404, "no such path", NULL);
}

static void done_request(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode t)
{
    (void)cls, (void)c, (void)t;
    free(*state);
    *state = NULL;
}

static void server_start(void)
{
    port = th_free_port();
    server = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD, (uint16_t)port, NULL,
                              NULL, answer, NULL, MHD_OPTION_NOTIFY_COMPLETED, done_request, NULL, MHD_OPTION_END);
    cr_assert_not_null(server, "cannot start the HTTP server on port %d", port);
}

static void server_stop(void)
{
    if (server)
        MHD_stop_daemon(server);
    server = NULL;
}

TestSuite(examples, .init = server_start, .fini = server_stop);

/* ---- helpers ---------------------------------------------------------------------------------- */

static skipq_test_plugin *webhook(const char *ini)
{
    char err[1024];
    skipq_test_plugin *tp = skipq_test_load(WEBHOOK, ini, err, sizeof err);
    cr_assert_not_null(tp, "%s", err);
    return tp;
}

/* Run the webhook on {"url": "http://127.0.0.1:PORT<path>", <extra>}. */
static void post(skipq_test_plugin *tp, const char *path, const char *extra, const skipq_test_opts *o,
                 skipq_test_result *r)
{
    char payload[2048], err[1024];
    snprintf(payload, sizeof payload, "{\"url\": \"http://127.0.0.1:%d%s\"%s%s}", port, path, extra ? ", " : "",
             extra ? extra : "");
    cr_assert_eq(skipq_test_run(tp, "webhook", payload, o, r, err, sizeof err), 0, "%s", err);
}

/* ---- webhook ---------------------------------------------------------------------------------- */

Test(examples, webhook_posts_the_body_byte_for_byte_and_is_done_on_2xx)
{
    skipq_test_plugin *tp = webhook(NULL);
    skipq_test_result r;
    /* a body jsonb would have rewritten, sent as a JSON string: kept exactly */
    post(tp, "/echo",
         "\"body\": \"{\\\"b\\\":1,  \\\"a\\\":[2, 3]}\", \"headers\": {\"X-Signature\": \"sha256=abc\"}", NULL, &r);
    cr_expect_eq(r.outcome, SKIPQ_DONE, "%s", r.error);
    pthread_mutex_lock(&seen_lock);
    cr_expect_str_eq(seen_body, "{\"b\":1,  \"a\":[2, 3]}");
    cr_expect_str_eq(seen_sig, "sha256=abc");
    cr_expect_str_eq(seen_type, "application/json");
    pthread_mutex_unlock(&seen_lock);
    cr_expect_str_eq(r.output ? r.output : "(none)", "{\"status\":200,\"response\":\"thanks \\\"you\\\"\"}");
    cr_expect(strstr(r.logs, "-> 200"), "%s", r.logs);
    skipq_test_result_free(&r);
    skipq_test_unload(tp);
}

Test(examples, webhook_retries_5xx_and_fails_other_4xx)
{
    skipq_test_plugin *tp = webhook(NULL);
    skipq_test_result r;
    post(tp, "/status/503", NULL, NULL, &r);
    cr_expect_eq(r.outcome, SKIPQ_RETRY);
    cr_expect(strstr(r.error, ": HTTP 503"), "%s", r.error);
    cr_expect_eq(r.retry_in_ms, -1, "a 5xx takes the kind's backoff");
    skipq_test_result_free(&r);
    post(tp, "/status/404", NULL, NULL, &r);
    cr_expect_eq(r.outcome, SKIPQ_FAIL);
    cr_expect(strstr(r.error, ": HTTP 404"), "%s", r.error);
    skipq_test_result_free(&r);
    post(tp, "/status/301", NULL, NULL, &r);
    cr_expect_eq(r.outcome, SKIPQ_FAIL, "a redirect is not followed");
    skipq_test_result_free(&r);
    skipq_test_unload(tp);
}

Test(examples, webhook_honours_retry_after_on_429_up_to_its_cap)
{
    skipq_test_plugin *tp = webhook("retry_after_max = 1m\n");
    skipq_test_result r;
    post(tp, "/status/429?after=7", NULL, NULL, &r);
    cr_expect_eq(r.outcome, SKIPQ_RETRY);
    cr_expect_eq(r.retry_in_ms, 7000);
    skipq_test_result_free(&r);
    post(tp, "/status/429?after=999999", NULL, NULL, &r);
    cr_expect_eq(r.retry_in_ms, 60000);
    skipq_test_result_free(&r);
    post(tp, "/status/429", NULL, NULL, &r);
    cr_expect_eq(r.outcome, SKIPQ_RETRY);
    cr_expect_eq(r.retry_in_ms, -1, "no Retry-After: the kind's backoff");
    skipq_test_result_free(&r);
    skipq_test_unload(tp);
}

Test(examples, webhook_retries_a_timeout_and_the_kinds_deadline_cuts_its_own)
{
    skipq_test_plugin *tp = webhook("timeout = 200ms\n");
    skipq_test_result r;
    post(tp, "/slow", NULL, NULL, &r);
    cr_expect_eq(r.outcome, SKIPQ_RETRY);
    cr_expect(strstr(r.error, "Timeout"), "%s", r.error);
    cr_expect_lt(r.duration_us, 1500000);
    skipq_test_result_free(&r);
    skipq_test_unload(tp);
    tp = webhook(NULL); /* its own timeout 10s; the kind's 300ms wins */
    skipq_test_opts o = {.timeout_ms = 300};
    post(tp, "/slow", NULL, &o, &r);
    cr_expect_eq(r.outcome, SKIPQ_RETRY);
    cr_expect_lt(r.duration_us, 1500000, "the deadline did not cut the request (%lld us)", (long long)r.duration_us);
    skipq_test_result_free(&r);
    skipq_test_unload(tp);
}

Test(examples, webhook_stops_early_when_told_to)
{
    skipq_test_plugin *tp = webhook(NULL);
    skipq_test_result r;
    skipq_test_opts o = {.stop_after_ms = 100};
    post(tp, "/slow", NULL, &o, &r);
    cr_expect_eq(r.outcome, SKIPQ_RETRY);
    cr_expect_str_eq(r.error, "stopped early: the host asked the handler to stop");
    cr_expect_lt(r.duration_us, 1500000);
    skipq_test_result_free(&r);
    skipq_test_unload(tp);
}

Test(examples, webhook_fails_a_payload_it_can_never_send_and_refuses_a_bad_key)
{
    skipq_test_plugin *tp = webhook(NULL);
    skipq_test_result r;
    char err[1024];
    cr_assert_eq(skipq_test_run(tp, "webhook", "{\"body\": \"x\"}", NULL, &r, err, sizeof err), 0, "%s", err);
    cr_expect_eq(r.outcome, SKIPQ_FAIL);
    cr_expect_str_eq(r.error, "the payload has no \"url\" string");
    skipq_test_result_free(&r);
    cr_assert_eq(skipq_test_run(tp, "webhook", "{\"url\": \"file:///etc/passwd\"}", NULL, &r, err, sizeof err), 0);
    cr_expect_eq(r.outcome, SKIPQ_FAIL);
    skipq_test_result_free(&r);
    skipq_test_unload(tp);
    cr_expect_null(skipq_test_load(WEBHOOK, "timeout = forever\n", err, sizeof err));
    cr_expect(strstr(err, "(test):1: [plugin webhook] timeout: \"forever\" is not a duration"), "%s", err);
}

/* ---- ledger ----------------------------------------------------------------------------------- */

Test(examples, ledger_checks_its_typed_fields_and_writes_in_the_jobs_transaction, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    th_execf(db.conn, "CREATE TABLE public.skipq_ledger (job_id bigint PRIMARY KEY, account text NOT NULL,"
                      " amount_cents bigint NOT NULL, currency text NOT NULL, memo text)");
    char err[1024];
    skipq_test_plugin *tp = skipq_test_load(LEDGER, NULL, err, sizeof err);
    cr_assert_not_null(tp, "%s", err);
    skipq_test_result r;
    skipq_test_opts o = {.conninfo = db.conninfo};
    cr_assert_eq(skipq_test_run(tp, "ledger.post", "{\"account\": \"acme\", \"amount_cents\": \"12\", \"currency\": \"EUR\"}",
                                &o, &r, err, sizeof err),
                 0, "%s", err);
    cr_expect_eq(r.outcome, SKIPQ_FAIL);
    cr_expect_str_eq(r.error, "\"amount_cents\" must be a whole number, not zero");
    skipq_test_result_free(&r);
    cr_assert_eq(skipq_test_run(tp, "ledger.post",
                                "{\"account\": \"acme\", \"amount_cents\": 1250, \"currency\": \"EUR\"}", &o, &r, err,
                                sizeof err),
                 0, "%s", err);
    cr_expect_eq(r.outcome, SKIPQ_DONE, "%s", r.error);
    cr_expect_eq(r.used_conn, 1);
    cr_expect(r.output && strstr(r.output, "\"inserted\":true"), "%s", r.output ? r.output : "(none)");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM public.skipq_ledger"), 0, "the kit rolls back");
    skipq_test_result_free(&r);
    skipq_test_unload(tp);
    /* committed, through skipq exec */
    char *out = NULL, *cerr = NULL;
    int st = th_cli(&out, &cerr, "exec", "--db", db.conninfo, "--commit", LEDGER, "ledger.post",
                    "{\"account\": \"acme\", \"amount_cents\": -5, \"currency\": \"USD\", \"memo\": \"refund\"}", NULL);
    cr_expect_eq(st, 0, "%s%s", out, cerr);
    th_expect_text(db.conn, "acme -5 USD refund",
                   "SELECT concat_ws(' ', account, amount_cents, currency, memo) FROM public.skipq_ledger");
    free(out), free(cerr);
}
