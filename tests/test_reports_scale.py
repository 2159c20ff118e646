"""What makes reading large stores fast must not change a number: the report and the gate computed
over the slim records DuckDB gives (keys computed in SQL) against whole records parsed and keyed in
Python; the chunked line reader of runners.store; figures drawn in worker processes. Speed is
measured by perf/report_scale.py, not here."""

from __future__ import annotations

import json
import random
import warnings
from pathlib import Path

import pytest

from infra.helpers import ROOT

CASE = ROOT / "examples" / "seed-000-table1"


def _varied_store(path: Path, copies: int = 12, seed: int = 0) -> Path:
    """The case study's 20 runs and the 11 of its `why` store (10 with traces, 1 `bench comm`), each
    `copies` times with new run ids and varied: throughput and memory noise, framework label, host,
    runtime, some out of memory or failed, some with FLOP counts and energy, one max-batch search;
    plain lines and sweep envelopes mixed, a duplicate line and a torn last line."""
    rng = random.Random(seed)
    lines = [json.loads(line) for line in (CASE / "results.jsonl").read_text().splitlines()]
    lines += [json.loads(line) for line in (CASE / "why" / "results.jsonl").read_text().splitlines()]
    out = []
    for copy in range(copies):
        for index, line in enumerate(lines):
            line = json.loads(json.dumps(line))
            record = line["record"] if "sweep" in line else line
            record["run_id"] = f"{rng.getrandbits(128):032x}"
            record["timestamp_utc"] = f"2026-{1 + copy % 12:02d}-{1 + index:02d}T00:00:{rng.randrange(60):02d}.000Z"
            if record.get("kind") != "comm":
                record["config"]["framework"] = record["provenance"]["framework"]["name"] = rng.choice(
                    [record["config"]["framework"], "torch"])
                record["provenance"]["hostname"] = f"node{rng.randrange(4)}"
                record["provenance"]["requested_runtime"] = rng.choice(["local", "local", "docker"])
                record["memory"]["host_rss_peak_bytes"] = int(record["memory"]["host_rss_peak_bytes"] * rng.uniform(0.9, 1.1))
                if record["status"] == "ok" and rng.random() < 0.08:
                    record.update(status=rng.choice(["oom", "failed"]), throughput=None, step_time_s=None, input_wait_s=None,
                                  error={"kind": "oom", "message": f"out of memory {copy}"})
                elif record["status"] == "ok":
                    record["throughput"]["images_per_sec"] *= rng.gauss(1.0, 0.05)
                    if rng.random() < 0.3:
                        record["flops"] = {"achieved_flops_per_sec": rng.uniform(1e9, 2e9), "mfu": None}
                        record["energy"] = {"images_per_joule": rng.uniform(0.1, 0.3), "joules": 5.0}
                if copy == 1 and index == 0:
                    record["batch_search"] = {"search_id": "ab" * 16, "probe": 5, "final": True, "max_batch": 4,
                                              "stop_reason": "batch 4 fits and 5 runs out of memory"}
            out.append(json.dumps(line) if "sweep" in line or copy % 2 else json.dumps({"sweep": {"point": index},
                                                                                        "record": record}))
    out.append(out[5])  # the same run twice: counted once
    path.write_text("\n".join(out) + '\n{"sweep": {"point": 1}, "rec')
    return path


@pytest.fixture(scope="module")
def varied(tmp_path_factory) -> Path:
    return _varied_store(tmp_path_factory.mktemp("varied") / "store.jsonl")


def _report(records, comm, out: Path, monkeypatch) -> tuple[str, list]:
    """The report's Markdown and every figure's data (what its drawing would be given)."""
    from runners import plots
    from runners.commands import report

    figures = []
    monkeypatch.setattr(plots, "_render", lambda draw, path, *data: figures.append((draw.__name__, path.name, data)) or path)
    out.mkdir()
    return report.build(records, ["store"], out, comm).markdown(), figures


