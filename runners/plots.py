"""PNG figures for `benchrun report` (matplotlib, Agg: no display needed)."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from . import reports

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


def _label(key: dict, fields: list[str]) -> str:
    return ", ".join(f"{name}={key[name]}" for name in fields) or "all"


def _series(records: list[dict], exclude=("batch_size",)) -> tuple[dict[tuple, dict[int, list[dict]]], list[str]]:
    """Records split into lines (key minus batch size) -> batch size -> records."""
    keys = [reports.key_of(r) for r in records]
    fields = reports.varying(keys, exclude=(*exclude, "framework", "model"))
    lines: dict[tuple, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))
    for record, key in zip(records, keys):
        lines[tuple(key[f] for f in fields)][key["batch_size"]].append(record)
    return dict(sorted(lines.items(), key=lambda item: tuple(map(str, item[0])))), fields


def _oom_marks(ax, ooms: list[dict], y: float) -> None:
    batches = sorted({r["config"]["batch_size"] for r in ooms})
    if batches:
        ax.scatter(batches, [y] * len(batches), marker="x", s=80, color="red", zorder=5, label="OOM")
        for batch in batches:
            ax.annotate("OOM", (batch, y), textcoords="offset points", xytext=(0, 6), ha="center",
                        color="red", fontsize=8)


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


def _batch_axis(ax, batches) -> None:
    batches = sorted(set(batches))
    if batches and max(batches) / max(min(batches), 1) >= 8:
        ax.set_xscale("log", base=2)
    ax.set_xticks(batches)
    ax.set_xticklabels([str(b) for b in batches])
    ax.margins(x=0.08)


def throughput_vs_batch(records: list[dict], framework: str, model: str, path: Path) -> Path:
    plt = _pyplot()
    good = reports.ok(records)
    ooms = [r for r in records if r["status"] == "oom"]
    lines, fields = _series(good)
    fig, ax = plt.subplots(figsize=(7, 4.2))
    batches = [r["config"]["batch_size"] for r in good + ooms]
    for line_key, by_batch in lines.items():
        xs, ys, errs = [], [], []
        for batch, rs in sorted(by_batch.items()):
            summary = reports.throughput(rs)
            xs.append(batch)
            ys.append(summary.mean)
            errs.append(summary.ci or 0.0)
        ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=_label(dict(zip(fields, line_key)), fields))
    _oom_marks(ax, ooms, 0.0)
    for answer in reports.max_batch_answers(records):
        search = answer["batch_search"]
        if search["max_batch"] is not None:
            ax.axvline(search["max_batch"], linestyle="--", color="green",
                       label=f"max batch {search['max_batch']} (search {search['search_id'][:reports.ID_PREFIX]})")
            batches.append(search["max_batch"])
    _batch_axis(ax, batches)
    ax.set_ylim(bottom=0)
    ax.set_xlabel("batch size (images per step per worker)")
    ax.set_ylabel("total images/sec (mean ± 95% CI)")
    ax.set_title(f"{framework} {model}: throughput vs batch size")
    return _finish(fig, [ax], path, legend_below=True)


def memory_vs_batch(records: list[dict], framework: str, model: str, path: Path) -> tuple[Path, list[str]] | None:
    """One panel per memory kind that has any value; null kinds are left out (and named)."""
    plt = _pyplot()
    good = reports.ok(records)
    ooms = [r for r in records if r["status"] == "oom"]
    views = [(name, title) for name, title in MEMORY_VIEWS
             if any((r.get("memory") or {}).get(name) is not None for r in good)]
    if not views:
        return None
    lines, fields = _series(good)
    fig, axes = plt.subplots(1, len(views), figsize=(4.2 * len(views) + 1, 4.0), squeeze=False)
    axes = list(axes[0])
    for ax, (name, title) in zip(axes, views):
        for line_key, by_batch in lines.items():
            xs, ys, errs = [], [], []
            for batch, rs in sorted(by_batch.items()):
                summary = reports.memory(rs, name)
                if summary is None:
                    continue
                xs.append(batch)
                ys.append(summary.mean / MiB)
                errs.append((summary.ci or 0.0) / MiB)
            if xs:
                ax.errorbar(xs, ys, yerr=errs, marker="o", capsize=3, label=_label(dict(zip(fields, line_key)), fields))
        _oom_marks(ax, ooms, 0.0)
        _batch_axis(ax, [r["config"]["batch_size"] for r in good + ooms])
        ax.set_ylim(bottom=0)
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("batch size")
        ax.set_ylabel("MiB")
    fig.suptitle(f"{framework} {model}: peak memory vs batch size", fontsize=11)
    return _finish(fig, axes, path, legend_below=True), [title for _, title in views]


def scaling(lines: list[reports.ScalingLine], title: str, path: Path) -> Path:
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.0))
    workers = set()
    for line in lines:
        xs = [p.workers for p in line.points]
        workers.update(xs)
        left.errorbar(xs, [p.summary.mean for p in line.points], yerr=[p.summary.ci or 0.0 for p in line.points],
                      marker="o", capsize=3, label=line.strategy)
        eff = [(p.workers, p.efficiency) for p in line.points if p.efficiency is not None]
        if eff:
            right.plot([w for w, _ in eff], [e for _, e in eff], marker="o", label=line.strategy)
    for ax in (left, right):
        ax.set_xticks(sorted(workers))
        ax.set_xlabel("workers")
    left.set_ylim(bottom=0)
    left.set_ylabel("total images/sec (mean ± 95% CI)")
    left.set_title("throughput", fontsize=10)
    right.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    right.set_ylim(0, 1.1 * max([1.0] + [p.efficiency for ln in lines for p in ln.points if p.efficiency]))
    right.set_ylabel("weak-scaling efficiency X(N) / (N X(1))")
    right.set_title("efficiency", fontsize=10)
    fig.suptitle(title, fontsize=10)
    return _finish(fig, [left, right], path)


def runtime_overhead(rows: list[reports.RuntimeRow], title: str, path: Path) -> Path:
    """Mean images/sec per runtime with its 95% interval (report and compare-runtimes)."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    names = [row.runtime for row in rows]
    means = [row.summary.mean for row in rows]
    errors = [row.summary.ci or 0.0 for row in rows]
    ax.bar(names, means, yerr=errors, capsize=6, color="#4C72B0", edgecolor="black")
    for i, row in enumerate(rows):
        overhead = "" if row.runtime == reports.BASELINE_RUNTIME or row.overhead is None else f"\n{100 * row.overhead:+.1f}%"
        ax.annotate(f"{row.summary.mean:.2f}\n(n={row.summary.n}){overhead}", (i, means[i] + errors[i]), ha="center",
                    va="bottom", fontsize=8, xytext=(0, 2), textcoords="offset points")
    ax.set_ylabel("images/sec (mean, 95% CI)")
    ax.set_title(title, fontsize=9)
    ax.set_ylim(0, max([m + e for m, e in zip(means, errors)] + [1.0]) * 1.3)
    return _finish(fig, [ax], path)


