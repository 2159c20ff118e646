"""Human-readable summary of a record: a compact table and the closing throughput line."""

from __future__ import annotations

from typing import TextIO

from rich import box
from rich.console import Console
from rich.table import Table

from ..measure import flops as flop_math
from ..distributed import strategies


def _bytes(value: int | None) -> str:
    if value is None:
        return "n/a"
    return f"{value / 2**20:,.0f} MiB"


def _ms(seconds: float | None) -> str:
    return "n/a" if seconds is None else f"{seconds * 1000:,.1f}"


def headline(record: dict) -> str:
    cfg, fw = record["config"], record["provenance"].get("framework") or {}
    device = fw.get("device_name") or cfg["device"]
    count = fw.get("intra_op_threads") if fw.get("device_kind") == "cpu" else cfg["num_threads"]
    threads = f", {count} thread{'s' * (count != 1)}" if count else ""
    effective = (record.get("precision") or {}).get("effective", cfg["precision"])
    precision = effective if effective == cfg["precision"] else f"{cfg['precision']} = {effective}"
    compiled = f" | compile {cfg['compile']}" if cfg.get("compile") else ""
    return (
        f"{cfg['framework']} {fw.get('version', '')} | {cfg['model']} | batch {cfg['batch_size']} | "
        f"{cfg['image_size']} px | {precision}{compiled} | {cfg['data']} data | "
        f"{fw.get('device_kind', '?')}: {device}{threads} | runtime: {record['provenance']['container_runtime']}"
    )


# Below this many repeats a t-interval has under 3 degrees of freedom: its t (12.7 at 2 repeats, 4.3 at 3)
# makes it wide whatever the spread, so the line says so instead of leaving a user to read "we don't know".
FEW_REPEATS = 4


def interval_line(method: str, repeats: int) -> str:
    text = f"interval: 95% {method}"
    if 1 < repeats < FEW_REPEATS:  # more than one repeat: the t-interval over them (totals.aggregate)
        text += (f" ({repeats} repeats: {repeats - 1} degree{'s' if repeats > 2 else ''} of freedom, so wide whatever the "
                 f"spread; --repeats 5 or more narrows it)")
    return text


def throughput_line(record: dict) -> str:
    throughput = record["throughput"]
    if record["status"] != "ok" or throughput is None:
        return f"total images/sec: n/a (status: {record['status']}: {record['error']['message']})"
    half = throughput["ci95_halfwidth"]
    spread = f" ± {half:.2f}" if half is not None else ""
    return f"total images/sec: {throughput['images_per_sec']:.2f}{spread}"


def flops_line(counted: dict, kind: str) -> str:
    if counted["forward_per_image"] is None:
        return f"flops: not counted ({counted['count_failed_reason']})"
    unit = flop_math.rate_unit(kind)
    mfu = (f"MFU {counted['mfu'] * 100:.1f}% of {counted['devices']} x {counted['peak_flops_per_sec'] / 1e12:,.1f} TFLOP/s "
           f"({counted['math']} datasheet peak)" if counted["mfu"] is not None
           else f"MFU n/a: {counted['mfu_unavailable_reason']}")
    return (f"flops: {counted['forward_per_image'] / 1e9:.2f} GFLOP forward per image at {counted['image_size']} px; "
            f"achieved {flop_math.rate_text(counted['achieved_flops_per_sec'], kind)} {unit} ({counted['basis']}); {mfu}")


