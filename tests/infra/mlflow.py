"""MLflow for the tests: its client importable by benchrun, and a real `mlflow server` on localhost.

Both come from scripts/install-mlflow.sh (PyPI, cached under ~/.cache/dlbench and keyed on the
script, the version and this Python's packages): the client (mlflow-skinny) as a directory for
PYTHONPATH, the server (full mlflow) in its own venv. Tests read what MLflow stored through
MLflow's own client, in a subprocess (`runs`): the pytest process never imports MLflow.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from runners.mlflow_export import COMPLETE_TAG, RUN_ID_TAG

from .helpers import ROOT, python_env
from .slurm import free_port_base, skip_loudly

INSTALL = ROOT / "scripts" / "install-mlflow.sh"


def _install(*args: str) -> str:
    """The path the script's `export NAME="PATH..."` line names (installs on first use)."""
    try:
        done = subprocess.run([str(INSTALL), *args], capture_output=True, text=True, timeout=1200,
                              stdin=subprocess.DEVNULL)
    except FileNotFoundError as error:  # no bash: not a machine these tests are for
        skip_loudly(f"MLFLOW TESTS SKIPPED: {error}")
    assert done.returncode == 0, f"install-mlflow.sh {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-3000:]}"
    line = done.stdout.strip()
    assert line.startswith("export ") and '="' in line, line
    return line.split('="', 1)[1].split("$", 1)[0].rstrip(":")


@pytest.fixture(scope="session")
def mlflow_env() -> dict:
    """benchrun's environment with MLflow's client importable (this checkout's packages first), file
    stores allowed (MLflow 3.x refuses them unless asked)."""
    lib = _install("--python", sys.executable)
    return python_env({"PYTHONPATH": os.pathsep.join((str(ROOT), lib)), "MLFLOW_ALLOW_FILE_STORE": "true"})


def runs(uri: str, env: dict, experiment: str = "dlbench", view: str = "ACTIVE_ONLY") -> list[dict]:
    """Every run of `experiment` at `uri`, as MLflow's client reads it back: info, params, tags, each
    metric's full history, and the record artifact's content."""
    code = """
import json, sys, tempfile
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient
client = MlflowClient(tracking_uri=sys.argv[1])
exp = client.get_experiment_by_name(sys.argv[2])
out = []
for run in (client.search_runs([exp.experiment_id], run_view_type=getattr(ViewType, sys.argv[3]), max_results=10000)
            if exp else []):
    rid = run.info.run_id
    names = [f.path for f in client.list_artifacts(rid)]
    record = None
    if "record.json" in names:
        with tempfile.TemporaryDirectory() as d:
            record = json.load(open(client.download_artifacts(rid, "record.json", d)))
    out.append({"id": rid, "name": run.info.run_name, "status": run.info.status, "stage": run.info.lifecycle_stage,
                "start": run.info.start_time, "end": run.info.end_time, "params": run.data.params,
                "tags": run.data.tags, "artifacts": names, "record": record,
                "metrics": {k: sorted((m.step, m.value) for m in client.get_metric_history(rid, k))
                            for k in run.data.metrics}})
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", code, uri, experiment, view], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def complete_run_ids(url: str, experiment: str = "dlbench") -> list[str]:
    """The dlbench run ids of the complete runs a tracking server holds, through its REST API (quick: no
    MLflow client started, for polling while a sweep runs). The server has one worker, busy with the sweep's own
    logging on a loaded machine: an answer may take a while."""
    from urllib.parse import quote

    def call(path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{url}/api/2.0/mlflow/{path}", data=data,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=90) as answer:
            return json.load(answer)

    try:
        found = call(f"experiments/get-by-name?experiment_name={quote(experiment)}")
    except urllib.error.HTTPError as error:
        if error.code == 404:  # no experiment yet: nothing logged
            return []
        raise
    runs = call("runs/search", {"experiment_ids": [found["experiment"]["experiment_id"]], "max_results": 1000})
    tags = [{tag["key"]: tag["value"] for tag in run["data"].get("tags", [])} for run in runs.get("runs", [])]
    return sorted(t[RUN_ID_TAG] for t in tags if t.get(COMPLETE_TAG) == "complete")


def _healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/health", timeout=2) as answer:
            return answer.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def served(home: Path, port: int):
    """A real `mlflow server` on 127.0.0.1:port, SQLite-backed in `home`, serving artifacts; stopped on exit
    (its process group: uvicorn's workers too). Started again on the same home, it has the same runs."""
    bin_dir = _install("--server")
    url = f"http://127.0.0.1:{port}"
    log = open(home / "server.log", "a")
    server = subprocess.Popen([f"{bin_dir}/mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                               "--workers", "1", "--backend-store-uri", f"sqlite:///{home}/mlflow.db",
                               "--artifacts-destination", str(home / "artifacts")],
                              cwd=home, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not _healthy(url):
            assert server.poll() is None, f"mlflow server exited ({server.returncode}):\n{Path(log.name).read_text()[-3000:]}"
            assert time.monotonic() < deadline, f"mlflow server not up in 120 s:\n{Path(log.name).read_text()[-3000:]}"
            time.sleep(0.5)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def server_port() -> int:
    return free_port_base(1, start=15100, stop=15900)


@pytest.fixture(scope="module")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` for the module (`served`). Yields its URL."""
    with served(tmp_path_factory.mktemp("mlflow-server"), server_port()) as url:
        yield url
