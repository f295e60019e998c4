/*
 * plugin.c -- the plugin loader and the kind registry.
 *
 * DESIGN
 * - dlopen(RTLD_NOW | RTLD_LOCAL): unresolved symbols fail at load time, and
 *   plugins cannot see each other's symbols. Plugins reach the host only
 *   through sq_host_api, so the host exports nothing.
 * - The descriptor is checked (magic, size, ABI major/minor) before any
 *   plugin function runs; a mismatch names both versions.
 * - Handlers are registered only during init(); the registry is sorted and
 *   frozen before any worker starts, so lookups need no lock.
 * - Unload order mirrors load order: shutdown() in reverse, dlclose last.
 * - dlopen runs the library's constructors before any check of ours, so the
 *   ABI check cannot stop hostile code: file permissions are the control.
 *   A plugin is refused if it, or any directory above it, is writable by
 *   group or others (a root-owned sticky directory such as /tmp excepted),
 *   or is owned by a user other than root or the one running skipq. The file
 *   is opened once, checked through that descriptor, and loaded from
 *   /proc/self/fd, so it cannot be swapped between check and load.
 */
#include "plugin.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <errno.h>

#include "config.h"
#include "host.h"
#include "log.h"
#include "util.h"

struct sq_loaded_plugin {
    skipq_plugin pub; /* must stay first: plugins hold a pointer to it */
    struct sq_plugins *owner;
    const struct sq_plugin_conf *conf;
    char *path;
    int fd;   /* kept open while loaded: glibc matches dlopen names, and a
                 reused /proc/self/fd/N would return the previous plugin */
    void *dl;
    const skipq_plugin_info *info;
    void *state;
    bool initialised;
};

struct sq_plugins {
    struct sq_loaded_plugin *list;
    size_t n;
    struct sq_handler *handlers;
    size_t nhandlers;
    const char **kinds;
    bool frozen;
    /* first registration error of the plugin being initialised */
    char reg_err[512];
};

static struct sq_loaded_plugin *from_pub(skipq_plugin *p)
{
    return (struct sq_loaded_plugin *)p;
}

/* ---- services for init() ---------------------------------------------------- */

static int api_register(skipq_plugin *p, const char *kind, skipq_handler_fn fn, void *userdata)
{
    struct sq_loaded_plugin *lp = from_pub(p);
    struct sq_plugins *ps = lp->owner;
    int rc = SKIPQ_PLUGIN_OK;
    if (ps->frozen) {
        rc = SKIPQ_PLUGIN_ESTATE;
        snprintf(ps->reg_err, sizeof ps->reg_err, "plugin \"%s\" registered kind \"%s\" outside init()",
                 lp->conf->name, kind ? kind : "(null)");
        log_error("%s", ps->reg_err);
        return rc;
    }
    if (!kind || !fn || !sq_valid_name(kind)) {
        if (!ps->reg_err[0])
            snprintf(ps->reg_err, sizeof ps->reg_err,
                     "plugin \"%s\" tried to register %s (kinds are 1-128 characters of letters, digits and _.:-)",
                     lp->conf->name, !fn ? "a NULL handler" : "an invalid kind name");
        return SKIPQ_PLUGIN_EINVAL;
    }
    for (size_t i = 0; i < ps->nhandlers; i++) {
        if (strcmp(ps->handlers[i].kind, kind) == 0) {
            if (!ps->reg_err[0])
                snprintf(ps->reg_err, sizeof ps->reg_err,
                         "kind \"%s\" is registered twice: by plugin \"%s\" and by plugin \"%s\"", kind,
                         ps->handlers[i].plugin->conf->name, lp->conf->name);
            return SKIPQ_PLUGIN_EEXIST;
        }
    }
    struct sq_handler *h = realloc(ps->handlers, (ps->nhandlers + 1) * sizeof *h);
    if (!h)
        return SKIPQ_PLUGIN_ENOMEM;
    ps->handlers = h;
    h = &ps->handlers[ps->nhandlers];
    h->kind = strdup(kind);
    if (!h->kind)
        return SKIPQ_PLUGIN_ENOMEM;
    h->fn = fn;
    h->userdata = userdata;
    h->plugin = lp;
    ps->nhandlers++;
    return SKIPQ_PLUGIN_OK;
}

