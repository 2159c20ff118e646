"""bench --trace and the report's "why it does not scale" split.

The step split is checked on hand-made intervals (known answers), then on a REAL torch.profiler
trace from a tiny bench run; the scaling-loss arithmetic on real records with known step times and
trace parts (synchronous and PS); and (slow) real 1-vs-2-worker pairs with --trace whose reports
add up: torch gloo DDP, TensorFlow all-reduce, and TensorFlow parameter servers with a real
`bench comm --strategy ps` record predicting the push/pull.
"""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import jsonschema
import pytest

from benchmarks.comm import record as comm_record
from benchmarks.measure import trace
from infra.helpers import bench, benchrun, last_json_line, validate_record
from infra.records import RecordFactory
from runners.reporting import load, why

COMM_SCHEMA = json.loads(comm_record.COMM_SCHEMA_FILE.read_text())
TINY = ["--framework", "torch", "--model", "alexnet", "--image-size", "64", "--batch-size", "2",
        "--num-warmup-batches", "1", "--num-batches", "3", "--display-every", "0"]


def test_split_step_known_answer():
    # step 0..100 us: compute 0-40 and 50-70 (60), input 0-10 (inside compute's span: counted as input,
    # so compute 50), communication 30-60 and 80-90 -> overlap 30-40 + 50-60 = 20, exposed 40-50 + 80-90
    # = 20, idle 70-80 + 90-100 = 20
    parts = trace.split_step(0, 100, compute=[(0, 40), (50, 70), (5, 20)], comm=[(30, 60), (80, 90)], inputs=[(0, 10)])
    us = {name: round(value * 1e6, 6) for name, value in parts.items()}
    assert us == {"step_s": 100, "compute_s": 50, "communication_s": 40, "exposed_communication_s": 20,
                  "overlap_s": 20, "input_s": 10, "idle_s": 20}
    assert us["compute_s"] + us["input_s"] + us["exposed_communication_s"] + us["idle_s"] == us["step_s"]


def test_events_outside_the_step_are_clipped():
    parts = trace.split_step(100, 200, compute=[(50, 150)], comm=[(190, 400)], inputs=[])
    assert round(parts["compute_s"] * 1e6) == 50 and round(parts["exposed_communication_s"] * 1e6) == 10


def test_comm_names():
    assert trace.is_comm("gloo:all_reduce") and trace.is_comm("c10d::allreduce_")
    assert trace.is_comm("ncclDevKernel_AllReduce_Sum_f32_RING_LL")
    assert trace.is_comm("sgd/CollectiveReduceV2:CollectiveReduceV2")
    assert not trace.is_comm("aten::broadcast_tensors") and not trace.is_comm("aten::conv2d")
    assert not trace.is_comm("_allreduce_step")  # a step function is not a collective


def test_trace_of_a_real_run(tmp_path):
    """One process: the trace and summary are written after the timed loop, the record points at
    them, every profiled step's parts add up, and there is no communication to find."""
    result = bench(*TINY, "--trace-steps", "2", "--trace", str(tmp_path / "traces"), "--json")
    assert result.returncode == 0, result.stderr
    record = validate_record(last_json_line(result.stdout))
    section = record["trace"]
    assert section["steps"] == 2 and Path(section["dir"]).name == record["run_id"]
    (rank,) = section["ranks"]
    assert rank["source"] == "profiler-events" and rank["error"] is None and len(rank["steps"]) == 2
    files = sorted(p.name for p in Path(section["dir"]).iterdir())
    assert files == ["rank-0.pt.trace.json", "rank-0.summary.json"]
    assert json.loads((Path(section["dir"]) / "rank-0.summary.json").read_text())["steps"] == rank["steps"]
    for step in rank["steps"]:
        assert step["step_s"] > 0 and step["compute_s"] > 0.5 * step["step_s"]  # a CPU step is mostly compute
        parts = step["compute_s"] + step["input_s"] + step["exposed_communication_s"] + step["idle_s"]
        assert parts == pytest.approx(step["step_s"])
        assert step["communication_s"] == 0
    assert rank["overlap_fraction"] is None
    assert record["repeats"][0]["images"] == 3 * 2  # the profiled steps are not in the timed loop
    assert "tracing 2 steps after the timed loops" in result.stderr


