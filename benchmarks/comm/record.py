"""The `bench comm` record: one JSON document per run, kind "comm", in the same stores as training
records. Its JSON Schema (benchmarks/schema/comm-1.json) is generated from these models
(`python -m benchmarks.comm.record > benchmarks/schema/comm-1.json`); a test keeps both, and
docs/comm.md, in step.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Optional

from pydantic import Field

from ..distributed import strategies
from ..results.record import Provenance, PsLoad, StatsRecord, WorldInfo, _Model, titled_schema
from ..settings.options import choices_of

COMM_SCHEMA_VERSION = "1.7"
COMM_SCHEMA_FILE = Path(__file__).parent.parent / "schema" / "comm-1.json"
KIND = "comm"


def is_comm(record: dict) -> bool:
    """Stores hold training and comm records side by side; this tells them apart."""
    return isinstance(record, dict) and record.get("kind") == KIND


class CommConfig(_Model):
    framework: Literal[choices_of("framework")]
    backend: str = Field(description="gloo, nccl, mpi, horovod, collective (TF) or ps (TF)")
    ops: list[Literal[strategies.COMM_OPS]]
    dtype: Literal["float32"]
    min_bytes: int
    max_bytes: int
    step_factor: int
    warmup_iters: int
    iters: int
    model: str = Field(description="model whose gradient buckets / variables are communicated")
    image_size: Optional[int] = Field(default=None, description="input size the model's variables were built for (TensorFlow; "
                                                                "1.2)")
    device: Literal[choices_of("device")]
    strategy: Literal[strategies.COMM_NAMES]
    num_ps: int
    ps_placement: Literal[choices_of("ps_placement")]
    worker_port: int
    ps_port: int
    rendezvous_port: int
    rendezvous_timeout: float
    timeout: Optional[float]


class CommRow(_Model):
    op: Literal[strategies.COMM_OPS]
    backend: str
    bytes: int = Field(description="message size; for gradients/ps_step the sum over buckets/variables (per worker)")
    elements: int
    iterations: int
    time_s: float = Field(description="mean time of one operation (nccl-tests: per-rank mean, averaged over ranks)")
    time_stats_s: StatsRecord = Field(description="every timed iteration of every participating rank")
    algbw_gbps: float = Field(description="bytes / time_s / 1e9")
    bus_factor: float = Field(description="2(n-1)/n for all-reduce, 1 otherwise")
    busbw_gbps: float = Field(description="algbw x bus_factor")
    latency_us: Optional[float] = Field(default=None, description="pingpong: one-way time (half the round trip)")
    wrong: int = Field(description="elements that differed from the expected result, summed over ranks")
    ranks: int = Field(description="ranks taking part in this operation")
    buckets: Optional[list[int]] = Field(default=None, description="gradients/ps_step: the byte sizes communicated")
    peer: Optional[str] = Field(default=None, description="pingpong: 'RANK<->RANK'; pull/push: 'N worker(s) <-> ps P'; ps_step: "
                                                          "'N worker(s) <-> P PS'")


class Gradients(_Model):
    model: str
    rule: str = Field(description="how gradients are grouped into the buckets all-reduced (--strategy ps: which variables are "
                                  "sent)")
    bucket_bytes: list[int]
    total_bytes: int


class CommError(_Model):
    kind: Literal["incorrect", "oom", "crash", "timeout", "interrupted", "environment"]
    message: str
    exit_code: Optional[int] = Field(default=None, description="the worker's exit code, when it died without a record (1.5)")
    signal: Optional[str] = Field(default=None, description="the signal that ended or stopped the worker (1.5)")


class CommRecord(_Model):
    schema_version: Literal[COMM_SCHEMA_VERSION] = COMM_SCHEMA_VERSION
    kind: Literal["comm"] = KIND
    run_id: str
    timestamp_utc: str
    status: Literal["ok", "failed", "oom", "timeout", "interrupted"]
    error: Optional[CommError]
    config: CommConfig
    world: WorldInfo
    results: list[CommRow] = Field(description="one row per operation and message size, in the order measured")
    gradients: Optional[Gradients]
    placement: Optional[list[PsLoad]] = Field(default=None, description="--strategy ps: variables and bytes per parameter "
                                                                        "server, read back from where TensorFlow put them (1.2)")
    correct: bool = Field(description="every checked result held the expected values on every rank")
    duration_s: float
    provenance: Provenance


def validate(record: dict) -> dict:
    return CommRecord.model_validate(record).model_dump(mode="json")


def build(options, base: dict, status: str, error: dict | None, duration_s: float, world: dict,
          framework: dict | None = None, results: list[dict] = (), gradients: dict | None = None,
          placement: list[dict] | None = None) -> dict:
    """A validated comm record (`options`: a CommOptions); a run that wrote none gets only its config and world."""
    return validate({
        "run_id": base["run_id"], "timestamp_utc": base["timestamp_utc"], "status": status, "error": error,
        "config": options.as_dict(), "world": world, "results": list(results), "gradients": gradients,
        "placement": placement, "correct": status == "ok", "duration_s": duration_s,
        "provenance": {**base["provenance"], "framework": framework},
    })


def json_schema() -> dict:
    return titled_schema(CommRecord, f"dlbench comm record {COMM_SCHEMA_VERSION}")


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2))
