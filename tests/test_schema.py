import json

from benchmarks.results import record


def test_committed_schema_matches_models():
    committed = json.loads(record.SCHEMA_FILE.read_text())
    assert committed == record.json_schema(), "regenerate: python -m benchmarks.results.record > benchmarks/schema/result-1.json"


def test_every_record_field_is_documented():
    docs = (record.SCHEMA_FILE.parent.parent.parent / "docs" / "results.md").read_text()
    schema = record.json_schema()
    names = set(schema["properties"])
    for definition in schema["$defs"].values():
        names.update(definition.get("properties", {}))
    missing = sorted(n for n in names if f"`{n}`" not in docs)
    assert not missing, f"fields without documentation in docs/results.md: {missing}"
