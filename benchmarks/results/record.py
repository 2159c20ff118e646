"""The result record: one versioned JSON document per run, the only output format.

Every runner, sweep store and report reads this schema. `schema_version`
changes on any incompatible change; new optional fields bump the minor.
The JSON Schema file shipped in benchmarks/schema/ is generated from these
models (`python -m benchmarks.results.record > benchmarks/schema/result-1.json`) and
a test keeps the two identical. Field meanings: docs/results.md.
"""

from __future__ import annotations

import datetime as _dt
import json
import uuid
from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, Field

from ..measure import step_timing
from .accuracyrecord import AccuracyInfo  # the time-to-accuracy section's models live there
from ..distributed import strategies
from ..distributed.world import detect, world_section
from .headroomrecord import AnchorInfo, CeilingInfo, ReferenceInfo  # the headroom sections' models live there
from ..settings.options import DEFAULTS, choices_of
from .pathrecord import ComparisonInfo, PathInfo, PreflightInfo, StatsRecord, _Model  # the 1.18 sections' models live there
from .provenance import CONTAINER_RUNTIMES

SCHEMA_VERSION = "1.21"
SCHEMA_FILE = Path(__file__).parents[1] / "schema" / "result-1.json"  # one file per major version

Status = Literal["ok", "oom", "failed", "timeout", "interrupted"]


class RunConfig(_Model):
    framework: Literal[choices_of("framework")]
    model: Literal[choices_of("model")]
    batch_size: int = Field(description="images per step per worker")
    image_size: int
    num_warmup_batches: int
    num_batches: int
    repeats: int
    precision: Literal[choices_of("precision")] = Field(description="as asked; `amp` is an alias resolved per device "
                                                                    "(precision.effective)")
    data_format: Literal[choices_of("data_format")]
    device: Literal[choices_of("device")]
    num_threads: Optional[int]
    num_data_workers: int
    data_dir: Optional[str]
    data: Literal["synthetic", "real"]
    seed: int
    xla: bool
    compile: Optional[Literal[choices_of("compile")]] = Field(default=None, description="torch.compile mode; null = eager (1.5)")
    synthetic_batches: int
    num_classes: int
    strategy: Literal[choices_of("strategy")]
    num_ps: int
    ps_placement: Literal[choices_of("ps_placement")]
    worker_port: int
    ps_port: int
    rendezvous_port: int
    rendezvous_timeout: float
    target_accuracy: Optional[float] = Field(default=None, description="--target-accuracy: a time-to-accuracy run (section "
                                                                       "`accuracy`); null: throughput (1.13)")
    eval_every: Optional[int] = Field(default=None,
                                      description="--eval-every samples; null: a quarter of the training set (1.13)")
    max_epochs: float = Field(default=DEFAULTS["max_epochs"], description="--max-epochs (1.13)")
    time_budget: Optional[float] = Field(default=None, description="--time-budget seconds (1.13)")
    base_lr: float = Field(default=DEFAULTS["base_lr"], description="--base-lr: SGD's LR at base_batch; the LR of throughput "
                                                                    "runs (1.13)")
    base_batch: Optional[int] = Field(default=None, description="--base-batch; time-to-accuracy runs: --batch-size when not "
                                                                "given (1.13)")
    lr_rule: Literal[choices_of("lr_rule")] = Field(default=DEFAULTS["lr_rule"], description="--lr-rule (1.13)")
    warmup_epochs: Optional[float] = Field(default=None, description="--warmup-epochs as given; null: the rule's default (1.13)")
    val_fraction: float = Field(default=DEFAULTS["val_fraction"], description="--val-fraction (1.13)")
    val_images: Optional[int] = Field(default=None, description="--val-images: evaluate on the first N validation images; null: "
                                                                "all (1.13)")
    fashion_mnist_dir: Optional[str] = Field(default=None, description="--fashion-mnist-dir (1.13)")
    step_timing: Literal[choices_of("step_timing")] = Field(default=DEFAULTS["step_timing"], description="--step-timing as asked "
                                                                                                         "(1.14)")
    strict_preflight: bool = Field(default=False, description="--strict-preflight: a failed preflight check refuses the run "
                                                              "instead of labelling it (1.18)")
    ceiling: Literal[choices_of("ceiling")] = Field(
        default=DEFAULTS["ceiling"], description="--ceiling: the measured GEMM ceiling off, cached or measured "
        "again (1.19)")
    reference: bool = Field(default=False, description="--reference: the bare loop timed beside the repeats (1.20)")


