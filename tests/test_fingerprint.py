"""The path fingerprint and the preflight (issue 43): the parsers on real-format inputs, the CMA probe between
two real processes, and real runs whose records carry `path` and `preflight` (a planted failure included)."""

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from benchmarks.measure import limits, pathprobe, preflight
from benchmarks.results import fingerprint, provenance
from infra.helpers import ROOT, benchrun, python_env, validate_record

# -- /proc/self/mountinfo, /proc/self/maps and the libraries' origin ------------------------------------

# A Docker container's mountinfo (overlay root, a bind-mounted volume, the NVIDIA hook's single-file mounts).
MOUNTINFO = """\
1067 872 0:254 / / rw,relatime master:431 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/A,upperdir=/var/lib/docker/overlay2/x/diff
1068 1067 0:257 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw
1075 1067 0:261 / /dev/shm rw,nosuid,nodev,noexec,relatime - tmpfs shm rw,size=65536k
1076 1067 8:1 /home/me/work /work rw,relatime - ext4 /dev/sda1 rw
1077 1067 8:1 /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05 /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05 ro - ext4 /dev/sda1 rw
1078 1067 8:1 /opt/with\\040space /opt/with\\040space rw,relatime - ext4 /dev/sda1 rw
1080 1067 0:30 / /sys/fs/cgroup/cpu,cpuacct ro,nosuid,nodev,noexec,relatime - cgroup cgroup rw,cpu,cpuacct
"""  # noqa: E501 - real mountinfo lines, kept whole

MAPS = """\
7f1c2a000000-7f1c2a021000 r--p 00000000 00:00 0
7f1c2b400000-7f1c2b45a000 r--p 00000000 08:01 1311 /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05
7f1c2b45a000-7f1c2b800000 r-xp 0005a000 08:01 1311 /usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05
7f1c2c000000-7f1c2c0a0000 r-xp 00000000 00:3a 5521 /usr/lib/x86_64-linux-gnu/openmpi/lib/libmpi.so.40.30.2
7f1c2c200000-7f1c2c210000 r-xp 00000000 00:3a 5530 /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_pml_ob1.so
7f1c2c300000-7f1c2c310000 r-xp 00000000 00:3a 5531 /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_btl_vader.so
7f1c2c400000-7f1c2c410000 r-xp 00000000 00:3a 5532 /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_btl_self.so
7f1c2c500000-7f1c2c510000 r-xp 00000000 00:3a 5533 /usr/lib/x86_64-linux-gnu/libucp.so.0.0.0
7f1c2c600000-7f1c2c610000 r-xp 00000000 00:3a 5534 /work/venv/site-packages/torch/lib/libgomp-a34b3233.so.1
7f1c2c700000-7f1c2c710000 r-xp 00000000 00:3a 5535 /opt/with space/libfabric.so.1.18.1 (deleted)
7fff5a1f0000-7fff5a211000 rw-p 00000000 00:00 0                          [stack]
"""


def test_mountinfo_and_maps_are_parsed_as_the_kernel_writes_them():
    mounts = pathprobe.parse_mountinfo(MOUNTINFO)
    assert mounts[0] == {"root": "/", "mount_point": "/", "fstype": "overlay", "source": "overlay",
                         "super_options": mounts[0]["super_options"]}
    assert mounts[5]["mount_point"] == "/opt/with space"  # octal escapes undone
    assert pathprobe.mount_point_of("/work/venv/lib/x.so", mounts) == "/work"
    assert pathprobe.mount_point_of("/workspace/x.so", mounts) == "/"  # a prefix is not a parent
    mapped = pathprobe.parse_maps(MAPS)
    assert mapped[0] == "/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05" and len(mapped) == 8  # each file once
    assert mapped[-1] == "/opt/with space/libfabric.so.1.18.1"


