/*
 * test_plugin.c -- the plugin loader, in-process through sq_plugins_load()
 * (no database; ctest label nodb): good plugins load and register their
 * kinds; every kind of bad plugin is refused with a message naming the
 * plugin, the path and the reason. The same refusals end to end, through
 * `skipq run`, are in test_plugin_run.c.
 */
#include <criterion/criterion.h>
#include <limits.h>
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

static struct sq_config *config_from(const char *file, const char *text)
{
    char *path = th_write_file(file, text);
    char err[1024];
    struct sq_config *cfg = sq_config_load(path, err, sizeof err);
    cr_assert_not_null(cfg, "config %s refused: %s", path, err);
    free(path);
    return cfg;
}

/* The path as the loader reports it (resolved, when it exists). */
static void shown_path(const char *path, char *out, size_t len)
{
    char *real = realpath(path, NULL);
    snprintf(out, len, "%s", real ? real : path);
    free(real);
}

/* sq_plugins_load must refuse `text`; the error must contain every needle. */
static void expect_refused(const char *file, const char *text, const char *const *needles)
{
    struct sq_config *cfg = config_from(file, text);
    char err[1024] = "";
    struct sq_plugins *ps = sq_plugins_load(cfg, err, sizeof err);
    cr_assert_null(ps, "plugins loaded but should have been refused:\n%s", text);
    cr_assert(err[0], "refused without a message");
    for (; *needles; needles++)
        cr_expect_not_null(strstr(err, *needles), "error \"%s\" does not mention \"%s\"", err, *needles);
    sq_config_free(cfg);
}

/* ---- in-process: sq_plugins_load ------------------------------------------------ */

Test(plugin, good_plugins_load_and_register_their_kinds, .timeout = 60)
{
    struct sq_config *cfg = config_from("good.ini", "[plugin testkit]\n"
                                                    "path = " PLUGIN("testkit") "\n"
                                                    "kinds = test, test.other\n"
                                                    "[plugin noop]\n"
                                                    "path = " PLUGIN("noop") "\n");
    char err[1024] = "";
    struct sq_plugins *ps = sq_plugins_load(cfg, err, sizeof err);
    cr_assert_not_null(ps, "load failed: %s", err);

    const struct sq_handler *h = sq_plugins_find(ps, "test");
    cr_assert_not_null(h, "kind \"test\" not found");
    cr_expect_str_eq(h->kind, "test");
    cr_expect_not_null(h->fn);
    cr_expect_str_eq(sq_handler_plugin_name(h), "testkit");
    h = sq_plugins_find(ps, "test.other");
    cr_assert_not_null(h, "kind \"test.other\" not found");
    cr_expect_str_eq(sq_handler_plugin_name(h), "testkit");
    h = sq_plugins_find(ps, "noop");
    cr_assert_not_null(h, "kind \"noop\" not found");
    cr_expect_str_eq(sq_handler_plugin_name(h), "noop");
    cr_expect_null(sq_plugins_find(ps, "tes"));
    cr_expect_null(sq_plugins_find(ps, "nobody"));

    const char *const *kinds;
    size_t n = sq_plugins_kinds(ps, &kinds);
    cr_assert_eq(n, 3);
    cr_expect_str_eq(kinds[0], "noop");
    cr_expect_str_eq(kinds[1], "test");
    cr_expect_str_eq(kinds[2], "test.other");
    sq_plugins_unload(ps);
    sq_config_free(cfg);
}

Test(plugin, plugin_keys_reach_init, .timeout = 60)
{
    struct sq_config *cfg = config_from("kind.ini", "[plugin noop]\npath = " PLUGIN("noop") "\nkind = noop.custom\n");
    char err[1024] = "";
    struct sq_plugins *ps = sq_plugins_load(cfg, err, sizeof err);
    cr_assert_not_null(ps, "load failed: %s", err);
    cr_expect_not_null(sq_plugins_find(ps, "noop.custom"));
    cr_expect_null(sq_plugins_find(ps, "noop"));
    sq_plugins_unload(ps);
    sq_config_free(cfg);
}

