#!/usr/bin/env bash
# check_package.sh -- the Debian package, end to end, as a user gets it
# (ctest -L package; run by scripts/test.sh in the release build):
#   1. build it (scripts/package.sh: prefix /usr, hardening flags, cpack);
#   2. its contents (dpkg-deb -c) and control files: every installed path,
#      never testkit, the conffile, the maintainer scripts, the dependencies
#      dpkg-shlibdeps found; lintian with no error; apt resolves its
#      dependencies (apt-get install --simulate);
#   3. unpack it into a staged root (dpkg -x) and use only that root from
#      then on: man pages render without warnings and `man skipq` finds its
#      page; the out-of-tree template, copied out of the staged
#      share/doc/skipq/template, builds with make and pkg-config and with
#      CMake find_package, and its own tests pass with the installed test
#      kit and no database (`make check`, the CMake `check` target); a
#      client program builds against skipq.pc and skipq::client and runs;
#   4. the staged skipq migrates a fresh database on $SKIPQ_TEST_DB (a
#      keyword conninfo, as scripts/pg.sh prints); `skipq exec` runs one
#      job of each installed example plugin (noop; txn_note and ledger with
#      --db, rolled back and committed; webhook against a local HTTP
#      endpoint this script starts); a host started from the staged binary
#      runs a job through the template plugin and one through an installed
#      example plugin; then a host on the installed skipq.ini (plugin paths
#      mapped into the staged root) runs a job of the installed txn_note.so.
#      (Bad input to `skipq exec` -- missing file, wrong ABI, unknown kind,
#      invalid JSON: exit 2 -- is the exec suite's, tests/test_exec.c.)
#
#   tests/check_package.sh WORK_DIR
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
work=${1:?usage: check_package.sh WORK_DIR}
fail() { echo "check_package: $*" >&2; exit 1; }
step() { echo "check_package: $* ($((SECONDS))s)"; }
for tool in dpkg-deb dpkg-shlibdeps lintian fakeroot man pkg-config make psql python3; do
    command -v "$tool" >/dev/null || fail "$tool is missing: scripts/deps.sh installs it"
done
[ -n "${SKIPQ_TEST_DB:-}" ] || fail "SKIPQ_TEST_DB names no server (scripts/pg.sh start prints one)"
mkdir -p "$work"
work=$(cd "$work" && pwd)
ma=$(dpkg-architecture -qDEB_HOST_MULTIARCH)

# ---- 1. build ---------------------------------------------------------------------------------
step "building the package"
deb=$("$src/scripts/package.sh" "$work/build" | tail -1)
[ -f "$deb" ] || fail "scripts/package.sh made no .deb"

# ---- 2. contents, control files, lintian ------------------------------------------------------
step "checking $(basename "$deb")"
dpkg-deb -c "$deb" | awk '{print $6}' | sed 's|^\./||; /\/$/d' | sort >"$work/contents"
version=$(dpkg-deb -f "$deb" Version)
want=(usr/bin/skipq
      "usr/lib/$ma/libskipq.so" "usr/lib/$ma/libskipq.so.0" "usr/lib/$ma/libskipq.so.$version"
      "usr/lib/$ma/libskipq_plugin_test.so" "usr/lib/$ma/libskipq_plugin_test.so.0"
      "usr/lib/$ma/libskipq_plugin_test.so.$version"
      usr/include/skipq/skipq.h usr/include/skipq/plugin.h usr/include/skipq/version.h usr/include/skipq/export.h
      usr/include/skipq/plugin_test.h
      "usr/lib/$ma/skipq/noop.so" "usr/lib/$ma/skipq/txn_note.so" "usr/lib/$ma/skipq/webhook.so"
      "usr/lib/$ma/skipq/ledger.so"
      "usr/lib/$ma/pkgconfig/skipq.pc" "usr/lib/$ma/pkgconfig/skipq-plugin.pc" "usr/lib/$ma/pkgconfig/skipq-plugin-test.pc"
      "usr/lib/$ma/cmake/skipq/skipqConfig.cmake" "usr/lib/$ma/cmake/skipq/skipqConfigVersion.cmake"
      "usr/lib/$ma/cmake/skipq/skipqTargets.cmake"
      usr/share/skipq/sql/001_schema.sql usr/share/skipq/sql/roles.sql
      usr/share/man/man1/skipq.1.gz usr/share/man/man5/skipq.ini.5.gz usr/share/man/man7/skipq-plugin.7.gz
      usr/share/doc/skipq/copyright usr/share/doc/skipq/changelog.gz usr/share/doc/skipq/README.md
      usr/share/doc/skipq/template/CMakeLists.txt usr/share/doc/skipq/template/Makefile
      usr/share/doc/skipq/template/hello.c usr/share/doc/skipq/template/test_hello.c
      etc/skipq/skipq.ini lib/systemd/system/skipq.service)
