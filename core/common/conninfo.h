/* conninfo.h -- connection strings (URIs and keyword=value lists) checked,
 * searched for passwords and kept out of messages. */
#ifndef SQ_CONNINFO_H
#define SQ_CONNINFO_H

#include <stdbool.h>
#include <stddef.h>

/* Does libpq read s as a connection string (a postgres:// or postgresql://
 * URI, or keyword=value pairs) rather than as a plain database name? */
bool sq_conninfo_is_string(const char *s);

/*
 * Check a value libpq would take as a connection string (the --db flag, a
 * [database] url, $DATABASE_URL, listen_conninfo). False with a message in
 * err that says what is wrong and never quotes s: libpq's own messages
 * quote their input, which is often a password ("invalid percent-encoded
 * token: \"pa%zzss\""). Beyond libpq's parse it refuses what libpq would
 * read in a way that puts part of a password in a later message: an '@'
 * after a URI's user information (an unencoded '@' or '/' in a password),
 * and text that looks like a URI but is not one (it would be taken as a
 * database name, which the server repeats).
 */
bool sq_conninfo_check(const char *s, char *err, size_t errlen);

/* A byte range [start, start + len) of a connection string. */
struct sq_span {
    size_t start, len;
};

/* The passwords s holds -- a URI's user-information password, a URI
 * ?password= parameter, a password= keyword -- as up to `max` spans;
 * returns how many there are. */
size_t sq_conninfo_passwords(const char *s, struct sq_span *spans, size_t max);

/* Replace every occurrence of `secret` (when at least 4 bytes long) in
 * msg with "***", in place. */
void sq_redact(char *msg, const char *secret);

#endif
