#!/usr/bin/env bash
# local-slurm.sh: a throwaway Slurm cluster on this machine, for tests and CI.
#
#   local-slurm.sh start  [--nodes 1|2] [--dir DIR] [--port N]
#   local-slurm.sh stop   [--dir DIR]
#   local-slurm.sh status [--dir DIR]
#
# start: installs slurm-wlm + munge (Debian packages) when missing, creates the
# munge key when missing, starts munged when it is not running, writes
# DIR/slurm.conf, starts slurmctld and one slurmd per emulated node (node1,
# node2 on 127.0.0.1, distinct ports and %n paths), waits until sinfo shows
# every node idle and prints, on stdout and nothing else:
#     export SLURM_CONF=DIR/slurm.conf
# so that `eval "$(scripts/local-slurm.sh start)"` works. Starting a cluster
# that is already running is fine (it only waits for idle and prints the line).
# stop: stops exactly the daemons this script started (pid files under DIR).
# munged: when this script had to start it, it records that machine-wide
# (/run/dlbench-slurm-munge) with the list of clusters using it; the stop of
# the last such cluster stops it. A munged started by anyone else is never
# stopped.
# status: prints the daemons and sinfo; exit 0 when running, 3 when not.
#
# Needs root (no systemd: daemons are started directly). Daemons run in their
# own session with stdio on log files under DIR, so callers that capture this
# script's output (subprocess.run) return as soon as it exits.
# --port N (or DLBENCH_SLURM_PORT): slurmctld port, default 16817; the slurmd
# of nodeK listens on N+K. Two clusters running at once need distinct ports.
# DLBENCH_SLURM_TIMEOUT: seconds to wait for idle nodes (default 60).
set -euo pipefail

PROG="$(basename "$0")"
HERE="$(cd "$(dirname "$0")" && pwd)"
DIR=/tmp/dlbench-slurm
NODES=1
PORT="${DLBENCH_SLURM_PORT:-16817}"
TIMEOUT="${DLBENCH_SLURM_TIMEOUT:-60}"
# libpmix-dev: Slurm's mpi_pmix plugin dlopens the unversioned
# /usr/lib/x86_64-linux-gnu/pmix2/lib/libpmix.so, which only libpmix-dev ships;
# without it `srun --mpi=pmix` cannot work.
PACKAGES=(slurm-wlm munge libpmix-dev)
MUNGE_KEY=/etc/munge/munge.key
MUNGE_SOCKET=/run/munge/munge.socket.2
MUNGE_STATE=/run/dlbench-slurm-munge   # munged started by this script + its users

usage() {
    echo "usage: $PROG start [--nodes 1|2] [--dir DIR] [--port N] | stop [--dir DIR] | status [--dir DIR]" >&2
    exit 2
}
log() { echo "local-slurm: $*" >&2; }
die() { echo "local-slurm: error: $*" >&2; exit 1; }

[ "$#" -ge 1 ] || usage
CMD="$1"; shift
case "$CMD" in start|stop|status) ;; *) usage ;; esac
while [ "$#" -gt 0 ]; do
    case "$1" in
        --nodes) [ "$CMD" = start ] && [ "$#" -ge 2 ] || usage; NODES="$2"; shift 2 ;;
        --nodes=*) [ "$CMD" = start ] || usage; NODES="${1#*=}"; shift ;;
        --port) [ "$CMD" = start ] && [ "$#" -ge 2 ] || usage; PORT="$2"; shift 2 ;;
        --port=*) [ "$CMD" = start ] || usage; PORT="${1#*=}"; shift ;;
        --dir) [ "$#" -ge 2 ] || usage; DIR="$2"; shift 2 ;;
        --dir=*) DIR="${1#*=}"; shift ;;
        *) usage ;;
    esac
done
case "$NODES" in 1|2) ;; *) usage ;; esac
case "$PORT" in ''|*[!0-9]*) usage ;; esac
[ "$PORT" -ge 1024 ] && [ "$PORT" -le 65000 ] || usage
[ -n "$DIR" ] || usage
mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd)"
CONF="$DIR/slurm.conf"
export SLURM_CONF="$CONF"

node_names() { # the nodes of the cluster described by DIR/nodes
    local n
    n="$(cat "$DIR/nodes" 2>/dev/null || echo 0)"
    for ((i = 1; i <= n; i++)); do echo "node$i"; done
}

