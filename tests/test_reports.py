"""benchrun report / compare / export on fixture stores.

The fixtures are one REAL record from a tiny bench run, varied field by field
(batch size, data, workers, strategy, runtime, status, throughput with known
numbers) and validated against the JSON Schema, so they stay realistic.
Expected numbers are computed by hand in the comments.
"""

from __future__ import annotations

import csv
import json
import re
import subprocess
from pathlib import Path

import pytest

from infra.helpers import ROOT, bench, benchrun, import_tensorflow, last_json_line, validate_record
from infra.records import RecordFactory

MiB = 1024 * 1024


def write(path: Path, records: list[dict], envelopes: bool = False) -> Path:
    with path.open("w") as f:
        for i, r in enumerate(records):
            f.write(json.dumps({"sweep": {"point": i}, "record": r} if envelopes else r) + "\n")
    return path


@pytest.fixture(scope="module")
def store(real_record, tmp_path_factory) -> tuple[Path, RecordFactory]:
    R = RecordFactory(real_record)
    records = [
        # batch series, torch alexnet, docker: bs2 = 9, 11 (mean 10), bs4 = 18 (single), bs8 out of memory
        R(9.0, host_rss=1000 * MiB), R(11.0, host_rss=1100 * MiB), R(18.0, batch=4, host_rss=1500 * MiB),
        R(None, status="oom", batch=8, error="CUDA out of memory. Tried to allocate 2.00 GiB"),
        # real-data twin of bs2: 8 -> I/O overhead (10 - 8) / 10 = 20%; bs4 has no twin
        R(8.0, data="real"),
        # runtimes, bs2 synthetic: none = 11, 13 (mean 12) vs docker (mean 10) -> (12 - 10) / 12 = 16.7%
        R(11.0, runtime="none"), R(13.0, runtime="none"), R(9.5, runtime="singularity"),
        # scaling, ddp: X(1) = 10, X(2) = 15 -> E(2) = 15 / (2 * 10) = 0.75; X(4) = 24 -> E(4) = 0.6
        R(10.0, strategy="ddp"), R(15.0, strategy="ddp", workers=2), R(24.0, strategy="ddp", workers=4),
        # horovod at 2 workers only: no 1-worker baseline
        R(14.0, strategy="horovod", workers=2),
        # TF parameter server, resnet50: 1 worker 1 PS = 20; 2 workers: 1 PS = 30, 2 PS = 36 (best) -> E(2) = 0.9
        R(20.0, framework="tensorflow", model="resnet50", strategy="ps", num_ps=1, allocator=300 * MiB),
        R(30.0, framework="tensorflow", model="resnet50", strategy="ps", num_ps=1, workers=2, allocator=310 * MiB),
        R(36.0, framework="tensorflow", model="resnet50", strategy="ps", num_ps=2, workers=2, allocator=320 * MiB),
        # runs that did not finish
        R(None, status="failed", batch=16, error="rank 1 on vm: RuntimeError: boom"),
        R(None, status="timeout", batch=32, error="--timeout 60 s expired"),
    ]
    root = tmp_path_factory.mktemp("store")
    # half plain records, half sweep envelopes, plus a torn line: both forms are read
    path = write(root / "results.jsonl", records[:8])
    with path.open("a") as f:
        for i, r in enumerate(records[8:]):
            f.write(json.dumps({"sweep": {"point": i}, "record": r}) + "\n")
        f.write(json.dumps({"sweep": {"point": 99}, "record": None}) + "\n")
        f.write('{"schema_version": "1.1", "run_id": "torn')
    return path, R


def table_row(markdown: str, *cells: str) -> str:
    """The one table line containing all `cells`."""
    rows = [line for line in markdown.splitlines() if line.startswith("|") and all(c in line for c in cells)]
    assert len(rows) == 1, f"expected one row with {cells}, got {rows}"
    return rows[0]


