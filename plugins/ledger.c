/*
 * ledger.c -- an example transactional plugin: typed fields from the
 * payload, written in the job's own transaction.
 *
 * Kind `ledger.post`. Payload (read with json-c, each field's type checked):
 *     {"account": "acme", "amount_cents": 1250, "currency": "EUR", "memo": "invoice 42"}
 * account: a string of 1-64 characters; amount_cents: a whole number, not
 * zero; currency: three capital letters; memo: optional string. A payload
 * that breaks these fails the job at once (it will never be right).
 *
 * The row is inserted through skipq_job_conn(), so it commits together with
 * the job's done marker, or not at all: a retried or fenced attempt leaves
 * nothing behind. The insert is keyed on the job id (ON CONFLICT DO
 * NOTHING), which makes it idempotent even for an operator's redrive of a
 * done job. The output records what was posted.
 *
 *     CREATE TABLE public.skipq_ledger (job_id bigint PRIMARY KEY, account text NOT NULL,
 *         amount_cents bigint NOT NULL, currency text NOT NULL, memo text);
 *
 *     [plugin ledger]
 *     path = /usr/lib/x86_64-linux-gnu/skipq/ledger.so
 *     table = public.skipq_ledger
 */
#include <ctype.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <libpq-fe.h>
#include <skipq/plugin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const skipq_config_key ledger_keys[] = {
    {"table", SKIPQ_CONFIG_STRING, "public.skipq_ledger", 0, 0, "the table rows go to ([schema.]name)"},
    {NULL, SKIPQ_CONFIG_STRING, NULL, 0, 0, NULL}};

struct entry {
    const char *account, *currency, *memo;
    int64_t amount_cents;
};

/* NULL, or why the payload can never be posted. */
static const char *read_entry(json_object *root, struct entry *e)
{
    json_object *v;
    if (!json_object_is_type(root, json_type_object))
        return "the payload is not a JSON object";
    if (!json_object_object_get_ex(root, "account", &v) || !json_object_is_type(v, json_type_string) ||
        json_object_get_string_len(v) < 1 || json_object_get_string_len(v) > 64)
        return "\"account\" must be a string of 1-64 characters";
    e->account = json_object_get_string(v);
    if (!json_object_object_get_ex(root, "amount_cents", &v) || !json_object_is_type(v, json_type_int) ||
        (e->amount_cents = json_object_get_int64(v)) == 0)
        return "\"amount_cents\" must be a whole number, not zero";
    if (!json_object_object_get_ex(root, "currency", &v) || !json_object_is_type(v, json_type_string) ||
        json_object_get_string_len(v) != 3)
        return "\"currency\" must be three capital letters";
    e->currency = json_object_get_string(v);
    for (int i = 0; i < 3; i++)
        if (!isupper((unsigned char)e->currency[i]))
            return "\"currency\" must be three capital letters";
    e->memo = NULL;
    if (json_object_object_get_ex(root, "memo", &v) && !json_object_is_type(v, json_type_null)) {
        if (!json_object_is_type(v, json_type_string))
            return "\"memo\" must be a string";
        e->memo = json_object_get_string(v);
    }
    return NULL;
}

static skipq_outcome post(skipq_job *job, void *userdata)
{
    const char *sql = userdata;
    json_object *root = json_tokener_parse(job->payload);
    struct entry e;
    const char *bad = root ? read_entry(root, &e) : "the payload is not JSON";
    if (bad) {
        skipq_job_error(job, "%s", bad);
        json_object_put(root);
        return SKIPQ_FAIL;
    }
    PGconn *conn = skipq_job_conn(job);
    if (!conn) {
        skipq_job_error(job, "no database connection");
        json_object_put(root);
        return SKIPQ_RETRY;
    }
    char id[24], amount[24];
    snprintf(id, sizeof id, "%" PRId64, job->id);
    snprintf(amount, sizeof amount, "%" PRId64, e.amount_cents);
    const char *params[5] = {id, e.account, amount, e.currency, e.memo};
    PGresult *res = PQexecParams(conn, sql, 5, NULL, params, NULL, NULL, 0);
    skipq_outcome out = SKIPQ_DONE;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        skipq_job_error(job, "insert failed: %s", PQresultErrorMessage(res));
        out = SKIPQ_RETRY;
    } else {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "account", json_object_new_string(e.account));
        json_object_object_add(o, "amount_cents", json_object_new_int64(e.amount_cents));
        json_object_object_add(o, "currency", json_object_new_string(e.currency));
        json_object_object_add(o, "inserted", json_object_new_boolean(strcmp(PQcmdTuples(res), "1") == 0));
        size_t len;
        const char *text = json_object_to_json_string_length(o, JSON_C_TO_STRING_PLAIN, &len);
        (void)skipq_job_output(job, text, len);
        json_object_put(o);
    }
    PQclear(res);
    json_object_put(root);
    return out;
}

static int ledger_init(skipq_plugin *p)
{
    const char *table = skipq_config(p, "table");
    /* From the operator's INI, never a payload; still only [schema.]identifier. */
    for (const char *c = table; *c; c++)
        if (!isalnum((unsigned char)*c) && *c != '_' && *c != '.') {
            skipq_config_error(p, "table", "\"%s\" is not a [schema.]table name", table);
            return 1;
        }
    char *sql = malloc(512);
    if (!sql)
        return 1;
    snprintf(sql, 512,
             "INSERT INTO %s (job_id, account, amount_cents, currency, memo)"
             " VALUES ($1::pg_catalog.int8, $2, $3::pg_catalog.int8, $4, $5) ON CONFLICT (job_id) DO NOTHING",
             table);
    skipq_set_state(p, sql);
    int rc = skipq_register(p, "ledger.post", post, sql);
    if (rc != SKIPQ_PLUGIN_OK)
        free(sql);
    return rc;
}

static void ledger_shutdown(skipq_plugin *p)
{
    free(skipq_state(p));
}

SKIPQ_PLUGIN_KEYS("ledger", "1.1.0", ledger_init, ledger_shutdown, ledger_keys)
