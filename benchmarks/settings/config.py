"""What a run is: the validated configuration shared by the CLI, the worker and the record.

Validation that needs no framework happens here, before anything is spawned,
so bad input costs milliseconds and never leaves half a result behind.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, field, make_dataclass
from typing import Optional

from ..core import framework_specs
from ..core.errors import UsageError, choices
from ..data.dataset import validate_data_dir
from ..data.fashion_mnist import FASHION_MNIST_CLASSES
from ..distributed import cluster, strategies
from ..distributed.world import run_token
from ..measure import step_timing
from .models import MODELS
from .options import CONFIG_OPTIONS, DEFAULTS, OPTIONS, RENDEZVOUS_TIMEOUT_S, check_values, choices_of

FRAMEWORKS = choices_of("framework")
NUM_CLASSES = 1000


class RunConfiguration:
    """What BenchConfig does beyond holding its fields."""

    @property
    def accuracy_mode(self) -> bool:
        return self.target_accuracy is not None

    @property
    def data(self) -> str:
        return "real" if self.data_dir or self.accuracy_mode else "synthetic"

    def as_dict(self) -> dict:
        return {**asdict(self), "data": self.data}


# The run configuration: a field per option of options.CONFIG_OPTIONS with its default, and what bench
# derives (the classes, the ranks' wait from --timeout). image_size and data_format are set by build_config.
BenchConfig = make_dataclass(
    "BenchConfig",
    [("framework", str),
     *((o.dest, Optional[o.type], field(default=o.default)) for o in CONFIG_OPTIONS if o.dest != "framework"),
     ("num_classes", int, field(default=NUM_CLASSES)),
     ("rendezvous_timeout", float, field(default=RENDEZVOUS_TIMEOUT_S))],
    bases=(RunConfiguration,), frozen=True, namespace={"__module__": __name__})


def resolve_framework(name: str | None) -> str:
    if not name:
        raise UsageError(
            "no framework given: pass --framework or set BENCH_FRAMEWORK "
            f"(choices: {choices((*FRAMEWORKS, *OPTIONS['framework'].aliases))})"
        )
    OPTIONS["framework"].validate(name)
    return OPTIONS["framework"].resolved(name)


def require_installed(framework: str) -> None:
    missing = [m for m in framework_specs.FRAMEWORKS[framework].modules if importlib.util.find_spec(m) is None]
    if missing:
        installed = [name for name, spec in framework_specs.FRAMEWORKS.items()
                     if all(importlib.util.find_spec(m) for m in spec.modules)]
        raise UsageError(
            f"framework {framework!r} is not installed in this environment (missing: {choices(missing)}; "
            f"installed: {choices(installed) or 'none'})"
        )


def image_size_for(model: str, image_size: int | None) -> int:
    """--image-size, or the model's own; UsageError when the model cannot take it."""
    spec = MODELS[model]
    if image_size is None:
        return spec.default_image_size
    if image_size < spec.min_image_size:
        raise UsageError(f"--image-size {image_size} is too small for {model} (minimum {spec.min_image_size})")
    return image_size


