"""`benchrun sweep`: plan validation, product and skip rules, hashes, the store, and real sweeps
(resume, retries, a run that leaves no record, kill -9 of the sweep and rerun)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import jsonschema
import pytest

from benchmarks.results.record import SCHEMA_FILE
from infra.helpers import ROOT, benchrun, last_json_line
from infra.sweeps import cmdline, lines, marked, measured, tiny_plan, write_plan
from runners import cli, store, sweep
from runners.sweep import PlanError, expand, parse_plan

# --- bad plans: one line each, exit 2, store untouched -------------------------------------------

BAD_PLANS = [
    ("matrix: {framework: [torch], model: [alexnet], batch_size: [2, 0]}",
     ["matrix.batch_size[1]: must be a positive integer"]),
    ("matrix: {framework: [torch], model: [alexnet], batch_size: [2, x]}",
     ["matrix.batch_size[1]: must be an integer, got 'x'"]),
    ("matrix: {framework: [torch], model: [alexnet], batch_size: [2]}\nbench: {image_sise: 64}\n",
     ["bench.image_sise: unknown key (choices: image_size,"]),
    ("matrix: {framework: [torch], model: [alexnet], batch_size: [2]}\nrepeat: 3\n", ["repeat: unknown key"]),
    ("matrix: {framework: [torch], model: [alexnet], batch_size: [2], rank: [1]}", ["matrix.rank: unknown key"]),
    ("matrix: {framework: [caffe], model: [], batch_size: [2]}",
     ["matrix.framework[0]: unknown value 'caffe' (choices: torch, tensorflow)", "matrix.model: must list at least one value"]),
    ("matrix: {}", ["matrix.framework: required key missing", "matrix.model: required key missing",
                    "matrix.batch_size: required key missing"]),
    ("matrix:\n", ["matrix: must be a mapping"]),
    ("", ["must be a YAML mapping with a 'matrix' key"]),
    ("matrix: [unclosed\n", ["not valid YAML: line"]),
    ("matrix: {framework: [torch], model: [alexnet], batch_size: [2]}\ntimeout: '5'\n",
     ["timeout: must be a positive number of seconds, got '5'"]),
    ("matrix: {framework: [torch], model: [alexnet], batch_size: [2]}\nbench: {xla: 1}\n",
     ["bench.xla: must be true or false, got 1"]),
    ("matrix: {framework: [torch], model: [alexnet], batch_size: [2, 2]}", ["matrix.batch_size: lists 2 twice"]),
    ("matrix: {framework: [torch], model: [alexnet], batch_size: [2]}\nlauncher: slurm\n",
     ["launcher: unknown value 'slurm' (choices: local,"]),
    # valid schema, but bench itself refuses the value: still nothing runs
    ("matrix: {framework: [torch], model: [alexnet], batch_size: [2]}\nbench: {image_size: 32}\n",
     ["point [torch alexnet bs=2 ranks=1]: --image-size 32 is too small for alexnet (minimum 63)"]),
    ("matrix: {framework: [torch], model: [alexnet], batch_size: [2], data: [/nonexistent/imgs]}",
     ["--data-dir '/nonexistent/imgs' does not exist"]),
    ("matrix: {framework: [torch], model: [alexnet], batch_size: [2], runtime: [nosuchruntime]}",
     ["matrix.runtime: unknown runtime 'nosuchruntime'"]),
    ("matrix: {framework: [torch], model: [alexnet], batch_size: [2], strategy: [allreduce, ps]}",
     ["every combination is skipped by a rule"]),
]


@pytest.mark.parametrize("text,expected", BAD_PLANS)
def test_bad_plan_is_one_line_per_problem_exit_2_store_untouched(tmp_path, capsys, text, expected):
    plan = write_plan(tmp_path / "plan.yaml", text)
    store_path = tmp_path / "out" / "sweep.jsonl"
    assert cli.main(["sweep", str(plan), "--store", str(store_path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == len(expected), err
    for line, want in zip(err, expected):
        assert line.startswith(f"benchrun: error: {plan}: "), line
        assert want in line, line
    assert not (tmp_path / "out").exists()


def test_exact_error_line(tmp_path, capsys):
    plan = write_plan(tmp_path / "plan.yaml", "matrix: {framework: [torch], model: [alexnet], batch_size: [2, -1]}")
    assert cli.main(["sweep", str(plan)]) == 2
    assert capsys.readouterr().err == f"benchrun: error: {plan}: matrix.batch_size[1]: must be a positive integer\n"


def test_missing_plan_file_and_bad_options(tmp_path, capsys):
    assert cli.main(["sweep", str(tmp_path / "nope.yaml")]) == 2
    assert capsys.readouterr().err == f"benchrun: error: {tmp_path / 'nope.yaml'}: no such file\n"
    plan = write_plan(tmp_path / "plan.yaml", tiny_plan())
    assert cli.main(["sweep", str(plan), "--retries", "-1"]) == 2
    assert capsys.readouterr().err == "benchrun: error: --retries must be 0 or more, got -1\n"
    (tmp_path / "dir.jsonl").mkdir()
    assert cli.main(["sweep", str(plan), "--store", str(tmp_path / "dir.jsonl")]) == 2
    assert "is a directory; give a file path" in capsys.readouterr().err


# --- product, skip rules, hashes ---------------------------------------------------------------

def test_product_order_and_skip_rules():
    plan = parse_plan({
        "matrix": {"framework": ["torch", "tf"], "model": "alexnet", "batch_size": [1, 2], "ranks": [1, 2],
                   "num_ps": [0, 1], "strategy": ["none", "ddp", "ps"], "runtime": ["local", "docker"],
                   "image": ["img:a", "img:b"]},
    }, "p")
    run, skipped = expand(plan)
    # local ignores the image axis: 1 local + 2 docker images = 3 runtime/image pairs
    assert len(run) + len(skipped) == 2 * 2 * 2 * 2 * 3 * 3
    reasons = {}
    for point, reason in skipped:
        reasons.setdefault(reason, []).append(point.values)
    assert set(reasons) == {"strategy ddp is for torch only", "strategy ps is for tensorflow only",
                            "strategy ps needs num_ps 1 or more", "num_ps 1 needs strategy ps"}
    for point in run:
        v = point.values
        assert not (v["framework"] == "tensorflow" and v["strategy"] == "ddp")
        assert (v["strategy"] == "ps") == (v["num_ps"] > 0)
        assert (v["image"] is None) == (v["runtime"] == "local")
        assert (point.launcher == "local") == (v["ranks"] > 1 or v["strategy"] == "ps")
    assert len(run) == 2 * 2 * 3 * (1 + 1 + 0) + 2 * 2 * 3 * (1 + 0 + 1)  # torch: none, ddp; tf: none, ps
    # plan order: framework outermost, image innermost
    assert [p.values["framework"] for p in run[:2]] == ["torch", "torch"]
    assert run[0].values == {"framework": "torch", "model": "alexnet", "batch_size": 1, "ranks": 1, "num_ps": 0,
                             "strategy": "none", "data": "synthetic", "runtime": "local", "image": None}
    assert (run[1].values["runtime"], run[1].values["image"]) == ("docker", "img:a")
    assert run[0].spec().to_argv() == ["--framework", "torch", "--model", "alexnet", "--batch-size", "1",
                                   "--strategy", "none"]


def test_any_bench_option_is_an_axis_the_innermost():
    """Seeds and learning-rate rules (a time-to-accuracy study) vary like the matrix's own axes: each point
    gets one value of each as its bench option, named in its label and covered by its hash."""
    plan = parse_plan({"matrix": {"framework": "torch", "model": "smallcnn", "batch_size": [32, 512],
                                  "seed": [1, 2, 3], "lr_rule": ["none", "linear"]},
                       "bench": {"target_accuracy": 0.8, "image_size": 28}}, "p")
    run, skipped = expand(plan)
    assert len(run) == 2 * 3 * 2 and not skipped and len({p.config_hash for p in run}) == 12
    assert [(p.values["batch_size"], p.bench["seed"], p.bench["lr_rule"]) for p in run[:3]] == [
        (32, 1, "none"), (32, 1, "linear"), (32, 2, "none")]
    assert run[1].label() == "torch smallcnn bs=32 ranks=1 seed=1 lr_rule=linear"
    assert run[1].bench == {"target_accuracy": 0.8, "image_size": 28, "seed": 1, "lr_rule": "linear"}
    args = run[1].spec().to_argv()
    assert args[args.index("--seed") + 1] == "1" and args[args.index("--lr-rule") + 1] == "linear"
    same = parse_plan({"matrix": {"framework": "torch", "model": "smallcnn", "batch_size": [32, 512]},
                       "bench": {"target_accuracy": 0.8, "image_size": 28, "seed": 1, "lr_rule": "linear"}}, "p")
    assert expand(same)[0][0].config_hash == run[1].config_hash  # one value as an axis or in bench: one point
    with pytest.raises(PlanError, match=r"p: matrix.seed: also given in bench \(one value: bench; several: matrix\)"):
        parse_plan({"matrix": {"framework": "torch", "model": "alexnet", "batch_size": 2, "seed": [1, 2]},
                    "bench": {"seed": 3}}, "p")
    with pytest.raises(PlanError, match=r"p: matrix.lr_rule\[1\]: unknown value 'cosine' \(choices: none, linear, sqrt, lars\)"):
        parse_plan({"matrix": {"framework": "torch", "model": "alexnet", "batch_size": 2, "lr_rule": ["none", "cosine"]}}, "p")


def test_config_hash_is_stable():
    base = {"matrix": {"framework": ["torch"], "model": ["alexnet"], "batch_size": [2]},
            "bench": {"image_size": 64, "num_batches": 1}}
    (point,), _ = expand(parse_plan(base, "p"))
    # the documented formula (docs/sweeps.md), computed here by hand
    identity = ('{"bench":{"image_size":64,"num_batches":1},"point":{"batch_size":2,"data":"synthetic",'
                '"framework":"torch","image":null,"model":"alexnet","num_ps":0,"ranks":1,"runtime":"local",'
                '"strategy":"none"}}')
    assert point.config_hash == hashlib.sha256(identity.encode()).hexdigest()[:16]
    # and pinned: changing it orphans every existing store, so it must be deliberate
    assert point.config_hash == "19229322f8d85ccd"
    reordered = {"bench": {"num_batches": 1, "image_size": 64},
                 "matrix": {"batch_size": 2, "model": "alexnet", "framework": "pytorch"}, "timeout": 30}
    assert expand(parse_plan(reordered, "p"))[0][0].config_hash == point.config_hash
    changed = {**base, "bench": {"image_size": 64, "num_batches": 2}}
    assert expand(parse_plan(changed, "p"))[0][0].config_hash != point.config_hash
    docker = {**base, "matrix": {**base["matrix"], "runtime": ["docker"], "image": ["x"]}}
    assert expand(parse_plan(docker, "p"))[0][0].config_hash != point.config_hash


# --- plan size: counted before it is built ------------------------------------------------------

def huge_matrix() -> dict:
    """10^12 combinations: four axes of 1,000 values (a plan that once grew past 2 GB in 13 s, and on)."""
    values = list(range(1, 1001))
    return {"framework": "torch", "model": "alexnet", "batch_size": values, "seed": values, "num_batches": values,
            "image_size": [64 + v for v in values]}


def test_a_plan_is_counted_from_its_axes_before_any_point_is_built():
    plan = parse_plan({"matrix": huge_matrix()}, "p")
    assert sweep.size(plan) == 10**12  # arithmetic: it returns at once, whatever the count
    with pytest.raises(PlanError) as refused:
        sweep.check_size(plan, "plan.yaml", 10_000)
    assert refused.value.lines == ["plan.yaml: expands to 1,000,000,000,000 points (batch_size 1,000 x image_size 1,000 x "
                                   "num_batches 1,000 x seed 1,000), over --max-points 10,000: split the plan, or give "
                                   "--max-points N to take it as it is"]
    # a runtime without image runs once whatever the image list: the count is the product's, not the raw one
    mixed = parse_plan({"matrix": {"framework": ["torch", "tf"], "model": "alexnet", "batch_size": [1, 2],
                                   "strategy": ["none", "ps"], "runtime": ["local", "docker"],
                                   "image": ["a", "b", "c"]}}, "p")
    assert sweep.size(mixed) == 2 * 2 * 2 * (1 + 3) == len(list(sweep.combinations(mixed)))
    assert sweep.factors(mixed) == [("framework", 2), ("batch_size", 2), ("strategy", 2), ("runtime x image", 4)]
    assert sweep.check_size(mixed, "p", 32) == 32


def test_a_huge_plan_is_refused_in_one_line_at_once_in_bounded_memory(tmp_path):
    """The 10^12-point plan: one line naming its size and axes, exit 2, nothing written. Under a 2 GiB
    address-space limit (the eager expansion hit it in seconds), with a peak RSS of what benchrun needs
    to start (~55 MB here: 250 is room for another Python, not for a list of points)."""
    plan = write_plan(tmp_path / "plan.yaml", {"matrix": huge_matrix()})
    store_path = tmp_path / "out" / "sweep.jsonl"
    result = measured([sys.executable, "-m", "runners", "sweep", str(plan), "--store", str(store_path), "--dry-run"],
                      limit_mb=2048, timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr.splitlines() == [
        f"benchrun: error: {plan}: expands to 1,000,000,000,000 points (batch_size 1,000 x image_size 1,000 x "
        "num_batches 1,000 x seed 1,000), over --max-points 10,000: split the plan, or give --max-points N to take "
        "it as it is"]
    assert result.stdout == "" and not (tmp_path / "out").exists()
    assert result.max_rss_mb < 250, result.max_rss_mb
    assert result.seconds < 60  # seconds in fact (interpreter start-up); an expansion never ends


def test_a_plan_file_built_to_expand_is_refused_before_it_is_validated(tmp_path):
    """YAML anchors used within anchors (a "billion laughs"): 1 KB that holds 10^9 values once aliases are
    expanded, which validation would walk for ever; a file far larger than any plan; and a plan with
    thousands of bad values says 20 of them and how many more, not thousands of lines."""
    laughs = ["l0: &l0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    laughs += [f"l{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * 10) + "]" for i in range(1, 9)]
    bomb = write_plan(tmp_path / "bomb.yaml", "\n".join([*laughs, "matrix: {framework: torch, model: alexnet, "
                                                          "batch_size: *l8}"]) + "\n")
    with pytest.raises(PlanError) as refused:
        sweep.load_plan(bomb)
    assert refused.value.lines == [f"{bomb}: holds over 1,000,000 values once its YAML aliases are expanded "
                                   "(anchors used within anchors?): a plan lists values per axis, thousands at most"]
    big = write_plan(tmp_path / "big.yaml", "# " + "x" * (256 << 10) + "\n")
    with pytest.raises(PlanError, match=r"big.yaml: 262,147 bytes, over 262,144: a plan lists values per axis"):
        sweep.load_plan(big)
    many = write_plan(tmp_path / "many.yaml", {"matrix": {"framework": "torch", "model": "alexnet",
                                                          "batch_size": [f"x{i}" for i in range(5000)]}})
    with pytest.raises(PlanError) as refused:
        sweep.load_plan(many)
    assert len(refused.value.lines) == 21 and refused.value.lines[-1] == f"{many}: ... and 4,980 more problems"


def seeds_plan(tmp_path, batch_sizes: int, seeds: int, **matrix) -> Path:
    return write_plan(tmp_path / "plan.yaml", tiny_plan(batch_size=list(range(1, batch_sizes + 1)),
                                                        seed=list(range(seeds)), **matrix))


def test_max_points_refuses_or_admits_and_a_large_dry_run_is_a_summary(tmp_path, capsys):
    plan = seeds_plan(tmp_path, 3, 100)
    store_path = tmp_path / "sweep.jsonl"
    assert cli.main(["sweep", str(plan), "--store", str(store_path), "--max-points", "299", "--dry-run"]) == 2
    assert capsys.readouterr().err == (f"benchrun: error: {plan}: expands to 300 points (batch_size 3 x seed 100), over "
                                       "--max-points 299: split the plan, or give --max-points N to take it as it is\n")
    assert cli.main(["sweep", str(plan), "--store", str(store_path), "--max-points", "0"]) == 2
    assert capsys.readouterr().err == "benchrun: error: --max-points must be 1 or more, got 0\n"
    assert cli.main(["sweep", str(plan), "--store", str(store_path), "--max-points", "300", "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "300 combinations: 300 to run, 0 already in" in err
    listed = [line for line in out.splitlines() if not line.startswith("    ")]
    assert listed[:3] == ["300 combinations, over the 200 listed one by one: a summary",
                          "axes with more than one value: batch_size 3 x seed 100", "first 5:"]
    assert listed[3].endswith("  run   torch alexnet bs=1 ranks=1 seed=0") and listed[8:10] == ["... 290 more ...", "last 5:"]
    assert listed[-1].endswith("  run   torch alexnet bs=3 ranks=1 seed=99") and len(listed) == 15
    assert "--batch-size 3" in out.splitlines()[-1] and not store_path.exists()


def test_a_large_dry_run_summarises_the_skipped_by_rule(tmp_path, capsys):
    plan = seeds_plan(tmp_path, 2, 101, strategy=["none", "ddp", "ps"])  # ps: tensorflow only, 202 skipped
    assert cli.main(["sweep", str(plan), "--store", str(tmp_path / "s.jsonl"), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "606 combinations: 404 to run, 0 already in" in err and "202 skipped by rule" in err
    assert err.splitlines()[1:] == ["  skipped  202 points  (strategy ps is for tensorflow only)"]
    assert out.splitlines()[-1].endswith("  skip  torch alexnet bs=2 ranks=1 strategy=ps seed=100  "
                                         "(strategy ps is for tensorflow only)")


def test_a_large_dry_run_counts_what_the_store_has_as_it_reads_it(tmp_path, capsys):
    """The store is read one entry at a time (never all in memory): a point stored ok is done, one stored
    failed still runs, and a torn last line is a warning."""
    plan = seeds_plan(tmp_path, 3, 100)
    points, _ = expand(sweep.load_plan(plan))
    store_path = tmp_path / "sweep.jsonl"
    with store_path.open("w") as f:
        for point, status in ((points[0], "ok"), (points[1], "failed")):
            f.write(json.dumps({"sweep": {"config_hash": point.config_hash, "attempt": 1},
                                "record": {"status": status}}) + "\n")
        f.write('{"sweep": {"config_hash": "torn')
    assert cli.main(["sweep", str(plan), "--store", str(store_path), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "300 combinations: 299 to run, 1 already in" in err and "line 3 is incomplete" in err
    assert f"{points[0].config_hash}  done  torch alexnet bs=1 ranks=1 seed=0" in out
    assert f"{points[1].config_hash}  run   torch alexnet bs=1 ranks=1 seed=1" in out


@pytest.mark.slow
def test_a_plan_over_the_default_limit_dry_runs_in_flat_memory(tmp_path):
    """12,000 points under --max-points: the summary, in the memory a 300-point plan takes (the eager
    lists of points and their requests took ~30 MB more for as many; 15 MB is room for noise)."""
    def dry_run(batch_sizes: int):
        plan = seeds_plan(tmp_path, batch_sizes, 1000 if batch_sizes > 1 else 300)
        return measured([sys.executable, "-m", "runners", "sweep", str(plan), "--store", str(tmp_path / "s.jsonl"),
                         "--dry-run", "--max-points", "12000"], limit_mb=2048, timeout=540)

    small, large = dry_run(1), dry_run(12)
    assert small.returncode == large.returncode == 0, large.stderr
    assert "12,000 combinations, over the 200 listed one by one: a summary" in large.stdout
    assert len(large.stdout.splitlines()) < 40
    assert large.max_rss_mb - small.max_rss_mb < 15, (small.max_rss_mb, large.max_rss_mb)


# --- the store reader ---------------------------------------------------------------------------

def test_iter_records_reads_plain_and_envelopes_and_skips_a_torn_tail(tmp_path):
    path = tmp_path / "s.jsonl"
    plain = {"schema_version": "1.1", "status": "ok", "n": 1}
    wrapped = {"schema_version": "1.1", "status": "oom", "n": 2}
    path.write_text(json.dumps(plain) + "\n"
                    + json.dumps({"sweep": {"config_hash": "a", "attempt": 1}, "record": wrapped, "error": None}) + "\n"
                    + json.dumps({"sweep": {"config_hash": "b", "attempt": 1}, "record": None, "error": "boom"}) + "\n"
                    + '{"sweep": {"config_hash": "c"}, "rec')
    with pytest.warns(store.StoreWarning, match="line 4 is incomplete"):
        assert list(store.iter_records(path)) == [plain, wrapped]
    with pytest.warns(store.StoreWarning):
        entries = list(store.iter_entries(path))
    assert [e["sweep"] for e in entries] == [None, {"config_hash": "a", "attempt": 1}, {"config_hash": "b", "attempt": 1}]
    assert entries[2]["error"] == "boom"
    with pytest.warns(store.StoreWarning, match="cut an incomplete last line"):
        assert store.repair_tail(path)
    assert path.read_text().endswith('"error": "boom"}\n')
    assert not store.repair_tail(path)
    path.write_text('{"a": 1}\nnot json\n{"b": 2}\n')
    with pytest.raises(store.CorruptStore, match="line 2 is not valid JSON"):
        list(store.iter_records(path))


# --- dry run -----------------------------------------------------------------------------------

def test_dry_run_lists_commands_and_runs_nothing(tmp_path, capsys):
    plan = write_plan(tmp_path / "plan.yaml", tiny_plan(ranks=[1, 2], strategy=["none", "ps"], num_ps=[0, 1]))
    store_path = tmp_path / "sweep.jsonl"
    assert cli.main(["sweep", str(plan), "--store", str(store_path), "--dry-run", "--timeout", "30"]) == 0
    out, err = capsys.readouterr()
    assert "8 combinations: 2 to run, 0 already in" in err and "6 skipped by rule" in err
    assert "skipped  torch alexnet bs=2 ranks=1 strategy=ps ps=1  (strategy ps is for tensorflow only)" in err
    runs = [line for line in out.splitlines() if "  run   " in line]
    assert len(runs) == 2
    assert "-m benchmarks --framework torch --model alexnet --batch-size 2 --strategy none --image-size 64" in out
    lines = out.splitlines()
    two = lines[lines.index(next(line for line in runs if "ranks=2" in line)) + 1]  # the local launcher's rank command
    assert "-m benchmarks --framework torch --model alexnet --batch-size 2 --strategy none" in two
    assert two.endswith("--timeout 30.0") and "runners launch" not in out
    assert not store_path.exists() and not (tmp_path / "sweep.jsonl.logs").exists()


@pytest.mark.parametrize("runtime", ["docker", "apptainer", "udocker"])
def test_a_container_runtime_plan_is_checked_and_shown_with_its_mounts(runtime, tmp_path, capsys):
    """A container point's check plans its run as it would run (its mounts must exist to be checked) and
    writes nothing; the dry run shows the runtime's own command."""
    plan = write_plan(tmp_path / "plan.yaml", tiny_plan(runtime=[runtime], image=["dlbench-torch:0.1.0"]))
    assert cli.main(["sweep", str(plan), "--store", str(tmp_path / "sweep.jsonl"), "--dry-run"]) == 0
    out, err = capsys.readouterr()
    assert "1 to run" in err
    assert "/tmp/RESULTS:/results" in out and "benchrun-dry-run-" not in out
    assert not (tmp_path / "sweep.jsonl").exists()


