/*
 * actions.c -- what the dashboard changes: POST /api/retry, /api/cancel,
 * /api/pause and /api/resume, each a JSON object in the body.
 *
 * web.c has already checked who asks (token, CSRF token, --read-only, the
 * role's rights). Each action calls the function the CLI calls --
 * sq_admin_retry (`skipq retry`), sq_admin_cancel (`skipq cancel`),
 * sq_admin_pause (`skipq pause`/`resume`) -- so the rules are the same:
 * only dead or cancelled jobs are retried, their attempts extended, not
 * reset; only blocked, pending or running jobs are cancelled; a job whose
 * unique key another holds stays dead. A group of the dead page is retried
 * by the ids its fold matches, in one transaction. The body is checked
 * whole before anything runs: an unknown field, a wrong type or an id out
 * of range is a 400 and changes nothing. Every action is logged with the
 * client's address.
 */
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/admin.h"
#include "common/log.h"
#include "common/util.h"
#include "web/actions.h"
#include "web/api.h"

#define MAX_IDS 10000       /* ids one request may name */
#define RETRY_CHUNK 10000   /* ids per retry statement for a group */

/* The body as a JSON object whose fields are all among `fields`. */
static json_object *parse_body(struct web_call *c, const char *const *fields)
{
    struct json_tokener *tok = json_tokener_new();
    json_object *o = tok ? json_tokener_parse_ex(tok, c->body, (int)c->body_len) : NULL;
    bool whole = tok && json_tokener_get_error(tok) == json_tokener_success &&
                 json_tokener_get_parse_end(tok) == c->body_len;
    json_tokener_free(tok);
    if (!o || !whole || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        web_bad(c, "the body must be one JSON object");
        return NULL;
    }
    json_object_object_foreach(o, key, val)
    {
        (void)val;
        bool known = false;
        for (size_t i = 0; fields[i] && !known; i++)
            known = strcmp(fields[i], key) == 0;
        if (!known) {
            web_bad(c, "unknown field \"%.60s\"", key);
            json_object_put(o);
            return NULL;
        }
    }
    return o;
}

/* body.ids: 1 to MAX_IDS whole numbers >= 1, into a malloc'd array. */
static bool parse_ids(struct web_call *c, json_object *body, int64_t **ids, size_t *n)
{
    json_object *a = NULL;
    *ids = NULL;
    *n = 0;
    if (!json_object_object_get_ex(body, "ids", &a) || !json_object_is_type(a, json_type_array)) {
        web_bad(c, "ids: give an array of job ids");
        return false;
    }
    size_t len = json_object_array_length(a);
    if (len < 1 || len > MAX_IDS) {
        web_bad(c, "ids: give 1 to %d job ids (got %zu)", MAX_IDS, len);
        return false;
    }
    *ids = calloc(len, sizeof **ids);
    for (size_t i = 0; *ids && i < len; i++) {
        json_object *v = json_object_array_get_idx(a, i);
        int64_t id = json_object_is_type(v, json_type_int) ? json_object_get_int64(v) : 0;
        if (id < 1 || id == INT64_MAX) { /* json-c clamps what does not fit to INT64_MAX */
            web_bad(c, "ids: element %zu is not a job id (a whole number from 1)", i);
            free(*ids);
            *ids = NULL;
            return false;
        }
        (*ids)[(*n)++] = id;
    }
    if (!*ids)
        snprintf(c->err, sizeof c->err, "out of memory");
    return *ids != NULL;
}

/* A string field, or NULL (400 set when present and not a string). */
static const char *string_field(struct web_call *c, json_object *body, const char *name, bool *bad)
{
    json_object *v = NULL;
    if (!json_object_object_get_ex(body, name, &v))
        return NULL;
    if (!json_object_is_type(v, json_type_string)) {
        web_bad(c, "%s: give a string", name);
        *bad = true;
        return NULL;
    }
    return json_object_get_string(v);
}

static void client(struct web_call *c, char *buf, size_t len)
{
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(c->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(buf, len, "?");
    if (!i || !i->client_addr)
        return;
    if (i->client_addr->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)i->client_addr)->sin_addr, buf, (socklen_t)len);
    else if (i->client_addr->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)i->client_addr)->sin6_addr, buf, (socklen_t)len);
}

static unsigned commit(struct web_call *c)
{
    return sq_db_exec(c->w->conn, "COMMIT", c->err, sizeof c->err) ? MHD_HTTP_OK : web_db_failed(c);
}

/* ---- retry ------------------------------------------------------------------------------------- */

/* The ids of a dead group, in the open transaction. */
static bool group_ids(struct web_call *c, const char *kind, const char *group, int64_t **ids, size_t *n)
{
    if (!sq_valid_name(kind)) {
        web_bad(c, "kind: \"%.140s\" is not a kind name", kind);
        return false;
    }
    PGresult *r = web_dead_group_ids(c, kind, group);
    if (!r)
        return false;
    *n = (size_t)PQntuples(r);
    *ids = calloc(*n ? *n : 1, sizeof **ids);
    for (size_t i = 0; *ids && i < *n; i++)
        (*ids)[i] = strtoll(PQgetvalue(r, (int)i, 0), NULL, 10);
    PQclear(r);
    if (!*ids)
        snprintf(c->err, sizeof c->err, "out of memory");
    return *ids != NULL;
}