# pid_alive PIDFILE NAME [CONF]: the pid in PIDFILE is alive and is a NAME
# process whose command line mentions CONF (default: our slurm.conf; munged:
# only the name). Guards against pid reuse after a reboot or a crash.
pid_alive() {
    local conf="${3:-$CONF}"
    local pid
    [ -s "$1" ] || return 1
    pid="$(cat "$1")"
    [ -r "/proc/$pid/cmdline" ] || return 1
    local cmdline
    cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)" || return 1
    case "$cmdline" in *"$2"*) ;; *) return 1 ;; esac
    [ "$2" = munged ] && return 0
    case "$cmdline" in *"$conf"*) return 0 ;; *) return 1 ;; esac
}

munge_ok() { munge -n -S "$MUNGE_SOCKET" 2>/dev/null | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1; }

tails() { # last lines of each daemon's log (its stdout/stderr file if the log is empty)
    local d f
    for d in "$DIR"/slurmctld "$DIR"/node*/; do
        [ "$d" = "$DIR/slurmctld" ] || d="${d%/}/slurmd"
        f="$d.log"
        [ -s "$f" ] || f="$d.out"
        [ -s "$f" ] || continue
        echo "---- tail $f" >&2
        tail -n 12 "$f" >&2
    done
}

user_file() { echo "$MUNGE_STATE/users/$(echo "$DIR" | md5sum | cut -c1-16)"; }

