"""What carried a rank's bytes, read from inside its process: the libraries really mapped (/proc/self/maps)
and the file system each came from (/proc/self/mountinfo), the MPI library as it describes itself
(MPI_Get_library_version) with Open MPI's components loaded, NCCL's channels from its INFO log, the
network interface a socket library was told or picks, and the variables that steer all of these
(record: path.ranks[].collective and .libraries, docs/results.md#path).

Why: a runtime hook that injects the host's MPI or NCCL, a UCX told to skip CMA, or NCCL falling back
from P2P to sockets is invisible in a throughput number; these facts name it. Parsers take text so
that they are tested on real inputs; readers return None or [] when they cannot tell. Only the standard
library is imported.
"""

from __future__ import annotations

import ctypes
import ipaddress
import os
import re
import socket
from pathlib import Path

# -- /proc/self/mountinfo and /proc/self/maps ------------------------------------------------------------


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash in paths as octal escapes (\\040)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[dict]:
    """Each mount: root (within its file system), mount_point, fstype, source, super_options."""
    mounts = []
    for line in text.splitlines():
        if " - " not in line:
            continue
        before, after = line.split(" - ", 1)
        fields, tail = before.split(), after.split()
        if len(fields) < 5 or len(tail) < 2:
            continue
        mounts.append({"root": _unescape(fields[3]), "mount_point": _unescape(fields[4]), "fstype": tail[0],
                       "source": tail[1], "super_options": tail[2] if len(tail) > 2 else ""})
    return mounts


def mount_point_of(path: str, mounts: list[dict]) -> str | None:
    """The longest mount point holding `path` (a file bind-mounted on its own is its own mount point)."""
    best = None
    for mount in mounts:
        point = mount["mount_point"]
        if path == point or path.startswith(point.rstrip("/") + "/"):
            if best is None or len(point) > len(best):
                best = point
    return best


def parse_maps(text: str) -> list[str]:
    """The files mapped into a process, each once, in the order first mapped."""
    paths = []
    for line in text.splitlines():
        fields = line.split(None, 5)
        if len(fields) == 6 and fields[5].startswith("/"):
            path = fields[5].removesuffix(" (deleted)")
            if path not in paths:
                paths.append(path)
    return paths


# -- the communication and threading libraries mapped --------------------------------------------------

LIBRARY_KINDS = (  # (kind, file-name pattern): what a mapped library does on the path
    ("mpi", re.compile(r"^lib(mpi|mpich|mpi_\w+)(\.so|-)")),
    ("ucx", re.compile(r"^libuc[ptsm]\.so")),
    ("libfabric", re.compile(r"^libfabric\.so")),
    ("nccl", re.compile(r"^libnccl\.so")),
    ("cuda", re.compile(r"^lib(cuda|cudart|cublas|cublasLt)(\.so|-)")),
    ("openmp", re.compile(r"^lib(gomp|iomp5|omp)(\.so|-)")),
)
SO_VERSION = re.compile(r"\.so\.(\d[\w.]*)$")


def library_kind(name: str) -> str | None:
    return next((kind for kind, pattern in LIBRARY_KINDS if pattern.match(name)), None)


def so_version(path: str) -> str | None:
    """The version in a shared library's file name (libmpi.so.40.30.4 -> 40.30.4), symlinks resolved."""
    for candidate in (os.path.basename(path), os.path.basename(os.path.realpath(path))):
        match = SO_VERSION.search(candidate)
        if match:
            return match.group(1)
    return None


def nccl_version(path: str) -> str | None:
    """NCCL's own version (ncclGetVersion), finer than its file name's libnccl.so.2."""
    try:
        function = ctypes.CDLL(path).ncclGetVersion
    except (OSError, AttributeError):
        return None
    code = ctypes.c_int(0)
    if function(ctypes.byref(code)) != 0 or code.value <= 0:
        return None
    major, rest = divmod(code.value, 10000) if code.value >= 10000 else divmod(code.value, 1000)
    minor, patch = divmod(rest, 100)
    return f"{major}.{minor}.{patch}"


def origin(path: str, mounts: list[dict], in_container: bool) -> tuple[str, str | None]:
    """(origin, mount point) of a library file: host without a container; image when it lies on the
    container's root file system; mount when on a file system the runtime mounted in (the host's)."""
    if not in_container:
        return "host", None
    point = mount_point_of(path, mounts)
    if point is None or point == "/":
        return "image", None
    return "mount", point


def libraries(mapped: list[str], mounts: list[dict], in_container: bool) -> list[dict]:
    """LibraryInfo for each communication or threading library among the `mapped` files."""
    found = []
    for path in mapped:
        name = os.path.basename(path)
        kind = library_kind(name)
        if kind is None:
            continue
        where, point = origin(path, mounts, in_container)
        version = (nccl_version(path) if kind == "nccl" else None) or so_version(path)
        found.append({"kind": kind, "name": name, "path": path, "version": version, "origin": where,
                      "mount": point})
    return found


