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
 * - ABI 1.1: a plugin that declares its keys has its section checked before
 *   init (plugin_keys.c), and may report its own config errors, which the
 *   host prints as FILE:LINE like its own. A 1.0 descriptor is shorter (it
 *   ends before config_keys): its size is checked against its version.
 * - dlopen runs the library's constructors before any check of ours, so the
 *   ABI check cannot stop hostile code: file permissions are the control.
 *   A plugin is refused if it, or any directory on the way to it, is
 *   writable by group or others (a root-owned sticky directory such as /tmp
 *   excepted), or is owned by a user other than root or the one running
 *   skipq. "On the way" is the path as configured, resolved component by
 *   component: a symbolic link counts where it lies and where it points.
 * - The libraries the plugin needs are loaded (and their constructors run)
 *   by the same dlopen, from the directories of its RUNPATH/RPATH and of
 *   LD_LIBRARY_PATH first: those directories follow the same rules.
 * - The file is opened once, without blocking (a FIFO or a device is
 *   refused before it is opened), checked through that descriptor --
 *   permissions, ELF structure, dynamic section -- and loaded from
 *   /proc/self/fd, so it cannot be swapped between check and load.
 */
#include "host/plugin.h"

#include <ctype.h>
#include <dlfcn.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "host/jobapi.h"
#include "host/plugin_keys.h"

