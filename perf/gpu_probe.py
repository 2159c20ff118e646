"""The GPU side of perf/gpu_validate.py: each call is its own process (the orchestrator never opens a
CUDA context), printing one JSON object as its last stdout line.

    python3 perf/gpu_probe.py preflight --device cuda
    python3 perf/gpu_probe.py bare --mode sync --device cuda --model resnet50 --batch-size 256 ...

`preflight`: the machine's facts and its own ceilings (a bf16 matrix product and a device-to-device copy,
each timed with CUDA events after warm-ups), and which Python packages bench and its tests need are
missing. `bare`: the hand-written training loops phase B compares bench with:
- `sync`: what bench does by default (benchmarks/frameworks/torch_backend.py train_step and
  timing.run_steps under --step-timing sync): the model bench builds (torch_backend.build_model), SGD
  momentum, cross-entropy, autocast, the same rotating synthetic batches, and the device synchronised
  after every step;
- `fast`: the fastest honest loop, as bench --step-timing events times it: cudnn.benchmark on, a CUDA
  event recorded after each step and one synchronisation at each end of the timed loop (its wall time
  is still the host clock's between two synchronisations; the events give the per-step times).
On a CPU (the CI smoke test) both run the same code with the device work synchronous.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import platform
import sys
import time

NEEDED_MODULES = ("pydantic", "jsonschema", "numpy", "scipy", "rich", "psutil", "pynvml", "PIL", "pytest", "torchvision")
OPTIONAL_MODULES = ("timm", "hta", "triton")
SYNTHETIC_BATCHES = 4  # bench's default --synthetic-batches


def timed_gpu(fn, device, repeats: int, warmups: int = 3) -> float:
    """Seconds per call of fn, from CUDA events around `repeats` calls after `warmups` (CPU: the clock)."""
    import torch

    for _ in range(warmups):
        fn()
    if device.type != "cuda":
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        return (time.perf_counter() - start) / repeats
    torch.cuda.synchronize(device)
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(repeats):
        fn()
    end.record()
    torch.cuda.synchronize(device)
    return begin.elapsed_time(end) / 1000 / repeats


def nvml_facts() -> dict:
    """Driver, UUID and NVML's own totals of GPU 0 (of those CUDA_VISIBLE_DEVICES leaves), or why not."""
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        text = lambda v: v.decode() if isinstance(v, bytes) else v  # noqa: E731 - older pynvml returns bytes
        facts = {"driver": text(pynvml.nvmlSystemGetDriverVersion()), "uuid": text(pynvml.nvmlDeviceGetUUID(handle)),
                 "nvml_name": text(pynvml.nvmlDeviceGetName(handle)),
                 "nvml_total_bytes": pynvml.nvmlDeviceGetMemoryInfo(handle).total}
        try:
            facts["power_limit_w"] = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1000
        except Exception as error:  # noqa: BLE001 - any NVML error: the fact stays out, the probe goes on
            facts["power_limit_w_error"] = f"{type(error).__name__}: {error}"
        return facts
    except Exception as error:  # noqa: BLE001 - said in the preflight, which then fails its check
        return {"nvml_error": f"{type(error).__name__}: {error}"}


