/* plugin_keys.h -- a plugin's declared configuration keys (ABI 1.1): checking a [plugin NAME] section against them. */
#ifndef SQ_PLUGIN_KEYS_H
#define SQ_PLUGIN_KEYS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "skipq/plugin.h"

struct sq_plugin_conf;

/* "string", "integer", "boolean", "duration", "size"; "?" for anything else. */
const char *sq_config_type_name(skipq_config_type t);

/* The declared key `name`, or NULL (keys may be NULL: none declared). */
const skipq_config_key *sq_plugin_key_find(const skipq_config_key *keys, const char *name);

/*
 * `value` read as `type` (BOOL: 0 or 1; DURATION: ms; SIZE: bytes; STRING:
 * not read), within k's bounds when k is given. false with the reason in
 * why, as a phrase after the quoted value ("is not a duration ...").
 */
bool sq_plugin_value(const skipq_config_key *k, skipq_config_type type, const char *value, int64_t *out, char *why,
                     size_t whylen);

/*
 * The declaration itself (types known, names unique and not `path`,
 * defaults of their type and in range), then each key of pc: declared, and
 * of its type and range. false with "FILE:LINE: ..." in err.
 */
bool sq_plugin_keys_check(const char *plugin, const skipq_config_key *keys, const struct sq_plugin_conf *pc,
                          const char *cfg_path, char *err, size_t errlen);

/* The keys as a Markdown table (for `skipq exec --help-plugin` and docs). */
void sq_plugin_keys_print(FILE *out, const skipq_config_key *keys);

#endif
