"""What gpu_validate.py asks of every record (issue 23), and of the folder the device tool brings back."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpu_plan import Step

OUT_MAX_FILES = 8  # the device tool brings back at most 8 files, 2 folders down, named [A-Za-z0-9._-]
OUT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
MFU_CEILING = 0.5  # no CNN training run reaches half the datasheet peak: above it the count or the peak is wrong
ENERGY_MIN_LOOP_S = 1.0  # NVML's energy counter may not advance over a shorter loop: null is then no failure
PLAUSIBLE_WATTS = (20.0, 1500.0)  # an H100/H200 draws 60-700 W; outside this the reading is wrong
CEILING_OVER_PEAK = 1.02  # a measured GEMM above the datasheet peak (boost clock) by more than this is wrong

def check_record(record: dict, step: Step, on_gpu: bool) -> tuple[list[str], list[str]]:
    """(problems, notes) of one bench record: what issue 23 asks of every GPU record, and on a CPU
    what a CPU record must say instead."""
    problems, notes = [], []
    status, expected = record["status"], step.expect_status
    if expected == "search":  # a --find-max-batch probe: ok or oom, nothing else
        if status not in ("ok", "oom"):
            problems.append(f"probe status {status}: {(record.get('error') or {}).get('message')}")
        if status != "ok":
            return problems, notes
    elif status != expected:
        message = (record.get("error") or {}).get("message")
        return [f"status {status}, expected {expected}" + (f": {message}" if message else "")], notes
    elif status != "ok":
        if (record.get("error") or {}).get("kind") != expected:
            problems.append(f"error kind {(record.get('error') or {}).get('kind')}, expected {expected}")
        return problems, notes
    loss = record.get("final_loss")
    if loss is None or not math.isfinite(loss):
        problems.append(f"final loss {loss} is not finite")
    framework = record["provenance"].get("framework") or {}
    kind = framework.get("device_kind")
    if kind != ("gpu" if on_gpu else "cpu"):
        problems.append(f"trained on {kind} ({framework.get('device_name')}), expected {'gpu' if on_gpu else 'cpu'}")
        return problems, notes
    problems += precision_problems(record.get("precision") or {}, step.precision, on_gpu)
    problems += step_timing_problems(record, step.step_timing, on_gpu)
    if on_gpu:
        problems += memory_problems(record["memory"])
        energy_problems, energy_notes = energy_checks(record)
        problems, notes = problems + energy_problems, notes + energy_notes
        mfu = (record.get("flops") or {}).get("mfu")
        if mfu is None:
            problems.append(f"MFU missing: {(record.get('flops') or {}).get('mfu_unavailable_reason')}")
        elif not 0 < mfu < MFU_CEILING:
            problems.append(f"MFU {mfu:.3f} outside (0, {MFU_CEILING})")
    else:
        memory = record["memory"]
        if any(memory[k] is not None for k in ("allocator_peak_bytes", "reserved_peak_bytes", "device_peak_bytes")):
            problems.append(f"GPU memory fields on a CPU run: {memory}")
        flops = record.get("flops") or {}
        if flops.get("mfu") is not None or "CPU" not in (flops.get("mfu_unavailable_reason") or ""):
            problems.append(f"a CPU run must have no MFU, with the reason: {flops.get('mfu')}, "
                            f"{flops.get('mfu_unavailable_reason')}")
        energy = record.get("energy") or {}
        if energy.get("joules") is None and not energy.get("unavailable_reason"):
            problems.append("energy null without a reason")
    for name in step.checks:
        problems += EXTRA_CHECKS[name](record) if name in EXTRA_CHECKS else []
    return problems, notes


def precision_problems(section: dict, requested: str | None, on_gpu: bool) -> list[str]:
    """The precision asked is the one in effect: autocast dtype, loss scaling, TF32 on or off."""
    if requested is None:
        return []
    if not section:
        return ["no precision section"]
    effective = {"amp": "amp-fp16" if on_gpu else "amp-bf16"}.get(requested, requested)
    problems = []
    if section["effective"] != effective:
        problems.append(f"precision {section['effective']} in effect, asked {requested}")
    dtype = {"amp-fp16": "float16", "amp-bf16": "bfloat16"}.get(effective)
    if section["autocast_dtype"] != dtype:
        problems.append(f"autocast {section['autocast_dtype']}, expected {dtype}")
    if section["loss_scaling"] != (effective == "amp-fp16"):
        problems.append(f"loss scaling {section['loss_scaling']} under {effective}")
    if on_gpu and section["tf32_in_effect"] != (effective == "tf32"):
        problems.append(f"TF32 in effect: {section['tf32_in_effect']} under {effective} "
                        f"(flag {section['tf32_flag']}, compute capability {section['compute_capability']})")
    if not on_gpu and section["tf32_flag"]:
        problems.append("TF32 flag on a CPU")
    return problems


def step_timing_problems(record: dict, asked: str, on_gpu: bool) -> list[str]:
    """The --step-timing asked is the clock that ran, with cudnn.benchmark on under events alone (GPU)."""
    from benchmarks.measure.step_timing import CLOCKS, EVENTS  # framework-free

    section = record.get("step_timing")
    if record["config"].get("step_timing") != asked or not section:
        return [f"step timing {record['config'].get('step_timing')} ({section}), asked {asked}"]
    clock = CLOCKS[asked]
    benchmark = (asked == EVENTS) if on_gpu else None
    if (section["clock"], section["cudnn_benchmark"]) != (clock, benchmark):
        return [f"step timing {asked}: clock {section['clock']}, cudnn.benchmark {section['cudnn_benchmark']}; "
                f"expected {clock}, {benchmark}"]
    return []


def memory_problems(memory: dict) -> list[str]:
    """allocator <= reserved <= NVML device peak <= device total, all measured."""
    names = ("allocator_peak_bytes", "reserved_peak_bytes", "device_peak_bytes", "device_total_bytes")
    values = [memory.get(n) for n in names]
    missing = [n for n, v in zip(names, values) if v is None]
    if missing:
        why = memory.get("device_unavailable_reason")
        return [f"memory not measured: {', '.join(missing)}" + (f" ({why})" if why else " (no reason given)")]
    problems = [f"{a} {memory[a]} > {b} {memory[b]}" for a, b in zip(names, names[1:]) if memory[a] > memory[b]]
    if values[0] <= 0:
        problems.append("allocator peak is zero")
    return problems


def energy_checks(record: dict) -> tuple[list[str], list[str]]:
    """NVML energy with a plausible average power; a loop under ENERGY_MIN_LOOP_S may leave it null."""
    energy = record.get("energy") or {}
    wall = (record.get("throughput") or {}).get("total_wall_time_s") or 0.0
    if energy.get("joules") is None:
        text = f"energy null: {energy.get('unavailable_reason')}"
        return ([], [text]) if wall < ENERGY_MIN_LOOP_S else ([text], [])
    problems = []
    if not (energy.get("source") or "").startswith("nvml"):
        problems.append(f"energy source {energy.get('source')} on a GPU")
    watts = energy.get("average_watts") or 0.0
    limits = [rep["device_state"]["power_limit_w"]["max"] for rep in record.get("repeats", [])
              if (rep.get("device_state") or {}).get("power_limit_w")]
    ceiling = 1.2 * max(limits) if limits else PLAUSIBLE_WATTS[1]
    if not PLAUSIBLE_WATTS[0] <= watts <= ceiling:
        problems.append(f"average power {watts:.0f} W outside {PLAUSIBLE_WATTS[0]:.0f}-{ceiling:.0f} W")
    return problems, []


def _launcher(record):
    launcher = record["world"]["launcher"]  # torchrun's variables set by hand (no TORCHELASTIC_RUN_ID): "env"
    return [] if launcher == "env" else [f"launcher {launcher}, expected env (RANK, WORLD_SIZE, LOCAL_RANK set)"]


def _real_data(record):
    data = record.get("data") or {}
    return [] if record["config"]["data"] == "real" and data.get("images", 0) > 0 else [f"not a real-data run: {data}"]


def _ddp(record):
    return [] if record["world"]["strategy"] == "ddp" else [f"strategy {record['world']['strategy']}"]


def _trace(record):
    ranks = (record.get("trace") or {}).get("ranks") or [None]
    rank = ranks[0] or {}
    return [f"trace: {rank.get('error') or 'no trace'}"] if rank.get("error") or not rank.get("steps") else []


def _ceiling(record):
    """--ceiling measure (issue 47): probed in this run in the run's math, no higher than the datasheet (a GEMM
    above it means the probe is wrong), and MFU vs achievable beside MFU (a smaller denominator)."""
    probed, flops = record.get("ceiling") or {}, record.get("flops") or {}
    if not probed.get("flops_per_sec"):
        return [f"no ceiling: {probed.get('unavailable_reason') or 'section missing'}"]
    problems = [] if probed["source"] == "measured" else [f"ceiling {probed['source']}, expected measured"]
    if flops.get("math") and probed["math"] != flops["math"]:
        problems.append(f"ceiling probed in {probed['math']}, the run's math is {flops['math']}")
    peak = flops.get("peak_flops_per_sec")
    if peak and probed["flops_per_sec"] > CEILING_OVER_PEAK * peak:
        problems.append(f"ceiling {probed['flops_per_sec'] / 1e12:.1f} TFLOP/s above the datasheet's {peak / 1e12:.1f}")
    if flops.get("mfu_vs_achievable") is None:
        problems.append(f"no MFU vs achievable: {flops.get('achievable_unavailable_reason')}")
    elif flops.get("mfu") is not None and flops["mfu_vs_achievable"] < flops["mfu"]:
        problems.append(f"MFU vs achievable {flops['mfu_vs_achievable']:.3f} below MFU {flops['mfu']:.3f}")
    return problems


def _compiled(record):
    section = record.get("compile") or {}
    if not section:
        return ["no compile section"]
    return [f"compile fell back to eager: {section['fallback_reason']}"] if section["fell_back_to_eager"] else []


EXTRA_CHECKS = {"launcher-env": _launcher, "real-data": _real_data, "strategy-ddp": _ddp, "trace": _trace,
                "compiled": _compiled, "ceiling": _ceiling}


def check_search(records: list[dict]) -> list[str]:
    """--find-max-batch: numbered probes of one search, the last final with an answer."""
    searches = [r.get("batch_search") or {} for r in records]
    if not records:
        return ["no probe records"]
    problems = []
    if [s.get("probe") for s in searches] != list(range(1, len(records) + 1)):
        problems.append(f"probes numbered {[s.get('probe') for s in searches]}")
    last = searches[-1]
    if not last.get("final") or last.get("max_batch") is None:
        problems.append(f"no answer: final {last.get('final')}, max_batch {last.get('max_batch')}, {last.get('stop_reason')}")
    return problems


def check_out_dir(out: Path) -> list[str]:
    """The device tool's $OUT rules: at most 8 files, at most 2 folders down, plain names."""
    problems, files = [], []
    for path in sorted(out.rglob("*")):
        relative = path.relative_to(out)
        if not all(OUT_NAME.match(part) for part in relative.parts):
            problems.append(f"{relative}: a name with characters other than letters, digits, '.', '_', '-'")
        if path.is_symlink() or (not path.is_file() and not path.is_dir()):
            problems.append(f"{relative}: not a plain file")
        elif path.is_file():
            files.append(relative)
            if len(relative.parts) > 3:
                problems.append(f"{relative}: more than 2 folders down")
    if len(files) > OUT_MAX_FILES:
        problems.append(f"{len(files)} files, at most {OUT_MAX_FILES} come back")
    return problems
