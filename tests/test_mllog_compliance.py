"""`bench --mllog` against MLCommons' own compliance checker (the pinned mlperf-logging): a real tiny
time-to-accuracy run's log passes the checker's common rules (training 4.1.0) when the submission keys
are given, and without them the only findings are those keys (docs/accuracy.md#mllog)."""

from __future__ import annotations

from pathlib import Path

import pytest

from infra.helpers import bench

pytest.importorskip("mlperf_logging")

RULESET = "4.1.0"
SUBMISSION = ("--mllog-org", "dlbench-tests", "--mllog-platform", "ci-cpu", "--mllog-division", "open")
# What a log cannot pass without the submission keys: the keys, and init_stop's time limit, which the
# checker sets from the division (30 min closed, 4 h open; 0 without one).
WITHOUT_SUBMISSION = {"submission_org", "submission_platform", "submission_division", "init_stop"}


def common_findings(log_path) -> dict[str, str]:
    """The checker's findings under its common rules (training_<ruleset>/common.yaml), by key. Its CLI goes
    on to the division's and the benchmark's rules (MLPerf's reference models and their hyperparameters),
    which a dlbench model is not: the checker's own code runs here on the common file alone."""
    from mlperf_logging.compliance_checker import mlp_compliance, mlp_parser

    checker = mlp_compliance.make_checker("training", RULESET, False, True)  # warnings count as findings
    lines, errors = mlp_parser.parse_file(str(log_path), ruleset=RULESET)
    assert not errors, errors
    common = Path(mlp_compliance.__file__).parent / f"training_{RULESET}" / "common.yaml"
    try:
        checker.configured_checks(lines, str(common))
    finally:
        mlp_compliance.enqueued_configs.clear()  # the division file it asked for: not ours to check
    findings = {**checker.warnings, **checker.overwritable}
    for message in checker.not_overwritable:
        findings[message.split("'")[1] if "'" in message else message] = message
    return findings


@pytest.fixture(scope="module")
def random_images(tmp_path_factory):
    path = tmp_path_factory.mktemp("mllog") / "random"
    made = bench("make-dataset", str(path), "--images", "96", "--classes", "4", "--min-size", "32", "--max-size", "36")
    assert made.returncode == 0, made.stderr
    return path


def tta_log(images, tmp_path, *extra) -> object:
    """A real time-to-accuracy run (two evaluations, then not_converged: run_stop aborted), its MLLOG lines."""
    result = bench("--framework", "torch", "--model", "smallcnn", "--image-size", "32", "--data-dir", str(images),
                   "--batch-size", "16", "--target-accuracy", "0.99", "--val-fraction", "0.25", "--eval-every", "64",
                   "--max-epochs", "1", "--num-threads", "1", "--mllog", "--json", *extra)
    assert result.returncode == 0, result.stderr[-3000:]
    path = tmp_path / "mllog.txt"
    path.write_text("".join(line + "\n" for line in result.stderr.splitlines() if line.startswith(":::MLLOG ")))
    return path


@pytest.mark.slow
def test_a_time_to_accuracy_log_passes_the_common_rules_with_the_submission_keys(random_images, tmp_path):
    assert common_findings(tta_log(random_images, tmp_path, *SUBMISSION)) == {}


@pytest.mark.slow
def test_without_the_submission_keys_the_only_findings_are_those_keys(random_images, tmp_path, monkeypatch):
    for name in ("ORG", "PLATFORM", "DIVISION"):
        monkeypatch.delenv(f"MLPERF_SUBMISSION_{name}", raising=False)
    assert set(common_findings(tta_log(random_images, tmp_path))) == WITHOUT_SUBMISSION


@pytest.mark.slow
def test_the_submission_keys_come_from_the_environment_too(random_images, tmp_path, monkeypatch):
    monkeypatch.setenv("MLPERF_SUBMISSION_ORG", "from-env")
    monkeypatch.setenv("MLPERF_SUBMISSION_PLATFORM", "ci-cpu")
    monkeypatch.setenv("MLPERF_SUBMISSION_DIVISION", "closed")
    log = tta_log(random_images, tmp_path)
    assert common_findings(log) == {}
    assert '"key": "submission_org", "value": "from-env"' in log.read_text()
