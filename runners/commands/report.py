"""`benchrun report`: tables and plots people read, from one or more result stores.

    benchrun report RESULTS.jsonl [MORE.jsonl ...] --out DIR

Writes DIR/report.md (figures linked as PNGs beside it), DIR/report.html (one
self-contained file, figures embedded) and DIR/*.png. Every table names n,
mean ± 95% CI and the run_id prefixes its numbers came from; missing twins,
baselines and failed runs are listed. Sections and formulas: docs/reports.md.
"""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path

from benchmarks.core import durable
from benchmarks.core.durable import check_dir
from benchmarks.core.errors import UsageError
from benchmarks.distributed import strategies

from .. import accuracy, plots
from ..reporting import aggregate, equivalence, keys, load, network, why
from ..reporting.render import Document
from ..reporting.scan import timestamp


def add_parser(sub) -> None:
    p = sub.add_parser("report", help="write report.md, report.html and PNG plots from result stores",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("stores", nargs="+", help="bench JSONL files, sweep stores, or directories of them (*.jsonl)")
    p.add_argument("--out", required=True, help="directory for report.md, report.html and the PNGs (created)")
    p.add_argument("--link-gbps", type=float, metavar="GBIT",
                   help="draw this theoretical link speed (Gbit/s) on the network section's busbw plot")
    add_margin(p)
    add_selection(p)
    p.set_defaults(run=run)


def add_margin(p) -> None:
    """--margin, shared by report and compare-runtimes (docs/reports.md#verdicts-with-intervals)."""
    p.add_argument("--margin", type=float, default=100 * equivalence.DEFAULT_MARGIN, metavar="PERCENT",
                   help="equivalence margin of the runtime verdicts: a throughput ratio within ±PERCENT%% of 1 "
                        f"counts as equivalent (default: {100 * equivalence.DEFAULT_MARGIN:g})")


def positive(value: float, option: str) -> float:
    """`value` where it is a positive finite number, else one line of usage error."""
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{option} must be a positive number, got {value:g}")
    return value


def margin_of(args) -> float:
    """--margin as the fraction the verdicts take (3 -> 0.03)."""
    return positive(args.margin, "--margin") / 100


def add_selection(p) -> None:
    """--where/--since/--until, shared by report, compare and export (docs/reports.md)."""
    p.add_argument("--where", action="append", default=[], metavar="FIELD=VALUE[,VALUE...]",
                   help=f"only records whose FIELD is one of the VALUEs; repeatable, all must hold "
                        f"(fields: {', '.join(keys.WHERE_FIELDS)})")
    p.add_argument("--since", metavar="DATE", help="only records with timestamp_utc >= DATE (ISO date or date-time, UTC)")
    p.add_argument("--until", metavar="DATE", help="only records with timestamp_utc < DATE")


def selection(args) -> dict:
    """load()'s keyword arguments from add_selection's options."""
    return {"where": args.where, "since": args.since and timestamp(args.since, "--since"),
            "until": args.until and timestamp(args.until, "--until")}


def fmt_pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f}%"


def _short(key: dict, fields) -> str:
    return keys.describe(key, [f for f in fields if f in key])


def _missing(items) -> list[str]:
    return [f"{_short(key, key)}: {why} — runs {keys.ids(rs)}" for key, why, rs in items]


EFFICIENCY_HEADERS = ("model FLOP/s", "MFU", "images/J")


def efficiency_cells(records: list[dict], kind: str) -> list[str]:
    """Achieved model FLOP/s (TFLOP/s on a GPU, GFLOP/s on a CPU), MFU and images per joule, mean ± CI;
    n/a where no record has them (a CPU has no MFU, a host without RAPL no energy, older records neither)."""
    rate = aggregate.metric(records, "flops", "achieved_flops_per_sec")
    mfu = aggregate.metric(records, "flops", "mfu")
    per_joule = aggregate.metric(records, "energy", "images_per_joule")
    scale, unit = (1e12, "TFLOP/s") if kind == "gpu" else (1e9, "GFLOP/s")
    return ["n/a" if rate is None else f"{rate.text(scale, 1)} {unit}",
            "n/a" if mfu is None else f"{mfu.text(0.01, 1)}%",
            "n/a" if per_joule is None else per_joule.text(1, 3)]