def test_libraries_are_named_with_kind_version_and_origin():
    found = {lib["name"]: lib for lib in pathprobe.libraries(
        pathprobe.parse_maps(MAPS), pathprobe.parse_mountinfo(MOUNTINFO), in_container=True)}
    assert set(found) == {"libcuda.so.535.104.05", "libmpi.so.40.30.2", "libucp.so.0.0.0", "libgomp-a34b3233.so.1",
                          "libfabric.so.1.18.1"}  # the MCA components are MPI's parts, not libraries of their own
    cuda = found["libcuda.so.535.104.05"]
    assert (cuda["kind"], cuda["version"], cuda["origin"], cuda["mount"]) == (
        "cuda", "535.104.05", "mount", "/usr/lib/x86_64-linux-gnu/libcuda.so.535.104.05")  # the NVIDIA hook's
    assert (found["libmpi.so.40.30.2"]["origin"], found["libmpi.so.40.30.2"]["kind"]) == ("image", "mpi")
    assert (found["libgomp-a34b3233.so.1"]["kind"], found["libgomp-a34b3233.so.1"]["mount"]) == ("openmp", "/work")
    assert found["libfabric.so.1.18.1"]["kind"] == "libfabric" and found["libucp.so.0.0.0"]["kind"] == "ucx"
    outside = pathprobe.libraries(pathprobe.parse_maps(MAPS), [], in_container=False)
    assert {lib["origin"] for lib in outside} == {"host"}


def test_this_process_s_own_libraries_are_read():
    import torch  # noqa: F401 - maps libgomp (torch's OpenMP)

    names = [lib["kind"] for lib in pathprobe.libraries(pathprobe.mapped_files(), pathprobe.mounts(), False)]
    assert "openmp" in names


# -- cgroup CPU quota ------------------------------------------------------------------------------------

def test_cgroup_v1_quota_is_the_smallest_along_the_ancestors():
    cgroup = "12:cpu,cpuacct:/docker/abc\n11:memory:/docker/abc\n0::/docker/abc\n"
    mountinfo = "35 30 0:30 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro - cgroup cgroup rw,cpu,cpuacct\n"
    files = {"/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "150000\n",
             "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n"}
    assert limits.cpu_quota(cgroup, mountinfo, files.get) == 1.5  # namespaced: the mount root is the cgroup
    host_view = "35 30 0:30 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
    files = {f"/sys/fs/cgroup/cpu{group}/cpu.cfs_{name}_us": value
             for group, quota in (("/docker/abc", "-1"), ("/docker", "200000"), ("", "-1"))
             for name, value in (("quota", quota), ("period", "100000"))}
    assert limits.cpu_quota("4:cpu:/docker/abc\n", host_view, files.get) == 2.0  # the parent's quota caps it
    files["/sys/fs/cgroup/cpu/docker/cpu.cfs_quota_us"] = "-1"
    assert limits.cpu_quota("4:cpu:/docker/abc\n", host_view, files.get) is None


def test_cgroup_v2_quota_and_none():
    mountinfo = "30 25 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate\n"
    files = {"/sys/fs/cgroup/job/cpu.max": "250000 100000\n", "/sys/fs/cgroup/cpu.max": None}
    assert limits.cpu_quota("0::/job\n", mountinfo, files.get) == 2.5
    assert limits.cpu_quota("0::/job\n", mountinfo, {"/sys/fs/cgroup/job/cpu.max": "max 100000\n"}.get) is None
    assert limits.cpu_quota("", mountinfo, files.get) is None and limits.cpu_quota(None, None) is None


def test_this_process_s_limits_are_read():
    now = limits.taken(3, 0)
    assert now["cpuset"] == len(os.sched_getaffinity(0)) and now["threads"] == 3 and now["cma"] is None
    assert now["pid_namespace"].startswith("pid:[") and now["ipc_namespace"].startswith("ipc:[")
    assert now["dev_shm_bytes"] is None or now["dev_shm_bytes"] > 0


# -- MPI ---------------------------------------------------------------------------------------------

OPEN_MPI_41 = "Open MPI v4.1.2, package: Debian OpenMPI, ident: 4.1.2, repo rev: v4.1.2, Nov 24, 2021"
# mpichversion's output, which prints MPI_Get_library_version's text (pmodels/mpich#6123, MPICH 4.1a1)
MPICH_4 = """MPICH Version:      4.1a1
MPICH Release date: unreleased development copy
MPICH ABI:          0:0:0
MPICH Device:       ch4:ofi
MPICH configure:    --prefix=/var/lib/jenkins-slave/workspace/_inst --with-device=ch4:ofi
MPICH CC:           gcc    -O2
"""
# MPICH2's (pmodels/mpich#997): ch3's netmod is in the configure line
MPICH2_CH3 = """MPICH2 Version:     1.3a1
MPICH2 Release date:    Unknown, built on Tue Jan 26 18:26:56 CST 2010
MPICH2 Device:      ch3:nemesis
MPICH2 configure:   --prefix=/home/venkatv/software/mpich2_repo --with-device=ch3:nemesis:mx --with-mx=/opt/mx
"""


