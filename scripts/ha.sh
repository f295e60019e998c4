#!/usr/bin/env bash
# ha.sh — throwaway high-availability PostgreSQL 15 cluster for skipq's
# failover tests: a pg_auto_failover monitor, a primary and a synchronous
# standby, all on this machine.
# Why: the failover suite must show what hosts do when a real HA manager
# promotes a standby (not a hand-made pg_ctl promote), and it must be able to
# kill, switch over and destroy that cluster at will without touching any
# other server. pg_auto_failover (Debian: postgresql-15-auto-failover,
# pg-auto-failover-cli) fits one machine with nothing but PostgreSQL: the
# monitor is itself a PostgreSQL, so no etcd/consul to run.
#
# Layout under DIR (all of it, so destroy is rm -rf):
#   DIR/monitor, DIR/node1, DIR/node2   data directories (server logs in */log/)
#   DIR/sock                            unix sockets of all three servers
#   DIR/xdg/{config,share,run}          pg_autoctl's configuration, state, pid files
#   DIR/log/NAME.log                    each pg_autoctl service's own log
#   DIR/baseport                        the monitor's port; node1 = +1, node2 = +2
# All three listen on 127.0.0.1 and DIR/sock with trust authentication (a
# test cluster: never expose it).
#
# Usage: ha.sh start DIR BASEPORT   create (or restart, or reuse) the cluster;
#                                   prints a multi-host conninfo on stdout
#        ha.sh conninfo DIR [DBNAME]   that conninfo again (for DBNAME)
#        ha.sh url DIR [DBNAME]     the same as a postgresql:// URL
#        ha.sh primary DIR          "NODE PORT" of the node accepting writes now
#        ha.sh state DIR            the monitor's view (pg_autoctl show state)
#        ha.sh events DIR           what decided the cluster's last minutes, for
#                                   a failed test to print: the monitor's
#                                   state changes and each server's
#                                   synchronous_standby_names changes
#        ha.sh kill-primary DIR [--postmaster-only]
#                                   kill -9 the primary node: its pg_autoctl
#                                   and its postmaster with every backend (a
#                                   lost machine). With --postmaster-only just
#                                   the postmaster: pg_autoctl then restarts
#                                   it in place and no failover happens.
#                                   Prints the killed node's name.
#        ha.sh switchover DIR       planned switchover; returns once a new
#                                   primary accepts writes
#        ha.sh wait-primary DIR TIMEOUT   until some node commits a write
#                                   (TIMEOUT in seconds); prints "NODE PORT"
#        ha.sh rejoin DIR           restart pg_autoctl on killed nodes (they
#                                   rejoin as standbys) and wait for them
#        ha.sh set-sync DIR on|off  synchronous (default) or asynchronous
#                                   replication
#        ha.sh stall-replication DIR on|off
#                                   stop (SIGSTOP) or resume the primary's WAL
#                                   senders: with asynchronous replication the
#                                   standby then lags by as long as they were
#                                   stopped when the primary is killed. (Not
#                                   the standby's receiver: what the sender
#                                   already wrote waits in the receiver's
#                                   socket buffer and survives the kill.)
#        ha.sh stop DIR             stop every pg_autoctl (and its server)
#        ha.sh destroy DIR          stop, then rm -rf DIR
# Measured on a 2-core machine: start 5-13 s (two initdb, three
# pg_autoctl create, a base backup); kill-primary to a node committing
# writes 6-8.5 s; switchover 2-5 s; rejoin 2-4 s.
# kill-primary takes the whole node by default because pg_autoctl restarts a
# postmaster killed alone within ~5 s, in place, and no failover happens.
# When run as root, everything runs as user "postgres" (pg_autoctl refuses
# root), so DIR's parents must be traversable by it: use /tmp/...
# Only start, conninfo, url, primary, state, events, wait-primary and
# kill-primary write to stdout; progress and errors go to stderr.
#
# Timings. pg_auto_failover's defaults are tuned for production (a failover
# after 20 s without news, then 30 s for the old primary to drain). A test
# cluster on one machine can decide much faster; every setting changed here
# and why:
#  monitor (postgresql.auto.conf of DIR/monitor):
#   pgautofailover.health_check_period = 1000ms   (5 s) probe nodes each second
#   pgautofailover.health_check_timeout = 1000ms  (5 s) loopback connects are instant
#   pgautofailover.health_check_max_retries = 1   (2) one retry is enough on loopback
#   pgautofailover.health_check_retry_delay = 500ms (2 s)
#   pgautofailover.node_considered_unhealthy_timeout = 3000ms (20 s): a
#       keeper reports every second; 3 missed reports mean it is gone
#   pgautofailover.startup_grace_period = 2000ms  (10 s)
#   pgautofailover.primary_demote_timeout = 5000ms (30 s): how long the
#       monitor waits for an unreachable primary to demote itself before the
#       standby takes writes. It must stay above the keepers'
#       network_partition_timeout (below) plus a keeper loop and a fast
#       shutdown, or a partitioned old primary could still be taking writes
#       when the new one opens: 5 s > 3 s + 1 s + shutdown.
#  keepers (pg_autoctl config set, DIR/xdg/config):
#   timeout.network_partition_timeout = 3         (20 s) see above
#   timeout.postgresql_restart_failure_timeout = 5 (20 s) give up restarting a
#       dead local server sooner, so a crash loop reaches the monitor
#  servers (postgresql.auto.conf, written before pg_autoctl starts them):
#   listen_addresses = '127.0.0.1', unix_socket_directories = DIR/sock
#       (pg_autoctl's own default is '*' and the system socket directory)
#   shared_buffers: pg_autoctl sizes it from the machine's RAM (a quarter of
#       it, per server); 128MB per data node, 32MB for the monitor
#   max_connections = 200 (test hosts open one session per thread)
#  pg_autoctl create: --no-ssl (loopback only) and --skip-pg-hba: initdb
#   -A trust already lets every local user and replication connection in
#   over the socket and 127.0.0.1, which is all this cluster accepts.
set -euo pipefail
exec 3>&1 1>&2          # keep stdout clean for callers doing $(ha.sh start ...)