def section_environment(doc: Document, records: list[dict]) -> None:
    doc.heading("Environment")
    doc.para(f"From the provenance of all {len(records)} records; counts in parentheses.")
    doc.table(["what", "values (records)"], [list(row) for row in aggregate.environment(records)])


def section_batch(doc: Document, records: list[dict], out: Path) -> None:
    doc.heading("Throughput and memory vs batch size")
    doc.para("Per framework × model. Lines differ in the configuration fields named in the legend; error bars "
             "are 95% intervals (t-interval over records with ≥ 2 records, else the record's own interval). "
             "Red crosses: batch sizes that ended out of memory (status oom).")
    for (framework, model), members in aggregate.group(records, ("framework", "model")).items():
        doc.heading(f"{framework} / {model}", 3)
        good = aggregate.ok(members)
        ooms = aggregate.with_status(members, "oom")
        if good:
            path = plots.throughput_vs_batch(members, framework, model, out / f"throughput-{framework}-{model}.png")
            doc.image(path, f"{framework} {model}: total images/sec vs batch size (n and runs in the table below)")
            mem = plots.memory_vs_batch(members, framework, model, out / f"memory-{framework}-{model}.png")
            if mem:
                doc.image(mem[0], f"{framework} {model}: peak memory vs batch size; panels: {', '.join(mem[1])} "
                                  "(memory kinds that are null in every record are omitted)")
        rows = []
        shown = keys.varying(aggregate.keys(good), ("batch_size", "framework", "model"))
        for key, rs in aggregate.group(good).items():
            k = dict(zip(keys.KEY_FIELDS, key))
            tp = aggregate.throughput(rs)
            mems = [aggregate.metric(rs, "memory", name) for name, _ in plots.MEMORY_VIEWS]
            rows.append([k["batch_size"], _short(k, shown) or "-",
                         tp.n, tp.text(), tp.method,
                         *("n/a" if m is None else m.text(plots.MiB, 0) for m in mems),
                         *efficiency_cells(rs, k["device_kind"]), tp.ids])
        if rows:
            doc.table(["batch", "configuration", "n", "images/sec mean ± CI", "interval",
                       *(f"{title} MiB" for _, title in plots.MEMORY_VIEWS), *EFFICIENCY_HEADERS, "runs"],
                      sorted(rows, key=lambda r: r[0]))
        answers = aggregate.max_batch_answers(members)
        if answers:
            doc.para("Largest batch that fits (bench --find-max-batch; green dashed line): " + "; ".join(
                f"{a['batch_search']['max_batch'] if a['batch_search']['max_batch'] is not None else 'none'} "
                f"(search {a['batch_search']['search_id'][:keys.ID_PREFIX]}: {a['batch_search']['stop_reason']}, "
                f"{a['batch_search']['probe']} probes)" for a in answers))
        if ooms:
            doc.para("Out of memory at: " + "; ".join(
                f"batch {r['config']['batch_size']} ({r['run_id'][:keys.ID_PREFIX]}: {(r['error'] or {}).get('message', '')})"
                for r in sorted(ooms, key=lambda r: r["config"]["batch_size"])))


