/*
 * test_layout.c -- the shape of core/, checked on the source: the layers
 * (common < client < host < kit < cli < web; cli/main.c, the entry point, above
 * them all) are only ever included downwards or across, no two modules include each other round a cycle, every .c has
 * its own .h, a header declares only what its own .c defines, and the
 * services beside the host's runtime reach its state through the accessors
 * of host/state.h. No database needed.
 *
 * A module is a .c and its .h (core/host/worker.c and .h); module A
 * depends on module B when A's .c or .h includes B's .h.
 */
#include <criterion/criterion.h>
#include <ctype.h>
#include <dirent.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"

#define MAX_FILES 256
#define MAX_INCLUDES 64

static const char *const LAYERS[] = {"common", "client", "host", "kit", "cli", "web"};
#define NLAYERS (sizeof LAYERS / sizeof LAYERS[0])

/* .c files with no header of their own, and why. */
static const char *const NO_HEADER[] = {
    "cli/main.c",     /* the program's entry point */
    "client/client.c", /* libskipq: declared in include/skipq/skipq.h */
    "client/copy.c",   /* the same */
    "client/version.c", /* libskipq: declared in include/skipq/version.h */
    "kit/plugin_test.c", /* libskipq_plugin_test: declared in include/skipq/plugin_test.h */
};

/* Declarations whose definition is generated at build time, not in the
 * header's own .c. */
static const char *const GENERATED[][2] = {
    {"client/migrate.h", "sq_migrations"},      /* migrations.c, made from sql/ */
    {"client/migrate.h", "sq_migration_count"}, /* the same */
    {"web/assets.h", "sq_web_assets"},          /* web_assets.c, made from web/assets/ */
    {"web/assets.h", "sq_web_asset_count"},     /* the same */
};

/* Files that use the host's state only through state.h's accessors. */
static const char *const SERVICES[] = {"host/metrics.c", "host/hosts.c", "host/scheduler.c", "host/listen.c",
                                       "host/reload.c"};

struct file {
    char path[128]; /* relative to core/: host/worker.c */
    char *text;     /* comments and string literals blanked */
    char includes[MAX_INCLUDES][128];
    int nincludes;
};

static struct file files[MAX_FILES];
static int nfiles;

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert_not_null(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    cr_assert_not_null(s);
    cr_assert_eq(fread(s, 1, (size_t)n, f), (size_t)n);
    s[n] = '\0';
    fclose(f);
    return s;
}

/* Blank comments and the insides of string and character literals (keeping
 * newlines), so what is left is code. */
static void blank(char *s)
{
    for (char *p = s; *p; p++) {
        if (p[0] == '/' && p[1] == '*') {
            char *e = strstr(p + 2, "*/");
            e = e ? e + 2 : p + strlen(p);
            for (; p < e; p++)
                if (*p != '\n')
                    *p = ' ';
            p--;
        } else if (p[0] == '/' && p[1] == '/') {
            for (; *p && *p != '\n'; p++)
                *p = ' ';
            p--;
        } else if (*p == '"' || *p == '\'') {
            char q = *p++;
            for (; *p && *p != q && *p != '\n'; p++) {
                if (*p == '\\' && p[1])
                    *p++ = ' ';
                *p = ' ';
            }
            if (!*p)
                return;
        }
    }
}

static void read_includes(struct file *f, const char *raw)
{
    for (const char *l = raw; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
        if (strncmp(l, "#include \"", 10) != 0)
            continue;
        const char *e = strchr(l + 10, '"');
        cr_assert(f->nincludes < MAX_INCLUDES && e && e - (l + 10) < 128);
        snprintf(f->includes[f->nincludes++], 128, "%.*s", (int)(e - (l + 10)), l + 10);
    }
}

static void load(void)
{
    if (nfiles)
        return;
    for (size_t d = 0; d < NLAYERS; d++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/core/%s", SKIPQ_SOURCE_DIR, LAYERS[d]);
        DIR *dh = opendir(dir);
        cr_assert_not_null(dh, "cannot open %s", dir);
        struct dirent *de;
        while ((de = readdir(dh))) {
            size_t n = strlen(de->d_name);
            if (n < 3 || de->d_name[n - 2] != '.' || (de->d_name[n - 1] != 'c' && de->d_name[n - 1] != 'h'))
                continue;
            cr_assert(nfiles < MAX_FILES);
            struct file *f = &files[nfiles++];
            snprintf(f->path, sizeof f->path, "%s/%s", LAYERS[d], de->d_name);
            char full[768];
            snprintf(full, sizeof full, "%s/%s", dir, de->d_name);
            char *raw = read_all(full);
            read_includes(f, raw);
            blank(raw);
            f->text = raw;
        }
        closedir(dh);
    }
    cr_assert_gt(nfiles, 20, "found only %d files under core/", nfiles);
}

static struct file *find(const char *path)
{
    for (int i = 0; i < nfiles; i++)
        if (strcmp(files[i].path, path) == 0)
            return &files[i];
    return NULL;
}

