/*
 * migrate.c -- bring the skipq schema up to date.
 *
 * Everything happens in one transaction behind a transaction-scoped advisory
 * lock, so two hosts migrating at once serialise: the second finds the work
 * done and applies nothing. A failed migration rolls back whole. A run that
 * applies anything ends by taking EXECUTE on skipq's functions from PUBLIC,
 * so a new function is never callable by every role in between. The
 * transaction runs with search_path = pg_catalog, pg_temp (SET LOCAL, so it
 * holds through a pooler too), and skipq's own statements here name every
 * built-in by schema anyway ("SCHEMA-QUALIFIED SQL" in queue.c).
 *
 * Before it changes anything, migrate refuses a schema skipq, or an object
 * in it, that a role it cannot trust owns. The migrating role is often a
 * superuser, and the SECURITY DEFINER functions it creates there call other
 * functions of the schema as that role: whoever owns the schema can drop
 * and replace those (skipq.valid_run_at(), say) and run code as the
 * superuser. `CREATE SCHEMA IF NOT EXISTS` would have accepted a schema
 * someone created first. Trusted owners: the migrating role (current_user),
 * a role it is a member of (pg_auth_members; a superuser's power over every
 * role does not count), or a superuser (who could do anything anyway). The
 * same goes for the functions that triggers on skipq's tables call, and for
 * CREATE on the schema granted to anyone else.
 */
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/db.h"
#include "client/migrate.h"
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
    PGresult *res = sq_db_query(conn,
                                "SELECT CASE WHEN pg_catalog.to_regclass('skipq.schema_migrations') IS NULL THEN 0"
                                " ELSE (SELECT coalesce(pg_catalog.max(version), 0) FROM skipq.schema_migrations)"
                                " END",
                                0, NULL, errbuf, errlen);
    if (!res)
        return SKIPQ_EDB;
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

/*
 * What schema skipq holds (and the schema itself) that an untrusted role
 * owns: rows of (object, owner). "mine": the migrating role and every role
 * it is a member of, directly or not.
 */
static const char SQUATTERS_SQL[] =
    "WITH RECURSIVE mine AS ("
    "  SELECT r.oid FROM pg_catalog.pg_roles r WHERE r.rolname OPERATOR(pg_catalog.=) CURRENT_USER"
    "  UNION"
    "  SELECT m.roleid FROM pg_catalog.pg_auth_members m JOIN mine ON m.member OPERATOR(pg_catalog.=) mine.oid"
    "), s AS ("
    "  SELECT n.tableoid, n.oid, n.nspowner, n.nspacl FROM pg_catalog.pg_namespace n"
    "   WHERE n.nspname OPERATOR(pg_catalog.=) 'skipq'"
    "), owned (what, owner) AS ("
    "  SELECT pg_catalog.pg_describe_object(s.tableoid, s.oid, 0), s.nspowner FROM s"
    "  UNION ALL"
    "  SELECT pg_catalog.pg_describe_object(c.tableoid, c.oid, 0), c.relowner"
    "    FROM pg_catalog.pg_class c JOIN s ON c.relnamespace OPERATOR(pg_catalog.=) s.oid"
    "  UNION ALL"
    "  SELECT pg_catalog.pg_describe_object(p.tableoid, p.oid, 0), p.proowner"
    "    FROM pg_catalog.pg_proc p JOIN s ON p.pronamespace OPERATOR(pg_catalog.=) s.oid"
    "  UNION ALL"
    "  SELECT pg_catalog.pg_describe_object(t.tableoid, t.oid, 0), t.typowner"
    "    FROM pg_catalog.pg_type t JOIN s ON t.typnamespace OPERATOR(pg_catalog.=) s.oid"
    "  UNION ALL"
    "  SELECT pg_catalog.pg_describe_object(o.tableoid, o.oid, 0), o.oprowner"
    "    FROM pg_catalog.pg_operator o JOIN s ON o.oprnamespace OPERATOR(pg_catalog.=) s.oid"
    "  UNION ALL"
    "  SELECT pg_catalog.pg_describe_object(o.tableoid, o.oid, 0), o.opcowner"
    "    FROM pg_catalog.pg_opclass o JOIN s ON o.opcnamespace OPERATOR(pg_catalog.=) s.oid"
    "  UNION ALL"
    "  SELECT pg_catalog.pg_describe_object(o.tableoid, o.oid, 0), o.opfowner"
    "    FROM pg_catalog.pg_opfamily o JOIN s ON o.opfnamespace OPERATOR(pg_catalog.=) s.oid"
    "  UNION ALL"
    "  SELECT pg_catalog.pg_describe_object(o.tableoid, o.oid, 0), o.collowner"
    "    FROM pg_catalog.pg_collation o JOIN s ON o.collnamespace OPERATOR(pg_catalog.=) s.oid"
    "  UNION ALL"
    "  SELECT pg_catalog.pg_describe_object(o.tableoid, o.oid, 0), o.conowner"
    "    FROM pg_catalog.pg_conversion o JOIN s ON o.connamespace OPERATOR(pg_catalog.=) s.oid"
    "  UNION ALL"
    "  SELECT pg_catalog.pg_describe_object(o.tableoid, o.oid, 0), o.stxowner"
    "    FROM pg_catalog.pg_statistic_ext o JOIN s ON o.stxnamespace OPERATOR(pg_catalog.=) s.oid"
    "  UNION ALL"
    "  SELECT pg_catalog.pg_describe_object(o.tableoid, o.oid, 0), o.cfgowner"
    "    FROM pg_catalog.pg_ts_config o JOIN s ON o.cfgnamespace OPERATOR(pg_catalog.=) s.oid"
    "  UNION ALL"
    "  SELECT pg_catalog.pg_describe_object(o.tableoid, o.oid, 0), o.dictowner"
    "    FROM pg_catalog.pg_ts_dict o JOIN s ON o.dictnamespace OPERATOR(pg_catalog.=) s.oid"
    "  UNION ALL"
    /* A trigger has no owner of its own: its function runs as the caller. */
    "  SELECT pg_catalog.format('%s (it calls %s)', pg_catalog.pg_describe_object(t.tableoid, t.oid, 0),"
    "                           pg_catalog.pg_describe_object(p.tableoid, p.oid, 0)), p.proowner"
    "    FROM pg_catalog.pg_trigger t"
    "    JOIN pg_catalog.pg_class c ON c.oid OPERATOR(pg_catalog.=) t.tgrelid"
    "    JOIN s ON c.relnamespace OPERATOR(pg_catalog.=) s.oid"
    "    JOIN pg_catalog.pg_proc p ON p.oid OPERATOR(pg_catalog.=) t.tgfoid"
    "   WHERE NOT t.tgisinternal"
    "  UNION ALL"
    "  SELECT 'the right to create objects in schema skipq', a.grantee"
    "    FROM s CROSS JOIN LATERAL pg_catalog.aclexplode(s.nspacl) a"
    "   WHERE a.privilege_type OPERATOR(pg_catalog.=) 'CREATE'"
    ")"
    " SELECT o.what, CASE WHEN o.owner OPERATOR(pg_catalog.=) 0 THEN 'PUBLIC'"
    "                     ELSE pg_catalog.pg_get_userbyid(o.owner)::pg_catalog.text END, CURRENT_USER"
    "   FROM owned o"
    "  WHERE NOT (o.owner OPERATOR(pg_catalog.=) ANY (SELECT oid FROM mine))"
    "    AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_roles r"
    "                     WHERE r.oid OPERATOR(pg_catalog.=) o.owner AND r.rolsuper)"
    /* The schema first, then what was made on purpose before what comes
     * with it (a table's indexes and row type). */
    "  ORDER BY o.what OPERATOR(pg_catalog.<>) 'schema skipq',"
    "           pg_catalog.split_part(o.what, ' ', 1) OPERATOR(pg_catalog.=) ANY (ARRAY['index', 'type', 'sequence']),"
    "           o.what";

