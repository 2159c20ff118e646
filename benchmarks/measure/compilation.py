"""Graph compilation (torch.compile, TensorFlow tf.function / XLA): the record's `compile` section.
The first, compiling step runs on its own before warmup (Measurement._measure; docs/results.md#compile).
"""

from __future__ import annotations

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")  # torch.compile modes


def section(mode: str, backend: str, compile_time_s: float, fell_back: bool = False, reason: str | None = None,
            graph_breaks: int | None = None, graphs: int | None = None) -> dict:
    return {
        "mode": mode,
        "backend": backend,
        "compile_time_s": compile_time_s,
        "fell_back_to_eager": fell_back,
        "fallback_reason": reason,
        "graph_breaks": graph_breaks,
        "graphs": graphs,
        "graphs_at_end": graphs,
    }


def torch_compile(model, mode: str):
    import torch

    return torch.compile(model, mode=mode)


def dynamo_reset_counters() -> None:
    from torch._dynamo.utils import counters

    counters.clear()


def dynamo_counts() -> tuple[int | None, int | None]:
    """(graph breaks, graphs compiled) since the last reset; (None, None) if this torch does not count."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:
        return None, None
    return sum(counters["graph_break"].values()), counters["stats"]["unique_graphs"]
