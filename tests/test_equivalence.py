"""Verdicts with intervals (runners/reporting/equivalence.py) and the runtime tables built on them
(issue 43): known answers against scipy and hand computations, every verdict form, the rounds-to-go
estimate, launch differences, the position effect, path differences as a likely cause. In-process:
records come from the case study's store, made schema 1.18 and validated."""

from __future__ import annotations

import copy
import csv
import json
import math
import random

import numpy as np
import pytest
from scipy import stats

from benchmarks.core.errors import UsageError
from benchmarks.results import record as record_model
from infra.helpers import ROOT
from runners.commands import compare_runtimes, report
from runners.reporting import aggregate, equivalence
from runners.reporting.render import Document

STORE = ROOT / "examples" / "seed-000-table1" / "results.jsonl"
MiB = 1024**2
LOG3 = math.log1p(0.03)

# docs/reports.md's worked example: five rounds, the same machine, interleaved
LOCAL = [52.1, 51.4, 52.8, 50.9, 51.7]
APPTAINER = [51.5, 51.0, 52.0, 50.6, 51.2]
DOCKER = [50.3, 52.4, 51.0, 51.9, 49.6]


# -- the intervals --------------------------------------------------------------------------------


def test_paired_interval_is_the_t_interval_of_the_log_ratios():
    logs = [math.log(a / b) for a, b in zip(APPTAINER, LOCAL)]
    found = equivalence.paired(logs)
    lo, hi = stats.t.interval(0.95, len(logs) - 1, loc=np.mean(logs), scale=stats.sem(logs))
    assert found.method == equivalence.PAIRED and (found.n, found.df) == (5, 4)
    assert found.bounds() == pytest.approx((lo, hi), rel=1e-12)
    # by hand: the five log-ratios have mean -0.010059 and sd 0.0035992; t(0.975, 4) = 2.7764
    assert found.mean == pytest.approx(-0.010059, abs=1e-6) and found.sd == pytest.approx(0.0035992, abs=1e-7)
    assert found.half_width() == pytest.approx(2.7764 * 0.0035992 / math.sqrt(5), rel=1e-4)
    assert equivalence.paired(logs[:1]) is None


def test_unpaired_fallback_is_welch_on_the_logs():
    a, b = [math.log(v) for v in APPTAINER], [math.log(v) for v in LOCAL]
    found = equivalence.welch(a, b)
    va, vb = np.var(a, ddof=1) / 5, np.var(b, ddof=1) / 5
    df = (va + vb) ** 2 / (va**2 / 4 + vb**2 / 4)  # Welch-Satterthwaite by hand
    assert found.method == equivalence.UNPAIRED and found.df == pytest.approx(df)
    # scipy's Welch test gives the same t (mean difference / se) and df
    test = stats.ttest_ind(a, b, equal_var=False)
    assert found.mean / found.se == pytest.approx(test.statistic) and found.df == pytest.approx(test.df)
    assert equivalence.welch(a[:1], b) is None


def test_verdict_uses_pairs_only_with_two_rounds_and_back_transforms():
    paired = equivalence.ratio_verdict(list(zip(APPTAINER, LOCAL)), APPTAINER, LOCAL)
    unpaired = equivalence.ratio_verdict(list(zip(APPTAINER, LOCAL))[:1], APPTAINER, LOCAL)
    assert paired.interval.method == equivalence.PAIRED and unpaired.interval.method == equivalence.UNPAIRED
    # the same mean log-ratio, so the same ratio (the geometric mean of the round ratios)
    assert paired.estimate == pytest.approx(unpaired.estimate) == pytest.approx(
        math.exp(np.mean(np.log(np.array(APPTAINER) / LOCAL))))
    assert paired.ci() == pytest.approx((0.98558, 0.99443), abs=1e-5)  # docs/reports.md
    assert unpaired.ci() == pytest.approx((0.97227, 1.00804), abs=1e-5)  # the round drift counted as noise


# -- the verdicts ---------------------------------------------------------------------------------


def test_worked_example_of_the_docs():
    """docs/reports.md#worked-example prints these strings: a change here changes the docs."""
    pairs = list(zip(APPTAINER, LOCAL))
    assert equivalence.ratio_verdict(pairs, APPTAINER, LOCAL).text == "equivalent (±3%): slower by 1.0% [0.6, 1.4]"
    assert equivalence.ratio_verdict(pairs, APPTAINER, LOCAL, margin=0.01).text == "slower by 1.0% [0.6, 1.4]"
    assert equivalence.ratio_verdict([], APPTAINER, LOCAL).text == "equivalent (±3%)"
    docker = equivalence.ratio_verdict(list(zip(DOCKER, LOCAL)), DOCKER, LOCAL)
    assert docker.text == "inconclusive: ±3.9% now; about 9 more rounds for ±3%"
    assert docker.ci() == pytest.approx((0.9483, 1.0243), abs=1e-4)