# --- real sweeps -------------------------------------------------------------------------------

@pytest.mark.slow
def test_sweep_stores_envelopes_and_a_rerun_skips_completed_points(tmp_path):
    plan = write_plan(tmp_path / "plan.yaml", tiny_plan(batch_size=[1, 2]))
    store_path = tmp_path / "res" / "sweep.jsonl"
    first = benchrun("sweep", plan, "--store", store_path)
    assert first.returncode == 0, first.stderr
    stored = lines(store_path)
    assert [e["sweep"]["point"]["batch_size"] for e in stored] == [1, 2]
    schema = json.loads(SCHEMA_FILE.read_text())
    for entry in stored:
        assert set(entry) == {"sweep", "record", "error"} and entry["error"] is None
        assert entry["sweep"]["attempt"] == 1 and entry["sweep"]["plan"] == str(plan.resolve())
        assert entry["record"]["status"] == "ok"
        assert entry["record"]["config"]["batch_size"] == entry["sweep"]["point"]["batch_size"]
        jsonschema.validate(entry["record"], schema)
        assert Path(entry["sweep"]["log"]).exists()
    assert [r["config"]["batch_size"] for r in store.iter_records(store_path)] == [1, 2]
    assert "ok" in first.stderr and "skipped by rule" in first.stderr  # summary table
    again = benchrun("sweep", plan, "--store", store_path)
    assert again.returncode == 0, again.stderr
    assert "2 combinations: 0 to run, 2 already in" in again.stderr
    assert store_path.read_text().count("\n") == 2


