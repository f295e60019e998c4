/*
 * test_plugin_safety.c -- what the plugin loader refuses before dlopen can
 * run anyone's code: a path that is not a regular file (a FIFO would block
 * the host for ever), a symbolic link in a directory others can write, a
 * RUNPATH or RPATH (or LD_LIBRARY_PATH) into such a directory, and ELF files
 * crafted to make the check itself misbehave. Each refusal must name the
 * plugin, the path and what exactly is wrong; each safe variant must load.
 *
 * The tests run as root, like the rest of the suite: the "owned by another
 * user" cases chown to uid 4242. Everything here is in-process (no
 * database; ctest label nodb); the two cases run through `skipq run` are
 * in test_plugin_run.c.
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/config.h"
#include "harness.h"
#include "host/plugin.h"

#define PLUGIN(name) SKIPQ_PLUGIN_DIR "/" name ".so"
#define FIXTURE(name) SKIPQ_FIXTURE_DIR "/" name ".so"
#define RPATH_DIR SKIPQ_FIXTURE_DIR "/rpath"

/* Load one plugin in-process; NULL if it loaded (then unloaded), else the
 * error (malloc'd). */
static char *load_error(const char *name, const char *path, const char *kind)
{
    char text[1024], err[2048] = "";
    snprintf(text, sizeof text, "[plugin %s]\npath = %s\n", name, path);
    char *ini = th_write_file("plugin.ini", text);
    struct sq_config *cfg = sq_config_load(ini, err, sizeof err);
    cr_assert_not_null(cfg, "config refused: %s", err);
    struct sq_plugins *ps = sq_plugins_load(cfg, err, sizeof err);
    if (ps && kind)
        cr_expect_not_null(sq_plugins_find(ps, kind), "plugin %s loaded without kind %s", name, kind);
    sq_plugins_unload(ps);
    sq_config_free(cfg);
    free(ini);
    return ps ? NULL : strdup(err);
}

/* The plugin must be refused, the error holding every needle. */
static void expect_refused(const char *name, const char *path, const char *const *needles)
{
    char *err = load_error(name, path, NULL);
    cr_assert_not_null(err, "plugin %s (%s) loaded but must be refused", name, path);
    char quoted[200];
    snprintf(quoted, sizeof quoted, "\"%s\"", name);
    cr_expect_not_null(strstr(err, quoted), "error does not name the plugin: %s", err);
    for (; *needles; needles++)
        cr_expect_not_null(strstr(err, *needles), "error \"%s\" does not mention \"%s\"", err, *needles);
    free(err);
}

static void expect_loads(const char *name, const char *path, const char *kind)
{
    char *err = load_error(name, path, kind);
    cr_expect_null(err, "plugin %s (%s) refused: %s", name, path, err);
    free(err);
}

/* A copy of the noop plugin at dir/noop.so (dir made 0755 if new). */
static const char *noop_in(const char *dir)
{
    th_sh("mkdir -p '%s' && cp '%s' '%s/noop.so' && chmod 0755 '%s/noop.so'", dir, PLUGIN("noop"), dir, dir);
    static char path[8][700];
    static int next;
    char *p = path[next++ % 8];
    snprintf(p, sizeof path[0], "%s/noop.so", dir);
    return p;
}

/* ---- finding 11: never block on a path ---------------------------------------------- */

Test(plugin_safety, devices_directories_and_sockets_are_not_plugins, .timeout = 30)
{
    const char *dev[] = {"not a regular file (it is a device)", NULL};
    expect_refused("dev", "/dev/null", dev);
    th_sh("mkdir -p '%s'", th_tmp_path("dir.so"));
    const char *dir[] = {th_tmp_path("dir.so"), "not a regular file (it is a directory)", NULL};
    expect_refused("dir", th_tmp_path("dir.so"), dir);
}

/* ---- finding 12: every directory of the configured path -------------------------------- */

Test(plugin_safety, a_symlink_in_a_world_writable_directory_is_refused_naming_it, .timeout = 30)
{
    const char *good = noop_in(th_tmp_path("safe"));
    th_sh("mkdir -p '%s' && chmod 0777 '%s' && ln -s '%s' '%s/link.so'", th_tmp_path("open"), th_tmp_path("open"), good,
          th_tmp_path("open"));
    char dir[800];
    snprintf(dir, sizeof dir, "directory %s is a directory writable by group or others", th_tmp_path("open"));
    const char *needles[] = {"refusing to load plugin", th_tmp_path("open/link.so"), dir, NULL};
    expect_refused("linked", th_tmp_path("open/link.so"), needles);
    /* the same target, linked from a safe directory, loads */
    th_sh("mkdir -p '%s' && ln -s '%s' '%s/link.so'", th_tmp_path("links"), good, th_tmp_path("links"));
    expect_loads("linked", th_tmp_path("links/link.so"), "noop");
}

