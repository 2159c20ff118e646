"""The DuckDB reader (runners.reporting.scan) against the Python one it replaced (load.load_python),
and what it adds: several stores and directories, de-duplication by run_id, --where/--since/--until,
export --parquet. Scale is measured by perf/report_scale.py, not here."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from infra.helpers import ROOT, benchrun
from infra.records import RecordFactory

CASE = ROOT / "examples" / "seed-000-table1"
STORE = CASE / "results.jsonl"


def _tables(records: list[dict], out: Path) -> str:
    from runners.commands import report

    out.mkdir()
    return report.build(records, ["store"], out).markdown()


def test_columnar_reader_gives_the_python_readers_tables_on_the_case_study(tmp_path):
    from runners.commands import compare
    from runners.reporting import load

    old, new = load.load_python([STORE]), load.load([STORE])
    assert len(new) == len(old) == 20
    assert _tables(new, tmp_path / "new") == _tables(old, tmp_path / "old")
    # the gate, on the same records in another order
    def gate(records):
        rows, only_base, only_new = compare.compare(records, records[::-1], 0.05, list(compare.METRICS))
        summary = lambda s: None if s is None else (s.values, s.ci, s.method, s.ids)  # noqa: E731 - a one-line view, local to the gate
        return [(key, [(v.metric, summary(v.base), summary(v.new), v.change, v.verdict) for v in vs]) for key, vs in rows]

    assert gate(new) == gate(old) and len(gate(old)) == 20  # every run its own configuration


def test_export_csv_is_the_python_readers_on_the_case_study(tmp_path):
    # results.csv was written by `benchrun export` before the DuckDB reader (main at 1188257); since, the one
    # change is the config.step_timing column (empty: the records predate schema 1.14), checked then to leave
    # every other byte as the Python reader wrote it
    result = benchrun("export", STORE, "--csv", tmp_path / "all.csv", "--parquet", tmp_path / "all.parquet")
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "all.csv").read_bytes() == (CASE / "results.csv").read_bytes()
    import duckdb

    rows = duckdb.sql(f"SELECT * FROM '{tmp_path / 'all.parquet'}'").fetchall()
    with (tmp_path / "all.csv").open() as f:
        expected = list(csv.reader(f))
    assert [c[0] for c in duckdb.sql(f"DESCRIBE SELECT * FROM '{tmp_path / 'all.parquet'}'").fetchall()] == expected[0]
    assert [["" if v is None else str(v) for v in row] for row in rows] == expected[1:]


def _write(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def test_several_stores_directories_duplicates_and_filters(tmp_path):
    from runners.reporting import load

    lines = STORE.read_text().splitlines()  # 20 envelopes: 10 all-reduce then PS runs
    a = _write(tmp_path / "a.jsonl", lines[:12])
    b = _write(tmp_path / "b.jsonl", lines[8:])  # 4 runs also in a
    d = _write(tmp_path / "dir" / "nightly" / "c.jsonl", [json.dumps(json.loads(line)["record"]) for line in lines[:3]])
    records = load.load([a, b, tmp_path / "dir"])
    ids = [r["run_id"] for r in records]
    assert len(ids) == len(set(ids)) == 20 and ids == [r["run_id"] for r in load.load_python([STORE])]
    assert len(load.load([d, d])) == 3  # a store given twice counts once
    ps = load.load([STORE], where=["strategy=ps"])
    assert len(ps) == 16 and {r["config"]["strategy"] for r in ps} == {"ps"}
    two = load.load([STORE], where=["strategy=ps,allreduce", "workers=2"])
    assert {r["world"]["workers"] for r in two} == {2} and len(two) == 10
    stamps = sorted(r["timestamp_utc"] for r in records)
    later = load.load([STORE], since=stamps[10][:19])
    assert sorted(r["timestamp_utc"] for r in later) == stamps[10:]
    earlier = load.load([STORE], until=stamps[10][:19])
    assert sorted(r["timestamp_utc"] for r in earlier) == stamps[:10]


def test_where_fields_in_sql_equal_key_of(real_record, tmp_path):
    """--where runs in DuckDB: its SQL for each field must say what key_of says, runtime rules included."""
    from runners.reporting import keys, load, scan

    R = RecordFactory(real_record)
    records = [R(9.0), R(8.0, data="real", batch=4), R(11.0, runtime="none"), R(9.5, runtime="singularity", requested="podman"),
               R(10.0, strategy="ddp", workers=2), R(20.0, framework="tensorflow", model="resnet50", strategy="ps", num_ps=1),
               R(None, status="oom", batch=8)]
    records[1]["provenance"]["framework"] = None  # died before the framework loaded: device_kind from config.device
    store = _write(tmp_path / "s.jsonl", [json.dumps(r) for r in records])
    names = list(keys.WHERE_FIELDS)
    select = [f"CAST({keys.WHERE_FIELDS[name]} AS VARCHAR)" for name in names]
    with scan.scan([store], load.FIELDS, select, warn=print) as con:
        got = con.execute("SELECT * FROM records").fetchall()
    expected = [tuple(str({**keys.key_of(r), "status": r["status"], "hostname": r["provenance"]["hostname"]}[name])
                      for name in names) for r in load.load_python([store])]
    assert got == expected
    assert {row[names.index("runtime")] for row in got} == {"docker", "local", "podman"}
    # the loader's keys, computed in DuckDB from the same expressions
    assert [r.key for r in load.load([store])] == [keys.key_values(r) for r in load.load_python([store])]


@pytest.mark.parametrize("args, message", [
    (["--where", "framework"], "--where expects FIELD=VALUE"),
    (["--where", "colour=red"], "--where: unknown field 'colour' (choices: framework, model"),
    (["--since", "last tuesday"], "--since expects an ISO date"),
    (["--where", "framework=mxnet"], "no records matching --where/--since/--until"),
])
def test_report_selection_errors_are_one_line(tmp_path, args, message):
    result = benchrun("report", STORE, "--out", tmp_path / "o", *args)
    assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr


def test_unreadable_stores_are_one_line(tmp_path):
    lines = STORE.read_text().splitlines()
    middle = _write(tmp_path / "m.jsonl", lines[:3] + ['{"sweep": {"point": 1}, "rec'] + lines[3:5])
    torn = tmp_path / "t.jsonl"
    torn.write_text("\n".join(lines[:5]) + '\n{"sweep": {"point": 1}, "rec')
    empty_dir = tmp_path / "nothing"
    empty_dir.mkdir()
    cases = [(["report", middle, "--out", tmp_path / "o"], "m.jsonl: line 4 is not valid JSON"),
             (["export", tmp_path / "absent.jsonl", "--csv", tmp_path / "x.csv"], "is not a file or a directory"),
             (["compare", empty_dir, STORE], "is a directory without *.jsonl stores"),
             (["export", STORE], "export needs --csv OUT.csv, --parquet OUT.parquet and/or --mlflow [TRACKING_URI]")]
    for args, message in cases:
        result = benchrun(*args)
        assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1, (args, result.stderr)
    assert not (tmp_path / "x.csv").exists() and not list(tmp_path.glob(".x.csv*"))
    # a torn last line is skipped with a warning, as runners.store does; the rest is read
    result = benchrun("export", torn, "--csv", tmp_path / "t.csv")
    assert result.returncode == 0 and "line 6 is incomplete (torn write): skipped" in result.stderr
    assert len((tmp_path / "t.csv").read_text().splitlines()) == 6