for f in "${want[@]}"; do grep -qx "$f" "$work/contents" || fail "the package has no $f"; done
! grep -E 'testkit|/fixtures/|\.a$|/usr/local/' "$work/contents" || fail "the package holds files it must not (above)"
n_sql=$(grep -c '^usr/share/skipq/sql/[0-9][0-9][0-9]_.*\.sql$' "$work/contents")
n_src=$(ls "$src"/sql/[0-9][0-9][0-9]_*.sql | wc -l)
[ "$n_sql" = "$n_src" ] || fail "the package has $n_sql migrations, sql/ has $n_src"
rm -rf "$work/control" && dpkg-deb -e "$deb" "$work/control"
grep -qx /etc/skipq/skipq.ini "$work/control/conffiles" || fail "/etc/skipq/skipq.ini is no conffile"
grep -q 'adduser --system' "$work/control/postinst" || fail "postinst creates no system user"
! grep -q 'systemctl.*enable\|deb-systemd-helper enable' "$work/control/postinst" ||
    fail "postinst enables the unit; it must only be installed"
grep -q 'activate-noawait ldconfig' "$work/control/triggers" || fail "no ldconfig trigger"
depends=$(dpkg-deb -f "$deb" Depends)
# libcurl4 is webhook.so's: found by dpkg-shlibdeps in the plugin, never listed by hand.
for d in adduser libc6 libpq5 libinih1 libmicrohttpd12 libsystemd0 libjson-c5 libcurl4; do
    [[ $depends == *"$d"* ]] || fail "Depends lacks $d: $depends"
done
# lintian as an ordinary user when we are root (it says so otherwise).
lint=(lintian --fail-on error --display-info)
if [ "$(id -u)" = 0 ] && command -v runuser >/dev/null && id nobody >/dev/null 2>&1; then
    cp "$deb" "$work/lint.deb" && chmod 0644 "$work/lint.deb"
    (cd /tmp && runuser -u nobody -- env HOME=/tmp "${lint[@]}" "$work/lint.deb") || fail "lintian reports errors"
else
    "${lint[@]}" "$deb" || fail "lintian reports errors"
fi
apt-get install --simulate --no-install-recommends "$deb" >"$work/apt.log" 2>&1 ||
    { cat "$work/apt.log" >&2; fail "apt-get cannot install $deb here"; }

# ---- 3. the staged root: man pages, the template, a client program ------------------------------
step "unpacking into a staged root"
root="$work/root"
rm -rf "$root" && mkdir -p "$root" && dpkg -x "$deb" "$root"
for page in man1/skipq.1 man5/skipq.ini.5 man7/skipq-plugin.7; do
    warn=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$root/usr/share/man/$page.gz" 2>&1 >/dev/null || echo "man failed")
    [ -z "$warn" ] || fail "$page: $warn"
done
[ "$(MANPATH="$root/usr/share/man" man -w skipq)" = "$root/usr/share/man/man1/skipq.1.gz" ] ||
    fail "man skipq finds no page in the staged root"
LC_ALL=C.UTF-8 MANPATH="$root/usr/share/man" man skipq 2>/dev/null | grep -q 'skipq run' || fail "man skipq has no skipq run"

export PKG_CONFIG_PATH="$root/usr/lib/$ma/pkgconfig"
[ "$(pkg-config --variable=abi skipq-plugin)" = "$("$root/usr/bin/skipq" version | sed -n 's/.*plugin ABI \([0-9.]*\).*/\1/p')" ] ||
    fail "skipq-plugin.pc's abi is not the one skipq version prints"