@pytest.mark.parametrize("ratios, margin, expected", [
    ([0.99, 1.0, 1.01, 1.0, 0.995], 0.03, "equivalent (±3%)"),
    ([0.90, 0.91, 0.89], 0.03, "slower by 10.0% [7.5, 12.5]"),
    ([1.10, 1.12, 1.11], 0.03, "faster by 11.0% [8.5, 13.5]"),
    ([0.985, 0.99, 0.98, 0.988], 0.03, "equivalent (±3%): slower by 1.4% [0.7, 2.1]"),
    ([0.95, 1.05, 0.97], 0.03, "inconclusive: ±14.0% now; about 21 more rounds for ±3%"),
    ([0.90], 0.03, "inconclusive: fewer than 2 rounds, no interval"),
])
def test_each_verdict_form(ratios, margin, expected):
    pairs = [(100 * r, 100.0) for r in ratios]
    assert equivalence.ratio_verdict(pairs, [a for a, _ in pairs], [b for _, b in pairs], margin).text == expected


def test_equivalent_is_the_90_percent_interval_within_the_margin():
    """TOST at alpha 0.05 on each side: the 90% interval, not the 95% one, must fit in ±log(1.03)."""
    logs = [-0.03, 0.01, -0.01, -0.03, 0.01]  # mean -0.01, sd 0.02
    found = equivalence.paired(logs)
    lo90, hi90 = found.bounds(0.90)
    lo95, _ = found.bounds(0.95)
    assert -LOG3 < lo90 and hi90 < LOG3 and lo95 < -LOG3  # inside at 90%, outside at 95%
    assert equivalence.decide(found, equivalence.Scale(0.03, log=True)).state == "equivalent"
    # both one-sided p-values below 0.05 exactly when the 90% interval lies inside
    p_low = stats.t.sf((found.mean + LOG3) / found.se, found.df)
    p_high = stats.t.cdf((found.mean - LOG3) / found.se, found.df)
    assert max(p_low, p_high) < 0.05


@pytest.mark.parametrize("mean, sd", [(-0.005, 0.02), (0.0, 0.05), (0.01, 0.01), (-0.045, 0.03)])
def test_more_rounds_at_the_same_spread_would_settle_it(mean, sd):
    """Property: at the predicted n, with the observed mean and sd, the 90% interval fits the margin (inside
    it) or the 95% interval excludes 0 (beyond it); at n - 1 it did not."""
    n = equivalence.rounds_needed(mean, sd, LOG3)
    assert n is not None and n >= 2

    def settled(k: int) -> bool:
        if abs(mean) < LOG3:
            return abs(mean) + stats.t.ppf(0.95, k - 1) * sd / math.sqrt(k) < LOG3
        return stats.t.ppf(0.975, k - 1) * sd / math.sqrt(k) < abs(mean)

    assert settled(n) and (n == 2 or not settled(n - 1))
    found = equivalence.Interval(mean, sd / math.sqrt(n), n - 1, n, sd, equivalence.PAIRED)
    assert equivalence.decide(found, equivalence.Scale(0.03, log=True)).state != "inconclusive"


def test_more_rounds_past_the_cap_say_so():
    assert equivalence.rounds_needed(0.0295, 0.2, LOG3) is None
    interval = equivalence.Interval(0.0295, 0.2 / math.sqrt(3), 2, 3, 0.2, equivalence.PAIRED)
    verdict = equivalence.decide(interval, equivalence.Scale(0.03, log=True))
    assert verdict.state == "inconclusive" and "more than 1000 more rounds for ±3%" in verdict.text


def test_launch_differences_in_seconds():
    pairs = [(1.5, 1.0), (1.7, 1.1), (1.4, 1.0)]  # +0.5, +0.6, +0.4: mean 0.5, sd 0.1
    verdict = equivalence.seconds_verdict(pairs, [], [], 0.25)
    half = stats.t.ppf(0.975, 2) * 0.1 / math.sqrt(3)
    assert verdict.ci() == pytest.approx((0.5 - half, 0.5 + half))
    assert verdict.text == "slower by 0.50 s [0.25, 0.75]"
    assert equivalence.seconds_verdict([(1.0, 1.5), (1.1, 1.7), (1.0, 1.4)], [], [], 0.25).text == \
        "faster by 0.50 s [0.25, 0.75]"
    assert equivalence.seconds_verdict([(1.01, 1.0), (1.02, 1.0), (0.99, 1.0)], [], [], 0.25).text == \
        "equivalent (±0.25 s)"
    noisy = equivalence.seconds_verdict([(1.5, 1.0), (1.0, 1.1), (1.4, 1.0)], [], [], 0.25)
    assert noisy.text == "inconclusive: ±0.80 s now; about 6 more rounds to resolve the difference"
    assert "no difference" not in noisy.text


