"""gpu_validate.py's plan: the two profiles (the lent GPU, the CPU smoke) and every step of each device call.

The device tool gives a task 15 minutes of device time in all, a machine's start (1-2 minutes) included,
and takes the machine back 30 s after a call: so two calls on one machine, back to back. Call 1 holds
the essentials in value order; call 2, on the still-warm machine, the rest. Each call's planned steps
fit its deadline by their own estimates (`estimate_s`, upper bounds on the lent H100 with its 16 cores:
a fresh process with torch and CUDA costs ~10 s of each); steps after them run only as time allows.
When time runs short a call skips from its end: a step whose estimate no longer fits does not start.
"""

from __future__ import annotations

import itertools
import sys
from dataclasses import dataclass, field
from pathlib import Path

PROBE = Path(__file__).resolve().parent / "gpu_probe.py"
PLACEHOLDER_UUID = "GPU-00000000-0000-0000-0000-000000000000"  # --dry-run and the CPU smoke: no GPU to ask
CALLS = ("1", "2")
DEADLINE_S = {"1": 470.0, "2": 210.0}  # each call's --deadline-s default: ~8 and ~3.5 minutes (perf/gpu.md)
SPEED_SIDE_S = 18.0  # one phase-B run: a fresh process, 50 steps of ResNet-50 at batch 256


@dataclass(frozen=True)
class Profile:
    """Sizes of one target: the lent GPU, or the CPU smoke (every call, a few tiny steps each)."""

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
    gate: tuple  # bench args of the gate
    oom: tuple  # bench args that must run out of memory
    data: tuple  # make-dataset args
    speed: dict  # phase B's comparison
    speed_timings: tuple  # bench --step-timing sides of the comparison
    speed_rounds: int  # at most; two give an interval, and are what the plan counts on
    speed_extra: tuple  # (name, bench args) as time allows after call 2's planned steps
    maxbatch: tuple
    comm: tuple
    small: tuple  # bench args of the clean run after the OOM, the mapping, DDP, trace and compile runs
    compile_modes: tuple  # call 2's --compile modes
    probe_device: str  # gpu_probe.py --device
    preflight: tuple  # gpu_probe.py preflight sizes
    pytest_expect: str  # "passed": the GPU tests must pass; "skipped": no CUDA here, they must skip
    leaves_out: tuple = ()  # step names (prefixes) this profile does not run: the same code as a step it runs