Test(plugin_safety, a_symlink_in_a_safe_directory_to_a_safe_plugin_loads, .timeout = 30)
{
    const char *good = noop_in(th_tmp_path("a/b/lib"));
    th_sh("mkdir -p '%s' && ln -s '%s' '%s/noop.so'", th_tmp_path("c"), good, th_tmp_path("c"));
    expect_loads("noop", th_tmp_path("c/noop.so"), "noop");
    /* a relative link, through "..", and a link to a directory */
    th_sh("ln -s ../a/b/lib/noop.so '%s/rel.so' && ln -s ../a/b '%s/dirlink'", th_tmp_path("c"), th_tmp_path("c"));
    expect_loads("noop", th_tmp_path("c/rel.so"), "noop");
    expect_loads("noop", th_tmp_path("c/dirlink/lib/../lib/noop.so"), "noop");
}

Test(plugin_safety, a_symlinked_directory_is_checked_where_it_points, .timeout = 30)
{
    noop_in(th_tmp_path("open2"));
    th_sh("chmod 0777 '%s' && mkdir -p '%s' && ln -s '%s' '%s/lib'", th_tmp_path("open2"), th_tmp_path("safe"),
          th_tmp_path("open2"), th_tmp_path("safe"));
    char dir[800], via[800];
    snprintf(dir, sizeof dir, "directory %s is a directory writable by group or others", th_tmp_path("open2"));
    snprintf(via, sizeof via, "reached through the symbolic link %s", th_tmp_path("safe/lib"));
    const char *needles[] = {dir, via, NULL};
    expect_refused("through", th_tmp_path("safe/lib/noop.so"), needles);
}

Test(plugin_safety, a_world_writable_directory_left_through_dotdot_is_still_checked, .timeout = 30)
{
    /* open3/sub/../../safe3/noop.so passes through open3, where anyone can
     * swap "sub" for a symbolic link that sends "../.." anywhere */
    noop_in(th_tmp_path("safe3"));
    th_sh("mkdir -p '%s/sub' && chmod 0777 '%s'", th_tmp_path("open3"), th_tmp_path("open3"));
    char dir[800];
    snprintf(dir, sizeof dir, "directory %s is a directory writable by group or others", th_tmp_path("open3"));
    const char *needles[] = {dir, NULL};
    expect_refused("dotdot", th_tmp_path("open3/sub/../../safe3/noop.so"), needles);
}

Test(plugin_safety, a_symlink_owned_by_another_user_is_refused, .timeout = 30)
{
    const char *good = noop_in(th_tmp_path("safe"));
    th_sh("mkdir -p '%s' && ln -s '%s' '%s/theirs.so'", th_tmp_path("links"), good, th_tmp_path("links"));
    cr_assert_eq(lchown(th_tmp_path("links/theirs.so"), 4242, 4242), 0);
    char link[800];
    snprintf(link, sizeof link, "symbolic link %s is owned by another user", th_tmp_path("links/theirs.so"));
    const char *needles[] = {link, NULL};
    expect_refused("theirs", th_tmp_path("links/theirs.so"), needles);
}

Test(plugin_safety, a_directory_owned_by_another_user_on_the_way_is_refused, .timeout = 30)
{
    noop_in(th_tmp_path("theirs/lib"));
    cr_assert_eq(chown(th_tmp_path("theirs"), 4242, 4242), 0);
    char dir[800];
    snprintf(dir, sizeof dir, "directory %s is owned by another user", th_tmp_path("theirs"));
    const char *needles[] = {dir, NULL};
    expect_refused("owned", th_tmp_path("theirs/lib/noop.so"), needles);
}

/* ---- finding 13: the plugin's library search path ------------------------------------- */

Test(plugin_safety, a_runpath_into_a_world_writable_directory_is_refused, .timeout = 30)
{
    th_rpath_dirs();
    const char *needles[] = {FIXTURE("rpath_open"), "RUNPATH entry \"" RPATH_DIR "/open\"",
                             "directory " RPATH_DIR "/open is a directory writable by group or others", NULL};
    expect_refused("open", FIXTURE("rpath_open"), needles);
    cr_expect_null(getenv("SKIPQ_SQDEP_LOADED"), "the library's constructor ran");
}

Test(plugin_safety, an_rpath_into_a_world_writable_directory_is_refused, .timeout = 30)
{
    th_rpath_dirs();
    const char *needles[] = {FIXTURE("rpath_old"), "RPATH entry \"" RPATH_DIR "/open\"",
                             "directory " RPATH_DIR "/open is a directory writable by group or others", NULL};
    expect_refused("old", FIXTURE("rpath_old"), needles);
    cr_expect_null(getenv("SKIPQ_SQDEP_LOADED"), "the library's constructor ran");
}

Test(plugin_safety, a_runpath_to_a_safe_directory_loads_its_library, .timeout = 30)
{
    th_rpath_dirs();
    expect_loads("safe", FIXTURE("rpath_safe"), "rpath");
    cr_expect_str_eq(getenv("SKIPQ_SQDEP_LOADED") ? getenv("SKIPQ_SQDEP_LOADED") : "", "1");
}

Test(plugin_safety, a_writable_library_in_a_safe_runpath_directory_is_refused, .timeout = 30)
{
    th_rpath_dirs();
    const char *needles[] = {"RUNPATH entry \"" RPATH_DIR "/loose\"",
                             "library " RPATH_DIR "/loose/libsqdep.so is writable by group or others", NULL};
    expect_refused("loose", FIXTURE("rpath_loose"), needles);
    cr_expect_null(getenv("SKIPQ_SQDEP_LOADED"), "the library's constructor ran");
}

