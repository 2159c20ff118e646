"""Records grouped by configuration and summarised: the numbers `benchrun report`, `compare`
and `compare-runtimes` show. Every aggregate carries n, mean, its 95% half-width and the run_id
prefixes it came from. Definitions: docs/reports.md."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from benchmarks.measure.stats import Stats, t_halfwidth
from benchmarks.results import fingerprint

from . import equivalence
from .keys import BASELINE_RUNTIME, KEY_FIELDS, device_kind, ids, key_values, picker, runtime_of, without


@dataclass
class Summary:
    """One metric over the records of one configuration: the host side's one statistics type
    (report, compare, compare-runtimes); its numbers come from benchmarks.measure.stats."""

    values: list[float]
    records: list[dict]
    ci: float | None  # 95% half-width
    method: str  # how `ci` was obtained

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def mean(self) -> float:
        return Stats.of(self.values).mean

    @property
    def ids(self) -> str:
        return ids(self.records)

    def text(self, scale: float = 1.0, digits: int = 2) -> str:
        ci = "n/a" if self.ci is None else f"{self.ci / scale:.{digits}f}"
        return f"{self.mean / scale:.{digits}f} ± {ci}"


def ok(records: Iterable[dict]) -> list[dict]:
    return [r for r in records if r["status"] == "ok" and r.get("throughput")]


def with_status(records: Iterable[dict], status: str) -> list[dict]:
    return [r for r in records if r["status"] == status]


def failures(records: Iterable[dict]) -> list[dict]:
    return [r for r in records if r["status"] != "ok"]


def field_values(records: Iterable[dict], section: str, name: str) -> list:
    """record[section][name] of each record (the section must be there)."""
    return [r[section][name] for r in records]


def having(records: Iterable[dict], section: str) -> list[dict]:
    """The records whose `section` is not null."""
    return [r for r in records if r.get(section) is not None]


def max_batch_answers(records: Iterable[dict]) -> list[dict]:
    """The final probe record of each --find-max-batch search (batch_search.final), by search."""
    return [r for r in records if (r.get("batch_search") or {}).get("final")]


def throughput(records: Iterable[dict]) -> Summary | None:
    """images/sec over records: with >= 2 records a t-interval over them; with one, the
    record's own interval (over its repeats, or the delta method on its steps)."""
    summary = metric(records, "throughput", "images_per_sec")
    if summary is None or summary.n >= 2:
        return summary
    own = summary.records[0]["throughput"]
    return Summary(summary.values, summary.records, own["ci95_halfwidth"], f"one record: {own['ci_method'] or 'no interval'}")


def metric(records: Iterable[dict], section: str, name: str) -> Summary | None:
    """`record[section][name]` over the ok records that have it (null = does not apply or not
    measured: left out, never read as 0); a t-interval with n >= 2."""
    good = [r for r in ok(records) if (r.get(section) or {}).get(name) is not None]
    if not good:
        return None
    values = [float(value) for value in field_values(good, section, name)]
    if len(values) >= 2:
        return Summary(values, good, t_halfwidth(values), "t-interval over records")
    return Summary(values, good, None, "one record")


def group(records: Iterable[dict], fields: Iterable[str] = KEY_FIELDS) -> dict[tuple, list[dict]]:
    """Records by their values of key `fields` (sorted by those; store order within)."""
    pick, groups = picker(fields), defaultdict(list)
    for record in records:
        groups[pick(key_values(record))].append(record)
    return dict(sorted(groups.items(), key=lambda item: tuple(map(str, item[0]))))


def keys(records: Iterable[dict]) -> list[dict]:
    """The distinct configuration keys (keys.key_of) among the records."""
    return [dict(zip(KEY_FIELDS, key)) for key in group(records)]


def single_record_groups(records: list[dict]) -> list[tuple[dict, dict]]:
    """Configurations measured by one ok record: their ± is that run's own interval, no
    run-to-run spread."""
    return [(dict(zip(KEY_FIELDS, key)), rs[0]) for key, rs in group(ok(records)).items() if len(rs) == 1]


