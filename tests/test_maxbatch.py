"""bench --find-max-batch: doubling then bisection to the largest batch that fits, every probe a record."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest

from benchmarks.run.maxbatch import Search
from infra.helpers import bench, python_env, validate_record


def search_against(capacity: int, start: int, limit: int = 1 << 16, stop_after: int | None = None) -> tuple[Search, list[int]]:
    """Drive a Search against a device where batches up to `capacity` fit (0: none does)."""
    search, probed = Search(start, limit), []
    while (batch := search.next_batch()) is not None:
        probed.append(batch)
        search.observe(batch, "ok" if batch <= capacity else "oom")
        if stop_after is not None and len(probed) >= stop_after:
            search.out_of_time(60)
    return search, probed


# What GPUs print near capacity instead of a CUDA out-of-memory error: the first four as torch, TensorFlow and cuDNN
# word them, the last three copied from torch 2.14's own libtorch_cuda.so.
NEAR_CAPACITY = [
    "RuntimeError: CUDA error: CUBLAS_STATUS_ALLOC_FAILED when calling `cublasCreate(handle)`",
    "RuntimeError: cuDNN error: CUDNN_STATUS_ALLOC_FAILED",
    "Could not create cudnn handle: CUDNN_STATUS_ALLOC_FAILED",
    "RuntimeError: CUDA error: CUSOLVER_STATUS_ALLOC_FAILED when calling `cusolverDnCreate(handle)`",
    "RuntimeError: Expected canUse32BitIndexMath(input) && canUse32BitIndexMath(output) to be true, but got false.  "
    "(Could this error message be improved?  If so, please report an enhancement request to PyTorch.)",
    "RuntimeError: input tensor must fit into 32-bit index math",
    "RuntimeError: upsample_nearest_nhwc only supports grad_output tensors with less than INT_MAX elements, but got 4294967296",
]
NOT_MEMORY = [
    "RuntimeError: cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input.",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "RuntimeError: CUDA error: CUBLAS_STATUS_EXECUTION_FAILED when calling `cublasGemmEx( handle, opa, opb, m, n, k, ...)`",
    "ImportError: libcuda.so.1: cannot open shared object file",
]


@pytest.mark.parametrize("message", NEAR_CAPACITY)
def test_library_errors_near_capacity_are_out_of_memory(message):
    from benchmarks.frameworks.base import looks_like_oom
    from benchmarks.run.supervisor import classify_exit

    assert looks_like_oom(message)
    status, error = classify_exit(1, ["bench: warmup: 10 batches of 4096", message])  # the worker died of it
    assert status == "oom" and error["kind"] == "oom" and error["message"] == message


@pytest.mark.parametrize("message", NOT_MEMORY)
def test_other_gpu_errors_stay_crashes(message):
    from benchmarks.frameworks.base import looks_like_oom
    from benchmarks.run.supervisor import classify_exit

    assert not looks_like_oom(message) and classify_exit(1, [message])[0] == "failed"


def test_search_goes_on_past_a_probe_that_hit_a_library_allocation_failure():
    """The statuses a real search sees: a probe whose cuBLAS handle could not be allocated is an oom
    probe (the worker's is_out_of_memory uses the same test), so the search bisects below it."""
    from benchmarks.frameworks.base import looks_like_oom

    search, capacity = Search(256, 4096), 700
    while (batch := search.next_batch()) is not None:
        error = None if batch <= capacity else NEAR_CAPACITY[batch % len(NEAR_CAPACITY)]
        search.observe(batch, "ok" if error is None else ("oom" if looks_like_oom(error) else "failed"))
    assert search.largest_fit == capacity and search.stop_reason == f"batch {capacity} fits and {capacity + 1} runs out of memory"


@pytest.mark.parametrize("capacity, start", [(74, 2), (1, 1), (1, 64), (64, 64), (63, 64), (1000, 3), (5, 8), (2, 1)])
def test_search_finds_the_capacity(capacity, start):
    search, probed = search_against(capacity, start)
    assert search.largest_fit == capacity and search.smallest_oom == capacity + 1
    assert search.stop_reason == f"batch {capacity} fits and {capacity + 1} runs out of memory"
    assert len(probed) == len(set(probed)), "a batch size was probed twice"
    assert len(probed) <= 2 * (capacity.bit_length() + start.bit_length()) + 2


def test_search_doubles_then_bisects():
    _, probed = search_against(74, 2)
    assert probed == [2, 4, 8, 16, 32, 64, 128, 96, 80, 72, 76, 74, 75]


def test_nothing_fits_the_limit_and_a_failed_probe_stop_with_a_reason():
    search, probed = search_against(0, 4)
    assert probed == [4, 2, 1] and search.largest_fit is None and "nothing fits" in search.stop_reason
    search, probed = search_against(10**6, 16, limit=100)
    assert probed == [16, 32, 64, 100] and search.largest_fit == 100 and "--max-batch-limit 100" in search.stop_reason
    search = Search(8)
    search.observe(8, "failed")
    assert search.next_batch() is None and search.stop_reason == "the probe at batch 8 ended failed"


def test_time_budget_keeps_the_best_answer_so_far():
    search, probed = search_against(74, 2, stop_after=8)
    assert probed == [2, 4, 8, 16, 32, 64, 128, 96] and search.largest_fit == 64 and "budget" in search.stop_reason
    section = search.section("s", "bisect", 60)
    assert section["final"] and section["max_batch"] == 64 and section["smallest_oom"] == 96


@pytest.mark.parametrize("args, message", [
    (["--max-batch-budget", "0"], "--max-batch-budget must be positive"),
    (["--batch-size", "64", "--max-batch-limit", "32"], "is below the first probe"),
])
def test_bad_input_is_one_line_exit_2(args, message):
    result = bench("--framework", "torch", "--find-max-batch", *args)
    assert result.returncode == 2 and message in result.stderr and result.stderr.count("\n") == 1


VM_PEAK = """
import torch, torchvision
torchvision.models.resnet50()
print(next(int(l.split()[1]) * 1024 for l in open('/proc/self/status') if l.startswith('VmPeak')))
"""
HEADROOM = 600 * 2**20  # over torch + ResNet-50 built: a few dozen 64-px images of activations, on any host


@pytest.mark.slow
def test_search_on_cpu_under_an_address_space_limit(tmp_path):
    """Real probes, real OOMs: `ulimit -v` a little above what torch and the model take."""
    base = int(subprocess.run([sys.executable, "-c", VM_PEAK], capture_output=True, text=True, check=True,
                              env=python_env()).stdout)
    limit = base + HEADROOM

    def limit_address_space():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    output = tmp_path / "probes.jsonl"
    result = bench("--framework", "torch", "--model", "resnet50", "--image-size", "64", "--batch-size", "8",
                   "--num-warmup-batches", "0", "--num-batches", "1", "--num-threads", "2", "--display-every", "0",
                   "--find-max-batch", "--max-batch-budget", "240", "--output", output, "--device", "cpu",
                   preexec_fn=limit_address_space)
    assert result.returncode == 0, result.stderr[-3000:]
    records = [validate_record(json.loads(line)) for line in output.read_text().splitlines()]
    searches = [r["batch_search"] for r in records]
    assert [s["probe"] for s in searches] == list(range(1, len(records) + 1))
    assert len({s["search_id"] for s in searches}) == 1
    assert {r["status"] for r in records} == {"ok", "oom"}, "every probe ran or ran out of memory"
    assert all(r["error"]["kind"] == "oom" and r["throughput"] is None for r in records if r["status"] == "oom")
    assert [s["final"] for s in searches] == [False] * (len(records) - 1) + [True]
    last = searches[-1]
    fits = [r["config"]["batch_size"] for r in records if r["status"] == "ok"]
    assert last["max_batch"] == max(fits) and all(s["max_batch"] is None for s in searches[:-1])
    if "budget" not in last["stop_reason"]:  # the bracket closed: the next batch up ran out of memory
        assert last["smallest_oom"] == last["max_batch"] + 1
    assert f"bench: max batch: {last['max_batch']} (" in result.stderr
