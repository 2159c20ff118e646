"""Why it does not scale: the lost time per step T(N) - T(1), split into its parts (traces, the
timed loop's input wait) and set beside the `bench comm` prediction. A sentence says why only
where the loss is significant; else it says the runs cannot tell. Where the traces show a straggler
(one rank computing longer than the others beyond their step-to-step noise) it is named, with its
host and its share of the loss. Definitions: docs/reports.md."""

from __future__ import annotations

from dataclasses import dataclass
from math import sqrt
from statistics import median, variance

from benchmarks.distributed import strategies

from .aggregate import field_values, group, having, ok, welch
from .keys import KEY_FIELDS, ids
from .network import Predicted, predicted_transfer

SIGNIFICANCE = 0.05  # Welch's p below which T(N) and T(1) differ (the verdict's)

LOSS_LABELS = {"exposed_communication": "exposed communication", "input_wait": "input wait",
               "straggler_wait": "straggler wait", "compute": "compute slowdown", "idle": "idle (other)"}
LOSS_PARTS = tuple(LOSS_LABELS)
LOSS_TOLERANCE = 0.05  # of T(N): how far the parts' sum may miss the measured loss and still "add up"
# A straggler is named when the slowest rank's mean compute per profiled step exceeds the other ranks' by more
# than STRAGGLER_Z standard errors of that difference (from each side's step-to-step spread, Welch's form)
# and its excess over the median rank is at least STRAGGLER_FLOOR of the median rank's compute (a difference
# that is real but negligible names no one).
STRAGGLER_Z = 3.0
STRAGGLER_FLOOR = 0.05


@dataclass
class Straggler:
    """The slowest rank of a synchronous configuration's traces, and whether its excess is beyond noise."""

    rank: int
    hosts: list[str]
    excess_s: float  # its mean compute per step minus the median rank's (the straggler wait), timed-step scale
    median_compute_s: float
    noise_s: float  # STRAGGLER_Z standard errors of (its compute - the other ranks'), timed-step scale
    difference_s: float  # its mean compute minus the other ranks' pooled mean
    steps: int  # profiled steps per rank behind it (all the configuration's records)
    ceiling_flops_per_sec: float | None = None  # its device's measured ceiling, and the median rank's
    median_ceiling_flops_per_sec: float | None = None

    @property
    def named(self) -> bool:
        return self.difference_s > self.noise_s and self.excess_s >= STRAGGLER_FLOOR * self.median_compute_s


def find_straggler(records: list[dict]) -> Straggler | None:
    """From the traces' per-rank compute of a synchronous configuration's records (a straggler does not show
    in the per-rank step times: every rank waits for it in the all-reduce); None without traces on every
    rank, under an asynchronous strategy, or with fewer than 2 profiled steps per rank (no spread to judge)."""
    computes: dict[int, list[float]] = {}
    hosts: dict[int, list[str]] = {}
    ceilings: dict[int, list[float]] = {}
    for record in records:
        ranks = traced_ranks(record)
        if not ranks or not strategies.get(record["config"]["strategy"]).synchronous:
            continue
        scale = record["step_time_s"]["mean"] / _mean([s["step_s"] for r in ranks for s in r["steps"]])
        rows = {row["rank"]: row for row in record.get("ranks") or []}
        for traced in ranks:
            row = rows.get(traced["rank"], {})
            computes.setdefault(traced["rank"], []).extend(scale * s["compute_s"] for s in traced["steps"])
            if row.get("host") and row["host"] not in hosts.setdefault(traced["rank"], []):
                hosts[traced["rank"]].append(row["host"])
            if row.get("ceiling_flops_per_sec"):
                ceilings.setdefault(traced["rank"], []).append(row["ceiling_flops_per_sec"])
    if len(computes) < 2 or min(len(v) for v in computes.values()) < 2:
        return None
    means = {rank: _mean(values) for rank, values in computes.items()}
    slowest = max(means, key=means.get)
    others = [t for rank, values in computes.items() if rank != slowest for t in values]
    mine = computes[slowest]
    se = sqrt(variance(mine) / len(mine) + variance(others) / len(others))
    middle = median(means.values())
    ceiling_of = {rank: _mean(values) for rank, values in ceilings.items()}
    return Straggler(slowest, hosts.get(slowest, []), means[slowest] - middle, middle, STRAGGLER_Z * se,
                     means[slowest] - _mean(others), min(len(v) for v in computes.values()),
                     ceiling_of.get(slowest), median(ceiling_of.values()) if len(ceiling_of) == len(means) else None)