# -- position in the round ------------------------------------------------------------------------


def observations(first_position_factor: float, seed: int = 1) -> list[tuple]:
    rng = random.Random(seed)
    found = []
    for round_ in range(8):
        order = ["local", "docker", "podman"]
        rng.shuffle(order)
        for position, runtime in enumerate(order, 1):
            speed = 100 * {"local": 1.0, "docker": 0.97, "podman": 1.01}[runtime] * (1 + 0.01 * round_)  # drift
            speed *= (first_position_factor if position == 1 else 1.0) * (1 + rng.gauss(0, 0.005))
            found.append((runtime, round_, position, math.log(speed)))
    return found


def test_a_planted_position_effect_resolves():
    effect = equivalence.position_effect(observations(0.95))
    assert effect.p_value < 0.001 and effect.text.startswith("resolved (F-test p = ")
    # first position 5% slower: positions 2 and 3 run 1/0.95 - 1 = 5.3% faster than position 1
    for position, value, lo, hi in effect.effects:
        assert lo < math.log(1 / 0.95) < hi and lo > 0, position


def test_no_planted_position_effect_is_not_resolved_and_says_within_what():
    effect = equivalence.position_effect(observations(1.0))
    assert effect.p_value > 0.05 and effect.text.startswith("not resolved: effects within ±")
    widest = max(max(abs(math.expm1(lo)), abs(math.expm1(hi))) for _, _, lo, hi in effect.effects)
    assert f"within ±{100 * widest:.1f}%" in effect.text and "no effect" not in effect.text


def test_a_fixed_order_cannot_tell_position_from_runtime():
    fixed = [(runtime, round_, position, 1.0 + 0.01 * round_ + 0.001 * position * position)
             for round_ in range(4) for position, runtime in enumerate(["local", "docker"], 1)]
    assert equivalence.position_effect(fixed) is None


# -- records: pairing by round, paths, tables ---------------------------------------------------------


@pytest.fixture(scope="module")
def base_record() -> dict:
    record = json.loads(STORE.read_text().splitlines()[0])["record"]
    record["schema_version"] = record_model.SCHEMA_VERSION
    return record


def path_section(cma: bool = True, shm: int = 64 * MiB) -> dict:
    rank = {"rank": 0, "host": "node1",
            "collective": {"library": "mpi", "backend": "mpi", "interface": None, "ucx_tls": None, "nccl": [],
                           "settings": {}, "mpi": {"implementation": "open-mpi", "version": "4.1.6",
                                                   "library_version": None, "components": ["pml_ob1"], "pml": "ob1",
                                                   "btl": ["self", "vader"], "single_copy": None, "device": None,
                                                   "netmod": None}},
            "libraries": [], "limits": {"dev_shm_bytes": shm, "cpu_quota": None, "cpuset": 4, "threads": 2,
                                        "data_workers": 0, "memlock_bytes": None, "pid_namespace": "pid:[1]",
                                        "ipc_namespace": "ipc:[1]", "cma": cma}}
    return {"ranks": [rank, {**copy.deepcopy(rank), "rank": 1}], "shared_pid_namespace": True,
            "shared_ipc_namespace": True}


def make(base: dict, runtime: str, ips: float, round_: int | None, position: int = 1, path: dict | None = None,
         count=iter(range(1, 10_000))) -> dict:
    record = copy.deepcopy(base)
    record["run_id"] = f"{next(count):08x}" + "0" * 24
    record["provenance"]["requested_runtime"] = runtime
    record["throughput"]["images_per_sec"] = ips
    record["comparison"] = None if round_ is None else {
        "id": "cmp1", "seed": 7, "round": round_, "position": position, "order": []}
    record["path"] = path
    return record_model.validate(record)  # a full 1.18 record, as compare-runtimes stores it


def rounds(base: dict, series: dict[str, list[float]], paths: dict | None = None, paired: bool = True) -> list[dict]:
    rng = random.Random(3)
    found = []
    for i in range(len(next(iter(series.values())))):
        order = list(series)
        rng.shuffle(order)
        for position, runtime in enumerate(order, 1):
            found.append(make(base, runtime, series[runtime][i], i + 1 if paired else None, position,
                              (paths or {}).get(runtime)))
    return found


