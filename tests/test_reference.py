"""bench --reference: the bare hand-written loop timed beside the repeats and the harness ratio (the headroom ladder's
last rung, docs/results.md#headroom). The ratio's logic runs in process without a framework; two real runs show it."""

from __future__ import annotations

import math

import pytest

from benchmarks.core.errors import Stopped, UsageError
from benchmarks.measure.stats import t_halfwidth
from benchmarks.results import output
from benchmarks.run import reference
from benchmarks.settings.config import build_config
from infra.helpers import bench, last_json_line, needs_module, validate_record


def test_the_ratio_is_the_mean_of_the_per_pair_ratios_with_a_t_interval():
    pairs = [(98.0, 100.0), (51.0, 50.0), (30.0, 30.0)]  # the machine drifted: each pair holds its own state
    section = reference.section(pairs)
    ratios = [0.98, 1.02, 1.0]
    assert section["ratio"] == pytest.approx(1.0)  # the ratio of the means would be 179 / 180
    assert section["ci95_halfwidth"] == pytest.approx(t_halfwidth(ratios))
    assert section["pairs"] == 3 and section["reason"] is None
    assert section["bare_images_per_sec"] == pytest.approx(60.0)
    assert [pair["ratio"] for pair in section["per_pair"]] == pytest.approx(ratios)
    one = reference.section([(90.0, 100.0)])
    assert one["ratio"] == pytest.approx(0.9) and one["ci95_halfwidth"] is None and one["pairs"] == 1


def test_without_a_bare_loop_the_record_says_why_never_a_guess():
    assert reference.not_run(1) == {"ratio": None, "ci95_halfwidth": None, "pairs": 0, "bare_images_per_sec": None,
                                    "per_pair": [], "reason": reference.NOT_ASKED}
    assert "--reference runs one" in reference.NOT_ASKED
    assert reference.not_run(4)["reason"].startswith("not measured on a run of 4 processes")
    assert reference.section([])["reason"].startswith("no pair completed")


class FakeLoop(reference.BareLoop):
    """A bare loop whose every step takes `seconds` on a fake clock; `fail_at`: the step that raises."""

    def __init__(self, log: list, seconds: float = 0.5, fail_at: int | None = None, error: BaseException | None = None,
                 traces: bool = False):
        def step(index):
            if index == fail_at:
                raise error
            log.append(index)

        super().__init__(step, lambda: None, batch_size=4, traces=traces)
        self.seconds = seconds

    def run(self, steps: int) -> float:
        super().run(steps)
        return self.seconds * steps


def test_the_bare_loop_warms_up_untimed_and_its_batches_rotate_across_calls():
    log: list[int] = []
    loop = FakeLoop(log, traces=True)
    loop.warm_up(2)
    assert log == [0, 1, 2]  # the tracing step apart, then the warmup: bench's compile step and warmup
    assert loop.images_per_sec(3) == pytest.approx(4 * 3 / 1.5)
    assert log == [0, 1, 2, 3, 4, 5]


def test_pairs_alternate_which_side_runs_first_and_pair_by_repeat():
    pairs = reference.Interleaved(lambda: FakeLoop([]), warmup=1, steps=2)
    assert [pairs.bare_first(i) for i in range(4)] == [False, True, False, True]
    for index in range(3):
        assert pairs.time(index) == pytest.approx(4 * 2 / 1.0)
    section = pairs.section([6.0, 8.0])  # the third repeat was cut short: its bare loop has no partner
    assert section["pairs"] == 2 and section["ratio"] == pytest.approx((0.75 + 1.0) / 2)


def test_a_failing_bare_loop_ends_the_pairing_with_its_reason_and_bench_stands():
    warned: list[str] = []
    pairs = reference.Interleaved(lambda: FakeLoop([], fail_at=4, error=MemoryError("a second model")), warmup=1, steps=2,
                                  warn=warned.append)
    assert pairs.time(0) is not None and pairs.time(1) is None and pairs.time(2) is None
    section = pairs.section([8.0, 8.0, 8.0])
    assert section["pairs"] == 1 and section["ratio"] == pytest.approx(1.0)
    assert section["reason"] == "the bare loop failed: MemoryError: a second model" and warned == [section["reason"]]

    def broken():
        raise RuntimeError("no such device\nsecond line")

    unbuilt = reference.Interleaved(broken, warmup=1, steps=2, warn=warned.append)
    assert unbuilt.time(0) is None
    assert unbuilt.section([8.0])["reason"] == "the bare loop failed: RuntimeError: no such device"

    class NewFramework:  # a backend of a framework reference.py has no bare loop for (docs/architecture.md's recipe)
        name = "numpy"

    unknown = reference.Interleaved(lambda: reference.for_backend(NewFramework(), None), warmup=1, steps=2, warn=warned.append)
    assert unknown.section([8.0])["reason"] == ("the bare loop failed: NotImplementedError: numpy has no bare loop "
                                                "(benchmarks/run/reference.py's BUILDERS)")


