/*
 * test_security_migrate.c -- `skipq migrate` refuses a schema skipq, or an
 * object in it, that a role it cannot trust owns, before it changes
 * anything (core/client/migrate.c).
 *
 * Why it matters: the migrating role is often a superuser, and the
 * SECURITY DEFINER functions it creates in schema skipq call others there
 * (enqueue_many() calls valid_run_at()) as that role. A role that created
 * schema skipq first, or owns anything in it, could replace those and run
 * code as the superuser. Trusted owners are the migrating role, a role it is
 * a member of (superuser status does not count as membership), and
 * superusers.
 *
 * Roles are cluster-wide: each is named after the test's database and goes
 * at exit, with what it owns.
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "skipq/skipq.h"

static char cleanup_db[64], cleanup_roles[400];
static bool cleanup_drop_db;

/* At exit: the database, if the test made it itself, then the roles. */
static void cleanup(void)
{
    char ci[700], sql[1200];
    PGconn *a = PQconnectdb(th_admin_conninfo());
    if (PQstatus(a) == CONNECTION_OK && cleanup_drop_db) {
        snprintf(sql, sizeof sql, "DROP DATABASE IF EXISTS %s WITH (FORCE)", cleanup_db);
        PQclear(PQexec(a, sql));
    } else if (PQstatus(a) == CONNECTION_OK) {
        snprintf(ci, sizeof ci, "%s dbname=%s", th_admin_conninfo(), cleanup_db);
        PGconn *d = PQconnectdb(ci);
        snprintf(sql, sizeof sql, "DROP OWNED BY %s", cleanup_roles);
        PQclear(PQexec(d, sql));
        PQfinish(d);
    }
    snprintf(sql, sizeof sql, "DROP ROLE IF EXISTS %s", cleanup_roles);
    PQclear(PQexec(a, sql));
    PQfinish(a);
}

/* Create roles NAME_suffix (NOLOGIN unless the suffix says login) and
 * register them for cleanup. */
static void roles(const char *db, bool drop_db, const char *const *suffixes)
{
    snprintf(cleanup_db, sizeof cleanup_db, "%s", db);
    cleanup_drop_db = drop_db;
    PGconn *a = PQconnectdb(th_admin_conninfo());
    cr_assert_eq(PQstatus(a), CONNECTION_OK);
    for (int i = 0; suffixes[i]; i++) {
        char sql[300];
        snprintf(sql, sizeof sql, "CREATE ROLE %s_%s %s", db, suffixes[i],
                 strcmp(suffixes[i], "deployer") == 0 ? "LOGIN" : "NOLOGIN");
        PQclear(th_query(a, sql));
        snprintf(cleanup_roles + strlen(cleanup_roles), sizeof cleanup_roles - strlen(cleanup_roles), "%s%s_%s",
                 i ? ", " : "", db, suffixes[i]);
    }
    PQfinish(a);
    atexit(cleanup);
}

/* A database nobody has migrated: th_db_new would. */
static void bare_db(struct th_db *db)
{
    memset(db, 0, sizeof *db);
    snprintf(db->name, sizeof db->name, "t_sm_%d_%lld", (int)getpid(), (long long)(th_now_ms() % 100000));
    PGconn *a = PQconnectdb(th_admin_conninfo());
    cr_assert_eq(PQstatus(a), CONNECTION_OK);
    char sql[160];
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", db->name);
    PQclear(th_query(a, sql));
    PQfinish(a);
    snprintf(db->conninfo, sizeof db->conninfo, "%s dbname=%s", th_admin_conninfo(), db->name);
    db->conn = th_connect(db);
}

static int migrate_cli(const struct th_db *db, const char *extra_conninfo, char **err)
{
    char ci[900];
    snprintf(ci, sizeof ci, "%s %s", db->conninfo, extra_conninfo ? extra_conninfo : "");
    char *out = NULL;
    int st = th_cli(&out, err, "migrate", "--db", ci, NULL);
    free(out);
    return st;
}