@pytest.mark.slow
def test_tensorflow_trace_of_a_real_run(tmp_path):
    """TensorFlow's profiler XSpace, read with TensorFlow's own protobuf: ops of the executor threads
    are the compute, and every step's parts add up."""
    result = bench(*TINY, "--framework", "tensorflow", "--trace-steps", "2", "--trace", str(tmp_path), "--json")
    assert result.returncode == 0, result.stderr
    (rank,) = validate_record(last_json_line(result.stdout))["trace"]["ranks"]
    assert rank["trace_file"] == "rank-0.xplane.pb" and rank["error"] is None and len(rank["steps"]) == 2
    for step in rank["steps"]:
        assert step["compute_s"] > 0.5 * step["step_s"] and step["communication_s"] == 0
        parts = step["compute_s"] + step["input_s"] + step["exposed_communication_s"] + step["idle_s"]
        assert parts == pytest.approx(step["step_s"])


def test_trace_flags_are_checked(tmp_path):
    (tmp_path / "file").write_text("")
    for args, message in ((["--trace-steps", "0"], "--trace-steps must be at least 1"),
                          (["--trace", str(tmp_path / "file")], "exists and is not a directory")):
        result = bench(*TINY, *args)
        assert result.returncode == 2 and message in result.stderr and "Traceback" not in result.stderr


def traced(record: dict, step_s: float, input_s: float, per_rank: list[list[dict]]) -> dict:
    """`record` with timed-loop step/input means and a trace section of these per-rank steps."""
    r = copy.deepcopy(record)
    r["step_time_s"]["mean"], r["input_wait_s"]["mean"] = step_s, input_s
    ranks = []
    for index, steps in enumerate(per_rank):
        full = [{"step_s": s["compute_s"] + s["exposed_communication_s"] + s["idle_s"],
                 "communication_s": s["exposed_communication_s"], "overlap_s": 0.0, "input_s": 0.0, **s} for s in steps]
        ranks.append({"rank": index, "trace_file": f"rank-{index}.pt.trace.json", "summary_file": None,
                      "source": "profiler-events", "note": None, "error": None, "steps": full,
                      "mean": trace.mean_step(full), "overlap_fraction": 0.0})
    r["trace"] = {"dir": "/t", "steps": len(per_rank[0]), "ranks": ranks}
    return validate_record(r)