die() { echo "ha.sh: $*" >&2; exit 1; }
say() { echo "ha.sh: [${SECONDS}s] $*" >&2; }
usage() {
    die "usage: ha.sh start DIR BASEPORT | conninfo DIR [DBNAME] | url DIR [DBNAME] | primary DIR | state DIR |" \
        "events DIR | kill-primary DIR [--postmaster-only] | switchover DIR | wait-primary DIR TIMEOUT | rejoin DIR |" \
        "set-sync DIR on|off | stall-replication DIR on|off | stop DIR | destroy DIR"
}

(($# >= 2)) || usage
CMD=$1
DIR=$(realpath -m -- "$2")
shift 2
[[ $DIR != / ]] || die "refusing DIR=/"
[[ $DIR =~ ^[A-Za-z0-9_./+-]+$ ]] || die "DIR must not contain spaces/special characters: $DIR"
SOCK=$DIR/sock
NODES=(node1 node2)

BIN=/usr/lib/postgresql/15/bin
[[ -x $BIN/pg_ctl ]] || die "PostgreSQL 15 binaries not found in $BIN (run scripts/deps.sh)"
AUTOCTL=$(command -v pg_autoctl || true)
[[ -n $AUTOCTL ]] || die "pg_autoctl not found (run scripts/deps.sh: pg-auto-failover-cli, postgresql-15-auto-failover)"
[[ -f /usr/lib/postgresql/15/lib/pgautofailover.so ]] ||
    die "the pgautofailover extension for PostgreSQL 15 is missing (run scripts/deps.sh: postgresql-15-auto-failover)"

IS_ROOT=0; [[ $(id -u) -eq 0 ]] && IS_ROOT=1
PG_ENV=(XDG_CONFIG_HOME="$DIR/xdg/config" XDG_DATA_HOME="$DIR/xdg/share" XDG_RUNTIME_DIR="$DIR/xdg/run"
        PGHOST="$SOCK" PG_CONFIG="$BIN/pg_config" PATH="$BIN:/usr/bin:/bin" HOME="$DIR")
# Run a command as the cluster owner (postgres when we are root) in
# pg_autoctl's environment. fd 3 is closed so no daemon holds the caller's
# $(...) pipe open.
as_pg() {
    if ((IS_ROOT)); then
        (cd / && runuser -u postgres -- env "${PG_ENV[@]}" "$@") 3>&-
    else
        (cd / && env "${PG_ENV[@]}" "$@") 3>&-
    fi
}
autoctl() { as_pg "$AUTOCTL" "$@"; }

baseport() {
    [[ -f $DIR/baseport ]] || die "no cluster in $DIR (run: ha.sh start $DIR BASEPORT)"
    cat "$DIR/baseport"
}
port_of() {   # NAME
    local b; b=$(baseport)
    case $1 in monitor) echo "$b" ;; node1) echo $((b + 1)) ;; node2) echo $((b + 2)) ;; *) die "no node $1" ;; esac
}
# One value from a server, over the socket; empty when it does not answer.
q() {   # PORT SQL [DB]
    PGCONNECT_TIMEOUT=2 timeout 10 "$BIN/psql" -X -At -q -h "$SOCK" -p "$1" -U postgres -d "${3:-postgres}" \
        -c "$2" 2>/dev/null || true
}
monitor_q() { q "$(port_of monitor)" "$1" pg_auto_failover; }