Test(security_migrate, a_schema_skipq_another_role_created_first_is_refused_and_nothing_is_created, .timeout = 60)
{
    struct th_db db;
    bare_db(&db);
    const char *const who[] = {"squatter", NULL};
    roles(db.name, true, who);
    /* The squatter may create schemas (CREATE on the database): it makes
     * skipq first, with something of its own in it. Were the schema taken,
     * it could later replace whatever migrate puts there. */
    th_execf(db.conn, "GRANT CREATE ON DATABASE %s TO %s_squatter", db.name, db.name);
    th_execf(db.conn, "SET ROLE %s_squatter", db.name);
    th_execf(db.conn, "CREATE SCHEMA skipq;"
                      "CREATE FUNCTION skipq.valid_run_at(timestamptz) RETURNS boolean LANGUAGE sql"
                      " AS 'SELECT true'");
    th_execf(db.conn, "RESET ROLE");

    char *err = NULL;
    cr_expect_eq(migrate_cli(&db, NULL, &err), 1, "migrate accepted a squatted schema: %s", err);
    char owner[128];
    snprintf(owner, sizeof owner, "schema skipq is owned by role \"%s_squatter\"", db.name);
    cr_expect_not_null(strstr(err, owner), "the message must name the schema and its owner: %s", err);
    cr_expect_not_null(strstr(err, "Nothing was changed"), "%s", err);
    free(err);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM pg_class WHERE relnamespace = 'skipq'::regnamespace"), 0,
                 "migrate created something in the squatted schema");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM pg_proc WHERE pronamespace = 'skipq'::regnamespace"), 1);

    /* The library call says the same. */
    char buf[SKIPQ_ERRBUF_SIZE];
    int applied = -1;
    cr_expect_eq(skipq_migrate(db.conn, &applied, buf, sizeof buf), SKIPQ_ESCHEMA, "%s", buf);
    cr_expect_eq(applied, 0);
    cr_expect_not_null(strstr(buf, owner), "%s", buf);
    cr_expect_eq(PQtransactionStatus(db.conn), PQTRANS_IDLE, "skipq_migrate left a transaction open");
}

/* Each way a role can hold something inside a schema skipq that is ours. */
Test(security_migrate, an_object_inside_the_schema_owned_by_another_role_is_refused, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    const char *const who[] = {"intruder", NULL};
    roles(db.name, false, who);
    char role[96], *err = NULL, want[300];
    snprintf(role, sizeof role, "%s_intruder", db.name);
    long long version = th_scalar(db.conn, "SELECT max(version) FROM skipq.schema_migrations");

    /* A function planted through a CREATE grant, the grant since revoked. */
    th_execf(db.conn, "GRANT USAGE, CREATE ON SCHEMA skipq TO %s; SET ROLE %s;"
                      "CREATE FUNCTION skipq.valid_run_at(timestamptz) RETURNS boolean LANGUAGE sql AS 'SELECT true';"
                      "RESET ROLE; REVOKE CREATE ON SCHEMA skipq FROM %s",
             role, role, role);
    cr_expect_eq(migrate_cli(&db, NULL, &err), 1);
    snprintf(want, sizeof want, "function skipq.valid_run_at(timestamp with time zone) is owned by role \"%s\"", role);
    cr_expect_not_null(strstr(err, want), "%s", err);
    free(err);
    th_execf(db.conn, "DROP FUNCTION skipq.valid_run_at(timestamptz)");

    /* A table of skipq's given away. */
    th_execf(db.conn, "ALTER TABLE skipq.settings OWNER TO %s", role);
    cr_expect_eq(migrate_cli(&db, NULL, &err), 1);
    snprintf(want, sizeof want, "table skipq.settings is owned by role \"%s\"", role);
    cr_expect_not_null(strstr(err, want), "%s", err);
    free(err);
    th_execf(db.conn, "ALTER TABLE skipq.settings OWNER TO CURRENT_USER");

    /* A trigger on a table of skipq's that calls another role's function. */
    th_execf(db.conn, "GRANT CREATE ON SCHEMA public TO %s", role);
    th_execf(db.conn, "SET ROLE %s; CREATE FUNCTION public.%s_watch() RETURNS trigger LANGUAGE plpgsql"
                      " AS $$BEGIN RETURN NEW; END$$; RESET ROLE;"
                      "CREATE TRIGGER watch BEFORE INSERT ON skipq.jobs FOR EACH ROW EXECUTE FUNCTION public.%s_watch()",
             role, db.name, db.name);
    cr_expect_eq(migrate_cli(&db, NULL, &err), 1);
    snprintf(want, sizeof want, "trigger watch on table skipq.jobs (it calls function public.%s_watch()) is owned by",
             db.name);
    cr_expect_not_null(strstr(err, want), "%s", err);
    free(err);
    th_execf(db.conn, "DROP TRIGGER watch ON skipq.jobs");

    /* The right to create in the schema, granted to another role. */
    th_execf(db.conn, "GRANT CREATE ON SCHEMA skipq TO %s", role);
    cr_expect_eq(migrate_cli(&db, NULL, &err), 1);
    snprintf(want, sizeof want, "the right to create objects in schema skipq is owned by role \"%s\"", role);
    cr_expect_not_null(strstr(err, want), "%s", err);
    free(err);
    th_execf(db.conn, "REVOKE CREATE ON SCHEMA skipq FROM %s", role);

    /* Nothing left of the intruder's: migrate goes through again. */
    cr_expect_eq(migrate_cli(&db, NULL, &err), 0, "%s", err);
    free(err);
    cr_expect_eq(th_scalar(db.conn, "SELECT max(version) FROM skipq.schema_migrations"), version);
}