def test_mpi_library_versions_are_parsed():
    ompi = pathprobe.parse_library_version(OPEN_MPI_41)
    assert (ompi["implementation"], ompi["version"], ompi["device"]) == ("open-mpi", "4.1.2", None)
    assert ompi["library_version"] == OPEN_MPI_41
    mpich = pathprobe.parse_library_version(MPICH_4)
    assert (mpich["implementation"], mpich["version"], mpich["device"], mpich["netmod"]) == (
        "mpich", "4.1a1", "ch4:ofi", "ofi")
    assert mpich["library_version"] == "MPICH Version:      4.1a1"
    ch3 = pathprobe.parse_library_version(MPICH2_CH3)
    assert (ch3["implementation"], ch3["device"], ch3["netmod"]) == ("mpich", "ch3:nemesis", "mx")
    intel = pathprobe.parse_library_version("Intel(R) MPI Library 2021.6 for Linux* OS\n")
    assert (intel["implementation"], intel["version"]) == ("intel-mpi", "2021.6")


def test_open_mpi_s_loaded_components_and_single_copy():
    mapped = pathprobe.parse_maps(MAPS)
    path = pathprobe.mpi_path(mapped, {"UCX_TLS": "^cma"}, cma=True)  # the library file is not here: no version
    assert (path["implementation"], path["components"]) == (None, ["pml_ob1", "btl_vader", "btl_self"])
    assert (path["pml"], path["btl"], path["single_copy"]) == ("ob1", ["vader", "self"], "cma")
    assert pathprobe.mpi_path(mapped, {}, cma=False)["single_copy"] == "none"
    assert pathprobe.mpi_path(mapped, {}, cma=None)["single_copy"] is None
    asked = {"OMPI_MCA_btl_vader_single_copy_mechanism": "xpmem"}
    assert pathprobe.mpi_path(mapped, asked, cma=True)["single_copy"] == "xpmem"
    assert pathprobe.mpi_path([p for p in mapped if "mpi" not in p], {}, cma=True) is None


# -- NCCL's INFO log ---------------------------------------------------------------------------------

# Real lines from public threads, each under its source.
NCCL_LOG = """\
# https://github.com/NVIDIA/nccl/issues/952
<cluster_name>:919:1150 [0] NCCL INFO Channel 01/0 : 8[0] -> 15[7] via P2P/IPC/read
<cluster_name>:926:1151 [7] NCCL INFO Channel 03/0 : 15[7] -> 6[6] [send] via NET/Socket/3
# https://github.com/NVIDIA/nccl/issues/429 (NCCL before 2.12 printed bus ids and no /N)
machine-1:16194:18583 [3] NCCL INFO Channel 00 : 11[3e000] -> 9[1b000] via P2P/direct pointer
machine-1:16194:18586 [6] NCCL INFO Channel 03 : 7[b2000] -> 14[b1000] [receive] via NET/IB/0/GDRDMA
machine-2:41626:45225 [7] NCCL INFO Channel 03 : 7[b2000] -> 14[b1000] [send] via NET/IB/0/GDRDMA
# https://github.com/NVIDIA/nccl-tests/issues/166
ubuntu:39964:40050 [6] NCCL INFO Channel 09 : 6[6] -> 7[7] via SHM/direct/direct
# https://github.com/NVIDIA/nccl/issues/1538
job-3bb823c0-6d27-4312-8094-1c5910bf9b51-worker-0:5663:5809 [0] NCCL INFO Channel 04/0 : 0[0] -> 7[7] via P2P/CUMEM
# https://github.com/NVIDIA/nccl/issues/676 (ring listings: not connections)
gpu01:351578:352168 [0] NCCL INFO Channel 00/02 :    0   1
gpu01:351578:352168 [0] NCCL INFO Ring 00 : 1 -> 0 -> 1
"""


