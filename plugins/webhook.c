/*
 * webhook.c -- an example plugin: POST a job's body to its URL.
 *
 * Kind `webhook`. Payload (a JSON object, read with json-c):
 *     {"url": "https://example.com/hook",
 *      "body": "{\"event\":\"paid\",\"id\":42}",     the bytes to send, as a JSON string
 *      "content_type": "application/json",            optional (this is the default)
 *      "headers": {"X-Signature": "sha256=..."}}      optional, string values
 * The body travels as a JSON *string* because the payload a handler sees is
 * jsonb's rendering of the job (keys reordered, spaces added): a string's
 * value survives it byte for byte, so a receiver that checks an HMAC over
 * the body gets exactly what the producer signed (plugin.h, THE PAYLOAD).
 *
 * What becomes of the job:
 *   2xx                        done; output {"status": N, "response": first bytes}
 *   5xx, timeouts, no connection  retry (the kind's backoff)
 *   429                        retry after its Retry-After (seconds or an
 *                              HTTP date, capped by retry_after_max), else the backoff
 *   other 4xx, 3xx, a bad payload  fail: dead now (a redirect is not followed)
 *   should-stop                the transfer is aborted at once (libcurl's
 *                              progress callback polls it) and the job retried
 * Its request timeout is the `timeout` key, cut to the time left before the
 * kind's timeout or the end of a shutdown grace (skipq_job_deadline_ms).
 *
 *     [plugin webhook]
 *     path = /usr/lib/x86_64-linux-gnu/skipq/webhook.so
 *     timeout = 10s
 */
#include <curl/curl.h>
#include <json-c/json.h>
#include <skipq/plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const skipq_config_key webhook_keys[] = {
    {"timeout", SKIPQ_CONFIG_DURATION, "10s", 1, 600000, "the longest one request may take"},
    {"connect_timeout", SKIPQ_CONFIG_DURATION, "5s", 1, 600000, "the longest connecting may take"},
    {"retry_after_max", SKIPQ_CONFIG_DURATION, "1h", 1000, 86400000,
     "a 429's Retry-After is honoured up to this long"},
    {"max_response", SKIPQ_CONFIG_SIZE, "4KiB", 0, 65536, "how much of the response the output keeps"},
    {"user_agent", SKIPQ_CONFIG_STRING, "skipq-webhook/1.1", 0, 0, "the User-Agent header"},
    {NULL, SKIPQ_CONFIG_STRING, NULL, 0, 0, NULL}};

struct webhook {
    int64_t timeout_ms, connect_ms, retry_after_max_ms, max_response;
    char user_agent[256];
};

/* One request's state, on the handler's stack. */
struct call {
    const struct webhook *w;
    skipq_job *job;
    char *resp;
    size_t resp_len;
    int64_t retry_after_ms; /* -1: none given */
};

static size_t on_body(char *data, size_t size, size_t n, void *arg)
{
    struct call *c = arg;
    size_t len = size * n, room = (size_t)c->w->max_response - c->resp_len;
    size_t take = len < room ? len : room;
    if (take) {
        memcpy(c->resp + c->resp_len, data, take);
        c->resp_len += take;
    }
    return len; /* the rest is read and dropped */
}

/* Retry-After: a number of seconds, or an HTTP date. */
static size_t on_header(char *data, size_t size, size_t n, void *arg)
{
    struct call *c = arg;
    size_t len = size * n;
    static const char name[] = "retry-after:";
    if (len > sizeof name && strncasecmp(data, name, sizeof name - 1) == 0) {
        char v[128];
        size_t vl = len - (sizeof name - 1) < sizeof v - 1 ? len - (sizeof name - 1) : sizeof v - 1;
        memcpy(v, data + sizeof name - 1, vl);
        v[vl] = '\0';
        char *end;
        long long secs = strtoll(v, &end, 10);
        while (*end == ' ' || *end == '\r' || *end == '\n')
            end++;
        if (end != v && !*end && secs >= 0)
            c->retry_after_ms = secs * 1000;
        else if ((secs = (long long)curl_getdate(v, NULL)) > 0)
            c->retry_after_ms = secs > time(NULL) ? (secs - (long long)time(NULL)) * 1000 : 0;
    }
    return len;
}