def section_scaling(doc: Document, records: list[dict], out: Path) -> None:
    doc.heading("Scaling")
    doc.para("Total images/sec vs workers per strategy, and weak-scaling efficiency E(N) = X(N) / (N · X(1)), "
             "X(1) from the same framework, model, batch size, data and strategy at 1 worker. Where a strategy "
             "has several variants at one worker count (PS count, placement), the fastest is shown.")
    lines = [ln for ln in aggregate.scaling(records) if len(ln.points) > 1 or ln.baseline is None]
    families: dict[tuple, list[aggregate.ScalingLine]] = defaultdict(list)
    for line in lines:
        families[tuple(line.family.items())].append(line)
    missing = []
    for index, (family_items, members) in enumerate(families.items()):
        title = _short(dict(family_items), ("framework", "model", "batch_size", "image_size", "data", "device_kind", "runtime"))
        doc.heading(title, 3)
        doc.image(plots.scaling(members, title, out / f"scaling-{index + 1}.png"), f"scaling: {title}")
        rows = []
        for line in members:
            if line.baseline is None:
                missing.append(f"{title}, strategy={line.strategy}: no 1-worker baseline — E(N) not computed "
                               f"(runs {' '.join(p.summary.ids for p in line.points)})")
            for p in line.points:
                rows.append([line.strategy, p.workers, p.key["num_ps"], p.key["ps_placement"], p.summary.n,
                             p.summary.text(), "n/a" if p.efficiency is None else f"{p.efficiency:.3f}",
                             "n/a" if line.baseline is None else line.baseline.ids, p.summary.ids])
        doc.table(["strategy", "workers", "#PS", "placement", "n", "total images/sec mean ± CI", "E(N)",
                   "X(1) runs", "runs"], rows)
    if not lines:
        doc.para("No configuration was measured at more than one worker count.")
    if missing:
        doc.heading("Missing 1-worker baselines", 3)
        doc.bullets(missing)

    doc.heading("Best configuration per worker count (seed 000, Table 1 form)", 3)
    doc.para("For each worker count and data kind, the configuration reaching peak images/sec among all "
             "strategies, PS counts, placements and batch sizes of the same framework, model, image size, "
             "precision, device and runtime.")
    for family, rows in aggregate.best_per_workers(records):
        doc.para(_short(family, family))
        doc.table(["#PS", "#workers", "strategy", "placement", "batch", "real data", "images/sec mean ± CI", "n", "runs"],
                  [[k["num_ps"], workers, k["strategy"], k["ps_placement"] if strategies.get(k["strategy"]).uses_ps else "-",
                    k["batch_size"], "TRUE" if data == "real" else "FALSE", s.text(), s.n, s.ids]
                   for workers, data, k, s in rows])


def section_why(doc: Document, records: list[dict], comm_records: list[dict], out: Path) -> None:
    """Why it does not scale: T(N) - T(1) per step split into its parts (why.scaling_loss)."""
    doc.heading("Why it does not scale")
    doc.para("For every multi-worker configuration with a 1-worker twin (same configuration, same strategy, else "
             "strategy none): the lost time per step T(N) − T(1) (timed-loop mean step times) split into exposed "
             "communication, input wait, straggler wait, compute slowdown and idle, in ms per step. Input wait comes "
             "from the timed loops; the other parts from `bench --trace` summaries (scaled to the timed step), so "
             "they need --trace records. Predicted transfer: one step's exchange of the model's gradients from a "
             "`bench comm` record of the same world size and backend (all-reduce: the gradient buckets, or the "
             "gradient bytes at the busbw of the nearest size; parameter servers: the pull and push of every "
             "variable, `ps_step`). Under --strategy ps communication is the pulls and pushes, and straggler wait "
             "does not apply (asynchronous updates: no worker waits for another). The parts add up when they miss "
             f"the measured loss by at most {100 * why.LOSS_TOLERANCE:.0f}% of T(N); otherwise the table says by how much.")
    losses = why.scaling_loss(records, comm_records)
    if not losses:
        doc.para("No multi-worker configuration has its 1-worker twin in these stores.")
        return
    ms = lambda v: "n/a" if v is None else f"{1e3 * v:.1f}"  # noqa: E731 - a one-line format, local here
    families: dict[tuple, list[why.ScalingLoss]] = defaultdict(list)
    for loss in losses:
        families[tuple((f, loss.key[f]) for f in keys.without("workers"))].append(loss)
    for index, (family_items, members) in enumerate(families.items()):
        title = _short(dict(family_items), ("framework", "model", "batch_size", "image_size", "strategy", "data",
                                            "device_kind", "runtime"))
        doc.heading(title, 3)
        members.sort(key=lambda loss: loss.workers)
        rows = []
        for loss in members:
            p = loss.predicted
            check = "adds up" if loss.adds_up else "does NOT add up"
            rows.append([loss.workers, ms(loss.t_1), ms(loss.t_n), ms(loss.loss),
                         *(ms(loss.parts[name]) for name in why.LOSS_PARTS),
                         "n/a" if p is None else f"{ms(p.seconds)} ({p.how}, comm {p.run})",
                         why.fmt_fraction(loss.overlap_fraction),
                         " | ".join("n/a" if x is None else f"{x:.2f}" for x in loss.stretch),
                         f"{ms(loss.residual)} ({100 * loss.residual / loss.t_n:+.1f}% of T(N)): {check}",
                         f"{loss.runs} | {loss.baseline_runs}"])
        doc.table(["workers", "T(1) ms", "T(N) ms", "lost ms", *(f"{why.LOSS_LABELS[n]} ms" for n in why.LOSS_PARTS),
                   "predicted transfer ms", "comm hidden", "traced/timed step (N | 1)", "unexplained", "runs (N | 1)"], rows)
        doc.image(plots.scaling_loss(members, title, out / f"why-{index + 1}.png"), f"lost time per step: {title}")
        doc.bullets([sentence for loss in members
                     for sentence in (why.verdict(loss), why.straggler_sentence(loss)) if sentence])