def build_config(
    *,
    framework: str | None,
    model: str,
    image_size: int | None = None,
    data_format: str | None = None,
    installed_here: bool = True,
    **options,
) -> BenchConfig:
    """Turn CLI values into a validated BenchConfig or raise UsageError (`installed_here`: the framework
    must be importable in this Python too)."""
    framework = resolve_framework(framework)
    check_values({"model": model, "image_size": image_size, "data_format": data_format, **options})
    image_size = image_size_for(model, image_size)
    spec = framework_specs.FRAMEWORKS[framework]
    for owner in framework_specs.FRAMEWORKS.values():
        for flag in owner.own_flags:
            if owner is not spec and options.get(flag) not in (None, False):  # off: False or None
                raise UsageError(f"--{flag} applies to --framework {owner.name} only "
                                 f"({spec.title} compiles its step with --{spec.own_flags[0]})")
    if options.get("device") == "cpu":  # --device auto on a CPU-only host: the backend refuses the same way
        from ..measure.precision import plan

        plan(options.get("precision", DEFAULTS["precision"]), "cpu")
    step_timing.check(options.get("step_timing", DEFAULTS["step_timing"]), spec, options.get("device"))
    validate_strategy(framework, options)
    validate_accuracy(options)
    options.update(cluster.run_ports(options, run_token()))
    if data_format and data_format not in spec.cpu_data_formats and options.get("device") == "cpu":
        raise UsageError(f"--data-format {data_format}: {spec.title}'s CPU convolutions support only "
                         f"{choices(spec.cpu_data_formats)}")
    data_dir = options.get("data_dir")
    if data_dir is not None:
        options["data_dir"] = str(validate_data_dir(data_dir))
    config = BenchConfig(
        framework=framework,
        model=model,
        image_size=image_size,
        data_format=data_format or spec.data_format,
        **options,
    )
    if config.reference:
        problem = reference_refusal(config, spec.data_format)
        if problem:
            raise UsageError(problem)
    if installed_here:
        require_installed(framework)
    return config


# The math the bare loop of --reference runs in: set process-wide (precision.apply_*), which it inherits as it is.
REFERENCE_PRECISIONS = ("fp32", "tf32")


def reference_refusal(config: BenchConfig, native_format: str) -> Optional[str]:
    """Why --reference cannot match this run's configuration with a bare loop (benchmarks/run/reference.py), or None. A
    ratio against a loop that trains differently (other data, math, layout or a compiled step) would measure the
    difference, not the harness."""
    if config.accuracy_mode:
        return "--reference applies to throughput runs, not --target-accuracy"
    if config.data_dir:
        return "--reference: the bare loop trains on synthetic batches; run it without --data-dir"
    if config.precision not in REFERENCE_PRECISIONS:
        return f"--reference: the bare loop trains in fp32 or tf32 math, not --precision {config.precision}"
    if config.compile or config.xla:
        return f"--reference: the bare loop runs eagerly, not with --{'compile' if config.compile else 'xla'}"
    if config.data_format != native_format:
        return f"--reference: the bare loop uses the framework's native layout ({native_format}), not {config.data_format}"
    return None


# Options that mean something only with --target-accuracy (--base-lr is also the LR of throughput runs).
ACCURACY_ONLY = tuple(o.dest for o in CONFIG_OPTIONS if o.group == "tta" and o.dest not in ("target_accuracy", "base_lr"))


def validate_accuracy(options: dict) -> None:
    """--target-accuracy and the options that only mean something with it."""
    target = options.get("target_accuracy")
    if target is None:
        given = [name for name in ACCURACY_ONLY if options.get(name, DEFAULTS[name]) != DEFAULTS[name]]
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} applies to time-to-accuracy runs only (add --target-accuracy)")
        return
    if options.get("data_dir") is None:
        from ..data.labelled import check_fashion_mnist

        options["fashion_mnist_dir"] = str(check_fashion_mnist(options.get("fashion_mnist_dir", DEFAULTS["fashion_mnist_dir"])))
        options["num_classes"] = FASHION_MNIST_CLASSES
    else:
        from ..data.dataset import list_classes

        options["num_classes"] = len(list_classes(validate_data_dir(options["data_dir"])))
    if options.get("base_batch") is None:
        options["base_batch"] = options.get("batch_size", DEFAULTS["batch_size"])


def validate_strategy(framework: str, options: dict) -> None:
    strategy = strategies.get(options.get("strategy"))
    if not strategy.supports(framework):
        valid = [s.name for s in strategies.STRATEGIES.values() if s.supports(framework)]
        raise UsageError(f"--strategy {strategy.name} is not available for {framework} (choices: {choices(valid)})")
    strategy.check_num_ps(options.get("num_ps", DEFAULTS["num_ps"]))