/* Called by libcurl many times a second: a non-zero return aborts. */
static int on_progress(void *arg, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow)
{
    (void)dltotal, (void)dlnow, (void)ultotal, (void)ulnow;
    return skipq_job_should_stop(((struct call *)arg)->job);
}

/* The payload's fields, or a reason to fail the job (it will never work). */
struct request {
    const char *url, *body, *content_type;
    size_t body_len;
    struct curl_slist *headers;
};

static const char *read_request(json_object *root, struct request *r)
{
    json_object *v;
    if (!json_object_is_type(root, json_type_object))
        return "the payload is not a JSON object";
    if (!json_object_object_get_ex(root, "url", &v) || !json_object_is_type(v, json_type_string))
        return "the payload has no \"url\" string";
    r->url = json_object_get_string(v);
    if (strncmp(r->url, "http://", 7) != 0 && strncmp(r->url, "https://", 8) != 0)
        return "\"url\" must start with http:// or https://";
    r->body = "";
    if (json_object_object_get_ex(root, "body", &v)) {
        if (!json_object_is_type(v, json_type_string))
            return "\"body\" must be a string (the exact bytes to send)";
        r->body = json_object_get_string(v);
        r->body_len = (size_t)json_object_get_string_len(v);
    }
    r->content_type = "application/json";
    if (json_object_object_get_ex(root, "content_type", &v)) {
        if (!json_object_is_type(v, json_type_string))
            return "\"content_type\" must be a string";
        r->content_type = json_object_get_string(v);
    }
    if (json_object_object_get_ex(root, "headers", &v)) {
        if (!json_object_is_type(v, json_type_object))
            return "\"headers\" must be an object of strings";
        json_object_object_foreach(v, key, val)
        {
            char line[1024];
            const char *s = json_object_get_string(val);
            if (!json_object_is_type(val, json_type_string) || strpbrk(key, "\r\n:") || strpbrk(s, "\r\n") ||
                (size_t)snprintf(line, sizeof line, "%s: %s", key, s) >= sizeof line)
                return "\"headers\" must map names to one-line string values";
            struct curl_slist *h = curl_slist_append(r->headers, line);
            if (!h)
                return "out of memory";
            r->headers = h;
        }
    }
    return NULL;
}

/* The output: the status and the first bytes of the response (as a JSON
 * string, built by json-c). */
static void record_output(skipq_job *job, long status, const struct call *c)
{
    json_object *o = json_object_new_object();
    json_object_object_add(o, "status", json_object_new_int((int)status));
    json_object_object_add(o, "response", json_object_new_string_len(c->resp ? c->resp : "", (int)c->resp_len));
    size_t len;
    const char *text = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &len);
    (void)skipq_job_output(job, text, len); /* not valid UTF-8 in the response: no output, the job still counts */
    json_object_put(o);
}

static skipq_outcome judge(skipq_job *job, const struct call *c, CURLcode rc, long status, const char *url)
{
    if (rc == CURLE_ABORTED_BY_CALLBACK) {
        skipq_job_error(job, "stopped early: the host asked the handler to stop");
        return SKIPQ_RETRY;
    }
    if (rc != CURLE_OK) {
        skipq_job_error(job, "POST %s: %s", url, curl_easy_strerror(rc));
        return SKIPQ_RETRY; /* timeouts, refused connections, DNS: maybe next time */
    }
    record_output(job, status, c);
    if (status >= 200 && status < 300)
        return SKIPQ_DONE;
    skipq_job_error(job, "POST %s: HTTP %ld", url, status);
    if (status >= 500)
        return SKIPQ_RETRY;
    if (status == 429) {
        if (c->retry_after_ms >= 0)
            skipq_job_retry_in(job, c->retry_after_ms < c->w->retry_after_max_ms ? c->retry_after_ms
                                                                                 : c->w->retry_after_max_ms);
        return SKIPQ_RETRY;
    }
    return SKIPQ_FAIL; /* 3xx (not followed) and the other 4xx: sending it again will not help */
}

