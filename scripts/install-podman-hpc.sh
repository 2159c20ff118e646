#!/usr/bin/env bash
# install-podman-hpc.sh: NERSC's podman-hpc on this machine, the way it was measured to work
# (../shared/hpc-runtimes.md; docs/runtimes.md): cached outside the clone, idempotent.
#
#   eval "$(scripts/install-podman-hpc.sh)"      # then: benchrun run --runtime podman-hpc ...
#
# Installs (root, Debian/apt):
# - Debian's podman fuse-overlayfs squashfuse inotify-tools uidmap runc (apt, NEEDRESTART_SUSPEND=1
#   so needrestart queues no Docker restart; never crun: it fails on hybrid cgroups);
# - PyPI podman-hpc 1.2.2 into a venv under $DLBENCH_CACHE/podman-hpc-KEY (default
#   ~/.cache/dlbench), KEY a hash of this script (versions, options);
# - a static mksquashfs >= 4.6, which `podman-hpc migrate` runs *inside* the image: built from
#   Debian trixie's own source package squashfs-tools (apt-get source through a private sources
#   list: the system's apt lists stay untouched);
# - its configuration: PREFIX/etc/podman_hpc.yaml (PODMANHPC_CONFIG_FILE), PREFIX/etc/containers.conf
#   (CONTAINERS_CONF: the ulimits podman needs as root here, runtime runc), the OCI hook, and
#   PREFIX/bin/podman-hpc, a wrapper that sets both and runs the venv's podman-hpc.
# Prints one line on stdout, `export PATH=PREFIX/bin:$PATH`; progress goes to stderr.
# A second run finds PREFIX/.complete and the packages and only prints the line (<1 s).
#
# The heavy steps (apt, the mksquashfs build) hold the machine-wide lock $DLBENCH_HEAVY_LOCK (default
# /tmp/dlbench-heavy.lock; empty: none) so parallel sessions do not pile up: do not run this
# script from a shell that already holds that lock.
# Exit codes: 0 done; 1 a step failed (its log's tail on stderr); 2 usage / not installable here.
set -euo pipefail

PROG=$(basename "$0")
PODMAN_HPC_VERSION=1.2.2
MKSQUASHFS_MIN=4.6
SOURCE_SUITE=trixie   # Debian's squashfs-tools >= 4.6 (bookworm has 4.5.1, no -xattrs-exclude)
PACKAGES=(podman fuse-overlayfs squashfuse inotify-tools uidmap runc)
BUILD_PACKAGES=(build-essential dpkg-dev zlib1g-dev liblzma-dev liblzo2-dev liblz4-dev libzstd-dev)

die() { echo "$PROG: error: $*" >&2; exit 2; }
log() { echo "$PROG: $*" >&2; }

case "${1:-}" in
    "") ;;
    -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
    *) die "unknown argument '$1' (usage: $PROG; no options)" ;;
esac

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE=${DLBENCH_CACHE:-$HOME/.cache/dlbench}
KEY=$( { cat "$0"; echo "podman-hpc==$PODMAN_HPC_VERSION"; } | sha256sum | cut -c1-12)
PREFIX=$CACHE/podman-hpc-$KEY
HEAVY_LOCK=${DLBENCH_HEAVY_LOCK-/tmp/dlbench-heavy.lock}

installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]; }
missing() { local p; for p in "$@"; do installed "$p" || echo "$p"; done; }
heavy_lock() { [ -z "$HEAVY_LOCK" ] || { exec 8>>"$HEAVY_LOCK" && flock 8; }; }   # held until heavy_unlock
heavy_unlock() { [ -z "$HEAVY_LOCK" ] || flock -u 8; }
done_line() { echo "export PATH=\"$PREFIX/bin:\$PATH\""; }

command -v dpkg-query >/dev/null 2>&1 || die "not a Debian system (no dpkg-query): install podman-hpc as your site documents"
if [ -f "$PREFIX/.complete" ] && [ -z "$(missing "${PACKAGES[@]}")" ] && ! installed crun; then
    done_line
    exit 0
fi
[ "$(id -u)" -eq 0 ] || die "needs root for apt (podman, squashfuse, ...): run it as root once; later runs need no root"
installed crun && die "crun is installed: podman picks it over runc and it fails on these hybrid cgroups; remove it (apt-get remove crun)"
command -v python3 >/dev/null 2>&1 || die "no python3 to make podman-hpc's venv (apt-get install python3-venv)"

mkdir -p "$CACHE"
exec 9>"$CACHE/podman-hpc.install.lock"
flock 9   # two installs at once: the second waits, then finds .complete
if [ -f "$PREFIX/.complete" ] && [ -z "$(missing "${PACKAGES[@]}")" ]; then
    done_line
    exit 0
fi

LOG=$(mktemp /tmp/install-podman-hpc.XXXXXX.log)
WORK=$(mktemp -d /tmp/install-podman-hpc.XXXXXX)
trap 'rm -rf "$WORK" "$LOG"' EXIT
step() {  # step WHAT CMD...: run quietly, or fail with the log's tail
    local what=$1; shift
    if ! "$@" >>"$LOG" 2>&1; then
        echo "$PROG: failed: $what" >&2
        tail -n 20 "$LOG" >&2
        exit 1
    fi
}

export NEEDRESTART_SUSPEND=1 DEBIAN_FRONTEND=noninteractive
heavy_lock   # apt and the build, in one go
need=$(missing "${PACKAGES[@]}" "${BUILD_PACKAGES[@]}")
if [ -n "$need" ]; then
    log "apt: $(echo $need)"
    # shellcheck disable=SC2086
    step "apt-get install $(echo $need)" "$HERE/ensure-packages.sh" $need
