#!/usr/bin/env bash
# deps.sh — install skipq's build/test dependencies on Debian 12.
# Why: one idempotent entry point for fresh machines and CI. If every package
# is already installed it does nothing (no apt-get update), so it is cheap to
# call before every build/test run.
set -euo pipefail

# libjson-c-dev: the dashboard's JSON (skipq web) and the example plugins'
# payloads. libcurl4-openssl-dev: the webhook example plugin. chromium, chromium-driver
# and python3-selenium: the dashboard's browser suite (ctest -L browser).
# postgresql-15-auto-failover and pg-auto-failover-cli: pg_auto_failover,
# the HA manager that scripts/ha.sh runs for the failover suite.
# dpkg-dev, fakeroot and lintian: the Debian package (scripts/package.sh)
# and its check (ctest -L package); man-db: its man pages rendered.
PKGS=(build-essential cmake pkg-config libpq-dev libinih-dev libcriterion-dev
      postgresql-15 postgresql-client-15 pgbouncer procps
      libmicrohttpd-dev libsystemd-dev curl clang-14 libclang-rt-14-dev libjson-c-dev
      libcurl4-openssl-dev
      chromium chromium-driver python3-selenium
      postgresql-15-auto-failover pg-auto-failover-cli
      dpkg-dev fakeroot lintian man-db)

missing=()
for p in "${PKGS[@]}"; do
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [[ $st == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
    echo "deps.sh: all ${#PKGS[@]} packages already installed, nothing to do"
    exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "deps.sh: missing packages (${missing[*]}); need root or sudo to install them" >&2
        exit 1
    fi
fi

"${SUDO[@]}" apt-get update -q >&2
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y -q --no-install-recommends "${PKGS[@]}" >&2
echo "deps.sh: installed ${missing[*]}"