def section_network(doc: Document, comm_records: list[dict], out: Path, link_gbps: float | None) -> None:
    """busbw and latency vs message size per backend and world, from `bench comm` records."""
    doc.heading("Network")
    series = network.network_series(comm_records)
    if not series:
        doc.para("No `bench comm` records with all-reduce, ping-pong or PS pull/push rows in these stores.")
        return
    doc.para("From `bench comm` records (nccl-tests definitions: algbw = bytes / time, busbw = algbw × 2(n−1)/n for "
             "all-reduce; ping-pong: one-way time = half the round trip; PS pull/push: every worker at once, over the "
             "model's variable sizes, time per worker). One line per operation, backend, world size and PS count; the "
             "latest record of each is shown." + (f" Dashed: the link speed given, {link_gbps:g} Gbit/s."
                                                            if link_gbps else ""))
    allreduce = [(label, rows) for (op, label), rows in series.items() if op == "allreduce"]
    everything = [(label, rows) for (_, label), rows in series.items()]
    if allreduce:
        doc.image(plots.network(allreduce, "busbw_gbps", out / "network-busbw.png", link_gbps),
                  "all-reduce busbw vs message size")
    doc.image(plots.network(everything, "time_s", out / "network-latency.png"), "time per operation vs message size")
    doc.table(["series", "bytes", "time µs", "algbw GB/s", "busbw GB/s"],
              [[label, row["bytes"], f"{1e6 * row['time_s']:.1f}", f"{row['algbw_gbps']:.3f}", f"{row['busbw_gbps']:.3f}"]
               for label, rows in everything for row in rows])


def section_io(doc: Document, records: list[dict]) -> None:
    doc.heading("I/O overhead")
    doc.para("(synthetic − real) / synthetic images/sec, per pair of configurations identical but for data "
             "(seed 000). Positive = reading real images costs throughput.")
    pairs, unmatched = aggregate.io_pairs(records)
    if pairs:
        doc.table(["configuration", "n syn", "synthetic img/s", "n real", "real img/s", "I/O overhead", "runs (syn | real)"],
                  [[_short(p.key, keys.without("data")), p.left.n, p.left.text(), p.right.n, p.right.text(),
                    fmt_pct(aggregate.io_overhead(p)), f"{p.left.ids} | {p.right.ids}"] for p in pairs])
    else:
        doc.para("No synthetic/real pairs.")
    if unmatched:
        doc.heading("Without a twin", 3)
        doc.bullets(_missing(unmatched))