step "building the template with make and pkg-config"
rm -rf "$work/tpl-make" "$work/tpl-cmake" && cp -r "$root/usr/share/doc/skipq/template" "$work/tpl-make"
cp -r "$root/usr/share/doc/skipq/template" "$work/tpl-cmake"
make -s -C "$work/tpl-make" >"$work/make.log" 2>&1 || { cat "$work/make.log" >&2; fail "make in the template failed"; }
make -s -C "$work/tpl-make" install DESTDIR="$work/tpl-make/dest" >>"$work/make.log" 2>&1 || fail "make install failed"
[ -f "$work/tpl-make/dest/$root/usr/lib/$ma/skipq/hello.so" ] || fail "make install put hello.so elsewhere"
exported=$(nm -D --defined-only "$work/tpl-make/hello.so" | awk '{print $3}' | sort | tr '\n' ' ')
[ "$exported" = "skipq_plugin_describe " ] || fail "hello.so exports more than its descriptor: $exported"
# Its own tests, with the staged test kit and no database to reach.
nodb=(env -u SKIPQ_TEST_DB -u PGHOST -u PGPORT -u PGDATABASE -u DATABASE_URL PGHOST=/nonexistent)
"${nodb[@]}" make -s -C "$work/tpl-make" check >"$work/check.log" 2>&1 ||
    { cat "$work/check.log" >&2; fail "make check in the template failed"; }
grep -q "test_hello: all passed" "$work/check.log" || { cat "$work/check.log" >&2; fail "make check ran no test_hello"; }
step "building the template with CMake find_package"
cmake -S "$work/tpl-cmake" -B "$work/tpl-cmake/build" -DCMAKE_PREFIX_PATH="$root/usr" >"$work/cmake.log" 2>&1 &&
    cmake --build "$work/tpl-cmake/build" >>"$work/cmake.log" 2>&1 || { cat "$work/cmake.log" >&2; fail "the template's CMake build failed"; }
found=$(sed -n 's/^skipq_DIR:PATH=//p' "$work/tpl-cmake/build/CMakeCache.txt")
[ "$found" = "$root/usr/lib/$ma/cmake/skipq" ] || fail "find_package(skipq) found $found, not the staged root's"
exported=$(nm -D --defined-only "$work/tpl-cmake/build/hello.so" | awk '{print $3}' | sort | tr '\n' ' ')
[ "$exported" = "skipq_plugin_describe " ] || fail "the CMake hello.so exports more than its descriptor: $exported"
"${nodb[@]}" cmake --build "$work/tpl-cmake/build" --target check >>"$work/cmake.log" 2>&1 ||
    { cat "$work/cmake.log" >&2; fail "the template's CMake check failed"; }
grep -q "100% tests passed, 0 tests failed out of 1" "$work/cmake.log" || { cat "$work/cmake.log" >&2; fail "the CMake check ran no test"; }
# Both test programs ran the staged root's kit, not one elsewhere on the machine.
for t in "$work/tpl-make/test_hello" "$work/tpl-cmake/build/test_hello"; do
    kit=$(ldd "$t" | awk '/libskipq_plugin_test/ {print $3}')
    [ -n "$kit" ] && [ "$(realpath "$kit")" = "$(realpath "$root/usr/lib/$ma/libskipq_plugin_test.so.0")" ] ||
        fail "$t runs with the kit at '$kit', not the staged root's"
done

step "building a client program with skipq.pc and skipq::client"
mkdir -p "$work/client"
cc -std=c17 -Wall -Werror $(pkg-config --cflags skipq) "$src/tests/client_link.c" -o "$work/client/pc" \
    $(pkg-config --libs skipq) || fail "a client program does not build with pkg-config skipq"
LD_LIBRARY_PATH="$root/usr/lib/$ma" "$work/client/pc" >/dev/null || fail "the pkg-config client does not run"
cat >"$work/client/CMakeLists.txt" <<EOF
cmake_minimum_required(VERSION 3.16)
project(client_link LANGUAGES C)
find_package(skipq $version EXACT REQUIRED)
add_executable(client_link $src/tests/client_link.c)
target_link_libraries(client_link PRIVATE skipq::client)
EOF
cmake -S "$work/client" -B "$work/client/build" -DCMAKE_PREFIX_PATH="$root/usr" >"$work/client.log" 2>&1 &&
    cmake --build "$work/client/build" >>"$work/client.log" 2>&1 || { cat "$work/client.log" >&2; fail "skipq::client does not build"; }
