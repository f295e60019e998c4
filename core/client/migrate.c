/*
 * migrate.c -- bring the skipq schema up to date.
 *
 * Everything happens in one transaction behind a lock, so two hosts
 * migrating at once serialise: the second finds the work done and applies
 * nothing. A failed migration rolls back whole. The lock is SHARE ROW
 * EXCLUSIVE on skipq.schema_migrations once that table exists: a mode that
 * conflicts with itself and with writes to the table, which only the
 * schema's owner may make, and with nothing a reader takes, so no other
 * role can hold migrations up. Before the first migration there is no
 * table of skipq's to lock, so migrate takes a transaction-scoped advisory
 * key, which any role that can connect could hold; then it takes the table
 * lock as well if a migration created the table meanwhile. It never waits
 * blindly: it polls without blocking, says after a second who holds the
 * lock (pid, role and application from pg_locks and pg_stat_activity;
 * never a query's text), and gives up after a deadline (60 s, `skipq
 * migrate --wait`) with an error that names the holder. A run that applies
 * anything ends by taking EXECUTE on skipq's functions from PUBLIC, so a
 * new function is never callable by every role in between. The
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
 * CREATE on the schema granted to anyone else. The check runs before the
 * lock (a squatter owning skipq.schema_migrations could hold that lock:
 * refused at once, not after the deadline) and again under it (a schema
 * created meanwhile).
 */
#include <inttypes.h>
#include <libpq-fe.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/db.h"
#include "common/util.h"
#include "client/migrate.h"
#include "skipq/skipq.h"

/* Arbitrary, fixed: "skipq" in ASCII. Taken only while
 * skipq.schema_migrations does not exist. */
#define MIGRATE_LOCK_KEY "495946797169"
#define LOCK_POLL_MS 100
#define LOCK_TELL_MS 1000 /* a wait this long is worth a word: who holds the lock */

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
    /* Two statements: a table named in a statement is looked up when it is
     * parsed, so one statement with a CASE around it would still fail with
     * "relation does not exist" on a database never migrated. */
    PGresult *res = sq_db_query(conn, "SELECT pg_catalog.to_regclass('skipq.schema_migrations') IS NOT NULL", 0, NULL,
                                errbuf, errlen);
    if (!res)
        return SKIPQ_EDB;
    bool exists = strcmp(PQgetvalue(res, 0, 0), "t") == 0;
    PQclear(res);
    *version_out = 0;
    if (!exists)
        return SKIPQ_OK; /* never migrated */
    res = sq_db_query(conn, "SELECT coalesce(pg_catalog.max(version), 0) FROM skipq.schema_migrations", 0, NULL,
                      errbuf, errlen);
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

/* ---- the migration lock ------------------------------------------------------------ */

/* skipq.schema_migrations, found in the catalogs: to_regclass() fails
 * without USAGE on the schema, and with it the transaction. */
#define SCHEMA_MIGRATIONS_OID \
    "SELECT c.oid FROM pg_catalog.pg_class c" \
    "  JOIN pg_catalog.pg_namespace n ON n.oid OPERATOR(pg_catalog.=) c.relnamespace" \
    " WHERE n.nspname OPERATOR(pg_catalog.=) 'skipq' AND c.relname OPERATOR(pg_catalog.=) 'schema_migrations'"

/*
 * Who holds the lock migrate wants: the table lock's conflicting modes on
 * skipq.schema_migrations ($1 = 't'), or the advisory key (a single int8
 * key is classid = its high 32 bits, objid = its low 32 bits, objsubid 1).
 * The oldest holder first. pg_stat_activity shows other roles'
 * application_name only to their members and pg_read_all_stats.
 */