def welch(a: list[float], b: list[float], alternative: str = "two-sided") -> float | None:
    """Welch's t-test p; None where a side has < 2 values or the test is undefined (no spread)."""
    if len(a) < 2 or len(b) < 2:
        return None
    from scipy.stats import ttest_ind

    p = float(ttest_ind(a, b, equal_var=False, alternative=alternative).pvalue)
    return None if math.isnan(p) else p


# -- the environment table -----------------------------------------------------------------------


def environment(records: list[dict]) -> list[tuple[str, str]]:
    weights = _weights(records)

    def values(get) -> str:
        counts: dict[str, int] = defaultdict(int)
        for record, weight in weights:
            for value in get(record):
                if value not in (None, ""):
                    counts[str(value)] += weight
        return "; ".join(f"{value} ({count})" for value, count in sorted(counts.items())) or "none"

    def fw(record, *names):
        framework = record["provenance"].get("framework")
        return [" ".join(str(framework[n]) for n in names if framework.get(n))] if framework else []

    stamps = [r["timestamp_utc"] for r in records]
    return [
        ("records", str(len(records))),
        ("status", values(lambda r: [r["status"]])),
        ("hosts", values(lambda r: sorted({r["provenance"]["hostname"], *r["world"]["hosts"]}))),
        ("CPU", values(lambda r: [f"{r['provenance']['cpu_model']} x{r['provenance']['cpu_count']}"])),
        ("GPU", values(lambda r: fw(r, "device_name") if device_kind(r) == "gpu" else [])),
        ("frameworks", values(lambda r: fw(r, "name", "version"))),
        ("CUDA / cuDNN", values(lambda r: [f"CUDA {f['cuda_version']} cuDNN {f['cudnn_version']}" for f in
                                           [r["provenance"].get("framework")] if f and device_kind(r) == "gpu"])),
        ("runtimes (asked for)", values(lambda r: [runtime_of(r)])),
        ("container runtimes (detected inside)", values(lambda r: [r["provenance"]["container_runtime"]])),
        ("images", values(lambda r: [r["provenance"]["image"] or "(no image)"])),
        ("dlbench versions", values(lambda r: [r["provenance"]["dlbench_version"]])),
        ("Python", values(lambda r: [r["provenance"]["python"]])),
        ("launchers", values(lambda r: [r["world"]["launcher"]])),
        ("first / last run", f"{min(stamps)} / {max(stamps)}" if stamps else "none"),
    ]


def _weights(records: list[dict]) -> list[tuple[dict, int]]:
    """(a record, how many) per distinct (provenance, world, config, status) among the records: every
    value of the environment table depends on those only. The loader shares one object per distinct
    section, so this is a count over a few objects; the records are alive here, so their ids are theirs."""
    weights: dict[tuple, list] = {}
    for record in records:
        ident = (id(record["provenance"]), id(record["world"]), id(record["config"]), record["status"])
        weights.setdefault(ident, [record, 0])[1] += 1
    return [(record, weight) for record, weight in weights.values()]


# -- scaling, Table 1, I/O and runtime pairs -----------------------------------------------------


@dataclass
class ScalingPoint:
    workers: int
    summary: Summary
    key: dict  # the configuration used at this worker count (best over num_ps / placement)
    efficiency: float | None  # E(N) = X(N) / (N X(1)); None without a 1-worker baseline


@dataclass
class ScalingLine:
    family: dict  # everything but workers, strategy, num_ps, ps_placement
    strategy: str
    points: list[ScalingPoint] = field(default_factory=list)
    baseline: Summary | None = None


SCALING_FAMILY = without("workers", "strategy", "num_ps", "ps_placement")
TABLE1_FAMILY = without("workers", "strategy", "num_ps", "ps_placement", "batch_size", "data")


def fastest(records: list[dict], cell) -> dict:
    """cell(key) -> (key values, throughput) of the fastest configuration among the ok records of that
    cell, in cell order."""
    cells: dict = defaultdict(dict)
    for key, rs in group(records).items():
        cells[cell(dict(zip(KEY_FIELDS, key)))][key] = throughput(rs)
    return {c: max(cells[c].items(), key=lambda item: item[1].mean) for c in sorted(cells)}


