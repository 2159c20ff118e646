"""Who is slow: the "why it does not scale" report names the straggler (rank and host) only when its
excess compute is beyond the ranks' step-to-step noise, and says "within noise" otherwise. The rule on
records with known traces; then real multi-rank runs on this machine, one rank planted slow (pinned to a
core that busy processes share) and the same runs without the plant."""

from __future__ import annotations

import copy

import pytest

from benchmarks import trace
from infra.helpers import validate_record
from infra.records import RecordFactory
from runners.reporting import why

HOSTS = ["node-a", "node-b", "node-c", "node-d"]


def traced(record: dict, step_s: float, computes: list[list[float]], ceilings: list[float] | None = None) -> dict:
    """`record` as a synchronous run whose ranks computed these times per profiled step (the rest idle)."""
    r = copy.deepcopy(record)
    r["step_time_s"]["mean"], r["input_wait_s"]["mean"] = step_s, 0.0
    longest = max(max(steps) for steps in computes)
    ranks, rows = [], []
    for index, steps in enumerate(computes):
        full = [{"step_s": longest, "compute_s": c, "communication_s": 0.0, "exposed_communication_s": 0.0,
                 "overlap_s": 0.0, "input_s": 0.0, "idle_s": longest - c} for c in steps]
        ranks.append({"rank": index, "source": "profiler-events", "steps": full, "mean": trace.mean_step(full),
                      "overlap_fraction": None})
        rows.append({**r["ranks"][0], "rank": index, "host": HOSTS[index],
                     "ceiling_flops_per_sec": ceilings[index] if ceilings else None})
    r["trace"] = {"dir": "/t", "steps": len(computes[0]), "ranks": ranks}
    r["ranks"] = rows
    return validate_record(r)


@pytest.fixture
def R(real_record):
    return RecordFactory(real_record)


def loss_of(R, computes, ceilings=None, step_s=0.2):
    one = traced(R(10.0, strategy="ddp"), 0.1, [[0.1, 0.1, 0.1]])
    many = traced(R(8.0, strategy="ddp", workers=len(computes)), step_s, computes, ceilings)
    (loss,) = why.scaling_loss([one, many])
    return loss


def test_a_rank_computing_longer_in_every_step_is_named_with_its_host_and_share(R):
    loss = loss_of(R, [[0.100, 0.102, 0.098, 0.101], [0.150, 0.149, 0.152, 0.151]], ceilings=[2e11, 1e11])
    found = loss.straggler
    assert found.rank == 1 and found.hosts == ["node-b"] and found.named and found.steps == 4
    sentence = why.straggler_sentence(loss)
    assert sentence.startswith("at 2 workers the straggler is rank 1 on node-b: ")
    assert "beyond the ranks' noise" in sentence and "% of the lost 100.0 ms/step" in sentence
    assert "ceiling 100.0 GFLOP/s, the median rank's 150.0" in sentence
    # the straggler wait the loss split books is the named rank's excess over the median rank
    assert found.excess_s == pytest.approx(loss.parts["straggler_wait"])


def test_a_spread_within_the_step_to_step_noise_names_no_one(R):
    loss = loss_of(R, [[0.10, 0.16, 0.09, 0.15], [0.12, 0.14, 0.11, 0.16]])
    assert not loss.straggler.named
    assert "no straggler" in why.straggler_sentence(loss) and "within the ranks' noise" in why.straggler_sentence(loss)


def test_a_real_but_negligible_difference_names_no_one(R):
    """1% more compute in every step, with almost no spread: significant, under STRAGGLER_FLOOR."""
    loss = loss_of(R, [[0.1000, 0.1001, 0.1000, 0.1001], [0.1010, 0.1011, 0.1010, 0.1011]])
    assert loss.straggler.difference_s > loss.straggler.noise_s and not loss.straggler.named


def test_four_ranks_the_slowest_against_the_median(R):
    # timed step = traced step (0.21 s): no scaling
    loss = loss_of(R, [[0.10, 0.11, 0.10], [0.11, 0.10, 0.10], [0.10, 0.10, 0.11], [0.20, 0.21, 0.20]], step_s=0.21)
    assert loss.straggler.rank == 3 and loss.straggler.named and loss.straggler.hosts == ["node-d"]
    assert loss.straggler.excess_s == pytest.approx(0.2033333 - 0.1033333, rel=1e-3)


def test_nothing_to_judge_without_traces_or_with_one_step(R):
    one = traced(R(10.0, strategy="ddp"), 0.1, [[0.1]])
    two = traced(R(8.0, strategy="ddp", workers=2), 0.2, [[0.1], [0.2]])
    (loss,) = why.scaling_loss([one, two])
    assert loss.straggler is None and why.straggler_sentence(loss) is None
