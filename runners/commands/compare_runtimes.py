"""`benchrun compare-runtimes`: one benchmark under several container runtimes, in rounds.

    benchrun compare-runtimes --runtimes local,docker,apptainer --rounds 5 --out DIR -- \\
        --framework tensorflow --model resnet50 --image-size 64 --batch-size 4 --num-batches 20

Each round runs every runtime once, in a fresh random order drawn from the comparison's seed (so no
runtime always runs right after another: an order effect cannot bias one of them), and each record keeps
its round and position (record.comparison) beside the runtime asked for (provenance.requested_runtime).
Running the same command again with the same --out adds rounds to the comparison it holds (its id, seed
and options are in DIR/comparison.json; other options are refused): follow "about N more rounds" without
redoing the work. An interrupted comparison keeps every run that finished. When --out takes no more mid-comparison
(file system full, read-only), the last run's lines are kept in pending files in the temp dir and the comparison
stops in one line (exit 5); the next run on that --out appends them first, once each. Written to --out:
records.jsonl (the records, unchanged), runs.jsonl (one line per run, launch times included),
compare.md (the verdicts), compare.csv (one row per run), compare.png, and logs/ (each run's stdout).

The summary is `benchrun report`'s runtime section over these records, so both print the same
numbers: per runtime, mean images/sec with a 95% t-interval over the runs, and against `local` (and
`docker` where both ran) the throughput ratio with its 95% interval, paired by round, and a verdict
at --margin percent: `equivalent (±M%)`, `slower by X% [lo, hi]`, `faster by X% [lo, hi]` or
`inconclusive: ±H% now; about N more rounds for ±M%`; where the runs' paths differ from the
reference's (section `path`), the difference is named beside the verdict, and as the likely cause of
a resolved slowdown; whether the position in the round shifted throughput. Definitions:
docs/reports.md#verdicts-with-intervals. verdicts.csv has one row per runtime and reference (ratio
or difference, its interval, method, rounds, margin, verdict, path differences).

Launch overhead, per runtime: bench runs with --mllog, and the wall-clock times of its
`init_start` (bench is up: runtime started, Python and bench imported) and of the first timed
step (`epoch_start` of repeat 0: model built, warm-up done) are taken against the moment
benchrun issued the run (the same host clock inside every container; the latest rank counts);
the differences against the references, paired by round, get verdicts at --launch-margin seconds.
Each run's stdout (bench's lines, the MLLOG lines) is kept in logs/ beside the records.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import json
import os
import random
import secrets
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from benchmarks.core import durable
from benchmarks.core.durable import OutputError, append_or_fallback, check_dir
from benchmarks.core.errors import EXIT_INTERRUPTED, EXIT_OUTPUT, UsageError
from benchmarks.core.processes import ENDING_SIGNALS, StopScope
from benchmarks.measure.stats import t_halfwidth
from benchmarks.results.provenance import COMPARISON_ENV

from .. import dispatch, runtimes
from ..reporting import aggregate, equivalence, keys
from ..reporting.render import Document
from .report import add_margin, fmt_estimate, interval_text, margin_of, positive, section_runtimes
from .run import add_runtime_options, check_option_targets, request


def add_parser(sub) -> None:
    p = sub.add_parser("compare-runtimes", help="compare container runtimes on one benchmark", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runtimes", help="comma-separated (default: every available one)")
    p.add_argument("--rounds", "--repeats", dest="repeats", type=int, default=3,
                   help="rounds to run now, each over every runtime in a fresh random order (default: 3); "
                        "an --out that holds this comparison already gets them added")
    p.add_argument("--seed", type=int,
                   help="seed of the rounds' random orders (default: a new one, kept in --out/comparison.json)")
    p.add_argument("--out", required=True,
                   help="directory for compare.{md,csv,png}, records.jsonl, runs.jsonl and logs/; the same --out "
                        "again adds rounds to the comparison it holds")
    add_margin(p)
    p.add_argument("--launch-margin", type=float, default=equivalence.DEFAULT_LAUNCH_MARGIN, metavar="SECONDS",
                   help="equivalence margin of the launch verdicts: a difference within ±SECONDS counts as "
                        f"equivalent (default: {equivalence.DEFAULT_LAUNCH_MARGIN:g})")
    add_runtime_options(p)
    p.add_argument("bench_args", nargs=argparse.REMAINDER, help="-- then bench's own arguments")
    p.set_defaults(run=run)


def throughput(record: dict | None) -> float | None:
    if not record or record.get("status") != "ok" or not record.get("throughput"):
        return None
    return record["throughput"].get("images_per_sec")


MLLOG = ":::MLLOG "
LAUNCH_EVENTS = {"init_start": "bench_up_s", "epoch_start": "first_step_s"}  # MLLOG key -> column


@contextlib.contextmanager
def stdout_to(path: Path):
    """This process's fd 1 (inherited by the run's processes) into `path` for the block."""
    sys.stdout.flush()
    saved = os.dup(1)
    with open(path, "ab") as log:
        os.dup2(log.fileno(), 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def launch_times(log: Path, issued: float) -> dict[str, float | None]:
    """Seconds from `issued` (epoch) to bench's init_start and first timed step in the run's MLLOG
    lines (the latest rank); None where the run never got there."""
    latest: dict[str, float] = {}
    text = log.read_text(errors="replace") if log.exists() else ""
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith(MLLOG):
            continue
        try:
            event = json.loads(line[len(MLLOG):])
        except ValueError:
            continue
        key = event.get("key")
        if key in LAUNCH_EVENTS and (key != "epoch_start" or event.get("value") == 0):
            latest[key] = max(latest.get(key, 0.0), event["time_ms"] / 1000)
    return {column: (latest[key] - issued if key in latest else None) for key, column in LAUNCH_EVENTS.items()}


@dataclass(frozen=True)
class LaunchVerdict:
    runtime: str
    reference: str
    column: str  # a LAUNCH_EVENTS column
    verdict: equivalence.Verdict


def launch_verdicts(launches: dict[str, list[dict]], margin: float) -> list[LaunchVerdict]:
    """Each runtime's launch times against each reference that ran (aggregate.REFERENCES), in seconds, paired
    by round: a launch's `round` where it has one, else its place in the runtime's list (run() appends one
    per round)."""
    def by_round(runs: list[dict], column: str) -> dict:
        return {t.get("round", i + 1): t[column] for i, t in enumerate(runs) if t[column] is not None}

    found = []
    for name, runs in launches.items():
        for reference in aggregate.references_of(name, [ref for ref in launches if launches[ref]]):
            for column in LAUNCH_EVENTS.values():
                mine, theirs = by_round(runs, column), by_round(launches[reference], column)
                pairs = [(value, theirs[key]) for key, value in mine.items() if key in theirs]
                verdict = equivalence.seconds_verdict(pairs, list(mine.values()), list(theirs.values()), margin)
                found.append(LaunchVerdict(name, reference, column, verdict))
    return found


LAUNCH_TITLES = {"bench_up_s": "to bench up", "first_step_s": "to first timed step"}


def section_launch(doc: Document, launches: dict[str, list[dict]],
                   margin: float = equivalence.DEFAULT_LAUNCH_MARGIN) -> list[LaunchVerdict]:
    """Per runtime: time from benchrun issuing the run to bench up and to the first timed step, and the
    differences against the references with verdicts at `margin` seconds. Returns the verdicts."""
    doc.heading("Launch overhead", 3)
    doc.para("Seconds from benchrun issuing the run to bench's `init_start` (runtime started, Python and "
             "bench imported) and to its first timed step (`epoch_start` of repeat 0: model built, warm-up "
             "done), from the MLLOG wall-clock stamps; mean ± 95% t-interval over the runs. Differences "
             "(runtime − reference, positive = later) are paired by round, with their 95% interval; verdict: "
             "slower/faster where it excludes 0, equivalent where the 90% interval lies within "
             f"±{margin:g} s (--launch-margin), else inconclusive.")

    def summary_of(runs: list[dict], column: str) -> str:
        values = [t[column] for t in runs if t[column] is not None]
        return aggregate.Summary(values, [], t_halfwidth(values), "t-interval over runs").text() if values else "n/a"

    doc.table(["runtime", "runs", *(f"{title} (s)" for title in LAUNCH_TITLES.values())],
              [[name, len(runs), *(summary_of(runs, column) for column in LAUNCH_EVENTS.values())]
               for name, runs in launches.items()])
    found = launch_verdicts(launches, margin)
    if found:
        doc.table(["runtime", "vs", "time", "difference [95% CI]", "interval", "verdict"],
                  [[v.runtime, v.reference, LAUNCH_TITLES[v.column], fmt_estimate(v.verdict), interval_text(v.verdict),
                    v.verdict.text] for v in found])
    return found


VERDICT_COLUMNS = ("configuration", "measure", "runtime", "reference", "estimate", "ci_lo", "ci_hi", "method", "rounds",
                   "margin", "verdict", "path_differences")


def verdict_rows(groups: list[aggregate.RuntimeGroup], launches: list[LaunchVerdict],
                 margin: float, launch_margin: float) -> list[dict]:
    """verdicts.csv: one row per configuration × runtime × reference (throughput: the ratio), then the
    launch rows (seconds; the configuration is the comparison's one)."""
    def row(configuration, measure, runtime, reference, verdict, margin_text, text, path) -> dict:
        ci = verdict.ci()
        found = verdict.interval
        number = lambda v: "" if v is None else f"{v:.6g}"  # noqa: E731 - a one-line format, local here
        return dict(zip(VERDICT_COLUMNS, [configuration, measure, runtime, reference, number(verdict.estimate),
                                          number(ci and ci[0]), number(ci and ci[1]), found.method if found else "",
                                          found.n if found else 0, margin_text, text, path]))

    rows = [row(keys.describe(g.key, keys.without("runtime")), "images_per_sec ratio", r.runtime, v.reference,
                v.verdict, f"{100 * margin:g}%", v.text, " / ".join(v.path))
            for g in groups for r in g.rows for v in r.verdicts]
    rows += [row("", f"{v.column} difference", v.runtime, v.reference, v.verdict, f"{launch_margin:g} s",
                 v.verdict.text, "") for v in launches]
    return rows


def summary(records: list[dict], out: Path, no_record: list[str] = (),
            launches: dict[str, list[dict]] | None = None, margin: float = equivalence.DEFAULT_MARGIN,
            launch_margin: float = equivalence.DEFAULT_LAUNCH_MARGIN) -> str:
    """compare.md's Markdown (returned), compare.png and verdicts.csv: `benchrun report`'s runtime section
    over these records, the launch overhead, and the runs that did not finish."""
    doc = Document()
    groups = section_runtimes(doc, records, out, chart_name=lambda index: "compare.png" if index == 0
                              else f"compare-{index + 1}.png", margin=margin)
    found = section_launch(doc, launches, launch_margin) if launches else []
    failed = [f"{keys.runtime_of(r)}: run {r['run_id'][:keys.ID_PREFIX]} {r['status']}: "
              f"{(r['error'] or {}).get('message', '')}" for r in records if r["status"] != "ok"]
    if failed or no_record:
        doc.heading("Runs that did not finish", 3)
        doc.bullets([*failed, *no_record])
    with open(out / "verdicts.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=VERDICT_COLUMNS)
        writer.writeheader()
        writer.writerows(verdict_rows(groups, found, margin, launch_margin))
    return doc.markdown()


STATE = "comparison.json"  # what was compared, its id and seed: the same --out again adds rounds to it
RUNS = "runs.jsonl"  # one line per run (round, position, runtime, status, launch times): compare.csv is made from it
CSV_FIELDS = ["comparison_id", "seed", "round", "position", "runtime", "run_id", "status", "images_per_sec",
              "container_runtime", "image", *LAUNCH_EVENTS.values()]


@dataclass(frozen=True)
class Comparison:
    """One comparison: its runtimes and what each run is asked (`asked`: the request's fields that must not
    change between the invocations that add rounds to it), and the seed of every round's random order."""

    id: str
    seed: int
    runtimes: tuple[str, ...]
    asked: dict

    def order(self, round_: int) -> list[str]:
        """The runtimes in the order round `round_` runs them: a fresh shuffle per round (no runtime always
        follows another, so an order effect cannot bias one of them), reproducible from the seed."""
        names = list(self.runtimes)
        random.Random(f"{self.seed}/{round_}").shuffle(names)
        return names

    def label(self, round_: int, position: int, order: list[str]) -> str:
        """DLBENCH_COMPARISON for one run: bench copies it into its record (record.comparison)."""
        return json.dumps({"id": self.id, "seed": self.seed, "round": round_, "position": position, "order": order})


def asked_of(req: dispatch.RunRequest) -> dict:
    return {"bench_args": req.spec.to_argv(), "image": req.image, "launcher": req.launcher, "num_workers": req.num_workers,
            "num_ps": req.num_ps, "launcher_args": req.launcher_args, "data_dir": req.data_dir, "gpus": req.gpus,
            "mpi": req.mpi, "timeout_s": req.timeout_s}


def open_comparison(out: Path, runtimes_given: list[str], seed: int | None, asked: dict) -> Comparison:
    """The comparison in --out (a new one when there is none): the same one again adds rounds, anything else
    is refused in one line before a run starts."""
    state = out / STATE
    if not state.exists():
        return Comparison(uuid.uuid4().hex[:12], secrets.randbelow(2**31) if seed is None else seed,
                          tuple(runtimes_given), asked)
    try:
        saved = json.loads(state.read_text())
        found = Comparison(saved["id"], int(saved["seed"]), tuple(saved["runtimes"]), saved["asked"])
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"--out {out}: {STATE} is unreadable ({type(error).__name__}): give another --out") from None
    if runtimes_given and set(runtimes_given) != set(found.runtimes):
        raise UsageError(f"--out {out} holds a comparison of {','.join(found.runtimes)}, not "
                         f"{','.join(runtimes_given)}: leave --runtimes out to add rounds to it, or give another --out")
    if seed is not None and seed != found.seed:
        raise UsageError(f"--out {out} holds a comparison with --seed {found.seed}, not {seed}: leave --seed out "
                         "to add rounds to it, or give another --out")
    changed = [key for key in asked if json.dumps(asked[key]) != json.dumps(found.asked.get(key))]
    if changed:
        raise UsageError(f"--out {out} holds a comparison of another run ({', '.join(changed)} differ): add rounds "
                         "with the same options, or give another --out")
    return found


def save_comparison(out: Path, comparison: Comparison) -> None:
    state = out / STATE
    if not state.exists():
        with durable.staged_file(state, f"--out {str(out)!r}") as partial:
            partial.write_text(json.dumps({"id": comparison.id, "seed": comparison.seed,
                                           "runtimes": list(comparison.runtimes), "asked": comparison.asked},
                                          indent=1) + "\n")


# What a run could not append to --out (its file system full or read-only) is kept in these pending files
# (durable.pending_path) and appended by the next run on the same --out, first and once each (by these keys).
PENDING = {"records.jsonl": ("compare-records", lambda record: record.get("run_id") or None),
           RUNS: ("compare-runs", lambda row: (row.get("comparison_id"), row.get("round"), row.get("position")))}


def keep(out: Path, name: str, entry: dict) -> OutputError | None:
    """Append `entry` to --out's `name`; when the file system will not take it, keep it in the pending file
    (append_or_fallback) and return why, so that the run's other line is still tried: a record without its run
    row would leave its round uncounted, and the next invocation would number a round twice."""
    try:
        append_or_fallback(out / name, entry, durable.pending_path(out / name, PENDING[name][0]).name)
    except OutputError as error:
        return error
    return None


def recover_pending(out: Path) -> None:
    """Before a run starts: what earlier runs kept in the pending files goes into records.jsonl and runs.jsonl,
    once each, said in one line; a --out that still takes nothing is one line (exit 2), the files kept."""
    said = []
    for name, (kind, key) in PENDING.items():
        try:
            recovered = durable.append_pending(out / name, kind, key)
        except OSError as error:
            raise UsageError(f"--out {str(out)!r}: cannot append the entries kept in "
                             f"{durable.pending_path(out / name, kind)} to {name} ({error.strerror}): free space "
                             "first") from None
        if recovered is not None:
            said.append(f"{recovered[0]} to {name} (from {recovered[1]})")
    if said:
        print(f"compare-runtimes: {out}: appended what an earlier run measured while it was not writable: "
              f"{'; '.join(said)}", flush=True)


def read_runs(out: Path) -> list[dict]:
    """The runs of every invocation so far (a line a killed writer left torn is skipped)."""
    return _read(out / RUNS)


def read_records(out: Path) -> list[dict]:
    return _read(out / "records.jsonl")


def _read(path: Path) -> list[dict]:
    return list(durable.read_jsonl(path)) if path.exists() else []


def write_csv(out: Path, runs: list[dict]) -> None:
    with open(out / "compare.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        writer.writeheader()
        for row in runs:
            writer.writerow({key: "" if row.get(key) is None else row[key] for key in CSV_FIELDS})


def write_summary(out: Path, runs: list[dict], records: list[dict], no_record: list[str], launches: dict,
                  margin: float, launch_margin: float) -> str:
    """compare.md (returned, and printed), compare.csv, verdicts.csv and the charts, staged and put in place in
    --out together (durable.staged_dir): on a file system that takes no more, one line (exit 5) and none of
    them half-written; the runs stay in records.jsonl and runs.jsonl, appended line by line."""
    with durable.staged_dir(out, f"--out {str(out)!r}") as staged:
        staged.progress = ("no summary written; the runs are kept in records.jsonl and runs.jsonl, and `benchrun "
                           "report` on records.jsonl gives their verdicts; ")
        write_csv(staged.path, runs)
        table = summary(records, staged.path, no_record, launches, margin, launch_margin)
        print(table, end="", flush=True)
        (staged.path / "compare.md").write_text(table)
    return table


def between_runs() -> StopScope:
    """Every ending signal but Ctrl-C (processes.ENDING_SIGNALS; dispatch.run takes Ctrl-C): armed while a run is in
    progress, raised there as a Ctrl-C, which stops it; between runs only noted, so that no write is cut short.
    Either way no further run starts and the finished ones are summarised."""
    return StopScope(lambda signum: KeyboardInterrupt(), signals=tuple(s for s in ENDING_SIGNALS if s != signal.SIGINT),
                     armed=False).install()


def run(args) -> int:
    if args.repeats < 1:
        raise UsageError(f"--rounds must be 1 or more, got {args.repeats}")
    margin, launch_margin = margin_of(args), positive(args.launch_margin, "--launch-margin")
    check_dir(args.out, "--out")
    out = Path(args.out)
    given = [n for n in (args.runtimes or "").split(",") if n]
    if len(set(given)) != len(given):
        raise UsageError(f"--runtimes {args.runtimes}: a runtime named twice")
    probe = request(args, given[0] if given else runtimes.BARE)
    comparison = open_comparison(out, given, args.seed, {**asked_of(probe), "container_options": args.container_option})
    names = list(comparison.runtimes) or runtimes.available()
    comparison = dataclasses.replace(comparison, runtimes=tuple(names))
    check_option_targets(args, names)
    requests = {name: request(args, name) for name in names}
    for req in requests.values():
        dispatch.check(req)  # unknown or missing runtime, bad input: one line, before anything runs or is written
    for req in requests.values():
        req.spec = req.spec.replace(mllog=True)  # the launch timestamps
        dispatch.prepare(req, runtimes.get(req.runtime))  # images converted/loaded once, up front: later runs reuse them
    with durable.sole_writer(out / STATE, "--out", f"compare-runtimes of {','.join(names)}"):
        recover_pending(out)
        return _compare(args, out, comparison, names, requests, margin, launch_margin)


def _compare(args, out: Path, comparison: Comparison, names: list[str], requests: dict, margin: float,
             launch_margin: float) -> int:
    """The rounds and the summary, --out held (durable.sole_writer): its rounds are counted under the lock, so two
    invocations never run the same round."""
    (out / "logs").mkdir(parents=True, exist_ok=True)
    save_comparison(out, comparison)
    done = read_runs(out)
    first = max((run["round"] for run in done if run.get("comparison_id") == comparison.id), default=0) + 1
    if first > 1:
        print(f"compare-runtimes: {out}: comparison {comparison.id} has {first - 1} rounds: adding {args.repeats}",
              flush=True)
    interrupted, failed = False, False
    stop = between_runs()
    for round_ in range(first, first + args.repeats):
        order = comparison.order(round_)
        for position, name in enumerate(order, 1):
            if stop.received:  # between runs: none is started
                interrupted = True
                break
            req = dataclasses.replace(requests[name], run_id=dispatch.new_run_id(),  # a fresh container name
                                      env={COMPARISON_ENV: comparison.label(round_, position, order)})
            log = out / "logs" / f"round{round_}-{name}-{req.run_id}.log"
            issued = time.time()
            with stdout_to(log):
                stop.armed = True
                try:
                    outcome = dispatch.run(req)
                except KeyboardInterrupt:  # the stop came before the run had a process to stop (a loaded machine)
                    outcome = None
                finally:
                    stop.armed = False
            if outcome is None:
                interrupted = True
                break
            record = outcome.record
            launch = launch_times(log, issued)
            unwritable = [keep(out, "records.jsonl", record)] if record is not None else []
            value = throughput(record)
            failed |= value is None
            prov = (record or {}).get("provenance", {})
            row = {"comparison_id": comparison.id, "seed": comparison.seed, "round": round_, "position": position,
                   "runtime": name, "run_id": (record or {}).get("run_id", ""), "exit_code": outcome.exit_code,
                   "status": (record or {}).get("status", f"no record (exit {outcome.exit_code})"),
                   "images_per_sec": value, "container_runtime": prov.get("container_runtime", ""),
                   "image": prov.get("image") or "", **launch}
            unwritable = [error for error in [*unwritable, keep(out, RUNS, row)] if error is not None]
            if unwritable:
                stop.restore()
                return _stopped_unwritable(unwritable)
            first_step = launch["first_step_s"]
            print(f"compare-runtimes: round {round_} ({round_ - first + 1}/{args.repeats}), {position}/{len(order)} "
                  f"{name}: {'failed' if value is None else f'{value:.2f} img/s'}"
                  f"{'' if first_step is None else f', first timed step after {first_step:.1f} s'}", flush=True)
            if outcome.interrupted or stop.received:
                interrupted = True
                break
        if interrupted:
            print("compare-runtimes: interrupted: the finished runs are kept; summarizing them (the same command "
                  "again adds rounds)", flush=True)
            break
    stop.restore()
    runs = [run for run in read_runs(out) if run.get("comparison_id") == comparison.id]
    records = [r for r in read_records(out) if (r.get("comparison") or {}).get("id", comparison.id) == comparison.id]
    no_record = [f"{run['runtime']}: round {run['round']}: bench wrote no record (exit {run.get('exit_code')})"
                 for run in runs if not run.get("run_id")]
    launches: dict[str, list[dict]] = {name: [] for name in names}
    for run in runs:
        launches.setdefault(run["runtime"], []).append(run)
    write_summary(out, runs, records, no_record, launches, margin, launch_margin)
    return EXIT_INTERRUPTED if interrupted else (1 if failed else 0)


def _stopped_unwritable(errors: list[OutputError]) -> int:
    """--out took no more mid-comparison: no further run starts (its measurement could not be kept either), and one
    line says why, where the last run's lines are kept and that the next run on this --out appends them. Exit 5."""
    kept = [str(error.fallback) for error in errors if error.fallback]
    saved = (f"the last run is kept in {' and '.join(kept)} and is appended by the next run on this --out" if kept
             else "the temp dir is not writable either: the last run is lost")
    print(f"benchrun: error: compare-runtimes stopped: {errors[0]}: {saved}; free space and rerun to add the "
          "remaining rounds", file=sys.stderr, flush=True)
    return EXIT_OUTPUT