# pid in FILE's first line if that process lives and is ours: its command
# line names DATADIR. (After a kill -9 the file stays, and on a busy machine
# its pid soon belongs to some other process.)
live_pid() {   # FILE DATADIR
    local pid cmd
    [[ -f $1 ]] || return 0
    pid=$(head -n 1 "$1" 2>/dev/null || true)
    [[ $pid =~ ^[0-9]+$ ]] || return 0
    [[ $(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null) =~ ^[^Z]$ ]] || return 0
    cmd=$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)
    [[ " $cmd " == *" $2 "* ]] && echo "$pid" || true
}
autoctl_pid() { live_pid "$DIR/xdg/run/pg_autoctl$DIR/$1/pg_autoctl.pid" "$DIR/$1"; }
postmaster_pid() { live_pid "$DIR/$1/postmaster.pid" "$DIR/$1"; }
# After a kill -9 (or a crash of this machine), the pid files left behind
# would make pg_autoctl ("already running") and postgres ("lock file
# exists") refuse to start when their pid has been reused.
clear_stale_pids() {   # NAME
    [[ -n $(autoctl_pid "$1") ]] || rm -f "$DIR/xdg/run/pg_autoctl$DIR/$1/"*.pid
    [[ -n $(postmaster_pid "$1") ]] || rm -f "$DIR/$1/postmaster.pid"
}
descendants() {   # PID...: the pids and all their descendants
    local p
    for p in "$@"; do
        echo "$p"
        # shellcheck disable=SC2046
        descendants $(ps -o pid= --ppid "$p" 2>/dev/null || true)
    done
}

# Start `pg_autoctl ARGS...` for NAME in the background, detached (its own
# session, no wrapper process: runuser would stay as its parent and stop
# itself whenever its child is stopped), logging to DIR/log/NAME.log.
launch() {   # NAME ARGS...
    local name=$1; shift
    local drop=()
    ((IS_ROOT)) && drop=(setpriv --reuid=postgres --regid=postgres --init-groups)
    echo "=== $(date '+%F %T') pg_autoctl $*" >>"$DIR/log/$name.log"
    (cd / && exec setsid "${drop[@]}" env "${PG_ENV[@]}" "$AUTOCTL" "$@") \
        >>"$DIR/log/$name.log" 2>&1 </dev/null 3>&- &
    disown
}

# Wait until PORT answers SELECT 1 (bounded).
wait_answers() {   # NAME SECONDS
    local port; port=$(port_of "$1")
    local end=$((SECONDS + $2))
    until [[ $(q "$port" "SELECT 1") == 1 ]]; do
        ((SECONDS < end)) || { tail -n 30 "$DIR/log/$1.log" >&2 || true; die "$1 (port $port) not up after $2 s (log: $DIR/log/$1.log)"; }
        sleep 0.2
    done
}

