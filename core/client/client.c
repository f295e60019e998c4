/*
 * client.c -- libskipq's enqueue call: one parameterised call of
 * skipq.enqueue_ex() on the caller's connection, so it joins the caller's
 * transaction. Validation lives in the SQL function, where every client
 * (psql, other languages, this library) gets the same rules.
 * The connection is the caller's, with whatever search_path it has, so the
 * statements name every built-in by schema ("SCHEMA-QUALIFIED SQL" in
 * queue.c).
 */
#include <libpq-fe.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "common/util.h"
#include "skipq/skipq.h"

const char *skipq_strerror(skipq_rc rc)
{
    switch (rc) {
    case SKIPQ_OK: return "ok";
    case SKIPQ_EINVAL: return "invalid argument";
    case SKIPQ_EDB: return "database error";
    case SKIPQ_ENOMEM: return "out of memory";
    case SKIPQ_ESCHEMA: return "schema version mismatch";
    case SKIPQ_ENOTFOUND: return "not found";
    }
    return "unknown error";
}

/* Map a failed enqueue statement (msg: its error, as sq_db_check recorded
 * it with its SQLSTATE) to a status and a message. */
static skipq_rc enqueue_error(const char *msg, char *errbuf, size_t errlen)
{
    const char *st = sq_db_last_sqlstate();
    /* Class 22 is "data exception": bad JSON, bad value, NUL bytes. */
    if (strncmp(st, "22", 2) == 0) {
        const char *d = sq_db_last_detail(); /* the token and the line of the JSON where it failed */
        if (strcmp(st, "22P02") == 0 || strcmp(st, "22P05") == 0 || strstr(msg, "json"))
            snprintf(errbuf, errlen, "invalid JSON payload: %s%s%s%s", msg, *d ? " (" : "", d, *d ? ")" : "");
        else
            snprintf(errbuf, errlen, "%s", msg);
        return SKIPQ_EINVAL;
    }
    if (strcmp(st, "42883") == 0 || strcmp(st, "3F000") == 0 || strcmp(st, "42P01") == 0) {
        snprintf(errbuf, errlen, "the skipq schema is missing or outdated (run `skipq migrate`): %s", msg);
        return SKIPQ_ESCHEMA;
    }
    snprintf(errbuf, errlen, "%s", msg);
    return SKIPQ_EDB;
}

skipq_rc skipq_enqueue_many(PGconn *conn, const char *jobs_json, int64_t *count_out, char *errbuf, size_t errlen)
{
    char dummy[SKIPQ_ERRBUF_SIZE];
    if (!errbuf) {
        errbuf = dummy;
        errlen = sizeof dummy;
    }
    if (!conn || !jobs_json) {
        snprintf(errbuf, errlen, "skipq_enqueue_many: %s is NULL", conn ? "jobs_json" : "conn");
        return SKIPQ_EINVAL;
    }
    const char *params[1] = {jobs_json};
    char msg[SKIPQ_ERRBUF_SIZE];
    PGresult *res = sq_db_query(conn, "SELECT pg_catalog.count(*) FROM skipq.enqueue_many($1::pg_catalog.jsonb)", 1,
                                params, msg, sizeof msg);
    if (!res)
        return enqueue_error(msg, errbuf, errlen);
    if (count_out)
        *count_out = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    PQclear(res);
    return SKIPQ_OK;
}

skipq_rc skipq_enqueue(PGconn *conn, const char *kind, const char *payload, const skipq_enqueue_opts *opts,
                       int64_t *id_out, char *errbuf, size_t errlen)
{
    char dummy[SKIPQ_ERRBUF_SIZE];
    if (!errbuf) {
        errbuf = dummy;
        errlen = sizeof dummy;
    }
    skipq_enqueue_opts defaults = {0};
    if (!opts)
        opts = &defaults;
    if (!conn || !kind) {
        snprintf(errbuf, errlen, "skipq_enqueue: %s is NULL", conn ? "kind" : "conn");
        return SKIPQ_EINVAL;
    }
    if (opts->delay_ms < 0) {
        snprintf(errbuf, errlen, "skipq_enqueue: delay must not be negative (got %" PRId64 "ms)", opts->delay_ms);
        return SKIPQ_EINVAL;
    }
    if (opts->unique_for_ms < 0 || (opts->unique_for_ms && !opts->unique_key)) {
        snprintf(errbuf, errlen, "skipq_enqueue: unique_for_ms must be positive and go with a unique_key");
        return SKIPQ_EINVAL;
    }
    if (opts->depends_on_count && !opts->depends_on) {
        snprintf(errbuf, errlen, "skipq_enqueue: depends_on is NULL but depends_on_count is %zu",
                 opts->depends_on_count);
        return SKIPQ_EINVAL;
    }
    char prio[16], delay[32], attempts[16], window[32];
    snprintf(prio, sizeof prio, "%d", opts->priority);
    snprintf(delay, sizeof delay, "%" PRId64, opts->delay_ms);
    snprintf(attempts, sizeof attempts, "%d", opts->max_attempts);
    snprintf(window, sizeof window, "%" PRId64, opts->unique_for_ms);
    char *parents = NULL;
    if (opts->depends_on_count && !(parents = sq_int8_array(opts->depends_on, opts->depends_on_count))) {
        snprintf(errbuf, errlen, "out of memory");
        return SKIPQ_ENOMEM;
    }
    /* max_attempts 0 is sent as NULL: the kind's default (skipq.kind_defaults), else 5. */
    const char *params[10] = {kind, payload ? payload : "{}", opts->queue ? opts->queue : "default", prio, delay,
                              opts->max_attempts ? attempts : NULL, opts->unique_key,
                              opts->unique_for_ms ? window : NULL, opts->ordering_key, parents};
    char msg[SKIPQ_ERRBUF_SIZE];
    PGresult *res = sq_db_query(conn,
                                "SELECT id, existing FROM skipq.enqueue_ex($1, $2::pg_catalog.jsonb, $3,"
                                " $4::pg_catalog.int4,"
                                " pg_catalog.now() OPERATOR(pg_catalog.+)"
                                "   ($5::pg_catalog.int8 OPERATOR(pg_catalog.*) pg_catalog.interval '1 millisecond'),"
                                " $6::pg_catalog.int4, $7,"
                                " $8::pg_catalog.int8 OPERATOR(pg_catalog.*) pg_catalog.interval '1 millisecond',"
                                " $9, $10::pg_catalog.int8[])",
                                10, params, msg, sizeof msg);
    free(parents);
    if (!res)
        return enqueue_error(msg, errbuf, errlen);
    if (id_out)
        *id_out = strtoll(PQgetvalue(res, 0, 0), NULL, 10);
    if (opts->existing_out)
        *opts->existing_out = PQgetvalue(res, 0, 1)[0] == 't';
    PQclear(res);
    return SKIPQ_OK;
}
