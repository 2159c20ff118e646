"""One benchmark run inside the worker process: build, warm up, time, assemble the record.

This is the only place that sequences a measurement, so every backend is
measured the same way: warmup excluded, peaks reset after warmup, the device
synchronised at each timing boundary (timing.run_steps).
"""

from __future__ import annotations

import itertools
import os
import sys
import time

from . import frameworks, memory, record, stats, timing
from .config import BenchConfig
from .frameworks.base import Framework
from .mllog import MLLogger


def progress(message: str) -> None:
    print(f"bench: {message}", file=sys.stderr, flush=True)


def framework_info(backend: Framework) -> dict:
    device = backend.device_info()
    return {
        "name": backend.name,
        "version": backend.version(),
        "device_kind": device.kind,
        "device_name": device.name,
        "device_count": device.count,
        "visible_gpus": device.visible_gpus,
        "cuda_version": device.cuda_version,
        "cudnn_version": device.cudnn_version,
    }


def batch_source(backend: Framework, config: BenchConfig):
    if config.data_dir:
        return backend.real_batches()
    return itertools.cycle(backend.synthetic_batches())


def summarize(loops: list[timing.TimedLoop], batch_size: int) -> dict:
    """Throughput, pooled step statistics and per-repeat results from the timed loops."""
    rates = [loop.images_per_sec for loop in loops]
    all_steps = [t for loop in loops for t in loop.step_times_s]
    if len(loops) > 1:
        halfwidth, method = stats.t_halfwidth(rates), "t-interval over repeats"
    else:
        halfwidth = stats.throughput_halfwidth_from_steps(loops[0].step_times_s, batch_size)
        method = "delta method on step times" if halfwidth is not None else None
    return {
        "throughput": {
            "images_per_sec": sum(rates) / len(rates),
            "ci95_halfwidth": halfwidth,
            "ci_method": method,
            "total_images": sum(loop.images for loop in loops),
            "total_wall_time_s": sum(loop.wall_time_s for loop in loops),
        },
        "step_time_s": stats.Stats.of(all_steps).as_dict(),
        "input_wait_s": stats.Stats.of([w for loop in loops for w in loop.input_wait_s]).as_dict(),
        "repeats": [
            {
                "index": i,
                "images": loop.images,
                "wall_time_s": loop.wall_time_s,
                "images_per_sec": loop.images_per_sec,
                "step_time_s": stats.Stats.of(loop.step_times_s).as_dict(),
                "input_wait_s": stats.Stats.of(loop.input_wait_s).as_dict(),
                "input_wait_fraction": sum(loop.input_wait_s) / loop.wall_time_s,
            }
            for i, loop in enumerate(loops)
        ],
    }


class Measurement:
    """Holds what is known so far, so a failure at any point still yields a full record."""

    def __init__(self, config: BenchConfig, base: dict, mllog: MLLogger):
        self.config = config
        self.base = base  # run_id, timestamp, provenance from the supervisor
        self.mllog = mllog
        self.backend: Framework | None = None
        self.started = time.monotonic()

    def run(self) -> dict:
        cfg = self.config
        self.mllog.start("init_start")
        self.backend = frameworks.load(cfg.framework)(cfg)
        progress(f"building {cfg.model} on {cfg.framework} ({cfg.data} data)")
        self.backend.setup()
        device = self.backend.device_info()
        monitor = memory.DeviceMemoryMonitor(device.count if device.kind == "gpu" else 0, os.environ)
        try:
            batches = batch_source(self.backend, cfg)
            self.mllog.end("init_stop")
            self.mllog.event("global_batch_size", cfg.batch_size)
            self.mllog.start("run_start")
            if cfg.num_warmup_batches:
                progress(f"warmup: {cfg.num_warmup_batches} batches of {cfg.batch_size}")
                timing.run_steps(batches, self.backend.train_step, self.backend.synchronize,
                                 cfg.num_warmup_batches, cfg.batch_size)
            self.backend.reset_peak_memory()
            monitor.reset()
            rss_reset = memory.reset_host_rss_peak()
            loops = []
            for index in range(cfg.repeats):
                self.mllog.start("epoch_start", index, repeat=index)
                loop = timing.run_steps(batches, self.backend.train_step, self.backend.synchronize,
                                        cfg.num_batches, cfg.batch_size)
                loops.append(loop)
                self.mllog.end("epoch_stop", index, repeat=index)
                self.mllog.event("tracked_stats", {"throughput": loop.images_per_sec}, repeat=index)
                progress(f"repeat {index + 1}/{cfg.repeats}: {loop.images_per_sec:.2f} images/sec")
            peaks = self.backend.peak_memory()
            result = {
                **summarize(loops, cfg.batch_size),
                "memory": {
                    "allocator_peak_bytes": peaks.allocated,
                    "reserved_peak_bytes": peaks.reserved,
                    "device_peak_bytes": monitor.peak_bytes(),
                    "device_total_bytes": monitor.total_bytes(),
                    "host_rss_peak_bytes": memory.host_rss_peak_bytes(),
                    "host_rss_peak_since": "warmup_end" if rss_reset else "process_start",
                },
                "final_loss": self.backend.loss_value(loops[-1].last_loss),
            }
            self.mllog.end("run_stop", status="success")
            return self.finish("ok", None, **result)
        finally:
            monitor.close()
            self.backend.close()

    def failure(self, status: str, kind: str, message: str) -> dict:
        self.mllog.end("run_stop", status="aborted")
        return self.finish(status, {"kind": kind, "message": message}, memory=memory.host_only())

    def finish(self, status: str, error: dict | None, **result) -> dict:
        framework, model = None, None
        if self.backend is not None and hasattr(self.backend, "model"):
            framework, model = framework_info(self.backend), self.backend.model_info()
        return record.build(
            self.config, self.base, status, error, time.monotonic() - self.started,
            framework=framework, model=model, **result,
        )