def test_scaling_loss_split_known_answer(real_record):
    """T(1) = 100 ms (all compute); T(2) = 160 ms, 5 ms of it input wait in the timed loop. Traces at
    2 ranks, profiler-stretched x2: rank 0 compute 200, exposed 100, idle 20 (step 320); rank 1 (the
    slowest: most compute) compute 240, exposed 60, idle 20. Scaled by 160/320: straggler =
    (240 - 220) / 2 = 10, exposed = 60 / 2 = 30, compute = 220 / 2 - 100 = 10, idle = 10, input =
    5 - 0 -> sum 65; lost 60. The trace saw no input fetch, the timed loop 5 ms: residual -5 ms, 3.1%
    of T(N), within 5%."""
    R = RecordFactory(real_record)
    one = traced(R(10.0, strategy="ddp"), 0.100, 0.0, [[{"compute_s": 0.1, "exposed_communication_s": 0.0, "idle_s": 0.0}]])
    two = traced(R(12.5, strategy="ddp", workers=2), 0.160, 0.005,
                 [[{"compute_s": 0.200, "exposed_communication_s": 0.100, "idle_s": 0.020}],
                  [{"compute_s": 0.240, "exposed_communication_s": 0.060, "idle_s": 0.020}]])
    (loss,) = why.scaling_loss([one, two])
    ms = {name: round(1e3 * value, 6) for name, value in loss.parts.items()}
    assert ms == {"exposed_communication": 30, "input_wait": 5, "straggler_wait": 10, "compute": 10, "idle": 10}
    assert round(1e3 * loss.residual, 6) == -5 and loss.adds_up and loss.stretch == (2.0, 1.0)
    # one run a side: no verdict (issue 25: a single pair of runs cannot tell a loss from noise)
    assert why.verdict(loss) == ("at 2 workers: 160.0 vs 100.0 ms/step at 1 worker; the runs cannot tell (fewer than 2 "
                                 "differing runs on a side: repeat them for a verdict).")
    # repeats a side, 2 ms apart: the loss is significant and its largest part is named
    again = [traced(record, record["step_time_s"]["mean"] + 0.002, record["input_wait_s"]["mean"],
                    [[step for step in rank["steps"]] for rank in record["trace"]["ranks"]]) for record in (one, two)]
    for record in again:
        record["run_id"] = "f" + record["run_id"][1:]
    (repeated,) = why.scaling_loss([one, two, *again])
    assert repeated.significant and repeated.p_value < 0.01
    assert why.verdict(repeated).startswith("at 2 workers, 50% of the lost 60.0 ms/step is exposed communication")
    untraced = R(12.5, strategy="ddp", workers=2)
    untraced["step_time_s"]["mean"] = 0.5
    (far,) = why.scaling_loss([one, untraced])
    assert not far.traced and far.parts["exposed_communication"] is None and not far.adds_up


def test_ps_scaling_loss_is_the_mean_worker_without_stragglers(real_record):
    """Asynchronous PS: T(1) = 100 ms (all compute); T(2) = 140 ms, 5 ms input wait in the timed loop.
    Worker traces (stretched x2): compute 200 / 160, exposed push/pull 60 / 100, idle 20 / 20 (steps 280
    each). The mean worker, scaled by 140/280: compute 90, exposed 40, idle 10; straggler wait does not
    apply (no worker waits for another). Lost 40 = exposed 40 + input 5 + compute -10 + idle 10 + residual
    -5 (3.6% of T(N): adds up)."""
    R = RecordFactory(real_record)
    ps = {"framework": "tensorflow", "strategy": "ps", "num_ps": 1}
    one = traced(R(10.0, **ps), 0.100, 0.0, [[{"compute_s": 0.1, "exposed_communication_s": 0.0, "idle_s": 0.0}]])
    two = traced(R(14.0, workers=2, **ps), 0.140, 0.005,
                 [[{"compute_s": 0.200, "exposed_communication_s": 0.060, "idle_s": 0.020}],
                  [{"compute_s": 0.160, "exposed_communication_s": 0.100, "idle_s": 0.020}]])
    (loss,) = why.scaling_loss([one, two])
    ms = {name: None if value is None else round(1e3 * value, 6) for name, value in loss.parts.items()}
    assert ms == {"exposed_communication": 40, "input_wait": 5, "straggler_wait": None, "compute": -10, "idle": 10}
    assert round(1e3 * loss.residual, 6) == -5 and loss.adds_up and loss.stretch == (2.0, 1.0)
    assert "the runs cannot tell" in why.verdict(loss)
    again = [traced(record, record["step_time_s"]["mean"] + 0.002, record["input_wait_s"]["mean"],
                    [[step for step in rank["steps"]] for rank in record["trace"]["ranks"]]) for record in (one, two)]
    for record in again:
        record["run_id"] = "f" + record["run_id"][1:]
    (repeated,) = why.scaling_loss([one, two, *again])
    assert why.verdict(repeated).startswith("at 2 workers, 101% of the lost 40.0 ms/step is exposed communication (push/pull)")


