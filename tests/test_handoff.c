/*
 * test_handoff.c -- an idle thread takes a new job from the enqueue itself
 * (sql/060_handoff.sql, core/host/handoff.c).
 *
 * What users rely on: a job enqueued while a thread waits is claimed by
 * the enqueue's own transaction as it commits, with its audit row, and so
 * is undone with it;
 * the claim's rules still hold (ordering keys, limits, pauses, run_at,
 * dependencies, priority); a job whose transaction stayed open runs once,
 * on a lease that has not run out; and a hand-over whose notification
 * never arrived runs long before its lease ends. Each job runs once.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

static const char DONE_SQL[] = "SELECT count(*) FROM skipq.jobs WHERE status = 'done'";
static const char WAITING_SQL[] = "SELECT count(*) FROM skipq.waiting WHERE until > clock_timestamp()";

/* A host of `threads` threads, each registered as waiting. Its threads
 * poll every 5 s unless `poll` says otherwise, so they keep their
 * registrations without touching them while a test looks (a refresh holds
 * a row for a moment, and an enqueue passes over a row that is held). */
static void start_waiting(struct th_db *db, struct host *h, const char *ledger, int threads, const char *extra,
                          const char *poll)
{
    char body[512], host_extra[64];
    snprintf(body, sizeof body, "[queue default]\nthreads = %d\n%s", threads, extra ? extra : "");
    snprintf(host_extra, sizeof host_extra, "poll_interval = %s\n", poll ? poll : "5s");
    h->ini = th_host_ini(db, h->name, host_extra, ledger, body);
    host_start(h);
    struct host *hs[] = {h};
    cr_assert_eq(th_wait_at_least(db->conn, threads, 30000, 20, hs, 1, WAITING_SQL), threads,
                 "the host's %d idle threads did not register as waiting", threads);
}

/* The test's one job is done and its handler ran once; the host stops
 * cleanly and leaves the tables as they must be. */
static void one_job_ran_once(struct th_db *db, struct host *h, const char *ledger, const char *what)
{
    struct host *hs[] = {h};
    cr_assert_eq(th_wait_at_least(db->conn, 1, 30000, 20, hs, 1, DONE_SQL), 1, "%s", what);
    cr_expect(th_wait_ledger(ledger, 1, 5000));
    cr_expect_eq(th_read_ledger(ledger, NULL), 1, "the job ran more than once");
    cr_expect_eq(host_stop(h, 15000), 0);
    th_check_invariants(db->conn);
}

static long long status_is(PGconn *c, long long id, const char *status)
{
    return th_scalarf(c, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = '%s'", id, status);
}

static long long enqueue_sql(PGconn *c, const char *args)
{
    return th_scalarf(c, "SELECT skipq.enqueue(%s)", args);
}

/* The hand-over happens as the enqueue commits (a deferred trigger); SET
 * CONSTRAINTS fires it early, so a test can look at it before the commit
 * (and defers it again for what the transaction does next). */
static void hand_over_now(PGconn *c)
{
    th_execf(c, "SET CONSTRAINTS skipq.handoffs_at_commit IMMEDIATE");
    th_execf(c, "SET CONSTRAINTS skipq.handoffs_at_commit DEFERRED");
}

Test(handoff, an_idle_thread_takes_the_job_as_its_enqueue_commits, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    const char *ledger = th_tmp_path("handoff1.ledger");
    struct host h = {.name = "handoff1"};
    start_waiting(&db, &h, ledger, 2, NULL, NULL);
    PGconn *app = th_connect(&db);
    th_execf(app, "BEGIN");
    long long id = enqueue_sql(app, "'test'");
    cr_expect_eq(status_is(app, id, "pending"), 1, "the job was claimed before its transaction ended");
    hand_over_now(app);
    /* Claimed, with its attempt recorded, by one of the host's threads,
     * whose registration is taken; nobody else sees any of it yet. */
    cr_expect_eq(th_scalarf(app, "SELECT count(*) FROM skipq.jobs j JOIN skipq.job_executions e"
                                 "  ON e.id = j.current_execution_id AND e.job_id = j.id"
                                 " WHERE j.id = %lld AND j.status = 'running' AND j.attempts = 1 AND e.attempt = 1"
                                 "   AND e.status = 'running' AND e.worker = j.locked_by"
                                 "   AND j.locked_by LIKE 'handoff1:%%' AND j.lease_expires_at > now()",
                                 id),
                 1, "the hand-over is not a claim: status, attempt, audit row, worker or lease is missing");
    cr_expect_eq(th_scalar(app, WAITING_SQL), 1, "the thread is still registered");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 0);
    th_execf(app, "COMMIT");
    struct host *hs[] = {&h};
    cr_assert_eq(th_wait_at_least(db.conn, 1, 30000, 20, hs, 1, DONE_SQL), 1, "the handed job never finished");
    cr_expect(th_wait_ledger(ledger, 1, 5000));
    cr_expect_eq(th_read_ledger(ledger, NULL), 1, "the handed job ran more than once");
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.job_executions"), 1);
    /* Idle again, both threads wait for the next one. */
    cr_expect_eq(th_wait_at_least(db.conn, 2, 30000, 20, hs, 1, WAITING_SQL), 2);
    PQfinish(app);
    cr_expect_eq(host_stop(&h, 15000), 0);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.waiting"), 0, "a stopped host left registrations");
    th_check_invariants(db.conn);
    th_assert_clean_log(h.ini);
}

