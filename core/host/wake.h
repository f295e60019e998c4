/* wake.h -- idle threads: their waits, and what ends them (new jobs, due times, a session back, shutdown). */
#ifndef SQ_WAKE_H
#define SQ_WAKE_H

#include <stdbool.h>
#include <stdint.h>

struct sq_group;
struct sq_host;
struct sq_worker;

/* Sleep up to ms, or until the host is stopping / the group is woken / the
 * group's first due time comes (g may be NULL: only stopping wakes). */
void sq_host_wait(struct sq_host *h, struct sq_group *g, unsigned long seen_gen, int64_t ms);
/* sq_host_wait for worker w's thread, in w's group: it also ends when an
 * enqueue hands w a job (sq_host_handed). */
void sq_worker_wait(struct sq_worker *w, unsigned long seen_gen, int64_t ms);
/* The listener heard that an enqueue handed job `id` to the worker named
 * `ident`: if it is a thread of this host, it wakes to run it. */
void sq_host_handed(struct sq_host *h, const char *ident, int64_t id);
/* Such notifications may have been missed (the listener was away): every
 * thread looks for jobs handed to it by its name when it next wakes. */
void sq_host_handed_lost(struct sq_host *h);
/* Take what the listener heard for w: up to SQ_HANDED_MAX ids into `ids`
 * (the count is returned) and, in *lost, whether some went unheard. */
int sq_worker_take_handed(struct sq_worker *w, int64_t *ids, bool *lost);
/* Wake the idle threads of every group serving `queue` (NULL: all). */
void sq_host_wake(struct sq_host *h, const char *queue);
/* Jobs of `queue` (or of group g) fall due at monotonic ms `at`. */
void sq_host_due(struct sq_host *h, const char *queue, int64_t at);
void sq_group_due(struct sq_host *h, struct sq_group *g, int64_t at);
/* A session of the host (a worker's, the heartbeat's, the listener's) was
 * made again: the threads waiting to reconnect try at once. */
void sq_host_reconnected(struct sq_host *h);
/* How many times that happened: read before a connection attempt, and
 * hand it to sq_host_wait_reconnect after the attempt failed. */
unsigned long sq_host_reconnect_gen(struct sq_host *h);
/* Sleep up to ms, or until another session of the host reconnects after
 * `seen`, or (with until_stop) the host is stopping. */
void sq_host_wait_reconnect(struct sq_host *h, unsigned long seen, int64_t ms, bool until_stop);
/* The wait before the next attempt: a random 0.5-1.0 of *step, which then
 * doubles up to SQ_RECONNECT_MAX_MS. */
int64_t sq_reconnect_backoff(int64_t *step, uint32_t *seed);
/* Wake everything: shutdown. */
void sq_host_stop(struct sq_host *h);

#endif