def preflight(args) -> dict:
    import torch
    import torchvision

    cuda = args.device == "cuda"
    facts = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
        "cuda_runtime": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "missing_modules": [m for m in NEEDED_MODULES if importlib.util.find_spec(m) is None],
        "optional_missing": [m for m in OPTIONAL_MODULES if importlib.util.find_spec(m) is None],
    }
    if cuda and not torch.cuda.is_available():
        return {**facts, "error": "torch sees no CUDA device"}
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        props = torch.cuda.get_device_properties(device)
        facts.update(gpu=props.name, total_bytes=props.total_memory, multiprocessors=props.multi_processor_count,
                     compute_capability=f"{props.major}.{props.minor}",
                     cudnn=torch.backends.cudnn.version(), **nvml_facts())
    n = args.matmul_size
    dtype = torch.bfloat16 if cuda else torch.float32  # bf16 tensor cores on the GPU; the CPU's fp32 path
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    seconds = timed_gpu(functools.partial(torch.matmul, a, b), device, args.repeats)
    facts.update(matmul={"n": n, "dtype": str(dtype).removeprefix("torch."), "tflops": 2 * n**3 / seconds / 1e12})
    del a, b
    source = torch.empty(args.copy_bytes // 4, device=device, dtype=torch.float32)
    target = torch.empty_like(source)
    seconds = timed_gpu(lambda: target.copy_(source), device, args.repeats)
    facts.update(copy={"bytes": args.copy_bytes, "gb_per_s_read_plus_write": 2 * args.copy_bytes / seconds / 1e9})
    return facts


def bare(args) -> dict:
    """One bare training loop (module docstring); images/sec over the timed loop's wall time."""
    import torch

    from benchmarks.frameworks.torch_backend import build_model  # the model bench trains, nothing of its loop

    cuda = args.device == "cuda"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if args.num_threads:
        torch.set_num_threads(args.num_threads)
    torch.manual_seed(0)
    fast = args.mode == "fast"
    torch.backends.cudnn.benchmark = fast and cuda
    tf32 = args.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = tf32
    torch.set_float32_matmul_precision("high" if tf32 else "highest")
    autocast = {"amp-bf16": torch.bfloat16, "amp-fp16": torch.float16}.get(args.precision)
    layout = torch.channels_last if args.data_format == "channels_last" else torch.contiguous_format
    model = build_model(args.model, 1000, aux_head=False, image_size=args.image_size).to(device, memory_format=layout).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    criterion = torch.nn.CrossEntropyLoss()
    scaler = torch.amp.GradScaler("cuda", enabled=args.precision == "amp-fp16")
    generator = torch.Generator().manual_seed(0)
    shape = (args.batch_size, 3, args.image_size, args.image_size)
    batches = [(torch.randn(shape, generator=generator).to(device).contiguous(memory_format=layout),
                torch.randint(0, 1000, (args.batch_size,), generator=generator).to(device))
               for _ in range(SYNTHETIC_BATCHES)]

    def step(index: int):
        images, labels = batches[index % SYNTHETIC_BATCHES]
        model.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=autocast, enabled=autocast is not None):
            loss = criterion(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        return loss.detach()

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    for index in range(args.warmup):
        step(index)
    sync()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps + 1)] if fast and cuda else []
    start = time.perf_counter()
    if events:
        events[0].record()
    step_times = []
    for index in range(args.steps):
        began = time.perf_counter()
        loss = step(index)
        if events:
            events[index + 1].record()
        else:
            sync()  # `sync` mode (and a CPU): every step has finished before the next begins
            step_times.append(time.perf_counter() - began)
    sync()
    wall = time.perf_counter() - start
    if events:
        step_times = [a.elapsed_time(b) / 1000 for a, b in zip(events, events[1:])]
    return {"mode": args.mode, "device": str(device), "cudnn_benchmark": torch.backends.cudnn.benchmark,
            "images_per_sec": args.batch_size * args.steps / wall, "wall_time_s": wall,
            "step_time_s_median": sorted(step_times)[len(step_times) // 2], "final_loss": float(loss.float().item()),
            "torch": torch.__version__}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    pre = sub.add_parser("preflight")
    pre.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    pre.add_argument("--matmul-size", type=int, default=8192)
    pre.add_argument("--copy-bytes", type=int, default=2**30)
    pre.add_argument("--repeats", type=int, default=10)
    loop = sub.add_parser("bare")
    loop.add_argument("--mode", choices=("sync", "fast"), required=True)
    loop.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    loop.add_argument("--model", default="resnet50")
    loop.add_argument("--batch-size", type=int, default=256)
    loop.add_argument("--image-size", type=int, default=224)
    loop.add_argument("--precision", choices=("fp32", "tf32", "amp-bf16", "amp-fp16"), default="amp-bf16")
    loop.add_argument("--data-format", choices=("channels_first", "channels_last"), default="channels_last")
    loop.add_argument("--warmup", type=int, default=20)
    loop.add_argument("--steps", type=int, default=50)
    loop.add_argument("--num-threads", type=int)
    args = p.parse_args(argv)
    result = preflight(args) if args.command == "preflight" else bare(args)
    print(json.dumps(result), flush=True)
    return 1 if "error" in result else 0


if __name__ == "__main__":
    sys.exit(main())