class Throughput(_Model):
    images_per_sec: float = Field(description="mean over repeats of images / wall time of the timed loop")
    ci95_halfwidth: Optional[float]
    ci_method: Optional[Literal["t-interval over repeats", "delta method on step times"]]
    total_images: int
    total_wall_time_s: float


class RepeatResult(_Model):
    index: int
    images: int
    wall_time_s: float
    images_per_sec: float
    step_time_s: StatsRecord
    input_wait_s: StatsRecord
    input_wait_fraction: float = Field(description="sum of input waits / wall time")
    joules: Optional[float] = Field(default=None, description="energy of this timed loop, summed over ranks (energy.source); "
                                                              "null where not measured (1.9)")
    device_state: Optional["DeviceState"] = Field(default=None, description="GPU temperature, SM clock, power and power limit "
                                                                            "while this loop ran, min/max over the NVML samples "
                                                                            "of every rank; null without NVML (1.9)")


class Range(_Model):
    min: float
    max: float


class DeviceState(_Model):
    temperature_c: Optional[Range] = Field(description="the hottest of the rank's GPUs, °C")
    sm_clock_mhz: Optional[Range] = Field(description="the slowest SM clock of the rank's GPUs, MHz")
    power_limit_w: Optional[Range] = Field(description="enforced power limit, summed over the rank's GPUs, W")
    power_w: Optional[Range] = Field(description="power draw, summed over the rank's GPUs, W")


class EnergyInfo(_Model):
    source: Optional[Literal["nvml-energy-counter", "nvml-power-sampling", "rapl"]] = Field(description="what measured it; null "
                                                                                                        "when nothing could")
    scope: Optional[Literal["gpus", "cpu-packages"]] = Field(description="gpus: the GPUs the ranks trained on; cpu-packages: "
                                                                         "every CPU package of each host (counted once per host)")
    joules: Optional[float] = Field(description="energy of all timed loops, summed over ranks; null (never 0) where not measured")
    average_watts: Optional[float] = Field(description="joules / throughput.total_wall_time_s")
    images_per_joule: Optional[float] = Field(description="throughput.total_images / joules")
    unavailable_reason: Optional[str] = Field(description="why joules is null")


class Memory(_Model):
    allocator_peak_bytes: Optional[int] = Field(
        description="framework allocator peak since warmup (torch max_memory_allocated, TF get_memory_info peak); GPU only"
    )
    reserved_peak_bytes: Optional[int] = Field(description="PyTorch caching allocator reserved peak; GPU only")
    device_peak_bytes: Optional[int] = Field(description="NVML used-memory peak of the device since warmup")
    device_total_bytes: Optional[int]
    device_unavailable_reason: Optional[str] = Field(
        default=None, description="why device_peak_bytes / device_total_bytes are null on a GPU run (NVML's error); null when "
                                  "measured and on a CPU (1.12)")
    host_rss_peak_bytes: Optional[int] = Field(description="resident set high-water mark of the benchmark process")
    host_rss_peak_since: Literal["process_start", "warmup_end"]


class WorldInfo(_Model):
    rank: int = Field(description="rank of the process that wrote this record (0 for the run's record)")
    processes: int = Field(description="all processes of the run, chief and parameter servers included")
    workers: int = Field(description="processes that train (the ranks whose images are counted)")
    num_ps: int
    strategy: str
    launcher: str = Field(description="what started the ranks: none, env, torchrun, mpirun, mpich, srun, horovodrun, "
                                      "benchrun-local")
    nodes: int
    processes_per_node: int
    hosts: list[str]


class RankResult(_Model):
    rank: int
    host: str
    role: Literal[strategies.ROLES]
    images: int
    wall_time_s: float = Field(description="this rank's timed loops, summed over repeats")
    images_per_sec: float
    step_time_s: Optional[StatsRecord] = Field(
        default=None, description="this rank's own step times, pooled over its repeats: who is slow, and how noisy "
        "each rank is (1.19)")
    ceiling_flops_per_sec: Optional[float] = Field(
        default=None, description="this rank's device's measured GEMM ceiling (its `ceiling` probe); null when off, "
        "failed or not probed (1.19)")


class Replicas(_Model):
    checksums: list[str] = Field(description="sha256 prefix of each replica's parameters after the run")
    in_sync: bool
    expected_in_sync: bool = Field(description="false for --strategy none with several ranks: independent replicas")


class PsLoad(_Model):
    ps: int
    variables: int
    bytes: int


class SkippedImage(_Model):
    path: str
    reason: str