static const char *api_config_get(skipq_plugin *p, const char *key)
{
    const struct sq_plugin_conf *pc = from_pub(p)->conf;
    for (size_t i = 0; key && i < pc->nkv; i++)
        if (strcmp(pc->kv[i].key, key) == 0)
            return pc->kv[i].value;
    return NULL;
}

static void api_set_state(skipq_plugin *p, void *state) { from_pub(p)->state = state; }
static void *api_state(skipq_plugin *p) { return from_pub(p)->state; }

static void api_plugin_vlog(skipq_plugin *p, int level, const char *fmt, va_list ap)
{
    if (level > sq_log_threshold)
        return;
    char prefix[96];
    snprintf(prefix, sizeof prefix, "plugin %s: ", from_pub(p)->conf->name);
    sq_log_vwrite(level, prefix, fmt, ap);
}


const skipq_host_api sq_host_api = {
    .size = sizeof(skipq_host_api),
    .abi_major = SKIPQ_ABI_MAJOR,
    .abi_minor = SKIPQ_ABI_MINOR,
    .register_handler = api_register,
    .config_get = api_config_get,
    .plugin_set_state = api_set_state,
    .plugin_state = api_state,
    .plugin_vlog = api_plugin_vlog,
    .job_verror = sq_job_verror,
    .job_retry_in = sq_job_retry_in,
    .job_conn = sq_job_conn,
    .job_should_stop = sq_job_should_stop,
    .job_vlog = sq_job_vlog,
};

/* ---- loading ------------------------------------------------------------------ */

/* Relative plugin paths are relative to the INI file's directory. */
static char *resolve_path(const char *config_path, const char *path)
{
    char buf[PATH_MAX];
    if (path[0] == '/') {
        snprintf(buf, sizeof buf, "%s", path);
    } else {
        const char *slash = strrchr(config_path, '/');
        if (slash)
            snprintf(buf, sizeof buf, "%.*s/%s", (int)(slash - config_path), config_path, path);
        else
            snprintf(buf, sizeof buf, "./%s", path);
    }
    char *real = realpath(buf, NULL);
    return real ? real : strdup(buf);
}

static bool owner_ok(uid_t uid)
{
    return uid == 0 || uid == geteuid();
}

/* Why `st` (of `what`) makes a plugin unsafe to load, or NULL. */
static const char *unsafe_reason(const struct stat *st, bool is_dir)
{
    if (!owner_ok(st->st_uid))
        return "is owned by another user (only root or the user running skipq may own it)";
    if (is_dir && (st->st_mode & S_ISVTX) && st->st_uid == 0)
        return NULL; /* like /tmp: others may add entries, not replace ours */
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return is_dir ? "is a directory writable by group or others" : "is writable by group or others";
    return NULL;
}

/* Check every directory from / down to the plugin's. */
static bool check_parents(const char *path, const char *name, char *err, size_t errlen)
{
    char dir[PATH_MAX];
    sq_strlcpy(dir, path, sizeof dir);
    for (char *slash = strrchr(dir, '/'); slash; slash = strrchr(dir, '/')) {
        if (slash == dir)
            slash[1] = '\0';
        else
            *slash = '\0';
        struct stat st;
        if (stat(dir, &st) != 0) {
            snprintf(err, errlen, "plugin \"%s\": cannot inspect directory %s: %s", name, dir, strerror(errno));
            return false;
        }
        const char *why = unsafe_reason(&st, true);
        if (why) {
            snprintf(err, errlen, "refusing to load plugin \"%s\" (%s): directory %s %s", name, path, dir, why);
            return false;
        }
        if (slash == dir)
            break;
    }
    return true;
}

/*
 * glibc's loader trusts the file: a truncated .so makes it fault (SIGBUS)
 * instead of failing. Check the ELF header and every loaded segment against
 * the file's size first. NULL if it looks loadable, else why not.
 */
