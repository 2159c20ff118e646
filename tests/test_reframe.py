"""reframe-checks/ under a real ReFrame (scripts/install-reframe.sh, PyPI, cached): a small subset on
the local scheduler, on our local Slurm, and in Docker and Apptainer through ReFrame's own container
platforms; Sarus and Shifter by the job scripts ReFrame writes for them; a reference that passes and
one that fails, read back from ReFrame's performance report and perflog; sanity failing (real runs,
and records made unsound); a wrong references file and an unknown system stop ReFrame with one line.
podman-hpc through benchrun: tests/test_runtimes_podman_hpc.py."""

from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys

import jsonschema
import pytest

from benchmarks.comm import record as comm_record
from infra.helpers import ROOT, SMALL, bench, last_json_line, python_env, validate_record
from infra.slurm import skip_loudly

CHECKS = ROOT / "reframe-checks"  # the folder, as a site points -c at it
SETTINGS = ROOT / "reframe-checks" / "site" / "settings.py"
INSTALL = ROOT / "scripts" / "install-reframe.sh"
SYSTEM = "dlbench-example"
TRAIN = "DlbenchTrain%framework=torch%model=alexnet"  # ReFrame matches -n against the name without spaces
BENCH_OPTIONS = " ".join(["--image-size", "64", *SMALL, "--timeout", "120"])

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def reframe_path() -> str:
    try:
        done = subprocess.run([str(INSTALL)], capture_output=True, text=True, timeout=1200, stdin=subprocess.DEVNULL)
    except FileNotFoundError as error:
        skip_loudly(f"REFRAME TESTS SKIPPED: {error}")
    assert done.returncode == 0, f"install-reframe.sh failed ({done.returncode}):\n{done.stderr[-3000:]}"
    return done.stdout.strip().removeprefix('export PATH="').removesuffix(':$PATH"')


def write_references(path, entries: list[dict]) -> str:
    path.write_text(json.dumps(entries))  # JSON is YAML
    return str(path)


