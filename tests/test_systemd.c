/*
 * test_systemd.c -- the host under a pretend systemd: the test owns the
 * notify socket ($NOTIFY_SOCKET, an AF_UNIX datagram socket) and reads what
 * the host says on it: READY=1 once its threads are connected, WATCHDOG=1
 * while they make progress (and not while they are stuck in a database
 * call), STOPPING=1 on SIGTERM.
 */
#include <criterion/criterion.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "harness.h"

struct notify_sock {
    int fd;
    char path[108];
};

static void notify_open(struct notify_sock *s)
{
    s->fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(s->fd, 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(s->path, sizeof s->path, "%s/notify.sock", th_tmpdir());
    cr_assert_lt(strlen(s->path), sizeof a.sun_path);
    strcpy(a.sun_path, s->path);
    unlink(s->path);
    cr_assert_eq(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
}

/* Start a host that sees the socket (and a watchdog of wd_usec, 0: none). */
static pid_t start_notified(const char *ini, const struct notify_sock *s, const char *wd_usec)
{
    setenv("NOTIFY_SOCKET", s->path, 1);
    if (wd_usec)
        setenv("WATCHDOG_USEC", wd_usec, 1);
    pid_t pid = th_host_start(ini);
    unsetenv("NOTIFY_SOCKET");
    unsetenv("WATCHDOG_USEC");
    return pid;
}

/*
 * Read datagrams until one contains a line equal to `want` (or starting
 * with it, for "STATUS=") or timeout_ms passes. Every message read is
 * appended to `seen` (may be NULL). Returns whether it came.
 */
static bool notify_wait(const struct notify_sock *s, const char *want, int timeout_ms, char *seen, size_t seenlen)
{
    int64_t end = th_now_ms() + timeout_ms;
    for (;;) {
        int64_t left = end - th_now_ms();
        if (left <= 0)
            return false;
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (poll(&p, 1, (int)left) <= 0)
            continue;
        char buf[1024];
        ssize_t n = recv(s->fd, buf, sizeof buf - 1, 0);
        if (n <= 0)
            continue;
        buf[n] = '\0';
        if (seen && strlen(seen) + (size_t)n + 2 < seenlen) {
            strcat(seen, buf);
            strcat(seen, "|");
        }
        for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
            if (strncmp(line, want, strlen(want)) == 0)
                return true;
    }
}

Test(systemd, ready_watchdog_and_stopping, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    struct notify_sock s;
    notify_open(&s);
    char *ini = th_host_ini(&db, "notified", NULL, NULL, "[queue default]\nthreads = 2\n");
    pid_t pid = start_notified(ini, &s, "600000");
    static char seen[1 << 16];
    cr_assert(notify_wait(&s, "READY=1", 30000, seen, sizeof seen), "no READY=1; got: %s", seen);
    /* READY=1 means every thread is connected: work goes through at once. */
    char *log = th_host_log(ini);
    cr_expect(strstr(log, "ready: every thread is connected") != NULL, "%s", log);
    free(log);
    cr_expect(strstr(seen, "STATUS=") != NULL, "no STATUS= line before READY=1: %s", seen);
    th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    cr_expect_eq(th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 1);
    /* A 600ms watchdog is fed again and again while all is well. */
    for (int i = 0; i < 5; i++)
        cr_assert(notify_wait(&s, "WATCHDOG=1", 10000, NULL, 0), "WATCHDOG=1 number %d never came", i + 1);

    kill(pid, SIGTERM);
    seen[0] = '\0';
    cr_expect(notify_wait(&s, "STOPPING=1", 10000, seen, sizeof seen), "no STOPPING=1 after SIGTERM: %s", seen);
    cr_expect_eq(th_wait_exit(pid, 20000), 0);
    th_assert_clean_log(ini);
    close(s.fd);
}

Test(systemd, a_stuck_database_call_starves_the_watchdog, .timeout = 120)
{
    struct th_db db;
    th_db_new(&db);
    struct notify_sock s;
    notify_open(&s);
    char *ini = th_host_ini(&db, "stuck", NULL, NULL, "[queue default]\nthreads = 2\n");
    pid_t pid = start_notified(ini, &s, "1000000");
    cr_assert(notify_wait(&s, "READY=1", 30000, NULL, 0));
    cr_assert(notify_wait(&s, "WATCHDOG=1", 10000, NULL, 0));

    /* Every claim (and the heartbeat's lease statement) now waits on the
     * table lock: the threads are stuck in database calls. */
    PGconn *locker = th_connect(&db);
    PQclear(th_query(locker, "BEGIN"));
    PQclear(th_query(locker, "LOCK TABLE skipq.jobs IN ACCESS EXCLUSIVE MODE"));
    static char seen[1 << 16];
    cr_assert(notify_wait(&s, "STATUS=stuck", 20000, seen, sizeof seen), "never reported stuck: %s", seen);
    /* Starved: no WATCHDOG=1 while the lock is held. */
    seen[0] = '\0';
    cr_expect(!notify_wait(&s, "WATCHDOG=1", 1500, seen, sizeof seen), "fed while stuck: %s", seen);
    char *log = th_host_log(ini);
    cr_expect(strstr(log, "watchdog: not feeding systemd's watchdog:") != NULL, "%s", log);
    free(log);

    PQclear(th_query(locker, "COMMIT"));
    cr_expect(notify_wait(&s, "WATCHDOG=1", 20000, NULL, 0), "not fed again after the lock was released");
    PQfinish(locker);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    log = th_host_log(ini);
    cr_expect(strstr(log, "watchdog: the threads make progress again") != NULL, "%s", log);
    free(log);
    th_assert_clean_log(ini);
    close(s.fd);
}

Test(systemd, without_notify_socket_nothing_changes, .timeout = 60)
{
    struct th_db db;
    th_db_new(&db);
    unsetenv("NOTIFY_SOCKET");
    char *ini = th_host_ini(&db, "plain", NULL, NULL, "[queue default]\n");
    pid_t pid = th_host_start(ini);
    th_enqueue(db.conn, "test", "{}", NULL, 0, 0);
    cr_expect_eq(th_wait_scalar(db.conn, 1, 20000, "SELECT count(*) FROM skipq.jobs WHERE status = 'done'"), 1);
    cr_expect_eq(th_host_stop(pid, 15000), 0);
    char *log = th_host_log(ini);
    cr_expect_null(strstr(log, "watchdog"), "%s", log);
    cr_expect_null(strstr(log, "ERROR"), "%s", log);
    free(log);
}