def test_nccl_channels_are_parsed_from_real_log_lines():
    channels = pathprobe.parse_nccl_channels(NCCL_LOG)
    assert [(c["channel"], c["source"], c["target"], c["transport"]) for c in channels] == [
        (1, 8, 15, "P2P/IPC/read"), (3, 15, 6, "NET/Socket/3"), (0, 11, 9, "P2P/direct pointer"),
        (3, 7, 14, "NET/IB/0/GDRDMA"),  # its receive and send lines: one connection
        (9, 6, 7, "SHM/direct/direct"), (4, 0, 7, "P2P/CUMEM")]


def test_nccl_s_log_is_asked_for_unless_the_user_set_it(tmp_path):
    environ = {}
    log = pathprobe.capture_nccl_log(environ, str(tmp_path), 3)
    assert log == str(tmp_path / "nccl-rank-3.log")
    assert environ == {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT", "NCCL_DEBUG_FILE": log}
    assert pathprobe.capture_nccl_log({"NCCL_DEBUG": "WARN"}, str(tmp_path), 3) is None
    probe = fingerprint.Probe(0, "h", "nccl", environ={})
    Path(probe.nccl_log).write_text(NCCL_LOG)
    assert len(probe._nccl_channels()) == 6
    assert "NCCL_DEBUG" not in pathprobe.settings(probe.environ, probe.own)  # bench's own, steering nothing
    probe.close()
    assert not os.path.exists(probe.directory)


# -- the interface and the settings ---------------------------------------------------------------------

ROUTE = """\
Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT
eth0\t00000000\t0100A8C0\t0003\t0\t0\t100\t00000000\t0\t0\t0
eth0\t0000A8C0\t00000000\t0001\t0\t0\t100\t00FFFFFF\t0\t0\t0
ib0\t00000A0A\t00000000\t0001\t0\t0\t0\t0000FFFF\t0\t0\t0
"""


def test_the_interface_is_the_variable_set_else_the_route_to_process_0():
    routes = pathprobe.parse_route(ROUTE)
    assert pathprobe.routed_interface("10.10.3.4", routes) == "ib0"  # 10.10.0.0/16, longer than the default
    assert pathprobe.routed_interface("8.8.8.8", routes) == "eth0"
    assert pathprobe.routed_interface("127.0.0.1", routes) == "lo"
    assert pathprobe.routed_interface("192.168.0.7", routes, {"eth1": ["192.168.0.7"]}) == "eth1"
    assert pathprobe.interface("gloo", "127.0.0.1", {"GLOO_SOCKET_IFNAME": "ib0"}) == "ib0"
    assert pathprobe.interface("gloo", "127.0.0.1", {}) == "lo"
    assert pathprobe.interface(None, "127.0.0.1", {}) is None
    settings = pathprobe.settings({"UCX_TLS": "^cma", "PATH": "/bin", "OMPI_MCA_pml": "x" * 300})
    assert set(settings) == {"UCX_TLS", "OMPI_MCA_pml"} and len(settings["OMPI_MCA_pml"]) == 200


# -- single-copy (CMA) between two real processes -------------------------------------------------------

HOLDER = ("import json, sys; from benchmarks.measure.limits import CmaBuffer; b = CmaBuffer(); "
          "print(json.dumps(b.published('here')), flush=True); sys.stdin.readline()")


def test_cma_reads_a_real_peer_and_refuses_what_it_cannot_read():
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              env=python_env(None), cwd=ROOT)
    try:
        peer = json.loads(holder.stdout.readline())
        pattern = bytes.fromhex(peer["pattern"])
        assert limits.can_read(peer["pid"], peer["address"], pattern)
        assert not limits.can_read(peer["pid"], peer["address"], bytes(len(pattern)))  # other bytes there
        assert not limits.can_read(peer["pid"], 8, pattern)  # an address not mapped
        mine = limits.CmaBuffer().published("here")
        assert limits.cma_with_peers([mine, peer], 0) is True
        assert limits.cma_with_peers([mine, {**peer, "host": "elsewhere"}], 0) is None  # alone on its host
    finally:
        holder.communicate("\n", timeout=30)
    assert not limits.can_read(peer["pid"], peer["address"], pattern)  # gone: no such process


