"""Each framework's GEMM for the ceiling probe (benchmarks/measure/ceiling.py): two n x n operands in the dtype
the run's matmuls use, on the run's device, C = A @ B timed back to back with the device synchronised at
both ends. The framework's settings stand as the run set them (threads, TF32), so the probe measures
what the model's matmuls could reach."""

from __future__ import annotations

import time

DTYPES = {"fp32": "float32", "tf32": "float32", "fp16": "float16", "bf16": "bfloat16"}


def torch_factory(device, math: str):
    import torch

    dtype = getattr(torch, DTYPES[math])

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def make(n: int):
        try:
            a, b = (torch.randn(n, n, device=device).to(dtype) for _ in range(2))
            out = torch.empty(n, n, device=device, dtype=dtype)
        except torch.cuda.OutOfMemoryError as error:
            raise MemoryError(str(error)) from error
        torch.matmul(a, b, out=out)
        sync()

        def run(reps: int) -> float:
            sync()
            started = time.perf_counter()
            for _ in range(reps):
                torch.matmul(a, b, out=out)
            sync()
            return time.perf_counter() - started

        return run

    return make


def tensorflow_factory(device_name: str, math: str):
    import tensorflow as tf

    dtype = getattr(tf, DTYPES[math])

    def make(n: int):
        with tf.device(device_name):
            try:
                a, b = (tf.cast(tf.random.normal((n, n)), dtype) for _ in range(2))
            except tf.errors.ResourceExhaustedError as error:
                raise MemoryError(str(error)) from error
            tf.matmul(a, b).numpy()  # the untimed GEMM (reading the result waits for it)

        def run(reps: int) -> float:
            with tf.device(device_name):
                started = time.perf_counter()
                for _ in range(reps):  # eager, as torch: each GEMM dispatched in turn, queued on a GPU
                    out = tf.matmul(a, b)
                out[0, 0].numpy()  # the device runs its queue in order: the last one done, all are
                return time.perf_counter() - started

        return run

    return make
