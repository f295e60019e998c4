#!/usr/bin/env bash
# scripts/package.sh -- build the Debian package: a build of its own with
# the prefix /usr (the configuration in /etc, the unit in /lib/systemd/system),
# no tests, Debian's hardening flags (dpkg-buildflags), then `cpack -G DEB`
# (cmake/package.cmake). Prints the path of the .deb on the last line.
#
#   scripts/package.sh [BUILD_DIR]     default: build-package
#   apt-get install ./build-package/skipq_*.deb
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dir=${1:-"$root/build-package"}
jobs=${SKIPQ_JOBS:-$(nproc)}

# hardening=+all: PIE, -z relro -z now, _FORTIFY_SOURCE, stack protector.
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
CFLAGS=$(dpkg-buildflags --get CFLAGS)
CPPFLAGS=$(dpkg-buildflags --get CPPFLAGS)
LDFLAGS=$(dpkg-buildflags --get LDFLAGS)

cmake -S "$root" -B "$dir" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_INSTALL_PREFIX=/usr \
    -DSKIPQ_BUILD_TESTS=OFF -DSKIPQ_SANITIZE= \
    -DCMAKE_C_FLAGS="$CFLAGS $CPPFLAGS" -DCMAKE_EXE_LINKER_FLAGS="$LDFLAGS" \
    -DCMAKE_SHARED_LINKER_FLAGS="$LDFLAGS" -DCMAKE_MODULE_LINKER_FLAGS="$LDFLAGS" >/dev/null
cmake --build "$dir" -j "$jobs" >/dev/null
rm -f "$dir"/skipq_*.deb
# CPack's own chatter (and its notes that plugins have no SONAME, which they
# need not have) go to a log, shown when it fails.
(cd "$dir" && cpack -G DEB >cpack.log 2>&1) || { cat "$dir/cpack.log" >&2; exit 1; }
deb=$(ls "$dir"/skipq_*.deb)
echo "$deb"
