# newer-debian.sh: sourced by installers that take a package from a newer Debian suite (trixie,
# sid) than the system's. Apt runs with a private sources list, lists and cache under a work
# directory: the system's apt lists, sources and packages stay untouched. The archive is the one
# the system's own sources name (a site's mirror stays its mirror), checked with Debian's keyring.
#
#   . scripts/newer-debian.sh
#   newer_apt_init "$WORK" trixie sid       # private sources + apt-get update
#   newer_apt download apptainer/sid        # any apt-get command, in the private setup
#   newer_candidate apptainer sid           # the version a suite offers ('' if none)
#   newer_depends apptainer/sid libc6       # the minimum version apptainer's Depends asks of libc6
#
# Functions return non-zero with one line on stderr (prefixed with $PROG) when a step fails;
# die (usage, exit 2) and fail (a step failed, exit 1) end the script with one such line.

die() { echo "$PROG: error: $*" >&2; exit 2; }
fail() { echo "$PROG: failed: $*" >&2; exit 1; }

NEWER_KEYRING=${NEWER_KEYRING:-/usr/share/keyrings/debian-archive-keyring.gpg}
NEWER_APT=()

# The URI of the system's Debian archive: the first deb822 or one-line source serving the
# system's own codename from a URI ending in /debian.
debian_archive() {
    local codename uri
    codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
    uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk -v c="$codename" '
        /^URIs:/ {u=$2} /^Suites:/ {for (i = 2; i <= NF; i++) if ($i == c && u ~ /\/debian\/?$/) {print u; exit}}')
    [ -n "$uri" ] || uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null | awk -v c="$codename" '
        $1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) {if ($(i + 1) == c && $i ~ /\/debian\/?$/) {print $i; exit}; break}}')
    [ -n "$uri" ] || { echo "$PROG: no Debian archive for '${codename:-?}' in the system's apt sources" >&2; return 1; }
    echo "${uri%/}"
}

newer_apt_init() {
    local work=$1 uri suite; shift
    uri=$(debian_archive) || return 1
    [ -r "$NEWER_KEYRING" ] || { echo "$PROG: Debian's archive keyring $NEWER_KEYRING is missing (apt-get install debian-archive-keyring)" >&2; return 1; }
    mkdir -p "$work/apt/none" "$work/apt/lists/partial" "$work/apt/cache/archives/partial"
    : >"$work/apt/sources.list"
    for suite in "$@"; do
        echo "deb [signed-by=$NEWER_KEYRING] $uri $suite main" >>"$work/apt/sources.list"
    done
    NEWER_APT=(-q -o "Dir::Etc::SourceList=$work/apt/sources.list" -o "Dir::Etc::SourceParts=$work/apt/none"
               -o "Dir::State::Lists=$work/apt/lists" -o "Dir::Cache=$work/apt/cache"
               -o "Dir::State::status=$work/apt/status" -o "Debug::NoLocking=1")
    [ "$(id -u)" -ne 0 ] || NEWER_APT+=(-o "APT::Sandbox::User=root")
    : >"$work/apt/status"  # nothing "installed": candidates are the suites' own
    if ! apt-get "${NEWER_APT[@]}" update >"$work/apt/update.log" 2>&1; then
        echo "$PROG: apt-get update of $* from $uri failed: $(grep -E '^(E|Err):' "$work/apt/update.log" | tail -n1)" >&2
        return 1
    fi
}

newer_apt() { apt-get "${NEWER_APT[@]}" "$@"; }

# newer_candidate PKG SUITE: the version SUITE has of PKG.
newer_candidate() {
    apt-cache "${NEWER_APT[@]}" show "$1/$2" 2>/dev/null | awk '/^Version:/ && !v {v = $2} END {print v}'
}

# newer_depends PKG/SUITE DEP: the version DEP must be at least, by PKG's Depends ('' if unversioned).
newer_depends() {
    apt-cache "${NEWER_APT[@]}" show "$1" 2>/dev/null | awk '/^Depends:/ && !d {d = $0} END {print d}' | tr ',' '\n' \
        | sed -n "s/^ *$2 *(>= *\([^)]*\)).*/\1/p" | sed -n 1p
}

# newer_pick DEP MIN SUITE...: the first suite's version of DEP that is >= MIN ('' if none is).
newer_pick() {
    local dep=$1 min=$2 suite version; shift 2
    for suite in "$@"; do
        version=$(newer_candidate "$dep" "$suite")
        [ -n "$version" ] || continue
        if [ -z "$min" ] || dpkg --compare-versions "$version" ge "$min"; then echo "$suite $version"; return 0; fi
    done
    return 1
}