@pytest.mark.slow
def test_timeouts_are_retried_and_recorded(tmp_path):
    plan = write_plan(tmp_path / "plan.yaml", tiny_plan())
    store_path = tmp_path / "sweep.jsonl"
    result = benchrun("sweep", plan, "--store", store_path, "--timeout", "0.5", "--retries", "1")
    assert result.returncode == 1, result.stderr
    stored = lines(store_path)
    assert [(e["sweep"]["attempt"], e["record"]["status"]) for e in stored] == [(1, "timeout"), (2, "timeout")]
    assert stored[0]["record"]["error"]["kind"] == "timeout"
    assert len({e["sweep"]["config_hash"] for e in stored}) == 1
    # a rerun tries the failed point again (attempts go on), and without the tiny timeout it succeeds
    result = benchrun("sweep", plan, "--store", store_path)
    assert result.returncode == 0, result.stderr
    assert [(e["sweep"]["attempt"], e["record"]["status"]) for e in lines(store_path)][-1] == (3, "ok")


@pytest.mark.slow
def test_a_run_without_record_is_stored_as_failed_and_retried(tmp_path):
    marker = uuid.uuid4().hex
    plan = write_plan(tmp_path / "plan.yaml", tiny_plan())
    store_path = tmp_path / "sweep.jsonl"
    sweep = subprocess.Popen(
        [sys.executable, "-m", "runners", "sweep", str(plan), "--store", str(store_path), "--retries", "1"],
        env={**os.environ, "PYTHONPATH": str(ROOT), "DLBENCH_TEST_MARK": marker},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        bench = None
        deadline = time.monotonic() + 60
        while bench is None and time.monotonic() < deadline:
            for pid in marked(marker):
                argv = cmdline(pid)
                parent = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[1] if argv else b"0"
                if "benchmarks" in argv and "--output" in argv and "runners.pointrun" in cmdline(int(parent)):
                    bench = pid
            time.sleep(0.05)
        assert bench, "bench never started"
        os.kill(bench, signal.SIGKILL)  # bench dies before writing anything: no record
        out, err = sweep.communicate(timeout=120)
    finally:
        sweep.kill()
    assert sweep.returncode == 0, err
    first, second = lines(store_path)
    assert first["record"] is None and first["sweep"]["attempt"] == 1
    assert first["error"].startswith("bench wrote no record (killed by signal 9)"), first["error"]
    assert "command: " in first["error"] and first["sweep"]["exit_code"] == 128 + signal.SIGKILL
    assert second["record"]["status"] == "ok" and second["sweep"]["attempt"] == 2
    assert list(store.iter_records(store_path)) == [second["record"]]


@pytest.mark.slow
def test_kill_9_mid_sweep_then_rerun_loses_and_duplicates_nothing(tmp_path):
    marker = uuid.uuid4().hex
    plan = write_plan(tmp_path / "plan.yaml", tiny_plan(batch_size=[1, 2], ranks=[1, 2]))
    store_path = tmp_path / "sweep.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DLBENCH_TEST_MARK": marker}
    argv = [sys.executable, "-m", "runners", "sweep", str(plan), "--store", str(store_path)]
    sweep = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    try:
        # the 2nd point has 2 ranks, started by benchrun's local launcher in their own sessions
        deadline = time.monotonic() + 120
        ranks = []
        while len(ranks) < 2 and time.monotonic() < deadline:
            local = b"DLBENCH_LAUNCHER=benchrun-local"
            ranks = [p for p in marked(marker) if "--output" in cmdline(p) and local in Path(f"/proc/{p}/environ").read_bytes()]
            time.sleep(0.05)
        assert len(ranks) >= 2, "the 2-rank point never started"
        sweep.send_signal(signal.SIGKILL)
        sweep.wait(timeout=10)
    finally:
        sweep.kill()
    # everything the sweep started is stopped at once, well before the run could have ended by itself
    killed_at = time.monotonic()
    left = marked(marker)
    while left and time.monotonic() < killed_at + 30:
        time.sleep(0.1)
        left = marked(marker)
    print(f"all processes gone {time.monotonic() - killed_at:.1f} s after kill -9")
    assert not left, [(p, cmdline(p)) for p in left]
    assert time.monotonic() - killed_at < 6
    before = lines(store_path)  # only complete lines
    assert [e["sweep"]["point"]["ranks"] for e in before] == [1] and before[0]["record"]["status"] == "ok"
    rerun = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert rerun.returncode == 0, rerun.stderr
    assert "4 combinations: 3 to run, 1 already in" in rerun.stderr
    after = lines(store_path)
    assert after[0] == before[0]
    assert sorted((e["sweep"]["point"]["batch_size"], e["sweep"]["point"]["ranks"]) for e in after) == [
        (1, 1), (1, 2), (2, 1), (2, 2)]
    assert len({e["sweep"]["config_hash"] for e in after}) == 4
    assert all(e["record"]["status"] == "ok" and e["sweep"]["attempt"] == 1 for e in after)
    # the runtime asked for reaches every rank's record, even on a host that is itself a container
    assert all(e["record"]["provenance"]["requested_runtime"] == "local" for e in after)
    assert all(e["record"]["world"]["workers"] == e["sweep"]["point"]["ranks"] for e in after)
    assert not marked(marker)


