/*
 * test_surface.c -- the public headers' promises that need no database:
 * the values a built program or plugin has compiled in never change, and
 * the version macros, the run-time version call and CMake's project()
 * version agree.
 *
 * The plugin ABI 1.0 is pinned here value by value and offset by offset
 * (x86-64 and other LP64 targets): a change that would break a built 1.0
 * plugin fails to compile this file. 1.1 only appends: its fields are
 * pinned after 1.0's, which keep their offsets. skipq_rc and skipq_plugin_rc are two
 * enums, each numbered on its own (see "Error codes and message sizes" in
 * skipq.h and plugin.h); both are pinned.
 */
#include <criterion/criterion.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "skipq/plugin.h"
#include "skipq/skipq.h"
#include "skipq/version.h"

/* ---- plugin ABI 1.0 ------------------------------------------------------------------ */

_Static_assert(SKIPQ_ABI_MAGIC == 0x534b5051u, "ABI magic");
_Static_assert(SKIPQ_ABI_MAJOR == 1 && SKIPQ_ABI_MINOR == 1, "plugin ABI 1.1");
_Static_assert(SKIPQ_OUTPUT_SIZE == 65536 && SKIPQ_STOP_WINDOW_MS == 2000, "1.1 sizes");
_Static_assert(SKIPQ_PLUGIN_ENOENT == 5 && SKIPQ_PLUGIN_ETOOBIG == 6, "1.1 skipq_plugin_rc");
_Static_assert(SKIPQ_CONFIG_STRING == 0 && SKIPQ_CONFIG_INT == 1 && SKIPQ_CONFIG_BOOL == 2 &&
                   SKIPQ_CONFIG_DURATION == 3 && SKIPQ_CONFIG_SIZE == 4,
               "skipq_config_type");
_Static_assert(SKIPQ_ERROR_SIZE == 1024, "SKIPQ_ERROR_SIZE");
_Static_assert(SKIPQ_DONE == 0 && SKIPQ_RETRY == 1 && SKIPQ_FAIL == 2, "skipq_outcome");
_Static_assert(SKIPQ_PLUGIN_OK == 0 && SKIPQ_PLUGIN_EINVAL == 1 && SKIPQ_PLUGIN_EEXIST == 2 &&
                   SKIPQ_PLUGIN_ESTATE == 3 && SKIPQ_PLUGIN_ENOMEM == 4,
               "skipq_plugin_rc");
_Static_assert(SKIPQ_LOG_ERROR == 0 && SKIPQ_LOG_WARN == 1 && SKIPQ_LOG_INFO == 2 && SKIPQ_LOG_DEBUG == 3,
               "log levels");

#if UINTPTR_MAX == UINT64_MAX
_Static_assert(offsetof(skipq_plugin_info, magic) == 0 && offsetof(skipq_plugin_info, abi_major) == 4 &&
                   offsetof(skipq_plugin_info, abi_minor) == 6 && offsetof(skipq_plugin_info, struct_size) == 8 &&
                   offsetof(skipq_plugin_info, name) == 16 && offsetof(skipq_plugin_info, version) == 24 &&
                   offsetof(skipq_plugin_info, init) == 32 && offsetof(skipq_plugin_info, shutdown) == 40 &&
                   offsetof(skipq_plugin_info, config_keys) == 48 && sizeof(skipq_plugin_info) == 56,
               "skipq_plugin_info");
_Static_assert(offsetof(skipq_host_api, size) == 0 && offsetof(skipq_host_api, abi_major) == 4 &&
                   offsetof(skipq_host_api, abi_minor) == 6 && offsetof(skipq_host_api, register_handler) == 8 &&
                   offsetof(skipq_host_api, config_get) == 16 && offsetof(skipq_host_api, plugin_set_state) == 24 &&
                   offsetof(skipq_host_api, plugin_state) == 32 && offsetof(skipq_host_api, plugin_vlog) == 40 &&
                   offsetof(skipq_host_api, job_verror) == 48 && offsetof(skipq_host_api, job_retry_in) == 56 &&
                   offsetof(skipq_host_api, job_conn) == 64 && offsetof(skipq_host_api, job_should_stop) == 72 &&
                   offsetof(skipq_host_api, job_vlog) == 80 && offsetof(skipq_host_api, config_value) == 88 &&
                   offsetof(skipq_host_api, config_verror) == 96 && offsetof(skipq_host_api, job_deadline_ms) == 104 &&
                   offsetof(skipq_host_api, job_output) == 112,
               "skipq_host_api (appended to only)");
