/* plugin.h -- load plugins, check their ABI, and own the kind registry. */
#ifndef SQ_PLUGIN_H
#define SQ_PLUGIN_H

#include <stdbool.h>
#include <stddef.h>

#include "skipq/plugin.h"

struct sq_config;
struct sq_plugin_conf;
struct sq_plugins;

struct sq_handler {
    char *kind;
    skipq_handler_fn fn;
    void *userdata;
    struct sq_loaded_plugin *plugin;
};

/* The host's table handed to plugins, and to each job (worker.c); its job_*
 * entries are jobapi.c's. */
extern const skipq_host_api sq_host_api;

/*
 * Load every [plugin] of cfg in file order: dlopen, ABI check, init. On any
 * failure everything loaded so far is shut down and unloaded, NULL is
 * returned and err names the plugin, its path and the reason.
 */
struct sq_plugins *sq_plugins_load(const struct sq_config *cfg, char *err, size_t errlen);
/* The same for one plugin already linked into the process, by its
 * descriptor (skipq/plugin_test.h): every check but the file's. */
struct sq_plugins *sq_plugins_load_described(const struct sq_plugin_conf *pc, const char *cfg_path,
                                             const skipq_plugin_info *info, char *err, size_t errlen);
/* The handler for `kind`, or NULL. Lock-free: the registry is frozen. */
const struct sq_handler *sq_plugins_find(const struct sq_plugins *ps, const char *kind);
/* Every registered kind, sorted. */
size_t sq_plugins_kinds(const struct sq_plugins *ps, const char *const **kinds);
/* shutdown() in reverse load order, then dlclose. Only after every worker
 * thread has stopped. NULL-safe. */
void sq_plugins_unload(struct sq_plugins *ps);
/* (ABI 1.1) Each loaded plugin's [plugin NAME] section in cfg checked
 * against the keys it declares (SIGHUP: reload.c). false with FILE:LINE in
 * err. Plugins that declare nothing pass. */
bool sq_plugins_check_config(const struct sq_plugins *ps, const struct sq_config *cfg, char *err, size_t errlen);
/* The loaded plugins and their descriptors, in load order. */
size_t sq_plugins_count(const struct sq_plugins *ps);
const skipq_plugin_info *sq_plugins_info(const struct sq_plugins *ps, size_t i);
/* Name of the plugin that owns a handler, for logs. */
const char *sq_handler_plugin_name(const struct sq_handler *h);

/*
 * The loader's check of a plugin file's ELF structure (headers, program
 * headers, dynamic section, the strings it names), on an open regular file:
 * NULL if the loader could take it, else why not ("is truncated or
 * corrupt (...)", static text). The loader runs the same check before
 * dlopen; this entry point is for tests/fuzz/fuzz_plugin_elf.c.
 */
const char *sq_plugin_elf_check(int fd);

#endif