def test_ps_worker_steps_come_from_stamps():
    """A PS worker runs no step marker: its steps are cut from the chief's stamps (seconds), the
    first a lead-in; the previous step's push (end -> pushed) is communication at each step's head."""
    stamps = [[10.0, 10.1, 10.5, 10.7], [10.8, 10.9, 11.5, 11.6], [11.7, 11.75, 12.0, 12.2]]
    events = trace.stamp_events(stamps)
    compute = [{"name": "conv:Conv2D", "ph": "X", "tid": 1, "cat": "cpu_op", "any_thread": True,
                "ts": 10.95e6, "dur": 0.5e6}]
    steps = trace.event_steps(compute + events)
    assert len(steps) == 2
    first = {name: round(value, 6) for name, value in steps[0].items()}
    # step 10.5 -> 11.5: push 10.5-10.7, input 10.8-10.9, compute 10.95-11.45, idle the rest
    assert first == {"step_s": 1.0, "compute_s": 0.5, "communication_s": 0.2, "exposed_communication_s": 0.2,
                     "overlap_s": 0.0, "input_s": 0.1, "idle_s": 0.2}
    assert round(steps[1]["exposed_communication_s"], 6) == 0.1 and round(steps[1]["step_s"], 6) == 0.5


# training arguments, benchrun launch extras, the `bench comm` run (None: none; the report then has no
# prediction) and how the report predicts from it
PAIRS = {
    "torch-ddp-gloo": (["--strategy", "ddp"], [],
                       ["--framework", "torch", "comm", "--model", "alexnet", "--max-bytes", "4M", "--step-factor", "4",
                        "--iters", "3", "--warmup-iters", "1"], "gradient buckets"),
    "tensorflow-allreduce": (["--framework", "tensorflow", "--strategy", "allreduce"], [], None, None),
    "tensorflow-ps": (["--framework", "tensorflow", "--strategy", "ps"], ["--num-ps", "1"],
                      ["--framework", "tensorflow", "comm", "--strategy", "ps", "--model", "alexnet", "--image-size", "64",
                       "--iters", "3", "--warmup-iters", "1"], "pull+push of every variable"),
}


def train_pair(training: list[str], launch_extra: list[str], store: Path) -> tuple[list[dict], dict[int, dict]]:
    """1 and 2 workers with --trace, into `store`: its records, and them by worker count."""
    args = [*TINY, *training, "--trace", str(store.with_suffix(".traces")), "--output", str(store)]
    for ranks in ("1", "2"):
        result = benchrun("launch", "--launcher", "local", "-n", ranks, *launch_extra, "--", *args)
        assert result.returncode == 0, result.stderr
    records = load.load([store])
    return records, {r["world"]["workers"]: r for r in records}