LD_LIBRARY_PATH="$root/usr/lib/$ma" "$work/client/build/client_link" >/dev/null || fail "the skipq::client program does not run"

# ---- 4. a host from the staged root runs jobs -------------------------------------------------
skipq="$root/usr/bin/skipq"
db="skipq_package_$$"
admin=(psql "$SKIPQ_TEST_DB" -X -q -v ON_ERROR_STOP=1)
host=""
sink=""
cleanup() {
    if [ -n "$host" ]; then kill -TERM "$host" 2>/dev/null || true; wait "$host" 2>/dev/null || true; fi
    if [ -n "$sink" ]; then kill -TERM "$sink" 2>/dev/null || true; wait "$sink" 2>/dev/null || true; fi
    "${admin[@]}" -c "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true
}
trap cleanup EXIT
"${admin[@]}" -c "CREATE DATABASE $db" >/dev/null
conn="$SKIPQ_TEST_DB dbname=$db"
step "a host from the staged root"
"$skipq" migrate --db "$conn" >/dev/null || fail "the staged skipq cannot migrate"
# The installed configuration names the installed example plugins.
grep -qx "path = /usr/lib/$ma/skipq/noop.so" "$root/etc/skipq/skipq.ini" ||
    fail "the installed skipq.ini does not name the installed noop.so"
# The plugin guide's webhook section names where the package puts webhook.so.
guide="$root/usr/share/doc/skipq/docs/plugins.md"
grep -q "^ *path = /usr/lib/$ma/skipq/webhook.so$" "$guide" ||
    fail "the installed plugins.md's [plugin webhook] path is not /usr/lib/$ma/skipq/webhook.so"

# `skipq exec`: one job of each installed example plugin, in this process.
# exec_ok NAME PLUGIN KIND PAYLOAD [OPTIONS...]: exit 0 and "outcome:  done".
exec_ok() {
    local name=$1 so="$root/usr/lib/$ma/skipq/$2.so" kind=$3 payload=$4
    shift 4
    local rc=0
    "$skipq" exec "$@" "$so" "$kind" "$payload" >"$work/exec-$name.log" 2>&1 || rc=$?
    [ $rc = 0 ] && grep -q '^outcome:  done$' "$work/exec-$name.log" ||
        { cat "$work/exec-$name.log" >&2; fail "skipq exec $so $kind: exit $rc, not done"; }
}
step "skipq exec: noop, txn_note, ledger, webhook"
user=(psql "$conn" -X -q -v ON_ERROR_STOP=1)
"${user[@]}" -c "CREATE TABLE public.skipq_notes (job_id bigint, execution_id bigint, note text)" \
    -c "CREATE TABLE public.skipq_ledger (job_id bigint PRIMARY KEY, account text NOT NULL,
        amount_cents bigint NOT NULL, currency text NOT NULL, memo text)"
exec_ok noop noop noop '{}'
exec_ok txn_note txn_note note.write '{"note": "rolled back"}' --db "$conn"
grep -q "rolled back" "$work/exec-txn_note.log" || fail "skipq exec --db did not say the transaction was rolled back"
[ "$("${user[@]}" -At -c "SELECT count(*) FROM public.skipq_notes")" = 0 ] || fail "skipq exec --db left a note behind"
exec_ok ledger ledger ledger.post '{"account": "acme", "amount_cents": 1250, "currency": "EUR"}' --db "$conn" --commit
[ "$("${user[@]}" -At -c "SELECT account || ' ' || amount_cents || ' ' || currency FROM public.skipq_ledger")" = \
  "acme 1250 EUR" ] || fail "skipq exec --commit ledger.so wrote no row"