Test(handoff, a_rolled_back_enqueue_hands_nothing_over, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    const char *ledger = th_tmp_path("handoff2.ledger");
    struct host h = {.name = "handoff2"};
    start_waiting(&db, &h, ledger, 1, NULL, NULL);
    PGconn *app = th_connect(&db);
    th_execf(app, "BEGIN");
    long long id = enqueue_sql(app, "'test'");
    hand_over_now(app);
    cr_expect_eq(status_is(app, id, "running"), 1);
    th_execf(app, "ROLLBACK");
    /* The claim went with the enqueue: no job, no attempt, and the thread
     * still registered (it waits for the next job, not for this one). */
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.jobs"), 0);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.job_executions"), 0);
    cr_expect_eq(th_scalar(db.conn, WAITING_SQL), 1);
    long long id2 = enqueue_sql(app, "'test'");
    struct host *hs[] = {&h};
    cr_assert_eq(th_wait_at_least(db.conn, 1, 30000, 20, hs, 1, DONE_SQL), 1);
    cr_expect_eq(status_is(db.conn, id2, "done"), 1);
    cr_expect(th_wait_ledger(ledger, 1, 5000));
    cr_expect_eq(th_read_ledger(ledger, NULL), 1);
    PQfinish(app);
    cr_expect_eq(host_stop(&h, 15000), 0);
    th_check_invariants(db.conn);
}

Test(handoff, jobs_the_claim_must_judge_are_left_to_it, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    struct host h = {.name = "handoff3"};
    start_waiting(&db, &h, NULL, 2, NULL, NULL);
    PGconn *app = th_connect(&db);
    th_execf(app, "BEGIN");
    long long keyed = enqueue_sql(app, "'test', ordering_key => 'k1'");
    long long later = enqueue_sql(app, "'test', run_at => now() + interval '1 hour'");
    long long child = th_scalarf(app, "SELECT skipq.enqueue('test', depends_on => ARRAY[%lld]::bigint[])", later);
    th_execf(app, "INSERT INTO skipq.kind_limits (kind, max_running) VALUES ('test', 5)");
    long long limited = enqueue_sql(app, "'test'");
    th_execf(app, "DELETE FROM skipq.kind_limits");
    th_execf(app, "INSERT INTO skipq.paused (scope, name, paused_by) VALUES ('kind', 'test', 'test')");
    long long paused_kind = enqueue_sql(app, "'test'");
    th_execf(app, "UPDATE skipq.paused SET scope = 'queue', name = 'default'");
    long long paused_queue = enqueue_sql(app, "'test'");
    th_execf(app, "DELETE FROM skipq.paused");
    long long other_queue = enqueue_sql(app, "'test', queue => 'elsewhere'");
    long long other_kind = enqueue_sql(app, "'not.served'");
    hand_over_now(app);
    cr_expect_eq(status_is(app, keyed, "pending"), 1, "a job with an ordering key was handed over");
    cr_expect_eq(status_is(app, later, "pending"), 1, "a delayed job was handed over");
    cr_expect_eq(status_is(app, child, "blocked"), 1, "a job waiting for its parent was handed over");
    cr_expect_eq(status_is(app, limited, "pending"), 1, "a job of a limited kind was handed over");
    cr_expect_eq(status_is(app, paused_kind, "pending"), 1, "a job of a paused kind was handed over");
    cr_expect_eq(status_is(app, paused_queue, "pending"), 1, "a job of a paused queue was handed over");
    cr_expect_eq(status_is(app, other_queue, "pending"), 1,
                 "a job of a queue the threads do not serve was handed over");
    cr_expect_eq(status_is(app, other_kind, "pending"), 1, "a job of a kind the threads do not run was handed over");
    /* Chosen by its insert, but its kind paused before the commit. */
    long long then_paused = enqueue_sql(app, "'test'");
    th_execf(app, "INSERT INTO skipq.paused (scope, name, paused_by) VALUES ('kind', 'test', 'test')");
    hand_over_now(app);
    cr_expect_eq(status_is(app, then_paused, "pending"), 1,
                 "a job whose kind was paused before the commit was handed over");
    th_execf(app, "DELETE FROM skipq.paused");
    /* One statement of three: the two best go to the two waiting threads,
     * the third waits for a claim. */
    th_execf(app, "SELECT skipq.enqueue_many('[{\"kind\": \"test\", \"priority\": 1, \"payload\": {\"n\": 1}},"
                  " {\"kind\": \"test\", \"priority\": 5, \"payload\": {\"n\": 5}},"
                  " {\"kind\": \"test\", \"priority\": 3, \"payload\": {\"n\": 3}}]'::jsonb)");
    hand_over_now(app);
    char *running = th_textf(app, "SELECT string_agg(priority::text, ',' ORDER BY priority) FROM skipq.jobs"
                                  " WHERE status = 'running'");
    cr_expect_str_eq(running, "3,5", "the hand-over did not take the best jobs of the statement (%lld waiting)",
                     th_scalar(app, WAITING_SQL));
    free(running);
    th_execf(app, "ROLLBACK");
    PQfinish(app);
    cr_expect_eq(host_stop(&h, 15000), 0);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.job_executions"), 0);
}