class DataInfo(_Model):
    images: int = Field(description="image files found in --data-dir (this rank's view, before sharding)")
    skipped_images: int = Field(description="files skipped because they cannot be decoded (scan before the run + decode failures "
                                            "during it)")
    skipped_examples: list[SkippedImage] = Field(description="the first 10 skipped files and why")


class PrecisionInfo(_Model):
    requested: str = Field(description="--precision as given")
    effective: Literal["fp32", "tf32", "amp-fp16", "amp-bf16"] = Field(description="what `amp` resolved to on this device (1.3)")
    autocast_dtype: Optional[Literal["float16", "bfloat16"]]
    tf32: bool = Field(description="TF32 was asked on (tf32) or explicitly off (every other precision)")
    loss_scaling: bool = Field(description="dynamic loss scaling (amp-fp16)")
    tf32_flag: bool = Field(description="the framework's TF32 switch read back after setting it (always false on a CPU)")
    tf32_in_effect: bool = Field(description="tf32_flag and a GPU with TF32 units (compute capability >= 8.0)")
    compute_capability: Optional[str] = Field(description="GPU compute capability, e.g. '8.0'; null on a CPU")
    framework_settings: dict[str, object] = Field(description="the framework's own settings, read back")


class CompileInfo(_Model):
    mode: Literal[(*choices_of("compile"), "xla", "graph")] = Field(description="torch.compile mode, or TensorFlow's xla / graph "
                                                                                "(tf.function)")
    backend: Literal["inductor", "xla", "tf.function"]
    compile_time_s: float = Field(description="the first step, synchronised and timed on its own before warmup: tracing + "
                                              "compilation + one step")
    fell_back_to_eager: bool = Field(description="compilation failed and the run trained eager (torch)")
    fallback_reason: Optional[str]
    graph_breaks: Optional[int] = Field(description="torch dynamo graph breaks in the first step; null where not counted")
    graphs: Optional[int] = Field(description="graphs compiled by the first step (torch dynamo); null where not counted")
    graphs_at_end: Optional[int] = Field(description="graphs compiled by the end of the run: more than `graphs` means it "
                                                     "recompiled during warmup or timing")


class StepTimingInfo(_Model):
    clock: Literal[tuple(step_timing.CLOCKS.values())] = Field(description="what timed each step: host = the host clock after a "
                                                                           "device sync at every step; cuda-events = CUDA events "
                                                                           "recorded after every step, the device synchronised "
                                                                           "at the loop's ends only")
    cudnn_benchmark: Optional[bool] = Field(description="torch.backends.cudnn.benchmark read back on a GPU; null on a CPU and "
                                                        "under TensorFlow")


class TraceStep(_Model):
    step_s: float = Field(description="the profiled step, input fetch included")
    compute_s: float = Field(description="framework compute ops (CPU: the training thread's ops; GPU: HTA compute kernels)")
    communication_s: float = Field(description="collectives in flight, hidden or not")
    exposed_communication_s: float = Field(description="communication overlapping neither compute nor input")
    overlap_s: float = Field(description="communication hidden under compute")
    input_s: float = Field(description="fetching the batch")
    idle_s: float = Field(description="step - compute - input - exposed communication")


class TraceRank(_Model):
    rank: int
    trace_file: Optional[str] = Field(default=None, description="the profiler's trace, in trace.dir")
    summary_file: Optional[str] = Field(default=None, description="this entry as JSON, in trace.dir")
    source: Optional[Literal["profiler-events", "hta"]] = Field(default=None, description="who split the time: the profiler's "
                                                                                          "CPU events (benchmarks/measure/trace.py) or "
                                                                                          "HolisticTraceAnalysis (GPU)")
    note: Optional[str] = None
    error: Optional[str] = Field(default=None, description="why this rank has no trace (the measurement stands)")
    steps: list[TraceStep] = Field(default_factory=list, description="per profiled step")
    mean: Optional[TraceStep] = None
    overlap_fraction: Optional[float] = Field(default=None, description="overlap / communication (null: no communication)")


class TraceInfo(_Model):
    dir: str = Field(description="--trace DIR/<run id>, as seen by process 0")
    steps: int = Field(description="--trace-steps: steps profiled after the timed loops")
    ranks: list[Optional[TraceRank]] = Field(description="per training rank, in `ranks[]` order")


