"""PNG figures for `benchrun report` (matplotlib, Agg: no display needed).

Each figure is two steps: its data (numbers and labels, computed here from records and the
report's aggregates) and its drawing (`_draw_*`, which sees only that data). The drawing is
most of a report's fixed cost, so inside `in_parallel` it runs in worker processes while the
caller goes on with its tables.
"""

from __future__ import annotations

import os
import sys
from collections import defaultdict
from contextlib import contextmanager
from pathlib import Path

from .accuracy import arm_label
from .reporting import aggregate, keys, why

MiB = 1024 * 1024
MEMORY_VIEWS = (
    ("allocator_peak_bytes", "framework allocator peak"),
    ("reserved_peak_bytes", "PyTorch reserved peak"),
    ("device_peak_bytes", "device (NVML) peak"),
    ("host_rss_peak_bytes", "host RSS peak"),
)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


_pool = None  # the worker processes of `in_parallel`, while it lasts
_pending: list = []


def _render(draw, path: Path, *data) -> Path:
    """draw(path, *data) now, or in a worker process inside `in_parallel`."""
    if _pool is None:
        draw(path, *data)
    else:
        _pending.append(_pool.submit(draw, path, *data))
    return path


@contextmanager
def in_parallel(workers: int | None = None):
    """Figures asked for inside this block are drawn by `workers` processes (default: one per core,
    at most 4) while the caller goes on; all are written when it ends, and a figure that failed
    raises there. Enter it before starting threads (DuckDB's): the workers are forked."""
    import multiprocessing

    global _pool
    workers = workers or min(os.cpu_count() or 1, 4)
    if _pool is not None or workers < 2 or "fork" not in multiprocessing.get_all_start_methods():
        yield
        return
    from concurrent.futures import ProcessPoolExecutor

    sys.stdout.flush()  # nothing buffered before the fork is written twice
    sys.stderr.flush()
    _pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"), initializer=_pyplot)
    _pending.clear()
    try:
        _pool.submit(int)  # the first task forks all workers now; they import matplotlib meanwhile
        yield
        for future in _pending:
            future.result()
    finally:
        pool, _pool = _pool, None
        _pending.clear()
        pool.shutdown(cancel_futures=True)


def _label(fields: list[str], values: tuple) -> str:
    return keys.describe(dict(zip(fields, values))) or "all"


def _series(records: list[dict]) -> tuple[dict[tuple, dict[int, list[dict]]], list[str]]:
    """Records split into lines (key minus batch size) -> batch size -> records."""
    fields = keys.varying(aggregate.keys(records), exclude=("batch_size", "framework", "model"))
    lines: dict[tuple, dict[int, list[dict]]] = defaultdict(dict)
    for key, members in aggregate.group(records, (*fields, "batch_size")).items():
        lines[key[:-1]][key[-1]] = members
    return dict(sorted(lines.items(), key=lambda item: tuple(map(str, item[0])))), fields


def _finish(fig, ax_list, path: Path, legend_below: bool = False) -> Path:
    """Legends inside each axis, or (legend_below) one shared legend under the figure so
    long configuration labels never cover data."""
    shared: dict[str, object] = {}
    for ax in ax_list:
        ax.grid(True, alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        if legend_below:
            shared.update({label: handle for handle, label in zip(handles, labels) if label not in shared})
        elif handles:
            ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    if shared:
        fig.legend(list(shared.values()), list(shared), fontsize=8, loc="upper center",
                   bbox_to_anchor=(0.5, 0.0), ncol=1 if len(shared) > 4 else 2, frameon=False)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    _pyplot().close(fig)
    return path


def _batch_panel(ax, series, ooms: list[int], batches: list[int], searches=()) -> None:
    """Lines with error bars over batch sizes (log scale where they span 8x or more), red crosses at
    those that ran out of memory, green dashed lines at --find-max-batch answers."""
    for label, xs, ys, errs in series:
        ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=label)
    if ooms:
        ax.scatter(ooms, [0.0] * len(ooms), marker="x", s=80, color="red", zorder=5, label="OOM")
        for batch in ooms:
            ax.annotate("OOM", (batch, 0.0), textcoords="offset points", xytext=(0, 6), ha="center",
                        color="red", fontsize=8)
    for max_batch, search in searches:
        ax.axvline(max_batch, linestyle="--", color="green", label=f"max batch {max_batch} (search {search})")
    batches = sorted(set(batches + ooms + [max_batch for max_batch, _ in searches]))
    if batches and max(batches) / max(min(batches), 1) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(batches)
    ax.set_xticklabels([str(b) for b in batches])
    ax.margins(x=0.08)
    ax.set_ylim(bottom=0)


def _oom_batches(records: list[dict]) -> list[int]:
    return sorted({key[0] for key in aggregate.group(aggregate.with_status(records, "oom"), ("batch_size",))})