def test_runs_pair_by_comparison_id_and_round(base_record):
    records = rounds(base_record, {"local": LOCAL, "apptainer": APPTAINER})
    records.reverse()  # store order does not matter: the round does
    [found], unmatched = aggregate.runtime_groups(records)
    assert not unmatched
    [row] = [row for row in found.rows if row.runtime == "apptainer"]
    [verdict] = row.verdicts  # no docker in this comparison: local only
    assert verdict.reference == "local" and verdict.verdict.interval.method == equivalence.PAIRED
    assert verdict.text == "equivalent (±3%): slower by 1.0% [0.6, 1.4]"
    # a second comparison's round 1 is another round: it does not pair with the first's
    other = make(base_record, "apptainer", 40.0, 1)
    other["comparison"]["id"] = "cmp2"
    local = [r for r in records if r["provenance"]["requested_runtime"] == "local"]
    assert aggregate.round_pairs([other], local) == [] and len(aggregate.round_pairs(records[:1], local)) == 1
    # older records without rounds: Welch over all runs
    [old], _ = aggregate.runtime_groups(rounds(base_record, {"local": LOCAL, "apptainer": APPTAINER}, paired=False))
    assert old.rows[1].verdicts[0].verdict.interval.method == equivalence.UNPAIRED and old.position is None


def test_docker_is_a_second_reference_where_both_ran(base_record):
    records = rounds(base_record, {"local": LOCAL, "docker": DOCKER, "apptainer": APPTAINER})
    [found], _ = aggregate.runtime_groups(records)
    by_runtime = {row.runtime: [v.reference for v in row.verdicts] for row in found.rows}
    # the bare host is not compared with Docker again: Docker against the bare host says it
    assert by_runtime == {"local": [], "apptainer": ["local", "docker"], "docker": ["local"]}
    assert found.position is not None and found.position.text.startswith(("resolved", "not resolved"))


def test_path_differences_beside_the_verdict_and_the_likely_cause(base_record):
    slow = [0.9 * v for v in LOCAL]
    paths = {"local": path_section(cma=True), "docker": path_section(cma=False)}
    records = rounds(base_record, {"local": LOCAL, "docker": slow}, paths)
    [found], _ = aggregate.runtime_groups(records)
    verdict = found.rows[1].against("local")
    assert verdict.verdict.state == "slower"
    assert verdict.path == ["docker: single-copy (CMA) not possible; local: possible"]
    assert verdict.text == "slower by 10.0% [10.0, 10.0]; likely cause: docker: single-copy (CMA) not possible; " \
                           "local: possible"
    # not slower: the difference is flagged but not called a cause
    records = rounds(base_record, {"local": LOCAL, "docker": APPTAINER}, paths)
    [found], _ = aggregate.runtime_groups(records)
    verdict = found.rows[1].against("local")
    assert verdict.path and "likely cause" not in verdict.text


def test_path_facts_merge_over_runs_and_say_varies():
    runs = [{"path": path_section(shm=64 * MiB)}, {"path": path_section(shm=128 * MiB)}, {"path": None}]
    facts = aggregate.path_facts(runs)
    assert facts["/dev/shm"] == "varies" and facts["single-copy (CMA)"] == "possible"
    assert aggregate.path_facts([{"path": None}]) == {}
    assert aggregate.path_differences("docker", facts, "local", {}) == []  # nothing to compare is no difference


