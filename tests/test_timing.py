import itertools

import pytest

from benchmarks.measure import timing


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


class FakeDevice:
    """One device stream on a fake host clock: launching a step costs the host 0.25 s and queues its work
    behind what is queued; a sync waits for the queue; an event completes when the stream reaches it."""

    LAUNCH_S = 0.25

    def __init__(self, step_seconds, fetch_seconds=()):
        self.host, self.queue_end, self.syncs = 0.0, 0.0, 0
        self.step_seconds, self.fetch_seconds = list(step_seconds), list(fetch_seconds)

    def batches(self):
        for index in itertools.count():
            self.host += self.fetch_seconds[index] if index < len(self.fetch_seconds) else 0.0
            yield index

    def train_step(self, index):
        self.host += self.LAUNCH_S
        self.queue_end = max(self.queue_end, self.host) + self.step_seconds[index]
        return float(index)

    def synchronize(self):
        self.syncs += 1
        self.host = max(self.host, self.queue_end)

    def new_event(self):
        return FakeEvent(self)


class FakeEvent:
    """torch.cuda.Event's surface: record, synchronize, elapsed_time in milliseconds."""

    def __init__(self, device):
        self.device, self.at = device, None

    def record(self):
        self.at = self.device.queue_end = max(self.device.queue_end, self.device.host)

    def synchronize(self):
        self.device.host = max(self.device.host, self.at)

    def elapsed_time(self, later):
        return (later.at - self.at) * 1000


def fake_loop(monkeypatch, device, events: bool, **options):
    monkeypatch.setattr(timing, "clock", lambda: device.host)
    return timing.run_steps(device.batches(), device.train_step, device.synchronize, len(device.step_seconds), 4,
                            new_event=device.new_event if events else None, **options)


def test_event_timing_syncs_at_the_loop_s_ends_only_and_times_steps_on_the_device(monkeypatch):
    """Device work 2, 3, 4 s; launching costs the host 0.25 s. Synchronised every step, each step also
    holds its launch (the device idles meanwhile); with events the host runs ahead, the device never
    idles after the first launch, and a step is the time between the events around it."""
    synced = fake_loop(monkeypatch, FakeDevice([2.0, 3.0, 4.0]), events=False)
    assert synced.step_times_s == [2.25, 3.25, 4.25] and synced.wall_time_s == 9.75
    device = FakeDevice([2.0, 3.0, 4.0], fetch_seconds=[0.0, 0.5])
    timed = fake_loop(monkeypatch, device, events=True)
    assert device.syncs == 2  # one at each end
    assert timed.step_times_s == [2.25, 3.0, 4.0]
    assert timed.wall_time_s == 9.25 == device.host  # the sum of the steps: the host's time between the syncs
    assert timed.input_wait_s == [0.0, 0.5, 0.0]  # the host's wait for step 1's batch
    assert timed.images == 12 and timed.last_loss == 2.0


def test_event_timing_leaves_a_progress_line_s_time_out_of_every_step(monkeypatch):
    device = FakeDevice([2.0, 3.0, 4.0])
    shown = []

    def display(step, images_per_sec, loss):
        shown.append((step, images_per_sec, loss))
        device.host += 1.0  # printing takes a second; the device idles

    loop = fake_loop(monkeypatch, device, events=True, display_every=2, display=display)
    assert shown == [(2, 8 / 5.25, 1.0)]  # waited for step 1's event: steps 0 and 1 took 2.25 + 3
    # step 2 starts at the event recorded after the line, on an idle device: it holds its launch
    assert loop.step_times_s == [2.25, 3.0, 4.25] and loop.wall_time_s == 9.5 == device.host - 1.0
    assert device.syncs == 2


def test_event_stamps_lay_device_steps_end_to_end_from_the_host_start():
    class At:
        def __init__(self, at):
            self.at = at

        def elapsed_time(self, later):
            return (later.at - self.at) * 1000

    events = [At(100.0), At(101.0), At(103.0), At(104.0)]
    host = [(7.5, 7.6), (7.7, 7.8, 7.9), (8.7, 8.8)]  # (fetched, enqueued[, resumed]) on the host's clock
    stamps = timing.event_stamps(7.0, host, events, {1: At(103.5)})
    assert [tuple(round(t, 9) for t in stamp) for stamp in stamps] == [(7.5, 8.0), (8.1, 10.0, 10.5), (11.0, 11.0)]
    loop = timing.loop_from_stamps(7.0, stamps, images_per_step=1)
    assert loop.step_times_s == pytest.approx([1.0, 2.0, 0.5]) and loop.wall_time_s == pytest.approx(3.5)
    assert loop.input_wait_s == pytest.approx([0.5, 0.1, 0.5])  # the host's waits; step 2's 0.8 capped at its 0.5


def test_step_timing_choices_per_framework_and_device():
    from benchmarks.core.errors import UsageError
    from benchmarks.core.framework_specs import FRAMEWORKS
    from benchmarks.measure import step_timing

    torch, tensorflow = FRAMEWORKS["torch"], FRAMEWORKS["tensorflow"]
    for device in ("gpu", "auto", None):
        step_timing.check("events", torch, device)  # auto: the backend checks once it has a device
    step_timing.check("sync", tensorflow, "cpu")
    with pytest.raises(UsageError, match="events needs a GPU: CUDA events do not exist on a CPU"):
        step_timing.check("events", torch, "cpu")
    with pytest.raises(UsageError, match="TensorFlow has no per-step device events"):
        step_timing.check("events", tensorflow, "gpu")
    assert step_timing.section("events", True) == {"clock": "cuda-events", "cudnn_benchmark": True}
    assert step_timing.section("sync", None) == {"clock": "host", "cudnn_benchmark": None}