static int layer_of(const char *path)
{
    for (size_t d = 0; d < NLAYERS; d++)
        if (strncmp(path, LAYERS[d], strlen(LAYERS[d])) == 0 && path[strlen(LAYERS[d])] == '/')
            return (int)d;
    return -1;
}

/* "host/worker.c" -> "host/worker" */
/* Files that are one concept in two modules, and why: counted as one
 * module when looking for cycles. */
static const char *const ONE_CONCEPT[][2] = {
    /* the option table describes struct sq_config's fields (offsetof), and
     * the parser walks the table: the INI file's one concept */
    {"common/options", "common/config"},
};

static void module_of(const char *path, char *out, size_t len)
{
    snprintf(out, len, "%.*s", (int)(strrchr(path, '.') - path), path);
    for (size_t i = 0; i < sizeof ONE_CONCEPT / sizeof ONE_CONCEPT[0]; i++)
        if (strcmp(out, ONE_CONCEPT[i][0]) == 0)
            snprintf(out, len, "%s", ONE_CONCEPT[i][1]);
}

Test(layout, every_include_points_down_the_layers_or_within_its_own)
{
    load();
    for (int i = 0; i < nfiles; i++) {
        int mine = layer_of(files[i].path);
        if (strcmp(files[i].path, "cli/main.c") == 0)
            mine = (int)NLAYERS - 1; /* the program's entry point: every command, the dashboard's too */
        for (int k = 0; k < files[i].nincludes; k++) {
            const char *inc = files[i].includes[k];
            if (strncmp(inc, "skipq/", 6) == 0)
                continue; /* the public headers, under every layer */
            int theirs = layer_of(inc);
            cr_expect_geq(theirs, 0, "%s includes \"%s\", which is in no layer of core/", files[i].path, inc);
            cr_expect_leq(theirs, mine, "%s includes \"%s\": %s is above %s", files[i].path, inc,
                          theirs >= 0 ? LAYERS[theirs] : "?", LAYERS[mine]);
        }
    }
}

/* ---- cycles ------------------------------------------------------------------------- */

static char modules[MAX_FILES][128];
static int nmodules;
static bool edge[MAX_FILES][MAX_FILES];

static int module_index(const char *m)
{
    for (int i = 0; i < nmodules; i++)
        if (strcmp(modules[i], m) == 0)
            return i;
    snprintf(modules[nmodules], sizeof modules[0], "%s", m);
    return nmodules++;
}

/* Depth-first; on a cycle, `path` holds it. 0 unseen, 1 on the stack, 2 done. */
static bool cyclic(int m, char *state, int *stack, int depth, char *path, size_t len)
{
    state[m] = 1;
    stack[depth] = m;
    for (int n = 0; n < nmodules; n++) {
        if (!edge[m][n])
            continue;
        if (state[n] == 1) {
            size_t o = 0;
            int from = depth;
            while (stack[from] != n)
                from--;
            for (int i = from; i <= depth; i++)
                o += (size_t)snprintf(path + o, len - o, "%s -> ", modules[stack[i]]);
            snprintf(path + o, len - o, "%s", modules[n]);
            return true;
        }
        if (state[n] == 0 && cyclic(n, state, stack, depth + 1, path, len))
            return true;
    }
    state[m] = 2;
    return false;
}

Test(layout, no_two_modules_include_each_other_round_a_cycle)
{
    load();
    for (int i = 0; i < nfiles; i++) {
        char a[128], b[128];
        module_of(files[i].path, a, sizeof a);
        int from = module_index(a);
        for (int k = 0; k < files[i].nincludes; k++) {
            if (layer_of(files[i].includes[k]) < 0)
                continue;
            module_of(files[i].includes[k], b, sizeof b);
            int to = module_index(b);
            if (to != from)
                edge[from][to] = true;
        }
    }
    char state[MAX_FILES] = {0}, path[2048] = "";
    int stack[MAX_FILES];
    for (int m = 0; m < nmodules; m++)
        if (state[m] == 0)
            cr_assert_not(cyclic(m, state, stack, 0, path, sizeof path), "include cycle: %s", path);
}

/* ---- headers ------------------------------------------------------------------------ */

Test(layout, every_c_file_has_its_own_header)
{
    load();
    for (int i = 0; i < nfiles; i++) {
        const char *p = files[i].path;
        if (p[strlen(p) - 1] != 'c')
            continue;
        bool exempt = false;
        for (size_t e = 0; e < sizeof NO_HEADER / sizeof NO_HEADER[0]; e++)
            exempt = exempt || strcmp(p, NO_HEADER[e]) == 0;
        char h[128];
        snprintf(h, sizeof h, "%.*sh", (int)strlen(p) - 1, p);
        if (!exempt)
            cr_expect_not_null(find(h), "%s has no header of its own (%s)", p, h);
    }
}