@dataclass
class ScalingLoss:
    key: dict  # the N-worker configuration
    workers: int
    t_n: float  # mean step time at N (timed loop), s
    t_1: float  # the same at 1 worker
    parts: dict[str, float | None]  # LOSS_PARTS -> s per step; None where not measurable
    traced: bool  # both sides have usable traces (else only input wait and the remainder)
    predicted: Predicted | None
    overlap_fraction: float | None  # communication hidden under compute, at N
    stretch: tuple[float | None, float | None]  # traced step / timed step at N and at 1 (profiler overhead)
    runs: str
    baseline_runs: str
    p_value: float | None = None  # Welch's t-test of the records' step times at N against those at 1
    straggler: Straggler | None = None  # the slowest rank in the traces at N (find_straggler)

    @property
    def significant(self) -> bool:
        """Whether the runs tell T(N) from T(1): >= 2 records a side and Welch's p < SIGNIFICANCE."""
        return self.p_value is not None and self.p_value < SIGNIFICANCE

    @property
    def loss(self) -> float:
        return self.t_n - self.t_1

    @property
    def residual(self) -> float:
        """Measured loss minus the sum of the parts: what the split does not account for."""
        return self.loss - sum(v for v in self.parts.values() if v is not None)

    @property
    def adds_up(self) -> bool:
        return abs(self.residual) <= LOSS_TOLERANCE * self.t_n


def _mean(values: list[float]) -> float:
    return sum(values) / len(values)


def _mean_or_none(values: list[float | None]) -> float | None:
    """The mean, or None where a part does not apply (straggler wait of asynchronous strategies)."""
    return None if any(v is None for v in values) else _mean(values)


def traced_ranks(record: dict) -> list[dict]:
    """The per-rank trace summaries of a record that has them for every training rank (else [])."""
    ranks = ((record.get("trace") or {}).get("ranks")) or []
    usable = [r for r in ranks if r and r.get("steps")]
    return usable if usable and len(usable) == len(ranks) else []


def trace_parts(record: dict) -> dict | None:
    """Per-step parts from a record's traces, scaled to the timed step (the profiler stretches
    traced steps; `stretch` = the inverse, in the report). Synchronous strategies: per profiled
    step, that of the slowest rank (most compute: the others wait for it); asynchronous ones (PS):
    the mean over workers, no straggler wait (None). docs/reports.md, "Why it does not scale"."""
    ranks = traced_ranks(record)
    if not ranks:
        return None
    if strategies.get(record["config"]["strategy"]).synchronous:
        per_step = []
        for index in range(min(len(r["steps"]) for r in ranks)):
            steps = [r["steps"][index] for r in ranks]
            computes = [s["compute_s"] for s in steps]
            slowest = max(steps, key=lambda s: s["compute_s"])
            per_step.append({
                "step": slowest["step_s"],
                "straggler_wait": slowest["compute_s"] - median(computes),
                "exposed_communication": slowest["exposed_communication_s"],
                "compute": median(computes),
                "idle": slowest["idle_s"],
            })
    else:
        per_step = [{"step": r["mean"]["step_s"], "exposed_communication": r["mean"]["exposed_communication_s"],
                     "compute": r["mean"]["compute_s"], "idle": r["mean"]["idle_s"]} for r in ranks]
    traced_step = _mean([p["step"] for p in per_step])
    scale = record["step_time_s"]["mean"] / traced_step
    parts = {name: scale * _mean([p[name] for p in per_step]) for name in per_step[0] if name != "step"}
    parts.setdefault("straggler_wait", None)
    parts["stretch"] = 1 / scale
    fractions = [r["overlap_fraction"] for r in ranks if r.get("overlap_fraction") is not None]
    parts["overlap_fraction"] = _mean(fractions) if fractions else None
    return parts


def _twin(key: dict, candidates: dict[tuple, list[dict]]) -> list[dict]:
    """The 1-worker records of the same configuration (same strategy first, else strategy none)."""
    for strategy in (key["strategy"], strategies.DEFAULT):
        twin = {**key, "workers": 1, "strategy": strategy}
        for other_key, rs in candidates.items():
            other = dict(zip(KEY_FIELDS, other_key))
            if all(other[f] == twin[f] for f in KEY_FIELDS if f not in ("num_ps", "ps_placement")):
                return rs
    return []


def scaling_loss(records: list[dict], comm_records: list[dict] = ()) -> list[ScalingLoss]:
    """For every multi-worker configuration with a 1-worker twin: T(N) - T(1) per step, split."""
    groups = group(ok(records))
    out = []
    for key_values, members in groups.items():
        key = dict(zip(KEY_FIELDS, key_values))
        if key["workers"] < 2:
            continue
        twins = ok(_twin(key, groups))
        if not twins:
            continue
        steps_n, steps_1 = field_values(members, "step_time_s", "mean"), field_values(twins, "step_time_s", "mean")
        t_n, t_1 = _mean(steps_n), _mean(steps_1)
        wait_n, wait_1 = (_mean(field_values(side, "input_wait_s", "mean")) for side in (members, twins))
        traced_n, traced_1 = ([p for p in map(trace_parts, having(side, "trace")) if p] for side in (members, twins))
        parts: dict[str, float | None] = {**dict.fromkeys(LOSS_PARTS), "input_wait": wait_n - wait_1}
        overlap = None
        if traced_n:
            at_n = {name: _mean_or_none([p[name] for p in traced_n])
                    for name in ("exposed_communication", "straggler_wait", "compute", "idle")}
            if traced_1:
                at_1 = {name: _mean([p[name] for p in traced_1]) for name in ("exposed_communication", "compute", "idle")}
            else:  # no trace at 1 worker: its whole step but the input wait counts as compute
                at_1 = {"exposed_communication": 0.0, "idle": 0.0,
                        "compute": t_1 - wait_1}
            parts.update(exposed_communication=at_n["exposed_communication"] - at_1["exposed_communication"],
                         straggler_wait=at_n["straggler_wait"], compute=at_n["compute"] - at_1["compute"],
                         idle=at_n["idle"] - at_1["idle"])
            overlaps = [p["overlap_fraction"] for p in traced_n if p["overlap_fraction"] is not None]
            overlap = _mean(overlaps) if overlaps else None
        stretch = tuple(_mean([p["stretch"] for p in side]) if side else None for side in (traced_n, traced_1))
        out.append(ScalingLoss(key, key["workers"], t_n, t_1, parts, bool(traced_n), predicted_transfer(members[0], comm_records),
                               overlap, stretch, ids(members), ids(twins), welch(steps_n, steps_1),
                               find_straggler(members)))
    return out