def _once(records: list[dict]) -> list[dict]:
    """The first record of each run_id, as the DuckDB reader keeps them."""
    seen = set()
    return [r for r in records if r["run_id"] not in seen and not seen.add(r["run_id"])]


def test_duckdb_records_give_the_python_readers_report_and_gate(varied, tmp_path, monkeypatch):
    """Slim records whose keys DuckDB computed against whole records parsed and keyed in Python."""
    from runners.commands import compare
    from runners.reporting import aggregate, keys, load

    found = load.load([varied], warn=lambda message: None)
    comm = load.load([varied], warn=lambda message: None, kind="comm")
    whole = _once(load.load_python([varied], warn=lambda message: None))
    lines = [json.loads(line) for store in (CASE / "results.jsonl", CASE / "why" / "results.jsonl")
             for line in store.read_text().splitlines()]
    comm_lines = sum((line.get("record") or line).get("kind") == "comm" for line in lines)
    assert [r["run_id"] for r in found] == [r["run_id"] for r in whole]
    assert len(found) == (len(lines) - comm_lines) * 12 and len(comm) == comm_lines * 12
    assert [r.key for r in found] == [keys.key_values(r) for r in whole]
    statuses = {r["status"] for r in found}
    assert {"ok", "oom", "failed"} <= statuses and aggregate.having(found, "trace") and aggregate.max_batch_answers(found)
    assert aggregate.metric(found, "flops", "achieved_flops_per_sec") and aggregate.group(found, ("runtime",)).keys() == {
        ("local",), ("docker",)}
    md_found, figures_found = _report(found, comm, tmp_path / "found", monkeypatch)
    md_whole, figures_whole = _report(whole, comm, tmp_path / "whole", monkeypatch)
    assert md_found == md_whole
    assert figures_found == figures_whole and len(figures_found) > 20
    for section in ("## Why it does not scale", "## Container runtime overhead", "Largest batch that fits", "Out of memory at",
                    "GFLOP/s", "## Runs that did not finish"):
        assert section in md_found
    # the gate: every Summary the same, values, intervals and runs included
    half = len(found) // 2
    def gate(base, new):
        rows, only_base, only_new = compare.compare(base, new, 0.05, list(compare.METRICS))
        summary = lambda s: None if s is None else (s.values, s.ci, s.method, s.ids)  # noqa: E731 - a one-line view, local to the gate
        return ([(key, [(v.metric, summary(v.base), summary(v.new), v.change, v.verdict) for v in vs]) for key, vs in rows],
                [(k, keys.ids(rs)) for k, rs in only_base], [(k, keys.ids(rs)) for k, rs in only_new])

    assert gate(found[:half], found[half:]) == gate(whole[:half], whole[half:])


def test_group_keeps_store_order_and_first_appearance(varied):
    from runners.reporting import aggregate, keys, load

    found = load.load([varied], warn=lambda message: None)
    whole = _once(load.load_python([varied], warn=lambda message: None))
    for fields in (keys.KEY_FIELDS, ("data",), ("framework", "model"), keys.without("runtime"), ("runtime", "batch_size")):
        expected: dict[tuple, list[str]] = {}
        for record in whole:
            expected.setdefault(tuple(keys.key_of(record)[name] for name in fields), []).append(record["run_id"])
        groups = aggregate.group(found, fields)
        assert list(groups) == sorted(expected, key=lambda key: tuple(map(str, key)))
        assert {key: [r["run_id"] for r in members] for key, members in groups.items()} == expected


def _blocks(monkeypatch, size: int):
    from runners import store

    monkeypatch.setattr(store, "BLOCK", size)
    return store


