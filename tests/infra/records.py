"""Realistic records for report and comparison tests: ONE real record from a tiny bench run
(session-wide), varied field by field and validated against the JSON Schema."""

from __future__ import annotations

import copy

import pytest

from .helpers import bench, last_json_line, validate_record

MiB = 1024 * 1024


@pytest.fixture(scope="session")
def real_record() -> dict:
    result = bench("--framework", "torch", "--model", "alexnet", "--image-size", "64", "--batch-size", "2",
                   "--num-warmup-batches", "1", "--num-batches", "2", "--json")
    assert result.returncode == 0, result.stderr
    return validate_record(last_json_line(result.stdout))


class RecordFactory:
    """`R(ips, runtime=..., ...)`: a copy of the real record with these values, run_ids 00000001, 00000002, ..."""

    def __init__(self, base: dict):
        self.base = base
        self.count = 0

    def __call__(self, ips: float | None = 10.0, *, status: str = "ok", framework: str = "torch", model: str = "alexnet",
                 batch: int = 2, data: str = "synthetic", workers: int = 1, strategy: str = "none", num_ps: int = 0,
                 runtime: str = "docker", requested: str | None = None, ci: float = 0.5, host_rss: int = 1000 * MiB,
                 allocator: int | None = None, error: str | None = None) -> dict:
        self.count += 1
        r = copy.deepcopy(self.base)
        r["run_id"] = f"{self.count:08x}" + "0" * 24
        r["status"] = status
        c = r["config"]
        c.update(framework=framework, model=model, batch_size=batch, data=data, strategy=strategy, num_ps=num_ps,
                 data_dir="/data/imgs" if data == "real" else None)
        r["provenance"]["container_runtime"] = runtime  # detected inside
        r["provenance"]["requested_runtime"] = requested  # asked of benchrun (None: bench alone)
        r["provenance"]["framework"]["name"] = framework
        r["world"].update(workers=workers, processes=workers + (1 + num_ps if strategy == "ps" else 0),
                          num_ps=num_ps, strategy=strategy)
        r["memory"]["host_rss_peak_bytes"] = host_rss
        r["memory"]["allocator_peak_bytes"] = allocator
        if status == "ok":
            r["throughput"]["images_per_sec"] = ips
            r["throughput"]["ci95_halfwidth"] = ci
        else:
            kind = {"oom": "oom", "failed": "crash", "timeout": "timeout"}[status]
            r.update(throughput=None, step_time_s=None, input_wait_s=None, repeats=[], ranks=[], replicas=None,
                     final_loss=None, error={"kind": kind, "message": error or f"{kind} happened"})
        return validate_record(r)