def mapped_files() -> list[str]:
    try:
        return parse_maps(Path("/proc/self/maps").read_text())
    except OSError:
        return []


def mounts() -> list[dict]:
    try:
        return parse_mountinfo(Path("/proc/self/mountinfo").read_text())
    except OSError:
        return []


# -- MPI -----------------------------------------------------------------------------------------------

MPI_MAX_LIBRARY_VERSION_STRING = 8192  # MPICH's; Open MPI's is 256: the larger buffer fits either
OMPI_COMPONENT = re.compile(r"^mca_([a-z0-9]+)_(\w+)\.so$")
SINGLE_COPY_VARIABLES = ("OMPI_MCA_btl_vader_single_copy_mechanism", "OMPI_MCA_btl_sm_single_copy_mechanism")


def library_version(path: str) -> str | None:
    """MPI_Get_library_version's text from the library at `path` (callable before MPI_Init)."""
    try:
        function = ctypes.CDLL(path).MPI_Get_library_version
    except (OSError, AttributeError):
        return None
    text, length = ctypes.create_string_buffer(MPI_MAX_LIBRARY_VERSION_STRING), ctypes.c_int(0)
    function.argtypes = [ctypes.c_char_p, ctypes.POINTER(ctypes.c_int)]
    if function(text, ctypes.byref(length)) != 0:
        return None
    return text.value.decode(errors="replace").strip() or None


def parse_library_version(text: str) -> dict:
    """implementation, version, library_version (the first line), device, netmod from MPI_Get_library_version's
    text: Open MPI ("Open MPI v4.1.2, package: ..."), MPICH and MVAPICH ("MPICH Version: 4.0 ... MPICH Device:
    ch4:ofi"), Intel MPI ("Intel(R) MPI Library 2021.6 for Linux* OS")."""
    first = text.strip().splitlines()[0].strip() if text.strip() else ""
    fields = {key: value for _, key, value in
              re.findall(r"^\s*(MPICH2?|MVAPICH2?) (\w[\w ]*?)\s*:\s*(.*?)\s*$", text, re.M)}
    info = {"implementation": "other", "version": None, "library_version": first or None, "device": None,
            "netmod": None}
    if match := re.match(r"Open MPI v(\S+?),", first):
        info.update(implementation="open-mpi", version=match.group(1))
    elif first.startswith("Intel(R) MPI Library"):
        match = re.search(r"Library (\S+)", first)
        info.update(implementation="intel-mpi", version=match.group(1) if match else None)
    elif first.startswith(("MPICH", "MVAPICH")):
        info.update(implementation="mvapich" if first.startswith("MVAPICH") else "mpich", version=fields.get("Version"))
        device = fields.get("Device")
        info["device"] = device or None
        configured = re.search(r"--with-device=\S*?:(\w+):(\w+)", fields.get("configure", ""))
        if device and device.startswith("ch4:"):
            info["netmod"] = device.split(":", 1)[1]
        elif configured:  # ch3:nemesis:tcp, as configured
            info["netmod"] = configured.group(2)
    return info


def mpi_path(mapped: list[str], environ, cma: bool | None) -> dict | None:
    """MpiPath of the MPI library this process mapped, None without one. Open MPI's components are those
    still mapped (MPI_Init closes the ones it did not select); the single-copy mechanism is the one asked
    for, Open MPI 5's smsc component, xpmem when mapped, else CMA where the shared-memory BTL is loaded
    and a peer could be read (`cma`)."""
    main = next((p for p in mapped if re.match(r"^lib(mpi|mpich)\.so", os.path.basename(p))), None)
    if main is None:
        return None
    text = library_version(main)
    info = parse_library_version(text) if text else {
        "implementation": None, "version": None, "library_version": None, "device": None, "netmod": None}
    components = [f"{m.group(1)}_{m.group(2)}" for p in mapped if (m := OMPI_COMPONENT.match(os.path.basename(p)))]
    pmls = [c[len("pml_"):] for c in components if c.startswith("pml_")]
    btls = [c[len("btl_"):] for c in components if c.startswith("btl_")]
    smsc = [c[len("smsc_"):] for c in components if c.startswith("smsc_")]
    single_copy = next((environ[v] for v in SINGLE_COPY_VARIABLES if environ.get(v)), None)
    if single_copy is None and smsc:
        single_copy = smsc[0]
    elif single_copy is None and any(os.path.basename(p).startswith("libxpmem") for p in mapped):
        single_copy = "xpmem"
    elif single_copy is None and {"vader", "sm"} & set(btls) and cma is not None:
        single_copy = "cma" if cma else "none"
    if info["netmod"] == "ofi" and environ.get("FI_PROVIDER"):
        info["netmod"] = f"ofi ({environ['FI_PROVIDER']})"
    return {**info, "components": components, "pml": pmls[0] if len(pmls) == 1 else environ.get("OMPI_MCA_pml"),
            "btl": btls, "single_copy": single_copy}