# webhook against a local endpoint that takes POSTs (http.server's own
# handler answers GET only): it keeps the last body and answers 200.
cat >"$work/sink.py" <<'PY'
import http.server, sys
class Sink(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        with open(sys.argv[1], "wb") as f:
            f.write(body)
        self.send_response(200)
        self.send_header("Content-Length", "8")
        self.end_headers()
        self.wfile.write(b"received")
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", 0), Sink)
with open(sys.argv[2], "w") as f:
    f.write(str(server.server_address[1]))
server.serve_forever()
PY
rm -f "$work/sink.port" "$work/sink.body"
python3 "$work/sink.py" "$work/sink.body" "$work/sink.port" &
sink=$!
deadline=$((SECONDS + 10))
until [ -s "$work/sink.port" ]; do
    kill -0 "$sink" 2>/dev/null && [ $SECONDS -lt $deadline ] || fail "the local HTTP endpoint did not start"
    sleep 0.1
done
body='{"event":"paid","id":42}'
exec_ok webhook webhook webhook \
    "{\"url\": \"http://127.0.0.1:$(cat "$work/sink.port")/hook\", \"body\": \"${body//\"/\\\"}\"}" --timeout 10s
[ "$(cat "$work/sink.body")" = "$body" ] || fail "webhook.so posted '$(cat "$work/sink.body")', not '$body'"
grep -Eq '^output: +\{"status": ?200,' "$work/exec-webhook.log" || { cat "$work/exec-webhook.log" >&2; fail "webhook's output has no status 200"; }
kill -TERM "$sink" && wait "$sink" 2>/dev/null || true
sink=""

cat >"$work/host.ini" <<EOF
[host]
name = package-check
shutdown_grace = 2s

[plugin hello]
path = $work/tpl-make/hello.so
greeting = hello from the package check

[plugin noop]
path = $root/usr/lib/$ma/skipq/noop.so

[queue default]
threads = 1
EOF
hello=$("$skipq" enqueue hello '{"name": "package"}' --db "$conn")
noop=$("$skipq" enqueue noop --db "$conn")
"$skipq" run -c "$work/host.ini" --db "$conn" >"$work/host.log" 2>&1 &
host=$!
status() { "$skipq" jobs show "$1" --json --db "$conn" | sed -n 's/.*"status": *"\([a-z]*\)".*/\1/p' | head -1; }
deadline=$((SECONDS + 60))
until [ "$(status "$hello")" = done ] && [ "$(status "$noop")" = done ]; do
    if ! kill -0 "$host" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
        cat "$work/host.log" >&2
        fail "jobs $hello (hello: $(status "$hello")) and $noop (noop: $(status "$noop")) were not done"
    fi
    sleep 0.2
done
grep -q "hello from the package check: job $hello, attempt 1" "$work/host.log" ||
    { cat "$work/host.log" >&2; fail "the host's log has no line from the template's handler"; }
kill -TERM "$host" && wait "$host" || fail "the host did not stop cleanly (exit $?)"
host=""

# The installed configuration itself, its plugin paths mapped into the
# staged root and /metrics left off (its port may be another's here): every
# section of it loads, and a job of the installed txn_note.so on its queue
# "mail" commits its row.
step "a host from the installed configuration"
sed -e "s|^path = /usr/lib/|path = $root/usr/lib/|" -e 's|^listen = |;listen = |' \
    "$root/etc/skipq/skipq.ini" >"$work/installed.ini"
note=$("$skipq" enqueue note.write '{"note": "from the installed configuration"}' --queue mail --db "$conn")
"$skipq" run -c "$work/installed.ini" --db "$conn" >"$work/installed.log" 2>&1 &
host=$!
deadline=$((SECONDS + 60))
until [ "$(status "$note")" = done ]; do
    if ! kill -0 "$host" 2>/dev/null || [ $SECONDS -ge $deadline ]; then
        cat "$work/installed.log" >&2
        fail "job $note (note.write) under the installed configuration: $(status "$note")"
    fi
    sleep 0.2
done
[ "$("${user[@]}" -At -c "SELECT note FROM public.skipq_notes WHERE job_id = $note")" = \
  "from the installed configuration" ] || fail "txn_note.so wrote no row for job $note"
kill -TERM "$host" && wait "$host" || fail "the installed configuration's host did not stop cleanly (exit $?)"
host=""
step "passed"
