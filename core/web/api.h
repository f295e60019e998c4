/* api.h -- the dashboard's JSON API: query arguments checked, database
 * rows turned into JSON (json-c; no JSON text is ever put together by
 * hand), one handler per page. */
#ifndef SQ_WEB_API_H
#define SQ_WEB_API_H

#include <json-c/json.h>
#include <libpq-fe.h>

#include "web/session.h"

/* ---- arguments (api.c) ---- */

/* The query argument `name`, or NULL when absent or empty. */
const char *web_arg(struct web_call *c, const char *name);
/* 400 (and false) when the query holds an argument not in `names`
 * (NULL-terminated), one given twice, or text that is not UTF-8. */
bool web_args_check(struct web_call *c, const char *const *names);
unsigned web_bad(struct web_call *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- rows as JSON (api.c) ---- */

/* One value by its column's type: NULL -> null, booleans, integers,
 * numeric and float8 as numbers (as the server wrote them), json as JSON,
 * timestamptz as ISO 8601 text, anything else as a string. */
json_object *web_value(const PGresult *res, int row, int col);
json_object *web_row(const PGresult *res, int row);
json_object *web_rows(const PGresult *res);

/* ---- handlers ---- */

unsigned web_api_session(struct web_call *c, const char *tail);
unsigned web_api_overview(struct web_call *c, const char *tail);
unsigned web_api_throughput(struct web_call *c, const char *tail);
unsigned web_api_jobs(struct web_call *c, const char *tail);
unsigned web_api_job(struct web_call *c, const char *tail);
unsigned web_api_dead(struct web_call *c, const char *tail);
unsigned web_api_dead_jobs(struct web_call *c, const char *tail);
unsigned web_api_hosts(struct web_call *c, const char *tail);
/* The ids of the dead jobs of one group of the dead page (kind and folded
 * error, api.c), as an int8[] literal in a PGresult; NULL on failure. */
PGresult *web_dead_group_ids(struct web_call *c, const char *kind, const char *group);

#endif
