"""bench --trace: where a profiled step's time goes, from the framework profiler's own trace.

The trace window runs after the timed loops (never inside them): K steps, marked by timing.run_steps'
`annotate` hook. A step splits, with no part counted twice, into

    compute  + input  + exposed communication  + idle  =  step

and `overlap` = communication hidden under compute. CPU traces (and TensorFlow's XSpace, read with
TensorFlow's own protobuf) are split here from the profiler's events, because HolisticTraceAnalysis
cannot analyse CPU-only traces; GPU traces go to HTA. Under --strategy ps no step marker runs on a
worker: its steps come from the stamps its steps take on its clock. docs/results.md#trace says how
each part is found. No framework is imported here.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path

from ..core import durable

STEP_PREFIX = "ProfilerStep#"  # torch.profiler's own step name: HTA finds steps by it too
STEP_NAME = "ProfilerStep"  # how steps are found: TensorFlow's TraceMe keeps the name before '#'
XPLANE_SUFFIX = ".xplane.pb"  # TensorFlow profiler's XSpace
INPUT = "dlbench/input"
PUSH = "dlbench/push"  # PS: the previous step's gradients pushed and applied (from the step's stamps)
PUSHED = "dlbench_pushed"  # PS: the name of the probe op whose arrival on the worker stamps `pushed`
PULL_SOURCE = "ReadVariableOp"  # a _Recv of this op's output: a variable pulled from the task holding it
RECV_KERNELS = ("_Recv", "_HostRecv")
ASYNC_START, ASYNC_DONE = "ExecutorState::ProcessAsync::Start", "ExecutorState::ProcessAsync::Done"
TASK_ENVIRONMENT, PROFILE_START = "Task Environment", "profile_start_time"  # the XSpace's wall-clock origin
OP_EVENT = re.compile(r"[^\s:]+:[A-Za-z_]\w*")  # an executor op: "node/name:OpType"
# Runtime regions named like ops or not, which wrap a whole function call (they are not compute):
# "EagerService:Enqueue" (a remote call), "EagerLocalExecute: fn", "KernelAndDeviceFunc::Run".
RUNTIME_REGIONS = ("EagerService:",)
PARTS = ("step_s", "compute_s", "communication_s", "exposed_communication_s", "overlap_s", "input_s", "idle_s")
# Profiler event names of collectives (torch.distributed's c10d ops, gloo/NCCL's own spans).
# Specific names only: a step function's own name may contain "allreduce".
COMM_MARKERS = ("c10d::", "gloo:", "nccl:", "ncclKernel", "ncclDevKernel", "record_param_comms",
                # TensorFlow: collective ops (MultiWorkerMirroredStrategy), NCCL ops, cross-task tensors
                ":CollectiveReduce", ":CollectiveGather", ":CollectiveBcast", ":NcclAllReduce", ":_Recv", ":_Send",
                "RecvTensor", PUSH)


def annotation(kind: str, index: int) -> str:
    """The trace name of a marked region (timing.run_steps' annotate kinds). TensorFlow's TraceMe
    reads '#...' as metadata, so its steps are named `ProfilerStep`."""
    return f"{STEP_PREFIX}{index}" if kind == "step" else INPUT


def is_comm(name: str) -> bool:
    lowered = name.lower()
    return any(marker.lower() in lowered for marker in COMM_MARKERS)


# -- intervals -------------------------------------------------------------------------------------


def union_length(intervals: list[tuple[float, float]]) -> float:
    """Total length covered by possibly overlapping [start, end) intervals."""
    total, reach = 0.0, float("-inf")
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def clip(intervals: list[tuple[float, float]], start: float, end: float) -> list[tuple[float, float]]:
    return [(max(a, start), min(b, end)) for a, b in intervals if b > start and a < end]


def split_step(start: float, end: float, compute, comm, inputs) -> dict:
    """One step's parts, in seconds, from interval lists in microseconds (Chrome trace units)."""
    compute, comm, inputs = clip(compute, start, end), clip(comm, start, end), clip(inputs, start, end)
    busy = union_length(compute + inputs)
    everything = union_length(compute + inputs + comm)
    input_s = union_length(inputs)
    comm_s = union_length(comm)
    compute_only = union_length(compute)
    seconds = 1e-6
    return {
        "step_s": (end - start) * seconds,
        "compute_s": (busy - input_s) * seconds,
        "communication_s": comm_s * seconds,
        "exposed_communication_s": (everything - busy) * seconds,
        "overlap_s": (comm_s + compute_only - union_length(compute + comm)) * seconds,
        "input_s": input_s * seconds,
        "idle_s": (end - start - everything) * seconds,
    }


# -- CPU traces: the profiler's own events -----------------------------------------------------------


def load_events(path: str | Path) -> list[dict]:
    with open(path) as handle:
        return [e for e in json.load(handle).get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]


def event_steps(events: list[dict]) -> list[dict]:
    """Per step of the window, its parts: the CPU breakdown from the trace's events. Compute is the
    training thread's ops (torch: autograd runs there on a CPU), or any thread's where the events
    say so (`any_thread`: TensorFlow runs a step's ops on its executor threads)."""
    steps = sorted((e for e in events if e["name"].startswith(STEP_NAME)), key=lambda e: e["ts"])
    if not steps:
        raise ValueError(f"no {STEP_NAME} regions in the trace")
    main = steps[0]["tid"]  # the training thread
    span = lambda e: (float(e["ts"]), float(e["ts"]) + float(e["dur"]))  # noqa: E731 - a one-line view of an event, local here
    comm = [span(e) for e in events if is_comm(e["name"])]
    compute = [span(e) for e in events if e.get("cat") == "cpu_op" and (e.get("tid") == main or e.get("any_thread"))
               and not is_comm(e["name"])]
    inputs = [span(e) for e in events if e["name"] == INPUT]
    return [split_step(*span(step), compute, comm, inputs) for step in steps]


def _stats(plane, event) -> dict:
    """An XEvent's stats by name (a reference stat's value is the name it refers to)."""
    names = plane.stat_metadata
    return {names[stat.metadata_id].name: names[stat.ref_value].name if stat.ref_value
            else (stat.str_value or stat.int64_value or stat.uint64_value) for stat in event.stats}


def wall_clock_origin(space) -> int:
    """What to add to the host lines' timestamps (ns) to put them on the wall clock (ns since the
    epoch, as tf.timestamp's stamps): TensorFlow's profiler writes them relative to the session's
    start (`profile_start_time` of its "Task Environment" plane); 0 when they are absolute already."""
    start = 0
    for plane in space.planes:
        if plane.name == TASK_ENVIRONMENT:
            start = next((s.uint64_value or s.int64_value for s in plane.stats
                          if plane.stat_metadata[s.metadata_id].name == PROFILE_START), 0)
    lines = [line.timestamp_ns for plane in space.planes if plane.name.startswith("/host:") for line in plane.lines]
    return start if lines and max(lines) < start else 0


def load_xspace(path: str | Path) -> tuple[list[dict], bool]:
    """A TensorFlow profiler XSpace as Chrome-trace-like events (microseconds on the wall clock; which
    events, docs/results.md#trace), and whether it has GPU planes (whose kernels this split does not see)."""
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    space = xplane_pb2.XSpace()
    space.ParseFromString(Path(path).read_bytes())
    events = []
    started, done = {}, {}  # async ops: producer id -> (start, name); consumer id -> end
    origin = wall_clock_origin(space)
    for plane in space.planes:
        if not plane.name.startswith("/host:"):
            continue
        for line in plane.lines:
            executor = line.name.startswith("tf_") and not line.name.startswith("tf_data")  # tf.data: input, in the background
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                ts, dur = (origin + line.timestamp_ns) / 1e3 + event.offset_ps / 1e6, event.duration_ps / 1e6
                if name in (ASYNC_START, ASYNC_DONE):
                    stats = _stats(plane, event)
                    if name == ASYNC_DONE:
                        done[stats.get("_c")] = ts + dur
                    elif stats.get("kernel_type") in RECV_KERNELS and PULL_SOURCE in str(stats.get("name", "")):
                        started[stats.get("_p")] = (ts, f"{stats['name']}:{stats['kernel_type']}")
                    continue
                op = executor and OP_EVENT.fullmatch(name) is not None and not name.startswith(RUNTIME_REGIONS)
                events.append({"name": name, "ph": "X", "tid": line.id, "cat": "cpu_op" if op else "user_annotation",
                               "any_thread": op, "ts": ts, "dur": dur})
    for key, (ts, name) in started.items():
        if key in done:
            events.append({"name": name, "ph": "X", "tid": "async", "cat": "async", "ts": ts, "dur": done[key] - ts})
    return events, any(plane.name.startswith("/device:GPU") for plane in space.planes)


def stamp_events(stamps: list[list[float]]) -> list[dict]:
    """A PS worker's steps as events, from its step stamps (fetch start, fetch end, end, pushed; seconds
    on the worker's wall clock): step i from step i-1's end to its own, its input fetch, and the push of
    step i-1's gradients at its head. The first stamped step is the lead-in: it only says where the
    second begins, so len(stamps) - 1 steps come out."""
    span = lambda name, start, end: {"name": name, "ph": "X", "tid": "stamps", "cat": "user_annotation",  # noqa: E731 - a one-line event builder, local here
                                     "ts": start * 1e6, "dur": max(end - start, 0.0) * 1e6}
    events = []
    for index in range(1, len(stamps)):
        (_, _, previous_end, pushed), (fetch_start, fetch_end, end, _) = stamps[index - 1], stamps[index]
        events += [span(f"{STEP_PREFIX}{index - 1}", previous_end, end), span(INPUT, fetch_start, fetch_end),
                   span(PUSH, previous_end, pushed)]
    return events


# -- GPU traces: HolisticTraceAnalysis ---------------------------------------------------------------


def hta_steps(path: Path, rank: int, num_steps: int, cpu_steps: list[dict]) -> list[dict]:
    """GPU breakdown from HTA over the whole window, spread evenly over its steps: HTA reports
    totals per rank, not per step. Input time comes from the CPU markers."""
    from hta.trace_analysis import TraceAnalysis

    analysis = TraceAnalysis(trace_files={rank: str(path)}, trace_dir=str(path.parent))
    row = analysis.get_temporal_breakdown(visualize=False).iloc[0]
    overlap_pct = float(analysis.get_comm_comp_overlap(visualize=False).iloc[0]["comp_comm_overlap_pctg"])
    micro = 1e-6 / num_steps
    step_s = sum(s["step_s"] for s in cpu_steps) / num_steps
    compute = float(row["compute_time(us)"]) * micro
    comm = float(row["non_compute_time(us)"]) * micro  # HTA: communication + memory copies
    overlap = comm * overlap_pct / 100 if overlap_pct == overlap_pct else 0.0
    input_s = sum(s["input_s"] for s in cpu_steps) / num_steps
    exposed = max(comm - overlap, 0.0)
    step = {"step_s": step_s, "compute_s": compute, "communication_s": comm, "exposed_communication_s": exposed,
            "overlap_s": overlap, "input_s": input_s, "idle_s": max(step_s - compute - exposed - input_s, 0.0)}
    return [dict(step) for _ in range(num_steps)]


# -- the summary ------------------------------------------------------------------------------------


def mean_step(steps: list[dict]) -> dict:
    return {part: sum(step[part] for step in steps) / len(steps) for part in PARTS}


STAMPED_NOTE = ("steps from the chief's step stamps on this worker's clock (a PS worker runs no step marker); "
                "communication: pulls (variable reads from the PS) and the previous step's push until the PS applied it")


def summarize(path: str | Path, rank: int, stamps: list[list[float]] | None = None) -> dict:
    """The per-rank summary written next to the trace and carried in the record (trace.ranks[]).
    `stamps`: a PS worker's step stamps (stamp_events), which mark its steps in place of markers."""
    path = Path(path)
    source, note = "profiler-events", None
    if path.name.endswith(XPLANE_SUFFIX):
        events, on_gpu = load_xspace(path)
        if on_gpu:
            note = "TensorFlow on a GPU: host-side split (op launch times), GPU kernels not analysed"
    else:
        events = load_events(path)
    if stamps is not None:
        events = [e for e in events if not e["name"].startswith(STEP_NAME) and e["name"] != INPUT] + stamp_events(stamps)
        note = "; ".join(n for n in (note, STAMPED_NOTE) if n)
    steps = event_steps(events)
    if any(e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") for e in events):  # a GPU trace
        try:
            steps, source = hta_steps(path, rank, len(steps), steps), "hta"
        except ImportError:
            note = "GPU trace, but HolisticTraceAnalysis is not installed: CPU-side breakdown"
    mean = mean_step(steps)
    return {
        "rank": rank,
        "trace_file": path.name,
        "source": source,
        "note": note,
        "steps": steps,
        "mean": mean,
        "overlap_fraction": mean["overlap_s"] / mean["communication_s"] if mean["communication_s"] > 0 else None,
    }


def failure(error: BaseException, path: Path, rank: int) -> str:
    """Why rank `rank` has no trace at `path`, as the record and the warning line say it. On a file system
    that took no more (durable.room_problem), nothing of this rank's trace is left behind (a half-written
    trace cannot be read and holds the space that is left; other ranks' files stay), and the line says so
    in the words every full-disk output uses."""
    room = durable.room_problem(error, path.parent)
    if room is None:
        return f"{type(error).__name__}: {error}"
    for leftover in path.parent.glob(f"rank-{rank}.*"):
        with contextlib.suppress(OSError):
            leftover.unlink()
    with contextlib.suppress(OSError):
        path.parent.rmdir()  # the run's folder, once no rank's file is in it
    return str(durable.NoRoom(repr(str(path.parent)), room, f"rank {rank}'s trace is not kept, the measurement is; "))


def write_summary(path: Path, rank: int, stamps: list[list[float]] | None = None) -> dict:
    """summarize(), also written beside the trace as the entry's `summary_file`."""
    summary = {**summarize(path, rank, stamps), "summary_file": f"rank-{rank}.summary.json"}
    (path.parent / summary["summary_file"]).write_text(json.dumps(summary, indent=1) + "\n")
    return summary
