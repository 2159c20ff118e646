"""perf/gpu.md's tables from the folders gpu_validate.py wrote (`gpu_validate.py report DIR ...`)."""

from __future__ import annotations

import json
from pathlib import Path


def _json_lines(text: str) -> list[dict]:
    records = []
    for line in text.splitlines():
        if line.startswith("{"):
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                pass
    return records


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


def _tflops(value) -> str:
    return "n/a" if value is None else f"{value / 1e12:,.1f}"


def _num(value, digits=1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def report(folders: list[Path]) -> str:
    """perf/gpu.md's tables from results folders (one per phase call): the machine, every step, the
    model x precision x layout matrix, and the speed comparison."""
    steps = load_steps(folders)
    out = []
    preflight = next((s.get("facts") for s in steps if s["step"] == "preflight" and s.get("facts")), None)
    if preflight:
        matmul, copy = preflight.get("matmul") or {}, preflight.get("copy") or {}
        cells = [f"{preflight.get('gpu', 'CPU')} ({_gib(preflight.get('total_bytes'))} GiB)", preflight.get("driver", "n/a"),
                 preflight.get("cuda_runtime"), preflight.get("cudnn", "n/a"), preflight.get("torch"),
                 preflight.get("torchvision"), preflight.get("python"), f"{_num(matmul.get('tflops'))} ({matmul.get('dtype')})",
                 _num(copy.get("gb_per_s_read_plus_write"))]
        out += ["### Machine", "",
                "| GPU | driver | CUDA | cuDNN | torch | torchvision | Python | bf16 matmul TFLOP/s | copy GB/s (read+write) |",
                "|---|---|---|---|---|---|---|---|---|",
                "| " + " | ".join(str(cell) for cell in cells) + " |", ""]
    out += ["### Steps", "", "| call | phase | step | status | s | images/s | MFU | allocator / reserved / device peak / total "
                             "GiB | J, W | problems and notes |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for s in steps:
        first = (s.get("summary") or [{}])[-1] if isinstance(s.get("summary"), list) else {}
        rate = first.get("images_per_sec") or (s.get("facts") or {}).get("images_per_sec")  # bench, or a bare loop
        mfu = first.get("mfu")
        memory = " / ".join(_gib(first.get(k)) for k in ("allocator_peak_bytes", "reserved_peak_bytes",
                                                         "device_peak_bytes", "device_total_bytes")) if first else ""
        energy = f"{_num(first.get('joules'), 0)} J, {_num(first.get('average_watts'), 0)} W" if first else ""
        text = "; ".join(s.get("problems", []) + s.get("notes", [])) or s.get("reason", "")
        out.append(f"| {s.get('call', '')} | {s['phase']} | {s['step']} | {s['status']} | {s['seconds']:.0f} | {_num(rate)} | "
                   f"{'n/a' if mfu is None else f'{mfu:.3f}'} | {memory} | {energy} | {text.replace('|', '/')[:300]} |")
    out.append("")
    matrix = [s for s in steps if s["step"].startswith("matrix-") and s.get("summary")]
    if matrix:
        out += ["### Models x precision x layout", "",
                "| model | precision | layout | images/s | MFU | GEMM ceiling TFLOP/s | MFU vs achievable | allocator peak GiB "
                "| device peak GiB | TF32 in effect | loss |",
                "|---|---|---|---|---|---|---|---|---|---|---|"]
        for s in matrix:
            r = s["summary"][-1]
            out.append(f"| {r['model']} | {r['precision']} | {r['data_format']} | {_num(r['images_per_sec'])} | "
                       f"{'n/a' if r['mfu'] is None else format(r['mfu'], '.3f')} | {_tflops(r.get('ceiling_flops_per_sec'))}"
                       f" {r.get('ceiling_math') or ''} | {_num(r.get('mfu_vs_achievable'), 3)} | "
                       f"{_gib(r['allocator_peak_bytes'])} | "
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
            out += ["", f"Step timing (issue 23, item 4): {timing_decision(s['ratios'])}", ""]
    return "\n".join(out)


SAME_WITHIN = 0.02  # ratios to bare-fast closer than this are the same speed (perf/gpu.md's rule)


def timing_decision(ratios: dict) -> str:
    """perf/gpu.md's rule for bench's default --step-timing, applied to phase B's ratios to bare-fast:
    events becomes the default only when it is faster than sync by more than SAME_WITHIN and by more than
    the two 95% intervals together; the bare loops say whether any gap left is bench's own."""
    sync, events = ratios.get("bench-sync"), ratios.get("bench-events")
    if not sync or not events or sync.get("ratio_to_bare_fast") is None or events.get("ratio_to_bare_fast") is None:
        return "no decision: phase B lacks bench under both timings (a CPU has no CUDA events)"
    gain = events["ratio_to_bare_fast"] - sync["ratio_to_bare_fast"]
    noise = (sync.get("ratio_ci95") or 0.0) + (events.get("ratio_ci95") or 0.0)
    verdict = (f"make events the default: it is {gain:+.3f} of bare-fast over sync (noise {noise:.3f})"
               if gain > max(SAME_WITHIN, noise) else
               f"keep sync the default: events differs by {gain:+.3f} of bare-fast (noise {noise:.3f}, threshold {SAME_WITHIN})")
    best = max(sync["ratio_to_bare_fast"], events["ratio_to_bare_fast"])
    bare_sync = (ratios.get("bare-sync") or {}).get("ratio_to_bare_fast")
    own = (f"; bench's own cost beyond its timing: {1 - best:.3f} of bare-fast" if best < 1 - SAME_WITHIN
           else "; bench's best is within the threshold of the fast bare loop")
    syncing = "" if bare_sync is None else \
        f"; a sync every step with cudnn.benchmark off costs the bare loop {1 - bare_sync:+.3f} of its speed"
    return verdict + own + syncing