# Wait until the monitor reports NAME in one of STATES (goal = reported).
wait_state() {   # NAME SECONDS STATE...
    local name=$1 secs=$2; shift 2
    local end=$((SECONDS + secs)) st want
    want=$(printf "'%s'," "$@"); want=${want%,}
    while :; do
        st=$(monitor_q "SELECT reportedstate FROM pgautofailover.node WHERE nodename = '$name'
                        AND reportedstate = goalstate AND reportedstate IN ($want)")
        [[ -n $st ]] && return 0
        ((SECONDS < end)) || {
            tail -n 30 "$DIR/log/$name.log" >&2 || true
            show_state >&2 || true
            die "$name did not reach state $* within $secs s (log: $DIR/log/$name.log)"
        }
        sleep 0.2
    done
}

# Wait until the monitor reports one primary and one secondary, settled,
# both reported since the wait began (after a restart the monitor still
# shows the states from before the stop) and passing its health checks.
wait_healthy() {   # SECONDS
    local end=$((SECONDS + $1)) st since
    since=$(date -u '+%F %T.%N')
    while :; do
        st=$(monitor_q "SELECT string_agg(reportedstate::text, ',' ORDER BY reportedstate::text)
                        FROM pgautofailover.node WHERE reportedstate = goalstate AND health = 1
                         AND reporttime > '$since+00'::timestamptz")
        [[ $st == primary,secondary ]] && return 0
        ((SECONDS < end)) || { show_state >&2 || true; die "the cluster did not settle to a primary and a secondary within $1 s"; }
        sleep 0.2
    done
}

show_state() {
    autoctl show state --pgdata "$DIR/monitor" 2>/dev/null ||
        monitor_q "SELECT nodename, nodeport, reportedstate, goalstate FROM pgautofailover.node ORDER BY nodeid"
}

# The monitor's events (when, node, reported -> goal, why) and every change of
# synchronous_standby_names in the data nodes' server logs, oldest first,
# one line each: enough to tell whether a primary committed without its
# standby (wait_primary) or was demoted late.
show_events() {
    monitor_q "SELECT to_char(eventtime, 'HH24:MI:SS.MS') || ' monitor: ' || nodename || ' ' || reportedstate
                      || ' -> ' || goalstate || ': ' || description
                 FROM pgautofailover.event ORDER BY eventid"
    local n
    for n in "${NODES[@]}"; do
        grep -h 'parameter "synchronous_standby_names"\|database system is shut down\|database system is ready\|received promote' \
            "$DIR/$n"/log/*.log 2>/dev/null | sed -E "s/^[0-9-]+ ([0-9:.]+) [A-Z]+ \[[0-9]+\] /\1 $n: /" || true
    done
}

conninfo() {
    local dbname=${1:-postgres}
    echo "host=127.0.0.1,127.0.0.1 port=$(port_of node1),$(port_of node2) user=postgres dbname=$dbname" \
        "target_session_attrs=read-write connect_timeout=5"
}

# The node whose server commits a write right now ("NAME PORT"), else empty.
# A commit, not just pg_is_in_recovery(): a promoted standby refuses writes
# (default_transaction_read_only) until the monitor lets it take them, and
# with synchronous replication a commit needs the standby's flush.
writable_node() {
    local n port
    for n in "${NODES[@]}"; do
        port=$(port_of "$n")
        [[ $(q "$port" "SELECT pg_catalog.pg_is_in_recovery()") == f ]] || continue
        [[ $(q "$port" "CREATE TEMP TABLE ha_probe (); SELECT 'ok'") == ok ]] || continue
        echo "$n $port"
        return 0
    done
}

wait_primary() {   # SECONDS
    local end=$((SECONDS + $1)) w
    while :; do
        w=$(writable_node)
        [[ -n $w ]] && { echo "$w"; return 0; }
        ((SECONDS < end)) || { show_state >&2 || true; die "no node accepted a write within $1 s"; }
        sleep 0.2
    done
}

# postgresql.auto.conf lines for a server we initdb ourselves (see Timings).
server_conf() {   # SHARED_BUFFERS [extra lines]
    cat <<EOF
# --- written by scripts/ha.sh (read after pg_autoctl's own settings) ---
listen_addresses = '127.0.0.1'
unix_socket_directories = '$SOCK'
shared_buffers = '$1'
max_connections = 200
EOF
    shift
    printf '%s\n' "$@"
}

init_server() {   # NAME SHARED_BUFFERS [extra conf lines]
    local name=$1; shift
    as_pg "$BIN/initdb" -D "$DIR/$name" -A trust -U postgres --no-sync -E UTF8 --locale=C.UTF-8 \
        >>"$DIR/log/$name.log" 2>&1 || die "initdb $name failed (log: $DIR/log/$name.log)"
    server_conf "$@" | as_pg tee -a "$DIR/$name/postgresql.auto.conf" >/dev/null
}

# pg_autoctl ARGS... for NAME in the foreground, bounded, logged.
autoctl_fg() {   # NAME SECONDS ARGS...
    local name=$1 secs=$2; shift 2
    echo "=== $(date '+%F %T') pg_autoctl $*" >>"$DIR/log/$name.log"
    as_pg timeout "$secs" "$AUTOCTL" "$@" >>"$DIR/log/$name.log" 2>&1 ||
        { tail -n 30 "$DIR/log/$name.log" >&2; die "pg_autoctl $1 $2 for $name failed or took over $secs s (log: $DIR/log/$name.log)"; }
}

set_keeper_timeouts() {   # NAME
    autoctl config set --pgdata "$DIR/$1" timeout.network_partition_timeout 3 >/dev/null &&
        autoctl config set --pgdata "$DIR/$1" timeout.postgresql_restart_failure_timeout 5 >/dev/null ||
        die "cannot set the keeper timeouts of $1"
}

check_ports_free() {
    local b=$1 p
    for p in "$b" $((b + 1)) $((b + 2)); do
        if (exec 9<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
            die "port $p on 127.0.0.1 is already in use by another process; pick another BASEPORT (3 ports from it)"
        fi
    done
}

create_cluster() {   # BASEPORT
    local b=$1
    ((${#SOCK} + 18 <= 107)) || die "DIR path too long for a unix socket; use a shorter path such as /tmp/skipq-ha"
    if ((IS_ROOT)); then   # never chmod parents: require them to be traversable already
        local anc; anc=$(dirname "$DIR"); while [[ ! -e $anc ]]; do anc=$(dirname "$anc"); done
        runuser -u postgres -- test -x "$anc" ||
            die "user postgres cannot access $anc; choose a DIR under /tmp (e.g. /tmp/skipq-ha)"
    fi
    check_ports_free "$b"
    mkdir -p "$SOCK" "$DIR/log" "$DIR/xdg/config" "$DIR/xdg/share" "$DIR/xdg/run"
    chmod 700 "$DIR/xdg/run"
    echo "$b" >"$DIR/baseport"
    ((IS_ROOT)) && chown -R postgres: "$DIR"

    say "initdb monitor and node1"
    init_server monitor 32MB \
        "pgautofailover.health_check_period = 1000" "pgautofailover.health_check_timeout = 1000" \
        "pgautofailover.health_check_max_retries = 1" "pgautofailover.health_check_retry_delay = 500" \
        "pgautofailover.node_considered_unhealthy_timeout = 3000" \
        "pgautofailover.startup_grace_period = 2000" "pgautofailover.primary_demote_timeout = 5000" &
    init_server node1 128MB &
    wait %1 || die "initdb monitor failed"
    wait %2 || die "initdb node1 failed"

    say "monitor on port $b"
    autoctl_fg monitor 120 create monitor --pgdata "$DIR/monitor" --pgport "$b" --hostname 127.0.0.1 \
        --skip-pg-hba --no-ssl --pgctl "$BIN/pg_ctl"
    # The monitor has no --listen: without this it listens on '*'.
    autoctl config set --pgdata "$DIR/monitor" postgresql.listen_addresses 127.0.0.1 >/dev/null ||
        die "cannot set the monitor's listen_addresses"
    launch monitor run --pgdata "$DIR/monitor"
    wait_answers monitor 60
    local muri="postgres://autoctl_node@127.0.0.1:$b/pg_auto_failover?sslmode=disable"

    # Each node: create (registers with the monitor; node1 becomes the
    # primary, node2 waits to be a standby), set the keeper's timeouts while
    # no keeper runs (a running keeper rewrites its file from memory, so a
    # change made then may be lost), then run it.
    local n port
    for n in "${NODES[@]}"; do
        port=$(port_of "$n")
        say "$n on port $port"
        autoctl_fg "$n" 180 create postgres --pgdata "$DIR/$n" --pgport "$port" --pghost "$SOCK" \
            --listen 127.0.0.1 --hostname 127.0.0.1 --name "$n" --monitor "$muri" --skip-pg-hba --no-ssl \
            --dbname postgres --pgctl "$BIN/pg_ctl"
        set_keeper_timeouts "$n"
        launch "$n" run --pgdata "$DIR/$n"
    done
    wait_healthy 120
    touch "$DIR/created"
}

# Restart any pg_autoctl of an existing cluster that is not running.
restart_cluster() {
    local n
    for n in monitor "${NODES[@]}"; do
        [[ -n $(autoctl_pid "$n") ]] && continue
        say "restarting pg_autoctl for $n"
        clear_stale_pids "$n"
        launch "$n" run --pgdata "$DIR/$n"
        if [[ $n == monitor ]]; then wait_answers monitor 60; fi
    done
    return 0
}

# Stop one pg_autoctl (and the server it runs), bounded; kill what is left.
stop_one() {   # NAME
    local n=$1 pid end
    pid=$(autoctl_pid "$n")
    if [[ -n $pid ]]; then
        kill -TERM "$pid" 2>/dev/null || true
        end=$((SECONDS + 30))
        while kill -0 "$pid" 2>/dev/null && ((SECONDS < end)); do sleep 0.2; done
        if [[ -n $(autoctl_pid "$n") ]]; then
            say "pg_autoctl of $n did not stop in 30 s; killing it"
            # shellcheck disable=SC2046
            kill -KILL $(descendants "$pid") 2>/dev/null || true
        fi
    fi
    pid=$(postmaster_pid "$n")
    if [[ -n $pid ]]; then
        as_pg "$BIN/pg_ctl" -D "$DIR/$n" -m immediate -w -t 20 stop >/dev/null 2>&1 || kill -KILL "$pid" 2>/dev/null || true
    fi
}

# Standbys first, then the primary, then the monitor: with no standby left
# running the monitor has nothing to promote when the primary goes, so the
# next start finds the same primary.
stop_all() {
    local n first=() last=()
    for n in "${NODES[@]}"; do
        if [[ $(q "$(port_of "$n")" "SELECT pg_catalog.pg_is_in_recovery()") == f ]]; then last+=("$n"); else first+=("$n"); fi
    done
    for n in "${first[@]}" "${last[@]}" monitor; do stop_one "$n"; done
    return 0
}

case $CMD in
start)
    (($# == 1)) || usage
    BASE=$1
    [[ $BASE =~ ^[0-9]+$ ]] && ((BASE >= 1024 && BASE <= 65533)) || die "bad BASEPORT: $BASE"
    if [[ -f $DIR/created ]]; then
        [[ $(baseport) == "$BASE" ]] || say "cluster in $DIR uses ports from $(baseport), not $BASE; reusing it"
        restart_cluster
        wait_healthy 120
    else
        [[ ! -e $DIR || -z $(ls -A "$DIR") || -f $DIR/baseport ]] ||
            die "$DIR exists and is not an ha.sh cluster directory"
        if [[ -f $DIR/baseport ]]; then   # a start that did not finish: begin again
            say "removing the unfinished cluster in $DIR"
            stop_all
            rm -rf -- "$DIR"
        fi
        t0=$SECONDS
        create_cluster "$BASE"
        say "cluster created in $((SECONDS - t0)) s"
    fi
    wait_primary 120 >/dev/null
    conninfo postgres >&3
    ;;
conninfo)
    conninfo "${1:-postgres}" >&3
    ;;
url)
    echo "postgresql://127.0.0.1:$(port_of node1),127.0.0.1:$(port_of node2)/${1:-postgres}?user=postgres&target_session_attrs=read-write&connect_timeout=5" >&3
    ;;
primary)
    w=$(writable_node)
    [[ -n $w ]] || die "no node accepts writes right now"
    echo "$w" >&3
    ;;
state)
    show_state >&3
    ;;
events)
    show_events | sort >&3
    ;;
wait-primary)
    (($# == 1)) && [[ $1 =~ ^[0-9]+$ ]] || usage
    wait_primary "$1" >&3
    ;;
kill-primary)
    ONLY_PM=0
    [[ ${1:-} == --postmaster-only ]] && ONLY_PM=1
    w=$(writable_node)
    [[ -n $w ]] || die "no node accepts writes right now; nothing to kill"
    node=${w%% *}
    pm=$(postmaster_pid "$node")
    [[ -n $pm ]] || die "$node has no postmaster.pid"
    if ((ONLY_PM)); then
        kill -KILL "$pm"
    else
        # Freeze everything first so nothing reacts (pg_autoctl restarting
        # the server, a backend finishing a commit), then kill it all.
        ac=$(autoctl_pid "$node")
        # shellcheck disable=SC2046,SC2086   # $ac: empty when pg_autoctl is already gone
        victims=$(descendants $ac "$pm" | sort -un)
        # shellcheck disable=SC2086
        kill -STOP $victims 2>/dev/null || true
        # shellcheck disable=SC2086
        kill -KILL $victims 2>/dev/null || true
    fi
    end=$((SECONDS + 10))
    while kill -0 "$pm" 2>/dev/null; do ((SECONDS < end)) || die "postmaster $pm of $node survived SIGKILL"; sleep 0.05; done
    say "killed $node (postmaster $pm$( ((ONLY_PM)) || echo " and its pg_autoctl"))"
    echo "$node" >&3
    ;;
switchover)
    before=$(writable_node)
    autoctl perform switchover --pgdata "$DIR/monitor" --formation default --group 0 --wait 120 \
        >>"$DIR/log/switchover.log" 2>&1 ||
        { tail -n 20 "$DIR/log/switchover.log" >&2; die "switchover failed (log: $DIR/log/switchover.log)"; }
    after=$(wait_primary 60)
    [[ ${after%% *} != "${before%% *}" ]] || die "switchover finished but ${before%% *} is still the primary"
    say "switchover: ${before%% *} -> ${after%% *}"
    ;;
rejoin)
    restart_cluster
    wait_healthy 120
    ;;
set-sync)
    (($# == 1)) && [[ $1 == on || $1 == off ]] || usage
    quorum=true; [[ $1 == off ]] && quorum=false
    # A standby outside the replication quorum is left out of
    # synchronous_standby_names: the primary commits without waiting for it.
    for n in "${NODES[@]}"; do
        autoctl set node replication-quorum "$quorum" --pgdata "$DIR/$n" >>"$DIR/log/set-sync.log" 2>&1 ||
            { tail -n 20 "$DIR/log/set-sync.log" >&2; die "set node replication-quorum $quorum on $n failed"; }
    done
    w=$(wait_primary 60)
    want="''"; [[ $1 == on ]] && want="non-empty"
    end=$((SECONDS + 30))
    while :; do
        ssn=$(q "${w##* }" "SHOW synchronous_standby_names")
        [[ ($1 == off && -z $ssn) || ($1 == on && -n $ssn) ]] && break
        ((SECONDS < end)) || die "synchronous_standby_names on ${w%% *} is '$ssn', not $want, after 30 s"
        sleep 0.2
    done
    say "replication is now $( [[ $1 == on ]] && echo "synchronous ($ssn)" || echo asynchronous)"
    ;;
stall-replication)
    (($# == 1)) && [[ $1 == on || $1 == off ]] || usage
    if [[ $1 == off ]]; then
        if [[ -f $DIR/stalled ]]; then
            # shellcheck disable=SC2046
            kill -CONT $(cat "$DIR/stalled") 2>/dev/null || true
            rm -f "$DIR/stalled"
            say "WAL senders resumed"
        fi
        exit 0
    fi
    [[ ! -f $DIR/stalled ]] || die "replication is already stalled (ha.sh stall-replication $DIR off)"
    w=$(writable_node)
    [[ -n $w ]] || die "no node accepts writes right now"
    node=${w%% *}
    pm=$(postmaster_pid "$node")
    senders=$(ps -o pid=,args= --ppid "$pm" | awk '$2 == "postgres:" && $3 == "walsender" {print $1}')
    [[ -n $senders ]] || die "no WAL sender under $node's postmaster $pm (no standby streaming?)"
    # shellcheck disable=SC2086
    kill -STOP $senders
    echo "$senders" >"$DIR/stalled"
    say "stalled the WAL sender(s) $senders of $node"
    ;;
stop)
    [[ -f $DIR/baseport ]] || { say "nothing in $DIR"; exit 0; }
    stop_all
    ;;
destroy)
    [[ ! -e $DIR || -f $DIR/baseport || -z $(ls -A "$DIR") ]] || die "$DIR does not look like an ha.sh cluster dir; not removing"
    [[ -f $DIR/baseport ]] && stop_all
    rm -rf -- "$DIR"
    say "destroyed $DIR"
    ;;
*) usage ;;
esac