static const char *elf_problem(int fd, off_t size)
{
    ElfW(Ehdr) eh;
    if (pread(fd, &eh, sizeof eh, 0) != (ssize_t)sizeof eh)
        return "is too short to be a shared object";
    if (memcmp(eh.e_ident, ELFMAG, SELFMAG) != 0)
        return "is not an ELF file";
    if (eh.e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32))
        return "is an ELF file for another word size";
    if (eh.e_type != ET_DYN)
        return "is not a shared object";
    if (eh.e_phentsize != sizeof(ElfW(Phdr)) || eh.e_phnum == 0 ||
        (off_t)eh.e_phoff + (off_t)eh.e_phnum * (off_t)sizeof(ElfW(Phdr)) > size)
        return "is truncated or corrupt (program headers)";
    for (unsigned i = 0; i < eh.e_phnum; i++) {
        ElfW(Phdr) ph;
        if (pread(fd, &ph, sizeof ph, (off_t)(eh.e_phoff + i * sizeof ph)) != (ssize_t)sizeof ph)
            return "is truncated or corrupt (program headers)";
        if (ph.p_type == PT_LOAD && (off_t)(ph.p_offset + ph.p_filesz) > size)
            return "is truncated (a loadable segment ends past the end of the file)";
    }
    return NULL;
}

/* Open the plugin for loading; -1 (message in err) if missing or unsafe. */
static int open_checked(const char *path, const char *name, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "cannot load plugin \"%s\" from %s: %s", name, path, strerror(errno));
        return -1;
    }
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) != 0)
        why = "cannot be inspected";
    else if (!S_ISREG(st.st_mode))
        why = "is not a regular file";
    else
        why = unsafe_reason(&st, false);
    if (why) {
        snprintf(err, errlen, "refusing to load plugin \"%s\": %s %s", name, path, why);
        close(fd);
        return -1;
    }
    if ((why = elf_problem(fd, st.st_size)) != NULL) {
        snprintf(err, errlen, "cannot load plugin \"%s\" from %s: the file %s", name, path, why);
        close(fd);
        return -1;
    }
    if (!check_parents(path, name, err, errlen)) {
        close(fd);
        return -1;
    }
    return fd;
}

static bool load_one(struct sq_plugins *ps, struct sq_loaded_plugin *lp, const char *config_path, char *err,
                     size_t errlen)
{
    const char *name = lp->conf->name;
    lp->path = resolve_path(config_path, lp->conf->path);
    if (!lp->path) {
        snprintf(err, errlen, "plugin \"%s\": out of memory", name);
        return false;
    }
    int fd = open_checked(lp->path, name, err, errlen);
    if (fd < 0)
        return false;
    char fdpath[64];
    snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
    dlerror();
    lp->dl = dlopen(fdpath, RTLD_NOW | RTLD_LOCAL);
    lp->fd = fd;
    if (!lp->dl) {
        const char *e = dlerror();
        snprintf(err, errlen, "cannot load plugin \"%s\" from %s: %s", name, lp->path, e ? e : "unknown error");
        return false;
    }
    dlerror();
    void *sym = dlsym(lp->dl, SKIPQ_PLUGIN_SYMBOL);
    if (!sym) {
        snprintf(err, errlen,
                 "plugin \"%s\" (%s) is not a skipq plugin: it has no %s symbol (declare it with SKIPQ_PLUGIN(...))",
                 name, lp->path, SKIPQ_PLUGIN_SYMBOL);
        return false;
    }
    const skipq_plugin_info *(*describe)(void);
    *(void **)&describe = sym;
    const skipq_plugin_info *info = describe();
    if (!info || info->magic != SKIPQ_ABI_MAGIC) {
        snprintf(err, errlen, "plugin \"%s\" (%s) has a bad descriptor (magic 0x%08x, expected 0x%08x)", name,
                 lp->path, info ? info->magic : 0u, SKIPQ_ABI_MAGIC);
        return false;
    }
    if (info->abi_major != SKIPQ_ABI_MAJOR || info->abi_minor > SKIPQ_ABI_MINOR) {
        snprintf(err, errlen,
                 "plugin \"%s\" (%s) was built for skipq plugin ABI %u.%u; this host provides ABI %d.%d "
                 "(rebuild the plugin against this host's include/skipq/plugin.h)",
                 name, lp->path, info->abi_major, info->abi_minor, SKIPQ_ABI_MAJOR, SKIPQ_ABI_MINOR);
        return false;
    }
    if (info->struct_size < sizeof(skipq_plugin_info) || !info->init) {
        snprintf(err, errlen, "plugin \"%s\" (%s) has an incomplete descriptor (no init function)", name, lp->path);
        return false;
    }
    lp->info = info;
    ps->reg_err[0] = '\0';
    int rc = info->init(&lp->pub);
    lp->initialised = rc == 0; /* a failed init cleans up after itself */
    if (rc != 0) {
        snprintf(err, errlen, "plugin \"%s\" (%s) failed to initialise (init returned %d)%s%s", name, lp->path, rc,
                 ps->reg_err[0] ? ": " : "", ps->reg_err);
        return false;
    }
    if (ps->reg_err[0]) {
        snprintf(err, errlen, "%s", ps->reg_err);
        return false;
    }
    log_info("loaded plugin \"%s\" %s from %s (ABI %u.%u)", name, info->version ? info->version : "", lp->path,
             info->abi_major, info->abi_minor);
    return true;
}