static const char HOLDER_SQL[] =
    "SELECT l.pid, coalesce(a.usename::pg_catalog.text, ''), coalesce(a.application_name, '')"
    "  FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid"
    " WHERE l.granted AND l.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()"
    "   AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d"
    "                                           WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())"
    "   AND CASE WHEN $1::pg_catalog.bool"
    "            THEN l.locktype OPERATOR(pg_catalog.=) 'relation'"
    "                 AND l.relation OPERATOR(pg_catalog.=) (" SCHEMA_MIGRATIONS_OID ")"
    "                 AND NOT (l.mode OPERATOR(pg_catalog.=) ANY ('{AccessShareLock,RowShareLock}'::pg_catalog.text[]))"
    "            ELSE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.objsubid OPERATOR(pg_catalog.=) 1"
    "                 AND ((l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32)"
    "                      OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8)"
    "                     OPERATOR(pg_catalog.=) " MIGRATE_LOCK_KEY "::pg_catalog.int8 END"
    " ORDER BY a.xact_start NULLS LAST, l.pid LIMIT 1";

/* "the lock on skipq.schema_migrations, held by pid 42 (role "app", application
 * "psql")" into out; database text is quoted as it is (callers print it with
 * sq_fput_text). */
static void describe_holder(PGconn *conn, bool table, char *out, size_t outlen)
{
    const char *what = table ? "the lock on skipq.schema_migrations"
                             : "advisory lock " MIGRATE_LOCK_KEY " (taken while schema skipq does not exist)";
    const char *params[1] = {table ? "t" : "f"};
    PGresult *res = PQexecParams(conn, HOLDER_SQL, 1, NULL, params, NULL, NULL, 0);
    if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) == 0) {
        snprintf(out, outlen, "%s, held by another session", what);
    } else {
        const char *app = PQgetvalue(res, 0, 2);
        snprintf(out, outlen, "%s, held by pid %s (role \"%.63s\"%s%.64s%s)", what, PQgetvalue(res, 0, 0),
                 PQgetvalue(res, 0, 1), app[0] ? ", application \"" : "", app, app[0] ? "\"" : "");
    }
    PQclear(res);
}

/* 42501 (insufficient_privilege): -2, any other error -1. */
static int failed(PGconn *conn, PGresult *res, char *errbuf, size_t errlen)
{
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    sq_db_error(conn, res, errbuf, errlen);
    return state && strcmp(state, "42501") == 0 ? -2 : -1;
}

/* Does skipq.schema_migrations exist (committed)? 1 or 0, or as try_lock. */
static int table_exists(PGconn *conn, char *errbuf, size_t errlen)
{
    PGresult *res = PQexec(conn, "SELECT EXISTS (" SCHEMA_MIGRATIONS_OID ")");
    int r = PQresultStatus(res) == PGRES_TUPLES_OK ? PQgetvalue(res, 0, 0)[0] == 't' : failed(conn, res, errbuf, errlen);
    PQclear(res);
    return r;
}

/* One attempt without waiting: 1 taken, 0 held by someone else, -1 error,
 * -2 not allowed to lock the table (message in errbuf for both; the
 * transaction is still open). */
static int try_lock(PGconn *conn, bool table, char *errbuf, size_t errlen)
{
    if (!table) {
        PGresult *res = PQexec(conn, "SELECT pg_catalog.pg_try_advisory_xact_lock(" MIGRATE_LOCK_KEY ")");
        int r = PQresultStatus(res) == PGRES_TUPLES_OK ? PQgetvalue(res, 0, 0)[0] == 't' : failed(conn, res, errbuf, errlen);
        PQclear(res);
        return r;
    }
    /* NOWAIT fails the statement: inside a savepoint, so the transaction
     * goes on. */
    PQclear(PQexec(conn, "SAVEPOINT sq_migrate_lock"));
    PGresult *res = PQexec(conn, "LOCK TABLE skipq.schema_migrations IN SHARE ROW EXCLUSIVE MODE NOWAIT");
    int r = 1;
    if (PQresultStatus(res) != PGRES_COMMAND_OK) {
        const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
        r = state && strcmp(state, "55P03") == 0 ? 0 : failed(conn, res, errbuf, errlen); /* lock_not_available */
        PQclear(PQexec(conn, "ROLLBACK TO SAVEPOINT sq_migrate_lock"));
    }
    PQclear(res);
    PQclear(PQexec(conn, "RELEASE SAVEPOINT sq_migrate_lock"));
    return r;
}