/*
 * Refuse a squatted schema (see the top of this file); inside the
 * migration's transaction, before anything is created. Sets *exists to
 * whether schema skipq is there at all.
 */
static skipq_rc check_owners(PGconn *conn, bool *exists, char *errbuf, size_t errlen)
{
    PGresult *res = PQexec(conn, "SELECT pg_catalog.to_regnamespace('skipq') IS NOT NULL");
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        return fail_rollback(conn, res, "could not look for schema skipq", errbuf, errlen);
    *exists = PQgetvalue(res, 0, 0)[0] == 't';
    PQclear(res);
    if (!*exists)
        return SKIPQ_OK;
    res = PQexec(conn, SQUATTERS_SQL);
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        return fail_rollback(conn, res, "could not check who owns schema skipq", errbuf, errlen);
    int n = PQntuples(res);
    if (n == 0) {
        PQclear(res);
        return SKIPQ_OK;
    }
    char more[64] = "";
    if (n > 1)
        snprintf(more, sizeof more, " (and %d more object%s owned by other roles)", n - 1, n > 2 ? "s" : "");
    snprintf(errbuf, errlen,
             "refusing to migrate: %.150s is owned by role \"%.63s\"%s, which is not \"%.63s\", a role it is a "
             "member of, or a superuser; its owner could run code as the migrating role. Nothing was changed. "
             "Check these objects, then drop them or have a superuser change their owner",
             PQgetvalue(res, 0, 0), PQgetvalue(res, 0, 1), more, PQgetvalue(res, 0, 2));
    PQclear(res);
    PQclear(PQexec(conn, "ROLLBACK"));
    return SKIPQ_ESCHEMA;
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
    PGresult *res = PQexec(conn, "BEGIN;"
                                 "SET LOCAL search_path = pg_catalog, pg_temp;"
                                 "SET LOCAL client_min_messages = warning;"
                                 "SELECT pg_catalog.pg_advisory_xact_lock(" MIGRATE_LOCK_KEY ")");
    if (PQresultStatus(res) != PGRES_TUPLES_OK)
        return fail_rollback(conn, res, "could not prepare the skipq schema", errbuf, errlen);
    PQclear(res);
    bool exists = false;
    skipq_rc rc = check_owners(conn, &exists, errbuf, errlen);
    if (rc != SKIPQ_OK)
        return rc;
    if (!exists) {
        /* No IF NOT EXISTS: a schema someone created since the check fails
         * this instead of being taken as ours. */
        res = PQexec(conn, "CREATE SCHEMA skipq");
        if (PQresultStatus(res) != PGRES_COMMAND_OK)
            return fail_rollback(conn, res, "could not create schema skipq", errbuf, errlen);
        PQclear(res);
    }
    res = PQexec(conn, "CREATE TABLE IF NOT EXISTS skipq.schema_migrations ("
                       " version int PRIMARY KEY, name text NOT NULL,"
                       " applied_at timestamptz NOT NULL DEFAULT pg_catalog.now())");
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
        return fail_rollback(conn, res, "could not prepare the skipq schema", errbuf, errlen);
    PQclear(res);

    res = PQexec(conn, "SELECT coalesce(pg_catalog.max(version), 0) FROM skipq.schema_migrations");
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