def reframe(reframe_path: str, tmp_path, *args: str, references: str | None = None, env: dict | None = None,
            timeout: float = 900, settings=SETTINGS, benchrun: str = f"{sys.executable} -m runners"
            ) -> subprocess.CompletedProcess:
    """`reframe -C settings -c checks ARGS` with benchrun as this checkout runs it (or `benchrun`) and small runs."""
    environment = python_env(env)
    environment["PATH"] = f"{reframe_path}:{environment['PATH']}"
    environment["TMPDIR"] = str(tmp_path)  # ReFrame's own log (rfm-*.log) with the run's, not one more in /tmp
    if references:
        environment["DLBENCH_REFERENCES"] = references
    argv = ["reframe", "--nocolor", "-C", str(settings), "-c", str(CHECKS), "--prefix", str(tmp_path / "rfm"),
            "--perflogdir", str(tmp_path / "perflogs"), "-S", f"benchrun={benchrun}",
            "-S", f"DlbenchTrain.bench_options={BENCH_OPTIONS}", *args]
    return subprocess.run(argv, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def site_settings(tmp_path, edits: str):
    """A site configuration: the example's, then `edits` (Python; `partitions` is the example system's list)."""
    settings = tmp_path / "settings.py"
    settings.write_text(f"""import runpy
site_configuration = runpy.run_path({str(SETTINGS)!r})['site_configuration']
partitions = site_configuration['systems'][0]['partitions']
{edits}""")
    return settings


def perflog(tmp_path, partition: str, test: str) -> list[dict]:
    """The rows of ReFrame's perflog for a test (its default handler: '|'-separated, a header line first)."""
    files = list((tmp_path / "perflogs" / SYSTEM / partition).glob(f"{test}*.log"))
    assert files, f"no perflog for {test} under {tmp_path / 'perflogs'}"
    lines = "".join(f.read_text() for f in files).splitlines()
    return [dict(zip(lines[0].split("|"), line.split("|"))) for line in lines[1:]]


def test_local_scheduler_reference_passes_and_one_fails(reframe_path, tmp_path):
    """Training on the local scheduler against a reference it meets; `bench comm` against one it
    cannot meet: ReFrame reports the performance failure, the report and perflog hold both."""
    references = write_references(tmp_path / "references.yaml", [
        {"match": {"test": "DlbenchTrain", "framework": "torch"}, "system": f"{SYSTEM}:local",
         "variables": {"images_per_sec": [0.01, -0.99, None, "img/s"], "step_time_p90": [600.0, None, 0.0, "s"]}},
        {"match": {"test": "DlbenchComm"}, "system": SYSTEM,
         "variables": {"busbw": [1.0e6, -0.1, None, "GB/s"]}},
    ])
    comm = ["--max-bytes", "4K", "--step-factor", "4", "--iters", "3", "--warmup-iters", "1"]
    done = reframe(reframe_path, tmp_path, "--system", f"{SYSTEM}:local", "-n",
                   f"{TRAIN}%strategy=none%ranks=1%runtime=local$", "-n", "DlbenchComm%framework=torch",
                   "-S", f"DlbenchComm.comm_options={' '.join(comm)}", "-r", "--performance-report",
                   references=references)
    out = done.stdout
    assert done.returncode == 1, out[-4000:] + done.stderr[-2000:]  # one test failed
    assert "Ran 2/2 test case(s)" in out and "1 failure(s)" in out, out[-3000:]
    assert re.search(r"\[\s*OK\s*\] .*DlbenchTrain %framework=torch", out), out[-3000:]
    failure = out[out.index("SUMMARY OF FAILURES"):]
    assert "DlbenchComm %framework=torch" in failure and "performance" in failure, failure
    assert re.search(r"busbw=[0-9.e+-]+ GB/s, expected 1000000(\.0)? \(l=900000(\.0)?, u=inf\)", failure), failure
    # ReFrame's per-test lines and its performance report: every variable with its unit and reference
    assert re.search(r"P: images_per_sec: [0-9.]+ img/s \(r:0\.01, l:-0\.99, u:None\)", out), out[-4000:]
    assert re.search(r"P: step_time_p90: [0-9.]+ s \(r:600\.0, l:None, u:0\.0\)", out), out[-4000:]
    for variable, unit in (("images_per_sec_per_rank", "img/s"), ("host_rss_peak", "MiB"), ("pingpong_latency", "us")):
        assert re.search(rf"P: {variable}: [0-9.]+ {unit}\b", out), variable
    assert "allocator_peak" not in out  # null on a CPU: not reported at all
    report = out[out.index("PERFORMANCE REPORT"):]
    assert re.search(r"│ busbw +│ GB/s +│ +[0-9.e+-]+ │ fail", report), report
    assert re.search(r"│ images_per_sec +│ img/s +│ +[0-9.]+ │ pass", report), report
    [train], [comm] = perflog(tmp_path, "local", "DlbenchTrain"), perflog(tmp_path, "local", "DlbenchComm")
    assert train["result"] == "pass" and train["model"] == "alexnet" and train["runtime"] == "local", train
    assert (train["images_per_sec_unit"], train["images_per_sec_ref"], train["images_per_sec_lower_thres"]) == \
        ("img/s", "0.01", "-0.99") and float(train["images_per_sec_value"]) > 0.01, train
    assert (train["step_time_p90_unit"], train["host_rss_peak_unit"]) == ("s", "MiB"), train
    assert comm["result"] == "fail" and comm["busbw_unit"] == "GB/s" and comm["busbw_ref"] == "1000000.0", comm
    assert float(comm["busbw_value"]) < 900000 and comm["pingpong_latency_unit"] == "us", comm


def test_slurm_partition_two_ranks(reframe_path, tmp_path, slurm_single):
    """torch DDP on 2 ranks as a Slurm job on our partition: benchrun starts the ranks with srun inside it."""
    references = write_references(tmp_path / "references.yaml", [
        {"match": {"test": "DlbenchTrain", "strategy": "ddp", "ranks": 2}, "system": f"{SYSTEM}:slurm",
         "variables": {"images_per_sec": [0.01, -0.99, None, "img/s"]}}])
    done = reframe(reframe_path, tmp_path, "--system", f"{SYSTEM}:slurm", "-n",
                   f"{TRAIN}%strategy=ddp%ranks=2%runtime=local$", "-r", "--performance-report",
                   references=references, env={"SLURM_CONF": slurm_single["conf"],
                                                 # emulated nodes' names do not resolve: ranks meet on loopback
                                                 "DLBENCH_COORDINATOR": "127.0.0.1"})
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    assert "Ran 1/1 test case(s)" in out and "0 failure(s)" in out, out[-3000:]
    assert re.search(r"images_per_sec_per_rank: [0-9.]+ img/s", out), out[-3000:]
    script = next((tmp_path / "rfm").rglob("rfm_job.sh")).read_text()
    assert "#SBATCH --ntasks=2" in script and "--partition=debug" in script, script
    assert "--launcher srun -n 2" in script, script
    [row] = perflog(tmp_path, "slurm", "DlbenchTrain")
    assert row["result"] == "pass" and row["ranks"] == "2" and row["num_tasks"] == "2", row


def test_docker_through_reframes_container_platform_and_overhead(reframe_path, tmp_path, dlbench_images):
    """One rank in Docker started by ReFrame's own Docker platform; two DDP ranks in Docker through
    benchrun (ReFrame's platform starts one container: the path of every runtime it has no platform for);
    the runtime overhead test (two rounds of compare-runtimes, local against docker) through benchrun."""
    done = reframe(reframe_path, tmp_path, "--system", f"{SYSTEM}:local",
                   "-n", f"{TRAIN}%strategy=none%ranks=1%runtime=docker$",
                   "-n", f"{TRAIN}%strategy=ddp%ranks=2%runtime=docker$",
                   "-n", "DlbenchRuntimeOverhead%runtime=docker%framework=torch",
                   "-S", "DlbenchRuntimeOverhead.model=alexnet", "-S", "DlbenchRuntimeOverhead.rounds=2",
                   "-S", f"DlbenchRuntimeOverhead.bench_options={BENCH_OPTIONS}", "-r", "--performance-report")
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    assert "Ran 3/3 test case(s)" in out and "0 failure(s)" in out, out[-3000:]
    scripts = [p.read_text() for p in (tmp_path / "rfm").rglob("rfm_job.sh")]
    [train] = [script for script in scripts if "docker run --rm" in script]
    assert "dlbench-torch:latest bench --framework torch" in train, train
    assert "benchrun" not in train and "docker pull" not in train, train
    [ranks] = [script for script in scripts if "run --runtime docker --launcher local -n 2 -- --framework torch" in script]
    assert "--strategy ddp" in ranks, ranks
    assert any("compare-runtimes --runtimes local,docker --rounds 2" in script for script in scripts)
    passed = r"\[\s*OK\s*\] .*DlbenchTrain %framework=torch %model=alexnet %strategy=ddp %ranks=2 %runtime=docker"
    assert re.search(passed, out), out[-3000:]
    assert re.search(r"P: runtime_overhead: -?[0-9.]+ %", out), out[-3000:]
    for name in ("runtime_ratio", "runtime_ratio_ci_low", "runtime_ratio_ci_high"):  # two rounds: paired
        # ReFrame prints a value in scientific notation when it is small or large: two rounds give a t interval
        # with one degree of freedom, as wide as [6.5e-05, 9271.55] when the rounds disagree (CI, stop 51)
        assert re.search(rf"P: {name}: [0-9.]+(e[-+]?[0-9]+)? x", out), out[-3000:]
    assert re.search(r"P: images_per_sec: [0-9.]+ img/s", out), out[-3000:]
    assert subprocess.run(["docker", "ps", "-aq", "--filter", "ancestor=dlbench-torch:latest", "--filter", "status=exited"],
                          capture_output=True, text=True).stdout.strip() == ""  # --rm: nothing left


def test_apptainer_through_reframes_container_platform(reframe_path, tmp_path, dlbench_images):
    """A site's partition with Apptainer: ReFrame's own Apptainer platform runs bench in our SIF (as root here:
    `--userns`, given through dlbench_container_options)."""
    from test_runtimes_apptainer import def_sif  # the SIF those tests build from Singularity.def: one build for both

    from infra import apptainer

    bin_dir = apptainer.install()
    sif = def_sif(bin_dir, "tensorflow", dlbench_images["tensorflow"])
    settings = site_settings(tmp_path, f"""local = partitions[0]
local['features'].append('apptainer')
local['container_platforms'].append({{'type': 'Apptainer'}})
local['extras'].update(dlbench_images={{'apptainer': {{'tensorflow': {sif!r}}}}},
                       dlbench_container_options={{'apptainer': ['--userns']}})
""")
    done = reframe(reframe_path, tmp_path, "--system", f"{SYSTEM}:local",
                   "-n", "DlbenchTrain%framework=tensorflow%model=resnet50%strategy=none%ranks=1%runtime=apptainer$",
                   "-r", "--performance-report", settings=settings, env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    out = done.stdout
    assert done.returncode == 0, out[-4000:] + done.stderr[-2000:]
    assert "Ran 1/1 test case(s)" in out and re.search(r"P: images_per_sec: [0-9.]+ img/s", out), out[-3000:]
    script = next((tmp_path / "rfm").rglob("rfm_job.sh")).read_text()
    assert "apptainer exec -B" in script and f"--userns {sif} bench --framework tensorflow" in script, script
    record = json.loads(next((tmp_path / "rfm").rglob("rfm_job.out")).read_text().splitlines()[-1])
    assert record["provenance"]["container_runtime"] == "apptainer"  # detected inside the container


def test_sarus_and_shifter_through_reframes_container_platforms(reframe_path, tmp_path):
    """Sarus and Shifter cannot be installed here (only built from upstream source): the job scripts ReFrame
    writes with --dry-run (nothing run) for a Sarus partition and a Shifter one. ReFrame's Sarus runs bench
    as dlbench's `sarus` argv does, its Shifter as dlbench's `shifter-ng` (Shifter-NG's `shifter run`): the
    same image, the same read-only data mount (a site's container option, spelled as benchrun spells it),
    `bench` after the image; ReFrame mounts its stage directory at /rfm_workdir (Sarus: `-w /rfm_workdir`)
    where benchrun mounts a results directory at /results. NERSC's Shifter (`shifter`: no `run` verb) and
    every multi-rank run go through benchrun."""
    from runners import runtimes
    from runners.runtimes.base import Mount

    image = "load/library/dlbench-torch-latest"  # what `sarus load` / `shifter load` named it (benchrun's import)
    data = Mount(str(tmp_path), "/data")  # read-only
    read_only = {name: runtimes.get(name).mount_option(data) for name in ("sarus", "shifter-ng")}
    settings = site_settings(tmp_path, f"""slurm = partitions[1]
for name, platform, features in (('sarus', 'Sarus', ['sarus']), ('shifter', 'Shifter', ['shifter', 'shifter-ng'])):
    partitions.append({{**slurm, 'name': name, 'features': features, 'container_platforms': [{{'type': platform}}],
                        'extras': {{**slurm['extras'], 'dlbench_images': {{'sarus': {{'torch': {image!r}}},
                                                                           'shifter-ng': {{'torch': {image!r}}}}},
                                   'dlbench_container_options': {read_only!r}}}}})
""")
    selected = [f"{TRAIN}%strategy=none%ranks=1%runtime={name}$" for name in ("sarus", "shifter-ng", "shifter")]
    done = reframe(reframe_path, tmp_path, "--system", SYSTEM, *[arg for name in selected for arg in ("-n", name)],
                   "-n", f"{TRAIN}%strategy=ddp%ranks=2%runtime=sarus$", "--dry-run", settings=settings, timeout=300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    scripts = {path.parent: path.read_text() for path in (tmp_path / "rfm").rglob("rfm_job.sh")}
    assert len(scripts) == 4, (scripts, done.stdout[-3000:])

    def job(partition: str, marker: str) -> tuple[str, str]:
        """The stage directory and job script of the one test on `partition` whose script holds `marker`."""
        [(stage, script)] = [(str(stage), text) for stage, text in scripts.items()
                             if stage.parent.parent.name == partition and marker in text]
        assert "#SBATCH --partition=debug" in script, script
        return stage, script

    bench = f"{image} bench --framework torch --model alexnet --strategy none {BENCH_OPTIONS}"
    stage, sarus = job("sarus", "sarus run ")
    assert f'sarus run --mount=type=bind,source="{stage}",destination="/rfm_workdir" -w /rfm_workdir ' \
           f'{read_only["sarus"][0]} {bench}' in sarus, sarus
    assert "sarus pull" not in sarus and "benchrun" not in sarus and "runners" not in sarus, sarus
    stage, shifter_ng = job("shifter", "shifter run ")
    assert f'shifter run --mount=type=bind,source="{stage}",destination="/rfm_workdir" ' \
           f'{read_only["shifter-ng"][0]} {bench}' in shifter_ng, shifter_ng
    assert "shifter pull" not in shifter_ng and " -w " not in shifter_ng, shifter_ng
    # dlbench's own argv for the same image and mount: the same program, verb, mount spelling, image and command
    for name, script in (("sarus", sarus), ("shifter-ng", shifter_ng)):
        ours = runtimes.get(name).command(image, ["bench", "--json"], mounts=[data])
        assert [os.path.basename(ours[0]), *ours[1:]] == [name.removesuffix("-ng"), "run", *read_only[name], image,
                                                          "bench", "--json"]
        assert script.rstrip().endswith(" --json"), script
    _, nersc = job("shifter", "run --runtime shifter ")
    assert "-m runners run --runtime shifter -- --framework torch --model alexnet --strategy none" in nersc, nersc
    _, ranks = job("sarus", "run --runtime sarus ")
    assert f"-m runners run --runtime sarus --image {image} --launcher srun -n 2 -- --framework torch --model alexnet " \
           "--strategy ddp" in ranks, ranks


LOCAL_ENTRY = {"match": {"model": "alexnet"}, "system": f"{SYSTEM}:local"}


@pytest.mark.parametrize("content, message", [
    ([{**LOCAL_ENTRY, "variables": {"images_per_sec": [10, -0.1, None, "img/min"]}}],
     "entry 1: images_per_sec is measured in 'img/s', the reference says 'img/min'"),
    ([{"system": "daint:gpu", "variables": {"busbw": [10, -0.1, None, "GB/s"]}}],
     f"entry 1: unknown system:partition 'daint:gpu' (this site configuration has: *, {SYSTEM}, {SYSTEM}:local, "
     f"{SYSTEM}:slurm, generic, generic:default)"),
    ([LOCAL_ENTRY, {**LOCAL_ENTRY, "variables": {"images_per_second": [10, -0.1, None, "img/s"]}}],
     "entry 2: unknown performance variable 'images_per_second' (choices: images_per_sec, images_per_sec_per_rank, "
     "step_time_p90, host_rss_peak, allocator_peak, reserved_peak, device_peak, runtime_overhead, runtime_ratio, "
     "runtime_ratio_ci_low, runtime_ratio_ci_high, busbw, pingpong_latency)"),
    ([{**LOCAL_ENTRY, "variables": {"busbw": [10, "-10%", None, "GB/s"]}}],
     "entry 1: busbw: expected [reference, lower, upper, unit] (bounds as fractions or null), "
     "e.g. [100.0, -0.1, null, 'GB/s']"),
    ([{**LOCAL_ENTRY, "match": {"nodes": 2}}], "entry 1: unknown match key 'nodes' (choices: test, framework, model, "
     "strategy, ranks, runtime)"),
    ({"system": "x"}, "expected a list of entries (match, system, variables)"),
], ids=["wrong-unit", "unknown-system", "unknown-variable", "malformed-tuple", "unknown-match-key", "not-a-list"])
def test_wrong_references_stop_reframe_with_one_line(reframe_path, tmp_path, content, message):
    references = write_references(tmp_path / "references.yaml", content)
    done = reframe(reframe_path, tmp_path, "-r", references=references, timeout=300)
    assert done.returncode == 2, done.stdout[-3000:] + done.stderr
    assert done.stderr == f"dlbench: error: {references}: {message}\n"
    assert not (tmp_path / "rfm" / "stage").exists()  # nothing ran


def test_missing_references_file_stops_reframe_with_one_line(reframe_path, tmp_path):
    done = reframe(reframe_path, tmp_path, "-r", references=str(tmp_path / "nowhere.yaml"), timeout=300)
    assert done.returncode == 2
    assert done.stderr == f"dlbench: error: {tmp_path / 'nowhere.yaml'}: cannot be read (No such file or directory)\n"


def test_unknown_system_is_reframes_one_line(reframe_path, tmp_path):
    """ReFrame's error is one line; its own note of where its log went follows it, nothing else."""
    done = reframe(reframe_path, tmp_path, "--system", "nosuch", "-r", timeout=300)
    assert done.returncode == 1 and done.stderr == "", done.stderr
    error, log_note = done.stdout.splitlines()
    assert error == "ERROR: failed to load configuration: could not find a configuration entry for the requested " \
                    "system: 'nosuch'"
    assert re.fullmatch(r"Log file\(s\) saved in '\S+\.log'", log_note), log_note
    assert not (tmp_path / "rfm" / "stage").exists()


def test_sanity_fails_without_a_sound_record(reframe_path, tmp_path):
    """No record (bench refused its input) and a record whose status is not ok: both fail sanity, saying why."""
    done = reframe(reframe_path, tmp_path, "--system", f"{SYSTEM}:local",
                   "-n", f"{TRAIN}%strategy=none%ranks=1%runtime=local$", "-n", "DlbenchComm%framework=torch",
                   "-S", "DlbenchTrain.bench_options=--image-size 8",
                   "-S", "DlbenchComm.comm_options=--timeout 0.5", "-r")
    out = done.stdout
    assert done.returncode == 1 and "Ran 2/2 test case(s)" in out and "2 failure(s)" in out, out[-4000:]
    failures = out[out.index("SUMMARY OF FAILURES"):]
    assert failures.count("Failing phase: sanity") == 2, failures
    assert "Reason: sanity error: the run printed no record" in failures, failures
    assert re.search(r"Reason: sanity error: record status (timeout|interrupted|failed), expected ok", failures), failures


def test_sanity_fails_on_unsound_records(reframe_path, tmp_path, real_record):
    """A stand-in for benchrun (`-S benchrun=`) prints a record made from a real one: a record that does not
    validate, a 2-rank DDP record whose replicas ended out of sync (bench keeps status ok there), and a real
    `bench comm` record turned into one with wrong transfers, as bench writes it (status failed, error kind
    incorrect, correct false): each fails sanity, saying why."""
    comm = bench("--framework", "torch", "comm", "--max-bytes", "64", "--step-factor", "4", "--iters", "2",
                 "--warmup-iters", "1", "--ops", "allreduce", "--json", timeout=120)
    assert comm.returncode == 0, comm.stderr[-2000:]
    wrong = last_json_line(comm.stdout)
    wrong["results"][-1]["wrong"] = 3
    wrong.update(status="failed", correct=False, error={"kind": "incorrect", "message": "allreduce 64 B: 3 wrong elements",
                                                        "exit_code": None, "signal": None})
    jsonschema.validate(wrong, json.loads(comm_record.COMM_SCHEMA_FILE.read_text()))
    invalid = copy.deepcopy(real_record)
    invalid["throughput"]["images_per_sec"] = "fast"
    unsynced = copy.deepcopy(real_record)
    unsynced["config"]["strategy"] = unsynced["world"]["strategy"] = "ddp"
    unsynced["world"].update(workers=2, processes=2)
    unsynced["replicas"] = {"checksums": ["5f1d3a9c", "77e0b2c4"], "in_sync": False, "expected_in_sync": True}
    validate_record(unsynced)
    for name, record in (("invalid", invalid), ("unsynced", unsynced), ("comm", wrong)):
        (tmp_path / f"{name}.json").write_text(json.dumps(record))
    stand_in = tmp_path / "benchrun"
    stand_in.write_text(f"""#!{sys.executable}
import sys
name = 'comm' if 'comm' in sys.argv else 'unsynced' if 'ddp' in sys.argv else 'invalid'
print(open({str(tmp_path)!r} + '/' + name + '.json').read())
""")
    stand_in.chmod(0o755)
    done = reframe(reframe_path, tmp_path, "--system", f"{SYSTEM}:local", "-n", f"{TRAIN}%strategy=none%ranks=1%runtime=local$",
                   "-n", f"{TRAIN}%strategy=ddp%ranks=2%runtime=local$", "-n", "DlbenchComm%framework=torch", "-r",
                   benchrun=str(stand_in), timeout=300)
    out = done.stdout
    assert done.returncode == 1 and "Ran 3/3 test case(s)" in out and "3 failure(s)" in out, out[-4000:]
    failures = out[out.index("SUMMARY OF FAILURES"):]
    assert failures.count("Failing phase: sanity") == 3, failures
    assert re.search(r"Reason: sanity error: the record does not validate: throughput(\.images_per_sec)?: .*'fast'",
                     failures), failures
    assert "Reason: sanity error: replicas ended out of sync" in failures, failures
    assert "Reason: sanity error: record status failed, expected ok: allreduce 64 B: 3 wrong elements" in failures, failures


def test_every_performance_variable_is_documented_with_its_unit():
    import ast

    tree = ast.parse((ROOT / "reframe-checks" / "dlbench_rfm.py").read_text())
    node = next(n for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "PERF_VARIABLES")
    variables = ast.literal_eval(node.value)
    docs = (ROOT / "docs" / "reframe.md").read_text()
    short = docs.split("\n## In short\n", 1)[1].split("\n## ", 1)[0]
    for name, (unit, _) in variables.items():
        assert re.search(rf"^\| `{name}` \| `{re.escape(unit)}` \|", docs, re.MULTILINE), (name, unit)
        assert f"`{name}`" in short, name
