/* pause.h -- paused queues and kinds (skipq.paused) on a host: what its thread groups may claim. */
#ifndef SQ_PAUSE_H
#define SQ_PAUSE_H

#include <libpq-fe.h>
#include <stdbool.h>
#include <stddef.h>

struct sq_group;
struct sq_host;

/*
 * Read skipq.paused and bring every group up to date: a paused queue, or a
 * group whose every kind is paused, claims nothing; otherwise the group
 * claims the kinds that are not paused. A group that may claim more than
 * before is woken. On the heartbeat thread (and once at start, before the
 * workers). False with err on a failed read: nothing changes.
 */
bool sq_pause_refresh(struct sq_host *h, PGconn *conn, char *err, size_t errlen);

/* A worker's copy of what its group claims (NULL: every kind of the group). */
struct sq_claim_kinds {
    unsigned long gen;
    char *kinds;  /* text[] literal */
    char *leases; /* int8[] literal */
};

/*
 * Whether the group claims anything now; if it does, `mine` holds the
 * kinds to claim (copied again only when they changed). Two atomic loads
 * on the usual path.
 */
bool sq_pause_claims(struct sq_host *h, struct sq_group *g, struct sq_claim_kinds *mine);
void sq_claim_kinds_free(struct sq_claim_kinds *mine);

/* At exit: the groups' claim arrays. */
void sq_pause_free(struct sq_host *h);

#endif