class FlopsInfo(_Model):
    forward_per_image: Optional[float] = Field(description="FLOPs of one forward pass per image at image_size, counted by the "
                                                           "framework (convolutions and matrix products, 2 per multiply-add)")
    training_step_per_image: Optional[float] = Field(description="forward + backward FLOPs per image of one training step, "
                                                                 "counted (torch); null where the framework counts the forward "
                                                                 "only")
    counted_by: Optional[str] = Field(description="how the framework counted")
    count_failed_reason: Optional[str] = Field(description="why there is no count; null when counted")
    image_size: int
    basis: Literal["3 x forward"] = Field(description="achieved FLOP/s = 3 x forward_per_image x images/sec")
    achieved_flops_per_sec: Optional[float] = Field(description="model FLOP/s of the whole run (all workers), from "
                                                                "throughput.images_per_sec")
    math: Optional[Literal["fp32", "tf32", "fp16", "bf16"]] = Field(description="the units the matmuls ran on (GPU): tf32 only "
                                                                                "where really in effect")
    peak_flops_per_sec: Optional[float] = Field(description="dense datasheet peak of one device for `math`; null when not known")
    peak_source: Optional[str] = Field(description="the datasheet the peak comes from")
    devices: int = Field(description="devices the workers trained on; MFU divides by all their peaks")
    mfu: Optional[float] = Field(description="model FLOPs utilisation: achieved / (peak x devices), 0..1")
    mfu_unavailable_reason: Optional[str] = Field(description="why mfu is null (CPU, unknown GPU, MIG slice, no count)")
    achievable_flops_per_sec: Optional[float] = Field(
        default=None, description="the measured GEMM ceilings of the devices the workers trained on, summed "
        "(ranks[].ceiling_flops_per_sec); null when off or not measured (1.19)")
    mfu_vs_achievable: Optional[float] = Field(
        default=None, description="MFU vs achievable: achieved_flops_per_sec / achievable_flops_per_sec, CPUs "
        "included (1.19)")
    achievable_unavailable_reason: Optional[str] = Field(
        default=None, description="why mfu_vs_achievable is null (1.19)")


class BatchSearch(_Model):
    search_id: str = Field(description="the same in every probe record of one --find-max-batch search")
    probe: int = Field(description="1 for the first probe")
    phase: Literal["double", "bisect"] = Field(description="double until a probe runs out of memory, then bisect")
    largest_fit: Optional[int] = Field(description="largest batch that ran ok so far (this probe included)")
    smallest_oom: Optional[int] = Field(description="smallest batch that ran out of memory so far")
    final: bool = Field(description="this probe ended the search")
    max_batch: Optional[int] = Field(description="the answer, on the final probe: largest_fit; null elsewhere and when nothing "
                                                 "fits")
    stop_reason: Optional[str] = Field(description="why the search ended (bracket closed, limit, time budget, a failed probe); "
                                                   "null unless final")
    time_budget_s: float = Field(description="--max-batch-budget")


class ModelInfo(_Model):
    parameters: int
    aux_head: bool


class FrameworkInfo(_Model):
    name: str
    version: str
    device_kind: Literal["cpu", "gpu"]
    device_name: str
    device_count: int
    visible_gpus: int
    cuda_version: Optional[str]
    cudnn_version: Optional[str]
    intra_op_threads: Optional[int] = Field(
        None, description="the framework's intra-op CPU threads as the run used them (torch.get_num_threads(): "
        "--num-threads, else OMP_NUM_THREADS, else the cores; TensorFlow: the setting, null when it picks at run time) (1.16)")


class Provenance(_Model):
    dlbench_version: str
    python: str
    python_implementation: str
    os: str
    hostname: str
    cpu_model: str
    cpu_count: Optional[int]
    cpu_usable: int
    container_runtime: Literal[CONTAINER_RUNTIMES]
    requested_runtime: Optional[str] = Field(
        None, description="the runtime benchrun was asked for (its --runtime name); null when bench ran alone")
    runtime_version: Optional[str] = Field(
        None, description="that runtime's version as benchrun found it (`apptainer --version`, ...); null without one")
    image: Optional[str]
    command: list[str]
    framework: Optional[FrameworkInfo] = Field(description="null when the run died before the framework loaded")


class ErrorInfo(_Model):
    kind: Literal["oom", "crash", "timeout", "interrupted", "environment"] = Field(
        description="environment (1.6): a fault outside the run ended it (container daemon gone, node failed); "
                    "benchrun writes it")
    message: str
    exit_code: Optional[int] = None
    signal: Optional[str] = None