_Static_assert(offsetof(skipq_job, api) == 0 && offsetof(skipq_job, id) == 8 &&
                   offsetof(skipq_job, execution_id) == 16 && offsetof(skipq_job, queue) == 24 && offsetof(skipq_job, kind) == 32 &&
                   offsetof(skipq_job, payload) == 40 && offsetof(skipq_job, payload_len) == 48 &&
                   offsetof(skipq_job, attempt) == 56 && offsetof(skipq_job, max_attempts) == 60,
               "skipq_job");
_Static_assert(offsetof(skipq_config_key, name) == 0 && offsetof(skipq_config_key, type) == 8 &&
                   offsetof(skipq_config_key, def) == 16 && offsetof(skipq_config_key, min) == 24 &&
                   offsetof(skipq_config_key, max) == 32 && offsetof(skipq_config_key, help) == 40,
               "skipq_config_key");
#endif

Test(surface, the_plugin_symbol_keeps_its_name)
{
    cr_expect_str_eq(SKIPQ_PLUGIN_SYMBOL, "skipq_plugin_describe");
}

/* ---- client API ------------------------------------------------------------------------ */

_Static_assert(SKIPQ_OK == 0 && SKIPQ_EINVAL == 1 && SKIPQ_EDB == 2 && SKIPQ_ENOMEM == 3 && SKIPQ_ESCHEMA == 4 &&
                   SKIPQ_ENOTFOUND == 5,
               "skipq_rc");
_Static_assert(SKIPQ_ERRBUF_SIZE == 512, "SKIPQ_ERRBUF_SIZE");

Test(surface, every_client_status_has_its_own_name)
{
    for (int a = SKIPQ_OK; a <= SKIPQ_ENOTFOUND; a++) {
        const char *s = skipq_strerror((skipq_rc)a);
        cr_assert(s && *s, "status %d has no name", a);
        for (int b = SKIPQ_OK; b < a; b++)
            cr_expect_str_neq(s, skipq_strerror((skipq_rc)b), "statuses %d and %d share a name", a, b);
    }
}

/* ---- versions -------------------------------------------------------------------------- */

Test(surface, the_version_macros_the_run_time_call_and_cmake_agree)
{
    char want[32];
    snprintf(want, sizeof want, "%d.%d.%d", SKIPQ_VERSION_MAJOR, SKIPQ_VERSION_MINOR, SKIPQ_VERSION_PATCH);
    cr_expect_str_eq(SKIPQ_VERSION, want);
    cr_expect_str_eq(skipq_version(), SKIPQ_VERSION);
    cr_expect_eq(skipq_version_number(),
                 SKIPQ_VERSION_MAJOR * 10000 + SKIPQ_VERSION_MINOR * 100 + SKIPQ_VERSION_PATCH);
    cr_expect_eq(skipq_version_number(), SKIPQ_VERSION_NUMBER);
    cr_expect_str_eq(SKIPQ_VERSION, SKIPQ_PROJECT_VERSION, "version.h was generated from another project() version");
}

Test(surface, skipq_version_prints_the_same_version)
{
    char *out = NULL;
    cr_assert_eq(th_cli(&out, NULL, "version", NULL), 0);
    char want[64];
    snprintf(want, sizeof want, "skipq %s (", skipq_version());
    cr_expect(strncmp(out, want, strlen(want)) == 0, "\"%s\" does not start with \"%s\"", out, want);
    free(out);
}
