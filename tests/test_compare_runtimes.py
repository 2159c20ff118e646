"""compare-runtimes' design: every round in a fresh seeded random order, each run's round and position in its
record, and an --out that holds a comparison adds rounds to it (refusing anything that would mix two)."""

from __future__ import annotations

import csv
import json
from collections import Counter
from itertools import permutations
from pathlib import Path

import pytest

from benchmarks.core.errors import UsageError
from infra.helpers import benchrun
from runners.commands.compare_runtimes import Comparison, open_comparison, save_comparison

NAMES = ("local", "docker", "apptainer")
ASKED = {"bench_args": ["--model", "alexnet"], "image": None, "launcher": None, "num_workers": 1}
TINY = ["--framework", "torch", "--model", "alexnet", "--image-size", "64", "--batch-size", "2",
        "--num-warmup-batches", "1", "--num-batches", "2", "--num-threads", "1"]


def test_each_round_is_a_fresh_permutation_reproducible_from_the_seed():
    comparison = Comparison("c1", 7, NAMES, ASKED)
    orders = [comparison.order(round_) for round_ in range(1, 301)]
    assert all(sorted(order) == sorted(NAMES) for order in orders)
    assert orders == [Comparison("c1", 7, NAMES, ASKED).order(round_) for round_ in range(1, 301)]  # resumable
    assert orders != [Comparison("c1", 8, NAMES, ASKED).order(round_) for round_ in range(1, 301)]
    # every order occurs, so no runtime always follows another; each runtime takes each position about
    # equally often (300 rounds: 100 expected per position; a fixed order would give 300 and 0)
    assert set(map(tuple, orders)) == set(permutations(NAMES))
    for name in NAMES:
        positions = Counter(order.index(name) for order in orders)
        assert all(60 <= positions[p] <= 140 for p in range(3)), (name, positions)


def test_an_out_holding_a_comparison_accepts_only_the_same_one(tmp_path):
    fresh = open_comparison(tmp_path, list(NAMES), 5, ASKED)
    assert fresh.seed == 5 and fresh.runtimes == NAMES and not (tmp_path / "comparison.json").exists()
    save_comparison(tmp_path, fresh)
    again = open_comparison(tmp_path, [], None, ASKED)  # runtimes and seed left out: the saved ones
    assert again == fresh
    assert open_comparison(tmp_path, ["apptainer", "local", "docker"], 5, ASKED) == fresh  # any order of the same
    refusals = [(["local", "docker"], None, ASKED, "holds a comparison of local,docker,apptainer"),
                ([], 6, ASKED, "with --seed 5, not 6"),
                ([], None, {**ASKED, "bench_args": ["--model", "resnet50"]}, "(bench_args differ)")]
    for runtimes_given, seed, asked, said in refusals:
        with pytest.raises(UsageError, match=said.replace("(", r"\(").replace(")", r"\)")):
            open_comparison(tmp_path, runtimes_given, seed, asked)
    (tmp_path / "comparison.json").write_text("{torn")
    with pytest.raises(UsageError, match="comparison.json is unreadable"):
        open_comparison(tmp_path, [], None, ASKED)


def test_a_new_comparison_draws_a_seed_and_an_id():
    seen = [open_comparison(Path("/nonexistent-dlbench"), ["local"], None, ASKED) for _ in range(5)]
    assert len({c.id for c in seen}) == 5 and len({c.seed for c in seen}) > 1


@pytest.mark.slow
def test_the_same_out_again_adds_rounds_and_every_record_knows_its_round(tmp_path):
    out = tmp_path / "cmp"
    first = benchrun("compare-runtimes", "--runtimes", "local", "--rounds", "1", "--seed", "3", "--out", str(out),
                     "--", *TINY, timeout=300)
    assert first.returncode == 0, first.stderr[-3000:]
    second = benchrun("compare-runtimes", "--rounds", "1", "--out", str(out), "--", *TINY, timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert "has 1 rounds: adding 1" in second.stdout
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    state = json.loads((out / "comparison.json").read_text())
    assert state["seed"] == 3 and state["runtimes"] == ["local"]
    assert [r["comparison"] for r in records] == [
        {"id": state["id"], "seed": 3, "round": round_, "position": 1, "order": ["local"]} for round_ in (1, 2)]
    rows = list(csv.DictReader((out / "compare.csv").open()))
    assert [(row["round"], row["position"], row["runtime"], row["status"]) for row in rows] == \
        [("1", "1", "local", "ok"), ("2", "1", "local", "ok")]
    assert [row["run_id"] for row in rows] == [r["run_id"] for r in records]
    # another run into the same --out is refused before anything runs, and nothing is added
    refused = benchrun("compare-runtimes", "--rounds", "1", "--out", str(out), "--", *TINY[:-1], "2", timeout=60)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "(bench_args differ)" in refused.stderr
    assert len((out / "records.jsonl").read_text().splitlines()) == 2


def test_bench_takes_its_comparison_from_the_environment_or_says_why_not():
    from benchmarks.results.provenance import comparison

    label = Comparison("c1", 7, NAMES, ASKED).label(4, 2, ["docker", "local", "apptainer"])
    said: list[str] = []
    assert comparison({"DLBENCH_COMPARISON": label}, said.append) == \
        {"id": "c1", "seed": 7, "round": 4, "position": 2, "order": ["docker", "local", "apptainer"]}
    assert comparison({}, said.append) is None and said == []
    for bad in ('{"id": "c1"}', "{torn", '{"id": "c1", "seed": "x", "round": 1, "position": 1, "order": []}',
                '{"id": "c1", "seed": 1, "round": 1, "position": 3, "order": ["local"]}'):
        assert comparison({"DLBENCH_COMPARISON": bad}, said.append) is None
    assert len(said) == 4 and all(line.startswith("DLBENCH_COMPARISON is ignored") and "\n" not in line for line in said)