@pytest.fixture(scope="module")
def report(store, tmp_path_factory) -> tuple[Path, str, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("report")
    result = benchrun("report", store[0], "--out", out)
    assert result.returncode == 0, result.stderr
    return out, (out / "report.md").read_text(), result


@pytest.mark.slow
def test_report_files(report):
    out, md, result = report
    assert "is incomplete (torn write): skipped" in result.stderr
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == ["memory-tensorflow-resnet50.png", "memory-torch-alexnet.png", "runtimes-1.png", "scaling-1.png",
                    "scaling-2.png", "throughput-tensorflow-resnet50.png", "throughput-torch-alexnet.png",
                    *(f"why-{i}.png" for i in (1, 2, 3, 4))]
    for name in pngs:
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert f"]({name})" in md
    page = (out / "report.html").read_text()
    assert page.count("data:image/png;base64,") == len(pngs)
    assert "src='" + "data:" in page and ".png'" not in page  # self-contained


@pytest.mark.slow
def test_environment(report):
    md = report[1]
    assert "| records | 17 |" in md
    assert table_row(md, "| status | failed") == "| status | failed (1); ok (14); oom (1); timeout (1) |"
    assert "docker (14); none (2); singularity (1)" in md
    assert "torch 2.14.1" in md and "tensorflow 2.14.1" in md  # name varied, version of the real record


@pytest.mark.slow
def test_throughput_and_memory_vs_batch(report):
    md = report[1]
    # bs2, docker, synthetic, strategy none: 9 and 11 -> mean 10, t-interval 12.706 * sd(1.414) / sqrt(2) = 12.71
    row = table_row(md, "| 2 | data=synthetic, strategy=none, workers=1, runtime=docker |")
    assert "| 2 | 10.00 ± 12.71 | t-interval over records |" in row and "00000001 00000002" in row
    assert "| 1050 ± 635 |" in row  # host RSS: 1000, 1100 MiB -> 1050 ± 12.706 * 70.7 / sqrt(2)
    row = table_row(md, "| 4 | data=synthetic, strategy=none, workers=1, runtime=docker |")
    assert "| 1 | 18.00 ± 0.50 | one record: delta method on step times |" in row
    assert "Out of memory at: batch 8 (00000004: CUDA out of memory. Tried to allocate 2.00 GiB)" in md
    assert "panels: host RSS peak (memory kinds" in md  # torch on CPU: allocator/reserved/device are null
    assert "panels: framework allocator peak, host RSS peak" in md


@pytest.mark.slow
def test_scaling_and_table1(report):
    md = report[1]
    assert "| ddp | 2 | 0 | round-robin | 1 | 15.00 ± 0.50 | 0.750 | 00000009 | 0000000a |" in md
    assert "| ddp | 4 | 0 | round-robin | 1 | 24.00 ± 0.50 | 0.600 |" in md
    assert "| ps | 2 | 2 | round-robin | 1 | 36.00 ± 0.50 | 0.900 | 0000000d | 0000000f |" in md
    assert "strategy=horovod: no 1-worker baseline — E(N) not computed (runs 0000000c)" in md
    # Table 1: best at each worker count; torch alexnet docker, 2 workers: ddp 15 beats horovod 14
    assert "| 0 | 2 | ddp | - | 2 | FALSE | 15.00 ± 0.50 | 1 | 0000000a |" in md
    assert "| 0 | 4 | ddp | - | 2 | FALSE | 24.00 ± 0.50 | 1 | 0000000b |" in md
    assert "| 2 | 2 | ps | round-robin | 2 | FALSE | 36.00 ± 0.50 | 1 | 0000000f |" in md
    # 1 worker, synthetic: bs4 (18) beats bs2 (10); real data: 8
    assert "| 0 | 1 | none | - | 4 | FALSE | 18.00 ± 0.50 | 1 | 00000003 |" in md
    assert "| 0 | 1 | none | - | 2 | TRUE | 8.00 ± 0.50 | 1 | 00000005 |" in md


@pytest.mark.slow
def test_io_overhead(report):
    md = report[1]
    row = table_row(md, "runtime=docker", "| 20.0% |")
    assert r"| 2 | 10.00 ± 12.71 | 1 | 8.00 ± 0.50 | 20.0% | 00000001 00000002 \| 00000005 |" in row
    assert "batch_size=4" in md.split("### Without a twin")[1].split("##")[0]
    assert "synthetic only (no real-data twin) — runs 00000003" in md


@pytest.mark.slow
def test_runtime_overhead(report):
    md = report[1]
    assert "| docker | 2 | 10.00 ± 12.71 | 00000001 00000002 |" in md
    assert "| local | 2 | 12.00 ± 12.71 | 00000006 00000007 |" in md  # detected `none` reads as local
    assert "| singularity | 1 | 9.50 ± 0.50 | 00000008 |" in md
    # no compare-runtimes rounds in these records: Welch's interval on the logs, exp(mean log(9, 11) - mean log(11, 13))
    assert "| docker | local | 0.832 [0.466, 1.486] | unpaired (Welch), ≥ 2 runs a side | " \
           "inconclusive: ±78.6% now;" in md
    assert "| local | docker |" not in md  # the same pair once, not again the other way round
    # singularity: 1 record -> no interval, said so (never "no difference")
    assert "| singularity | local | n/a | none (< 2 rounds) | " \
           "inconclusive: fewer than 2 rounds, no interval | - |" in md
    assert "Welch p" not in md and "Position in the round: not estimable" in md
    assert "only under docker — runs 00000009" in md  # ddp only ran under docker


@pytest.mark.slow
def test_singles_and_failures(report):
    md = report[1]
    singles = md.split("## Single-record configurations")[1].split("## Runs that did not finish")[0]
    assert "run 00000003, delta method on step times" in singles
    assert "00000001" not in singles  # bs2 docker has two records
    failed = md.split("## Runs that did not finish")[1]
    assert "| 00000004 | oom |" in failed and "| 00000010 | failed |" in failed and "| 00000011 | timeout |" in failed
    assert "crash: rank 1 on vm: RuntimeError: boom" in failed
    assert "timeout: --timeout 60 s expired" in failed


def test_report_bad_input(tmp_path):
    result = benchrun("report", tmp_path / "missing.jsonl", "--out", tmp_path / "o")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "is not a file" in result.stderr
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = benchrun("report", empty, "--out", tmp_path / "o")
    assert result.returncode == 2 and "no records" in result.stderr


# -- compare -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_compare_passes_and_fails(store, tmp_path):
    R = store[1]
    base = write(tmp_path / "base.jsonl", [R(100.0, ci=1.0), R(50.0, batch=4, ci=5.0), R(70.0, batch=8)])
    # bs2: -3% (within 5%): ok; bs4: 43 + 3 = 46 < 50 * 0.95 = 47.5, but not below the base interval's
    # low end 50 - 5 = 45: the intervals overlap, ok; bs16 only in new
    same = write(tmp_path / "same.jsonl", [R(97.0, ci=1.0), R(43.0, batch=4, ci=3.0), R(1.0, batch=16)], envelopes=True)
    result = benchrun("compare", base, same, "--threshold", "5%")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"batch_size=2,.*\| images_per_sec \(img/s\) \| 100\.00 ± 1\.00 \(n=1\) \| 97\.00 ± 1\.00 \(n=1\) \| -3\.0% "
                     r"\| ok \|",
                     result.stdout)
    assert re.search(r"batch_size=4,.*\| -14\.0% \| ok \|", result.stdout)
    assert "only in base (not compared):" in result.stdout and "batch_size=8," in result.stdout
    assert "only in new (not compared):" in result.stdout and "batch_size=16," in result.stdout
    # bs2: 90 + 1 < 95 and < 99: regression; memory +50% beyond 5%: regression too
    worse = write(tmp_path / "worse.jsonl", [R(90.0, ci=1.0, host_rss=1500 * MiB), R(50.0, batch=4, ci=5.0)])
    result = benchrun("compare", base, worse, "--threshold", "5%")
    assert result.returncode == 1, result.stdout + result.stderr
    assert re.search(r"batch_size=2,.*images_per_sec.*\| -10\.0% \| REGRESSION \|", result.stdout)
    assert re.search(r"batch_size=2,.*host_rss_peak_bytes \(MiB\) \| 1000 ± n/a \(n=1\) \| 1500 ± n/a \(n=1\) \| \+50\.0% \| "
                     r"REGRESSION",
                     result.stdout)
    assert "2 regressions" in result.stdout
    # throughput only, with a threshold above the drop: passes
    result = benchrun("compare", base, worse, "--threshold", "15", "--metrics", "images_per_sec")
    assert result.returncode == 0, result.stdout
    # a configuration that ran in base and failed in new is a regression
    failed = write(tmp_path / "failed.jsonl", [R(None, status="oom")])
    result = benchrun("compare", base, failed)
    assert result.returncode == 1 and "failed in new (oom)" in result.stdout