GPU = Profile(
    name="gpu", device="gpu",
    models=("resnet50", "alexnet", "resnet101", "resnet152", "inception3"),
    precisions=("amp-bf16", "amp-fp16", "tf32", "fp32"), formats=("channels_last", "channels_first"),
    image_size=None, batch=32, warmup=3, batches=10, threads=None,
    gate=("--model", "resnet50", "--batch-size", "128", "--precision", "amp-bf16", "--data-format", "channels_last",
          "--num-warmup-batches", "5", "--num-batches", "30", "--repeats", "2"),
    oom=("--model", "resnet50", "--image-size", "448", "--batch-size", "512", "--precision", "fp32",
         "--num-warmup-batches", "1", "--num-batches", "1"),
    data=("--images", "256", "--classes", "4", "--min-size", "160", "--max-size", "320"),
    speed={"model": "resnet50", "image_size": 224, "batch": 256, "precision": "amp-bf16", "data_format": "channels_last",
           "warmup": 10, "steps": 40},
    speed_timings=("sync", "events"), speed_rounds=3,
    speed_extra=(("amp-fp16", ("--precision", "amp-fp16")), ("tf32", ("--precision", "tf32"))),
    # two probes (512, then the limit 1024, which ResNet-50 amp-bf16 should fit in 80 GB): a search that ends
    # inside its budget (a probe the budget stops is a timeout, and bench exits with it)
    maxbatch=("--model", "resnet50", "--precision", "amp-bf16", "--data-format", "channels_last", "--batch-size", "512",
              "--num-warmup-batches", "1", "--num-batches", "2", "--max-batch-limit", "1024", "--max-batch-budget", "45"),
    comm=("--backend", "nccl", "--ops", "allreduce,gradients", "--max-bytes", "256M", "--iters", "20"),
    small=("--model", "resnet50", "--batch-size", "64", "--precision", "amp-bf16", "--data-format", "channels_last",
           "--num-warmup-batches", "5", "--num-batches", "30"),
    compile_modes=("default",), probe_device="cuda", preflight=("--matmul-size", "8192", "--copy-bytes", str(2**30)),
    pytest_expect="passed",
)
CPU_SMOKE = Profile(  # smallcnn (0.4 M parameters, 28 px): a fresh process costs little beyond torch's import
    name="cpu-smoke", device="cpu",
    models=("smallcnn",), precisions=("amp-bf16",), formats=("channels_last",),
    image_size=28, batch=2, warmup=1, batches=2, threads=1,
    gate=("--model", "smallcnn", "--batch-size", "2", "--num-warmup-batches", "1", "--num-batches", "2"),
    oom=("--model", "smallcnn", "--batch-size", str(2**30), "--num-warmup-batches", "0",
         "--num-batches", "1"),  # 10 TB of synthetic images: the allocator refuses at once
    data=("--images", "8", "--classes", "2", "--min-size", "32", "--max-size", "40"),
    speed={"model": "smallcnn", "image_size": 28, "batch": 2, "precision": "fp32", "data_format": "channels_last",
           "warmup": 1, "steps": 3},
    speed_timings=("sync",),  # CUDA events do not exist on a CPU: bench refuses --step-timing events there
    speed_rounds=2, speed_extra=(),
    maxbatch=("--model", "smallcnn", "--batch-size", "2", "--num-warmup-batches", "0",
              "--num-batches", "1", "--max-batch-limit", "2", "--max-batch-budget", "60"),
    comm=("--backend", "gloo", "--ops", "allreduce", "--max-bytes", "4K", "--iters", "2", "--warmup-iters", "1"),
    small=("--model", "smallcnn", "--batch-size", "2", "--num-warmup-batches", "1", "--num-batches", "2"),
    compile_modes=(),  # inductor takes minutes on 2 CPU cores: the compile run is the GPU's only
    probe_device="cpu", preflight=("--matmul-size", "128", "--copy-bytes", str(2**20), "--repeats", "2"),
    pytest_expect="skipped",
    # the gate's code again (no GPU here to name by UUID; the launcher check is unit-tested); --dry-run
    # parses the matrix
    leaves_out=("clean-after-oom", "uuid-and-local-rank", "matrix-"),
)


@dataclass
class Step:
    phase: str  # A correctness, B speed, C the rest
    name: str
    kind: str  # bench | comm | dataset | probe | pytest | timm | speed
    argv: list  # bench/comm/make-dataset arguments (after `bench`), or the whole command otherwise
    env: dict = field(default_factory=dict)
    expect_status: str = "ok"  # the record's status
    expect_exit: int = 0
    precision: str | None = None  # the --precision asked (checked in the record)
    step_timing: str = "sync"  # the --step-timing asked (checked in the record)
    checks: tuple = ()  # extra named checks (EXTRA_CHECKS)
    estimate_s: float = 20.0  # an upper bound on the GPU: a step that does not fit before the deadline does not start
    gate: bool = False
    output: str | None = None  # where its records go: records.jsonl / comm.jsonl, or a scratch file
    planned: bool = True  # False: after the call's planned steps, as time allows (not counted in its fit)