static int cmp_handler(const void *a, const void *b)
{
    return strcmp(((const struct sq_handler *)a)->kind, ((const struct sq_handler *)b)->kind);
}

struct sq_plugins *sq_plugins_load(const struct sq_config *cfg, char *err, size_t errlen)
{
    struct sq_plugins *ps = calloc(1, sizeof *ps);
    if (!ps || !(ps->list = calloc(cfg->nplugins ? cfg->nplugins : 1, sizeof *ps->list))) {
        free(ps);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    for (size_t i = 0; i < cfg->nplugins; i++) {
        struct sq_loaded_plugin *lp = &ps->list[i];
        lp->pub.api = &sq_host_api;
        lp->owner = ps;
        lp->conf = &cfg->plugins[i];
        lp->fd = -1;
        ps->n++;
        if (!load_one(ps, lp, cfg->path, err, errlen))
            goto fail;
    }
    qsort(ps->handlers, ps->nhandlers, sizeof *ps->handlers, cmp_handler);
    ps->kinds = calloc(ps->nhandlers + 1, sizeof *ps->kinds);
    if (!ps->kinds) {
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < ps->nhandlers; i++)
        ps->kinds[i] = ps->handlers[i].kind;
    ps->frozen = true;
    return ps;
fail:
    sq_plugins_unload(ps);
    return NULL;
}

const struct sq_handler *sq_plugins_find(const struct sq_plugins *ps, const char *kind)
{
    struct sq_handler key = {.kind = (char *)kind};
    return bsearch(&key, ps->handlers, ps->nhandlers, sizeof key, cmp_handler);
}

size_t sq_plugins_kinds(const struct sq_plugins *ps, const char *const **kinds)
{
    *kinds = ps->kinds;
    return ps->nhandlers;
}

const char *sq_handler_plugin_name(const struct sq_handler *h)
{
    return h->plugin->conf->name;
}

void sq_plugins_unload(struct sq_plugins *ps)
{
    if (!ps)
        return;
    ps->frozen = true;
    for (size_t i = ps->n; i-- > 0;) {
        struct sq_loaded_plugin *lp = &ps->list[i];
        if (lp->initialised && lp->info->shutdown)
            lp->info->shutdown(&lp->pub);
    }
    for (size_t i = ps->n; i-- > 0;) {
        if (ps->list[i].dl)
            dlclose(ps->list[i].dl);
        if (ps->list[i].fd >= 0)
            close(ps->list[i].fd);
        free(ps->list[i].path);
    }
    for (size_t i = 0; i < ps->nhandlers; i++)
        free(ps->handlers[i].kind);
    free(ps->handlers);
    free(ps->kinds);
    free(ps->list);
    free(ps);
}