Test(plugin, relative_path_is_relative_to_the_ini_file, .timeout = 60)
{
    char dir[600], link[700];
    snprintf(dir, sizeof dir, "%s/lib", th_tmpdir());
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(link, sizeof link, "%s/noop.so", dir);
    cr_assert_eq(symlink(PLUGIN("noop"), link), 0);
    struct sq_config *cfg = config_from("rel.ini", "[plugin noop]\npath = lib/noop.so\n");
    cr_assert_eq(chdir("/"), 0);
    char err[1024] = "";
    struct sq_plugins *ps = sq_plugins_load(cfg, err, sizeof err);
    cr_assert_not_null(ps, "load failed: %s", err);
    cr_expect_not_null(sq_plugins_find(ps, "noop"));
    sq_plugins_unload(ps);
    sq_config_free(cfg);
}

Test(plugin, bad_abi_is_refused_naming_both_versions, .timeout = 60)
{
    char p[PATH_MAX];
    shown_path(FIXTURE("bad_abi"), p, sizeof p);
    const char *needles[] = {"\"future\"", p, "2.3", "1.1", NULL};
    expect_refused("abi.ini", "[plugin future]\npath = " FIXTURE("bad_abi") "\n", needles);
}

Test(plugin, a_plugin_built_for_a_newer_minor_is_refused_naming_both_versions, .timeout = 60)
{
    char p[PATH_MAX];
    shown_path(FIXTURE("abi12"), p, sizeof p);
    const char *needles[] = {"\"newer\"", p, "ABI 1.2", "this host provides ABI 1.1", NULL};
    expect_refused("abi12.ini", "[plugin newer]\npath = " FIXTURE("abi12") "\n", needles);
}

Test(plugin, shared_object_without_descriptor_is_refused, .timeout = 60)
{
    char p[PATH_MAX];
    shown_path(FIXTURE("no_symbol"), p, sizeof p);
    const char *needles[] = {"\"nosym\"", p, "skipq_plugin_describe", NULL};
    expect_refused("nosym.ini", "[plugin nosym]\npath = " FIXTURE("no_symbol") "\n", needles);
}

Test(plugin, text_file_named_so_is_refused, .timeout = 60)
{
    char *fake = th_write_file("fake.so", "this is a text file, not a shared object\n");
    char p[PATH_MAX];
    shown_path(fake, p, sizeof p);
    char text[1024];
    snprintf(text, sizeof text, "[plugin fake]\npath = %s\n", fake);
    const char *needles[] = {"\"fake\"", p, NULL};
    expect_refused("fake.ini", text, needles);
    free(fake);
}

Test(plugin, truncated_plugin_is_refused, .timeout = 60)
{
    char *whole = th_read_file(PLUGIN("testkit"));
    char path[600];
    snprintf(path, sizeof path, "%s/truncated.so", th_tmpdir());
    FILE *f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(whole, 1, 1000, f), 1000);
    fclose(f);
    free(whole);
    char p[PATH_MAX];
    shown_path(path, p, sizeof p);
    char text[1024];
    snprintf(text, sizeof text, "[plugin cut]\npath = %s\n", path);
    const char *needles[] = {"\"cut\"", p, NULL};
    expect_refused("cut.ini", text, needles);
}

Test(plugin, missing_plugin_file_is_refused, .timeout = 60)
{
    char path[600];
    snprintf(path, sizeof path, "%s/nowhere/gone.so", th_tmpdir());
    char text[1024];
    snprintf(text, sizeof text, "[plugin gone]\npath = %s\n", path);
    const char *needles[] = {"\"gone\"", path, NULL};
    expect_refused("gone.ini", text, needles);
}