start_munge() {
    mkdir -p "$MUNGE_STATE/users"
    exec 9>"$MUNGE_STATE/lock"
    flock 9
    if ! pid_alive "$MUNGE_STATE/munged.pid" munged; then
        rm -f "$MUNGE_STATE/munged.pid" "$MUNGE_STATE"/users/*
    fi
    if ! munge_ok; then
        if [ ! -s "$MUNGE_KEY" ]; then
            log "creating munge key $MUNGE_KEY"
            install -d -o munge -g munge -m 0700 /etc/munge
            mungekey --create --keyfile="$MUNGE_KEY"
            chown munge:munge "$MUNGE_KEY"
            chmod 0400 "$MUNGE_KEY"
        fi
        install -d -o munge -g munge -m 0755 /run/munge
        install -d -o munge -g munge -m 0700 /var/log/munge /var/lib/munge
        # munged forks and writes its own pid file; stdio goes to a log file.
        runuser -u munge -- /usr/sbin/munged --socket="$MUNGE_SOCKET" </dev/null >>"$MUNGE_STATE/munged.out" 2>&1 9>&- \
            || { tail -n 20 "$MUNGE_STATE/munged.out" /var/log/munge/munged.log >&2 2>/dev/null; die "munged failed to start"; }
        for _ in $(seq 50); do munge_ok && break; sleep 0.1; done
        munge_ok || die "munged started but munge/unmunge fails (see /var/log/munge/munged.log)"
        cp /run/munge/munged.pid "$MUNGE_STATE/munged.pid"
        log "started munged (pid $(cat "$MUNGE_STATE/munged.pid"))"
    fi
    # A munged this script started is shared by its clusters: register as a user.
    [ -e "$MUNGE_STATE/munged.pid" ] && echo "$DIR" >"$(user_file)"
    flock -u 9
    exec 9>&-   # not inherited by the daemons started next
}

# stop_munge: unregister DIR; stop munged when this script started it and no
# running cluster uses it any more.
stop_munge() {
    [ -d "$MUNGE_STATE/users" ] || return 0
    exec 9>"$MUNGE_STATE/lock"
    flock 9
    rm -f "$(user_file)"
    local f d
    for f in "$MUNGE_STATE"/users/*; do
        [ -e "$f" ] || continue
        d="$(cat "$f")"
        # a user whose slurmctld is gone (killed without stop); spare fresh
        # entries: that cluster may be starting right now.
        [ -n "$(find "$f" -mmin +1)" ] || continue
        pid_alive "$d/slurmctld.daemon.pid" slurmctld "$d/slurm.conf" || rm -f "$f"
    done
    if [ -e "$MUNGE_STATE/munged.pid" ]; then
        if [ -z "$(ls -A "$MUNGE_STATE/users")" ]; then
            stop_pid "$MUNGE_STATE/munged.pid" munged
            log "stopped munged (started by $PROG)"
        else
            log "munged left running: still used by $(cat "$MUNGE_STATE"/users/* | tr '\n' ' ')"
        fi
    fi
    flock -u 9
    exec 9>&-
}

port_busy() { [ -n "$(ss -Htln "sport = :$1" 2>/dev/null)" ]; }

write_conf() {
    local n="$1" i
    mkdir -p "$DIR/state"
    for ((i = 1; i <= n; i++)); do mkdir -p "$DIR/node$i/spool" "$DIR/node$i/tmp"; done
    cat >"$CONF" <<EOF
# Written by scripts/local-slurm.sh: a local test cluster, $n emulated node(s).
ClusterName=dlbench
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET
CredType=cred/munge
MpiDefault=none
# No cgroups (cgroup v1, no systemd here): no cgroup.conf is needed.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
# Test cluster: schedule batch jobs at once (default: up to 3 s later).
SchedulerParameters=batch_sched_delay=0
# Trust the node lines below, not the hardware (1-core CI runners, memory).
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
InactiveLimit=0
KillWait=5
MinJobAge=30
SlurmctldTimeout=30
SlurmdTimeout=30
StateSaveLocation=$DIR/state
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmctldDebug=info
# %n = node name: each emulated slurmd has its own spool, pid, log and TmpFS
# (TmpFS is where --mpi=pmix puts its per-node sockets).
SlurmdSpoolDir=$DIR/%n/spool
SlurmdPidFile=$DIR/%n/slurmd.pid
SlurmdLogFile=$DIR/%n/slurmd.log
SlurmdDebug=info
TmpFS=$DIR/%n/tmp
EOF
    for ((i = 1; i <= n; i++)); do
        echo "NodeName=node$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((PORT + i)) CPUs=2 RealMemory=2000 State=UNKNOWN" >>"$CONF"
    done
    echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$CONF"
    echo "$n" >"$DIR/nodes"
}

# spawn PIDFILE LOG CMD...: run CMD in the background in its own session,
# stdio on LOG, record its pid.
spawn() {
    local pidfile="$1" out="$2"; shift 2
    setsid "$@" </dev/null >>"$out" 2>&1 &
    echo "$!" >"$pidfile"
}

node_states() { sinfo -h -N -o '%N %t' 2>/dev/null | sort -u; }

wait_idle() {
    local deadline=$((SECONDS + TIMEOUT)) want states bad
    want="$(node_names | tr '\n' ' ')"
    while :; do
        states="$(node_states || true)"
        bad=0
        for node in $want; do
            # idle, or busy with jobs (mix/alloc) when a running cluster is re-started
            grep -Eq "^$node (idle|mix|alloc)$" <<<"$states" || bad=1
        done
        [ "$bad" = 0 ] && return 0
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "local-slurm: error: nodes not idle after ${TIMEOUT}s (sinfo: $(echo "$states" | tr '\n' ';'))" >&2
            tails
            return 1
        fi
        sleep 0.2
    done
}

daemons_alive() { # all daemons of DIR alive
    pid_alive "$DIR/slurmctld.daemon.pid" slurmctld || return 1
    local node
    for node in $(node_names); do pid_alive "$DIR/$node/slurmd.daemon.pid" slurmd || return 1; done
}

any_daemon_alive() {
    local f
    pid_alive "$DIR/slurmctld.daemon.pid" slurmctld && return 0
    for f in "$DIR"/node*/slurmd.daemon.pid; do pid_alive "$f" slurmd && return 0; done
    return 1
}