Test(plugin_safety, lib_and_platform_in_a_runpath_are_refused, .timeout = 30)
{
    th_rpath_dirs();
    const char *needles[] = {"RUNPATH entry \"" RPATH_DIR "/$LIB\"", "it uses $LIB, whose value depends on the C library", NULL};
    expect_refused("lib", FIXTURE("rpath_lib"), needles);
}

Test(plugin_safety, origin_in_a_runpath_is_the_descriptor_directory_and_the_error_says_so, .timeout = 30)
{
    th_rpath_dirs();
    const char *needles[] = {"libsqdep.so", "$ORIGIN", "/proc/self/fd", NULL};
    expect_refused("origin", FIXTURE("rpath_origin"), needles);
}

Test(plugin_safety, ld_library_path_directories_follow_the_same_rules, .timeout = 30)
{
    th_rpath_dirs();
    th_sh("mkdir -p '%s' '%s/lib' && chmod 0777 '%s' && chmod 1777 '%s'", th_tmp_path("ld-open"), th_tmp_path("sticky"),
          th_tmp_path("ld-open"), th_tmp_path("sticky"));
    char entry[800], dir[800];
    setenv("LD_LIBRARY_PATH", th_tmp_path("ld-open"), 1);
    snprintf(entry, sizeof entry, "LD_LIBRARY_PATH entry \"%s\"", th_tmp_path("ld-open"));
    snprintf(dir, sizeof dir, "directory %s is a directory writable by group or others", th_tmp_path("ld-open"));
    const char *open[] = {entry, dir, NULL};
    expect_refused("safe", FIXTURE("rpath_safe"), open);

    /* sticky is no excuse in a search directory: anyone may add a library */
    setenv("LD_LIBRARY_PATH", th_tmp_path("sticky"), 1);
    snprintf(dir, sizeof dir, "directory %s is a directory writable by group or others", th_tmp_path("sticky"));
    const char *sticky[] = {dir, NULL};
    expect_refused("safe", FIXTURE("rpath_safe"), sticky);

    /* a directory that does not exist, where others could create it */
    char missing[800];
    snprintf(missing, sizeof missing, "%s/nothing/lib", th_tmp_path("sticky"));
    setenv("LD_LIBRARY_PATH", missing, 1);
    snprintf(dir, sizeof dir, "%s/nothing does not exist, and directory %s, where it could be created",
             th_tmp_path("sticky"), th_tmp_path("sticky"));
    const char *absent[] = {dir, NULL};
    expect_refused("safe", FIXTURE("rpath_safe"), absent);

    /* ... and one nobody else could create, and an empty entry (the working
     * directory, here /) are fine */
    snprintf(missing, sizeof missing, "%s/nothing:%s/lib:", th_tmp_path("safe"), th_tmp_path("sticky"));
    setenv("LD_LIBRARY_PATH", missing, 1);
    cr_assert_eq(chdir("/"), 0);
    expect_loads("safe", FIXTURE("rpath_safe"), "rpath");
}

/* ---- finding 20: crafted ELF files -------------------------------------------------------- */

/* Every .so in dir but valid-*: refused as truncated or corrupt. */
static int expect_all_corrupt(const char *dir)
{
    DIR *d = opendir(dir);
    cr_assert_not_null(d, "cannot read %s", dir);
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        size_t len = strlen(e->d_name);
        if (len < 4 || strcmp(e->d_name + len - 3, ".so") != 0 || strncmp(e->d_name, "valid-", 6) == 0)
            continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        char *err = load_error("crafted", path, NULL);
        cr_expect_not_null(err, "%s loaded", e->d_name);
        if (err) {
            cr_expect_not_null(strstr(err, "truncated or corrupt"), "%s: %s", e->d_name, err);
            cr_expect_not_null(strstr(err, path), "%s: %s", e->d_name, err);
        }
        free(err);
        n++;
    }
    closedir(d);
    return n;
}

Test(plugin_safety, crafted_elf_headers_are_refused_as_truncated_or_corrupt, .timeout = 60)
{
    /* variants of this build's seed plugin, made now */
    th_sh("mkdir -p '%s' && '%s' '%s' '%s' > /dev/null", th_tmp_path("crafted"), SKIPQ_ELF_SEEDS, FIXTURE("elf_seed"),
          th_tmp_path("crafted"));
    int made = expect_all_corrupt(th_tmp_path("crafted"));
    cr_expect_geq(made, 40, "only %d variants", made);
    /* and the corpus kept for the fuzzer (copied: the source tree's
     * directories need not pass the loader's rules) */
    th_sh("mkdir -p '%s' && cp '%s'/tests/fuzz/corpus/plugin_elf/*.so '%s'", th_tmp_path("corpus"), SKIPQ_SOURCE_DIR,
          th_tmp_path("corpus"));
    cr_expect_geq(expect_all_corrupt(th_tmp_path("corpus")), 40);
}