Test(handoff, a_job_whose_enqueue_stayed_open_past_its_lease_runs_once, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    const char *ledger = th_tmp_path("handoff4.ledger");
    struct host h = {.name = "handoff4"};
    start_waiting(&db, &h, ledger, 1, NULL, NULL);
    PGconn *app = th_connect(&db);
    th_execf(app, "BEGIN");
    /* The lease is 3 s: hold the transaction longer. The lease counts from
     * the commit, so no sweep takes the job from its handler. */
    long long id = enqueue_sql(app, "'test', '{\"sleep_ms\": 1000}'");
    usleep(4000 * 1000);
    th_execf(app, "COMMIT");
    PQfinish(app);
    one_job_ran_once(&db, &h, ledger, "the handed job never finished");
    cr_expect_eq(status_is(db.conn, id, "done"), 1);
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.job_executions"), 1,
                 "the lease had run out at the commit: the job was taken from its thread");
}

Test(handoff, a_hand_over_nobody_announced_runs_long_before_its_lease_ends, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    const char *ledger = th_tmp_path("handoff5.ledger");
    struct host h = {.name = "handoff5"};
    start_waiting(&db, &h, ledger, 1, "\n[kind test]\nlease = 10min\n", "200ms");
    /* What an enqueue does, without the notification: the job is claimed
     * for the waiting thread, whose registration is taken. Only its next look at its
     * registration can tell it. */
    PGconn *c = db.conn;
    long long id = enqueue_sql(c, "'test', run_at => now() + interval '1 hour'");
    th_execf(c, "BEGIN");
    char *worker = th_textf(c, "SELECT worker FROM skipq.waiting");
    cr_assert_not_null(worker);
    th_execf(c, "INSERT INTO skipq.job_executions (job_id, attempt, worker, started_at)"
                " VALUES (%lld, 1, '%s', clock_timestamp())", id, worker);
    th_execf(c, "UPDATE skipq.jobs SET status = 'running', attempts = 1, locked_by = '%s',"
                " current_execution_id = (SELECT max(id) FROM skipq.job_executions),"
                " lease_expires_at = clock_timestamp() + interval '10 minutes' WHERE id = %lld",
             worker, id);
    th_execf(c, "UPDATE skipq.waiting SET until = '-infinity'");
    th_execf(c, "COMMIT");
    free(worker);
    int64_t t0 = th_now_ms();
    struct host *hs[] = {&h};
    cr_assert_eq(th_wait_at_least(c, 1, 30000, 20, hs, 1, DONE_SQL), 1,
                 "a hand-over with no notification waited for its lease (10 min)");
    fprintf(stderr, "[handoff] unannounced hand-over ran after %lld ms\n", (long long)(th_now_ms() - t0));
    cr_expect_eq(th_scalar(c, "SELECT count(*) FROM skipq.job_executions"), 1);
    cr_expect(th_wait_ledger(ledger, 1, 5000));
    cr_expect_eq(th_read_ledger(ledger, NULL), 1);
    cr_expect_eq(host_stop(&h, 15000), 0);
    th_check_invariants(c);
}