def section_runtimes(doc: Document, records: list[dict], out: Path,
                     chart_name=lambda index: f"runtimes-{index + 1}.png",
                     margin: float = equivalence.DEFAULT_MARGIN) -> list[aggregate.RuntimeGroup]:
    """The runtime-overhead tables, verdicts and charts; `benchrun compare-runtimes` writes the same.
    Returns the groups, for compare-runtimes' verdicts.csv."""
    base = keys.BASELINE_RUNTIME
    doc.heading("Container runtime overhead")
    doc.para(f"Same configuration under different runtimes: the one benchrun was asked for "
             f"(provenance.requested_runtime; records without it: the runtime detected inside, `none` read as "
             f"`{base}`). Each runtime against `{base}`, and against `docker` where both ran: the throughput ratio "
             f"(runtime / reference images/sec) with its 95% interval, from the log-ratios of runs paired by "
             f"compare-runtimes round where at least two rounds pair, else Welch's interval over the logs of all "
             f"runs (column `interval`). Verdict: slower/faster where the 95% interval excludes 1; equivalent where "
             f"the 90% interval lies within ±{100 * margin:g}% (two one-sided tests, --margin); else inconclusive, "
             f"with the rounds that would likely settle it. Path: where the runtime's path or limits (record "
             f"section `path`) differ from the reference's; a resolved slowdown names the first as its likely "
             f"cause. Definitions: docs/reports.md.")
    compared, unmatched = aggregate.runtime_groups(records, margin)
    for index, found in enumerate(compared):
        title = _short(found.key, keys.without("runtime"))
        doc.para(title)
        doc.table(["runtime", "n", "images/sec mean ± CI", "runs"],
                  [[row.runtime, row.summary.n, row.summary.text(), row.summary.ids] for row in found.rows])
        doc.table(["runtime", "vs", "ratio [95% CI]", "interval", "verdict", "path differences"],
                  [[row.runtime, v.reference, fmt_estimate(v.verdict), interval_text(v.verdict), v.text,
                    " / ".join(v.path) or "-"] for row in found.rows for v in row.verdicts])
        doc.para("Position in the round: " + (found.position.text if found.position else
                 "not estimable (no compare-runtimes rounds in a random order for this configuration)"))
        doc.image(plots.runtime_overhead(found.rows, title, out / chart_name(index)), f"runtimes: {title}")
    if not compared:
        doc.para("No configuration was measured under more than one runtime.")
    if unmatched:
        doc.heading("Not compared", 3)
        doc.bullets(_missing(unmatched))
    return compared


def fmt_estimate(verdict: equivalence.Verdict) -> str:
    """'0.962 [0.941, 0.984]' (throughput) or '+0.31 s [0.12, 0.50]' (times); n/a without an interval."""
    ci = verdict.ci()
    if ci is None:
        return "n/a"
    if verdict.scale.log:
        return f"{verdict.estimate:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"
    return f"{verdict.estimate:+.2f} s [{ci[0]:+.2f}, {ci[1]:+.2f}]"


def interval_text(verdict: equivalence.Verdict) -> str:
    """How the interval was had and over how much: 'paired by round, 5 rounds' or
    'unpaired (Welch), ≥ 3 runs a side'."""
    found = verdict.interval
    if found is None:
        return "none (< 2 rounds)"
    if found.method == equivalence.PAIRED:
        return f"{found.method}, {found.n} rounds"
    return f"{found.method}, ≥ {found.n} runs a side"


def section_accuracy(doc: Document, records, out: Path) -> None:
    """Time to accuracy (bench --target-accuracy; runners/accuracy.py)."""
    arms = accuracy.arms(records)
    if not arms:
        return
    doc.heading("Time to accuracy")
    doc.para("Runs trained to a validation-accuracy target under MLPerf's timing rules (the clock starts at the first "
             "dataset read and includes evaluation). Arms differ in strategy, workers, batch and LR rule; repeats over "
             f"seeds are scored by the olympic mean (at {accuracy.OLYMPIC_MIN} runs and more the fastest and slowest are "
             "dropped; a run that did not converge counts as infinitely slow). Speed-up = reference time / time = "
             "statistical efficiency (reference samples to target / samples to target) x hardware efficiency "
             "(images/sec / reference images/sec); the reference is the 1-worker arm of the same framework, model, "
             "batch per worker, data, evaluation points, base LR and target (up to evaluation and start-up, the product equals "
             "the speed-up). "
             f"Flags: {accuracy.FAST_BUT_WRONG} (more images/sec than the reference but a best accuracy lower by more "
             "than the seed spread, or the target missed in most runs); "
             f"{accuracy.SUSPICIOUSLY_FAST} (significantly fewer samples to target than the reference, one-sided Welch "
             f"t-test p < {accuracy.ALPHA}).")
    families: dict[tuple, list[accuracy.Arm]] = defaultdict(list)
    for arm in arms:
        families[arm.family].append(arm)
    for index, members in enumerate(families.values()):
        first = members[0]
        title = f"{_short(first.key, accuracy.REFERENCE_FIELDS)}, target {first.target:g}"
        doc.heading(title, 3)
        path = plots.accuracy_curves(members, title, out / f"accuracy-{index + 1}.png")
        doc.image(path, f"{title}: validation accuracy vs training images and vs time on the run's clock, one line "
                        "per run (colour: arm); dashed: the target")
        rows = []
        for arm in members:
            def cell(value, digits=2):
                return "n/a" if value is None or not math.isfinite(value) else f"{value:.{digits}f}"

            rows.append([accuracy.arm_label(arm), arm.n, f"{arm.converged}/{arm.n}", cell(arm.time_to_target, 1),
                         cell(arm.samples_to_target, 0), f"{arm.best_accuracy:.4f}" + (
                             f" ± {arm.spread:.4f}" if arm.spread is not None else ""),
                         cell(arm.images_per_sec, 1), cell(arm.speedup), cell(arm.statistical_efficiency),
                         cell(arm.hardware_efficiency), ", ".join(arm.flags) or "-", keys.ids(arm.records)])
        doc.table(["arm", "n", "converged", "time to target s", "samples to target", "best accuracy (± sd)",
                   "images/sec", "speed-up", "statistical eff.", "hardware eff.", "flags", "runs"], rows)
        doc.bullets([accuracy.verdict(arm) for arm in members])


