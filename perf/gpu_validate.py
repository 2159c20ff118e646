"""GPU on first contact: one call per phase validates every GPU path of bench (issue 23; perf/gpu.md).

    python3 perf/gpu_validate.py --phase A --out $OUT --deadline-s 510     # on the lent GPU machine
    python3 perf/gpu_validate.py --dry-run                                 # parse every planned command
    python3 perf/gpu_validate.py --cpu-smoke --out DIR                     # every phase, tiny, on a CPU
    python3 perf/gpu_validate.py report DIR [DIR ...]                      # perf/gpu.md's tables

Phases (each fits one device call of under 9 minutes):
- A, correctness: preflight (versions, a bf16 matrix product and a device copy as the machine's own
  ceilings, missing packages); a gate run that ends the call at once if it fails; a forced out of
  memory (status oom, exit 3) then a clean run at once; device mapping (CUDA_VISIBLE_DEVICES by UUID,
  LOCAL_RANK, an empty CUDA_VISIBLE_DEVICES with --device gpu: one line, exit 2, nothing written);
  --data-dir on a make-dataset tree; the GPU tests (tests/test_gpu.py); 5 models x 4 precisions,
  channels_last.
- B, speed: ResNet-50 224 px batch 256 amp-bf16 channels_last, side by side in rotated order, each run
  a fresh process: bench, a bare loop syncing every step as bench does, a fast bare loop (CUDA events,
  one sync at each end, cudnn.benchmark on) and, given --timm-benchmark, timm's benchmark.py in train
  mode; ratios to the fast loop with 95% t-intervals over rounds. Then amp-fp16, tf32 and --compile.
- C, the rest as time allows: --find-max-batch, `bench comm` over NCCL (one rank), DDP with one rank,
  --trace, --compile reduce-overhead, then the matrix's channels_first half.

Every GPU record is checked (check_record): allocator <= reserved <= NVML device peak <= device total;
energy from NVML with a plausible average power; MFU present and below 0.5; the precision really in
effect; a finite loss. This process never opens a CUDA context (NVML's device peak counts every
process on the GPU): every GPU action is a fresh subprocess, a failed step is recorded and the run goes
on (the gate excepted), a step whose time estimate does not fit before --deadline-s is skipped
(a shorter one after it may still run), the rest is stopped at it, and every result is
appended under --out as it comes (steps.jsonl, records.jsonl, comm.jsonl, log.txt: flat, plain names,
at most 8 files, the device tool's $OUT rules), so a call cut short still returns what was done.

Imports: the standard library; bench's own argparse parsers for --dry-run (no framework); the project's
statistics (benchmarks.stats: numpy, scipy) for the speed ratios' intervals. Exit: 0 every step passed
(steps skipped for the deadline are listed), 1 a step failed, 2 bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBE = Path(__file__).resolve().parent / "gpu_probe.py"
PHASES = ("A", "B", "C")
OUT_FILES = ("steps.jsonl", "records.jsonl", "comm.jsonl", "log.txt")
OUT_MAX_FILES = 8  # the device tool brings back at most 8 files, 2 folders down, named [A-Za-z0-9._-]
OUT_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
DEADLINE_MARGIN_S = 10.0  # kept free before --deadline-s to write the last lines
MFU_CEILING = 0.5  # no CNN training run reaches half the datasheet peak: above it the count or the peak is wrong
ENERGY_MIN_LOOP_S = 1.0  # NVML's energy counter may not advance over a shorter loop: null is then no failure
PLAUSIBLE_WATTS = (20.0, 1500.0)  # an H100/H200 draws 60-700 W; outside this the reading is wrong
EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
PLACEHOLDER_UUID = "GPU-00000000-0000-0000-0000-000000000000"  # --dry-run and the CPU smoke: no GPU to ask


@dataclass(frozen=True)
class Profile:
    """Sizes of one target: the lent GPU, or the CPU smoke (every step kind, tiny)."""

    name: str
    device: str  # bench --device
    models: tuple
    precisions: tuple
    formats: tuple
    image_size: int | None  # None: each model's default (224; 299 for inception3)
    batch: int
    warmup: int
    batches: int
    threads: int | None
    gate: tuple  # bench args of the gate and of the clean run after the OOM
    oom: tuple  # bench args that must run out of memory
    data: tuple  # make-dataset args
    speed: dict  # phase B's comparison
    speed_rounds: int
    speed_extra: tuple  # (name, bench args) run after the comparison
    maxbatch: tuple
    comm: tuple
    small: tuple  # bench args of the DDP, trace and compile runs
    compile_modes: tuple  # phase C's --compile modes
    probe_device: str  # gpu_probe.py --device
    preflight: tuple  # gpu_probe.py preflight sizes
    pytest_expect: str  # "passed": the GPU tests must pass; "skipped": no CUDA here, they must skip


GPU = Profile(
    name="gpu", device="gpu",
    models=("resnet50", "alexnet", "resnet101", "resnet152", "inception3"),
    precisions=("amp-bf16", "amp-fp16", "tf32", "fp32"), formats=("channels_last", "channels_first"),
    image_size=None, batch=32, warmup=3, batches=10, threads=None,
    gate=("--model", "resnet50", "--batch-size", "128", "--precision", "amp-bf16", "--data-format", "channels_last",
          "--num-warmup-batches", "10", "--num-batches", "60", "--repeats", "2"),
    oom=("--model", "resnet50", "--image-size", "448", "--batch-size", "512", "--precision", "fp32",
         "--num-warmup-batches", "1", "--num-batches", "1"),
    data=("--images", "256", "--classes", "4", "--min-size", "160", "--max-size", "320"),
    speed={"model": "resnet50", "image_size": 224, "batch": 256, "precision": "amp-bf16", "data_format": "channels_last",
           "warmup": 20, "steps": 60},
    speed_rounds=4,
    speed_extra=(("amp-fp16", ("--precision", "amp-fp16")), ("tf32", ("--precision", "tf32")),
                 ("compile", ("--compile",))),
    maxbatch=("--model", "resnet50", "--precision", "amp-bf16", "--data-format", "channels_last", "--batch-size", "256",
              "--num-warmup-batches", "1", "--num-batches", "2", "--max-batch-limit", "8192", "--max-batch-budget", "240"),
    comm=("--backend", "nccl", "--ops", "allreduce,gradients", "--max-bytes", "256M", "--iters", "20"),
    small=("--model", "resnet50", "--batch-size", "64", "--precision", "amp-bf16", "--data-format", "channels_last",
           "--num-warmup-batches", "5", "--num-batches", "30"),
    compile_modes=("reduce-overhead",), probe_device="cuda", preflight=("--matmul-size", "8192", "--copy-bytes", str(2**30)),
    pytest_expect="passed",
)
CPU_SMOKE = Profile(
    name="cpu-smoke", device="cpu",
    models=("alexnet",), precisions=("amp-bf16",), formats=("channels_last",),
    image_size=64, batch=2, warmup=1, batches=2, threads=1,
    gate=("--model", "alexnet", "--image-size", "64", "--batch-size", "2", "--num-warmup-batches", "1", "--num-batches", "2"),
    oom=("--model", "alexnet", "--image-size", "64", "--batch-size", str(2**28), "--num-warmup-batches", "0",
         "--num-batches", "1"),  # 13 TB of synthetic images: the allocator refuses at once
    data=("--images", "8", "--classes", "2", "--min-size", "64", "--max-size", "80"),
    speed={"model": "alexnet", "image_size": 64, "batch": 2, "precision": "fp32", "data_format": "channels_last",
           "warmup": 1, "steps": 3},
    speed_rounds=2, speed_extra=(("amp-bf16", ("--precision", "amp-bf16")),),
    maxbatch=("--model", "alexnet", "--image-size", "64", "--batch-size", "2", "--num-warmup-batches", "0",
              "--num-batches", "1", "--max-batch-limit", "4", "--max-batch-budget", "60"),
    comm=("--backend", "gloo", "--ops", "allreduce", "--max-bytes", "4K", "--iters", "2", "--warmup-iters", "1"),
    small=("--model", "alexnet", "--image-size", "64", "--batch-size", "2", "--num-warmup-batches", "1", "--num-batches", "2"),
    compile_modes=(),  # inductor takes minutes on 2 CPU cores: phase C's compile runs on the GPU only
    probe_device="cpu", preflight=("--matmul-size", "128", "--copy-bytes", str(2**20), "--repeats", "2"),
    pytest_expect="skipped",
)


@dataclass
class Step:
    phase: str
    name: str
    kind: str  # bench | comm | dataset | probe | pytest | timm | speed
    argv: list  # bench/comm/make-dataset arguments (after `bench`), or the whole command otherwise
    env: dict = field(default_factory=dict)
    expect_status: str = "ok"  # the record's status
    expect_exit: int = 0
    precision: str | None = None  # the --precision asked (checked in the record)
    checks: tuple = ()  # extra named checks (EXTRA_CHECKS)
    estimate_s: float = 20.0  # planning only: a step not expected to end before the deadline does not start
    gate: bool = False
    output: str | None = None  # where its records go: records.jsonl / comm.jsonl, or a scratch file


class Plan:
    """Every step of one phase for one profile; `facts` (the preflight's) fill in the GPU's UUID."""

    def __init__(self, profile: Profile, scratch: Path, timm: str | None = None):
        self.profile, self.scratch, self.timm = profile, scratch, timm
        self.facts: dict = {}

    def common(self) -> list:
        p = self.profile
        args = ["--framework", "torch", "--device", p.device, "--display-every", "0"]
        return args + (["--num-threads", str(p.threads)] if p.threads else [])

    def bench(self, phase, name, args, **options) -> Step:
        options.setdefault("precision", _value(args, "--precision") or "fp32")
        return Step(phase, name, "bench", [*self.common(), *args], **options)

    def matrix(self, phase: str, layouts) -> list[Step]:
        p = self.profile
        size = [] if p.image_size is None else ["--image-size", str(p.image_size)]
        return [self.bench(phase, f"matrix-{model}-{precision}-{layout}",
                           ["--model", model, *size, "--batch-size", str(p.batch), "--precision", precision,
                            "--data-format", layout, "--num-warmup-batches", str(p.warmup), "--num-batches", str(p.batches)],
                           estimate_s=15)
                for layout in layouts for model in p.models for precision in p.precisions]

    def phase_a(self) -> list[Step]:
        p, common = self.profile, self.common()
        uuid = self.facts.get("uuid") or PLACEHOLDER_UUID
        steps = [
            Step("A", "preflight", "probe", [str(PROBE), "preflight", "--device", p.probe_device, *p.preflight],
                 estimate_s=30, gate=True),
            self.bench("A", "gate", p.gate, gate=True, estimate_s=40),
            self.bench("A", "oom", p.oom, expect_status="oom", expect_exit=3, estimate_s=40),
            self.bench("A", "clean-after-oom", p.gate, estimate_s=40),
            self.bench("A", "visible-by-uuid", p.small, env={"CUDA_VISIBLE_DEVICES": uuid}, estimate_s=30),
            self.bench("A", "local-rank", p.small, env={"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0",
                                                        "LOCAL_WORLD_SIZE": "1"}, checks=("launcher-env",), estimate_s=30),
            Step("A", "no-visible-gpu", "bench",
                 [a if a != p.device else "gpu" for a in common] + list(p.small), env={"CUDA_VISIBLE_DEVICES": ""},
                 expect_status="none", expect_exit=2, checks=("one-line-error",), estimate_s=20,
                 output=str(self.scratch / "must-not-exist.jsonl")),
            Step("A", "make-dataset", "dataset", ["make-dataset", str(self.scratch / "data"), *p.data], estimate_s=20),
            self.bench("A", "data-dir", [*p.small, "--data-dir", str(self.scratch / "data"), "--num-data-workers", "2"], checks=("real-data",), estimate_s=40),
            Step("A", "gpu-tests", "pytest", [sys.executable, "-m", "pytest", "tests/test_gpu.py", "-m", "gpu", "-q",
                                              "-rs", "-p", "no:cacheprovider", "-o", "addopts="], estimate_s=150),
        ]
        return steps + self.matrix("A", p.formats[:1])  # channels_last here; the other layout ends phase C

    def speed_bench_args(self) -> list:
        s = self.profile.speed
        return ["--model", s["model"], "--image-size", str(s["image_size"]), "--batch-size", str(s["batch"]),
                "--precision", s["precision"], "--data-format", s["data_format"], "--num-warmup-batches", str(s["warmup"]),
                "--num-batches", str(s["steps"])]

    def speed_sides(self) -> dict:
        """Phase B's sides: name -> Step (each round runs each of them once, in rotated order)."""
        p, s = self.profile, self.profile.speed
        bare = [str(PROBE), "bare", "--device", p.probe_device, "--model", s["model"], "--batch-size", str(s["batch"]),
                "--image-size", str(s["image_size"]), "--precision", s["precision"], "--data-format", s["data_format"],
                "--warmup", str(s["warmup"]), "--steps", str(s["steps"])] + (["--num-threads", str(p.threads)] if p.threads else [])
        sides = {
            "bench": self.bench("B", "speed-bench", self.speed_bench_args(), estimate_s=30),
            "bare-sync": Step("B", "speed-bare-sync", "probe", [*bare, "--mode", "sync"], estimate_s=25),
            "bare-fast": Step("B", "speed-bare-fast", "probe", [*bare, "--mode", "fast"], estimate_s=25),
        }
        if self.timm:
            amp = ["--amp", "--amp-dtype", "bfloat16"] if s["precision"] == "amp-bf16" else []
            sides["timm"] = Step("B", "speed-timm", "timm", [
                self.timm, "--bench", "train", "--model", s["model"], "-b", str(s["batch"]), "--img-size", str(s["image_size"]),
                *amp, *(["--channels-last"] if s["data_format"] == "channels_last" else []),
                "--num-warm-iter", str(s["warmup"]), "--num-bench-iter", str(s["steps"])], estimate_s=30)
        return sides

    def phase_b(self) -> list[Step]:
        p = self.profile
        sides = self.speed_sides()
        two_rounds = 2 * sum(s.estimate_s for s in sides.values())  # the fewest that give an interval
        steps = [Step("B", "speed", "speed", [], estimate_s=two_rounds)]
        base = self.speed_bench_args()
        for name, args in p.speed_extra:
            merged = _override(base, args)
            compiled = "--compile" in args
            steps.append(self.bench("B", f"speed-{name}", merged, checks=("compiled",) if compiled else (),
                                    estimate_s=200 if compiled else 40))
        return steps

    def phase_c(self) -> list[Step]:
        p = self.profile
        steps = [
            self.bench("C", "find-max-batch", [*p.maxbatch, "--find-max-batch"], expect_status="search",
                       checks=("max-batch",), estimate_s=300),
            Step("C", "comm", "comm", ["--framework", "torch", "comm", "--device", p.device, *p.comm], estimate_s=40),
            self.bench("C", "ddp-one-rank", [*p.small, "--strategy", "ddp"], checks=("strategy-ddp",), estimate_s=40),
            self.bench("C", "trace", [*p.small, "--trace", str(self.scratch / "trace"), "--trace-steps", "2"],
                       checks=("trace",), estimate_s=60),
        ]
        for mode in p.compile_modes:
            steps.append(self.bench("C", f"compile-{mode}", [*p.small, "--compile", mode], checks=("compiled",),
                                    estimate_s=240))
        return steps + self.matrix("C", p.formats[1:])  # as time allows

    def steps(self, phase: str) -> list[Step]:
        return {"A": self.phase_a, "B": self.phase_b, "C": self.phase_c}[phase]()


def _value(args, flag: str) -> str | None:
    args = list(args)
    return args[args.index(flag) + 1] if flag in args else None


def _override(base: list, extra) -> list:
    """`base` bench args with each `--flag value` of `extra` replaced or added (a bare flag appended)."""
    result, extra = list(base), list(extra)
    index = 0
    while index < len(extra):
        flag = extra[index]
        has_value = index + 1 < len(extra) and not extra[index + 1].startswith("--")
        if flag in result and has_value:
            result[result.index(flag) + 1] = extra[index + 1]
        else:
            result += extra[index:index + 1 + has_value]
        index += 1 + has_value
    return result


# -- checks ------------------------------------------------------------------------------------------


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
            problems.append(f"a CPU run must have no MFU, with the reason: {flops.get('mfu')}, {flops.get('mfu_unavailable_reason')}")
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


def _compiled(record):
    section = record.get("compile") or {}
    if not section:
        return ["no compile section"]
    return [f"compile fell back to eager: {section['fallback_reason']}"] if section["fell_back_to_eager"] else []


EXTRA_CHECKS = {"launcher-env": _launcher, "real-data": _real_data, "strategy-ddp": _ddp, "trace": _trace,
                "compiled": _compiled}


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


# -- running -----------------------------------------------------------------------------------------


class Runner:
    """Runs a phase's steps, each a fresh process, appending every result under `out` as it comes."""

    def __init__(self, plan: Plan, out: Path, deadline_s: float, python: str = sys.executable):
        self.plan, self.out, self.python = plan, out, python
        self.started = time.monotonic()
        self.deadline = self.started + deadline_s - DEADLINE_MARGIN_S
        self.on_gpu = plan.profile.device == "gpu"
        self.failed = False
        self.gate_failed = False
        out.mkdir(parents=True, exist_ok=True)

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def append(self, name: str, text: str) -> None:
        with open(self.out / name, "a") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())

    def result(self, step: Step, status: str, seconds: float, **details) -> dict:
        line = {"phase": step.phase, "step": step.name, "kind": step.kind, "status": status,
                "seconds": round(seconds, 2), "profile": self.plan.profile.name, **details}
        self.append("steps.jsonl", json.dumps(line) + "\n")
        if status == "fail":
            self.failed = True
        mark = {"pass": "ok  ", "fail": "FAIL", "skip": "skip"}[status]
        problems = "; ".join(details.get("problems", [])) or details.get("reason", "")
        print(f"gpu_validate: {mark} {step.phase} {step.name} ({seconds:.1f} s){': ' + problems if problems else ''}",
              file=sys.stderr, flush=True)
        return line

    def log(self, step: Step, text: str) -> None:
        tail = text[-6000:]
        self.append("log.txt", f"==== {step.phase} {step.name} ====\n{tail}\n")

    def command(self, step: Step) -> list[str]:
        if step.kind in ("bench", "comm"):
            output = step.output or str(self.out / ("comm.jsonl" if step.kind == "comm" else "records.jsonl"))
            extra = ["--json", "--output", output]
            if step.kind == "comm" or _value(step.argv, "--strategy") == "ddp":  # never another run's ports
                extra += ["--rendezvous-port", str(free_port())]
            return [self.python, "-m", "benchmarks", *step.argv, *extra]
        if step.kind == "dataset":
            return [self.python, "-m", "benchmarks", *step.argv]
        if step.kind in ("probe", "timm"):
            return [self.python, *step.argv]
        return list(step.argv)  # pytest

    def spawn(self, step: Step, timeout: float) -> tuple[subprocess.CompletedProcess | None, float]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **step.env}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        began = time.monotonic()
        command = self.command(step)
        # Its own process group: at the deadline the whole of it goes (pytest's and bench's children too).
        proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                start_new_session=True)
        try:
            stdout, stderr = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            from benchmarks.processes import stop_process_group  # standard library only

            stop_process_group(proc)
            stdout, stderr = proc.communicate()
            self.log(step, f"$ {' '.join(command)}\nstopped after {timeout:.0f} s\n{stderr}")
            return None, time.monotonic() - began
        return subprocess.CompletedProcess(command, proc.returncode, stdout, stderr), time.monotonic() - began

    def timeout_for(self, step: Step) -> float | None:
        """Seconds this step may take: until the deadline; None when its estimate (an upper bound on the
        GPU) does not fit before it: that step is skipped and a shorter one after it may still run."""
        remaining = self.remaining()
        return None if remaining < step.estimate_s else remaining

    def run(self, phase: str) -> int:
        steps = self.plan.steps(phase)
        index = 0
        while index < len(steps):
            step = steps[index]
            timeout = self.timeout_for(step)
            if timeout is None:
                self.result(step, "skip", 0.0, reason=f"not started: the deadline leaves {max(self.remaining(), 0):.0f} s "
                                                      f"of the ~{step.estimate_s:.0f} s it may take")
                index += 1
                continue
            line = self.speed(step, timeout) if step.kind == "speed" else self.one(step, timeout)
            if step.name == "preflight" and line["status"] == "pass":
                self.plan.facts = line["facts"]
                steps = steps[:index + 1] + self.plan.steps(phase)[index + 1:]  # the UUID is known now
            if step.gate and line["status"] != "pass":
                self.gate_failed = True
                for rest in steps[index + 1:]:
                    self.result(rest, "skip", 0.0, reason=f"not started: the gate step {step.name} failed")
                break
            index += 1
        problems = check_out_dir(self.out)
        if problems:
            self.failed = True
            print(f"gpu_validate: --out breaks the device's rules: {'; '.join(problems)}", file=sys.stderr)
        return EXIT_FAILED if self.failed else EXIT_OK

    def one(self, step: Step, timeout: float) -> dict:
        if step.kind == "bench" and "--find-max-batch" not in step.argv:
            step = dataclasses.replace(step, argv=[*step.argv, "--timeout", f"{max(timeout - 15, 5):.0f}"])
        done, seconds = self.spawn(step, timeout)
        if done is None:
            return self.result(step, "fail", seconds, problems=[f"no answer within {timeout:.0f} s (killed)"])
        handler = {"bench": self.judge_bench, "comm": self.judge_comm, "dataset": self.judge_plain,
                   "probe": self.judge_probe, "pytest": self.judge_pytest, "timm": self.judge_plain}[step.kind]
        status, details = handler(step, done)
        if status == "fail":
            self.log(step, f"$ {' '.join(self.command(step))}\nexit {done.returncode}\n{done.stderr}")
        return self.result(step, status, seconds, exit_code=done.returncode, **details)

    def judge_bench(self, step: Step, done) -> tuple[str, dict]:
        problems = []
        if done.returncode != step.expect_exit:
            problems.append(f"exit {done.returncode}, expected {step.expect_exit}: {_last_line(done.stderr)}")
        if step.expect_status == "none":  # refused: one line naming the problem, no traceback, nothing written
            errors = [line for line in done.stderr.splitlines() if line.startswith("bench: error:")]
            if len(errors) != 1 or "--device gpu" not in errors[0] or "Traceback" in done.stderr:
                problems.append(f"expected one 'bench: error: --device gpu ...' line: {done.stderr[-500:]!r}")
            if step.output and Path(step.output).exists():
                problems.append(f"{step.output} was written")
            return ("fail" if problems else "pass"), {"problems": problems, "message": errors[0] if errors else None}
        records = _json_lines(done.stdout)
        if not records:
            return "fail", {"problems": problems + ["no record on stdout"]}
        notes = []
        for record in records:
            found, noted = check_record(record, step, self.on_gpu)
            problems += found
            notes += noted
        if step.expect_status == "search":
            problems += check_search(records)
        return ("fail" if problems else "pass"), {"problems": problems, "notes": notes,
                                                  "summary": [summarize(r) for r in records]}

    def judge_comm(self, step: Step, done) -> tuple[str, dict]:
        records = _json_lines(done.stdout)
        problems = [] if done.returncode == 0 else [f"exit {done.returncode}: {_last_line(done.stderr)}"]
        if not records or records[-1].get("status") != "ok":
            problems.append(f"comm record status {records[-1].get('status') if records else None}")
        summary = None
        if records:
            r = records[-1]
            summary = {"backend": (r.get("config") or {}).get("backend"), "status": r.get("status")}
        return ("fail" if problems else "pass"), {"problems": problems, "summary": summary}

    def judge_plain(self, step: Step, done) -> tuple[str, dict]:
        problems = [] if done.returncode == 0 else [f"exit {done.returncode}: {_last_line(done.stderr)}"]
        return ("fail" if problems else "pass"), {"problems": problems, "stdout_tail": done.stdout[-500:]}

    def judge_probe(self, step: Step, done) -> tuple[str, dict]:
        """gpu_probe.py's JSON line: the preflight's facts (missing packages, NVML) or a bare loop's rate."""
        records = _json_lines(done.stdout)
        facts = records[-1] if records else {}
        problems = [] if done.returncode == 0 else [f"exit {done.returncode}: {facts.get('error') or _last_line(done.stderr)}"]
        if facts.get("missing_modules"):
            problems.append(f"missing Python packages: {', '.join(facts['missing_modules'])} (carry .whl: scripts/gpu-carry.sh)")
        if self.on_gpu and facts.get("nvml_error"):
            problems.append(f"NVML: {facts['nvml_error']}")
        return ("fail" if problems else "pass"), {"problems": problems, "facts": facts}

    def judge_pytest(self, step: Step, done) -> tuple[str, dict]:
        summary = _last_line(done.stdout)
        problems = []
        if done.returncode != 0 and not (self.plan.profile.pytest_expect == "skipped" and done.returncode == 5):
            problems.append(f"pytest exit {done.returncode}: {summary}")
        if self.plan.profile.pytest_expect not in summary:
            problems.append(f"expected the GPU tests {self.plan.profile.pytest_expect}: {summary}")
        if self.plan.profile.pytest_expect == "passed" and ("skipped" in summary or "failed" in summary):
            problems.append(f"not all GPU tests passed: {summary}")
        return ("fail" if problems else "pass"), {"problems": problems, "summary": summary,
                                                  "stdout_tail": done.stdout[-1500:]}

    def speed(self, step: Step, timeout: float) -> dict:
        """Phase B: rounds of every side in rotated order, each run a fresh process; ratios to bare-fast."""
        sides = self.plan.speed_sides()
        names = list(sides)
        rates = {name: [] for name in names}
        began = time.monotonic()
        rounds_done = 0
        for round_ in range(self.plan.profile.speed_rounds):
            order = names[round_ % len(names):] + names[:round_ % len(names)]
            if self.remaining() < sum(sides[n].estimate_s for n in names):
                break
            for name in order:
                line = self.one(dataclasses.replace(sides[name], name=f"{sides[name].name}-r{round_ + 1}"), self.remaining())
                rates[name].append(side_rate(sides[name].kind, line) if line["status"] == "pass" else None)
            rounds_done += 1
        summary = speed_summary(rates)
        problems = [f"{name}: {sum(r is None for r in values)} of {len(values)} runs failed"
                    for name, values in rates.items() if any(r is None for r in values)]
        if rounds_done < 2:
            problems.append(f"{rounds_done} complete rounds: no interval without 2")
        return self.result(step, "fail" if problems else "pass", time.monotonic() - began, problems=problems,
                           rates=rates, ratios=summary, order="rotated each round; each run a fresh process")