Test(handoff, a_stopping_host_gives_back_what_was_handed_to_it_unread, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    struct host h = {.name = "handoff6"};
    start_waiting(&db, &h, NULL, 1, "\n[kind test]\nlease = 10min\n", NULL);
    /* Freeze the host, hand it a job, and stop it: its thread must not
     * leave the job running for no one until the lease (10 min) ends. */
    th_host_signal_all(h.pid, SIGSTOP);
    long long id = enqueue_sql(db.conn, "'test'");
    cr_expect_eq(status_is(db.conn, id, "running"), 1, "the frozen host's registration was not used");
    kill(h.pid, SIGTERM);
    th_host_signal_all(h.pid, SIGCONT);
    cr_expect_eq(host_wait_exit(&h, 15000), 0);
    /* Either it ran the job before it saw the stop, or it gave it back
     * uncharged, pending at once. */
    long long done = status_is(db.conn, id, "done");
    long long back = th_scalarf(db.conn, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'pending'"
                                         " AND lease_expires_at IS NULL AND max_attempts = 6",
                                id);
    cr_expect_eq(done + back, 1, "the handed job was left running (or lost) by a stopping host");
    th_check_invariants(db.conn);
}

/* skipq.waiter_set(ARGS): its SQLSTATE ("" when it worked). */
static const char *set_state(PGconn *c, const char *args)
{
    char sql[300];
    snprintf(sql, sizeof sql, "SELECT skipq.waiter_set(%s)", args);
    return th_sqlstate(c, sql);
}

/* Expect skipq.waiter_set(ARGS) to answer `want`. */
static void set_answers(PGconn *c, const char *want, const char *args)
{
    th_expect_text(c, want, "SELECT answer FROM skipq.waiter_set(%s)", args);
}

Test(handoff, a_registration_past_its_term_or_of_a_host_that_stopped_beating_gets_nothing, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn;
    th_execf(c, "SELECT skipq.host_beat('gone:1', 'gone', 'h', 1, 'v', 1, '{default/test}', 60000, true)");
    /* A thread of a host that died: its row lapses on its own. */
    set_answers(c, "new", "'gone:1:w0', 'gone:1', 'default', '{test}', '{30000}', 1");
    usleep(50 * 1000);
    long long id = enqueue_sql(c, "'test'");
    cr_expect_eq(status_is(c, id, "pending"), 1, "a job was handed to a registration past its term");
    set_answers(c, "kept", "'gone:1:w0', 'gone:1', 'default', '{test}', '{30000}', 60000");
    long long id2 = enqueue_sql(c, "'test'");
    cr_expect_eq(status_is(c, id2, "running"), 1, "a fresh registration got nothing");
    /* A registration of a host that stopped beating, fresh as it is. */
    set_answers(c, "new", "'gone:1:w0', 'gone:1', 'default', '{test}', '{30000}', 60000");
    th_execf(c, "UPDATE skipq.hosts SET heartbeat_at = now() - interval '1 hour'");
    long long id3 = enqueue_sql(c, "'test'");
    cr_expect_eq(status_is(c, id3, "pending"), 1, "a job was handed to a host that stopped beating");
    th_expect_text(c, "removed", "SELECT skipq.waiter_unset('gone:1:w0', false)");
    /* What a registration must hold is refused by name. */
    cr_expect_str_eq(set_state(c, "'w:1:w0', 'w:1', 'default', '{test}', '{30000}', 0"), "22023");
    cr_expect_str_eq(set_state(c, "'w:1:w0', 'w:1', 'default', '{test}', '{0}', 1000"), "22023");
    cr_expect_str_eq(set_state(c, "'w:1:w0', 'w:1', 'default', '{test}', '{10000000000000000}', 1000"), "22023");
    cr_expect_str_eq(set_state(c, "'w:1:w0', 'w:1', 'default', '{test}', '[2:2]={1000}', 1000"), "22023");
    cr_expect_str_eq(set_state(c, "'w:1:w0', 'w:1', 'default', '{NULL}', '{1000}', 1000"), "22023");
    cr_expect_str_eq(set_state(c, "'w:1:w0', 'w:1', 'default', '{a,b}', '{1000}', 1000"), "23514");
    cr_expect_str_eq(set_state(c, "'', '', 'default', '{test}', '{1000}', 1000"), "23514");
    cr_expect_str_eq(set_state(c, "'w:1:w0', 'x:2', 'default', '{test}', '{1000}', 1000"), "23514");
}