@pytest.mark.parametrize("block", [7, 64, 1 << 20])
def test_chunked_store_lines(tmp_path, monkeypatch, block):
    store = _blocks(monkeypatch, block)
    lines = ['{"run_id": "a", "kind": "comm"}', "", '{"run_id": "b"}', "   ", '{"run_id": "c", "kind": "comm"}']
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(lines) + '\n{"run_id": "d", "kin')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [r["run_id"] for r in store.iter_records(path)] == ["a", "b", "c"]
        assert [r["run_id"] for r in store.iter_records(path, mentioning=b'"comm"')] == ["a", "c"]
    assert [str(w.message) for w in caught] == [f"{path}: line 6 is incomplete (torn write): skipped"] * 2
    # a complete last line that is not JSON is a torn write too; before the last line it is corruption
    path.write_text("\n".join(lines) + '\n{"run_id": "d", "kind": "comm"\n')
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert [r["run_id"] for r in store.iter_records(path, mentioning=b'"comm"')] == ["a", "c"]
    assert [str(w.message) for w in caught] == [f"{path}: line 6 is not valid JSON (torn write?): skipped"]
    path.write_text('{"run_id": "a"}\n{"run_id": "x", "kind": "comm"\n' + "\n".join(lines) + "\n")
    with pytest.raises(store.CorruptStore, match=r"s.jsonl: line 2 is not valid JSON: Expecting ',' delimiter: line 2 column 1"):
        list(store.iter_records(path, mentioning=b'"comm"'))
    # a bad line without the bytes looked for is not read at all
    path.write_text('{"run_id": "a"}\n{"run_id": "x", "kind": \n' + "\n".join(lines) + "\n")
    assert [r["run_id"] for r in store.iter_records(path, mentioning=b'"comm"')] == ["a", "c"]
    path.write_text('{"run_id": "a"}\n[1, 2]\n')
    with pytest.raises(store.CorruptStore, match="line 2 is not a JSON object"):
        list(store.iter_records(path))


def test_figures_drawn_in_parallel_are_the_ones_drawn_inline(tmp_path):
    from runners import plots
    from runners.reporting import why

    losses = [why.ScalingLoss({"workers": w}, w, 0.3, 0.25, {"exposed_communication": 0.01, "input_wait": 0.001,
                                                                  "straggler_wait": 0.02, "compute": -0.015, "idle": None},
                                  True, None, 0.5, (1.1, 1.0), "a", "b") for w in (2, 4)]
    rows = [("allreduce n=2", [{"bytes": 2 ** k, "time_s": 1e-5 * k, "busbw_gbps": 0.1 * k} for k in range(1, 6)])]
    inline = [plots.scaling_loss(losses, "t", tmp_path / "loss-inline.png"),
              plots.network(rows, "busbw_gbps", tmp_path / "net-inline.png", 10.0)]
    with plots.in_parallel(2):
        parallel = [plots.scaling_loss(losses, "t", tmp_path / "loss.png"),
                    plots.network(rows, "busbw_gbps", tmp_path / "net.png", 10.0)]
        assert plots._pool is not None
    assert plots._pool is None
    for a, b in zip(inline, parallel):
        assert a.read_bytes() == b.read_bytes() and a.read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(RuntimeError, match="cannot draw"):  # a figure that fails fails the report, when the block ends
        with plots.in_parallel(2):
            plots._render(_fails, tmp_path / "bad.png")
    assert plots._pool is None


def _fails(path: Path) -> None:
    raise RuntimeError(f"cannot draw {path.name}")


def test_no_transfer_is_predicted_for_a_strategy_no_comm_op_measures():
    """The `why` store's 2-rank DDP runs get their exchange from its `bench comm` record; the same run under
    fsdp moves all-gathers and reduce-scatters that no comm op measures, so nothing is predicted."""
    from runners.reporting import network

    records = [json.loads(line) for line in (CASE / "why" / "results.jsonl").read_text().splitlines()]
    comm = [r for r in records if r.get("kind") == "comm"]
    ddp = next(r for r in records if r.get("kind") != "comm" and r["world"]["workers"] == 2)
    assert ddp["config"]["strategy"] == "ddp" and network.predicted_transfer(ddp, comm) is not None
    fsdp = {**ddp, "config": {**ddp["config"], "strategy": "fsdp"}}
    assert network.predicted_transfer(fsdp, comm) is None