def scaling(records: list[dict]) -> list[ScalingLine]:
    """Per family and strategy: total images/sec vs workers, and weak-scaling efficiency.

    At each worker count the best configuration (num_ps, ps_placement) of that strategy is
    used; X(1) is the best 1-worker configuration of the same family and strategy.
    """
    lines = []
    fields = SCALING_FAMILY + ("strategy",)
    for family_key, members in group(ok(records), fields).items():
        family = dict(zip(fields, family_key))
        strategy = family.pop("strategy")
        line = ScalingLine(family, strategy)
        for workers, (key, summary) in fastest(members, lambda k: k["workers"]).items():
            if workers == 1:
                line.baseline = summary
            line.points.append(ScalingPoint(workers, summary, dict(zip(KEY_FIELDS, key)), None))
        for point in line.points:
            if line.baseline is not None:
                point.efficiency = point.summary.mean / (point.workers * line.baseline.mean)
        lines.append(line)
    return lines


def best_per_workers(records: list[dict]) -> list[tuple[dict, list[tuple[int, str, dict, Summary]]]]:
    """Seed 000's Table 1: per family, the configuration reaching peak images/sec at each
    (worker count, data) among all strategies, PS counts, placements and batch sizes."""
    out = []
    for family_key, members in group(ok(records), TABLE1_FAMILY).items():
        cells = fastest(members, lambda k: (k["workers"], k["data"]))
        rows = [(workers, data, dict(zip(KEY_FIELDS, key)), summary) for (workers, data), (key, summary) in cells.items()]
        out.append((dict(zip(TABLE1_FAMILY, family_key)), rows))
    return out


@dataclass
class Pair:
    key: dict
    left: Summary | None
    right: Summary | None


def io_pairs(records: list[dict]) -> tuple[list[Pair], list[tuple[dict, str, list[dict]]]]:
    """Synthetic/real twins (same key but data). Returns (pairs, unmatched) where unmatched
    lists (key, which side exists, records)."""
    fields = without("data")
    pairs, unmatched = [], []
    for key, members in group(ok(records), fields).items():
        k = dict(zip(fields, key))
        by_data = group(members, ("data",))
        synthetic, real = by_data.get(("synthetic",), []), by_data.get(("real",), [])
        if synthetic and real:
            pairs.append(Pair(k, throughput(synthetic), throughput(real)))
        else:
            unmatched.append((k, "synthetic only (no real-data twin)" if synthetic else "real only (no synthetic twin)",
                              members))
    return pairs, unmatched


def io_overhead(pair: Pair) -> float:
    """(synthetic - real) / synthetic, as in seed 000."""
    return (pair.left.mean - pair.right.mean) / pair.left.mean


REFERENCES = (BASELINE_RUNTIME, "docker")  # every runtime against the bare host, and against Docker where both ran


def references_of(runtime: str, present) -> list[str]:
    """The references a runtime is compared with, among those `present`: every one but itself, and for a
    reference only those before it (Docker against the bare host; the bare host against Docker would be
    the same comparison again, upside down)."""
    below = REFERENCES[:REFERENCES.index(runtime)] if runtime in REFERENCES else REFERENCES
    return [ref for ref in below if ref in present]


@dataclass
class RuntimeVerdict:
    """One runtime against one reference: the verdict and where the runs' paths differed."""

    reference: str
    verdict: equivalence.Verdict
    path: list[str]  # "docker: single-copy (CMA) not possible; local: possible", in fingerprint.facts order

    @property
    def text(self) -> str:
        """The verdict; a resolved slowdown names the first path difference as its likely cause."""
        if self.verdict.state == "slower" and self.path:
            return f"{self.verdict.text}; likely cause: {self.path[0]}"
        return self.verdict.text


@dataclass
class RuntimeRow:
    runtime: str
    summary: Summary
    verdicts: list[RuntimeVerdict]  # against each of REFERENCES that ran (not itself)

    def against(self, reference: str) -> RuntimeVerdict | None:
        return next((v for v in self.verdicts if v.reference == reference), None)


