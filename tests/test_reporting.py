"""Fast, in-process tests of runners.reporting: the configuration key (one definition, Python and
SQL), grouping and summaries, wrongly typed records refused at load (issue 26), the HTML rendering.
Records come from the case study's store: no bench run."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from infra.helpers import ROOT, benchrun

STORE = ROOT / "examples" / "seed-000-table1" / "results.jsonl"


def _case() -> list[dict]:
    return [json.loads(line)["record"] for line in STORE.read_text().splitlines()]


def _write(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(record) + "\n" for record in records))
    return path


def test_key_rules_known_answers():
    from runners.reporting import keys

    record = copy.deepcopy(_case()[0])
    record["config"].update(compile=None, xla=True)
    record["provenance"].update(requested_runtime=None, container_runtime="none")
    record["provenance"]["framework"]["device_kind"] = None
    key = keys.key_of(record)
    assert key["compile"] == "xla" and key["runtime"] == keys.BASELINE_RUNTIME
    assert key["device_kind"] == record["config"]["device"]
    record["config"].update(compile="max-autotune", xla=False)
    record["provenance"].update(requested_runtime="podman", container_runtime="docker")
    record["provenance"]["framework"] = None  # died before the framework loaded
    key = keys.key_of(record)
    assert key["compile"] == "max-autotune" and key["runtime"] == keys.runtime_of(record) == "podman"
    assert list(key) == list(keys.KEY_FIELDS) == list(keys.WHERE_FIELDS)[:len(keys.KEY_FIELDS)]
    assert keys.key_tuple(record, ("runtime", "batch_size")) == ("podman", record["config"]["batch_size"])
    assert keys.key_tuple(record, ("data",)) == (record["config"]["data"],)


def test_loaded_keys_are_the_python_keys_and_groups_keep_store_order(tmp_path):
    from runners.reporting import aggregate, keys, load

    records = _case()
    records[3]["config"]["xla"] = True
    records[4]["provenance"]["requested_runtime"] = "podman"
    records[5]["provenance"]["framework"]["device_kind"] = ""
    found = load.load([_write(tmp_path / "s.jsonl", records)])
    assert [r.key for r in found] == [keys.key_values(r) for r in records]
    groups = aggregate.group(found, ("strategy", "workers"))
    assert list(groups) == sorted(groups, key=lambda key: tuple(map(str, key)))
    for key, members in groups.items():
        expected = [r["run_id"] for r in records if (r["config"]["strategy"], r["world"]["workers"]) == key]
        assert [r["run_id"] for r in members] == expected


def test_summaries_over_records():
    from runners.reporting import aggregate

    records = _case()[:3]
    for record, ips in zip(records, (10.0, 12.0, 14.0)):
        record["throughput"]["images_per_sec"] = ips
    summary = aggregate.throughput(records)
    assert (summary.n, summary.mean, summary.method) == (3, 12.0, "t-interval over records") and summary.ci > 0
    one = aggregate.throughput(records[:1])
    assert one.ci == records[0]["throughput"]["ci95_halfwidth"] and one.method.startswith("one record: ")
    records[1]["memory"]["allocator_peak_bytes"] = None  # does not apply: left out, never 0
    records[0]["memory"]["allocator_peak_bytes"] = records[2]["memory"]["allocator_peak_bytes"] = 100
    assert aggregate.metric(records, "memory", "allocator_peak_bytes").values == [100.0, 100.0]
    records[2]["status"] = "oom"
    assert aggregate.throughput(records).n == 2 and aggregate.failures(records) == [records[2]]
    assert aggregate.welch([1.0], [2.0, 2.1]) is None and aggregate.welch([1.0, 1.1], [2.0, 2.1]) < 0.01


@pytest.mark.parametrize("field, value, expected", [
    ("throughput.images_per_sec", "fast", "not a JSON number"),
    ("config.batch_size", "sixty-four", "not a JSON integer"),
    ("throughput", "fast", "not a JSON object"),
    ("world.workers", [2], "not a JSON integer"),
])
def test_wrongly_typed_record_is_refused_naming_line_and_field(tmp_path, field, value, expected):
    """Issue 26: DuckDB read such a value as null (the good record's mean became nan) or the tables
    failed on it (TypeError, exit 70). The store is refused as a line that is not JSON is."""
    from benchmarks.core.errors import UsageError
    from runners.reporting import load

    records = _case()[:3]
    section, _, name = field.partition(".")
    if name:
        records[1][section][name] = value
    else:
        records[1][section] = value
    store = tmp_path / "s.jsonl"
    store.write_text(json.dumps(records[0]) + "\n" + json.dumps({"sweep": {"point": 1}, "record": records[1]}) + "\n"
                     + json.dumps(records[2]) + "\n")
    with pytest.raises(UsageError) as refused:
        load.load([store])
    assert str(refused.value).startswith(f"{store}: line 2: {field} is {json.dumps(value)}, {expected}")
    good = _write(tmp_path / "good.jsonl", [records[0], records[2]])
    assert [r["run_id"] for r in load.load([good])] == [records[0]["run_id"], records[2]["run_id"]]


@pytest.mark.parametrize("command", ["report", "compare", "export"])
def test_wrongly_typed_record_is_one_line_and_exit_2(tmp_path, command):
    records = _case()[:2]
    records[1]["throughput"]["images_per_sec"] = "fast"
    store = _write(tmp_path / "s.jsonl", records)
    args = {"report": [store, "--out", tmp_path / "out"], "compare": [STORE, store],
            "export": [store, "--csv", tmp_path / "x.csv"]}[command]
    result = benchrun(command, *args)
    assert result.returncode == 2 and result.stderr == (
        f"benchrun: error: {store}: line 2: throughput.images_per_sec is \"fast\", not a JSON number "
        "(the record schema's type)\n"), result.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "x.csv").exists()


def test_html_is_the_markdown_rendered_with_figures_embedded(tmp_path):
    from runners.reporting.render import Document

    figure = tmp_path / "f.png"
    figure.write_bytes(b"\x89PNG\r\n\x1a\nfake")
    doc = Document()
    doc.heading("dlbench report", 1)
    doc.para("X_local − X_runtime, `bench comm` <b>")
    doc.table(["a", "b"], [[1, "x | y"]])
    doc.bullets(["one"])
    doc.image(figure, "a figure")
    assert doc.markdown() == ("# dlbench report\n\nX_local − X_runtime, `bench comm` <b>\n\n| a | b |\n|---|---|\n"
                              "| 1 | x \\| y |\n\n- one\n\n![a figure](f.png)\n\n*a figure*\n")
    page = doc.html("t")
    assert "<h1>dlbench report</h1>" in page and "<code>bench comm</code> &lt;b&gt;" in page
    assert "<td>x | y</td>" in page and "<li>one</li>" in page and "f.png" not in page
    assert "<img src='data:image/png;base64,iVBORw0KGgpmYWtl' alt='a figure'>" in page
