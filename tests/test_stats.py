import math

import pytest

from benchmarks.measure.stats import Stats, t_halfwidth, throughput_halfwidth_from_steps


def test_stats_against_hand_computed_values():
    s = Stats.of([1.0, 2.0, 3.0, 4.0, 10.0])
    assert s.n == 5
    assert s.mean == pytest.approx(4.0)
    assert s.median == pytest.approx(3.0)
    # numpy 'linear' percentile: rank 0.9 * 4 = 3.6 -> 4 + 0.6 * (10 - 4)
    assert s.p90 == pytest.approx(7.6)
    # deviations from mean: -3 -2 -1 0 6 -> squares 9 4 1 0 36 = 50; /4 = 12.5
    assert s.stdev == pytest.approx(math.sqrt(12.5))
    assert s.stderr == pytest.approx(math.sqrt(12.5) / math.sqrt(5))
    # |x - median| = 2 1 0 1 7 -> median 1 -> jitter 1.4826
    assert s.jitter == pytest.approx(1.4826)
    assert (s.min, s.max) == (1.0, 10.0)


def test_jitter_ignores_one_outlier_but_stdev_does_not():
    calm = Stats.of([1.0] * 9 + [1.0])
    spiky = Stats.of([1.0] * 9 + [100.0])
    assert calm.jitter == spiky.jitter == 0.0
    assert spiky.stdev > 30


def test_single_sample_has_no_spread():
    s = Stats.of([2.5])
    assert (s.stdev, s.stderr, s.jitter) == (None, None, 0.0)
    assert t_halfwidth([2.5]) is None


def test_empty_samples_rejected():
    with pytest.raises(ValueError):
        Stats.of([])


def test_t_interval_hand_computed():
    # mean 11, sample sd 1, n 3: t(0.975, 2) = 4.302653 -> 4.302653 / sqrt(3)
    assert t_halfwidth([10.0, 11.0, 12.0]) == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)


def test_throughput_interval_from_step_times_by_delta_method():
    steps = [0.5, 0.5, 1.0, 1.0]  # mean 0.75, sd 0.288675, t(0.975, 3) = 3.182446
    half_step = 3.182446 * 0.28867513 / 2
    expected = 8 * half_step / 0.75**2
    assert throughput_halfwidth_from_steps(steps, images_per_step=8) == pytest.approx(expected, rel=1e-5)
    assert throughput_halfwidth_from_steps([0.5], images_per_step=8) is None