@pytest.mark.parametrize("args, message", [
    (["--threshold", "five"], "--threshold expects a percentage"),
    (["--threshold", "120%"], "between 0% and 100%"),
    (["--metrics", "speed"], "unknown metric speed"),
])
@pytest.mark.slow
def test_compare_bad_input(store, tmp_path, args, message):
    base = write(tmp_path / "b.jsonl", [store[1](10.0)])
    result = benchrun("compare", base, base, *args)
    assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1


def test_compare_missing_file(tmp_path):
    result = benchrun("compare", tmp_path / "nope.jsonl", tmp_path / "nope2.jsonl")
    assert result.returncode == 2 and "is not a file" in result.stderr and result.stderr.count("\n") == 1


# -- export ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_export_csv(store, tmp_path):
    out = tmp_path / "out" / "all.csv"
    result = benchrun("export", store[0], "--csv", out)
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 17
    from runners.commands.export import COLUMNS

    assert list(rows[0]) == list(COLUMNS)
    assert rows[0]["throughput.images_per_sec"] == "9.0" and rows[0]["config.batch_size"] == "2"
    assert rows[0]["memory.allocator_peak_bytes"] == ""  # null -> empty, never 0
    assert rows[3]["status"] == "oom" and rows[3]["error.message"].startswith("CUDA out of memory")
    assert rows[4]["config.data"] == "real" and rows[4]["config.data_dir"] == "/data/imgs"
    docs = (ROOT / "docs" / "reports.md").read_text()
    undocumented = [c for c in COLUMNS if f"`{c}`" not in docs]
    assert not undocumented, f"CSV columns missing from docs/reports.md: {undocumented}"


