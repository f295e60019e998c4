/*
 * db.c -- how skipq reaches PostgreSQL.
 *
 * Parameters go to PQconnectdbParams as keyword arrays, never as a string we
 * build, so no value can inject another keyword. Dead peers must be noticed
 * in bounded time: without tcp_user_timeout a query on a black-holed network
 * blocks for the kernel's retransmission timeout (~15 min), so skipq sets
 * keepalives and a user timeout unless the user chose their own.
 */
#include "db.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "conninfo.h"
#include "util.h"

/* SQLSTATE of the last error sq_db_error() saw on this thread, so callers
 * that only kept the message can still tell a dead session from a bad
 * statement. */
static _Thread_local char last_sqlstate[6];


static bool add(struct sq_dbparams *p, const char *k, const char *v)
{
    const char **nk = realloc(p->keys, (p->n + 2) * sizeof *nk);
    if (!nk)
        return false;
    p->keys = nk;
    const char **nv = realloc(p->values, (p->n + 2) * sizeof *nv);
    if (!nv)
        return false;
    p->values = nv;
    p->keys[p->n] = k;
    p->values[p->n] = v;
    p->n++;
    p->keys[p->n] = NULL;
    p->values[p->n] = NULL;
    return true;
}

bool sq_dbparams_build(struct sq_dbparams *p, const struct sq_config *cfg, const char *flag,
                       const char *application_name)
{
    memset(p, 0, sizeof *p);
    bool ok = add(p, "application_name", application_name ? application_name : "skipq") &&
              add(p, "connect_timeout", "10") && add(p, "keepalives", "1") && add(p, "keepalives_idle", "10") &&
              add(p, "keepalives_interval", "5") && add(p, "keepalives_count", "3") &&
              add(p, "tcp_user_timeout", "30000");
    const char *url = getenv("DATABASE_URL");
    if (flag && *flag)
        ok = ok && add(p, "dbname", flag);
    else if (cfg && cfg->ndb > 0)
        for (size_t i = 0; ok && i < cfg->ndb; i++)
            ok = add(p, cfg->db[i].key, cfg->db[i].value);
    else if (url && *url)
        ok = ok && add(p, "dbname", url);
    if (!ok)
        sq_dbparams_free(p);
    return ok;
}

void sq_dbparams_free(struct sq_dbparams *p)
{
    free(p->keys);
    free(p->values);
    memset(p, 0, sizeof *p);
}

/* Take out of a failed connection's message every connection string in p
 * and every password libpq holds: a server repeats a database name, and a
 * malformed URI can put part of a password in a host name. */
static void redact_secrets(PGconn *conn, const struct sq_dbparams *p, char *err)
{
    for (size_t i = 0; i < p->n; i++) {
        if (!sq_conninfo_is_string(p->values[i]))
            continue;
        struct sq_span pw[4];
        size_t n = sq_conninfo_passwords(p->values[i], pw, 4);
        for (size_t k = 0; k < n && k < 4; k++) {
            char *secret = strndup(p->values[i] + pw[k].start, pw[k].len);
            sq_redact(err, secret);
            free(secret);
        }
        sq_redact(err, p->values[i]);
    }
    PQconninfoOption *opts = PQconninfo(conn);
    for (PQconninfoOption *o = opts; o && o->keyword; o++)
        if (strcmp(o->keyword, "password") == 0)
            sq_redact(err, o->val);
    PQconninfoFree(opts);
}

PGconn *sq_db_connect(const struct sq_dbparams *p, char *err, size_t errlen)
{
    /* libpq expands the first dbname; its parse errors quote the text. */
    for (size_t i = 0; i < p->n; i++) {
        if (strcmp(p->keys[i], "dbname") != 0)
            continue;
        if (sq_conninfo_is_string(p->values[i]) && !sq_conninfo_check(p->values[i], err, errlen))
            return NULL;
        break;
    }
    PGconn *conn = PQconnectdbParams(p->keys, p->values, 1);
    if (!conn) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (PQstatus(conn) != CONNECTION_OK) {
        snprintf(err, errlen, "%s", PQerrorMessage(conn));
        redact_secrets(conn, p, err);
        size_t n = strlen(err);
        while (n > 0 && (err[n - 1] == '\n' || err[n - 1] == ' '))
            err[--n] = '\0';
        /* One line, for logs: libpq puts hints and each host tried on lines of their own. */
        for (char *nl = strchr(err, '\n'); nl; nl = strchr(nl, '\n')) {
            *nl = ';';
            if (nl[1] == '\t')
                nl[1] = ' ';
        }
        PQfinish(conn);
        return NULL;
    }
    return conn;
}

void sq_db_describe(PGconn *conn, char *buf, size_t len)
{
    const char *host = PQhost(conn);
    snprintf(buf, len, "host=%s port=%s dbname=%s user=%s", host ? host : "?", PQport(conn), PQdb(conn),
             PQuser(conn));
}

const char *sq_db_sqlstate(const PGresult *res)
{
    const char *s = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    return s ? s : "";
}

const char *sq_db_last_sqlstate(void)
{
    return last_sqlstate;
}

bool sq_db_conn_lost(PGconn *conn, const PGresult *res)
{
    if (PQstatus(conn) != CONNECTION_OK)
        return true;
    /* No result: judge by the last error this thread recorded. */
    const char *st = res ? sq_db_sqlstate(res) : last_sqlstate;
    /* 08: connection exception; 57P0x: admin/crash shutdown, cannot connect
     * now; 25006: we reached a read-only standby; 53300: too many
     * connections. All mean "this session is no good, make another". */
    return strncmp(st, "08", 2) == 0 || strncmp(st, "57P0", 4) == 0 || strcmp(st, "25006") == 0 ||
           strcmp(st, "53300") == 0;
}

void sq_db_error(PGconn *conn, const PGresult *res, char *err, size_t errlen)
{
    snprintf(last_sqlstate, sizeof last_sqlstate, "%s", sq_db_sqlstate(res));
    const char *m = res ? PQresultErrorField(res, PG_DIAG_MESSAGE_PRIMARY) : NULL;
    if (!m || !*m)
        m = PQerrorMessage(conn);
    if (!m || !*m)
        m = "unknown error";
    snprintf(err, errlen, "%s", m);
    size_t n = strlen(err);
    while (n > 0 && (err[n - 1] == '\n' || err[n - 1] == ' '))
        err[--n] = '\0';
}

bool sq_db_exec(PGconn *conn, const char *sql, char *err, size_t errlen)
{
    PGresult *res = PQexec(conn, sql);
    bool ok = res && (PQresultStatus(res) == PGRES_COMMAND_OK || PQresultStatus(res) == PGRES_TUPLES_OK);
    if (!ok && err)
        sq_db_error(conn, res, err, errlen);
    PQclear(res);
    return ok;
}