def section_quality(doc: Document, records: list[dict]) -> None:
    doc.heading("Single-record configurations")
    singles = aggregate.single_record_groups(records)
    if singles:
        doc.para("Measured by one run only: their ± is that run's own interval (repeats or step times), "
                 "not run-to-run spread.")
        doc.bullets([f"{_short(k, k)} — run {r['run_id'][:keys.ID_PREFIX]}, "
                     f"{r['throughput']['ci_method'] or 'no interval'}" for k, r in singles])
    else:
        doc.para("None.")
    doc.heading("Runs that did not finish")
    bad = aggregate.failures(records)
    if bad:
        doc.table(["run", "status", "configuration", "error"],
                  [[r["run_id"][:keys.ID_PREFIX], r["status"], _short(keys.key_of(r), keys.KEY_FIELDS),
                    f"{(r['error'] or {}).get('kind', '')}: {(r['error'] or {}).get('message', '')}"] for r in bad])
    else:
        doc.para("None: every record has status ok.")


def build(records: list[dict], stores: list[str], out: Path, comm_records: list[dict] = (),
          link_gbps: float | None = None, margin: float = equivalence.DEFAULT_MARGIN) -> Document:
    doc = Document()
    doc.heading("dlbench report", 1)
    doc.para(f"{len(records)} records from {', '.join(stores)}. Throughput is total images/sec "
             "(all workers); ± is a 95% interval; runs are run_id prefixes.")
    section_environment(doc, records)
    section_accuracy(doc, records, out)
    records = [r for r in records if r.get("accuracy") is None]  # the sections below are about throughput runs
    section_batch(doc, records, out)
    section_scaling(doc, records, out)
    section_why(doc, records, list(comm_records), out)
    section_network(doc, list(comm_records), out, link_gbps)
    section_io(doc, records)
    section_runtimes(doc, records, out, margin=margin)
    section_quality(doc, records)
    return doc


def run(args) -> int:
    """Written into a partial directory and put in place once whole (durable.staged_dir): a
    file system that fills up meanwhile is one line (exit 5), and no half-written file is left."""
    check_dir(args.out, "--out")
    if args.link_gbps is not None and not args.link_gbps > 0:
        raise UsageError(f"--link-gbps must be positive, got {args.link_gbps:g}")
    margin = margin_of(args)
    chosen = selection(args)
    out = Path(args.out)
    with durable.staged_dir(out, f"--out {args.out!r}") as staged:
        with plots.in_parallel():  # figures are drawn in worker processes while the tables are computed
            records, comm_records = load.load_report(args.stores, **chosen)
            if not records and not comm_records:
                selected = " matching --where/--since/--until" if args.where or args.since or args.until else ""
                raise UsageError(f"no records{selected} in {', '.join(args.stores)}")
            doc = build(records, args.stores, staged.path, comm_records, args.link_gbps, margin)
            (staged.path / "report.md").write_text(doc.markdown())
        (staged.path / "report.html").write_text(doc.html("dlbench report"))
    print(f"wrote {out / 'report.md'}, {out / 'report.html'} and {len(doc.images)} plots "
          f"from {len(records)} records")
    return 0