static skipq_outcome post(skipq_job *job, void *userdata)
{
    const struct webhook *w = userdata;
    json_object *root = json_tokener_parse(job->payload);
    struct request r = {0};
    const char *bad = root ? read_request(root, &r) : "the payload is not JSON";
    skipq_outcome out = SKIPQ_FAIL;
    struct call c = {.w = w, .job = job, .retry_after_ms = -1, .resp = malloc((size_t)w->max_response + 1)};
    CURL *curl = bad ? NULL : curl_easy_init();
    if (bad || !curl || !c.resp) {
        skipq_job_error(job, "%s", bad ? bad : "out of memory");
        out = bad ? SKIPQ_FAIL : SKIPQ_RETRY;
        goto done;
    }
    int64_t timeout = w->timeout_ms, left = skipq_job_deadline_ms(job);
    if (left >= 0 && left < timeout)
        timeout = left > 0 ? left : 1; /* never past the kind's timeout or the shutdown grace */
    char ct[512];
    snprintf(ct, sizeof ct, "Content-Type: %s", r.content_type);
    r.headers = curl_slist_append(r.headers, ct);
    curl_easy_setopt(curl, CURLOPT_URL, r.url);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L); /* handlers run on many threads */
    curl_easy_setopt(curl, CURLOPT_POST, 1L);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, r.body);
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r.body_len);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, r.headers);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, w->user_agent);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, (long)timeout);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT_MS, (long)w->connect_ms);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &c);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &c);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &c);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    out = judge(job, &c, rc, status, r.url);
    skipq_job_log(job, SKIPQ_LOG_INFO, "POST %s -> %ld (%s)", r.url, status, curl_easy_strerror(rc));
done:
    curl_easy_cleanup(curl);
    curl_slist_free_all(r.headers);
    free(c.resp);
    json_object_put(root);
    return out;
}

static int webhook_init(skipq_plugin *p)
{
    struct webhook *w = calloc(1, sizeof *w);
    if (!w)
        return 1;
    /* Declared keys: the host has checked them, so these cannot fail. */
    skipq_config_duration_ms(p, "timeout", &w->timeout_ms);
    skipq_config_duration_ms(p, "connect_timeout", &w->connect_ms);
    skipq_config_duration_ms(p, "retry_after_max", &w->retry_after_max_ms);
    skipq_config_size(p, "max_response", &w->max_response);
    snprintf(w->user_agent, sizeof w->user_agent, "%s", skipq_config(p, "user_agent"));
    if (strpbrk(w->user_agent, "\r\n")) {
        skipq_config_error(p, "user_agent", "must be one line");
        free(w);
        return 1;
    }
    /* Not thread-safe, and init runs before any handler thread. */
    if (curl_global_init(CURL_GLOBAL_DEFAULT) != CURLE_OK) {
        skipq_plugin_log(p, SKIPQ_LOG_ERROR, "libcurl would not initialise");
        free(w);
        return 1;
    }
    skipq_set_state(p, w);
    int rc = skipq_register(p, "webhook", post, w);
    if (rc != SKIPQ_PLUGIN_OK) {
        curl_global_cleanup();
        free(w);
    }
    return rc;
}

static void webhook_shutdown(skipq_plugin *p)
{
    free(skipq_state(p));
    curl_global_cleanup();
}

SKIPQ_PLUGIN_KEYS("webhook", "1.1.0", webhook_init, webhook_shutdown, webhook_keys)