Test(handoff, a_thread_taking_its_registration_back_learns_of_a_hand_over_committing_meanwhile, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    PGconn *c = db.conn, *app = th_connect(&db);
    th_execf(c, "SELECT skipq.host_beat('h:1', 'h', 'h', 1, 'v', 1, '{default/test}', 60000, true)");
    set_answers(c, "new", "'h:1:w0', 'h:1', 'default', '{test}', '{30000}', 60000");
    th_execf(app, "BEGIN");
    long long id = enqueue_sql(app, "'test'");
    hand_over_now(app); /* the commit's hand-over, holding the row until the commit ends */
    /* Without waiting, the thread is told the row is held... */
    th_expect_text(c, "busy", "SELECT skipq.waiter_unset('h:1:w0', false)");
    /* ...and waiting, it sees what the commit did. */
    PGconn *later = th_connect(&db);
    cr_assert_eq(PQsendQuery(later, "SELECT skipq.waiter_unset('h:1:w0', true)"), 1);
    usleep(200 * 1000);
    th_execf(app, "COMMIT");
    PGresult *r = PQgetResult(later);
    cr_assert_eq(PQresultStatus(r), PGRES_TUPLES_OK, "%s", PQerrorMessage(later));
    cr_expect_str_eq(PQgetvalue(r, 0, 0), "gone", "the hand-over committed while the thread waited");
    PQclear(r);
    while ((r = PQgetResult(later)) != NULL)
        PQclear(r);
    cr_expect_eq(th_scalarf(c, "SELECT count(*) FROM skipq.jobs WHERE id = %lld AND status = 'running'"
                               " AND locked_by = 'h:1:w0'",
                            id),
                 1);
    /* A rolled-back hand-over leaves the row: the thread removes it. */
    set_answers(c, "new", "'h:1:w0', 'h:1', 'default', '{test}', '{30000}', 60000");
    th_execf(app, "BEGIN");
    enqueue_sql(app, "'test'");
    hand_over_now(app);
    cr_assert_eq(PQsendQuery(later, "SELECT skipq.waiter_unset('h:1:w0', true)"), 1);
    usleep(200 * 1000);
    th_execf(app, "ROLLBACK");
    r = PQgetResult(later);
    cr_expect_str_eq(PQgetvalue(r, 0, 0), "removed");
    PQclear(r);
    while ((r = PQgetResult(later)) != NULL)
        PQclear(r);
    PQfinish(later);
    PQfinish(app);
}

Test(handoff, an_enqueue_above_read_committed_is_left_to_the_claim, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    const char *ledger = th_tmp_path("handoff8.ledger");
    struct host h = {.name = "handoff8"};
    start_waiting(&db, &h, ledger, 1, NULL, NULL);
    PGconn *app = th_connect(&db);
    /* Its commit could not take a waiter row changed since its snapshot
     * (each beat changes them) without failing: it hands nothing over. */
    th_execf(app, "BEGIN ISOLATION LEVEL REPEATABLE READ");
    long long id = enqueue_sql(app, "'test'");
    hand_over_now(app);
    cr_expect_eq(status_is(app, id, "pending"), 1, "a repeatable-read enqueue handed its job over");
    th_execf(db.conn, "UPDATE skipq.waiting SET until = until"); /* as a beat would, meanwhile */
    th_execf(app, "COMMIT");
    PQfinish(app);
    one_job_ran_once(&db, &h, ledger, "the job was not claimed");
}

Test(handoff, handoff_off_leaves_every_job_to_the_claim, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    const char *ledger = th_tmp_path("handoff9.ledger");
    struct host h = {.name = "handoff9"};
    h.ini = th_host_ini(&db, h.name, "handoff = off\n", ledger, "[queue default]\nthreads = 2\n");
    host_start(&h);
    struct host *hs[] = {&h};
    cr_assert_geq(th_wait_at_least(db.conn, 4, 30000, 20, hs, 1,
                                   "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'skipq'"
                                   " AND datname = current_database()"),
                  4, "the host did not connect");
    usleep(300 * 1000); /* idle, and would have registered by now */
    cr_expect_eq(th_scalar(db.conn, "SELECT count(*) FROM skipq.waiting"), 0, "a thread registered with handoff = off");
    PGconn *app = th_connect(&db);
    th_execf(app, "BEGIN");
    long long id = enqueue_sql(app, "'test'");
    hand_over_now(app);
    cr_expect_eq(status_is(app, id, "pending"), 1);
    th_execf(app, "COMMIT");
    PQfinish(app);
    one_job_ran_once(&db, &h, ledger, "the job was not claimed");
}