def side_rate(kind: str, line: dict) -> float | None:
    if kind == "bench":
        return line["summary"][-1]["images_per_sec"]
    if kind == "timm":
        match = re.findall(r'"train_samples_per_sec":\s*([\d.]+)', line.get("stdout_tail", ""))
        return float(match[-1]) if match else None
    return (line.get("facts") or {}).get("images_per_sec")


def speed_summary(rates: dict) -> dict:
    """Mean images/sec of each side and its ratio to bare-fast per round: mean and 95% t half-width."""
    from benchmarks.stats import Stats, t_halfwidth

    summary = {}
    reference = rates.get("bare-fast", [])
    for name, values in rates.items():
        known = [v for v in values if v is not None]
        if not known:
            continue
        ratios = [a / b for a, b in zip(values, reference) if a is not None and b]
        summary[name] = {"images_per_sec": Stats.of(known).mean, "ci95": t_halfwidth(known), "n": len(known),
                         "ratio_to_bare_fast": Stats.of(ratios).mean if ratios else None,
                         "ratio_ci95": t_halfwidth(ratios) if ratios else None}
    return summary


def summarize(record: dict) -> dict:
    """The numbers of a record the report shows (the full record is in records.jsonl)."""
    throughput, memory = record.get("throughput") or {}, record.get("memory") or {}
    energy, flops, precision = record.get("energy") or {}, record.get("flops") or {}, record.get("precision") or {}
    framework = record["provenance"].get("framework") or {}
    return {"run_id": record["run_id"], "status": record["status"], "model": record["config"]["model"],
            "batch": record["config"]["batch_size"], "image_size": record["config"]["image_size"],
            "precision": precision.get("effective", record["config"]["precision"]),
            "data_format": record["config"]["data_format"], "device": framework.get("device_name"),
            "images_per_sec": throughput.get("images_per_sec"), "ci95": throughput.get("ci95_halfwidth"),
            "mfu": flops.get("mfu"), "allocator_peak_bytes": memory.get("allocator_peak_bytes"),
            "reserved_peak_bytes": memory.get("reserved_peak_bytes"), "device_peak_bytes": memory.get("device_peak_bytes"),
            "device_total_bytes": memory.get("device_total_bytes"), "joules": energy.get("joules"),
            "average_watts": energy.get("average_watts"), "tf32_in_effect": precision.get("tf32_in_effect"),
            "final_loss": record.get("final_loss"), "error": (record.get("error") or {}).get("message"),
            "max_batch": (record.get("batch_search") or {}).get("max_batch"),
            "compile_time_s": (record.get("compile") or {}).get("compile_time_s")}


