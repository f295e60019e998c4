/* wake.h -- idle threads: their waits, and what ends them (new jobs, due times, shutdown). */
#ifndef SQ_WAKE_H
#define SQ_WAKE_H

#include <stdint.h>

struct sq_group;
struct sq_host;

/* Sleep up to ms, or until the host is stopping / the group is woken / the
 * group's first due time comes (g may be NULL: only stopping wakes). */
void sq_host_wait(struct sq_host *h, struct sq_group *g, unsigned long seen_gen, int64_t ms);
/* Wake the idle threads of every group serving `queue` (NULL: all). */
void sq_host_wake(struct sq_host *h, const char *queue);
/* Jobs of `queue` (or of group g) fall due at monotonic ms `at`. */
void sq_host_due(struct sq_host *h, const char *queue, int64_t at);
void sq_group_due(struct sq_host *h, struct sq_group *g, int64_t at);
/* Wake everything: shutdown. */
void sq_host_stop(struct sq_host *h);

#endif
