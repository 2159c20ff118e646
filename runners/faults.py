"""A run ended by a fault of its environment (the container daemon went away, a node failed): the record
says so in one line, error kind `environment`, status `failed` (docs/results.md). What bench wrote, if
anything, is kept with its status and error replaced; when bench wrote nothing, the host writes the record
from bench's arguments, so that a sweep stores a result like any other.
"""

from __future__ import annotations

import os

from benchmarks.core.errors import UsageError


def error_info(reason: str, exit_code: int) -> dict:
    return {"kind": "environment", "message": reason, "exit_code": exit_code, "signal": None}


def blame(record: dict, reason: str, exit_code: int) -> dict:
    """bench's own record, ended by the environment: status failed, the fault as its error; validated by
    its own schema (a training or a `bench comm` record, as its `kind` says)."""
    from benchmarks.comm import record as comm
    from benchmarks.results.record import validate

    blamed = {**record, "status": "failed", "error": error_info(reason, exit_code)}
    return (comm.validate if comm.is_comm(blamed) else validate)(blamed)


def host_record(request, launcher: str | None, reason: str, exit_code: int, started_utc: str, duration_s: float,
                command: list[str], run_token: str | None = None) -> dict | None:
    """The record of a run (a dispatch.RunRequest) that wrote none, made from its arguments on the host
    (None when they are not valid here); `run_token`: the one benchrun gave its ranks, which placed their ports."""
    from benchmarks.comm import record as comm_records
    from benchmarks.distributed import cluster, strategies
    from benchmarks.distributed.world import World, world_section
    from benchmarks.results import record as records
    from benchmarks.results.provenance import host_provenance
    from benchmarks.settings.options import COMM

    asked = request.spec.replace(framework=request.spec.framework or os.environ.get("BENCH_FRAMEWORK") or "torch",
                                 num_ps=request.spec.num_ps or request.num_ps or None)  # benchrun's, given by the launch
    if run_token is not None:
        asked = asked.replace(**cluster.run_ports(asked.given, run_token))
    if asked.command != COMM:
        asked = asked.replace(data_dir=asked.data_dir or request.data_dir)  # the host's path, not the container's
    try:
        config = asked.config(installed_here=False)
    except UsageError:
        return None
    strategy = strategies.get(config.strategy)
    processes = strategy.processes(request.num_workers, request.num_ps)
    world = world_section(World(size=processes, local_size=processes, launcher=launcher or "none"),
                          config.strategy, config.num_ps)
    base = {"run_id": records.new_run_id(), "timestamp_utc": started_utc,
            "provenance": {**host_provenance(), "requested_runtime": request.runtime, "image": request.image,
                           "command": command}}
    error = error_info(reason, exit_code)
    if asked.command == COMM:
        return comm_records.build(config, base, "failed", error, duration_s, world)
    return records.build(config, base, "failed", error, duration_s, world=world)