/*
 * The setup the README recommends: a NOLOGIN owner role, granted to the
 * deployer, who migrates as it (options '-c role=...', which skipq keeps).
 * Its members may migrate again; a superuser that is not one is refused
 * until it is made one.
 */
Test(security_migrate, a_dedicated_owner_role_migrates_and_its_members_may_migrate_again, .timeout = 60)
{
    struct th_db db;
    bare_db(&db);
    const char *const who[] = {"owner", "deployer", NULL};
    roles(db.name, true, who);
    char owner[96], deployer[96], as_owner[300], *err = NULL;
    snprintf(owner, sizeof owner, "%s_owner", db.name);
    snprintf(deployer, sizeof deployer, "%s_deployer", db.name);
    th_execf(db.conn, "GRANT CREATE ON DATABASE %s TO %s; GRANT %s TO %s", db.name, owner, owner, deployer);

    snprintf(as_owner, sizeof as_owner, "user=%s options='-c role=%s'", deployer, owner);
    cr_expect_eq(migrate_cli(&db, as_owner, &err), 0, "migrate as the owner role: %s", err);
    free(err);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM pg_namespace WHERE nspname = 'skipq'"
                                     " AND nspowner = '%s'::regrole",
                            owner),
                 1);
    cr_expect_eq(th_scalarf(db.conn, "SELECT count(*) FROM pg_class WHERE relnamespace = 'skipq'::regnamespace"
                                     " AND relowner <> '%s'::regrole",
                            owner),
                 0, "every table of skipq's belongs to the owner role");

    /* The deployer, a member, may run it as itself: nothing to apply. */
    char as_deployer[200];
    snprintf(as_deployer, sizeof as_deployer, "user=%s", deployer);
    cr_expect_eq(migrate_cli(&db, as_deployer, &err), 0, "migrate as a member of the owner: %s", err);
    free(err);

    /* A superuser that is not a member is refused, then accepted once it is. */
    cr_expect_eq(migrate_cli(&db, NULL, &err), 1, "a superuser trusted a schema of a role it is not a member of");
    char want[200];
    snprintf(want, sizeof want, "schema skipq is owned by role \"%s\"", owner);
    cr_expect_not_null(strstr(err, want), "%s", err);
    free(err);
    th_execf(db.conn, "GRANT %s TO CURRENT_USER", owner);
    cr_expect_eq(migrate_cli(&db, NULL, &err), 0, "%s", err);
    free(err);
    th_execf(db.conn, "REVOKE %s FROM CURRENT_USER", owner);

    /* And the schema works: a job in, through the definer functions. */
    th_execf(db.conn, "SELECT skipq.enqueue('test', '{}')");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 1);
}

/* A schema and objects a superuser owns are trusted by any migrating role. */
Test(security_migrate, the_normal_path_and_a_rerun_still_work, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    char *err = NULL;
    cr_expect_eq(migrate_cli(&db, NULL, &err), 0, "%s", err);
    free(err);
    cr_expect_eq(migrate_cli(&db, NULL, &err), 0, "%s", err);
    free(err);
}