# -- bench --tensorboard -----------------------------------------------------------------------


@pytest.mark.slow
def test_tensorboard_scalars(tmp_path):
    logdir = tmp_path / "tb"
    result = bench("--framework", "torch", "--model", "alexnet", "--image-size", "64", "--batch-size", "2",
                   "--num-warmup-batches", "1", "--num-batches", "3", "--repeats", "2", "--json",
                   "--tensorboard", str(logdir))
    assert result.returncode == 0, result.stderr
    record = validate_record(last_json_line(result.stdout))
    tf = import_tensorflow()

    scalars: dict[str, dict[int, float]] = {}
    for raw in tf.data.TFRecordDataset([str(p) for p in logdir.glob("events.out.tfevents.*")]):
        event = tf.compat.v1.Event.FromString(raw.numpy())
        for value in event.summary.value:
            assert value.metadata.plugin_data.plugin_name == "scalars"
            scalars.setdefault(value.tag, {})[event.step] = float(tf.make_ndarray(value.tensor))
    rates, losses = scalars["throughput/images_per_sec"], scalars["train/loss"]
    assert sorted(rates) == sorted(losses) == list(range(6))  # 2 repeats x 3 timed steps, warmup not written
    # per step: images/sec = batch / step time, so the mean of 2 / rate is the record's mean step time
    mean_step = sum(2 / rate for rate in rates.values()) / 6
    assert abs(mean_step - record["step_time_s"]["mean"]) < 1e-4 * record["step_time_s"]["mean"]
    assert abs(losses[5] - record["final_loss"]) < 1e-5


