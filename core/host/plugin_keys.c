/*
 * plugin_keys.c -- a plugin's declared configuration keys (ABI 1.1).
 *
 * Every section of the INI file refuses a key it does not know, with
 * FILE:LINE, before anything runs -- except, in ABI 1.0, a plugin's, whose
 * keys only the plugin knew: a typo there (`timout_ms`) passed silently and
 * the plugin ran on its default. A 1.1 plugin declares its keys (name,
 * type, default, range, help) in its descriptor, and the host holds its
 * section to them exactly as the option table holds the others (options.c),
 * with the same parsers for durations, sizes, integers and booleans, at
 * load and again on SIGHUP (reload.c). A plugin that declares nothing keeps
 * 1.0's pass-through.
 */
#include "host/plugin_keys.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "common/config.h"
#include "common/util.h"

const char *sq_config_type_name(skipq_config_type t)
{
    switch (t) {
    case SKIPQ_CONFIG_STRING:
        return "string";
    case SKIPQ_CONFIG_INT:
        return "integer";
    case SKIPQ_CONFIG_BOOL:
        return "boolean";
    case SKIPQ_CONFIG_DURATION:
        return "duration";
    case SKIPQ_CONFIG_SIZE:
        return "size";
    }
    return "?";
}

const skipq_config_key *sq_plugin_key_find(const skipq_config_key *keys, const char *name)
{
    for (const skipq_config_key *k = keys; k && k->name; k++)
        if (strcmp(k->name, name) == 0)
            return k;
    return NULL;
}

/* The bounds of a key of type t: its own, else the type's. */
static void bounds(const skipq_config_key *k, skipq_config_type t, int64_t *lo, int64_t *hi)
{
    bool own = k && (k->min || k->max);
    *lo = own ? k->min : t == SKIPQ_CONFIG_INT ? INT64_MIN : 0;
    *hi = own ? k->max : t == SKIPQ_CONFIG_DURATION ? SQ_MAX_DURATION_MS : INT64_MAX;
}

static void show(skipq_config_type t, int64_t v, char *buf, size_t n)
{
    if (t == SKIPQ_CONFIG_DURATION)
        snprintf(buf, n, "%" PRId64 "ms", v);
    else if (t == SKIPQ_CONFIG_SIZE)
        snprintf(buf, n, "%" PRId64 " bytes", v);
    else
        snprintf(buf, n, "%" PRId64, v);
}

bool sq_plugin_value(const skipq_config_key *k, skipq_config_type type, const char *value, int64_t *out, char *why,
                     size_t whylen)
{
    int64_t lo, hi, v = 0;
    const char *bad = NULL;
    bool b;
    bounds(k, type, &lo, &hi);
    switch (type) {
    case SKIPQ_CONFIG_STRING:
        return true;
    case SKIPQ_CONFIG_BOOL:
        if (!sq_parse_bool(value, &b)) {
            snprintf(why, whylen, "is not on or off (also true/false, yes/no, 1/0)");
            return false;
        }
        *out = b;
        return true;
    case SKIPQ_CONFIG_INT:
        bad = sq_parse_int_why(value, INT64_MIN, INT64_MAX, &v);
        break;
    case SKIPQ_CONFIG_DURATION:
        bad = sq_parse_duration_why(value, &v) ? "is not a duration (500ms, 10s, 5m, 2h, 1d; a bare number is "
                                                 "seconds)"
                                               : NULL;
        break;
    case SKIPQ_CONFIG_SIZE:
        bad = sq_parse_bytes(value, &v) ? NULL : "is not a size (65536, 64KiB, 16MiB, 1GiB)";
        break;
    default:
        bad = "has a type the host does not know";
    }
    if (bad) {
        snprintf(why, whylen, "%s", bad);
        return false;
    }
    if (v < lo || v > hi) {
        char a[48], z[48];
        show(type, lo, a, sizeof a);
        show(type, hi, z, sizeof z);
        snprintf(why, whylen, "is out of range (from %s to %s)", a, z);
        return false;
    }
    *out = v;
    return true;
}

/* The declaration: a plugin bug, reported as the plugin's, not the file's. */
static bool check_declaration(const char *plugin, const skipq_config_key *keys, char *err, size_t errlen)
{
    char why[160];
    int64_t v;
    for (const skipq_config_key *k = keys; k->name; k++) {
        const char *bad = NULL;
        if (!*k->name || strcmp(k->name, "path") == 0)
            bad = "has a reserved or empty name";
        else if (strcmp(sq_config_type_name(k->type), "?") == 0)
            bad = "has an unknown type";
        else if (sq_plugin_key_find(keys, k->name) != k)
            bad = "is declared twice";
        else if (k->min > k->max)
            bad = "has min above max";
        else if (k->def && !sq_plugin_value(k, k->type, k->def, &v, why, sizeof why))
            bad = why;
        if (bad) {
            snprintf(err, errlen, "plugin \"%s\" declares key \"%s\"%s%s%s %s (a bug in the plugin: tell its authors)",
                     plugin, k->name, k->def ? " with default \"" : "", k->def ? k->def : "", k->def ? "\"" : "",
                     bad);
            return false;
        }
    }
    return true;
}

/* "a, b, c": the declared names, for "unknown key" messages. */
static void names(const skipq_config_key *keys, char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = '\0';
    for (const skipq_config_key *k = keys; k->name && o < n; k++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? ", " : "", k->name);
    if (!keys->name)
        snprintf(buf, n, "none");
}

bool sq_plugin_keys_check(const char *plugin, const skipq_config_key *keys, const struct sq_plugin_conf *pc,
                          const char *cfg_path, char *err, size_t errlen)
{
    if (!keys)
        return true; /* nothing declared: 1.0's pass-through */
    if (!check_declaration(plugin, keys, err, errlen))
        return false;
    for (size_t i = 0; i < pc->nkv; i++) {
        const struct sq_kv *kv = &pc->kv[i];
        if (strcmp(kv->key, "path") == 0)
            continue;
        const skipq_config_key *k = sq_plugin_key_find(keys, kv->key);
        char why[256];
        int64_t v;
        if (!k) {
            names(keys, why, sizeof why);
            snprintf(err, errlen, "%s:%d: unknown key \"%s\" in [plugin %s] (plugin \"%s\" declares: %s)", cfg_path,
                     kv->line, kv->key, pc->name, plugin, why);
            return false;
        }
        if (!sq_plugin_value(k, k->type, kv->value, &v, why, sizeof why)) {
            snprintf(err, errlen, "%s:%d: [plugin %s] %s: \"%s\" %s", cfg_path, kv->line, pc->name, kv->key,
                     kv->value, why);
            return false;
        }
    }
    return true;
}

void sq_plugin_keys_print(FILE *out, const skipq_config_key *keys)
{
    if (!keys) {
        fputs("(the plugin declares no keys: its section is passed through unchecked)\n", out);
        return;
    }
    fputs("| key | type | default | range | what |\n|---|---|---|---|---|\n", out);
    for (const skipq_config_key *k = keys; k->name; k++) {
        char a[48] = "", z[48] = "";
        if (k->min || k->max) {
            show(k->type, k->min, a, sizeof a);
            show(k->type, k->max, z, sizeof z);
        }
        fprintf(out, "| `%s` | %s | %s%s%s | %s%s%s | %s |\n", k->name, sq_config_type_name(k->type),
                k->def ? "`" : "", k->def ? k->def : "none", k->def ? "`" : "", a, a[0] ? " to " : "", z,
                k->help ? k->help : "");
    }
}