def test_a_stop_inside_the_bare_loop_stops_the_run():
    pairs = reference.Interleaved(lambda: FakeLoop([], fail_at=1, error=Stopped("interrupted", "SIGINT")), warmup=0, steps=2)
    with pytest.raises(Stopped):
        pairs.time(0)


def headroom(section):
    record = {"flops": {"mfu_vs_achievable": None, "achievable_unavailable_reason": "--ceiling off", "mfu": None,
                        "mfu_unavailable_reason": "CPU: no datasheet peak"},
              "ceiling": None, "anchor": None, "reference": section}
    return output.headroom_line(record, "cpu")


def test_the_headroom_line_shows_the_fourth_rung():
    line = headroom(reference.section([(98.0, 100.0), (99.0, 100.0), (99.2, 100.0)]))
    mean, half = (0.98 + 0.99 + 0.992) / 3 * 100, t_halfwidth([0.98, 0.99, 0.992]) * 100
    assert line.endswith(f"vs bare loop: 98.7% [{mean - half:.1f}, {mean + half:.1f}] over 3 pairs, bare loop "
                         "100.00 images/sec")
    assert headroom(reference.section([(90.0, 100.0)])).endswith("vs bare loop: 90.0% (no interval from one pair) over 1 "
                                                                 "pair, bare loop 100.00 images/sec")
    assert headroom(reference.not_run(1)).endswith(f"vs bare loop: n/a ({reference.NOT_ASKED})")
    assert headroom(None).endswith("vs bare loop: n/a")


@pytest.mark.parametrize("options, said", [
    ({"compile": "default"}, "not with --compile"),
    ({"precision": "amp-bf16", "device": "cpu"}, "not --precision amp-bf16"),
    ({"data_format": "channels_last"}, "native layout (channels_first), not channels_last"),
])
def test_a_run_the_bare_loop_cannot_match_is_refused(options, said):
    with pytest.raises(UsageError, match=said.replace("(", r"\(").replace(")", r"\)")):
        build_config(framework="torch", model="resnet50", reference=True, installed_here=False, **options)
    build_config(framework="torch", model="resnet50", installed_here=False, **options)  # fine without --reference


def test_several_ranks_or_a_batch_search_are_refused():
    with pytest.raises(UsageError, match="this launch has 2 ranks"):
        reference.check_launch(2, False)
    with pytest.raises(UsageError, match="half the batch"):
        reference.check_launch(1, True)
    reference.check_launch(1, False)


def test_bench_refuses_in_one_line_exit_2(tmp_path):
    result = bench("--framework", "torch", "--reference", "--compile", "--output", str(tmp_path / "out.jsonl"), timeout=60)
    assert result.returncode == 2 and result.stderr.strip().count("\n") == 0, result.stderr
    assert "--reference: the bare loop runs eagerly, not with --compile" in result.stderr
    assert not (tmp_path / "out.jsonl").exists()
    ranks = bench("--framework", "torch", "--reference", env={"RANK": "0", "WORLD_SIZE": "2", "LOCAL_RANK": "0"},
                  timeout=60)
    assert ranks.returncode == 2 and "this launch has 2 ranks" in ranks.stderr, ranks.stderr


TINY = ("--model", "alexnet", "--image-size", "64", "--batch-size", "4", "--num-warmup-batches", "1", "--num-batches", "2",
        "--repeats", "2", "--num-threads", "1", "--device", "cpu", "--json", "--display-every", "0")


@pytest.mark.slow
@pytest.mark.parametrize("framework", ["torch", "tensorflow"])
def test_a_real_run_records_the_harness_ratio(framework):
    needs_module(framework)
    result = bench("--framework", framework, *TINY, "--reference", timeout=300)
    assert result.returncode == 0, result.stderr
    record = validate_record(last_json_line(result.stdout))
    section = record["reference"]
    assert record["config"]["reference"] is True and section["pairs"] == 2 and section["reason"] is None
    assert math.isfinite(section["ratio"]) and section["ratio"] > 0 and section["ci95_halfwidth"] is not None
    assert [pair["bench_images_per_sec"] for pair in section["per_pair"]] == \
        [rep["images_per_sec"] for rep in record["repeats"]]
    assert section["bare_images_per_sec"] > 0 and "; bare loop " in result.stderr
    assert "vs bare loop: " in result.stderr and "pairs, bare loop" in result.stderr
    plain = validate_record(last_json_line(bench("--framework", framework, *TINY, timeout=300).stdout))
    assert plain["reference"]["ratio"] is None and plain["reference"]["reason"] == reference.NOT_ASKED