do_start() {
    [ "$(id -u)" -eq 0 ] || die "must run as root (starts munged/slurmctld/slurmd)"
    # start wipes state under DIR: only ever in an empty DIR or one of ours.
    if [ -n "$(ls -A "$DIR")" ] && [[ $(head -n 1 "$CONF" 2>/dev/null) != '# Written by scripts/local-slurm.sh'* ]]; then
        die "$DIR is not empty and holds no cluster of this script: pick another --dir"
    fi
    if [ -s "$DIR/nodes" ] && daemons_alive; then
        local have
        have="$(cat "$DIR/nodes")"
        [ "$have" = "$NODES" ] || die "a $have-node cluster is already running in $DIR; '$PROG stop --dir $DIR' first"
        log "already running in $DIR ($have node(s))"
        start_munge
        wait_idle || exit 1
        echo "export SLURM_CONF=$CONF"
        return 0
    fi
    any_daemon_alive && do_stop   # half-dead cluster: clean up first
    local t0=$SECONDS
    "$HERE/ensure-packages.sh" "${PACKAGES[@]}" || die "cannot install ${PACKAGES[*]}"
    local p
    for ((p = PORT; p <= PORT + NODES; p++)); do
        port_busy "$p" && die "port $p is in use (another cluster?): pass --port N or set DLBENCH_SLURM_PORT"
    done
    start_munge
    # A fresh cluster each time: no stale state, spool or logs.
    rm -rf "$DIR/state" "$DIR"/node* "$DIR"/slurmctld.log "$DIR"/*.out
    write_conf "$NODES"
    # -i: ignore state files; -D: stay in foreground (we background it).
    spawn "$DIR/slurmctld.daemon.pid" "$DIR/slurmctld.out" slurmctld -D -i -f "$CONF"
    local node
    for node in $(node_names); do
        spawn "$DIR/$node/slurmd.daemon.pid" "$DIR/$node/slurmd.out" slurmd -D -N "$node" -f "$CONF"
    done
    if ! wait_idle; then
        do_stop >/dev/null 2>&1 || true
        exit 1
    fi
    log "cluster up in $DIR: $(node_names | tr '\n' ' ')($((SECONDS - t0))s)"
    echo "export SLURM_CONF=$CONF"
}

# stop_pid PIDFILE NAME: SIGTERM, then SIGKILL after 15 s.
stop_pid() {
    local pidfile="$1" name="$2" pid
    if ! pid_alive "$pidfile" "$name"; then rm -f "$pidfile"; return 0; fi
    pid="$(cat "$pidfile")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 150); do pid_alive "$pidfile" "$name" || break; sleep 0.1; done
    if pid_alive "$pidfile" "$name"; then
        log "$name (pid $pid) ignored SIGTERM; killing"
        kill -KILL "$pid" 2>/dev/null || true
        sleep 0.2
    fi
    rm -f "$pidfile"
}

do_stop() {
    local f
    # Cancel jobs first so that no slurmstepd outlives its slurmd.
    if pid_alive "$DIR/slurmctld.daemon.pid" slurmctld; then
        scancel --full --quiet --user=root 2>/dev/null || true
    fi
    for f in "$DIR"/node*/slurmd.daemon.pid; do [ -e "$f" ] && stop_pid "$f" slurmd; done
    stop_pid "$DIR/slurmctld.daemon.pid" slurmctld
    # slurmstepd processes of this cluster (their parent slurmd is gone).
    local pid
    for pid in $(pgrep -x slurmstepd || true); do
        if grep -qs "$DIR" "/proc/$pid/environ" "/proc/$pid/cmdline" 2>/dev/null \
            || [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$DIR" ]; then
            kill -KILL "$pid" 2>/dev/null || true
        fi
    done
    stop_munge
    log "stopped cluster in $DIR"
}

do_status() {
    local rc=0 node
    if pid_alive "$DIR/slurmctld.daemon.pid" slurmctld; then
        echo "slurmctld: running (pid $(cat "$DIR/slurmctld.daemon.pid"))"
    else
        echo "slurmctld: not running"; rc=3
    fi
    for node in $(node_names); do
        if pid_alive "$DIR/$node/slurmd.daemon.pid" slurmd; then
            echo "slurmd $node: running (pid $(cat "$DIR/$node/slurmd.daemon.pid"))"
        else
            echo "slurmd $node: not running"; rc=3
        fi
    done
    [ -s "$DIR/nodes" ] || { echo "no cluster in $DIR"; rc=3; }
    if munge_ok; then
        echo "munged: running$([ -e "$MUNGE_STATE/munged.pid" ] && echo ' (started by this script)')"
    else
        echo "munged: not running"; rc=3
    fi
    if [ "$rc" = 0 ]; then
        echo "SLURM_CONF=$CONF"
        sinfo -N -o '%N %P %t %c' 2>&1 || rc=3
    fi
    return "$rc"
}

case "$CMD" in
    start) do_start ;;
    stop) do_stop ;;
    status) do_status ;;
esac