def headroom_line(record: dict, kind: str) -> str:
    """The ladder (docs/results.md#headroom): achieved model FLOP/s against the measured ceiling and the
    datasheet, images/sec against the best public result and against the bare loop; each rung a number or why
    there is none."""
    counted, probed, anchor = record.get("flops") or {}, record.get("ceiling"), record.get("anchor")
    unit = flop_math.rate_unit(kind)
    if counted.get("mfu_vs_achievable") is not None:
        threads = f", {probed['threads']} threads" if probed and probed.get("threads") else ""
        how = f"GEMM {probed['math']}{threads}, {probed['source']}" if probed else "GEMM"
        achievable = (f"{counted['mfu_vs_achievable'] * 100:.1f}% of {counted['devices']} x "
                      f"{flop_math.rate_text(counted['achievable_flops_per_sec'] / counted['devices'], kind)} {unit} "
                      f"achievable ({how})")
        if counted["mfu_vs_achievable"] > 1 and probed:  # a ceiling this run beat cannot be one
            achievable += (f" — above 100%: the ceiling (probed {probed.get('measured_utc', 'earlier')}) is below this "
                           f"run's own rate, so it was probed on a busy machine; --ceiling measure probes it again")
    else:
        achievable = f"n/a ({counted.get('achievable_unavailable_reason') or 'no FLOP count'})"
    datasheet = f"{counted['mfu'] * 100:.1f}%" if counted.get("mfu") is not None else \
        f"n/a ({counted.get('mfu_unavailable_reason')})"
    if anchor is None:
        public = "n/a"
    elif anchor["fraction"] is not None:
        public = (f"{anchor['fraction'] * 100:.1f}% of {anchor['images_per_sec']:,.0f} images/sec per device "
                  f"({anchor['source']})")
    elif anchor["images_per_sec"] is not None:
        public = f"{anchor['images_per_sec']:,.0f} images/sec per device, no fraction: {anchor['reason']}"
    else:
        public = anchor["reason"]
    return (f"headroom: MFU vs achievable {achievable}; vs datasheet {datasheet}; vs best public: {public}; "
            f"vs bare loop: {bare_loop_text(record.get('reference'))}")


def bare_loop_text(section: dict | None) -> str:
    """The ladder's last rung: the harness ratio (reference.section) with its interval, or why there is none."""
    if section is None:
        return "n/a"
    if section["ratio"] is None:
        return f"n/a ({section['reason']})"
    ratio, half, pairs = section["ratio"] * 100, section["ci95_halfwidth"], section["pairs"]
    interval = f" [{ratio - half * 100:.1f}, {ratio + half * 100:.1f}]" if half is not None else " (no interval from one pair)"
    cut = f"; {section['reason']}" if section["reason"] else ""
    return (f"{ratio:.1f}%{interval} over {pairs} pair{'s' * (pairs != 1)}, bare loop "
            f"{section['bare_images_per_sec']:.2f} images/sec{cut}")


def energy_line(energy: dict) -> str:
    if energy["joules"] is None:
        return f"energy: n/a ({energy['unavailable_reason']})"
    return (f"energy: {energy['joules']:,.1f} J over the timed loops, {energy['average_watts']:,.1f} W average, "
            f"{energy['images_per_joule']:,.3f} images/J ({energy['source']}, {energy['scope']})")


STATE_UNITS = (("temperature_c", "°C"), ("sm_clock_mhz", "MHz SM"), ("power_w", "W"), ("power_limit_w", "W limit"))


def state_text(state: dict) -> str:
    parts = []
    for name, unit in STATE_UNITS:
        span = state.get(name)
        if span is not None:
            low, high = span["min"], span["max"]
            parts.append(f"{low:,.0f} {unit}" if low == high else f"{low:,.0f}-{high:,.0f} {unit}")
    return ", ".join(parts) or "n/a"