class Plan:
    """Every step of each call for one profile; `facts` (the preflight's) fill in the GPU's UUID."""

    def __init__(self, profile: Profile, scratch: Path, timm: str | None = None):
        self.profile, self.scratch, self.timm = profile, scratch, timm
        self.facts: dict = {}

    def common(self) -> list:
        p = self.profile
        args = ["--framework", "torch", "--device", p.device, "--display-every", "0"]
        return args + (["--num-threads", str(p.threads)] if p.threads else [])

    def bench(self, phase, name, args, **options) -> Step:
        options.setdefault("precision", _value(args, "--precision") or "fp32")
        options.setdefault("step_timing", _value(args, "--step-timing") or "sync")
        return Step(phase, name, "bench", [*self.common(), *args], **options)

    def matrix(self) -> tuple[list[Step], list[Step]]:
        """(call 1's cut: every model, precision and layout at least once, with the gate's ResNet-50
        amp-bf16 channels_last; every other combination, as time allows in call 2)."""
        p = self.profile
        size = [] if p.image_size is None else ["--image-size", str(p.image_size)]
        combos = list(itertools.product(p.models, p.precisions, p.formats))
        # a diagonal: model i with precision i and layout i // 2 (mod their counts); the first, ResNet-50
        # amp-bf16 channels_last, is the gate's
        cut = [(m, p.precisions[i % len(p.precisions)], p.formats[(i // 2) % len(p.formats)])
               for i, m in enumerate(p.models)][1:]
        steps = {combo: self.bench("A", f"matrix-{combo[0]}-{combo[1]}-{combo[2]}",
                                   ["--model", combo[0], *size, "--batch-size", str(p.batch), "--precision", combo[1],
                                    "--data-format", combo[2], "--num-warmup-batches", str(p.warmup),
                                    "--num-batches", str(p.batches), "--ceiling", "measure"], checks=("ceiling",),
                                   estimate_s=20, planned=combo in cut)
                 for combo in combos}
        return [steps[c] for c in cut], [steps[c] for c in combos if c not in cut]

    def speed_bench_args(self) -> list:
        s = self.profile.speed
        return ["--model", s["model"], "--image-size", str(s["image_size"]), "--batch-size", str(s["batch"]),
                "--precision", s["precision"], "--data-format", s["data_format"], "--num-warmup-batches", str(s["warmup"]),
                "--num-batches", str(s["steps"])]

    def speed_sides(self) -> dict:
        """Phase B's sides: name -> Step (each round runs each of them once, in rotated order): bench
        under each --step-timing, the bare loop syncing every step, the fast bare loop, [timm]."""
        p, s = self.profile, self.profile.speed
        sides = {f"bench-{timing}": self.bench("B", f"speed-bench-{timing}", [*self.speed_bench_args(), "--step-timing", timing],
                                               estimate_s=SPEED_SIDE_S)
                 for timing in p.speed_timings}
        bare = [str(PROBE), "bare", "--device", p.probe_device, "--model", s["model"], "--batch-size", str(s["batch"]),
                "--image-size", str(s["image_size"]), "--precision", s["precision"], "--data-format", s["data_format"],
                "--warmup", str(s["warmup"]), "--steps", str(s["steps"])]
        bare += ["--num-threads", str(p.threads)] if p.threads else []
        sides["bare-sync"] = Step("B", "speed-bare-sync", "probe", [*bare, "--mode", "sync"], estimate_s=SPEED_SIDE_S)
        sides["bare-fast"] = Step("B", "speed-bare-fast", "probe", [*bare, "--mode", "fast"], estimate_s=SPEED_SIDE_S)
        if self.timm:
            amp = ["--amp", "--amp-dtype", "bfloat16"] if s["precision"] == "amp-bf16" else []
            sides["timm"] = Step("B", "speed-timm", "timm", [
                self.timm, "--bench", "train", "--model", s["model"], "-b", str(s["batch"]), "--img-size", str(s["image_size"]),
                *amp, *(["--channels-last"] if s["data_format"] == "channels_last" else []),
                "--num-warm-iter", str(s["warmup"]), "--num-bench-iter", str(s["steps"])], estimate_s=SPEED_SIDE_S)
        return sides

    def call_1(self) -> list[Step]:
        """The essentials, in value order: the machine, the gate, out of memory and back, device mapping,
        the GPU tests, a cut of the matrix, and bench beside the bare loops."""
        p = self.profile
        uuid = self.facts.get("uuid") or PLACEHOLDER_UUID
        launcher = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "LOCAL_WORLD_SIZE": "1"}
        sides = self.speed_sides()
        return [
            Step("A", "preflight", "probe", [str(PROBE), "preflight", "--device", p.probe_device, *p.preflight],
                 estimate_s=20, gate=True),
            # the gate and the matrix probe the GEMM ceiling anew (cuBLAS in bf16, fp16, tf32, fp32: issue 47)
            self.bench("A", "gate", [*p.gate, "--ceiling", "measure"], gate=True, checks=("ceiling",), estimate_s=35),
            self.bench("A", "oom", p.oom, expect_status="oom", expect_exit=3, estimate_s=20),
            self.bench("A", "clean-after-oom", p.small, estimate_s=20),
            # the GPU named by UUID (NVML must find it so) under torchrun's variables set by hand
            self.bench("A", "uuid-and-local-rank", p.small, env={"CUDA_VISIBLE_DEVICES": uuid, **launcher},
                       checks=("launcher-env",), estimate_s=20),
            Step("A", "no-visible-gpu", "bench",
                 [a if a != p.device else "gpu" for a in self.common()] + list(p.small), env={"CUDA_VISIBLE_DEVICES": ""},
                 expect_status="none", expect_exit=2, checks=("one-line-error",), estimate_s=15,
                 output=str(self.scratch / "must-not-exist.jsonl")),
            Step("A", "gpu-tests", "pytest", [sys.executable, "-m", "pytest", "tests/test_gpu.py", "-m", "gpu", "-q",
                                              "-rs", "-p", "no:cacheprovider", "-o", "addopts="], estimate_s=100),
            *self.matrix()[0],
            Step("B", "speed", "speed", [], estimate_s=2 * sum(side.estimate_s for side in sides.values())),
        ]

    def call_2(self) -> list[Step]:
        """What is left, cheapest and surest first (a compile may take long): NCCL, DDP with a trace, real
        data, the largest batch, torch.compile; then as time allows phase B's other precisions and the
        rest of the matrix."""
        p = self.profile
        steps = [
            Step("C", "comm", "comm", ["--framework", "torch", "comm", "--device", p.device, *p.comm], estimate_s=20),
            self.bench("C", "ddp-one-rank-trace", [*p.small, "--strategy", "ddp", "--trace", str(self.scratch / "trace"),
                                                   "--trace-steps", "2"], checks=("strategy-ddp", "trace"), estimate_s=25),
            Step("A", "make-dataset", "dataset", ["make-dataset", str(self.scratch / "data"), *p.data], estimate_s=5),
            self.bench("A", "data-dir", [*p.small, "--data-dir", str(self.scratch / "data"), "--num-data-workers", "2"],
                       checks=("real-data",), estimate_s=20),
            self.bench("C", "find-max-batch", [*p.maxbatch, "--find-max-batch"], expect_status="search",
                       checks=("max-batch",), estimate_s=50),
            *(self.bench("C", f"compile-{mode}", [*p.small, "--compile", mode], checks=("compiled",), estimate_s=70)
              for mode in p.compile_modes),
        ]
        extra = [self.bench("B", f"speed-{name}", _override(self.speed_bench_args(), args), estimate_s=SPEED_SIDE_S,
                            planned=False) for name, args in p.speed_extra]
        return steps + extra + self.matrix()[1]

    def steps(self, call: str) -> list[Step]:
        steps = {"1": self.call_1, "2": self.call_2}[call]()
        return [s for s in steps if not s.name.startswith(self.profile.leaves_out)]

    def fit(self, call: str) -> tuple[float, list[str], list[str]]:
        """(the planned steps' estimated seconds, the names skipped first when time runs short, from the
        last planned one back, the names run only as time allows)."""
        steps = self.steps(call)
        planned = [s for s in steps if s.planned]
        return (sum(s.estimate_s for s in planned), [s.name for s in reversed(planned) if not s.gate],
                [s.name for s in steps if not s.planned])


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
