"""gpu_validate.py's plan: the two profiles (the lent GPU, the CPU smoke) and every step of each phase."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

PROBE = Path(__file__).resolve().parent / "gpu_probe.py"
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