LOSS_COLOURS = {"exposed_communication": "#C44E52", "input_wait": "#8172B2", "straggler_wait": "#CCB974",
                "compute": "#4C72B0", "idle": "#8C8C8C"}


def scaling_loss(losses: list[reports.ScalingLoss], title: str, path: Path) -> Path:
    """Stacked bar per worker count: the lost ms per step split into its parts; a black tick marks
    the measured loss T(N) - T(1), so a gap between bar top and tick is what the split misses."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    labels = [str(loss.workers) for loss in losses]
    positive = [0.0] * len(losses)
    negative = [0.0] * len(losses)
    for name in reports.LOSS_PARTS:
        values = [1e3 * (loss.parts[name] or 0.0) for loss in losses]
        if not any(values):
            continue
        bottoms = [positive[i] if v >= 0 else negative[i] for i, v in enumerate(values)]
        ax.bar(labels, values, bottom=bottoms, color=LOSS_COLOURS[name], edgecolor="black", label=reports.LOSS_LABELS[name])
        for i, v in enumerate(values):
            if v >= 0:
                positive[i] += v
            else:
                negative[i] += v
    ax.scatter(labels, [1e3 * loss.loss for loss in losses], marker="_", s=900, color="black", zorder=5,
               label="measured T(N) − T(1)")
    ax.axhline(0, color="black", linewidth=0.8)
    ax.set_xlabel("workers")
    ax.set_ylabel("lost time per step (ms)")
    ax.set_title(title, fontsize=9)
    return _finish(fig, [ax], path, legend_below=True)


def network(rows: list[tuple[str, list[dict]]], what: str, path: Path, link_gbps: float | None = None) -> Path:
    """busbw (what="busbw_gbps") or latency (what="time_s") vs message size, one line per
    (backend, world) series; --link-gbps draws the theoretical link speed on the busbw plot."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for label, series in rows:
        xs = [row["bytes"] for row in series]
        ys = [row[what] * (1e6 if what == "time_s" else 1.0) for row in series]
        ax.plot(xs, ys, marker="o", label=label)
    if link_gbps is not None and what == "busbw_gbps":
        ax.axhline(link_gbps / 8, color="red", linestyle="--", label=f"link {link_gbps:g} Gbit/s = {link_gbps / 8:g} GB/s")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("busbw (GB/s)" if what == "busbw_gbps" else "time per operation (µs)")
    ax.set_title("bus bandwidth vs message size" if what == "busbw_gbps" else "latency vs message size", fontsize=10)
    return _finish(fig, [ax], path, legend_below=True)