@dataclass
class RuntimeGroup:
    key: dict  # the configuration but its runtime
    rows: list[RuntimeRow]
    position: equivalence.PositionEffect | None  # None: no random orders to tell position from runtime


def round_of(record: dict) -> tuple | None:
    """(comparison id, round) of a compare-runtimes run; None for runs without a comparison section."""
    comparison = record.get("comparison")
    return None if comparison is None else (comparison["id"], comparison["round"])


def _ips(record: dict) -> float:
    return float(record["throughput"]["images_per_sec"])


def round_pairs(this: list[dict], reference: list[dict]) -> list[tuple[float, float]]:
    """(this images/sec, the reference's) per round both ran in (the first run of a round on each side)."""
    theirs: dict[tuple, float] = {}
    for record in reference:
        if (key := round_of(record)) is not None:
            theirs.setdefault(key, _ips(record))
    mine: dict[tuple, float] = {}
    for record in this:
        if (key := round_of(record)) is not None and key in theirs:
            mine.setdefault(key, _ips(record))
    return [(value, theirs[key]) for key, value in mine.items()]


def path_facts(records: list[dict]) -> dict[str, str]:
    """fingerprint.facts common to the runs that carry a path section; a fact that differs among them
    reads "varies" (a runtime's path is what all its runs took). {} without any path section."""
    every = [facts for facts in (fingerprint.facts(r.get("path")) for r in records) if facts]
    merged = {}
    for name in every[0] if every else {}:
        texts = {facts.get(name) for facts in every}
        merged[name] = texts.pop() if len(texts) == 1 else "varies"
    return merged


def path_differences(runtime: str, mine: dict[str, str], reference: str, theirs: dict[str, str]) -> list[str]:
    """Each fact where a runtime's path differs from the reference's, both named; none where a side has no facts."""
    if not mine or not theirs:
        return []
    return [f"{runtime}: {name} {mine[name]}; {reference}: {theirs.get(name)}" for name in mine
            if mine[name] != theirs.get(name)]


def runtime_groups(records: list[dict], margin: float = equivalence.DEFAULT_MARGIN
                   ) -> tuple[list[RuntimeGroup], list[tuple[dict, str, list[dict]]]]:
    """Same configuration under different runtimes (runtime_of; compare-runtimes' records), each runtime's
    throughput ratio against REFERENCES with a verdict at `margin`, and the position effect.

    Returns (compared, unmatched): unmatched are configurations seen under one runtime only
    (listed only when the store has more than one runtime) or without a `local` baseline."""
    fields = without("runtime")
    several = len(group(records, ("runtime",))) > 1
    compared, unmatched = [], []
    for key, members in group(ok(records), fields).items():
        k = dict(zip(fields, key))
        by_runtime = {runtime: rs for (runtime,), rs in group(members, ("runtime",)).items()}
        if len(by_runtime) < 2:
            if several:
                unmatched.append((k, f"only under {next(iter(by_runtime))}", members))
            continue
        if BASELINE_RUNTIME not in by_runtime:
            unmatched.append((k, f"no `{BASELINE_RUNTIME}` (bare host) records: no verdict against it", members))
        facts = {runtime: path_facts(rs) for runtime, rs in by_runtime.items()}
        rows = []
        for runtime in sorted(by_runtime, key=lambda name: (name != BASELINE_RUNTIME, name)):
            mine = by_runtime[runtime]
            verdicts = []
            for ref in references_of(runtime, by_runtime):
                theirs = by_runtime[ref]
                verdict = equivalence.ratio_verdict(round_pairs(mine, theirs), [_ips(r) for r in mine],
                                                    [_ips(r) for r in theirs], margin)
                path = path_differences(runtime, facts[runtime], ref, facts[ref])
                verdicts.append(RuntimeVerdict(ref, verdict, path))
            rows.append(RuntimeRow(runtime, throughput(mine), verdicts))
        observations = [(runtime_of(r), round_of(r), r["comparison"]["position"], math.log(_ips(r)))
                         for r in members if round_of(r) is not None]
        compared.append(RuntimeGroup(k, rows, equivalence.position_effect(observations)))
    return compared, unmatched