def free_port() -> int:
    """A port nothing listens on now, with the next one for torch's store (bench uses port + 1)."""
    for _ in range(20):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        if port < 65000:
            return port
    return 2210


def _json_lines(text: str) -> list[dict]:
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return records


def _last_line(text: str) -> str:
    return next((line.strip() for line in reversed((text or "").splitlines()) if line.strip()), "")


# -- dry run -----------------------------------------------------------------------------------------


def dry_run(timm: str | None) -> int:
    """Every planned bench, bench comm and make-dataset command line of both profiles through bench's own
    parsers and validation (no framework imported); the other commands listed."""
    sys.path.insert(0, str(ROOT))
    from benchmarks.cli import bench_parser, config_of, dataset_parser
    from benchmarks.comm.cli import options_from
    from benchmarks.errors import UsageError

    failures, count = 0, 0
    with tempfile.TemporaryDirectory(prefix="gpu-validate-dry-") as scratch:
        for profile in (GPU, CPU_SMOKE):
            plan = Plan(profile, Path(scratch), timm or "benchmark.py")
            for phase in PHASES:
                steps = plan.steps(phase)
                steps += list(plan.speed_sides().values()) if phase == "B" else []
                total = sum(s.estimate_s for s in steps if s.kind != "speed")
                print(f"# {profile.name} phase {phase}: {len(steps)} commands, planned ~{total:.0f} s")
                for step in steps:
                    count += 1
                    try:
                        if step.kind == "bench":
                            args = bench_parser().parse_args(step.argv)
                            if args.data_dir is not None:  # made by the step before it
                                args.data_dir = None
                            config_of(args, installed_here=False)
                        elif step.kind == "comm":
                            options_from(bench_parser().parse_args(step.argv))
                        elif step.kind == "dataset":
                            dataset_parser().parse_args(step.argv[1:])
                        checked = step.kind in ("bench", "comm", "dataset")
                        print(f"{'parsed' if checked else 'listed'} {step.phase} {step.name}: "
                              f"{'bench ' if checked else ''}{' '.join(step.argv)}")
                    except UsageError as error:
                        failures += 1
                        print(f"BAD {step.phase} {step.name}: {' '.join(step.argv)}: {error}")
    print(f"gpu_validate: dry run: {count} commands, {failures} rejected")
    return EXIT_FAILED if failures else EXIT_OK


