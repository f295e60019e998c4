#!/usr/bin/env bash
# pg.sh — throwaway PostgreSQL 15 cluster for skipq tests and demos.
# Why: tests need a private server they can restart/kill at will without ever
# touching a system or developer cluster. Everything lives under DIR:
#   DIR/data (cluster), DIR/sock (unix socket), DIR/postgres.log (server log).
# The server listens on DIR/sock and on 127.0.0.1:PORT (for pgbouncer).
# fsync/synchronous_commit keep their defaults so benchmarks stay honest.
#
# Usage: pg.sh start   DIR [PORT]      (default port 54329; prints conninfo)
#        pg.sh stop    DIR
#        pg.sh destroy DIR             (stop, then rm -rf DIR)
#        pg.sh restart DIR fast|immediate
# When run as root, the server runs as user "postgres", so DIR's parent
# directories must be traversable by "postgres" (use /tmp/...; /root is not).
# Only `start` writes to stdout (one conninfo line); all else goes to stderr.
set -euo pipefail
exec 3>&1 1>&2          # keep stdout clean for callers doing $(pg.sh start ...)

die() { echo "pg.sh: $*" >&2; exit 1; }
usage() { die "usage: pg.sh start DIR [PORT] | stop DIR | destroy DIR | restart DIR fast|immediate"; }

(($# >= 2)) || usage
CMD=$1
DIR=$(realpath -m -- "$2")
[[ $DIR != / ]] || die "refusing DIR=/"
[[ $DIR =~ ^[A-Za-z0-9_./+-]+$ ]] || die "DIR must not contain spaces/special characters: $DIR"
DATA=$DIR/data SOCK=$DIR/sock LOG=$DIR/postgres.log

BIN=/usr/lib/postgresql/15/bin
[[ -d $BIN ]] || BIN=$(pg_config --bindir 2>/dev/null) || die "PostgreSQL 15 binaries not found (run scripts/deps.sh)"

IS_ROOT=0; [[ $(id -u) -eq 0 ]] && IS_ROOT=1
# Run a PostgreSQL binary as the cluster owner (postgres when we are root).
# fd 3 is closed so the daemon does not hold the caller's $(...) pipe open.
as_pg() {
    local exe=$BIN/$1; shift
    if ((IS_ROOT)); then (cd / && runuser -u postgres -- "$exe" "$@") 3>&-; else "$exe" "$@" 3>&-; fi
}
running() { [[ -f $DATA/PG_VERSION ]] && as_pg pg_ctl -D "$DATA" status >/dev/null 2>&1; }
pid_port() { sed -n 4p "$DATA/postmaster.pid" 2>/dev/null; }
wait_ready() {   # $1 = port
    local i
    for ((i = 0; i < 60; i++)); do
        "$BIN/pg_isready" -q -h "$SOCK" -p "$1" -U postgres -d postgres && return 0
        sleep 0.5
    done
    tail -n 20 "$LOG" >&2 || true
    die "server in $DIR not ready after 30 s (log: $LOG)"
}

case $CMD in
start)
    PORT=${3:-54329}
    [[ $PORT =~ ^[0-9]+$ ]] || die "bad port: $PORT"
    ((PORT >= 1024 && PORT <= 65535)) || die "bad port: $PORT"
    if running; then
        p=$(pid_port)
        [[ -z ${3:-} || $p == "$PORT" ]] || echo "pg.sh: cluster in $DIR already running on port $p (not $PORT); reusing it" >&2
        PORT=$p
        echo "pg.sh: reusing running cluster in $DIR" >&2
    else
        # Unix socket paths are limited to 107 bytes.
        ((${#SOCK} + 18 <= 107)) || die "DIR path too long for a unix socket; use a shorter path such as /tmp/pg-skipq"
        if ((IS_ROOT)); then   # never chmod parents: require them to be traversable already
            anc=$(dirname "$DIR"); while [[ ! -e $anc ]]; do anc=$(dirname "$anc"); done
            runuser -u postgres -- test -x "$anc" ||
                die "user postgres cannot access $anc; choose a DIR under /tmp (e.g. /tmp/skipq-pg)"
        fi
        if (exec 9<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; then
            die "port $PORT on 127.0.0.1 is already in use by another process; pick another PORT"
        fi
        mkdir -p "$SOCK"
        ((IS_ROOT)) && chown -R postgres: "$DIR"
        if [[ ! -f $DATA/PG_VERSION ]]; then
            echo "pg.sh: initdb $DATA" >&2
            init() { rm -rf "$DATA"; as_pg initdb -D "$DATA" -A trust -U postgres --no-sync -E UTF8 "$@" >&2; }
            init --locale=C.UTF-8 || init --locale=C || die "initdb failed"
            cat >>"$DATA/postgresql.conf" <<EOF

# --- added by scripts/pg.sh ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$SOCK'
max_connections = 300
shared_buffers = 256MB
log_min_messages = warning
EOF
        fi
        # Port is passed on the command line; pg_ctl restart reuses it via postmaster.opts.
        as_pg pg_ctl -D "$DATA" -l "$LOG" -o "-p $PORT" -w -t 30 start >&2 ||
            { tail -n 20 "$LOG" >&2 || true; die "pg_ctl start failed (log: $LOG)"; }
    fi
    wait_ready "$PORT"
    echo "host=$SOCK port=$PORT user=postgres dbname=postgres" >&3
    ;;
stop)
    if running; then as_pg pg_ctl -D "$DATA" -m fast -w stop >&2; else echo "pg.sh: nothing running in $DIR" >&2; fi
    ;;
destroy)
    [[ ! -e $DIR || -d $DATA || -z $(ls -A "$DIR") ]] || die "$DIR does not look like a pg.sh cluster dir; not removing"
    if running; then as_pg pg_ctl -D "$DATA" -m fast -w stop >&2; fi
    rm -rf -- "$DIR"
    echo "pg.sh: destroyed $DIR" >&2
    ;;
restart)
    MODE=${3:-}
    [[ $MODE == fast || $MODE == immediate ]] || usage
    [[ -f $DATA/postmaster.opts ]] || die "no cluster started in $DIR (run: pg.sh start $DIR)"
    as_pg pg_ctl -D "$DATA" -l "$LOG" -m "$MODE" -w -t 30 restart >&2 ||
        { tail -n 20 "$LOG" >&2 || true; die "pg_ctl restart failed (log: $LOG)"; }
    wait_ready "$(pid_port)"
    ;;
*) usage ;;
esac
