"""dlbench records as MLflow runs: one run per record, found again by its dlbench run_id.

`mapped(record)` turns a record into what MLflow stores (params, metrics, tags, status, times;
docs/mlflow.md lists every field) without importing MLflow; `Tracker` writes it through
MLflow's own client, to any tracking URI MLflow accepts (a directory, file:, sqlite:, http(s):).

A run is complete once its tag `dlbench.export` reads `complete`, set last (docs/mlflow.md,
"Idempotent"): the next export deletes and rewrites a run without it, and never a complete one.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import importlib.util
import json
import math
import os
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass, field

from benchmarks.comm.record import is_comm
from benchmarks.core.errors import UsageError

from .reporting.keys import runtime_of

EXPERIMENT = "dlbench"
RUN_ID_TAG = "dlbench.run_id"
COMPLETE_TAG = "dlbench.export"
RUN_ID = re.compile(r"[0-9a-fA-F]{8,64}")
INSTALL_HINT = "pip install mlflow-skinny (the client; scripts/install-mlflow.sh installs a cached copy)"

# MLflow's REST client retries a refused connection for minutes by default: fail within seconds instead;
# and no "View run" lines of its own on stdout (a user's own setting of these variables wins).
ENV_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                "MLFLOW_HTTP_REQUEST_TIMEOUT": "30", "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true"}

# record fields whose numeric leaves become metrics named SECTION.FIELD (nested: SECTION.A.B; a number: its name)
METRIC_SECTIONS = ("throughput", "step_time_s", "input_wait_s", "memory", "flops", "energy", "model", "final_loss",
                   "duration_s")
# per repeat / per rank: metric NAME logged at step = repeat index / rank
REPEAT_METRICS = {"repeat.images_per_sec": ("images_per_sec",), "repeat.wall_time_s": ("wall_time_s",),
                  "repeat.step_time_s.p90": ("step_time_s", "p90"), "repeat.step_time_s.mean": ("step_time_s", "mean"),
                  "repeat.input_wait_fraction": ("input_wait_fraction",), "repeat.joules": ("joules",)}
RANK_METRICS = {"rank.images_per_sec": ("images_per_sec",), "rank.wall_time_s": ("wall_time_s",)}
COMM_ROW_METRICS = ("busbw_gbps", "algbw_gbps", "time_s", "latency_us")
WORLD_PARAMS = ("workers", "processes", "num_ps", "nodes", "processes_per_node", "launcher")
DATABASE_SCHEMES = ("sqlite", "postgresql", "mysql", "mssql")  # SQLAlchemy stores: full mlflow, not mlflow-skinny
RUN_STATUS = {"ok": "FINISHED", "interrupted": "KILLED"}  # any other record status: FAILED

PARAM_LIMIT, TAG_LIMIT = 6000, 5000  # MLflow's value limits (characters)
BATCH = 1000  # entities per log_batch call (MLflow's limit: 1000 metrics, 100 params, 100 tags)


class TrackingError(Exception):
    """The tracking store could not be reached or refused a write: one line, exit 6."""


@dataclass
class Mapped:
    name: str
    params: dict[str, str]
    metrics: list[tuple[str, float, int]]  # (key, value, step)
    tags: dict[str, str]
    status: str
    start_ms: int
    end_ms: int
    record: dict = field(repr=False)


def add_options(parser, what: str) -> None:
    """--mlflow [TRACKING_URI] and --mlflow-experiment, for `export` and `sweep`."""
    parser.add_argument("--mlflow", nargs="?", const="", metavar="TRACKING_URI",
                        help=f"{what} (default URI: $MLFLOW_TRACKING_URI, else MLflow's default); a record already "
                             "there is skipped (docs/mlflow.md)")
    parser.add_argument("--mlflow-experiment", default=EXPERIMENT,
                        help=f"MLflow experiment to log into (default: {EXPERIMENT}; created when missing)")


def _number(value) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def _leaves(prefix: str, value) -> list[tuple[str, float]]:
    """(dotted name, number) of every finite numeric leaf under a dict (lists are left to their own rules)."""
    if isinstance(value, dict):
        return [leaf for key, item in value.items() for leaf in _leaves(f"{prefix}.{key}", item)]
    number = _number(value)
    return [] if number is None else [(prefix, number)]


def _get(obj, path: tuple[str, ...]):
    for key in path:
        obj = obj.get(key) if isinstance(obj, dict) else None
    return obj


def _text(value) -> str:
    if isinstance(value, list):
        return shlex.join(str(v) for v in value) if all(isinstance(v, str) for v in value) else json.dumps(value)
    if isinstance(value, dict):
        return json.dumps(value, sort_keys=True)
    return str(value).lower() if isinstance(value, bool) else str(value)


def _millis(timestamp: str | None) -> int | None:
    try:
        return int(dt.datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp() * 1000)
    except (AttributeError, ValueError):
        return None


def _metrics(record: dict) -> list[tuple[str, float, int]]:
    if is_comm(record):
        found = [(f"{row['op']}.{name}", value, int(row["bytes"])) for row in record.get("results") or []
                 for name in COMM_ROW_METRICS if (value := _number(row.get(name))) is not None]
        busbw = [value for key, value, _ in found if key.endswith(".busbw_gbps")]
        return found + ([("busbw_gbps.max", max(busbw), 0)] if busbw else [])
    found = [(name, value, 0) for section in METRIC_SECTIONS for name, value in _leaves(section, record.get(section))]
    workers = _get(record, ("world", "workers"))
    total = _number(_get(record, ("throughput", "images_per_sec")))
    if total is not None and isinstance(workers, int) and workers > 0:
        found.append(("throughput.images_per_sec_per_rank", total / workers, 0))
    for rows, table, index in ((record.get("repeats"), REPEAT_METRICS, "index"), (record.get("ranks"), RANK_METRICS, "rank")):
        for row in rows or []:
            found += [(name, value, int(row.get(index) or 0)) for name, path in table.items()
                      if (value := _number(_get(row, path))) is not None]
    for point in _get(record, ("accuracy", "curve")) or []:  # evaluation points: accuracy.FIELD at step = samples
        if isinstance(point, dict) and isinstance(point.get("samples"), int):
            found += [(f"accuracy.{name}", value, point["samples"]) for name, item in point.items()
                      if name != "samples" and (value := _number(item)) is not None]
    return found


def _params(record: dict) -> dict[str, str]:
    params = {name: _text(value) for name, value in (record.get("config") or {}).items() if value is not None}
    params["runtime"] = runtime_of(record)
    world = record.get("world") or {}
    params.update({f"world.{name}": _text(world[name]) for name in WORLD_PARAMS if world.get(name) is not None})
    return {key: value[:PARAM_LIMIT] for key, value in params.items()}


def _tags(record: dict, sweep: dict | None) -> dict[str, str]:
    provenance = record.get("provenance") or {}
    tags = {RUN_ID_TAG: record["run_id"], "dlbench.status": record.get("status", ""),
            "dlbench.schema_version": str(record.get("schema_version", "")), "dlbench.kind": record.get("kind", "train"),
            "mlflow.source.name": "benchrun", "mlflow.source.type": "LOCAL"}
    for name, value in provenance.items():
        if isinstance(value, dict):
            tags.update({f"provenance.{name}.{key}": _text(item) for key, item in value.items() if item is not None})
        elif value is not None:
            tags[f"provenance.{name}"] = _text(value)
    error = record.get("error") or {}
    tags.update({f"error.{key}": _text(value) for key, value in error.items() if value is not None})
    replicas = record.get("replicas") or {}
    if replicas.get("in_sync") is not None:
        tags["replicas.in_sync"] = _text(replicas["in_sync"])
    if sweep:
        tags.update({f"sweep.{key}": _text(sweep[key]) for key in ("config_hash", "plan", "attempt") if key in sweep})
    return {key: value[:TAG_LIMIT] for key, value in tags.items() if value != ""}


def run_name(record: dict) -> str:
    config, world = record.get("config") or {}, record.get("world") or {}
    parts = ["comm" if is_comm(record) else None, config.get("framework"), config.get("model"),
             f"b{config['batch_size']}" if config.get("batch_size") else None,
             config.get("strategy") if config.get("strategy") not in (None, "none") else None,
             f"x{world['workers']}" if world.get("workers") else None, runtime_of(record)]
    return "-".join(str(p) for p in parts if p)


def mapped(record: dict, sweep: dict | None = None) -> Mapped:
    """What MLflow stores for one record (the run, as `Tracker.log` writes it)."""
    start = _millis(record.get("timestamp_utc")) or 0
    duration = _number(record.get("duration_s")) or 0.0
    return Mapped(name=run_name(record), params=_params(record), metrics=_metrics(record), tags=_tags(record, sweep),
                  status=RUN_STATUS.get(record.get("status"), "FAILED"), start_ms=start,
                  end_ms=start + int(duration * 1000), record=record)


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}" if text else type(error).__name__


class Tracker:
    """One tracking store and experiment, through MLflow's client (MlflowClient)."""

    def __init__(self, uri: str | None, experiment: str = EXPERIMENT):
        if importlib.util.find_spec("mlflow") is None:
            raise UsageError(f"--mlflow needs MLflow, which this Python ({sys.executable}) lacks: {INSTALL_HINT}")
        for name, value in ENV_DEFAULTS.items():
            os.environ.setdefault(name, value)
        import mlflow
        from mlflow.tracking import MlflowClient

        self.uri = uri or "(default)"
        self.uri = uri or self._call("find the tracking URI", mlflow.get_tracking_uri)  # $MLFLOW_TRACKING_URI, else MLflow's
        scheme = self.uri.partition(":")[0].partition("+")[0]
        if scheme in DATABASE_SCHEMES and importlib.util.find_spec("sqlalchemy") is None:
            raise TrackingError(f"MLflow tracking store {self.uri}: a database store needs full MLflow (pip install "
                                "mlflow; this Python has only its client); or name a tracking server (http://HOST:PORT)")
        self.client = self._call("open", MlflowClient, tracking_uri=self.uri)
        self.uri = self.client.tracking_uri
        self.experiment_id = self._call("read the experiment", self._experiment, experiment)

    def _call(self, what: str, function, *args, **kwargs):
        """Run one MLflow call; its failure (store unreachable, refused, misconfigured) is one TrackingError line."""
        from mlflow.exceptions import MlflowException

        try:
            return function(*args, **kwargs)
        except Exception as error:  # requests' and SQLAlchemy's errors reach us unwrapped from some stores
            if not isinstance(error, (MlflowException, OSError, ImportError, ValueError)) and \
                    type(error).__module__.split(".")[0] not in ("requests", "urllib3", "sqlalchemy"):
                raise  # a bug: benchrun's internal-error line
            if "MLFLOW_ALLOW_FILE_STORE" in str(error):  # MLflow's own message is a paragraph
                reason = ("MLflow refuses file stores unless MLFLOW_ALLOW_FILE_STORE=true is set; or name a "
                          "tracking server (http://HOST:PORT) or sqlite:///FILE (full mlflow)")
            else:
                reason = f"could not {what}: {_one_line(error)}"
            raise TrackingError(f"MLflow tracking store {self.uri}: {reason}") from None

    def _experiment(self, name: str) -> str:
        found = self.client.get_experiment_by_name(name)
        if found is None:
            return self.client.create_experiment(name)
        if found.lifecycle_stage != "active":
            raise UsageError(f"MLflow experiment {name!r} is deleted in {self.uri}: restore it or pick another "
                             "with --mlflow-experiment")
        return found.experiment_id

    def existing(self, run_id: str | None = None) -> dict[str, list]:
        """dlbench run_id -> the active MLflow runs that carry it (one run_id, or every run of the experiment)."""
        from mlflow.entities import ViewType

        query = f"tags.`{RUN_ID_TAG}` = '{run_id}'" if run_id else ""
        found, token = {}, None
        while True:
            page = self._call("search runs", self.client.search_runs, [self.experiment_id], filter_string=query,
                              run_view_type=ViewType.ACTIVE_ONLY, max_results=1000, page_token=token)
            for run in page:
                found.setdefault(run.data.tags.get(RUN_ID_TAG), []).append(run)
            token = page.token
            if not token:
                return found

    def export(self, record: dict, sweep: dict | None = None, known: dict[str, list] | None = None) -> bool:
        """Log one record unless a complete run of it exists; True when a run was written. Runs of it
        left incomplete by an earlier export are deleted first (`known`: `existing()`, read once)."""
        if not RUN_ID.fullmatch(str(record.get("run_id"))):  # it goes into a search filter
            raise UsageError(f"record run_id {str(record.get('run_id'))[:80]!r} is not a dlbench run id (hex)")
        runs = (known if known is not None else self.existing(record["run_id"])).get(record["run_id"], [])
        if any(run.data.tags.get(COMPLETE_TAG) == "complete" for run in runs):
            return False
        for run in runs:  # an earlier export's, left incomplete: FAILED and deleted, as _abandon leaves its own
            if run.info.status == "RUNNING":
                self._call("end an incomplete run", self.client.set_terminated, run.info.run_id, "FAILED")
            self._call("delete an incomplete run", self.client.delete_run, run.info.run_id)
        self.log(mapped(record, sweep))
        return True

    def log(self, entry: Mapped) -> str:
        from mlflow.entities import Metric, Param, RunTag

        run = self._call("create a run", self.client.create_run, self.experiment_id, start_time=entry.start_ms,
                         tags={"mlflow.runName": entry.name}, run_name=entry.name)
        run_id = run.info.run_id
        try:
            tags = [RunTag(k, v) for k, v in entry.tags.items()]
            params = [Param(k, v) for k, v in entry.params.items()]
            metrics = [Metric(k, v, entry.start_ms, step) for k, v, step in entry.metrics]
            for start in range(0, max(len(tags), len(params)), 100):
                self._call("log params and tags", self.client.log_batch, run_id, params=params[start:start + 100],
                           tags=tags[start:start + 100])
            for start in range(0, len(metrics), BATCH):
                self._call("log metrics", self.client.log_batch, run_id, metrics=metrics[start:start + BATCH])
            with tempfile.TemporaryDirectory(prefix="dlbench-mlflow-") as scratch:
                path = os.path.join(scratch, "record.json")
                with open(path, "w") as handle:
                    json.dump(entry.record, handle, indent=1)
                self._call("upload the record artifact", self.client.log_artifact, run_id, path)
            self._call("finish the run", self.client.set_terminated, run_id, entry.status, end_time=entry.end_ms)
            self._call("mark the run complete", self.client.set_tag, run_id, COMPLETE_TAG, "complete")
        except BaseException:
            self._abandon(run_id)
            raise
        return run_id

    def _abandon(self, run_id: str) -> None:
        """A run that could not be completed: FAILED and deleted, so none is left RUNNING (best effort: the
        store may be what failed; the next export deletes what is left)."""
        with contextlib.suppress(Exception):  # the store is failing already; the first error is the one to report
            self.client.set_terminated(run_id, "FAILED")
            self.client.delete_run(run_id)
