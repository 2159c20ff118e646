"""What `bench comm` records say: one step's exchange of the model's gradients as the
microbenchmark predicts it (the scaling-loss table's "predicted transfer"), and the busbw and
latency series of the report's network section. Definitions: docs/reports.md."""

from __future__ import annotations

from dataclasses import dataclass

from benchmarks.distributed import strategies

from .keys import ID_PREFIX, device_kind

GRADIENT_BYTES_PER_PARAMETER = 4  # float32 gradients (autocast keeps master gradients in float32)


@dataclass
class Predicted:
    """One step's exchange of the model's gradients (all-reduce, or PS push/pull) as the comm
    microbenchmark predicts it."""

    seconds: float
    nbytes: int
    busbw_gbps: float
    how: str  # "gradient buckets", "all-reduce busbw at SIZE", or "pull+push of every variable"
    run: str  # the comm record's run_id prefix


def gradient_bytes(record: dict) -> int | None:
    parameters = (record.get("model") or {}).get("parameters")
    return parameters * GRADIENT_BYTES_PER_PARAMETER if parameters else None


def predicted_transfer(record: dict, comm_records: list[dict]) -> Predicted | None:
    """One step's exchange at this world size from the latest `bench comm` record of the same framework,
    device kind and backend, at as many ranks as it has workers (docs/reports.md, "Predicted
    transfer"). None for a strategy no `bench comm` op measures (its `exchange_op`)."""
    from benchmarks.comm.cli import default_backend
    from benchmarks.comm.metrics import bus_factor, format_size

    cfg = record["config"]
    strategy = strategies.get(cfg["strategy"])
    nbytes = gradient_bytes(record)
    workers = record["world"]["workers"]
    kind = device_kind(record)
    backend = default_backend(cfg["framework"], cfg["strategy"], kind, lambda: kind == "gpu")
    matching = [c for c in comm_records if c["status"] == "ok" and c.get("correct")
                and c["config"]["framework"] == cfg["framework"] and device_kind(c) == kind]
    if nbytes is None or strategy.exchange_op is None:
        return None
    same_ps = lambda c: all(c["config"].get(f) == cfg[f] for f in ("model", "image_size", "num_ps", "ps_placement"))  # noqa: E731 - a one-line filter, local here
    for comm in sorted(matching, key=lambda c: c["timestamp_utc"], reverse=True):
        rows = [row for row in comm["results"] if row["backend"] == backend and row["ranks"] == workers]
        run = comm["run_id"][:ID_PREFIX]
        exact = [row for row in rows if row["op"] == strategy.exchange_op
                 and (same_ps(comm) if strategy.uses_ps else row["bytes"] == nbytes and comm["config"]["model"] == cfg["model"])]
        if exact:
            row = exact[0]
            how = "pull+push of every variable" if strategy.uses_ps else "gradient buckets"
            return Predicted(row["time_s"], row["bytes"], row["busbw_gbps"], how, run)
        if strategy.uses_ps:
            continue
        sized = sorted((row for row in rows if row["op"] == "allreduce" and row["busbw_gbps"] > 0), key=lambda r: r["bytes"])
        if sized:
            row = next((r for r in sized if r["bytes"] >= nbytes), sized[-1])
            algbw = row["busbw_gbps"] / bus_factor("allreduce", workers) * 1e9
            return Predicted(nbytes / algbw, nbytes, row["busbw_gbps"], f"all-reduce busbw at {format_size(row['bytes'])}", run)
    return None


NETWORK_OPS = ("allreduce", "pingpong", "pull", "push")  # ops measured over message sizes


def network_series(comm_records: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """(op, label) -> rows by size, for all-reduce, ping-pong and PS pull/push (over the model's
    variable sizes), from the latest ok record of each (framework, backend, op, world size, PS
    count, device kind)."""
    latest: dict[tuple, tuple[str, list[dict]]] = {}
    for comm in sorted((c for c in comm_records if c["status"] == "ok"), key=lambda c: c["timestamp_utc"]):
        num_ps = comm["config"].get("num_ps", 0)
        for op in NETWORK_OPS:
            for backend in sorted({row["backend"] for row in comm["results"] if row["op"] == op}):
                rows = sorted((row for row in comm["results"] if row["op"] == op and row["backend"] == backend),
                              key=lambda row: row["bytes"])
                world = comm["world"]["workers"]
                servers = f" ps={num_ps}" if num_ps else ""
                label = (f"{op} {comm['config']['framework']}/{backend} n={world}{servers} {device_kind(comm)} "
                         f"({comm['run_id'][:ID_PREFIX]})")
                latest[(comm["config"]["framework"], backend, op, world, num_ps, device_kind(comm))] = (label, rows)
    return {(key[2], label): rows for key, (label, rows) in sorted(latest.items())}