def _points(by_batch: dict[int, list[dict]], summarize) -> tuple[list, list, list]:
    """(batches, means, 95% half-widths) of summarize(records) per batch size, where there is one."""
    xs, ys, errs = [], [], []
    for batch, rs in sorted(by_batch.items()):
        summary = summarize(rs)
        if summary is not None:
            xs.append(batch)
            ys.append(summary.mean)
            errs.append(summary.ci or 0.0)
    return xs, ys, errs


def throughput_vs_batch(records: list[dict], framework: str, model: str, path: Path) -> Path:
    good = aggregate.ok(records)
    lines, fields = _series(good)
    series = [(_label(fields, line_key), *_points(by_batch, aggregate.throughput))
              for line_key, by_batch in lines.items()]
    searches = [(a["batch_search"]["max_batch"], a["batch_search"]["search_id"][:keys.ID_PREFIX])
                for a in aggregate.max_batch_answers(records) if a["batch_search"]["max_batch"] is not None]
    batches = [b for by_batch in lines.values() for b in by_batch]
    return _render(_draw_throughput, path, series, _oom_batches(records), searches, batches, f"{framework} {model}")


def _draw_throughput(path: Path, series, ooms: list[int], searches, batches: list[int], title: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    _batch_panel(ax, series, ooms, batches, searches)
    ax.set_xlabel("batch size (images per step per worker)")
    ax.set_ylabel("total images/sec (mean ± 95% CI)")
    ax.set_title(f"{title}: throughput vs batch size")
    _finish(fig, [ax], path, legend_below=True)


def memory_vs_batch(records: list[dict], framework: str, model: str, path: Path) -> tuple[Path, list[str]] | None:
    """One panel per memory kind that has any value; null kinds are left out (and named)."""
    good = aggregate.ok(records)
    views = [(name, title) for name, title in MEMORY_VIEWS if aggregate.metric(good, "memory", name) is not None]
    if not views:
        return None
    lines, fields = _series(good)
    panels = []
    for name, title in views:
        series = []
        for line_key, by_batch in lines.items():
            xs, ys, errs = _points(by_batch, lambda rs: aggregate.metric(rs, "memory", name))
            if xs:
                series.append((_label(fields, line_key), xs, [y / MiB for y in ys], [e / MiB for e in errs]))
        panels.append((title, series))
    batches = [b for by_batch in lines.values() for b in by_batch]
    return _render(_draw_memory, path, panels, _oom_batches(records), batches, f"{framework} {model}"), [t for _, t in views]


def _draw_memory(path: Path, panels, ooms: list[int], batches: list[int], title: str) -> None:
    plt = _pyplot()
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels) + 1, 4.0), squeeze=False)
    axes = list(axes[0])
    for ax, (panel, series) in zip(axes, panels):
        _batch_panel(ax, series, ooms, batches)
        ax.set_title(panel, fontsize=10)
        ax.set_xlabel("batch size")
        ax.set_ylabel("MiB")
    fig.suptitle(f"{title}: peak memory vs batch size", fontsize=11)
    _finish(fig, axes, path, legend_below=True)


def scaling(lines: list[aggregate.ScalingLine], title: str, path: Path) -> Path:
    data = [(line.strategy, [(p.workers, p.summary.mean, p.summary.ci or 0.0, p.efficiency) for p in line.points])
            for line in lines]
    return _render(_draw_scaling, path, data, title)


def _draw_scaling(path: Path, lines, title: str) -> None:
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.0))
    workers = set()
    for strategy, points in lines:
        xs = [w for w, _, _, _ in points]
        workers.update(xs)
        left.errorbar(xs, [m for _, m, _, _ in points], yerr=[ci for _, _, ci, _ in points],
                      marker="o", capsize=3, label=strategy)
        eff = [(w, e) for w, _, _, e in points if e is not None]
        if eff:
            right.plot([w for w, _ in eff], [e for _, e in eff], marker="o", label=strategy)
    for ax in (left, right):
        ax.set_xticks(sorted(workers))
        ax.set_xlabel("workers")
    left.set_ylim(bottom=0)
    left.set_ylabel("total images/sec (mean ± 95% CI)")
    left.set_title("throughput", fontsize=10)
    right.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    right.set_ylim(0, 1.1 * max([1.0] + [e for _, points in lines for _, _, _, e in points if e]))
    right.set_ylabel("weak-scaling efficiency X(N) / (N X(1))")
    right.set_title("efficiency", fontsize=10)
    fig.suptitle(title, fontsize=10)
    _finish(fig, [left, right], path)


def runtime_overhead(rows: list[aggregate.RuntimeRow], title: str, path: Path) -> Path:
    """Mean images/sec per runtime with its 95% interval (report and compare-runtimes)."""
    bars = [(row.runtime, row.summary.mean, row.summary.ci or 0.0, row.summary.n,
             None if (v := row.against(keys.BASELINE_RUNTIME)) is None else v.verdict.estimate) for row in rows]
    return _render(_draw_runtimes, path, bars, title)