@pytest.mark.slow
def test_sigterm_stores_the_interrupted_run_and_stops(tmp_path):
    marker = uuid.uuid4().hex
    plan = write_plan(tmp_path / "plan.yaml", tiny_plan(batch_size=[1, 2]))
    store_path = tmp_path / "sweep.jsonl"
    sweep = subprocess.Popen(
        [sys.executable, "-m", "runners", "sweep", str(plan), "--store", str(store_path)],
        env={**os.environ, "PYTHONPATH": str(ROOT), "DLBENCH_TEST_MARK": marker},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 60
        # once bench's worker exists, bench handles SIGTERM (before that it dies without a record)
        while not any("benchmarks.run.worker" in cmdline(p) for p in marked(marker)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert time.monotonic() < deadline, "bench's worker never started"
        sweep.send_signal(signal.SIGTERM)
        out, err = sweep.communicate(timeout=60)
    finally:
        sweep.kill()
    assert sweep.returncode == 130, err
    (entry,) = lines(store_path)
    assert entry["record"]["status"] == "interrupted" and entry["sweep"]["point"]["batch_size"] == 1
    assert "not run (stopped)" in err
    assert not marked(marker)


@pytest.mark.slow
def test_two_sweeps_of_one_store_at_once_run_nothing_twice(tmp_path):
    """The second sweep of a store being written is refused at once, in one line naming the first; the
    first runs every point once (issue 26: before, both ran every point and the store held each twice)."""
    plan = write_plan(tmp_path / "plan.yaml", tiny_plan(batch_size=[1, 2]))
    store_path = tmp_path / "sweep.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "runners", "sweep", str(plan), "--store", str(store_path)]
    first = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 60
        lock = Path(f"{store_path}.lock")
        while not (lock.exists() and "the sweep of" in lock.read_text()):
            assert time.monotonic() < deadline and first.poll() is None, "the first sweep never held its store"
            time.sleep(0.05)
        second = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, cwd=ROOT)
        assert second.returncode == 2, second.stderr
        assert second.stderr.strip().splitlines() == [
            f"benchrun: error: --store {str(store_path)!r} is being written by the sweep of {plan} "
            f"(pid {first.pid} on {os.uname().nodename}, since " + second.stderr.split(", since ", 1)[1].split(")")[0]
            + "); wait for it to end, or give another --store"]
        assert first.wait(timeout=300) == 0, first.stderr.read()
    finally:
        first.kill()
    stored = lines(store_path)
    assert sorted(e["sweep"]["point"]["batch_size"] for e in stored) == [1, 2]


@pytest.mark.slow
def test_a_sweep_and_benchrun_runs_write_one_store_at_once(tmp_path):
    """A sweep of two points and two `benchrun run --results` runs into the same store, started together
    (real processes, real tiny runs): every run is stored once, whole (the sweep's as envelopes, the runs'
    as plain records), none lost, none twice."""
    results = tmp_path / "results"
    store_path = results / "records.jsonl"  # where `benchrun run --results DIR` appends
    plan = write_plan(tmp_path / "plan.yaml", tiny_plan(batch_size=[1, 2]))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    run = [sys.executable, "-m", "runners", "run", "--runtime", "local", "--results", str(results), "--",
           "--framework", "torch", "--model", "alexnet", "--batch-size", "2", "--image-size", "64",
           "--num-warmup-batches", "0", "--num-batches", "1", "--num-threads", "1"]
    started = [subprocess.Popen([sys.executable, "-m", "runners", "sweep", str(plan), "--store", str(store_path)],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)]
    started += [subprocess.Popen(run, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
                for _ in range(2)]
    said = [proc.communicate(timeout=600) for proc in started]
    assert [proc.returncode for proc in started] == [0, 0, 0], [err[-2000:] for _, err in said]
    stored = lines(store_path)  # every line whole JSON
    swept = [entry for entry in stored if "sweep" in entry]
    plain = [entry for entry in stored if "sweep" not in entry]
    assert sorted(entry["sweep"]["point"]["batch_size"] for entry in swept) == [1, 2]
    printed = {last_json_line(out)["run_id"] for out, _ in said[1:]}
    assert {record["run_id"] for record in plain} == printed and len(plain) == 2
    records = [*(entry["record"] for entry in swept), *plain]
    assert all(record["status"] == "ok" for record in records) and len({r["run_id"] for r in records}) == 4
