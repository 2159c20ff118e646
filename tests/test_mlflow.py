"""`benchrun export --mlflow`: real records into a real MLflow file store and a real `mlflow server`,
read back through MLflow's own client; idempotent by run id; one line and exit 6 when the store
cannot be reached; one line and exit 2 when MLflow is not installed."""

from __future__ import annotations

import copy
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from infra.helpers import ROOT, benchrun, python_env, validate_record
from infra.mlflow import complete_run_ids, mlflow_env, mlflow_server, runs, served, server_port  # noqa: F401 - fixtures
from infra.records import RecordFactory
from runners import mlflow_export


@pytest.fixture(scope="module")
def store(real_record, tmp_path_factory):
    """A plain store with two ok records (one of two repeats) and a failed one, and a sweep store
    holding one more ok record in an envelope."""
    R = RecordFactory(real_record)
    ok, failed = R(12.5, runtime="none", requested="local"), R(status="failed", error="RuntimeError: boom")
    two = R(20.0, runtime="docker", requested="docker")
    two["repeats"] = [dict(two["repeats"][0], index=0, images_per_sec=19.0),
                      dict(two["repeats"][0], index=1, images_per_sec=21.0)]
    swept = R(30.0)
    root = tmp_path_factory.mktemp("mlflow-store")
    plain, sweep = root / "runs.jsonl", root / "sweep.jsonl"
    plain.write_text("".join(json.dumps(r) + "\n" for r in (ok, two, failed)))
    sweep.write_text(json.dumps({"sweep": {"config_hash": "abcd", "plan": "p.yaml", "attempt": 1, "point": {}},
                                 "record": swept, "error": None}) + "\n")
    return {"files": [str(plain), str(sweep)], "records": {r["run_id"]: r for r in (ok, two, failed, swept)}}


def by_run_id(found: list[dict]) -> dict[str, dict]:
    ids = [r["tags"][mlflow_export.RUN_ID_TAG] for r in found]
    assert len(ids) == len(set(ids)), f"duplicate runs: {ids}"
    return {r["tags"][mlflow_export.RUN_ID_TAG]: r for r in found}


def check_runs(found: list[dict], records: dict[str, dict]) -> None:
    """What MLflow stored is the record: params, metrics (per repeat as steps), tags, status, artifact."""
    stored = by_run_id(found)
    assert set(stored) == set(records)
    for run_id, record in records.items():
        run = stored[run_id]
        assert run["tags"][mlflow_export.COMPLETE_TAG] == "complete" and run["record"] == record
        assert run["params"]["framework"] == "torch" and run["params"]["model"] == "alexnet"
        assert run["params"]["batch_size"] == str(record["config"]["batch_size"])
        assert run["params"]["world.workers"] == "1"
        assert run["tags"]["provenance.hostname"] == record["provenance"]["hostname"]
        assert run["tags"]["provenance.framework.version"] == record["provenance"]["framework"]["version"]
        assert run["tags"]["dlbench.status"] == record["status"]
        assert run["start"] == mlflow_export.mapped(record).start_ms
        if record["status"] != "ok":
            assert run["status"] == "FAILED" and run["tags"]["error.kind"] == "crash"
            assert "throughput.images_per_sec" not in run["metrics"]
            continue
        assert run["status"] == "FINISHED"
        metrics = {name: [tuple(point) for point in points] for name, points in run["metrics"].items()}
        assert metrics["throughput.images_per_sec"] == [(0, record["throughput"]["images_per_sec"])]
        assert metrics["throughput.images_per_sec_per_rank"] == [(0, record["throughput"]["images_per_sec"])]
        assert metrics["repeat.images_per_sec"] == [(r["index"], r["images_per_sec"]) for r in record["repeats"]]
        assert metrics["step_time_s.p90"] == [(0, record["step_time_s"]["p90"])]
        assert metrics["memory.host_rss_peak_bytes"] == [(0, record["memory"]["host_rss_peak_bytes"])]
        assert metrics["rank.images_per_sec"] == [(0, record["ranks"][0]["images_per_sec"])]
        assert "memory.allocator_peak_bytes" not in metrics  # null on CPU: absent, never 0
    swept = next(r for r in found if "sweep.config_hash" in r["tags"])
    assert swept["tags"]["sweep.plan"] == "p.yaml"