/* The names a header declares at file scope: functions (the identifier
 * before the first '(' of a statement with no body) and extern variables. */
static int declared_names(const char *text, char names[][64], int max)
{
    int n = 0, depth = 0;
    const char *stmt = text;
    for (const char *p = text; *p; p++) {
        if (*p == '#' && (p == text || p[-1] == '\n')) { /* a directive, with its continuations */
            while (*p && !(*p == '\n' && p[-1] != '\\'))
                p++;
            stmt = p + (*p != '\0');
            if (!*p)
                break;
            continue;
        }
        if (*p == '{')
            depth++;
        else if (*p == '}')
            depth--;
        if (depth != 0 || (*p != ';' && *p != '}'))
            continue;
        const char *open = memchr(stmt, '(', (size_t)(p - stmt));
        const char *start = stmt + strspn(stmt, " \n\t");
        bool ext = strncmp(start, "extern ", 7) == 0, type = strncmp(start, "typedef ", 8) == 0;
        const char *e = open;
        if (!open && ext) { /* extern T name; or extern T name[N]; */
            const char *bracket = memchr(stmt, '[', (size_t)(p - stmt));
            e = bracket ? bracket : p;
        }
        if (e && *p == ';' && !type) {
            while (e > stmt && isspace((unsigned char)e[-1]))
                e--;
            const char *b = e;
            while (b > stmt && (isalnum((unsigned char)b[-1]) || b[-1] == '_'))
                b--;
            if (e > b && n < max && b[-1] != '(') /* not a pointer to function: (*fn)(...) */
                snprintf(names[n++], 64, "%.*s", (int)(e - b), b);
        }
        stmt = p + 1;
    }
    return n;
}

/* Does `text` define `name`: a function body, or a variable's initialiser? */
static bool defines(const char *text, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = strstr(text, name); p; p = strstr(p + 1, name)) {
        if ((p > text && (isalnum((unsigned char)p[-1]) || p[-1] == '_')) || isalnum((unsigned char)p[len]) ||
            p[len] == '_')
            continue;
        const char *q = p + len;
        if (*q == '(') { /* a function: its parameters, then a body */
            int d = 0;
            for (; *q; q++) {
                d += *q == '(' ? 1 : *q == ')' ? -1 : 0;
                if (d == 0)
                    break;
            }
            q += *q != '\0';
            q += strspn(q, " \n\t");
            if (*q == '{')
                return true;
        } else { /* a variable: [size] = ... */
            q += strspn(q, " \n\t");
            if (*q == '[')
                q = strchr(q, ']') ? strchr(q, ']') + 1 : q;
            q += strspn(q, " \n\t");
            if (*q == '=')
                return true;
        }
    }
    return false;
}

static bool generated(const char *header, const char *name)
{
    for (size_t g = 0; g < sizeof GENERATED / sizeof GENERATED[0]; g++)
        if (strcmp(GENERATED[g][0], header) == 0 && strcmp(GENERATED[g][1], name) == 0)
            return true;
    return false;
}

Test(layout, a_header_declares_only_what_its_own_c_file_defines)
{
    load();
    int checked = 0;
    for (int i = 0; i < nfiles; i++) {
        const char *p = files[i].path;
        if (p[strlen(p) - 1] != 'h')
            continue;
        char c[128];
        snprintf(c, sizeof c, "%.*sc", (int)strlen(p) - 1, p);
        struct file *src = find(c);
        if (!src && strcmp(p, "web/assets.h") == 0)
            continue; /* its .c is generated from web/assets/ (GENERATED) */
        cr_expect_not_null(src, "%s has no .c of its own (%s)", p, c);
        if (!src)
            continue;
        char names[128][64];
        int n = declared_names(files[i].text, names, 128);
        for (int k = 0; k < n; k++, checked++)
            cr_expect(defines(src->text, names[k]) || generated(p, names[k]),
                      "%s declares %s, which %s does not define", p, names[k], c);
    }
    cr_assert_gt(checked, 100, "only %d declarations found: the parser is off", checked);
}

/* ---- the host's state ---------------------------------------------------------------- */

Test(layout, the_services_beside_the_runtime_use_the_hosts_accessors)
{
    load();
    for (size_t s = 0; s < sizeof SERVICES / sizeof SERVICES[0]; s++) {
        struct file *f = find(SERVICES[s]);
        cr_assert_not_null(f, "%s is gone: update SERVICES", SERVICES[s]);
        for (const char *p = strstr(f->text, "h->"); p; p = strstr(p + 1, "h->")) {
            if (p > f->text && (isalnum((unsigned char)p[-1]) || p[-1] == '_') && p[-1] != '>')
                continue; /* another variable ending in h: ch->, sh-> */
            int line = 1;
            for (const char *q = f->text; q < p; q++)
                line += *q == '\n';
            cr_expect_fail("%s:%d: reads struct sq_host's %.20s directly; use an accessor of host/state.h",
                           SERVICES[s], line, p + 3);
        }
    }
}
