"""Verdicts with intervals: is a runtime slower than its reference, faster, equivalent within a margin,
or not resolved yet, and how many more rounds would tell. Pure numbers in, small values out; the
records, their pairing and the path facts are aggregate's. Definitions and a worked example:
docs/reports.md#verdicts-with-intervals."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


def _stats():
    """scipy.stats, imported when a verdict is computed: every benchrun command imports this module
    (compare-runtimes' parser), and benchrun's own install needs no scipy to run a benchmark."""
    from scipy import stats

    return stats

CONFIDENCE = 0.95  # the interval shown, and "slower"/"faster": it excludes no difference
TOST_ALPHA = 0.05  # each one-sided test of TOST; both pass exactly when the 90% interval lies within the margin
DEFAULT_MARGIN = 0.03  # throughput: ±3% (docs/reports.md argues it)
DEFAULT_LAUNCH_MARGIN = 0.25  # launch cost and time to the first timed step: ±0.25 s
MAX_MORE_ROUNDS = 1000  # beyond this a plan is not a plan: say "more than"
PAIRED = "paired by round"
UNPAIRED = "unpaired (Welch)"


@dataclass(frozen=True)
class Interval:
    """A mean difference (log-ratio or seconds) with what its t-intervals and a plan for more rounds need."""

    mean: float
    se: float  # standard error of `mean`
    df: float
    n: int  # rounds (paired) or the smaller side's runs (unpaired)
    sd: float  # spread of one round's difference (unpaired: sqrt(var a + var b), a round's worth of both sides)
    method: str  # PAIRED or UNPAIRED

    def bounds(self, confidence: float = CONFIDENCE) -> tuple[float, float]:
        half = self.half_width(confidence)
        return self.mean - half, self.mean + half

    def half_width(self, confidence: float = CONFIDENCE) -> float:
        return float(_stats().t.ppf(0.5 + confidence / 2, self.df)) * self.se if self.se > 0 else 0.0


def paired(differences: list[float]) -> Interval | None:
    """The t-interval of the mean per-round difference. Why paired: both runs of a round met the same
    state of the machine (load of its neighbours, clock, cache), so the round's difference cancels the
    drift that an unpaired comparison counts as noise. None under two rounds (no spread to go on)."""
    n = len(differences)
    if n < 2:
        return None
    sd = float(np.std(differences, ddof=1))
    return Interval(float(np.mean(differences)), sd / math.sqrt(n), n - 1, n, sd, PAIRED)


def welch(this: list[float], reference: list[float]) -> Interval | None:
    """mean(this) - mean(reference) with Welch-Satterthwaite degrees of freedom: the fallback for runs
    that carry no round (older stores) or whose rounds do not match. None with under two runs a side."""
    if len(this) < 2 or len(reference) < 2:
        return None
    va, vb = float(np.var(this, ddof=1)), float(np.var(reference, ddof=1))
    a, b = va / len(this), vb / len(reference)
    se = math.sqrt(a + b)
    df = ((a + b) ** 2 / (a**2 / (len(this) - 1) + b**2 / (len(reference) - 1)) if se > 0
          else len(this) + len(reference) - 2)
    return Interval(float(np.mean(this) - np.mean(reference)), se, df, min(len(this), len(reference)),
                    math.sqrt(va + vb), UNPAIRED)


def rounds_needed(mean: float, sd: float, bound: float, max_rounds: int = MAX_MORE_ROUNDS) -> int | None:
    """The fewest rounds n whose interval would settle the question if the next rounds look like these
    (same mean difference, same spread): inside the margin, the 90% interval |mean| + t(0.95, n-1) sd/sqrt(n)
    fits within ±bound (TOST passes); at or beyond it, the 95% interval t(0.975, n-1) sd/sqrt(n) < |mean|
    excludes no difference. Iterated over n because the t quantile itself shrinks with n; None past
    `max_rounds`."""
    if sd == 0:
        return 2
    inside = abs(mean) < bound
    room = bound - abs(mean) if inside else abs(mean)
    quantile = 1 - TOST_ALPHA if inside else 0.5 + CONFIDENCE / 2
    for n in range(2, max_rounds + 1):
        if _stats().t.ppf(quantile, n - 1) * sd / math.sqrt(n) < room:
            return n
    return None


@dataclass(frozen=True)
class Scale:
    """How a difference reads: a throughput ratio (log scale, percent, higher is faster) or a time in
    seconds (lower is faster)."""

    margin: float  # as the user gave it: a fraction (0.03) or seconds
    log: bool

    @property
    def bound(self) -> float:
        """The equivalence bound on the scale the interval lives on: ±log(1 + M) for ratios."""
        return math.log1p(self.margin) if self.log else self.margin

    def margin_text(self) -> str:
        return f"±{100 * self.margin:g}%" if self.log else f"±{self.margin:g} s"

    def amount(self, difference: float) -> float:
        """How much slower (positive) a difference on the interval's scale is: percent or seconds."""
        return 100 * (1 - math.exp(difference)) if self.log else difference

    def half_text(self, interval: Interval) -> str:
        half = interval.half_width()
        return f"±{100 * math.expm1(half):.1f}%" if self.log else f"±{half:.2f} s"


@dataclass(frozen=True)
class Verdict:
    """The answer for one runtime against one reference; `text` is what the tables print."""

    state: str  # equivalent, slower, faster, inconclusive
    text: str
    interval: Interval | None
    scale: Scale
    more_rounds: int | None = None  # inconclusive: the further rounds estimated (None: past the cap, or no interval)

    @property
    def estimate(self) -> float | None:
        """The ratio (runtime / reference images/sec) or the difference in seconds."""
        if self.interval is None:
            return None
        return math.exp(self.interval.mean) if self.scale.log else self.interval.mean

    def ci(self) -> tuple[float, float] | None:
        """The 95% interval of `estimate`, back-transformed."""
        if self.interval is None:
            return None
        lo, hi = self.interval.bounds()
        return (math.exp(lo), math.exp(hi)) if self.scale.log else (lo, hi)


def decide(interval: Interval | None, scale: Scale) -> Verdict:
    """Two questions at once: does the 95% interval exclude no difference (slower/faster), and does the
    90% interval lie within the margin (TOST at alpha 0.05: equivalent)? Both at once: equivalent wins
    (the difference is too small to act on) and the measured difference is said after it."""
    if interval is None:
        return Verdict("inconclusive", "inconclusive: fewer than 2 rounds, no interval", None, scale)
    lo, hi = interval.bounds()
    lo90, hi90 = interval.bounds(1 - 2 * TOST_ALPHA)
    # a "slower" difference is negative in log throughput and positive in seconds
    slower = hi < 0 if scale.log else lo > 0
    faster = lo > 0 if scale.log else hi < 0
    difference = _difference_text("slower" if slower else "faster", interval, scale) if slower or faster else ""
    if -scale.bound < lo90 and hi90 < scale.bound:
        text = f"equivalent ({scale.margin_text()})" + (f": {difference}" if difference else "")
        return Verdict("equivalent", text, interval, scale)
    if difference:
        return Verdict("slower" if slower else "faster", difference, interval, scale)
    n = rounds_needed(interval.mean, interval.sd, scale.bound)
    goal = f"for {scale.margin_text()}" if abs(interval.mean) < scale.bound else "to resolve the difference"
    plan = f"more than {MAX_MORE_ROUNDS} more rounds" if n is None else f"about {max(n - interval.n, 1)} more rounds"
    return Verdict("inconclusive", f"inconclusive: {scale.half_text(interval)} now; {plan} {goal}", interval, scale,
                   None if n is None else max(n - interval.n, 1))


def _difference_text(word: str, interval: Interval, scale: Scale) -> str:
    """'slower by 1.2% [0.4, 2.0]': the amount and its 95% interval in the verdict's own direction."""
    sign = 1 if word == "slower" else -1
    ends = sorted(sign * scale.amount(end) for end in interval.bounds())
    amount = sign * scale.amount(interval.mean)
    if scale.log:
        return f"{word} by {amount:.1f}% [{ends[0]:.1f}, {ends[1]:.1f}]"
    return f"{word} by {amount:.2f} s [{ends[0]:.2f}, {ends[1]:.2f}]"


def ratio_verdict(pairs: list[tuple[float, float]], this: list[float], reference: list[float],
                  margin: float = DEFAULT_MARGIN) -> Verdict:
    """Throughput of a runtime against a reference: log-ratios paired by round when at least two rounds
    pair, else Welch over the logs of all runs. Logs because a runtime's cost is a fraction of the speed,
    and a ratio's interval back-transformed stays positive and symmetric in the ratio's own terms."""
    interval = paired([math.log(a) - math.log(b) for a, b in pairs]) if len(pairs) >= 2 else None
    if interval is None:
        interval = welch([math.log(v) for v in this], [math.log(v) for v in reference])
    return decide(interval, Scale(margin, log=True))


def seconds_verdict(pairs: list[tuple[float, float]], this: list[float], reference: list[float],
                    margin: float = DEFAULT_LAUNCH_MARGIN) -> Verdict:
    """A time (launch cost, time to the first timed step) against a reference, in seconds: a start-up
    cost is a fixed amount of time, not a fraction of anything, so the difference is the scale."""
    interval = paired([a - b for a, b in pairs]) if len(pairs) >= 2 else None
    if interval is None:
        interval = welch(this, reference)
    return decide(interval, Scale(margin, log=False))


@dataclass(frozen=True)
class PositionEffect:
    """Log throughput's shift at each position in a round against position 1, runtime and round removed."""

    effects: list[tuple[int, float, float, float]]  # (position, effect, 95% lo, hi) on the log scale
    p_value: float | None  # F-test of all positions at once
    text: str


def position_effect(observations: list[tuple[str, object, int, float]]) -> PositionEffect | None:
    """(runtime, round, position, log images/sec) -> the effect of position by least squares on
    runtime + round + position. Why: a runtime that always ran first might gain from a cool machine or
    lose to a cold page cache; with the order random per round, position is separable from runtime and
    from the round's drift, and a resolved effect says the rounds' order matters. None where it cannot
    be estimated (one position, or position confounded with runtime: the same order every round)."""
    positions = sorted({p for _, _, p, _ in observations})
    if len(positions) < 2:
        return None
    full = _design(observations, positions, with_position=True)
    reduced = _design(observations, positions, with_position=False)
    y = np.array([v for *_, v in observations])
    df = len(y) - full.shape[1]
    if np.linalg.matrix_rank(full) < full.shape[1] or df < 1:
        return None
    beta, rss_full = _fit(full, y)
    _, rss_reduced = _fit(reduced, y)
    sigma2 = rss_full / df
    cov = sigma2 * np.linalg.inv(full.T @ full)
    t = float(_stats().t.ppf(0.5 + CONFIDENCE / 2, df))
    first = full.shape[1] - (len(positions) - 1)
    effects = []
    for i, position in enumerate(positions[1:]):
        value, half = float(beta[first + i]), t * math.sqrt(float(cov[first + i, first + i]))
        effects.append((position, value, value - half, value + half))
    q = len(positions) - 1
    p = float(_stats().f.sf(((rss_reduced - rss_full) / q) / sigma2, q, df)) if sigma2 > 0 else None
    return PositionEffect(effects, p, _position_text(effects, p))


def _design(observations, positions, with_position: bool) -> np.ndarray:
    """Intercept, then indicator columns for every runtime, round and position but the first of each."""
    runtimes = sorted({r for r, *_ in observations})
    rounds = list(dict.fromkeys(o[1] for o in observations))
    levels = [(0, runtimes[1:]), (1, rounds[1:])] + ([(2, positions[1:])] if with_position else [])
    rows = [[1.0] + [float(o[at] == level) for at, values in levels for level in values] for o in observations]
    return np.array(rows)


def _fit(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    beta = np.linalg.lstsq(x, y, rcond=None)[0]
    residual = y - x @ beta
    return beta, float(residual @ residual)


def _position_text(effects, p: float | None) -> str:
    """Resolved when the F-test of all positions rejects at 5%; otherwise the widest interval bounds
    what is excluded ("within ±X%"), never "no effect"."""
    pct = lambda v: 100 * math.expm1(v)  # noqa: E731 - a one-line unit change, local here
    each = "; ".join(f"position {pos} vs 1: {pct(v):+.1f}% [{pct(lo):+.1f}, {pct(hi):+.1f}]"
                     for pos, v, lo, hi in effects)
    p_text = "n/a" if p is None else f"{p:.2g}"
    if p is not None and p < 1 - CONFIDENCE:
        return f"resolved (F-test p = {p_text}): {each}"
    within = max(max(abs(pct(lo)), abs(pct(hi))) for _, _, lo, hi in effects)
    return f"not resolved: effects within ±{within:.1f}% (F-test p = {p_text}; {each})"