def export(uri: str, files: list[str], env: dict, *extra: str):
    return benchrun("export", *files, "--mlflow", uri, *extra, env=env, timeout=300)


@pytest.mark.slow
def test_file_store_twice_stored_once(store, mlflow_env, tmp_path):
    uri = str(tmp_path / "mlruns")
    first = export(uri, store["files"], mlflow_env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("mlflow: 4 runs logged, 0 already there"), first.stdout
    check_runs(runs(uri, mlflow_env), store["records"])
    again = export(uri, store["files"], mlflow_env)
    assert again.returncode == 0 and again.stdout.startswith("mlflow: 0 runs logged, 4 already there"), again.stdout
    check_runs(runs(uri, mlflow_env), store["records"])  # no duplicate (by_run_id checks)


@pytest.mark.slow
def test_file_store_refused_by_mlflow_is_one_line_exit_6(store, mlflow_env, tmp_path):
    done = export(str(tmp_path / "mlruns"), store["files"], {**mlflow_env, "MLFLOW_ALLOW_FILE_STORE": "false"})
    assert done.returncode == 6 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr == (f"benchrun: error: MLflow tracking store {tmp_path / 'mlruns'}: MLflow refuses file stores "
                           "unless MLFLOW_ALLOW_FILE_STORE=true is set; or name a tracking server (http://HOST:PORT) "
                           "or sqlite:///FILE (full mlflow)\n")
    assert not (tmp_path / "mlruns").exists()


@pytest.mark.slow
def test_selection_and_other_experiment(store, mlflow_env, tmp_path):
    uri = str(tmp_path / "mlruns")
    done = export(uri, store["files"], mlflow_env, "--where", "status=failed", "--mlflow-experiment", "nightly")
    assert done.returncode == 0, done.stderr
    found = runs(uri, mlflow_env, experiment="nightly")
    assert [r["tags"]["dlbench.status"] for r in found] == ["failed"]


@pytest.mark.slow
def test_incomplete_run_is_replaced(store, mlflow_env, tmp_path):
    """A run left by an export that stopped half-way (no completion tag, RUNNING) is deleted and written again."""
    uri = str(tmp_path / "mlruns")
    run_id = next(iter(store["records"]))
    code = f"""
from mlflow.tracking import MlflowClient
client = MlflowClient(tracking_uri={uri!r})
exp = client.create_experiment("dlbench")
client.create_run(exp, tags={{{mlflow_export.RUN_ID_TAG!r}: {run_id!r}}})
"""
    made = subprocess.run([sys.executable, "-c", code], env=mlflow_env, capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    done = export(uri, store["files"], mlflow_env)
    assert done.returncode == 0 and done.stdout.startswith("mlflow: 4 runs logged"), done.stdout + done.stderr
    check_runs(runs(uri, mlflow_env), store["records"])
    deleted = runs(uri, mlflow_env, view="DELETED_ONLY")
    assert [(r["tags"][mlflow_export.RUN_ID_TAG], r["status"]) for r in deleted] == [(run_id, "FAILED")]


@pytest.mark.slow
def test_tracking_server_twice_stored_once(store, mlflow_env, mlflow_server):
    first = export(mlflow_server, store["files"], mlflow_env)
    assert first.returncode == 0, first.stderr
    assert first.stdout.startswith("mlflow: 4 runs logged"), first.stdout
    check_runs(runs(mlflow_server, mlflow_env), store["records"])
    again = export(mlflow_server, store["files"], mlflow_env)
    assert again.returncode == 0 and "0 runs logged, 4 already there" in again.stdout, again.stdout
    check_runs(runs(mlflow_server, mlflow_env), store["records"])


def _refusing_port() -> int:
    """A localhost port nothing listens on (bound, never listened: connections are refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_unreachable_server_is_one_line_exit_6(store, mlflow_env):
    t0 = time.monotonic()
    done = export(f"http://127.0.0.1:{_refusing_port()}", store["files"], mlflow_env)
    assert done.returncode == 6, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("benchrun: error: MLflow tracking store http://"), \
        done.stderr
    assert time.monotonic() - t0 < 60
    assert done.stdout == ""


@pytest.mark.slow
def test_store_that_cannot_be_written_is_one_line_exit_6(store, mlflow_env, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    done = export(str(blocker / "mlruns"), store["files"], mlflow_env)
    assert done.returncode == 6, done.stdout + done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("benchrun: error: MLflow tracking store "), done.stderr


def test_missing_mlflow_is_one_line_exit_2(store):
    # the absence made here: an import of mlflow fails in this benchrun, whatever the machine has
    code = "import sys; sys.modules['mlflow'] = None; from runners.cli import main; sys.exit(main(sys.argv[1:]))"
    done = subprocess.run([sys.executable, "-c", code, "export", *store["files"], "--mlflow", "/tmp/never"],
                          cwd=ROOT, env=python_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr == (f"benchrun: error: --mlflow needs MLflow, which this Python ({sys.executable}) lacks: "
                           f"{mlflow_export.INSTALL_HINT}\n")


def test_comm_record_metrics_are_per_message_size():
    rows = [{"op": "allreduce", "bytes": 4, "busbw_gbps": 0.1, "algbw_gbps": 0.1, "time_s": 1e-5, "latency_us": None},
            {"op": "allreduce", "bytes": 1024, "busbw_gbps": 2.0, "algbw_gbps": 2.0, "time_s": 5e-4, "latency_us": None},
            {"op": "pingpong", "bytes": 4, "busbw_gbps": 0.05, "algbw_gbps": 0.05, "time_s": 2e-5, "latency_us": 10.0}]
    record = {"kind": "comm", "run_id": "c" * 32, "status": "ok", "timestamp_utc": "2026-11-25T01:02:03.500Z",
              "duration_s": 2.0, "config": {"framework": "torch", "backend": "gloo", "ops": ["allreduce", "pingpong"]},
              "world": {"workers": 2, "processes": 2, "launcher": "benchrun-local"}, "results": rows,
              "provenance": {"hostname": "vm", "container_runtime": "none", "requested_runtime": None,
                             "framework": {"name": "torch", "version": "2.14.1"}}}
    m = mlflow_export.mapped(record)
    assert ("allreduce.busbw_gbps", 2.0, 1024) in m.metrics and ("pingpong.latency_us", 10.0, 4) in m.metrics
    assert ("busbw_gbps.max", 2.0, 0) in m.metrics
    assert m.params["ops"] == "allreduce pingpong" and m.params["world.workers"] == "2"
    assert m.tags["dlbench.kind"] == "comm" and m.tags["provenance.framework.version"] == "2.14.1"
    assert m.name == "comm-torch-x2-local" and m.params["runtime"] == "local" and m.status == "FINISHED"
    assert (m.start_ms, m.end_ms) == (1795568523500, 1795568525500)


def test_accuracy_curve_is_metrics_at_sample_steps():
    record = {"run_id": "a" * 32, "status": "timeout", "config": {"framework": "tf", "model": "resnet50"},
              "provenance": {"container_runtime": "docker", "requested_runtime": "docker"},
              "accuracy": {"curve": [{"samples": 512, "eval_accuracy": 0.5, "eval_loss": 1.2, "epoch": 1},
                                     {"samples": 1024, "eval_accuracy": 0.75, "eval_loss": float("nan")}]}}
    m = mlflow_export.mapped(record)
    assert [x for x in m.metrics if x[0].startswith("accuracy.")] == [
        ("accuracy.eval_accuracy", 0.5, 512), ("accuracy.eval_loss", 1.2, 512), ("accuracy.epoch", 1.0, 512),
        ("accuracy.eval_accuracy", 0.75, 1024)]  # not finite: left out
    assert m.status == "FAILED" and m.start_ms == 0 and m.name == "tf-resnet50-docker"


def test_energy_and_mfu_are_metrics(real_record):
    """A GPU run's sections (this machine has no GPU: written in, validated): energy and MFU become metrics,
    the joules of each repeat a metric at the repeat's step; their strings (source, math) are no metric."""
    record = copy.deepcopy(real_record)
    record["energy"] = {"source": "nvml-energy-counter", "scope": "gpus", "joules": 1200.0, "average_watts": 300.0,
                        "images_per_joule": 0.5, "unavailable_reason": None}
    record["flops"] = {**record["flops"], "math": "tf32", "achieved_flops_per_sec": 1.3e14, "peak_flops_per_sec": 3.12e14,
                       "peak_source": "NVIDIA A100 datasheet", "devices": 1, "mfu": 0.42, "mfu_unavailable_reason": None}
    record["repeats"] = [dict(record["repeats"][0], index=0, joules=700.0), dict(record["repeats"][0], index=1, joules=500.0)]
    validate_record(record)
    metrics = mlflow_export.mapped(record).metrics
    assert {("energy.joules", 1200.0, 0), ("energy.average_watts", 300.0, 0), ("energy.images_per_joule", 0.5, 0),
            ("flops.mfu", 0.42, 0), ("flops.peak_flops_per_sec", 3.12e14, 0), ("flops.achieved_flops_per_sec", 1.3e14, 0),
            ("flops.devices", 1.0, 0), ("repeat.joules", 700.0, 0), ("repeat.joules", 500.0, 1)} <= set(metrics)
    assert not [name for name, _, _ in metrics if name in ("energy.source", "energy.scope", "flops.math",
                                                             "flops.peak_source", "flops.basis")]


def test_device_and_runtime_are_tags_and_a_param(real_record):
    record = copy.deepcopy(real_record)
    framework = record["provenance"]["framework"]
    framework.update(device_kind="gpu", device_name="NVIDIA H100 80GB HBM3", device_count=4, cuda_version="12.8")
    record["provenance"].update(container_runtime="apptainer", requested_runtime="apptainer", runtime_version="1.4.5",
                                image="/sifs/dlbench-torch.sif")
    m = mlflow_export.mapped(validate_record(record))
    assert {key: m.tags[key] for key in m.tags if key.startswith(("provenance.framework.device", "provenance.framework.cuda",
                                                                  "provenance.container", "provenance.requested",
                                                                  "provenance.runtime", "provenance.image"))} == {
        "provenance.framework.device_kind": "gpu", "provenance.framework.device_name": "NVIDIA H100 80GB HBM3",
        "provenance.framework.device_count": "4", "provenance.framework.cuda_version": "12.8",
        "provenance.container_runtime": "apptainer", "provenance.requested_runtime": "apptainer",
        "provenance.runtime_version": "1.4.5", "provenance.image": "/sifs/dlbench-torch.sif"}
    assert m.params["runtime"] == "apptainer" and m.name.endswith("-apptainer")
    # bench alone (no runtime asked of benchrun): the runtime it detected; none at all: local
    for detected, runtime in (("none", "local"), ("docker", "docker")):
        record["provenance"].update(container_runtime=detected, requested_runtime=None, runtime_version=None)
        alone = mlflow_export.mapped(validate_record(record))
        assert alone.params["runtime"] == runtime and alone.tags["provenance.container_runtime"] == detected
        assert "provenance.requested_runtime" not in alone.tags and "provenance.runtime_version" not in alone.tags


@pytest.mark.slow
def test_sweep_logs_each_point_as_it_finishes(mlflow_env, tmp_path):
    """A sweep logs as it goes, to a real server: point 1's run is complete while point 2 has no record yet
    (the sweep held there: SIGSTOP); the server is then stopped and the sweep let go: point 2's record is
    stored all the same, one warning says MLflow is left for the rest of the sweep, and an export once the
    server is back (the same database) logs the one run missing."""
    from infra.sweeps import lines, tiny_plan, write_plan

    plan, store_path = write_plan(tmp_path / "plan.yaml", tiny_plan(batch_size=[1, 2])), tmp_path / "sweep.jsonl"
    home, port = tmp_path / "server", server_port()
    home.mkdir()
    log = tmp_path / "sweep.log"
    with served(home, port) as url, open(log, "w") as output:
        sweep = subprocess.Popen([sys.executable, "-m", "runners", "sweep", str(plan), "--store", str(store_path),
                                  "--mlflow", url], cwd=ROOT, env=mlflow_env, stdout=output, stderr=output,
                                 stdin=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 300
            while not (logged := complete_run_ids(url)):
                assert sweep.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.2)
            os.kill(sweep.pid, signal.SIGSTOP)  # the sweep logs nothing more until SIGCONT
            first = lines(store_path)
            assert len(first) == 1 and sweep.poll() is None, "point 2 was stored before point 1's run was seen"
            assert logged == [first[0]["record"]["run_id"]]
        except BaseException:
            sweep.kill()
            sweep.wait()
            raise
    os.kill(sweep.pid, signal.SIGCONT)  # the server is gone: point 2 ends without it
    code, err = sweep.wait(timeout=600), log.read_text()
    assert code == 0, err[-3000:]
    entries = lines(store_path)
    assert [e["record"]["status"] for e in entries] == ["ok", "ok"]
    warnings = [line for line in err.splitlines() if line.startswith("benchrun: warning:")]
    assert len(warnings) == 1 and warnings[0].startswith(f"benchrun: warning: MLflow tracking store {url}: could not "), \
        err[-3000:]
    assert warnings[0].endswith(f"; not logging to MLflow for the rest of this sweep (`benchrun export STORE --mlflow "
                                f"{url}` logs what is missing)"), warnings[0]
    with served(home, port) as url:
        caught_up = export(url, [str(store_path)], mlflow_env)
        assert caught_up.returncode == 0, caught_up.stderr
        assert caught_up.stdout.startswith("mlflow: 1 runs logged, 1 already there"), caught_up.stdout
        found = by_run_id(runs(url, mlflow_env))
    assert set(found) == {e["record"]["run_id"] for e in entries}
    for entry in entries:
        run = found[entry["record"]["run_id"]]
        assert run["tags"]["sweep.config_hash"] == entry["sweep"]["config_hash"] and run["status"] == "FINISHED"
        assert run["params"]["batch_size"] == str(entry["record"]["config"]["batch_size"])
        assert run["tags"][mlflow_export.COMPLETE_TAG] == "complete" and run["record"] == entry["record"]


@pytest.mark.slow
def test_sweep_with_unreachable_tracking_runs_nothing(mlflow_env, tmp_path):
    from infra.sweeps import tiny_plan, write_plan

    plan = write_plan(tmp_path / "plan.yaml", tiny_plan())
    store_path = tmp_path / "sweep.jsonl"
    done = benchrun("sweep", str(plan), "--store", str(store_path), "--mlflow", f"http://127.0.0.1:{_refusing_port()}",
                    env=mlflow_env, timeout=300)
    assert done.returncode == 6, done.stderr[-3000:]
    assert done.stderr.splitlines()[-1].startswith("benchrun: error: MLflow tracking store http://127.0.0.1:")
    assert not store_path.exists()


@pytest.mark.slow
def test_database_store_without_full_mlflow_is_one_line_exit_6(store, mlflow_env, tmp_path):
    # the client alone (mlflow-skinny) has no SQLAlchemy: MLflow's own default, sqlite:///mlflow.db, needs full mlflow
    env = {key: value for key, value in mlflow_env.items() if key != "MLFLOW_TRACKING_URI"}
    done = benchrun("export", *store["files"], "--mlflow", env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 6 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr == (f"benchrun: error: MLflow tracking store sqlite:///{tmp_path / 'mlflow.db'}: a database "
                           "store needs full "
                           "MLflow (pip install mlflow; this Python has only its client); or name a tracking server "
                           "(http://HOST:PORT)\n")
    assert not (tmp_path / "mlflow.db").exists()


@pytest.mark.slow
def test_refused_write_leaves_no_running_run(store, mlflow_env, tmp_path):
    """The store refuses a write after the run was created (a metric name MLflow does not allow): one line,
    exit 6, and the run begun is FAILED and deleted, not left RUNNING; the records before it stay exported."""
    records = list(store["records"].values())
    bad = json.loads(json.dumps(records[0]))
    bad["run_id"] = "f" * 32
    bad["accuracy"] = {"curve": [{"samples": 64, "top@1": 0.5}]}  # '@' is not allowed in an MLflow metric name
    path = tmp_path / "store.jsonl"
    path.write_text(json.dumps(records[1]) + "\n" + json.dumps(bad) + "\n")
    uri = str(tmp_path / "mlruns")
    done = export(uri, [str(path)], mlflow_env)
    assert done.returncode == 6 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.startswith(f"benchrun: error: MLflow tracking store {uri}: could not log metrics: ") and \
        "top@1" in done.stderr and done.stderr.count("\n") == 1, done.stderr
    active, deleted = runs(uri, mlflow_env), runs(uri, mlflow_env, view="DELETED_ONLY")
    assert [(r["tags"][mlflow_export.RUN_ID_TAG], r["status"]) for r in active] == [(records[1]["run_id"], "FINISHED")]
    assert [(r["tags"][mlflow_export.RUN_ID_TAG], r["status"]) for r in deleted] == [(bad["run_id"], "FAILED")]


def _documented_names(text: str) -> set[str]:
    """Backquoted names in docs/mlflow.md, `a.{x,y}` expanded to a.x and a.y."""
    import re

    names = set()
    for name in re.findall(r"`([^`\s]+)`", text):
        match = re.fullmatch(r"(.*)\{([^}]*)\}(.*)", name)
        names.update(f"{match[1]}{part}{match[3]}" for part in match[2].split(",")) if match else names.add(name)
    return names


def _section(text: str, heading: str) -> str:
    """A markdown section's text, from its heading to the next one of its level."""
    level = heading.split(" ")[0]
    start = text.index(f"\n{heading}\n")
    end = text.find(f"\n{level} ", start + 1)
    return text[start:] if end < 0 else text[start:end]


def test_every_metric_param_and_tag_of_a_real_record_is_documented(real_record):
    """docs/mlflow.md names every metric, param and tag a real record makes (a failed run's and a swept
    one's too); a `config` param is documented with the config in docs/results.md, a provenance tag by its
    field in the table's provenance row."""
    text = (ROOT / "docs" / "mlflow.md").read_text()
    metrics_doc, params_doc, tags_doc = (_documented_names(_section(text, f"## {name}"))
                                         for name in ("Metrics", "Params", "Tags"))
    config_doc = _documented_names(_section((ROOT / "docs" / "results.md").read_text(), "## `config`"))
    failed = RecordFactory(real_record)(status="failed", error="RuntimeError: boom")
    sweep = {"config_hash": "abcd", "plan": "p.yaml", "attempt": 1}
    maps = [mlflow_export.mapped(real_record), mlflow_export.mapped(failed, sweep)]
    metrics = {name for m in maps for name, _, _ in m.metrics}
    assert metrics and metrics <= metrics_doc, sorted(metrics - metrics_doc)
    params = {name for m in maps for name in m.params}
    missing = {name for name in params if name not in params_doc and
               not (name in real_record["config"] and name in config_doc)}
    assert params > {"framework", "runtime", "world.workers"} and not missing, sorted(missing)
    provenance_row = _documented_names(next(line for line in _section(text, "## Tags").splitlines()
                                            if line.startswith("| `provenance.FIELD`")))
    tags = {name for m in maps for name in m.tags}
    missing = {name for name in tags if name not in tags_doc and
               not (name.startswith("provenance.") and name.rsplit(".", 1)[1] in provenance_row)}
    assert {"dlbench.run_id", "error.kind", "sweep.plan", "provenance.hostname"} <= tags and not missing, sorted(missing)