def _draw_runtimes(path: Path, bars, title: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    names, means, errors, _, _ = zip(*bars)
    ax.bar(names, means, yerr=errors, capsize=6, color="#4C72B0", edgecolor="black")
    for i, (_, mean, error, n, ratio) in enumerate(bars):
        note = "" if ratio is None else f"\n×{ratio:.3f} vs {keys.BASELINE_RUNTIME}"
        ax.annotate(f"{mean:.2f}\n(n={n}){note}", (i, mean + error), ha="center",
                    va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.set_ylabel("images/sec (mean, 95% CI)")
    ax.set_title(title, fontsize=9)
    ax.set_ylim(0, max([m + e for m, e in zip(means, errors)] + [1.0]) * 1.3)
    _finish(fig, [ax], path)


LOSS_COLOURS = {"exposed_communication": "#C44E52", "input_wait": "#8172B2", "straggler_wait": "#CCB974",
                "compute": "#4C72B0", "idle": "#8C8C8C"}


def scaling_loss(losses: list[why.ScalingLoss], title: str, path: Path) -> Path:
    """Stacked bar per worker count: the lost ms per step split into its parts; a black tick marks
    the measured loss T(N) - T(1), so a gap between bar top and tick is what the split misses."""
    bars = [(loss.workers, {name: loss.parts[name] for name in why.LOSS_PARTS}, loss.loss) for loss in losses]
    return _render(_draw_scaling_loss, path, bars, title)


def _draw_scaling_loss(path: Path, bars, title: str) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    labels = [str(workers) for workers, _, _ in bars]
    positive = [0.0] * len(bars)
    negative = [0.0] * len(bars)
    for name in why.LOSS_PARTS:
        values = [1e3 * (parts[name] or 0.0) for _, parts, _ in bars]
        if not any(values):
            continue
        bottoms = [positive[i] if v >= 0 else negative[i] for i, v in enumerate(values)]
        ax.bar(labels, values, bottom=bottoms, color=LOSS_COLOURS[name], edgecolor="black", label=why.LOSS_LABELS[name])
        positive = [total + max(v, 0.0) for total, v in zip(positive, values)]
        negative = [total + min(v, 0.0) for total, v in zip(negative, values)]
    ax.scatter(labels, [1e3 * loss for _, _, loss in bars], marker="_", s=900, color="black", zorder=5,
               label="measured T(N) − T(1)")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("workers")
    ax.set_ylabel("lost time per step (ms)")
    ax.set_title(title, fontsize=9)
    _finish(fig, [ax], path, legend_below=True)


def network(rows: list[tuple[str, list[dict]]], what: str, path: Path, link_gbps: float | None = None) -> Path:
    """busbw (what="busbw_gbps") or latency (what="time_s") vs message size, one line per
    (backend, world) series; --link-gbps draws the theoretical link speed on the busbw plot."""
    series = [(label, [row["bytes"] for row in rows_], [row[what] * (1e6 if what == "time_s" else 1.0) for row in rows_])
              for label, rows_ in rows]
    return _render(_draw_network, path, series, what, link_gbps)


def _draw_network(path: Path, series, what: str, link_gbps: float | None) -> None:
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, xs, ys in series:
        ax.plot(xs, ys, marker="o", label=label)
    if link_gbps is not None and what == "busbw_gbps":
        ax.axhline(link_gbps / 8, color="red", linestyle="--", label=f"link {link_gbps:g} Gbit/s = {link_gbps / 8:g} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)" if what == "busbw_gbps" else "time per operation (µs)")
    ax.set_title("bus bandwidth vs message size" if what == "busbw_gbps" else "latency vs message size", fontsize=10)
    _finish(fig, [ax], path, legend_below=True)


def accuracy_curves(arms, title: str, path: Path) -> Path:
    """Validation accuracy vs training images and vs time, every run of every arm (runners/accuracy.py)."""
    data = [(arm_label(arm), [[(p["samples"], p["wall_time_s"], p["val_accuracy"]) for p in s["curve"]]
                              for s in arm.sections]) for arm in arms]
    return _render(_draw_accuracy, path, data, arms[0].target, title)


def _draw_accuracy(path: Path, arms, target: float, title: str) -> None:
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.0), sharey=True)
    for index, (label, runs) in enumerate(arms):
        colour = f"C{index % 10}"
        for run_index, curve in enumerate(runs):
            shown = label if run_index == 0 else None
            left.plot([c[0] for c in curve], [c[2] for c in curve], marker=".", color=colour, alpha=0.8, label=shown)
            right.plot([c[1] for c in curve], [c[2] for c in curve], marker=".", color=colour, alpha=0.8, label=shown)
    for ax, xlabel in ((left, "training images (all workers)"), (right, "seconds on the run's clock")):
        ax.axhline(target, color="grey", linestyle="--", linewidth=0.8)
        ax.set_xlim(left=0)
        ax.set_xlabel(xlabel)
    left.set_ylabel("validation accuracy")
    fig.suptitle(title, fontsize=10)
    _finish(fig, [left, right], path, legend_below=True)