# -- NCCL's INFO log -------------------------------------------------------------------------------------

NCCL_CHANNEL = re.compile(r"NCCL INFO Channel (\d+)(?:/\d+)? : (\d+)\[[0-9a-fA-F]+\] -> (\d+)\[[0-9a-fA-F]+\]"
                          r"(?: \[(?:send|receive)\])? via (\S+(?: pointer)?)")


def parse_nccl_channels(text: str) -> list[dict]:
    """NcclChannels from NCCL's INFO log: one per channel, source, target and transport as NCCL names it
    (P2P/IPC/read, SHM/direct/direct, NET/IB/0/GDRDMA, NET/Socket/0, ...); the send and receive lines of one
    connection count once, and the ring listings (Channel 00/02 :    0   1) are not connections."""
    seen = {}
    for match in NCCL_CHANNEL.finditer(text):
        channel = {"channel": int(match.group(1)), "source": int(match.group(2)), "target": int(match.group(3)),
                   "transport": match.group(4)}
        seen.setdefault(tuple(channel.values()), channel)
    return list(seen.values())


NCCL_LOG_VARIABLES = ("NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE")


def capture_nccl_log(environ, directory: str, rank: int) -> str | None:
    """Ask NCCL for its INIT lines in a file of this rank (before NCCL starts): the file, or None when the
    user set NCCL_DEBUG (their log goes where they said; it is theirs)."""
    if environ.get("NCCL_DEBUG"):
        return None
    path = os.path.join(directory, f"nccl-rank-{rank}.log")
    environ.update({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT", "NCCL_DEBUG_FILE": path})
    return path


# -- the interface and the variables --------------------------------------------------------------------

INTERFACE_VARIABLES = {"gloo": ("GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME"), "nccl": ("NCCL_SOCKET_IFNAME",),
                       "mpi": ("OMPI_MCA_btl_tcp_if_include", "UCX_NET_DEVICES", "FI_TCP_IFACE"),
                       "grpc": (), "ring": ()}


def parse_route(text: str) -> list[tuple[str, int, int, int]]:
    """/proc/net/route's IPv4 routes: (interface, destination, mask, metric), addresses as host integers."""
    routes = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 8:
            swap = lambda hex_text: int.from_bytes(bytes.fromhex(hex_text), "little")  # noqa: E731 - little-endian
            routes.append((fields[0], swap(fields[1]), swap(fields[7]), int(fields[6])))
    return routes


def routed_interface(address: str, routes: list[tuple[str, int, int, int]],
                     local: dict[str, list[str]] | None = None) -> str | None:
    """The interface `address` is reached through: lo for loopback, the interface holding it when it is
    this host's own (`local`: interface -> addresses), else the longest-prefix route."""
    try:
        ip = ipaddress.ip_address(address)
    except ValueError:
        return None
    if ip.is_loopback:
        return "lo"
    for name, addresses in (local or {}).items():
        if address in addresses:
            return name
    if ip.version != 4:
        return None
    value = int(ip)
    matching = [(bin(mask).count("1"), -metric, name) for name, dest, mask, metric in routes if value & mask == dest]
    return max(matching)[2] if matching else None


def interface(library: str | None, coordinator: str, environ) -> str | None:
    """The interface the collective library was told (its variable) or, unset, the one that routes to
    process 0's host; None for libraries without one or when not known."""
    if library is None:
        return None
    for variable in INTERFACE_VARIABLES.get(library, ()):
        if environ.get(variable):
            return environ[variable]
    try:
        address = socket.gethostbyname(coordinator)
        routes = parse_route(Path("/proc/net/route").read_text())
    except OSError:
        return None
    try:
        import psutil  # lazily: bench --help stays light

        local = {name: [a.address for a in addresses] for name, addresses in psutil.net_if_addrs().items()}
    except (ImportError, OSError):
        local = {}
    return routed_interface(address, routes, local)


STEERING_PREFIXES = ("OMPI_MCA_", "UCX_", "FI_", "NCCL_", "GLOO_", "MPIR_CVAR_", "I_MPI_", "HOROVOD_", "TP_SOCKET_")
SETTING_MAX_CHARS = 200


def settings(environ, own: tuple[str, ...] = ()) -> dict[str, str]:
    """The variables that steer the path, as set (values cut at SETTING_MAX_CHARS); `own`: those bench set
    itself to read NCCL's log, which steer nothing."""
    return {key: value if len(value) <= SETTING_MAX_CHARS else value[:SETTING_MAX_CHARS - 1] + "…"
            for key, value in sorted(environ.items()) if key.startswith(STEERING_PREFIXES) and key not in own}