unsigned web_act_retry(struct web_call *c, const char *tail)
{
    (void)tail;
    static const char *const fields[] = {"ids", "kind", "group", "attempts", NULL};
    json_object *body = parse_body(c, fields), *att = NULL;
    if (!body)
        return MHD_HTTP_BAD_REQUEST;
    bool bad = false;
    const char *kind = string_field(c, body, "kind", &bad), *group = bad ? NULL : string_field(c, body, "group", &bad);
    int64_t extra = 1, *ids = NULL;
    size_t n = 0;
    unsigned st = MHD_HTTP_BAD_REQUEST;
    if (!bad && json_object_object_get_ex(body, "attempts", &att) &&
        (!json_object_is_type(att, json_type_int) || (extra = json_object_get_int64(att)) < 1 || extra > 100000))
        bad = web_bad(c, "attempts: give a whole number from 1 to 100000");
    bool by_group = kind || group;
    if (!bad && by_group && (!kind || !group || json_object_object_get_ex(body, "ids", NULL)))
        bad = web_bad(c, "give ids, or kind and group (not both)");
    if (bad || (!by_group && !parse_ids(c, body, &ids, &n)))
        goto out;
    if (!web_db(c) || !sq_db_exec(c->w->conn, "BEGIN", c->err, sizeof c->err)) {
        st = web_db_failed(c);
        goto out;
    }
    if (by_group && !group_ids(c, kind, group, &ids, &n)) {
        st = c->err[0] && strncmp(sq_db_last_sqlstate(), "22", 2) != 0 ? web_db_failed(c) : MHD_HTTP_BAD_REQUEST;
        goto out;
    }
    long done = 0;
    for (size_t at = 0; at < n && done >= 0; at += RETRY_CHUNK) {
        long k = sq_admin_retry(c->w->conn, ids + at, n - at < RETRY_CHUNK ? n - at : RETRY_CHUNK, NULL, (int)extra,
                                c->err, sizeof c->err);
        done = k < 0 ? -1 : done + k;
    }
    if (done < 0 || (st = commit(c)) != MHD_HTTP_OK) {
        st = done < 0 ? web_db_failed(c) : st;
        goto out;
    }
    char who[64];
    client(c, who, sizeof who);
    log_info("retry from %s: %ld of %zu job(s) back to pending%s%s", who, done, n,
             by_group ? ", dead group of kind " : "", by_group ? kind : "");
    c->out = json_object_new_object();
    json_object_object_add(c->out, "retried", json_object_new_int64(done));
    json_object_object_add(c->out, "asked", json_object_new_int64((int64_t)n));
out:
    free(ids);
    json_object_put(body);
    return st;
}

/* ---- cancel ------------------------------------------------------------------------------------ */

unsigned web_act_cancel(struct web_call *c, const char *tail)
{
    (void)tail;
    static const char *const fields[] = {"ids", NULL};
    json_object *body = parse_body(c, fields);
    int64_t *ids = NULL;
    size_t n = 0;
    unsigned st = MHD_HTTP_BAD_REQUEST;
    if (!body || !parse_ids(c, body, &ids, &n))
        goto out;
    if (!web_db(c)) {
        st = MHD_HTTP_SERVICE_UNAVAILABLE;
        goto out;
    }
    long done = sq_admin_cancel(c->w->conn, ids, n, c->err, sizeof c->err);
    if (done < 0) {
        st = web_db_failed(c);
        goto out;
    }
    char who[64];
    client(c, who, sizeof who);
    log_info("cancel from %s: %ld of %zu job(s) cancelled", who, done, n);
    c->out = json_object_new_object();
    json_object_object_add(c->out, "cancelled", json_object_new_int64(done));
    json_object_object_add(c->out, "asked", json_object_new_int64((int64_t)n));
    st = MHD_HTTP_OK;
out:
    free(ids);
    json_object_put(body);
    return st;
}

/* ---- pause and resume ------------------------------------------------------------------------ */

static unsigned pause_or_resume(struct web_call *c, bool pause)
{
    static const char *const fields[] = {"scope", "name", NULL};
    json_object *body = parse_body(c, fields);
    if (!body)
        return MHD_HTTP_BAD_REQUEST;
    bool bad = false;
    const char *scope = string_field(c, body, "scope", &bad), *name = bad ? NULL : string_field(c, body, "name", &bad);
    unsigned st = MHD_HTTP_BAD_REQUEST;
    if (!bad && (!scope || (strcmp(scope, "queue") != 0 && strcmp(scope, "kind") != 0)))
        bad = web_bad(c, "scope: give \"queue\" or \"kind\"");
    if (!bad && (!name || !sq_valid_name(name)))
        bad = web_bad(c, "name: give a %s name (1 to 128 of A-Z a-z 0-9 _ . : -)", scope);
    if (bad)
        goto out;
    if (!web_db(c)) {
        st = MHD_HTTP_SERVICE_UNAVAILABLE;
        goto out;
    }
    long changed = sq_admin_pause(c->w->conn, scope, name, pause, c->err, sizeof c->err);
    if (changed < 0) {
        st = web_db_failed(c);
        goto out;
    }
    char who[64];
    client(c, who, sizeof who);
    log_info("%s from %s: %s \"%s\" %s", pause ? "pause" : "resume", who, scope, name,
             changed ? (pause ? "paused" : "resumed") : (pause ? "was already paused" : "was not paused"));
    c->out = json_object_new_object();
    json_object_object_add(c->out, "changed", json_object_new_boolean(changed > 0));
    st = MHD_HTTP_OK;
out:
    json_object_put(body);
    return st;
}

unsigned web_act_pause(struct web_call *c, const char *tail)
{
    (void)tail;
    return pause_or_resume(c, true);
}

unsigned web_act_resume(struct web_call *c, const char *tail)
{
    (void)tail;
    return pause_or_resume(c, false);
}
