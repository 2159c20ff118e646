"""Time-to-accuracy records (bench --target-accuracy) turned into what a report says about them.

Pure data, like runners/reporting/. Runs of one *arm* (the same configuration, LR rule and
target; seeds differ) are scored as MLPerf Training scores repeated runs (olympic mean), and
each arm is compared with its *reference*, the 1-worker arm of the same family
(docs/reports.md, "Time to accuracy", has every definition). Two flags guard the comparison:
fast but wrong (more images/sec, worse accuracy), and suspiciously fast (significantly fewer
samples to target, as MLPerf checks submissions against its reference convergence points: a
faster convergence than the 1-worker run is not expected from scaling alone).
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from benchmarks.measure.stats import OLYMPIC_MIN, olympic_mean
from benchmarks.tta import convergence

from .reporting import aggregate, keys

ALPHA = 0.05
FLOOR = 0.005  # accuracy difference below which two arms are the same, whatever their spread
SPREAD_SIGMAS = 2.0
REFERENCE_FIELDS = ("framework", "model", "batch_size", "image_size", "precision", "device_kind", "runtime")


def measured_alike(record: dict) -> tuple:
    """What every compared run must share: the data, the target and where it was evaluated."""
    config, section = record["config"], record["accuracy"]
    return (section["dataset"]["name"], section["dataset"]["val_images"], section["eval_every_samples"],
            config["base_lr"], config["target_accuracy"])


def arm_key(record: dict) -> tuple:
    """What makes runs repeats of one another: the configuration (keys.key_of), LR rule, data and target."""
    return (*keys.key_tuple(record), record["config"]["lr_rule"], *measured_alike(record))


def arm_label(arm: "Arm") -> str:
    key = arm.key
    return f"{key['strategy']} x{key['workers']} batch {key['batch_size']} {arm.rule}"


@dataclass
class Arm:
    key: dict  # keys.key_of fields
    rule: str
    target: float
    records: list[dict]
    alike: tuple  # measured_alike: arms compare only with arms of the same
    reference: "Arm | None" = None
    flags: list[str] = field(default_factory=list)

    @property
    def family(self) -> tuple:
        """What the arm shares with its reference."""
        return (*(self.key[f] for f in REFERENCE_FIELDS), self.alike)

    @property
    def sections(self) -> list[dict]:
        return [r["accuracy"] for r in self.records]

    @property
    def n(self) -> int:
        return len(self.records)

    @property
    def converged(self) -> int:
        return sum(1 for s in self.sections if s["outcome"] == convergence.CONVERGED)

    def score(self, name: str) -> float:
        """Olympic mean of a *_to_target field over runs; inf when non-converged runs are left in it."""
        return olympic_mean([s[name] if s[name] is not None else math.inf for s in self.sections])

    @property
    def time_to_target(self) -> float:
        return self.score("time_to_target_s")

    @property
    def samples_to_target(self) -> float:
        return self.score("samples_to_target")

    @property
    def images_per_sec(self) -> float:
        return statistics.fmean(s["train_images_per_sec"] for s in self.sections)

    @property
    def best_accuracies(self) -> list[float]:
        return [s["best_accuracy"] for s in self.sections]

    @property
    def best_accuracy(self) -> float:
        return statistics.fmean(self.best_accuracies)

    @property
    def spread(self) -> float | None:
        """Standard deviation of the best accuracy over seeds; None below two runs."""
        return statistics.stdev(self.best_accuracies) if self.n > 1 else None

    def ratio(self, mine: float, theirs: float) -> float | None:
        """theirs / mine for *_to_target scores (bigger is better for me); None where either is inf."""
        return theirs / mine if math.isfinite(mine) and math.isfinite(theirs) and mine > 0 else None

    @property
    def speedup(self) -> float | None:
        return self.ratio(self.time_to_target, self.reference.time_to_target) if self.reference else None

    @property
    def statistical_efficiency(self) -> float | None:
        return self.ratio(self.samples_to_target, self.reference.samples_to_target) if self.reference else None

    @property
    def hardware_efficiency(self) -> float | None:
        return self.images_per_sec / self.reference.images_per_sec if self.reference else None


def arms(records) -> list[Arm]:
    """The time-to-accuracy records (ok, with an `accuracy` section) as arms, each with its reference and flags."""
    groups: dict[tuple, list[dict]] = {}
    for record in aggregate.ok(aggregate.having(records, "accuracy")):
        groups.setdefault(arm_key(record), []).append(record)
    found = []
    for members in groups.values():
        first = members[0]
        found.append(Arm(keys.key_of(first), first["config"]["lr_rule"], first["config"]["target_accuracy"], members,
                         measured_alike(first)))
    for arm in found:
        arm.reference = reference_for(arm, found)
        arm.flags = flags(arm)
    return sorted(found, key=lambda a: (*(str(a.key[f]) for f in REFERENCE_FIELDS), a.target, a.key["workers"],
                                        a.key["strategy"], a.rule))


def reference_for(arm: Arm, candidates: list[Arm]) -> Arm | None:
    """The 1-worker arm of the same family; of several, the one with rule none, then the most runs."""
    ones = [c for c in candidates if c.key["workers"] == 1 and c.family == arm.family]
    if not ones:
        return None
    return min(ones, key=lambda c: (c.rule != "none", -c.n, c.key["strategy"]))


def worse_accuracy(arm: Arm, reference: Arm) -> bool:
    margin = max(SPREAD_SIGMAS * (reference.spread or 0.0), SPREAD_SIGMAS * (arm.spread or 0.0), FLOOR)
    return arm.best_accuracy < reference.best_accuracy - margin


def fewer_samples_p(arm: Arm, reference: Arm) -> float | None:
    """One-sided Welch t-test that the arm needs fewer samples to target than the reference; None
    without two converged runs on each side."""
    mine = [s["samples_to_target"] for s in arm.sections if s["samples_to_target"] is not None]
    theirs = [s["samples_to_target"] for s in reference.sections if s["samples_to_target"] is not None]
    if len(mine) < 2 or len(theirs) < 2:
        return None
    if statistics.pstdev(mine) == 0 and statistics.pstdev(theirs) == 0:
        return 0.0 if statistics.fmean(mine) < statistics.fmean(theirs) else 1.0
    return aggregate.welch(mine, theirs, alternative="less")


FAST_BUT_WRONG, SUSPICIOUSLY_FAST = "fast but wrong", "suspiciously fast"


def flags(arm: Arm) -> list[str]:
    reference = arm.reference
    if reference is None or reference is arm:
        return []
    found = []
    if arm.images_per_sec > reference.images_per_sec and (worse_accuracy(arm, reference) or arm.converged * 2 < arm.n):
        found.append(FAST_BUT_WRONG)
    p = fewer_samples_p(arm, reference)
    if p is not None and p < ALPHA:
        found.append(SUSPICIOUSLY_FAST)
    return found


def verdict(arm: Arm) -> str:
    """One sentence per arm, flags in capitals."""
    what = f"{arm.key['framework']} {arm.key['model']} {arm_label(arm)} to {arm.target:g}"
    runs = f"{arm.converged} of {arm.n} runs converged"
    if arm.reference is None:
        return f"{what}: no 1-worker reference measured ({runs})."
    if arm.reference is arm:
        return f"{what}: the reference ({runs}; best accuracy {arm.best_accuracy:.4f})."
    if not math.isfinite(arm.time_to_target):
        timing = "the target was not reached"
    elif not math.isfinite(arm.reference.time_to_target):
        timing = "the reference did not reach the target"
    else:
        timing = (f"{arm.speedup:.2f}x the reference's speed to target = statistical efficiency "
                  f"{arm.statistical_efficiency:.2f} x hardware efficiency {arm.hardware_efficiency:.2f}")
    notes = []
    if FAST_BUT_WRONG in arm.flags:
        notes.append(f"FAST BUT WRONG: {arm.images_per_sec / arm.reference.images_per_sec:.2f}x the reference's images/sec, "
                     f"but best accuracy {arm.best_accuracy:.4f} vs {arm.reference.best_accuracy:.4f}"
                     + (f" and the target reached in only {arm.converged} of {arm.n} runs" if arm.converged * 2 < arm.n else ""))
    if SUSPICIOUSLY_FAST in arm.flags:
        notes.append(f"SUSPICIOUSLY FAST: {arm.samples_to_target:.0f} samples to target vs the reference's "
                     f"{arm.reference.samples_to_target:.0f} (one-sided Welch t-test p < {ALPHA}); check the setup")
    seeds = "" if arm.n >= 3 else f"; only {arm.n} seed(s): MLPerf asks for at least 3 ({OLYMPIC_MIN} for an olympic mean)"
    return f"{what}: {timing} ({runs}){'; ' if notes else ''}{'; '.join(notes)}{seeds}."
