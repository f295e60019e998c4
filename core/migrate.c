/*
 * migrate.c -- bring the skipq schema up to date.
 *
 * Everything happens in one transaction behind a transaction-scoped advisory
 * lock, so two hosts migrating at once serialise: the second finds the work
 * done and applies nothing. A failed migration rolls back whole. A run that
 * applies anything ends by taking EXECUTE on skipq's functions from PUBLIC,
 * so a new function is never callable by every role in between.
 */
#include <libpq-fe.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "db.h"
#include "migrate.h"
#include "skipq/skipq.h"

/* Arbitrary, fixed: "skipq" in ASCII. */
#define MIGRATE_LOCK_KEY "495946797169"

int skipq_schema_version_required(void)
{
    return sq_migrations[sq_migration_count - 1].version;
}

skipq_rc skipq_schema_version(PGconn *conn, int *version_out, char *errbuf, size_t errlen)
{
    char dummy[SKIPQ_ERRBUF_SIZE];
    if (!errbuf) {
        errbuf = dummy;
        errlen = sizeof dummy;
    }
    PGresult *res = PQexec(conn, "SELECT CASE WHEN to_regclass('skipq.schema_migrations') IS NULL THEN 0 "
                                 "ELSE (SELECT coalesce(max(version), 0) FROM skipq.schema_migrations) END");
    if (PQresultStatus(res) != PGRES_TUPLES_OK) {
        sq_db_error(conn, res, errbuf, errlen);
        PQclear(res);
        return SKIPQ_EDB;
    }
    *version_out = atoi(PQgetvalue(res, 0, 0));
    PQclear(res);
    return SKIPQ_OK;
}

static skipq_rc fail_rollback(PGconn *conn, PGresult *res, const char *what, char *errbuf, size_t errlen)
{
    char msg[SKIPQ_ERRBUF_SIZE];
    sq_db_error(conn, res, msg, sizeof msg);
    snprintf(errbuf, errlen, "%s: %s", what, msg);
    PQclear(res);
    PQclear(PQexec(conn, "ROLLBACK"));
    return SKIPQ_EDB;
}

skipq_rc skipq_migrate(PGconn *conn, int *applied_out, char *errbuf, size_t errlen)
{
    char dummy[SKIPQ_ERRBUF_SIZE];
    if (!errbuf) {
        errbuf = dummy;
        errlen = sizeof dummy;
    }
    int applied = 0;
    if (applied_out)
        *applied_out = 0;
    if (PQtransactionStatus(conn) != PQTRANS_IDLE) {
        snprintf(errbuf, errlen, "skipq_migrate: the connection must not be inside a transaction");
        return SKIPQ_EINVAL;
    }
    PGresult *res = PQexec(conn, "BEGIN; SELECT pg_advisory_xact_lock(" MIGRATE_LOCK_KEY ");"
                                 "SET LOCAL search_path = pg_catalog;"
                                 "SET LOCAL client_min_messages = warning;"
                                 "CREATE SCHEMA IF NOT EXISTS skipq;"
                                 "CREATE TABLE IF NOT EXISTS skipq.schema_migrations ("
                                 " version int PRIMARY KEY, name text NOT NULL,"
                                 " applied_at timestamptz NOT NULL DEFAULT now())");
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
        return fail_rollback(conn, res, "could not prepare the skipq schema", errbuf, errlen);
    PQclear(res);

    res = PQexec(conn, "SELECT coalesce(max(version), 0) FROM skipq.schema_migrations");
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        return fail_rollback(conn, res, "could not read the schema version", errbuf, errlen);
    int current = atoi(PQgetvalue(res, 0, 0));
    PQclear(res);
    if (current > skipq_schema_version_required()) {
        PQclear(PQexec(conn, "ROLLBACK"));
        snprintf(errbuf, errlen, "the database schema is at version %d, newer than this skipq knows (%d)", current,
                 skipq_schema_version_required());
        return SKIPQ_ESCHEMA;
    }
    for (int i = 0; i < sq_migration_count; i++) {
        const struct sq_migration *m = &sq_migrations[i];
        if (m->version <= current)
            continue;
        res = PQexec(conn, m->sql);
        if (PQresultStatus(res) != PGRES_COMMAND_OK && PQresultStatus(res) != PGRES_TUPLES_OK) {
            char what[128];
            snprintf(what, sizeof what, "migration %s failed", m->name);
            return fail_rollback(conn, res, what, errbuf, errlen);
        }
        PQclear(res);
        char ver[16];
        snprintf(ver, sizeof ver, "%d", m->version);
        const char *params[2] = {ver, m->name};
        res = PQexecParams(conn, "INSERT INTO skipq.schema_migrations (version, name) VALUES ($1, $2)", 2, NULL,
                           params, NULL, NULL, 0);
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
            return fail_rollback(conn, res, "could not record the migration", errbuf, errlen);
        PQclear(res);
        applied++;
    }
    /* PostgreSQL gives PUBLIC EXECUTE on every new function, and default
     * privileges cannot take that away per schema: revoke it after every
     * run that created something (sql/052_privileges.sql). */
    res = applied ? PQexec(conn, "REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA skipq FROM PUBLIC") : NULL;
    if (res && PQresultStatus(res) != PGRES_COMMAND_OK)
        return fail_rollback(conn, res, "could not revoke PUBLIC's rights on the skipq functions", errbuf, errlen);
    PQclear(res);
    res = PQexec(conn, "COMMIT");
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
        return fail_rollback(conn, res, "could not commit the migrations", errbuf, errlen);
    PQclear(res);
    if (applied_out)
        *applied_out = applied;
    return SKIPQ_OK;
}