# -- the section, the facts, the preflight, the comparison ----------------------------------------------

def rank_path(rank, host, pid_ns="pid:[1]"):
    return {"rank": rank, "host": host, "collective": {"library": "gloo", "backend": "gloo", "interface": "lo",
                                                       "mpi": None, "ucx_tls": None, "nccl": [], "settings": {}},
            "libraries": [], "limits": {**limits.taken(2, 0), "pid_namespace": pid_ns, "ipc_namespace": "ipc:[1]",
                                        "cma": True}}


def test_namespaces_are_shared_per_node_and_the_facts_differ_where_the_paths_do():
    from benchmarks.results import record

    together = fingerprint.section([rank_path(0, "a"), rank_path(1, "a")])
    record.PathInfo.model_validate(together)
    assert (together["shared_pid_namespace"], together["shared_ipc_namespace"]) == (True, True)
    apart = fingerprint.section([rank_path(0, "a", "pid:[1]"), rank_path(1, "a", "pid:[2]")])
    assert apart["shared_pid_namespace"] is False
    assert fingerprint.section([rank_path(0, "a"), rank_path(1, "b")])["shared_pid_namespace"] is None
    differ = fingerprint.differences(apart, together)
    assert differ == {"ranks share PID namespace": ("no", "yes")}
    assert fingerprint.facts(together)["collective"] == "gloo over lo"


def test_preflight_checks_and_its_one_line():
    now = {**limits.taken(None, 2), "cpuset": 8, "cpu_quota": 2.0, "dev_shm_bytes": 64 * 1024**2}
    checks = preflight.checks(0, now, threads=8, device="gpu", gpus=0, data_bytes=0, library="nccl", local_peers=7)
    assert [(c["name"], c["ok"]) for c in checks] == [("threads", False), ("shared-memory", False), ("gpu", False)]
    assert checks[0]["detail"] == "8 threads on 2 CPUs allowed (affinity 8, cgroup quota 2)"
    section = preflight.section([checks[:1], []], strict=False)
    assert section["reasons"] == ["rank 0: 8 threads on 2 CPUs allowed (affinity 8, cgroup quota 2)"]
    assert preflight.line(section) == ("preflight: rank 0: 8 threads on 2 CPUs allowed (affinity 8, cgroup quota 2); "
                                       "the run goes on (--strict-preflight refuses)")
    fine = preflight.checks(0, now, threads=None, device="auto", gpus=None, data_bytes=0, library="gloo", local_peers=1)
    assert [(c["name"], c["ok"]) for c in fine] == [("shared-memory", True)]


def test_the_comparison_is_read_from_the_environment_and_a_malformed_one_ignored():
    good = {"id": "c1", "seed": 7, "round": 2, "position": 1, "order": ["docker", "local"]}
    assert provenance.comparison({"DLBENCH_COMPARISON": json.dumps(good)}) == good
    assert provenance.comparison({}) is None
    for bad in ("{not json", json.dumps({**good, "round": "two"}), json.dumps({**good, "position": 3}),
                json.dumps({**good, "extra": 1})):
        said = []
        assert provenance.comparison({"DLBENCH_COMPARISON": bad}, said.append) is None
        assert len(said) == 1 and said[0].startswith("DLBENCH_COMPARISON is ignored"), said


# -- real runs -----------------------------------------------------------------------------------------

SMALL = ["--framework", "torch", "--model", "smallcnn", "--image-size", "32", "--batch-size", "2",
         "--num-warmup-batches", "1", "--num-batches", "2"]


def bench(args, env=None, preexec_fn=None, timeout=300):
    return subprocess.run([sys.executable, "-m", "benchmarks", *args], capture_output=True, text=True, timeout=timeout,
                          env=python_env(env), cwd=ROOT, preexec_fn=preexec_fn)


