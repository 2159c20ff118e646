#!/usr/bin/env bash
# install-apptainer.sh: Apptainer (Debian sid's package) for this user, as both `apptainer` and
# `singularity`, beside a private newer C library; cached outside the clone, idempotent.
#
#     eval "$(scripts/install-apptainer.sh)" && apptainer --version
#
# Why so (facts in shared/hpc-runtimes.md, "Apptainer"; docs/runtimes.md): bookworm and trixie have
# no Apptainer; sid's binaries need a newer glibc than bookworm's. So:
# - the packages Apptainer runs with come from bookworm, by apt (root; a user without root is told
#   which to ask an admin for): squashfs-tools squashfuse fuse2fs uidmap, and patchelf;
# - apt-get download, with a private sources list (scripts/newer-debian.sh: the system's lists and
#   libc stay untouched), of sid's `apptainer` and of the libc6, libseccomp2 and libsqlite3-0 its
#   own Depends ask for, each taken from trixie when trixie's version satisfies it, else from sid;
# - a relocated install under PREFIX=${DLBENCH_CACHE:-~/.cache/dlbench}/apptainer-KEY (bin/,
#   etc/apptainer/, lib/x86_64-linux-gnu/apptainer/, var/lib/apptainer/: Apptainer finds its
#   configuration from where its binary lies), KEY a hash of this script and of the versions
#   downloaded; the private libraries in PREFIX/lib/glibc, which `patchelf` makes the interpreter
#   and RPATH of Apptainer's two binaries (apptainer, starter); PREFIX/versions names them all;
# - a post-install check: `apptainer --version` and `buildcfg` from PREFIX, and a container started
#   from a one-file SIF (the starter, its private libc and the session directory all work).
# Prints one line on stdout, `export PATH="PREFIX/bin:$PATH"`; progress on stderr. A second run
# finds the install (PREFIX/.complete) and only prints the line; `--update` asks the archive again
# (sid moves daily) and installs beside the old one when a version changed.
# Exit codes: 0 done; 1 a download, install step or the check failed (one line naming it);
# 2 usage, or not installable here by this user (one line: what to ask an admin for).
set -euo pipefail

PROG=$(basename "$0")
HERE=$(cd "$(dirname "$0")" && pwd)
PACKAGES=(squashfs-tools squashfuse fuse2fs uidmap patchelf)
LIBS=(libc6 libseccomp2 libsqlite3-0)
# The files of those packages Apptainer's binaries load, copied into PREFIX/lib/glibc.
LIB_FILES=(ld-linux-x86-64.so.2 libc.so.6 libm.so.6 libpthread.so.0 libdl.so.2 librt.so.1 libresolv.so.2
           libnss_files.so.2 libnss_dns.so.2 'libseccomp.so.2*' 'libsqlite3.so.0*')
LIBDIR=lib/x86_64-linux-gnu

. "$HERE/newer-debian.sh"  # also die (exit 2) and fail (exit 1)

update=0
for arg in "$@"; do
    case "$arg" in
        --update) update=1 ;;
        -h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 0 ;;
        *) die "unknown argument '$arg' (usage: $PROG [--update])" ;;
    esac
done
[ "$(uname -m)" = x86_64 ] || die "only x86_64 is supported (this is $(uname -m))"
command -v dpkg-query >/dev/null 2>&1 || die "not a Debian system (no dpkg-query): install Apptainer as your site documents"

CACHE=${DLBENCH_CACHE:-$HOME/.cache/dlbench}
SCRIPT_KEY=$(cat "$0" "$HERE/newer-debian.sh" | sha256sum | cut -c1-12)
CURRENT=$CACHE/apptainer-current-$SCRIPT_KEY  # names the PREFIX this script's last install made
done_line() { echo "export PATH=\"$1/bin:\$PATH\""; }

installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]; }
missing=()
for pkg in "${PACKAGES[@]}"; do installed "$pkg" || missing+=("$pkg"); done
if [ "$update" = 0 ] && [ "${#missing[@]}" = 0 ] && [ -s "$CURRENT" ] && [ -f "$(cat "$CURRENT")/.complete" ]; then
    done_line "$(cat "$CURRENT")"
    exit 0