def render(record: dict, stream: TextIO) -> None:
    console = Console(file=stream, highlight=False, markup=False, width=100, soft_wrap=True)
    console.print(headline(record))
    if record["status"] == "ok":
        table = Table(box=box.SIMPLE, show_edge=False, pad_edge=False)
        kind = (record["provenance"].get("framework") or {}).get("device_kind", "cpu")
        counted = record.get("flops") or {}
        forward = counted.get("forward_per_image")
        columns = ("repeat", "images/sec", flop_math.rate_unit(kind), "step ms mean", "median", "p90", "jitter", "input wait")
        for column in columns:
            table.add_column(column, justify="right")
        for rep in record["repeats"]:
            step = rep["step_time_s"]
            table.add_row(
                str(rep["index"] + 1),
                f"{rep['images_per_sec']:.2f}",
                flop_math.rate_text(flop_math.achieved(forward, rep["images_per_sec"]) if forward else None, kind),
                _ms(step["mean"]),
                _ms(step["median"]),
                _ms(step["p90"]),
                _ms(step["jitter"]),
                f"{rep['input_wait_fraction'] * 100:.1f}%",
            )
        console.print(table)
        mem = record["memory"]
        console.print(
            f"memory: host RSS peak {_bytes(mem['host_rss_peak_bytes'])} (since {mem['host_rss_peak_since']}), "
            f"allocator peak {_bytes(mem['allocator_peak_bytes'])}, reserved peak {_bytes(mem['reserved_peak_bytes'])}, "
            f"device peak {_bytes(mem['device_peak_bytes'])}"
            + (f" ({mem['device_unavailable_reason']})" if mem.get("device_unavailable_reason") else "")
        )
        world = record["world"]
        if world["processes"] > 1:
            per_rank = ", ".join(f"{r['images_per_sec']:.2f}" for r in record["ranks"])
            replicas = record["replicas"]
            sync = "yes" if replicas["in_sync"] else ("NO" if replicas["expected_in_sync"] else "no (independent)")
            ps = f" + {world['num_ps']} PS + chief" if strategies.get(world["strategy"]).uses_ps else ""
            console.print(
                f"world: {world['workers']} workers{ps} ({world['strategy']}, {world['launcher']}) on "
                f"{world['nodes']} node(s); images/sec per worker: {per_rank}; replicas in sync: {sync}"
            )
            if record["placement"]:
                loads = ", ".join(f"PS{p['ps']} {p['variables']} vars {_bytes(p['bytes'])}" for p in record["placement"])
                console.print(f"placement: {loads}")
        compiled = record.get("compile")
        if compiled is not None:
            eager = f", FELL BACK TO EAGER: {compiled['fallback_reason']}" if compiled["fell_back_to_eager"] else ""
            breaks = f", {compiled['graph_breaks']} graph breaks" if compiled["graph_breaks"] is not None else ""
            console.print(f"compile: {compiled['mode']} ({compiled['backend']}) first step {compiled['compile_time_s']:.1f} s, "
                          f"not in warmup or timing{breaks}{eager}")
        if counted:
            console.print(flops_line(counted, kind))
            console.print(headroom_line(record, kind))
        if record.get("energy"):
            console.print(energy_line(record["energy"]))
        for rep in record["repeats"]:
            if rep.get("device_state"):
                console.print(f"device, repeat {rep['index'] + 1}: {state_text(rep['device_state'])}")
        throughput = record["throughput"]
        data = record.get("data")
        if data is not None:
            first = f" (first: {data['skipped_examples'][0]['path']})" if data["skipped_examples"] else ""
            console.print(f"data: {data['images']} images, {data['skipped_images']} skipped as undecodable{first}")
        if throughput["ci_method"]:
            console.print(interval_line(throughput["ci_method"], len(record["repeats"])))
        if record.get("accuracy"):
            console.print(accuracy_line(record["accuracy"]))
    console.print(throughput_line(record))


def accuracy_line(section: dict) -> str:
    """A time-to-accuracy run's result in one line (accuracy.py)."""
    lr = section["lr"]
    rule = f"LR {lr['peak_lr']:g} ({lr['rule']}, base {lr['base_lr']:g} at {lr['base_batch']}, global batch {lr['global_batch']})"
    if section["outcome"] == "converged":
        reached = (f"target {section['target']:g} reached at {section['samples_to_target']} samples "
                   f"(epoch {section['epochs_to_target']:.2f}) in {section['time_to_target_s']:.1f} s")
    else:
        reached = f"NOT CONVERGED to {section['target']:g} within the budget"
    return (f"time to accuracy: {reached}; best {section['best_accuracy']:.4f}; {rule}; "
            f"init {section['init_time_s']:.1f} s apart, evaluation {section['eval_time_s']:.1f} s on the clock")