# -- report ------------------------------------------------------------------------------------------


def load_steps(folders: list[Path]) -> list[dict]:
    lines = []
    for folder in folders:
        path = folder / "steps.jsonl"
        if not path.exists():
            raise FileNotFoundError(f"{path}: no steps.jsonl (a folder gpu_validate.py wrote with --out)")
        lines += _json_lines(path.read_text())
    return lines


def _gib(value) -> str:
    return "n/a" if value is None else f"{value / 2**30:.1f}"


def _num(value, digits=1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def report(folders: list[Path]) -> str:
    """perf/gpu.md's tables from results folders (one per phase call): the machine, every step, the
    model x precision x layout matrix, and the speed comparison."""
    steps = load_steps(folders)
    out = []
    preflight = next((s.get("facts") for s in steps if s["step"] == "preflight" and s.get("facts")), None)
    if preflight:
        out += ["### Machine", "", "| GPU | driver | CUDA | cuDNN | torch | torchvision | Python | bf16 matmul TFLOP/s | copy GB/s (read+write) |",
                "|---|---|---|---|---|---|---|---|---|",
                f"| {preflight.get('gpu', 'CPU')} ({_gib(preflight.get('total_bytes'))} GiB) | {preflight.get('driver', 'n/a')} | "
                f"{preflight.get('cuda_runtime')} | {preflight.get('cudnn', 'n/a')} | {preflight.get('torch')} | "
                f"{preflight.get('torchvision')} | {preflight.get('python')} | {_num((preflight.get('matmul') or {}).get('tflops'))} "
                f"({(preflight.get('matmul') or {}).get('dtype')}) | {_num((preflight.get('copy') or {}).get('gb_per_s_read_plus_write'))} |", ""]
    out += ["### Steps", "", "| phase | step | status | s | images/s | MFU | allocator / reserved / device peak / total GiB | J, W | problems and notes |",
            "|---|---|---|---|---|---|---|---|---|"]
    for s in steps:
        first = (s.get("summary") or [{}])[-1] if isinstance(s.get("summary"), list) else {}
        rate = first.get("images_per_sec") or (s.get("facts") or {}).get("images_per_sec")  # bench, or a bare loop
        mfu = first.get("mfu")
        memory = " / ".join(_gib(first.get(k)) for k in ("allocator_peak_bytes", "reserved_peak_bytes",
                                                         "device_peak_bytes", "device_total_bytes")) if first else ""
        energy = f"{_num(first.get('joules'), 0)} J, {_num(first.get('average_watts'), 0)} W" if first else ""
        text = "; ".join(s.get("problems", []) + s.get("notes", [])) or s.get("reason", "")
        out.append(f"| {s['phase']} | {s['step']} | {s['status']} | {s['seconds']:.0f} | {_num(rate)} | "
                   f"{'n/a' if mfu is None else f'{mfu:.3f}'} | {memory} | {energy} | {text.replace('|', '/')[:300]} |")
    out.append("")
    matrix = [s for s in steps if s["step"].startswith("matrix-") and s.get("summary")]
    if matrix:
        out += ["### Models x precision x layout (phase A)", "",
                "| model | precision | layout | images/s | MFU | allocator peak GiB | device peak GiB | TF32 in effect | loss |",
                "|---|---|---|---|---|---|---|---|---|"]
        for s in matrix:
            r = s["summary"][-1]
            out.append(f"| {r['model']} | {r['precision']} | {r['data_format']} | {_num(r['images_per_sec'])} | "
                       f"{'n/a' if r['mfu'] is None else format(r['mfu'], '.3f')} | {_gib(r['allocator_peak_bytes'])} | "
                       f"{_gib(r['device_peak_bytes'])} | {r['tf32_in_effect']} | {_num(r['final_loss'], 3)} |")
        out.append("")
    for s in steps:
        if s["step"] == "speed" and s.get("ratios"):
            out += ["### Speed: bench vs bare loops (phase B, rotated order, fresh processes)", "",
                    "| side | images/s (95% t) | runs | ratio to bare-fast (95% t over rounds) |", "|---|---|---|---|"]
            for name, side in s["ratios"].items():
                ci = f" ± {side['ci95']:.1f}" if side.get("ci95") is not None else ""
                ratio = "n/a" if side.get("ratio_to_bare_fast") is None else f"{side['ratio_to_bare_fast']:.3f}"
                rci = f" ± {side['ratio_ci95']:.3f}" if side.get("ratio_ci95") is not None else ""
                out.append(f"| {name} | {side['images_per_sec']:,.1f}{ci} | {side['n']} | {ratio}{rci} |")
            out.append("")
    return "\n".join(out)


# -- command line ------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["report"]:
        p = argparse.ArgumentParser(prog="gpu_validate.py report", description="perf/gpu.md's tables from results folders")
        p.add_argument("folders", nargs="+", type=Path)
        args = p.parse_args(argv[1:])
        try:
            print(report(args.folders))
        except FileNotFoundError as error:
            print(f"gpu_validate: report: {error}", file=sys.stderr)
            return EXIT_USAGE
        return EXIT_OK
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--phase", choices=PHASES + ("all",), default="all", help="which phase (default: all, in order)")
    p.add_argument("--out", type=Path, help="folder the results are appended to (the device's $OUT)")
    p.add_argument("--deadline-s", type=float, default=540.0, help="start nothing that could not end by then (default: 540)")
    p.add_argument("--dry-run", action="store_true", help="parse every planned command with bench's parsers; run nothing")
    p.add_argument("--cpu-smoke", action="store_true", help="every phase on tiny sizes on this CPU (CI)")
    p.add_argument("--timm-benchmark", metavar="PATH", help="timm's benchmark.py: a fourth side in phase B")
    p.add_argument("--scratch", type=Path, help="datasets and traces (default: a temporary folder, removed after)")
    args = p.parse_args(argv)
    if args.dry_run:
        return dry_run(args.timm_benchmark)
    if args.out is None:
        print("gpu_validate: --out DIR is needed (or --dry-run, or: report DIR)", file=sys.stderr)
        return EXIT_USAGE
    if args.deadline_s <= DEADLINE_MARGIN_S:
        print(f"gpu_validate: --deadline-s must be above {DEADLINE_MARGIN_S:.0f}", file=sys.stderr)
        return EXIT_USAGE
    if args.timm_benchmark and not Path(args.timm_benchmark).is_file():
        print(f"gpu_validate: --timm-benchmark {args.timm_benchmark}: no such file", file=sys.stderr)
        return EXIT_USAGE
    if args.out.exists() and not args.out.is_dir():
        print(f"gpu_validate: --out {args.out}: not a folder", file=sys.stderr)
        return EXIT_USAGE
    sys.path.insert(0, str(ROOT))
    scratch = args.scratch or Path(tempfile.mkdtemp(prefix="gpu-validate-"))
    try:
        plan = Plan(CPU_SMOKE if args.cpu_smoke else GPU, scratch, args.timm_benchmark)
        runner = Runner(plan, args.out, args.deadline_s)
        codes = []
        for phase in (PHASES if args.phase == "all" else (args.phase,)):
            codes.append(runner.run(phase))
            if runner.gate_failed or runner.remaining() <= 0:
                break
        return max(codes)
    finally:
        if args.scratch is None:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