class ResultRecord(_Model):
    schema_version: Literal[SCHEMA_VERSION] = SCHEMA_VERSION
    run_id: str
    timestamp_utc: str
    status: Status
    error: Optional[ErrorInfo]
    config: RunConfig
    model: Optional[ModelInfo]
    throughput: Optional[Throughput]
    step_time_s: Optional[StatsRecord] = Field(description="per-step times pooled over repeats")
    input_wait_s: Optional[StatsRecord]
    repeats: list[RepeatResult]
    memory: Optional[Memory]
    final_loss: Optional[float]
    world: WorldInfo
    ranks: list[RankResult] = Field(description="per training rank; totals above are over these")
    replicas: Optional[Replicas]
    placement: Optional[list[PsLoad]] = Field(description="variables and bytes per parameter server (--strategy ps)")
    data: Optional[DataInfo] = Field(default=None, description="--data-dir only: images found and skipped as undecodable (1.2)")
    precision: Optional[PrecisionInfo] = Field(default=None, description="precision really in effect; null when the run died "
                                                                         "before setup (1.3)")
    compile: Optional[CompileInfo] = Field(default=None, description="graph compilation of the first step; null for torch eager "
                                                                     "(1.5)")
    energy: Optional[EnergyInfo] = Field(default=None, description="energy of the timed loops; null unless the run completed "
                                                                   "(1.9)")
    flops: Optional[FlopsInfo] = Field(default=None, description="model FLOPs, achieved FLOP/s and MFU; null unless the run "
                                                                 "completed (1.7)")
    ceiling: Optional[CeilingInfo] = Field(
        default=None, description="process 0's measured GEMM ceiling (--ceiling); null when off, for "
        "time-to-accuracy runs and unless the run completed (1.19)")
    anchor: Optional[AnchorInfo] = Field(
        default=None, description="the best public result for this device and model, and this run's fraction of "
        "it; null unless a throughput run completed (1.19)")
    reference: Optional[ReferenceInfo] = Field(
        default=None, description="the harness ratio against a bare hand-written loop (--reference), or why there is "
        "none; null unless a throughput run completed (1.20)")
    batch_search: Optional[BatchSearch] = Field(default=None, description="--find-max-batch probes only (1.9)")
    trace: Optional[TraceInfo] = Field(default=None, description="--trace: the profiled window after the timed loops (1.8)")
    accuracy: Optional[AccuracyInfo] = Field(default=None, description="--target-accuracy runs: the accuracy curve and time to "
                                                                       "target (1.13)")
    step_timing: Optional[StepTimingInfo] = Field(default=None, description="how the steps were timed (--step-timing); null when "
                                                                            "the run died before setup (1.14)")
    comparison: Optional[ComparisonInfo] = Field(default=None, description="a run of `benchrun compare-runtimes`: its round and "
                                                                           "position (1.18)")
    path: Optional[PathInfo] = Field(default=None, description="the communication path and the limits each rank ran with, taken "
                                                               "inside its container; null when the run died before its ranks "
                                                               "met (1.18)")
    preflight: Optional[PreflightInfo] = Field(default=None, description="what each rank checked before the timed loop against "
                                                                         "those limits; null when the run died before (1.18)")
    duration_s: float = Field(description="whole run, model build and warmup included")
    provenance: Provenance


def new_run_id() -> str:
    return uuid.uuid4().hex


def utc_now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def build(config, base: dict, status: str, error: dict | None, duration_s: float,
          framework: dict | None = None, world: dict | None = None, **result) -> dict:
    """A validated record; `result` supplies the measured sections an `ok` run has; `world` by default
    from the launcher's variables alone (no rank has met the others)."""
    return validate(
        {
            "run_id": base["run_id"],
            "timestamp_utc": base["timestamp_utc"],
            "status": status,
            "error": error,
            "config": config.as_dict(),
            "model": None,
            "throughput": None,
            "step_time_s": None,
            "input_wait_s": None,
            "repeats": [],
            "memory": None,
            "final_loss": None,
            "world": world or world_section(detect(), config.strategy, config.num_ps),
            "ranks": [],
            "replicas": None,
            "placement": None,
            "comparison": base.get("comparison"),
            **result,
            "duration_s": duration_s,
            "provenance": {**base["provenance"], "framework": framework},
        }
    )


def validate(record: dict) -> dict:
    """Round-trip through the models: raises on any field the schema does not allow."""
    return ResultRecord.model_validate(record).model_dump(mode="json")


def titled_schema(model: type[BaseModel], title: str) -> dict:
    """The JSON Schema of a record model, as shipped in benchmarks/schema/."""
    schema = model.model_json_schema()
    schema["title"] = title
    return schema


def json_schema() -> dict:
    return titled_schema(ResultRecord, f"dlbench result record {SCHEMA_VERSION}")


if __name__ == "__main__":
    print(json.dumps(json_schema(), indent=2))