def test_summary_writes_the_tables_and_verdicts_csv(base_record, tmp_path):
    records = rounds(base_record, {"local": LOCAL, "docker": DOCKER, "apptainer": APPTAINER},
                     {"local": path_section(), "docker": path_section(shm=64 * MiB),
                      "apptainer": path_section(shm=32 * MiB)})
    launches = {"local": [{"bench_up_s": 1.0 + 0.01 * i, "first_step_s": 5.0 + 0.1 * i} for i in range(5)],
                "docker": [{"bench_up_s": 1.5 + 0.02 * i, "first_step_s": 5.6 + 0.1 * i} for i in range(5)],
                "apptainer": [{"bench_up_s": 1.1, "first_step_s": None} for _ in range(5)]}
    md = compare_runtimes.summary(records, tmp_path, [], launches, margin=0.03, launch_margin=0.25)
    assert "Welch p" not in md and "overhead vs" not in md
    assert "| apptainer | local | 0.990 [0.986, 0.994] | paired by round, 5 rounds | " \
           "equivalent (±3%): slower by 1.0% [0.6, 1.4] | apptainer: /dev/shm 32 MiB; local: 64 MiB |" in md
    assert "| docker | local | 0.986 [0.948, 1.024] | paired by round, 5 rounds | " \
           "inconclusive: ±3.9% now; about 9 more rounds for ±3% | - |" in md
    assert "Position in the round: " in md
    # launch: docker - local = 0.5 + 0.01 i, bench up; first step 0.6 every round (no spread)
    assert "| docker | local | to first timed step | +0.60 s [+0.60, +0.60] | paired by round, 5 rounds | " \
           "slower by 0.60 s [0.60, 0.60] |" in md
    assert "| apptainer | local | to first timed step | n/a | none (< 2 rounds) | " \
           "inconclusive: fewer than 2 rounds, no interval |" in md
    rows = list(csv.DictReader((tmp_path / "verdicts.csv").open()))
    assert list(rows[0]) == list(compare_runtimes.VERDICT_COLUMNS)
    ratio = [r for r in rows if r["measure"] == "images_per_sec ratio"]
    assert len(ratio) == 3  # docker vs local, apptainer vs local and vs docker (not local vs docker again)
    [apptainer] = [r for r in ratio if (r["runtime"], r["reference"]) == ("apptainer", "local")]
    assert (apptainer["method"], apptainer["rounds"], apptainer["margin"]) == ("paired by round", "5", "3%")
    assert float(apptainer["ci_lo"]) == pytest.approx(0.98558, abs=1e-5)
    assert apptainer["path_differences"] == "apptainer: /dev/shm 32 MiB; local: 64 MiB"
    assert len([r for r in rows if r["measure"].endswith("difference")]) == 2 * 3  # the same three pairs


def test_margins_refused_when_not_positive():
    for bad in (0.0, -3.0, float("nan")):
        with pytest.raises(UsageError, match="--margin must be a positive number"):
            report.margin_of(type("Args", (), {"margin": bad})())
    assert report.margin_of(type("Args", (), {"margin": 5.0})()) == 0.05


def test_report_section_without_rounds_says_position_not_estimable(base_record, tmp_path):
    doc = Document()
    report.section_runtimes(doc, rounds(base_record, {"local": LOCAL, "podman": DOCKER}, paired=False), tmp_path)
    md = doc.markdown()
    assert "| podman | local | 0.986 [0.958, 1.014] | unpaired (Welch), ≥ 5 runs a side | " in md
    assert "Position in the round: not estimable" in md


def test_the_loader_keeps_rounds_and_paths(base_record, tmp_path):
    """`benchrun report` reads slim records (runners/reporting/load.py): the comparison and path sections
    must come through, or every verdict there would fall back to Welch and lose its path flags."""
    from runners.reporting import load

    records = rounds(base_record, {"local": LOCAL, "docker": [0.9 * v for v in LOCAL]},
                     {"local": path_section(cma=True), "docker": path_section(cma=False)})
    store = tmp_path / "s.jsonl"
    store.write_text("".join(json.dumps(r) + "\n" for r in records))
    [found], _ = aggregate.runtime_groups(load.load([store]))
    verdict = found.rows[1].against("local")
    assert verdict.verdict.interval.method == equivalence.PAIRED and "likely cause: docker: single-copy" in verdict.text


@pytest.mark.parametrize("command, option", [("report", "--margin"), ("compare-runtimes", "--margin"),
                                             ("compare-runtimes", "--launch-margin")])
def test_a_margin_of_zero_is_one_line_and_exit_2(tmp_path, command, option):
    from infra.helpers import benchrun

    store = tmp_path / "s.jsonl"
    store.write_text(STORE.read_text().splitlines()[0] + "\n")
    args = [store] if command == "report" else ["--runtimes", "local"]
    after = [] if command == "report" else ["--", "--model", "x"]
    result = benchrun(command, *args, "--out", tmp_path / "out", option, "0", *after)
    assert result.returncode == 2 and result.stderr == f"benchrun: error: {option} must be a positive number, got 0\n"
    assert not (tmp_path / "out").exists()


def test_benchrun_imports_scipy_only_when_a_verdict_is_computed():
    """Every benchrun command imports the reporting modules (compare-runtimes' parser); benchrun's own
    install (tests/infra/unprivileged.py) has no scipy, so only computing a verdict may import it."""
    import subprocess
    import sys

    from infra.helpers import ROOT, python_env

    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "runners", "run", "--help"], cwd=ROOT,
                          env=python_env(), capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "runners.reporting.equivalence" in done.stderr and " scipy" not in done.stderr