@pytest.mark.slow
@pytest.mark.parametrize("pair", PAIRS)
def test_pair_with_trace_explains_the_loss(pair, tmp_path):
    """The issue's "done when": 1 and 2 workers under the local launcher with --trace (torch gloo DDP
    with a `bench comm` record at 2 ranks; TensorFlow MultiWorkerMirroredStrategy; TensorFlow
    parameter servers with a `bench comm --strategy ps` record at 2 workers); `benchrun report`
    splits T(2) - T(1) and the parts add up.

    They add up only where the few traced steps are like the timed ones, which a loaded 2-core machine
    does not always give (docs/testing.md): a pair that does not add up is measured once more; a split
    that is wrong fails both."""
    training, launch_extra, comm_args, how = PAIRS[pair]
    comm_store = tmp_path / "comm.jsonl"
    if comm_args:
        comm = benchrun("launch", "--launcher", "local", "-n", "2", *launch_extra, "--", *comm_args,
                        "--output", str(comm_store))
        assert comm.returncode == 0, comm.stderr
    comm_records = load.load([comm_store], kind="comm") if comm_args else []
    tries = []
    for attempt in (1, 2):
        store = tmp_path / f"store-{attempt}.jsonl"
        records, pair_records = train_pair(training, launch_extra, store)
        for record in pair_records.values():
            assert len(record["trace"]["ranks"]) == record["world"]["workers"]
            assert all(rank["steps"] for rank in record["trace"]["ranks"])
        for rank in pair_records[2]["trace"]["ranks"]:  # the all-reduce, or the pulls and pushes, are seen
            assert all(s["communication_s"] > 0 for s in rank["steps"]), rank
        if launch_extra:
            check_ps_trace_and_comm(pair_records, comm_records)
        (loss,) = why.scaling_loss(records, comm_records)
        assert loss.traced and (loss.predicted is not None) == bool(comm_args)
        if comm_args:
            assert loss.predicted.how == how
        tries.append((loss.parts, loss.loss, loss.residual, loss.stretch))
        if loss.adds_up:
            break
    assert loss.adds_up, tries
    out = tmp_path / "report"
    result = benchrun("report", str(store), *([str(comm_store)] if comm_args else []), "--out", str(out),
                      "--link-gbps", "10")
    assert result.returncode == 0, result.stderr
    text = (out / "report.md").read_text()
    section = text.split("## Why it does not scale")[1].split("\n## ")[0]
    # one run a side: the split is shown, but no verdict is drawn from it (the runs' significance: test_scaling_loss_*)
    assert ": adds up" in section and re.search(r"at 2 workers: [\d.]+ vs [\d.]+ ms/step at 1 worker; the runs cannot "
                                                r"tell \(fewer than 2 differing runs on a side", section), section
    assert (out / "why-1.png").is_file() and (out / "network-latency.png").is_file() == bool(comm_args)
    assert (out / "network-busbw.png").is_file() == (how == "gradient buckets")


def check_ps_trace_and_comm(pair_records: dict, comm_records: list[dict]) -> None:
    """PS: every worker profiled itself (its steps cut from the chief's stamps); the push/pull
    microbenchmark moved exactly the model's variables, placed as training placed them, correctly,
    and a pull's time grows with the bytes pulled (the transfer is inside the timed region)."""
    two = pair_records[2]
    assert [rank["rank"] for rank in two["trace"]["ranks"]] == [1, 2]  # the workers; the chief is process 0
    assert all("stamps" in rank["note"] and rank["trace_file"] == f"rank-{rank['rank']}.xplane.pb"
               for rank in two["trace"]["ranks"])
    names = {p.name for p in Path(two["trace"]["dir"]).iterdir()}
    assert {"rank-1.xplane.pb", "rank-2.xplane.pb", "rank-3.xplane.pb", "rank-1.summary.json"} <= names  # PS traced too
    (comm,) = comm_records
    jsonschema.validate(comm, COMM_SCHEMA)
    assert comm["status"] == "ok" and comm["correct"] and comm["config"]["backend"] == "ps"
    assert comm["world"]["workers"] == 2 and comm["world"]["processes"] == 4
    rows = {op: [r for r in comm["results"] if r["op"] == op] for op in ("pull", "push", "ps_step")}
    (step,) = rows["ps_step"]
    total = comm["gradients"]["total_bytes"]
    assert step["bytes"] == total == sum(step["buckets"]) and step["ranks"] == 2 and step["wrong"] == 0
    assert comm["placement"] == [{"ps": 0, "variables": len(step["buckets"]), "bytes": total}]
    # every trainable variable is sent (and the non-trainable BN statistics): at least the parameters
    assert total >= 4 * two["model"]["parameters"]
    for op in ("pull", "push"):
        sizes = [r["bytes"] for r in rows[op]]
        assert sizes == sorted(set(comm["gradients"]["bucket_bytes"])) and all(r["wrong"] == 0 for r in rows[op])
    smallest, largest = rows["pull"][0], rows["pull"][-1]
    assert largest["bytes"] > 1000 * smallest["bytes"] and largest["time_s"] > smallest["time_s"]