fi
if [ "${#missing[@]}" -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || die "Debian packages missing: ${missing[*]} (ask an admin: apt-get install ${missing[*]}; or run this as root once)"
    NEEDRESTART_SUSPEND=1 "$HERE/ensure-packages.sh" "${missing[@]}" >&2 || fail "apt-get install ${missing[*]}"
fi

mkdir -p "$CACHE"
exec 9>"$CACHE/apptainer.lock"
flock 9  # a parallel install (another test worker) waits, then finds it done
if [ "$update" = 0 ] && [ -s "$CURRENT" ] && [ -f "$(cat "$CURRENT")/.complete" ]; then
    done_line "$(cat "$CURRENT")"
    exit 0
fi

WORK=$(mktemp -d "$CACHE/apptainer-work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
echo "$PROG: asking Debian trixie and sid for apptainer (private apt lists)" >&2
newer_apt_init "$WORK" trixie sid || exit 1
apptainer_version=$(newer_candidate apptainer sid)
[ -n "$apptainer_version" ] || fail "Debian sid offers no apptainer package"
want=("apptainer=$apptainer_version")
for lib in "${LIBS[@]}"; do
    min=$(newer_depends apptainer/sid "$lib")
    picked=$(newer_pick "$lib" "$min" trixie sid) || fail "no $lib >= ${min:-any} in trixie or sid (apptainer $apptainer_version needs it)"
    want+=("$lib=${picked#* }")
done
KEY=$( { echo "$SCRIPT_KEY"; printf '%s\n' "${want[@]}"; } | sha256sum | cut -c1-12)
PREFIX=$CACHE/apptainer-$KEY
if [ -f "$PREFIX/.complete" ]; then  # --update found the same versions
    echo "$PREFIX" >"$CURRENT"
    done_line "$PREFIX"
    exit 0
fi

echo "$PROG: downloading ${want[*]}" >&2
mkdir -p "$WORK/debs"
(cd "$WORK/debs" && newer_apt download "${want[@]}") >"$WORK/download.log" 2>&1 \
    || fail "apt-get download ${want[*]}: $(grep -E '^(E|Err):' "$WORK/download.log" | tail -n1)"

rm -rf "$PREFIX"
trap 'rm -rf "$WORK" "$PREFIX"' EXIT  # a failed or interrupted install leaves nothing half-made
mkdir -p "$WORK/apptainer" "$WORK/libs" "$PREFIX/bin" "$PREFIX/lib/glibc" "$PREFIX/var/lib/apptainer/mnt/session"
# The starter, relocated, takes the prefix to be one level above Debian's two-level libexec directory
# (lib/x86_64-linux-gnu), i.e. PREFIX/lib: its configuration and session directory are found there too.
ln -s ../etc "$PREFIX/lib/etc"
ln -s ../var "$PREFIX/lib/var"
dpkg-deb -x "$WORK"/debs/apptainer_*.deb "$WORK/apptainer" || fail "dpkg-deb -x apptainer"
for lib in "${LIBS[@]}"; do
    dpkg-deb -x "$WORK/debs/${lib}_"*.deb "$WORK/libs" || fail "dpkg-deb -x $lib"
done
cp -a "$WORK/apptainer/etc" "$PREFIX/"
mkdir -p "$PREFIX/$LIBDIR"
cp -a "$WORK/apptainer/usr/$LIBDIR/apptainer" "$PREFIX/$LIBDIR/"
cp -a "$WORK/apptainer/usr/bin/apptainer" "$PREFIX/bin/"
ln -s apptainer "$PREFIX/bin/singularity"
for pattern in "${LIB_FILES[@]}"; do
    # shellcheck disable=SC2086  # the patterns are globs
    found=$(cd "$WORK/libs/usr/$LIBDIR" && ls -d $pattern 2>/dev/null) || fail "$pattern not found in ${LIBS[*]}"
    for file in $found; do cp -a "$WORK/libs/usr/$LIBDIR/$file" "$PREFIX/lib/glibc/"; done
done
for binary in "$PREFIX/bin/apptainer" "$PREFIX/$LIBDIR/apptainer/bin/starter"; do
    # DT_RPATH, not RUNPATH: the private libsqlite3 must find the private libm too
    patchelf --set-interpreter "$PREFIX/lib/glibc/ld-linux-x86-64.so.2" --force-rpath \
        --set-rpath "$PREFIX/lib/glibc" "$binary" 2>"$WORK/patchelf.log" || fail "patchelf $binary: $(tail -n1 "$WORK/patchelf.log")"
done
printf '%s\n' "${want[@]}" >"$PREFIX/versions"

# The check: the binary runs with the private libc and finds its relocated configuration.
got=$("$PREFIX/bin/apptainer" --version 2>&1 || true)
conf=$("$PREFIX/bin/apptainer" buildcfg 2>/dev/null | sed -n 's/^APPTAINER_CONF_FILE=//p' || true)
[ "$got" = "apptainer version ${apptainer_version%%-*}" ] && [ "$conf" = "$PREFIX/etc/apptainer/apptainer.conf" ] \
    || fail "the installed Apptainer does not run (${want[*]}): '$(echo "$got" | tail -n1)'${conf:+, config $conf}"
# A container from a sandbox directory holding the host's `true` (no squashfuse, no /dev/fuse needed),
# in a user namespace: what both root and users can do here.
sandbox=$WORK/sandbox
true_bin=$(type -P true)
mkdir -p "$sandbox$(dirname "$true_bin")" "$sandbox/proc" "$sandbox/sys" "$sandbox/dev" "$sandbox/tmp"
cp "$true_bin" "$sandbox$true_bin"
for lib in $(ldd "$true_bin" | grep -o '/[^ ]*'); do mkdir -p "$sandbox$(dirname "$lib")" && cp -L "$lib" "$sandbox$lib"; done
"$PREFIX/bin/apptainer" -q exec --userns "$sandbox" "$true_bin" 2>"$WORK/exec.log" \
    || fail "the installed Apptainer (${want[*]}) cannot start a container: $(grep -v '^INFO' "$WORK/exec.log" | tail -n1)"
chmod -R a+rX "$PREFIX"  # other users may run it (a site's shared install)
touch "$PREFIX/.complete"
trap 'rm -rf "$WORK"' EXIT
echo "$PREFIX" >"$CURRENT"
echo "$PROG: installed ${want[*]} in $PREFIX" >&2
done_line "$PREFIX"