def test_tensorboard_without_writer(tmp_path, monkeypatch, capsys):
    from benchmarks import cli
    from benchmarks.results import tensorboard

    monkeypatch.setattr(tensorboard, "BACKENDS", (("no_such_module_tbx", "x"),))
    code = cli.main(["--framework", "torch", "--model", "alexnet", "--tensorboard", str(tmp_path / "tb")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("bench: error: --tensorboard needs one of no_such_module_tbx") and err.count("\n") == 1
    assert not (tmp_path / "tb").exists()


@pytest.mark.slow
def test_report_axes_precision_compile_and_flops_columns(real_record, tmp_path):
    R = RecordFactory(real_record)

    def with_axes(ips: float, gflops: float | None, precision: str = "fp32", compile: str | None = None,
                  per_joule: float | None = None) -> dict:
        r = R(ips)
        r["config"].update(precision=precision, compile=compile)
        r["flops"] = {**r["flops"], "achieved_flops_per_sec": None if gflops is None else gflops * 1e9}
        if per_joule is not None:  # as on a host with RAPL
            r["energy"] = {**r["energy"], "source": "rapl", "scope": "cpu-packages", "joules": 10.0, "average_watts": 5.0,
                           "images_per_joule": per_joule, "unavailable_reason": None}
        return validate_record(r)

    # eager fp32: 2.0 and 4.0 GFLOP/s -> 3.0 ± 12.706 * 1.414 / sqrt(2) = 12.7; compiled and bf16 single records
    store = write(tmp_path / "axes.jsonl", [with_axes(10.0, 2.0), with_axes(12.0, 4.0),
                                             with_axes(20.0, 6.0, compile="default", per_joule=0.25),
                                             with_axes(15.0, None, precision="amp-bf16")])
    out = tmp_path / "report"
    result = benchrun("report", store, "--out", out)
    assert result.returncode == 0, result.stderr
    md = (out / "report.md").read_text()
    assert "| model FLOP/s | MFU | images/J |" in md
    eager = table_row(md, "| precision=fp32, compile=none |")
    assert "| 3.0 ± 12.7 GFLOP/s | n/a | n/a |" in eager  # CPU: no MFU; no RAPL here: no energy
    assert "| 6.0 ± n/a GFLOP/s | n/a | 0.250 ± n/a |" in table_row(md, "| precision=fp32, compile=default |")
    assert "| n/a | n/a | n/a |" in table_row(md, "| precision=amp-bf16, compile=none |")  # null stays n/a, never 0


@pytest.mark.slow
def test_report_marks_the_largest_batch_that_fits(real_record, tmp_path):
    R = RecordFactory(real_record)
    outcomes = [(2, 5.0), (4, 8.0), (8, None), (6, 9.0), (7, None)]  # doubled to 8 (oom), bisected: 6 fits, 7 does not
    records = []
    for probe, (batch, ips) in enumerate(outcomes, 1):
        r = R(ips, batch=batch) if ips is not None else R(None, status="oom", batch=batch, error="can't allocate memory")
        final = probe == len(outcomes)
        r["batch_search"] = {"search_id": "ab" * 16, "probe": probe, "phase": "double" if probe <= 3 else "bisect",
                             "largest_fit": max(b for b, v in outcomes[:probe] if v is not None),
                             "smallest_oom": min((b for b, v in outcomes[:probe] if v is None), default=None),
                             "final": final, "max_batch": 6 if final else None,
                             "stop_reason": "batch 6 fits and 7 runs out of memory" if final else None, "time_budget_s": 60.0}
        records.append(validate_record(r))
    out = tmp_path / "report"
    result = benchrun("report", write(tmp_path / "search.jsonl", records), "--out", out)
    assert result.returncode == 0, result.stderr
    md = (out / "report.md").read_text()
    assert "Largest batch that fits (bench --find-max-batch; green dashed line): 6 (search abababab: " \
           "batch 6 fits and 7 runs out of memory, 5 probes)" in md
    assert "Out of memory at: batch 7" in md