def verdict(loss: ScalingLoss) -> str:
    """One sentence: the largest share of the lost time, with the microbenchmark's view of it; only
    where T(N) and T(1) differ significantly."""
    where = f"at {loss.workers} workers"
    measured = {name: value for name, value in loss.parts.items() if value is not None}
    if not loss.significant:
        why = ("fewer than 2 differing runs on a side: repeat them for a verdict" if loss.p_value is None
               else f"Welch p = {loss.p_value:.2g} over the runs' step times: no significant difference")
        return f"{where}: {1e3 * loss.t_n:.1f} vs {1e3 * loss.t_1:.1f} ms/step at 1 worker; the runs cannot tell ({why})."
    if loss.loss <= 0:
        parts = ", ".join(f"{LOSS_LABELS[name]} {1e3 * value:+.1f} ms" for name, value in measured.items())
        return (f"{where} a step takes no longer than at 1 worker ({1e3 * loss.t_n:.1f} vs {1e3 * loss.t_1:.1f} ms): "
                f"nothing is lost (parts: {parts}).")
    if not loss.traced:
        return (f"{where} {1e3 * loss.loss:.1f} ms/step is lost; {100 * measured['input_wait'] / loss.loss:.0f}% of it is input "
                f"wait "
                f"and the rest is not split (no --trace records on both sides).")
    name = max(measured, key=lambda n: measured[n])
    strategy = strategies.get(loss.key["strategy"])
    exchange = strategy.exchange
    label = f"{LOSS_LABELS[name]} ({exchange})" if name == "exposed_communication" else LOSS_LABELS[name]
    sentence = f"{where}, {100 * measured[name] / loss.loss:.0f}% of the lost {1e3 * loss.loss:.1f} ms/step is {label}"
    if name == "exposed_communication" and loss.predicted is not None:
        p = loss.predicted
        rate = f"{p.busbw_gbps:.2f} GB/s {'per worker' if strategy.uses_ps else 'busbw'}"
        sentence += (f"; predicted {exchange}: {p.nbytes / 2**20:.1f} MiB at {rate} in {1e3 * p.seconds:.1f} ms, "
                     f"{fmt_fraction(loss.overlap_fraction)} of the communication traced hidden under compute")
    elif loss.parts.get("exposed_communication") is not None and name != "exposed_communication":
        sentence += f"; exposed communication ({exchange}) is {100 * loss.parts['exposed_communication'] / loss.loss:.0f}%"
    return sentence + "."


def fmt_fraction(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.0f}%"


def straggler_sentence(loss: ScalingLoss) -> str | None:
    """Who is slow: the straggler named with its host and its share of the loss, or "within noise";
    None where there is nothing to judge (asynchronous strategies, no traces on every rank)."""
    found = loss.straggler
    if found is None:
        return None
    where = f"rank {found.rank}" + (f" on {', '.join(found.hosts)}" if found.hosts else "")
    noise = (f"{1e3 * found.noise_s:.1f} ms: {STRAGGLER_Z:g} standard errors over {found.steps} profiled steps "
             f"per rank")
    if not found.named:
        return (f"at {loss.workers} workers no straggler: the slowest, {where}, computes {1e3 * found.excess_s:.1f} "
                f"ms/step more than the median rank, within the ranks' noise ({noise}; or under "
                f"{100 * STRAGGLER_FLOOR:.0f}% of the median rank's compute).")
    share = (f"; {100 * found.excess_s / loss.loss:.0f}% of the lost {1e3 * loss.loss:.1f} ms/step"
             if loss.loss > 0 else "")
    ceiling = ""
    if found.ceiling_flops_per_sec and found.median_ceiling_flops_per_sec:
        ceiling = (f"; its device's measured ceiling {found.ceiling_flops_per_sec / 1e9:,.1f} GFLOP/s, the median "
                   f"rank's {found.median_ceiling_flops_per_sec / 1e9:,.1f}")
    return (f"at {loss.workers} workers the straggler is {where}: {1e3 * found.excess_s:.1f} ms/step more compute "
            f"than the median rank ({1e3 * found.median_compute_s:.1f} ms), beyond the ranks' noise ({noise})"
            f"{share}{ceiling}.")