@pytest.mark.slow
def test_two_local_ranks_record_their_path_and_preflight():
    comparison = {"id": "cmp", "seed": 1, "round": 1, "position": 2, "order": ["docker", "local"]}
    result = benchrun("launch", "--launcher", "local", "-n", "2", "--", *SMALL, "--strategy", "ddp", "--num-threads",
                      "1", "--json", env={"DLBENCH_COMPARISON": json.dumps(comparison)})
    assert result.returncode == 0, result.stderr[-3000:]
    record = validate_record(json.loads([line for line in result.stdout.splitlines() if line.startswith("{")][0]))
    path = record["path"]
    assert [r["rank"] for r in path["ranks"]] == [0, 1]
    assert {r["collective"]["library"] for r in path["ranks"]} == {"gloo"}
    assert {r["collective"]["interface"] for r in path["ranks"]} == {"lo"}  # the ranks meet on loopback
    assert path["shared_pid_namespace"] is True and path["shared_ipc_namespace"] is True
    assert [r["limits"]["cma"] for r in path["ranks"]] == [True, True]  # each read the other's pattern
    assert [r["limits"]["threads"] for r in path["ranks"]] == [1, 1]
    assert record["preflight"]["ok"] and {c["rank"] for c in record["preflight"]["checks"]} == {0, 1}
    assert record["comparison"] == comparison
    assert fingerprint.facts(path)["single-copy (CMA)"] == "possible"


def one_cpu():
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})


@pytest.mark.slow
def test_a_planted_preflight_failure_labels_the_record_and_strict_refuses(tmp_path):
    ran = bench([*SMALL, "--num-threads", "2", "--json"], preexec_fn=one_cpu)
    assert ran.returncode == 0, ran.stderr[-3000:]
    said = [line for line in ran.stderr.splitlines() if "preflight" in line]
    assert said == ["bench: preflight: rank 0: 2 threads on 1 CPUs allowed (affinity 1); the run goes on "
                    "(--strict-preflight refuses)"]
    record = json.loads(ran.stdout)
    assert record["preflight"]["ok"] is False and record["preflight"]["reasons"] == [
        "rank 0: 2 threads on 1 CPUs allowed (affinity 1)"]
    assert record["path"]["ranks"][0]["limits"]["cpuset"] == 1
    output = tmp_path / "records.jsonl"
    refused = bench([*SMALL, "--num-threads", "2", "--strict-preflight", "--output", str(output)], preexec_fn=one_cpu)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "bench: error: preflight: rank 0: 2 threads on 1 CPUs allowed (affinity 1); --strict-preflight refuses the "
        "run (nothing was run)"]
    assert not output.exists() or output.read_text() == ""


@pytest.mark.slow
def test_strict_preflight_refuses_on_every_rank_of_a_local_run():
    result = benchrun("launch", "--launcher", "local", "-n", "2", "--", *SMALL, "--strategy", "ddp", "--num-threads",
                      "64", "--strict-preflight", "--json")
    assert result.returncode == 2, result.stderr[-3000:]
    assert "--strict-preflight refuses the run" in result.stderr
    assert not [line for line in result.stdout.splitlines() if line.startswith("{")]


CPU_CGROUP = Path("/sys/fs/cgroup/cpu")


@pytest.mark.slow
def test_a_planted_cgroup_cpu_quota_is_read_and_checked():
    group = CPU_CGROUP / f"dlbench-test-{uuid.uuid4().hex[:8]}"
    try:
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("50000")
    except OSError as error:
        pytest.skip(f"SKIPPED LOUDLY: no cgroup v1 cpu controller this test may write ({error}): the quota is "
                    "tested on parsed files only")
    try:
        def into_group():
            (group / "cgroup.procs").write_text(str(os.getpid()))

        ran = bench([*SMALL, "--num-threads", "1", "--json"], preexec_fn=into_group)
        assert ran.returncode == 0, ran.stderr[-3000:]
        record = json.loads(ran.stdout)
        assert record["path"]["ranks"][0]["limits"]["cpu_quota"] == 0.5
        assert record["preflight"]["reasons"] == ["rank 0: 1 threads on 0.5 CPUs allowed (affinity "
                                                  f"{len(os.sched_getaffinity(0))}, cgroup quota 0.5)"]
    finally:
        for pid in (group / "cgroup.procs").read_text().split():  # none should be left; move any back
            (CPU_CGROUP / "cgroup.procs").write_text(pid)
        group.rmdir()