Test(plugin, kind_registered_by_two_plugins_is_refused, .timeout = 60)
{
    /* dup_kind ignores its section's keys and registers "test" (ignoring
     * the status, returning 0); the kinds key there would only matter if
     * testkit's code ran for the dupper section */
    const char *needles[] = {"kind \"test\" is registered twice", "\"testkit\"", "\"dupper\"", NULL};
    expect_refused("dup1.ini",
                   "[plugin testkit]\npath = " PLUGIN("testkit") "\nkinds = other, test\n"
                   "[plugin dupper]\npath = " FIXTURE("dup_kind") "\nkinds = other\n",
                   needles);
}

Test(plugin, kind_registered_by_two_plugins_is_refused_in_either_order, .timeout = 60)
{
    /* now testkit's init fails on the clash and returns its status */
    char p[PATH_MAX];
    shown_path(PLUGIN("testkit"), p, sizeof p);
    const char *needles[] = {"kind \"test\" is registered twice", "\"testkit\"", "\"dupper\"",
                             "failed to initialise", p, NULL};
    expect_refused("dup2.ini",
                   "[plugin dupper]\npath = " FIXTURE("dup_kind") "\n"
                   "[plugin testkit]\npath = " PLUGIN("testkit") "\nkinds = other, test\n",
                   needles);
}

Test(plugin, kind_registered_twice_by_one_plugin_is_refused, .timeout = 60)
{
    const char *needles[] = {"\"dup.self\"", "\"selfish\"", "twice", NULL};
    expect_refused("dupself.ini", "[plugin selfish]\npath = " FIXTURE("dup_self") "\n", needles);
}

Test(plugin, init_failure_is_refused, .timeout = 60)
{
    char p[PATH_MAX];
    shown_path(FIXTURE("init_fails"), p, sizeof p);
    const char *needles[] = {"\"broken\"", p, "failed to initialise", "returned 1", NULL};
    expect_refused("initfail.ini", "[plugin broken]\npath = " FIXTURE("init_fails") "\n", needles);
}

Test(plugin, second_plugin_is_its_own_code, .timeout = 60)
{
    /* whatever the first plugin was, the second one's descriptor is checked:
     * a bad plugin after a good one is still refused for its own fault */
    char p[PATH_MAX];
    shown_path(FIXTURE("bad_abi"), p, sizeof p);
    const char *needles[] = {"\"future\"", p, "2.3", "1.1", NULL};
    expect_refused("second.ini",
                   "[plugin noop]\npath = " PLUGIN("noop") "\n"
                   "[plugin future]\npath = " FIXTURE("bad_abi") "\n",
                   needles);
}

Test(plugin, init_failure_after_a_good_plugin_is_refused, .timeout = 60)
{
    char p[PATH_MAX];
    shown_path(FIXTURE("init_fails"), p, sizeof p);
    const char *needles[] = {"\"broken\"", p, "failed to initialise", "returned 1", NULL};
    expect_refused("initfail2.ini",
                   "[plugin noop]\npath = " PLUGIN("noop") "\n"
                   "[plugin broken]\npath = " FIXTURE("init_fails") "\n",
                   needles);
}

Test(plugin, refusal_leaves_nothing_behind, .timeout = 60)
{
    /* a refused load unloads what it had loaded; loading again starts clean */
    struct sq_config *bad = config_from("bad.ini", "[plugin testkit]\npath = " PLUGIN("testkit") "\n"
                                                   "[plugin future]\npath = " FIXTURE("bad_abi") "\n");
    char err[1024] = "";
    cr_assert_null(sq_plugins_load(bad, err, sizeof err));
    sq_config_free(bad);
    struct sq_config *good = config_from("again.ini", "[plugin testkit]\npath = " PLUGIN("testkit") "\n");
    struct sq_plugins *ps = sq_plugins_load(good, err, sizeof err);
    cr_assert_not_null(ps, "second load failed: %s", err);
    const char *const *kinds;
    cr_expect_eq(sq_plugins_kinds(ps, &kinds), 1);
    cr_expect_not_null(sq_plugins_find(ps, "test"));
    sq_plugins_unload(ps);
    sq_config_free(good);
}
