import itertools

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