/* "60 s", or "1500 ms" when not whole seconds. */
static const char *fmt_wait(int64_t ms, char *buf, size_t len)
{
    if (ms % 1000 == 0)
        snprintf(buf, len, "%" PRId64 " s", ms / 1000);
    else
        snprintf(buf, len, "%" PRId64 " ms", ms);
    return buf;
}

/*
 * Take the migration lock (see the top of this file), polling for at most
 * wait_ms: 1 taken. 0: not taken, the transaction rolled back, errbuf says
 * why (at the deadline, naming the holder). -1: the role may not lock
 * skipq.schema_migrations (errbuf says so; the transaction stays open, for
 * check_owners to say whose schema it is).
 */
static int take_lock(PGconn *conn, int64_t wait_ms, sq_migrate_waiting waiting, void *arg, char *errbuf,
                     size_t errlen)
{
    wait_ms = wait_ms > 0 ? wait_ms : 0;
    int64_t start = sq_now_ms(), deadline = start + wait_ms;
    bool told = false;
    char wait[32];
    fmt_wait(wait_ms, wait, sizeof wait);
    for (;;) {
        int table = table_exists(conn, errbuf, errlen);
        int got = table < 0 ? table : try_lock(conn, table, errbuf, errlen);
        if (got > 0 && !table && (table = table_exists(conn, errbuf, errlen)) != 0)
            got = table < 0 ? table : try_lock(conn, true, errbuf, errlen); /* created meanwhile: lock it too */
        if (got < 0) {
            char why[SKIPQ_ERRBUF_SIZE];
            snprintf(why, sizeof why, "%s", errbuf);
            snprintf(errbuf, errlen, "could not take the migration lock: %s", why);
            if (got == -2)
                return -1;
            PQclear(PQexec(conn, "ROLLBACK"));
            return 0;
        }
        if (got > 0)
            return 1;
        char holder[400];
        if (sq_now_ms() >= deadline) {
            describe_holder(conn, table, holder, sizeof holder);
            snprintf(errbuf, errlen,
                     "gave up after %s waiting for %s. Another migration may be running there, or that "
                     "session holds the lock on purpose: let it finish, or end it (pg_terminate_backend), and "
                     "migrate again. Nothing was changed",
                     wait, holder);
            PQclear(PQexec(conn, "ROLLBACK"));
            return 0;
        }
        if (!told && waiting && sq_now_ms() >= start + LOCK_TELL_MS) {
            describe_holder(conn, table, holder, sizeof holder);
            char msg[600];
            snprintf(msg, sizeof msg, "waiting up to %s for %s", wait, holder);
            waiting(msg, arg);
            told = true;
        }
        struct timespec ts = {0, LOCK_POLL_MS * 1000000L};
        nanosleep(&ts, NULL);
    }
}

skipq_rc skipq_migrate(PGconn *conn, int *applied_out, char *errbuf, size_t errlen)
{
    return sq_migrate(conn, SQ_MIGRATE_WAIT_MS, NULL, NULL, applied_out, errbuf, errlen);
}

skipq_rc sq_migrate(PGconn *conn, int64_t wait_ms, sq_migrate_waiting waiting, void *arg, int *applied_out,
                    char *errbuf, size_t errlen)
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
                                 "SET LOCAL client_min_messages = warning");
    if (PQresultStatus(res) != PGRES_COMMAND_OK)
        return fail_rollback(conn, res, "could not prepare the skipq schema", errbuf, errlen);
    PQclear(res);
    bool exists = false;
    skipq_rc rc = check_owners(conn, &exists, errbuf, errlen);
    if (rc != SKIPQ_OK)
        return rc;
    int locked = take_lock(conn, wait_ms, waiting, arg, errbuf, errlen);
    if (locked == 0)
        return SKIPQ_EDB;
    rc = check_owners(conn, &exists, errbuf, errlen);
    if (rc != SKIPQ_OK)
        return rc;
    if (locked < 0) { /* not ours to migrate, though check_owners had nothing to say */
        PQclear(PQexec(conn, "ROLLBACK"));
        return SKIPQ_EDB;
    }
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
