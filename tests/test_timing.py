import itertools

import pytest

from benchmarks import timing


def test_run_steps_separates_input_wait_from_step_and_syncs_each_step(monkeypatch):
    ticks = iter(range(100))
    monkeypatch.setattr(timing, "clock", lambda: float(next(ticks)))
    events = []

    def batches():
        for i in itertools.count():
            events.append("fetch")
            next(ticks)  # fetching costs one extra tick
            yield i

    loop = timing.run_steps(
        batches(),
        train_step=lambda b: events.append("step") or b * 10,
        synchronize=lambda: events.append("sync"),
        num_steps=3,
        images_per_step=4,
    )
    assert events == ["sync"] + ["fetch", "step", "sync"] * 3
    # clock: start=0; per step: fetch tick, fetched=t, end=t+1
    assert loop.input_wait_s == [2.0, 2.0, 2.0]
    assert loop.step_times_s == [3.0, 3.0, 3.0]
    assert loop.wall_time_s == 9.0 == sum(loop.step_times_s)
    assert loop.images == 12
    assert loop.images_per_sec == 12 / 9.0
    assert loop.last_loss == 20


def test_loop_from_stamps_is_the_one_step_definition():
    """Hand-computed: start 10.0; steps fetched/ended at (10.5, 12.0), (12.25, 13.0), (13.75, 15.0)."""
    loop = timing.loop_from_stamps(10.0, [(10.5, 12.0), (12.25, 13.0), (13.75, 15.0)], images_per_step=2)
    assert loop.step_times_s == [2.0, 1.0, 2.0]  # each from the previous end (the first from the start)
    assert loop.input_wait_s == [0.5, 0.25, 0.75]
    assert loop.wall_time_s == 5.0 and loop.images == 6
    # TF PS: a worker starts fetching only once the chief's next step reached it (12.1, 13.5): the
    # time before stays in the step, the input wait is the fetch alone
    ps = timing.loop_from_stamps(10.0, [(10.5, 12.0), (12.25, 13.0), (13.75, 15.0)], images_per_step=2,
                                 fetch_started=[10.0, 12.1, 13.5])
    assert ps.step_times_s == [2.0, 1.0, 2.0] and ps.input_wait_s == pytest.approx([0.5, 0.15, 0.25])


def test_merge_loops_keeps_workers_and_uses_the_slowest_wall():
    a = timing.loop_from_stamps(0.0, [(0.0, 1.0), (1.0, 2.0)], images_per_step=2)
    b = timing.loop_from_stamps(5.0, [(5.5, 8.0)], images_per_step=2)
    merged = timing.merge_loops({0: a, 1: b}, last_loss=7)
    assert merged.images == 6 and merged.wall_time_s == 3.0
    assert merged.step_times_s == [1.0, 1.0, 3.0] and merged.input_wait_s == [0.0, 0.0, 0.5]
    assert merged.per_worker == {0: a, 1: b} and merged.last_loss == 7