struct sq_loaded_plugin {
    skipq_plugin pub; /* must stay first: plugins hold a pointer to it */
    struct sq_plugins *owner;
    const struct sq_plugin_conf *conf;
    char *path;
    int fd;   /* kept open while loaded: glibc matches dlopen names, and a
                 reused /proc/self/fd/N would return the previous plugin */
    void *dl;
    const skipq_plugin_info *info;
    const skipq_config_key *keys; /* declared (ABI 1.1), or NULL */
    const char *cfg_path;         /* the INI file, for FILE:LINE */
    char cfg_err[1024];           /* the first skipq_config_error() of init */
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

static const struct sq_kv *config_kv(const struct sq_plugin_conf *pc, const char *key)
{
    for (size_t i = 0; key && i < pc->nkv; i++)
        if (strcmp(pc->kv[i].key, key) == 0)
            return &pc->kv[i];
    return NULL;
}

/* The section's value, else (1.1) the declared default. */
static const char *api_config_get(skipq_plugin *p, const char *key)
{
    struct sq_loaded_plugin *lp = from_pub(p);
    const struct sq_kv *kv = config_kv(lp->conf, key);
    const skipq_config_key *k = key ? sq_plugin_key_find(lp->keys, key) : NULL;
    return kv ? kv->value : k ? k->def : NULL;
}

static int api_config_value(skipq_plugin *p, const char *key, skipq_config_type type, int64_t *out)
{
    struct sq_loaded_plugin *lp = from_pub(p);
    const char *v = api_config_get(p, key);
    if (!key || !out || type == SKIPQ_CONFIG_STRING)
        return SKIPQ_PLUGIN_EINVAL;
    if (!v)
        return SKIPQ_PLUGIN_ENOENT;
    const skipq_config_key *k = sq_plugin_key_find(lp->keys, key);
    char why[160];
    int64_t x;
    if (!sq_plugin_value(k && k->type == type ? k : NULL, type, v, &x, why, sizeof why))
        return SKIPQ_PLUGIN_EINVAL;
    *out = x;
    return SKIPQ_PLUGIN_OK;
}

/* "FILE:LINE: [plugin NAME] KEY: message", the key's line else the section's. */
static void api_config_verror(skipq_plugin *p, const char *key, const char *fmt, va_list ap)
{
    struct sq_loaded_plugin *lp = from_pub(p);
    if (lp->cfg_err[0])
        return; /* the first one is the one to fix first */
    char msg[768];
    vsnprintf(msg, sizeof msg, fmt, ap);
    const struct sq_kv *kv = config_kv(lp->conf, key);
    snprintf(lp->cfg_err, sizeof lp->cfg_err, "%s:%d: [plugin %s] %s%s%s", lp->cfg_path,
             kv ? kv->line : lp->conf->line, lp->conf->name, key ? key : "", key ? ": " : "", msg);
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
    .config_value = api_config_value,
    .config_verror = api_config_verror,
    .job_deadline_ms = sq_job_deadline_ms,
    .job_output = sq_job_output,
};

/* ---- where a plugin comes from: paths ------------------------------------------------ */

/*
 * The rules, applied to everything the loader reads for a plugin:
 * - every directory passed through on the way to a file -- from /, along
 *   the path as configured, and along the target of every symbolic link
 *   followed -- must not be writable by group or others, unless it is a
 *   root-owned sticky directory such as /tmp (others may add entries there,
 *   not replace ours);
 * - every directory, symbolic link and file must be owned by root or by the
 *   user running skipq;
 * - a directory the loader searches for libraries (RUNPATH, RPATH,
 *   LD_LIBRARY_PATH) must not be writable by others even when sticky, since
 *   adding a library is all it takes; when it does not exist, nobody else may
 *   be able to create it.
 * Checking only the resolved path would miss a symbolic link placed in a
 * world-writable directory: whoever can write there can point it elsewhere.
 */
enum sq_node { SQ_FILE, SQ_DIR, SQ_SEARCH_DIR };

static bool owner_ok(uid_t uid)
{
    return uid == 0 || uid == geteuid();
}

/* Why `st` makes a plugin unsafe to load, or NULL. */
static const char *unsafe_reason(const struct stat *st, enum sq_node node)
{
    if (!owner_ok(st->st_uid))
        return "is owned by another user (only root or the user running skipq may own it)";
    if (node == SQ_DIR && (st->st_mode & S_ISVTX) && st->st_uid == 0)
        return NULL; /* like /tmp: others may add entries, not replace ours */
    if (st->st_mode & (S_IWGRP | S_IWOTH))
        return node == SQ_FILE ? "is writable by group or others" : "is a directory writable by group or others";
    return NULL;
}

#define SQ_MAX_LINKS 40 /* as the kernel: beyond this, ELOOP */

/* One path being resolved component by component, as the kernel would. */
struct walk {
    const char *name;    /* the plugin */
    const char *shown;   /* the plugin's path, as messages show it */
    const char *entry;   /* "RUNPATH entry \"...\"" when checking one, else NULL */
    bool search;         /* a search directory (or a library in one): it may be missing */
    bool final_dir;      /* the last component is that search directory */
    bool missing;        /* out: the path does not exist (only when search) */
    char via[PATH_MAX];  /* the last symbolic link followed, for messages */
    char resolved[PATH_MAX];
};

static bool refuse(const struct walk *w, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* "refusing to load plugin "NAME" (PATH): [ENTRY: ]WHAT[ (reached through ...)]" */
static bool refuse(const struct walk *w, char *err, size_t errlen, const char *fmt, ...)
{
    char what[2 * PATH_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(err, errlen, "refusing to load plugin \"%s\" (%s): %s%s%s%s%s%s", w->name, w->shown,
             w->entry ? w->entry : "", w->entry ? ": " : "", what,
             w->via[0] ? " (reached through the symbolic link " : "", w->via, w->via[0] ? ")" : "");
    return false;
}

static bool check_node(const struct walk *w, const char *path, const struct stat *st, enum sq_node node,
                       char *err, size_t errlen)
{
    const char *why = unsafe_reason(st, node);
    if (!why)
        return true;
    return refuse(w, err, errlen, "%s %s %s", node == SQ_FILE ? "file" : "directory", path, why);
}

/* A search path that does not exist: fine unless others could create it. */
static bool check_missing(struct walk *w, const char *parent, const char *path, char *err, size_t errlen)
{
    struct stat st;
    w->missing = true;
    if (lstat(parent, &st) != 0)
        return refuse(w, err, errlen, "cannot inspect directory %s: %s", parent, strerror(errno));
    const char *why = unsafe_reason(&st, SQ_SEARCH_DIR);
    if (!why)
        return true;
    return refuse(w, err, errlen, "%s does not exist, and directory %s, where it could be created, %s", path,
                  parent, why);
}

/* Split the next component off *rest (NULL when none is left). */
static char *next_component(char **rest)
{
    char *s = *rest;
    while (*s == '/')
        s++;
    if (!*s)
        return NULL;
    char *slash = strchr(s, '/');
    if (slash) {
        *slash = '\0';
        *rest = slash + 1;
    } else {
        *rest = s + strlen(s);
    }
    return s;
}

static bool is_last(const char *rest)
{
    while (*rest == '/')
        rest++;
    return *rest == '\0';
}

/* Follow the symbolic link `link` (in cur): the remaining path becomes
 * its target followed by what was left. */
static bool follow_link(struct walk *w, const char *link, const struct stat *st, char *cur, char *todo,
                        size_t todolen, char **rest, int *links, char *err, size_t errlen)
{
    if (!owner_ok(st->st_uid))
        return refuse(w, err, errlen, "symbolic link %s is owned by another user (only root or the user running "
                                      "skipq may own it)", link);
    if (++*links > SQ_MAX_LINKS)
        return refuse(w, err, errlen, "%s: %s", link, strerror(ELOOP));
    char target[PATH_MAX], next[2 * PATH_MAX];
    ssize_t n = readlink(link, target, sizeof target - 1);
    if (n < 0)
        return refuse(w, err, errlen, "cannot read symbolic link %s: %s", link, strerror(errno));
    target[n] = '\0';
    if ((size_t)snprintf(next, sizeof next, "%s/%s", target, *rest) >= todolen)
        return refuse(w, err, errlen, "%s: %s", link, strerror(ENAMETOOLONG));
    memcpy(todo, next, strlen(next) + 1);
    *rest = todo;
    if (target[0] == '/')
        cur[0] = '\0';
    sq_strlcpy(w->via, link, sizeof w->via);
    return true;
}

/* One component that is neither "." nor ".." nor a symbolic link. */
static bool step(struct walk *w, const char *next, const struct stat *st, bool last, char *err, size_t errlen)
{
    if (last && !w->final_dir)
        return true; /* the file itself: its caller checks it */
    if (!S_ISDIR(st->st_mode)) {
        if (last) { /* the loader finds nothing in a search path that is not a directory */
            w->missing = true;
            return true;
        }
        return refuse(w, err, errlen, "%s: %s", next, strerror(ENOTDIR));
    }
    return check_node(w, next, st, last ? SQ_SEARCH_DIR : SQ_DIR, err, errlen);
}

/*
 * Resolve the absolute `path` as the kernel would, checking every
 * directory it passes through and every symbolic link it follows. On
 * success w->resolved is the path without symbolic links, "." or "..".
 */
static bool walk_path(struct walk *w, const char *path, char *err, size_t errlen)
{
    char todo[2 * PATH_MAX], cur[PATH_MAX] = "", next[PATH_MAX];
    char *rest = todo, *comp;
    int links = 0;
    struct stat st;
    w->via[0] = '\0';
    w->missing = false;
    if (sq_strlcpy(todo, path, sizeof todo) >= sizeof todo)
        return refuse(w, err, errlen, "%s", strerror(ENAMETOOLONG));
    if (lstat("/", &st) != 0)
        return refuse(w, err, errlen, "cannot inspect directory /: %s", strerror(errno));
    if (!check_node(w, "/", &st, SQ_DIR, err, errlen))
        return false;
    while ((comp = next_component(&rest)) != NULL) {
        if (strcmp(comp, ".") == 0)
            continue;
        if (strcmp(comp, "..") == 0) { /* the parent of a resolved directory: checked already */
            char *slash = strrchr(cur, '/');
            if (slash)
                *slash = '\0';
            continue;
        }
        if ((size_t)snprintf(next, sizeof next, "%s/%s", cur, comp) >= sizeof next)
            return refuse(w, err, errlen, "%s/%s: %s", cur, comp, strerror(ENAMETOOLONG));
        bool last = is_last(rest);
        if (lstat(next, &st) != 0) {
            if (errno == ENOENT && w->search)
                return check_missing(w, cur[0] ? cur : "/", next, err, errlen);
            snprintf(err, errlen, "cannot load plugin \"%s\" from %s: %s%s%s", w->name, w->shown,
                     w->entry ? w->entry : "", w->entry ? ": " : "", strerror(errno));
            return false;
        }
        if (S_ISLNK(st.st_mode)) {
            if (!follow_link(w, next, &st, cur, todo, sizeof todo, &rest, &links, err, errlen))
                return false;
            continue;
        }
        if (!step(w, next, &st, last, err, errlen))
            return false;
        memcpy(cur, next, strlen(next) + 1);
        if (w->missing)
            break;
    }
    sq_strlcpy(w->resolved, cur[0] ? cur : "/", sizeof w->resolved);
    return true;
}

/* Relative plugin paths are relative to the INI file's directory (and a
 * relative INI path to the working directory). */
static bool absolute_path(const char *config_path, const char *path, char *out, size_t outlen)
{
    char dir[PATH_MAX] = "";
    const char *slash = strrchr(config_path, '/');
    int dirlen = slash ? (int)(slash - config_path) : 0;
    if (path[0] == '/')
        return (size_t)snprintf(out, outlen, "%s", path) < outlen;
    if (config_path[0] != '/') {
        if (!getcwd(dir, sizeof dir))
            return false;
        if (strcmp(dir, "/") == 0)
            dir[0] = '\0';
    }
    const char *sep = config_path[0] != '/' && dirlen ? "/" : "";
    size_t n = strlen(dir);
    if ((size_t)snprintf(dir + n, sizeof dir - n, "%s%.*s", sep, dirlen, config_path) >= sizeof dir - n)
        return false;
    return (size_t)snprintf(out, outlen, "%s/%s", dir, path) < outlen;
}

/* ---- what the plugin's file says: its ELF dynamic section ----------------------------- */

/*
 * glibc's loader trusts the file: a truncated .so makes it fault (SIGBUS)
 * instead of failing. So the ELF header, every program header and the
 * dynamic section are checked against the file's size first, in unsigned
 * arithmetic with every offset and size bounded before it is used: the
 * values come from the file and may be anything.
 *
 * The dynamic section is read as the loader reads it: through its address,
 * mapped by the loadable segment that holds it (not through its own file
 * offset), with the string table found the same way.
 */
#define SQ_MAX_DYNAMIC (64u * 1024u) /* bytes of dynamic section; real ones hold a few hundred */
#define SQ_MAX_DYN_STRING 4096u

struct sq_dyn_string {
    int64_t tag; /* DT_NEEDED, DT_RPATH or DT_RUNPATH */
    char *value;
};

struct sq_elf {
    int fd;
    uint64_t size;
    ElfW(Phdr) *ph;
    unsigned nph;
    struct sq_dyn_string *strings;
    size_t nstrings;
};

static void elf_free(struct sq_elf *e)
{
    for (size_t i = 0; i < e->nstrings; i++)
        free(e->strings[i].value);
    free(e->strings);
    free(e->ph);
    e->strings = NULL;
    e->ph = NULL;
    e->nstrings = 0;
}

/* [off, off + len) lies within the file. */
static bool span_ok(uint64_t off, uint64_t len, uint64_t size)
{
    return off <= size && len <= size - off;
}

static bool read_at(const struct sq_elf *e, void *buf, uint64_t len, uint64_t off)
{
    if (!span_ok(off, len, e->size) || len > SSIZE_MAX)
        return false;
    return pread(e->fd, buf, (size_t)len, (off_t)off) == (ssize_t)len;
}

/* The file offset of [addr, addr + len) in memory, if one loadable segment
 * holds all of it in its file part. */
static bool addr_to_offset(const struct sq_elf *e, uint64_t addr, uint64_t len, uint64_t *off)
{
    for (unsigned i = 0; i < e->nph; i++) {
        const ElfW(Phdr) *p = &e->ph[i];
        if (p->p_type != PT_LOAD || addr < p->p_vaddr)
            continue;
        uint64_t delta = addr - p->p_vaddr;
        if (delta <= p->p_filesz && len <= p->p_filesz - delta) {
            *off = p->p_offset + delta; /* p_offset + p_filesz <= size: checked */
            return true;
        }
    }
    return false;
}

static const char *elf_header(struct sq_elf *e, ElfW(Ehdr) *eh)
{
    const unsigned char data = __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__ ? ELFDATA2LSB : ELFDATA2MSB;
    uint64_t len = e->size < sizeof *eh ? e->size : sizeof *eh;
    memset(eh, 0, sizeof *eh);
    if (!read_at(e, eh, len, 0))
        return "cannot be read";
    if (len < SELFMAG || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0)
        return "is not an ELF file";
    if (len < sizeof *eh)
        return "is truncated or corrupt (shorter than an ELF header)";
    if (eh->e_ident[EI_CLASS] != (sizeof(void *) == 8 ? ELFCLASS64 : ELFCLASS32))
        return "is an ELF file for another word size";
    if (eh->e_ident[EI_DATA] != data)
        return "is an ELF file for another byte order";
    if (eh->e_type != ET_DYN)
        return "is not a shared object";
    return NULL;
}

/* Read and check every program header. */
static const char *elf_segments(struct sq_elf *e, const ElfW(Ehdr) *eh)
{
    if (eh->e_phentsize != sizeof(ElfW(Phdr)) || eh->e_phnum == 0 || eh->e_phnum == PN_XNUM ||
        eh->e_phoff < sizeof *eh || !span_ok(eh->e_phoff, (uint64_t)eh->e_phnum * sizeof(ElfW(Phdr)), e->size))
        return "is truncated or corrupt (program headers)";
    e->nph = eh->e_phnum;
    e->ph = calloc(e->nph, sizeof *e->ph);
    if (!e->ph)
        return "cannot be checked (out of memory)";
    if (!read_at(e, e->ph, (uint64_t)e->nph * sizeof *e->ph, eh->e_phoff))
        return "is truncated or corrupt (program headers)";
    unsigned loads = 0;
    for (unsigned i = 0; i < e->nph; i++) {
        const ElfW(Phdr) *p = &e->ph[i];
        if (p->p_type != PT_LOAD)
            continue;
        if (!span_ok(p->p_offset, p->p_filesz, e->size))
            return "is truncated or corrupt (a loadable segment ends past the end of the file)";
        if (p->p_filesz > p->p_memsz)
            return "is truncated or corrupt (a loadable segment is larger in the file than in memory)";
        loads++;
    }
    return loads ? NULL : "is truncated or corrupt (no loadable segment)";
}

static const ElfW(Phdr) *dynamic_segment(const struct sq_elf *e, const char **why)
{
    const ElfW(Phdr) *dyn = NULL;
    for (unsigned i = 0; i < e->nph; i++) {
        if (e->ph[i].p_type != PT_DYNAMIC)
            continue;
        if (dyn) {
            *why = "is truncated or corrupt (two dynamic sections)";
            return NULL;
        }
        dyn = &e->ph[i];
    }
    return dyn;
}

/* One string of the dynamic string table, at index idx (malloc'd in *out). */
static const char *dyn_string(const struct sq_elf *e, uint64_t stroff, uint64_t strsz, uint64_t idx, char **out)
{
    char buf[SQ_MAX_DYN_STRING];
    if (idx >= strsz)
        return "is truncated or corrupt (a dynamic string lies outside the string table)";
    uint64_t len = strsz - idx < sizeof buf ? strsz - idx : sizeof buf;
    if (!read_at(e, buf, len, stroff + idx)) /* stroff + strsz <= size: checked */
        return "is truncated or corrupt (dynamic string table)";
    if (!memchr(buf, '\0', (size_t)len))
        return len == sizeof buf ? "has a dynamic string (library name or search path) longer than 4096 bytes"
                                 : "is truncated or corrupt (a dynamic string is not terminated)";
    *out = strdup(buf);
    return *out ? NULL : "cannot be checked (out of memory)";
}

struct dyn_scan {
    uint64_t strtab, strsz;
    unsigned nstrtab, nstrsz;
    struct sq_dyn_string *refs; /* value: NULL; index in `idx` */
    uint64_t *idx;
    size_t nrefs;
};

/* Walk the entries up to DT_NULL, noting the string table and the strings
 * the loader will use to find libraries. */
static const char *scan_dynamic(const ElfW(Dyn) *d, size_t n, struct dyn_scan *s)
{
    for (size_t i = 0; i < n; i++) {
        switch (d[i].d_tag) {
        case DT_NULL:
            return NULL;
        case DT_STRTAB:
            s->strtab = d[i].d_un.d_ptr;
            s->nstrtab++;
            break;
        case DT_STRSZ:
            s->strsz = d[i].d_un.d_val;
            s->nstrsz++;
            break;
        case DT_NEEDED:
        case DT_RPATH:
        case DT_RUNPATH:
            s->refs[s->nrefs].tag = d[i].d_tag;
            s->idx[s->nrefs++] = d[i].d_un.d_val;
            break;
        default:
            break;
        }
    }
    return "is truncated or corrupt (the dynamic section has no end)";
}

static const char *resolve_strings(struct sq_elf *e, struct dyn_scan *s)
{
    if (s->nrefs == 0)
        return NULL;
    uint64_t stroff;
    if (s->nstrtab != 1 || s->nstrsz != 1 || !addr_to_offset(e, s->strtab, s->strsz, &stroff))
        return "is truncated or corrupt (dynamic string table)";
    for (size_t i = 0; i < s->nrefs; i++) {
        const char *why = dyn_string(e, stroff, s->strsz, s->idx[i], &s->refs[i].value);
        if (why)
            return why;
    }
    return NULL;
}

/* The plugin's DT_NEEDED, DT_RPATH and DT_RUNPATH strings, into e->strings. */
static const char *elf_dynamic(struct sq_elf *e)
{
    const char *why = NULL;
    const ElfW(Phdr) *dyn = dynamic_segment(e, &why);
    if (!dyn)
        return why; /* none: the loader refuses the file itself, cleanly */
    uint64_t off;
    if (dyn->p_filesz < sizeof(ElfW(Dyn)) || dyn->p_filesz > SQ_MAX_DYNAMIC ||
        !addr_to_offset(e, dyn->p_vaddr, dyn->p_filesz, &off))
        return "is truncated or corrupt (dynamic section)";
    size_t n = (size_t)dyn->p_filesz / sizeof(ElfW(Dyn));
    ElfW(Dyn) *d = calloc(n, sizeof *d);
    struct dyn_scan s = {.refs = calloc(n, sizeof *s.refs), .idx = calloc(n, sizeof *s.idx)};
    e->strings = s.refs;
    if (!d || !s.refs || !s.idx)
        why = "cannot be checked (out of memory)";
    else if (!read_at(e, d, n * sizeof *d, off))
        why = "is truncated or corrupt (dynamic section)";
    else if (!(why = scan_dynamic(d, n, &s))) {
        e->nstrings = s.nrefs; /* values still NULL are freed as NULL */
        why = resolve_strings(e, &s);
    }
    free(d);
    free(s.idx);
    return why;
}

/*
 * NULL if the file looks loadable (and e->strings holds what the loader
 * will search with), else why not. The caller frees e with elf_free.
 */
static const char *elf_problem(struct sq_elf *e)
{
    ElfW(Ehdr) eh;
    const char *why = elf_header(e, &eh);
    if (!why)
        why = elf_segments(e, &eh);
    if (!why)
        why = elf_dynamic(e);
    return why;
}

/* The ELF check alone, for tests/fuzz: see plugin.h. */
const char *sq_plugin_elf_check(int fd)
{
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
        return "cannot be read";
    struct sq_elf e = {.fd = fd, .size = (uint64_t)st.st_size};
    const char *why = elf_problem(&e);
    elf_free(&e);
    return why;
}

/* ---- where the loader will look for the plugin's libraries ----------------------------- */

/*
 * dlopen loads the plugin's DT_NEEDED libraries, and runs their
 * constructors, from the directories of LD_LIBRARY_PATH and of the
 * plugin's DT_RPATH and DT_RUNPATH before the system's; so those
 * directories (and any copy of a needed library found in them) follow the
 * rules above. Not checked: what those libraries need in turn, and the
 * loader's hardware subdirectories of each (glibc-hwcaps/..., tls/...): they
 * can only exist if root or skipq's user made them in a directory nobody
 * else can write.
 *
 * $ORIGIN is the directory of the name given to dlopen: plugins are loaded
 * as /proc/self/fd/N, so the loader expands it to /proc/self/fd, and so do
 * we. $LIB and $PLATFORM depend on the C library's build: refused.
 */
static const char ORIGIN_DIR[] = "/proc/self/fd";

/* Length of the dynamic string token `ref` at s ("$NAME" or "${NAME}",
 * after the $), or 0, as glibc's loader reads them. */
static size_t dst_len(const char *s, const char *ref)
{
    size_t n = strlen(ref);
    if (*s == '{')
        return strncmp(s + 1, ref, n) == 0 && s[n + 1] == '}' ? n + 2 : 0;
    if (strncmp(s, ref, n) != 0 || isalnum((unsigned char)s[n]) || s[n] == '_')
        return 0;
    return n;
}

/* One search path entry as the loader will use it: $ORIGIN expanded,
 * relative (and empty) entries taken from the working directory. */
static bool expand_entry(const struct walk *w, const char *entry, char *out, size_t outlen, char *err,
                         size_t errlen)
{
    size_t o = 0;
    if (entry[0] != '/') {
        if (!getcwd(out, outlen))
            return refuse(w, err, errlen, "it is relative, and the working directory is unknown: %s", strerror(errno));
        o = strlen(out);
        if (o + 1 >= outlen)
            return refuse(w, err, errlen, "%s", strerror(ENAMETOOLONG));
        out[o++] = '/';
    }
    for (const char *s = entry; *s; s++) {
        size_t n = 0;
        const char *add = NULL;
        if (*s == '$' && ((n = dst_len(s + 1, "LIB")) || (n = dst_len(s + 1, "PLATFORM"))))
            return refuse(w, err, errlen, "it uses %.*s, whose value depends on the C library's build; use a "
                                          "path without it", (int)n + 1, s);
        if (*s == '$' && (n = dst_len(s + 1, "ORIGIN")) != 0)
            add = ORIGIN_DIR;
        size_t len = add ? strlen(add) : 1;
        if (o + len >= outlen)
            return refuse(w, err, errlen, "%s", strerror(ENAMETOOLONG));
        memcpy(out + o, add ? add : s, len);
        o += len;
        s += n;
    }
    out[o] = '\0';
    return true;
}

/* A library the loader could pick: checked if it is there. */
static bool check_library(struct walk *w, const char *path, char *err, size_t errlen)
{
    struct stat st;
    w->final_dir = false;
    if (!walk_path(w, path, err, errlen))
        return false;
    if (w->missing || lstat(w->resolved, &st) != 0 || !S_ISREG(st.st_mode))
        return true; /* nothing the loader could load */
    const char *why = unsafe_reason(&st, SQ_FILE);
    return why ? refuse(w, err, errlen, "library %s %s", w->resolved, why) : true;
}

/* One entry of a search path: the directory, then each needed library in it. */
static bool check_entry(struct walk *w, const char *entry, const struct sq_elf *e, char *err, size_t errlen)
{
    char dir[PATH_MAX], resolved[PATH_MAX], lib[PATH_MAX];
    w->via[0] = '\0';
    if (!expand_entry(w, entry, dir, sizeof dir, err, errlen))
        return false;
    w->final_dir = true;
    if (!walk_path(w, dir, err, errlen))
        return false;
    if (w->missing)
        return true;
    sq_strlcpy(resolved, w->resolved, sizeof resolved);
    for (size_t i = 0; i < e->nstrings; i++) {
        const char *name = e->strings[i].value;
        if (e->strings[i].tag != DT_NEEDED || strchr(name, '/'))
            continue;
        if ((size_t)snprintf(lib, sizeof lib, "%s/%s", resolved, name) >= sizeof lib)
            return refuse(w, err, errlen, "%s/%s: %s", resolved, name, strerror(ENAMETOOLONG));
        if (!check_library(w, lib, err, errlen))
            return false;
    }
    return true;
}

/* Every entry of a colon-separated list (`what` names it in messages). */
static bool check_search_path(struct walk *w, const char *what, const char *list, const char *seps,
                              const struct sq_elf *e, char *err, size_t errlen)
{
    char label[PATH_MAX + 64];
    const char *s = list;
    for (;;) {
        size_t n = strcspn(s, seps);
        char entry[PATH_MAX];
        bool ok = n < sizeof entry;
        memcpy(entry, s, ok ? n : 0);
        entry[ok ? n : 0] = '\0';
        snprintf(label, sizeof label, "%s entry \"%s\"", what, entry);
        w->entry = label;
        ok = ok ? check_entry(w, entry, e, err, errlen) : refuse(w, err, errlen, "%s", strerror(ENAMETOOLONG));
        w->entry = NULL;
        if (!ok)
            return false;
        if (!s[n])
            return true;
        s += n + 1;
    }
}

/* A DT_NEEDED name with a slash is opened as it stands. */
static bool check_needed_path(struct walk *w, const char *lib, char *err, size_t errlen)
{
    char label[PATH_MAX + 64], path[PATH_MAX];
    snprintf(label, sizeof label, "needed library \"%s\"", lib);
    w->entry = label;
    bool ok = expand_entry(w, lib, path, sizeof path, err, errlen) && check_library(w, path, err, errlen);
    w->entry = NULL;
    return ok;
}

/* Everything the loader will search for the plugin's libraries. */
static bool check_library_paths(const char *name, const char *path, const struct sq_elf *e, char *err,
                                size_t errlen)
{
    struct walk w = {.name = name, .shown = path, .search = true};
    const char *env = getenv("LD_LIBRARY_PATH");
    bool needs = false;
    for (size_t i = 0; i < e->nstrings; i++)
        needs |= e->strings[i].tag == DT_NEEDED;
    if (needs && env && *env && !check_search_path(&w, "LD_LIBRARY_PATH", env, ":;", e, err, errlen))
        return false;
    for (size_t i = 0; i < e->nstrings; i++) {
        const struct sq_dyn_string *s = &e->strings[i];
        bool ok = true;
        if (s->tag == DT_RPATH || s->tag == DT_RUNPATH)
            ok = check_search_path(&w, s->tag == DT_RPATH ? "RPATH" : "RUNPATH", s->value, ":", e, err, errlen);
        else if (strchr(s->value, '/'))
            ok = check_needed_path(&w, s->value, err, errlen);
        if (!ok)
            return false;
    }
    return true;
}

static bool uses_origin(const struct sq_elf *e)
{
    for (size_t i = 0; i < e->nstrings; i++)
        if (e->strings[i].tag != DT_NEEDED &&
            (strstr(e->strings[i].value, "$ORIGIN") || strstr(e->strings[i].value, "${ORIGIN}")))
            return true;
    return false;
}

/* ---- opening --------------------------------------------------------------------------- */

static const char *file_type(mode_t mode)
{
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "a device";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISLNK(mode))
        return "a symbolic link";
    return "not a file";
}

/*
 * Open the resolved plugin path for reading without ever blocking on it: an
 * O_PATH descriptor first (which opens nothing), refused unless it is a
 * regular file; then the file itself through that descriptor, non-blocking.
 * A FIFO or a device is refused before it is opened.
 */
static int open_regular(const struct walk *w, const char *path, struct stat *st, char *err, size_t errlen)
{
    char fdpath[64];
    int pfd = open(path, O_PATH | O_NOFOLLOW | O_CLOEXEC), fd = -1;
    if (pfd < 0 || fstat(pfd, st) != 0)
        goto fail;
    if (!S_ISREG(st->st_mode)) {
        snprintf(err, errlen, "refusing to load plugin \"%s\": %s is not a regular file (it is %s)", w->name, path,
                 file_type(st->st_mode));
        close(pfd);
        return -1;
    }
    snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", pfd);
    fd = open(fdpath, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 || fcntl(fd, F_SETFL, 0) != 0 || fstat(fd, st) != 0 || !S_ISREG(st->st_mode))
        goto fail;
    close(pfd);
    return fd;
fail:
    snprintf(err, errlen, "cannot load plugin \"%s\" from %s: %s", w->name, path, strerror(errno));
    if (fd >= 0)
        close(fd);
    if (pfd >= 0)
        close(pfd);
    return -1;
}

/*
 * Open the plugin for loading; -1 (message in err) if missing or unsafe.
 * *resolved receives the path without symbolic links (malloc'd), for
 * messages; *origin whether its search path uses $ORIGIN.
 */
static int open_checked(const char *config_path, const struct sq_plugin_conf *pc, char **resolved, bool *origin,
                        char *err, size_t errlen)
{
    char shown[PATH_MAX];
    if (!absolute_path(config_path, pc->path, shown, sizeof shown)) {
        snprintf(err, errlen, "cannot load plugin \"%s\" from %s: %s", pc->name, pc->path, strerror(ENAMETOOLONG));
        return -1;
    }
    struct walk w = {.name = pc->name, .shown = shown};
    if (!walk_path(&w, shown, err, errlen))
        return -1;
    if (!(*resolved = strdup(w.resolved))) {
        snprintf(err, errlen, "plugin \"%s\": out of memory", pc->name);
        return -1;
    }
    struct stat st;
    int fd = open_regular(&w, *resolved, &st, err, errlen);
    if (fd < 0)
        return -1;
    const char *why = unsafe_reason(&st, SQ_FILE);
    struct sq_elf e = {.fd = fd, .size = (uint64_t)st.st_size};
    bool ok = false;
    if (why)
        snprintf(err, errlen, "refusing to load plugin \"%s\": %s %s", pc->name, *resolved, why);
    else if ((why = elf_problem(&e)) != NULL)
        snprintf(err, errlen, "cannot load plugin \"%s\" from %s: the file %s", pc->name, *resolved, why);
    else
        ok = check_library_paths(pc->name, *resolved, &e, err, errlen);
    *origin = ok && uses_origin(&e);
    elf_free(&e);
    if (!ok) {
        close(fd);
        return -1;
    }
    return fd;
}

/* ---- loading ------------------------------------------------------------------ */

static bool start_one(struct sq_plugins *ps, struct sq_loaded_plugin *lp, const skipq_plugin_info *info, char *err,
                      size_t errlen);

static bool load_one(struct sq_plugins *ps, struct sq_loaded_plugin *lp, const char *config_path, char *err,
                     size_t errlen)
{
    const char *name = lp->conf->name;
    bool origin = false;
    int fd = open_checked(config_path, lp->conf, &lp->path, &origin, err, errlen);
    if (fd < 0)
        return false;
    char fdpath[64];
    snprintf(fdpath, sizeof fdpath, "/proc/self/fd/%d", fd);
    dlerror();
    lp->dl = dlopen(fdpath, RTLD_NOW | RTLD_LOCAL);
    lp->fd = fd;
    if (!lp->dl) {
        const char *e = dlerror();
        size_t fl = strlen(fdpath);
        if (e && strncmp(e, fdpath, fl) == 0 && e[fl] == ':')
            e += fl + 2; /* the loader names the descriptor: the path is named already */
        snprintf(err, errlen, "cannot load plugin \"%s\" from %s: %s%s%s", name, lp->path, e ? e : "unknown error",
                 origin ? " (its RUNPATH or RPATH uses $ORIGIN, which the loader expands to /proc/self/fd, since "
                          "skipq loads plugins through their open descriptor: use absolute directories)"
                        : "",
                 e && strstr(e, "undefined symbol") ? " (the plugin uses a symbol no library it links provides: link "
                                                      "it with the library that defines it, e.g. -lcurl, and check "
                                                      "with `ldd -r` on the .so)"
                 : e && strstr(e, "cannot open shared object") ? " (a library the plugin needs is not installed or "
                                                                 "not on the loader's path: see `ldd` on the .so)"
                                                               : "");
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
    return start_one(ps, lp, describe(), err, errlen);
}

/* The descriptor checked, the declared keys checked, init run. */
static bool start_one(struct sq_plugins *ps, struct sq_loaded_plugin *lp, const skipq_plugin_info *info, char *err,
                      size_t errlen)
{
    const char *name = lp->conf->name;
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
    /* A 1.0 descriptor ends before config_keys; a 1.1 one has it. */
    size_t need = info->abi_minor >= 1 ? sizeof(skipq_plugin_info) : offsetof(skipq_plugin_info, config_keys);
    if (info->struct_size < need || !info->init) {
        snprintf(err, errlen, "plugin \"%s\" (%s) has an incomplete descriptor (%s)", name, lp->path,
                 info->init ? "shorter than its ABI version's" : "no init function");
        return false;
    }
    lp->info = info;
    lp->keys = info->abi_minor >= 1 ? info->config_keys : NULL;
    if (!sq_plugin_keys_check(name, lp->keys, lp->conf, lp->cfg_path, err, errlen))
        return false;
    ps->reg_err[0] = '\0';
    int rc = info->init(&lp->pub);
    lp->initialised = rc == 0; /* a failed init cleans up after itself */
    if (lp->cfg_err[0]) { /* the plugin's own word on its section */
        snprintf(err, errlen, "%s", lp->cfg_err);
        return false;
    }
    if (rc != 0) {
        snprintf(err, errlen, "plugin \"%s\" (%s) failed to initialise (init returned %d)%s%s", name, lp->path, rc,
                 ps->reg_err[0] ? ": " : "", ps->reg_err);
        return false;
    }
    if (ps->reg_err[0]) {
        snprintf(err, errlen, "%s", ps->reg_err);
        return false;
    }
    log_info("loaded plugin \"%s\" (%s %s) from %s (ABI %u.%u, %s)", name, info->name ? info->name : "?",
             info->version ? info->version : "", lp->path, info->abi_major, info->abi_minor,
             lp->keys ? "declared keys checked" : "keys passed through unchecked");
    return true;
}

static int cmp_handler(const void *a, const void *b)
{
    return strcmp(((const struct sq_handler *)a)->kind, ((const struct sq_handler *)b)->kind);
}

/*
 * The loader reads these at start-up, for the host and every plugin alike.
 * LD_LIBRARY_PATH's directories are checked with each plugin's search
 * path; what LD_PRELOAD and LD_AUDIT name is already loaded. Running as
 * root with any of them set deserves a word in the log.
 */
static void warn_loader_environment(void)
{
    static const char *const vars[] = {"LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT"};
    if (geteuid() != 0)
        return;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v)
            log_warn("%s is set (%s) and skipq runs as root: the dynamic loader loads the host's and the plugins' "
                     "code from there first; unset it unless you mean it", vars[i], v);
    }
}

static struct sq_plugins *load_all(const struct sq_config *cfg, const skipq_plugin_info *given, char *err,
                                   size_t errlen);

struct sq_plugins *sq_plugins_load(const struct sq_config *cfg, char *err, size_t errlen)
{
    return load_all(cfg, NULL, err, errlen);
}

struct sq_plugins *sq_plugins_load_described(const struct sq_plugin_conf *pc, const char *cfg_path,
                                             const skipq_plugin_info *info, char *err, size_t errlen)
{
    struct sq_config cfg = {.path = (char *)cfg_path, .plugins = (struct sq_plugin_conf *)pc, .nplugins = 1};
    return load_all(&cfg, info, err, errlen);
}

/* Every [plugin] of cfg, from its file; or the one plugin `given` is the
 * descriptor of, already linked into the process (the test kit). */
static struct sq_plugins *load_all(const struct sq_config *cfg, const skipq_plugin_info *given, char *err,
                                   size_t errlen)
{
    struct sq_plugins *ps = calloc(1, sizeof *ps);
    if (!ps || !(ps->list = calloc(cfg->nplugins ? cfg->nplugins : 1, sizeof *ps->list))) {
        free(ps);
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    if (cfg->nplugins && !given)
        warn_loader_environment();
    for (size_t i = 0; i < cfg->nplugins; i++) {
        struct sq_loaded_plugin *lp = &ps->list[i];
        lp->pub.api = &sq_host_api;
        lp->owner = ps;
        lp->conf = &cfg->plugins[i];
        lp->cfg_path = cfg->path;
        lp->fd = -1;
        ps->n++;
        if (given && !(lp->path = strdup("(linked into the program)"))) {
            snprintf(err, errlen, "out of memory");
            goto fail;
        }
        if (given ? !start_one(ps, lp, given, err, errlen) : !load_one(ps, lp, cfg->path, err, errlen))
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

bool sq_plugins_check_config(const struct sq_plugins *ps, const struct sq_config *cfg, char *err, size_t errlen)
{
    for (size_t i = 0; i < ps->n; i++) {
        const struct sq_loaded_plugin *lp = &ps->list[i];
        for (size_t j = 0; j < cfg->nplugins; j++)
            if (strcmp(cfg->plugins[j].name, lp->conf->name) == 0 &&
                !sq_plugin_keys_check(lp->conf->name, lp->keys, &cfg->plugins[j], cfg->path, err, errlen))
                return false;
    }
    return true;
}

size_t sq_plugins_count(const struct sq_plugins *ps)
{
    return ps->n;
}

const skipq_plugin_info *sq_plugins_info(const struct sq_plugins *ps, size_t i)
{
    return ps->list[i].info;
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