fi
installed crun && die "installing podman pulled in crun; remove it (apt-get remove crun) and run this again"

# A static mksquashfs >= 4.6 from Debian's own source package (podman-hpc runs it inside images).
rm -rf "$PREFIX"
mkdir -p "$PREFIX/bin" "$PREFIX/etc" "$PREFIX/hooks.d"
apt_private=(-o "Dir::Etc::SourceList=$WORK/apt/sources.list" -o "Dir::Etc::SourceParts=$WORK/apt/none"
             -o "Dir::State::Lists=$WORK/apt/lists" -o "Dir::Cache=$WORK/apt/cache" -o "APT::Sandbox::User=root")
mkdir -p "$WORK/apt/none" "$WORK/apt/lists/partial" "$WORK/apt/cache/archives/partial" "$WORK/src"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $SOURCE_SUITE main" \
    >"$WORK/apt/sources.list"
log "mksquashfs: Debian $SOURCE_SUITE's squashfs-tools source, static build"
step "apt-get update (private list: $SOURCE_SUITE sources)" apt-get -q "${apt_private[@]}" update
step "apt-get source squashfs-tools" sh -c 'cd "$1" && shift && apt-get -q "$@" source squashfs-tools' _ "$WORK/src" "${apt_private[@]}"
srcdir=$(find "$WORK/src" -mindepth 2 -maxdepth 2 -type d -name squashfs-tools -print -quit)
[ -n "$srcdir" ] || { echo "$PROG: failed: no squashfs-tools/ in the unpacked source" >&2; exit 1; }
step "make mksquashfs (static)" make -C "$srcdir" -j2 XZ_SUPPORT=1 LZO_SUPPORT=1 LZ4_SUPPORT=1 ZSTD_SUPPORT=1 \
    EXTRA_LDFLAGS=-static mksquashfs
install -m 0755 "$srcdir/mksquashfs" "$PREFIX/bin/mksquashfs.static"
version=$("$PREFIX/bin/mksquashfs.static" -version 2>&1 | sed -n 's/^mksquashfs version \([0-9.]*\).*/\1/p')
[ -n "$version" ] && printf '%s\n%s\n' "$MKSQUASHFS_MIN" "$version" | sort -VC \
    || { echo "$PROG: failed: built mksquashfs is '${version:-unknown}', need >= $MKSQUASHFS_MIN" >&2; exit 1; }
if [[ $(LC_ALL=C readelf -l "$PREFIX/bin/mksquashfs.static" 2>/dev/null) == *"program interpreter"* ]]; then
    echo "$PROG: failed: the mksquashfs built is not static" >&2; exit 1
fi
heavy_unlock

log "podman-hpc $PODMAN_HPC_VERSION (PyPI) into $PREFIX/venv"
step "python3 -m venv" python3 -m venv "$PREFIX/venv"
step "pip install podman-hpc==$PODMAN_HPC_VERSION" "$PREFIX/venv/bin/pip" install -q "podman-hpc==$PODMAN_HPC_VERSION"
step "configure_hooks" "$PREFIX/venv/bin/python" -m podman_hpc.configure_hooks --force --hooksd "$PREFIX/hooks.d"

shipped=$PREFIX/venv/etc/podman_hpc
# The shipped file's keys, with this install's paths; the shared-run keys as shipped.
cat >"$PREFIX/etc/podman_hpc.yaml" <<EOF
podman_bin: "$(command -v podman)"
mount_program: "$PREFIX/venv/bin/fuse-overlayfs-wrap"
modules_dir: "$shipped/modules.d"
mksquashfs_bin: "$PREFIX/bin/mksquashfs.static"
hooks_dir: "$PREFIX/hooks.d"
EOF
grep -E '^(shared_run_exec_args|shared_run_command|localid_var|tasks_per_node_var|ntasks_pattern|graph_root_template|run_root_template|config_home_template):' \
    "$shipped/podman_hpc.yaml" >>"$PREFIX/etc/podman_hpc.yaml"
cat >"$PREFIX/etc/containers.conf" <<'EOF'
# podman as root on these hosts: raised ulimits (the defaults fail) and runc (crun fails on hybrid cgroups)
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
EOF
cat >"$PREFIX/bin/podman-hpc" <<EOF
#!/bin/sh
# podman-hpc $PODMAN_HPC_VERSION as scripts/install-podman-hpc.sh installed it: its site configuration here.
export PODMANHPC_CONFIG_FILE="\${PODMANHPC_CONFIG_FILE:-$PREFIX/etc/podman_hpc.yaml}"
export CONTAINERS_CONF="\${CONTAINERS_CONF:-$PREFIX/etc/containers.conf}"
# It looks its helpers (fuse-overlayfs-wrap, hook_tool) up on PATH, and needs \$USER.
export PATH="$PREFIX/venv/bin:\$PATH" USER="\${USER:-\$(id -un)}"
exec "$PREFIX/venv/bin/podman-hpc" "\$@"
EOF
chmod 0755 "$PREFIX/bin/podman-hpc"
step "podman-hpc infohpc" "$PREFIX/bin/podman-hpc" infohpc
touch "$PREFIX/.complete"
for old in "$CACHE"/podman-hpc-*/; do  # earlier versions of this install, or one killed half-way (we hold the lock)
    [ "${old%/}" = "$PREFIX" ] || rm -rf "$old"
done
log "installed in $PREFIX"
done_line
