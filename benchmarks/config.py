"""What a run is: the validated configuration shared by the CLI, the worker and the record.

Validation that needs no framework happens here, before anything is spawned,
so bad input costs milliseconds and never leaves half a result behind.
"""

from __future__ import annotations

import importlib.util
from dataclasses import asdict, dataclass, fields

from . import lr_rules
from .dataset import validate_data_dir
from .distributed import strategies
from .errors import UsageError, choices
from .precision import PRECISIONS


@dataclass(frozen=True)
class ModelSpec:
    default_image_size: int
    min_image_size: int  # smallest input both frameworks' architectures accept


# Minimum sizes were found by building each model in both frameworks
# (tests/test_models.py::test_models_train_at_minimum_image_size keeps them honest).
MODELS: dict[str, ModelSpec] = {
    "alexnet": ModelSpec(224, 63),
    "resnet50": ModelSpec(224, 32),
    "resnet101": ModelSpec(224, 32),
    "resnet152": ModelSpec(224, 32),
    "inception3": ModelSpec(299, 75),
    "smallcnn": ModelSpec(28, 4),  # benchmarks/smallcnn.py: Fashion-MNIST's size; two 2x2 poolings
}

FRAMEWORKS = ("torch", "tensorflow")
FRAMEWORK_ALIASES = {"tf": "tensorflow", "pytorch": "torch"}
# Modules whose presence (not import) tells whether a framework is installed.
FRAMEWORK_MODULES = {"torch": ("torch", "torchvision"), "tensorflow": ("tensorflow",)}
NATIVE_DATA_FORMAT = {"torch": "channels_first", "tensorflow": "channels_last"}

STRATEGIES = strategies.NAMES  # each one's frameworks, processes and roles: distributed/strategies/
PS_PLACEMENTS = ("round-robin", "greedy")
DATA_FORMATS = ("channels_first", "channels_last")
DEVICES = ("auto", "cpu", "gpu")
NUM_CLASSES = 1000
FASHION_MNIST_DIR = "/usr/share/datasets/fashion-mnist"  # where Debian's package installs its IDX files
FASHION_MNIST_PACKAGE = "dataset-fashion-mnist"
FASHION_MNIST_CLASSES = 10
SYNTHETIC_BATCHES = 4  # distinct device-resident batches, rotated: one fixed batch flatters caches


@dataclass(frozen=True)
class BenchConfig:
    framework: str
    model: str
    batch_size: int = 64
    image_size: int = 224
    num_warmup_batches: int = 10
    num_batches: int = 100
    repeats: int = 1
    precision: str = "fp32"
    data_format: str = "channels_first"
    device: str = "auto"
    num_threads: int | None = None
    num_data_workers: int = 2
    data_dir: str | None = None
    seed: int = 0
    xla: bool = False
    compile: str | None = None  # torch.compile mode (compilation.COMPILE_MODES); None = eager
    synthetic_batches: int = SYNTHETIC_BATCHES
    num_classes: int = NUM_CLASSES
    strategy: str = strategies.DEFAULT
    num_ps: int = 0
    ps_placement: str = "round-robin"
    worker_port: int = 2220  # TF workers: worker_port + local index (seed 000's ports)
    ps_port: int = 2230  # TF parameter servers: ps_port + local index; chief: ps_port + 10
    rendezvous_port: int = 2210  # dlbench's own rank rendezvous on process 0
    rendezvous_timeout: float = 300.0
    # Time to accuracy (--target-accuracy; benchmarks/accuracy.py): off when target_accuracy is None.
    target_accuracy: float | None = None
    eval_every: int | None = None  # samples between evaluations; None = a quarter of the training set
    max_epochs: float = 10.0
    time_budget: float | None = None  # seconds on the run's clock
    base_lr: float = 0.01
    base_batch: int | None = None  # the batch base_lr is tuned for; None = batch_size
    lr_rule: str = lr_rules.DEFAULT_RULE
    warmup_epochs: float | None = None  # None = the rule's default (lr_rules.warmup_epochs)
    val_fraction: float = 0.1  # --data-dir: images held out for validation
    val_images: int | None = None  # evaluate on the first N validation images only (None: all)
    fashion_mnist_dir: str = FASHION_MNIST_DIR

    @property
    def accuracy_mode(self) -> bool:
        return self.target_accuracy is not None

    @property
    def data(self) -> str:
        return "real" if self.data_dir or self.accuracy_mode else "synthetic"

    def as_dict(self) -> dict:
        return {**asdict(self), "data": self.data}


def resolve_framework(name: str | None) -> str:
    if not name:
        raise UsageError(
            "no framework given: pass --framework or set BENCH_FRAMEWORK "
            f"(choices: {choices(FRAMEWORKS + tuple(FRAMEWORK_ALIASES))})"
        )
    key = name.strip().lower()
    key = FRAMEWORK_ALIASES.get(key, key)
    if key not in FRAMEWORKS:
        raise UsageError(
            f"unknown framework {name!r} (choices: {choices(FRAMEWORKS + tuple(FRAMEWORK_ALIASES))})"
        )
    return key


def require_installed(framework: str) -> None:
    missing = [m for m in FRAMEWORK_MODULES[framework] if importlib.util.find_spec(m) is None]
    if missing:
        installed = [f for f in FRAMEWORKS if all(importlib.util.find_spec(m) for m in FRAMEWORK_MODULES[f])]
        raise UsageError(
            f"framework {framework!r} is not installed in this environment (missing: {choices(missing)}; "
            f"installed: {choices(installed) or 'none'})"
        )


def _positive(name: str, value: int | None) -> None:
    if value is not None and value <= 0:
        raise UsageError(f"{name} must be a positive integer, got {value}")


def _non_negative(name: str, value: int) -> None:
    if value < 0:
        raise UsageError(f"{name} must be zero or more, got {value}")


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
    if model not in MODELS:
        raise UsageError(f"unknown model {model!r} (choices: {choices(MODELS)})")
    spec = MODELS[model]
    if image_size is None:
        image_size = spec.default_image_size
    _positive("--image-size", image_size)
    for flag in ("batch_size", "num_batches", "repeats", "num_threads", "num_data_workers", "synthetic_batches"):
        if flag in options:
            _positive("--" + flag.replace("_", "-"), options[flag])
    _non_negative("--num-warmup-batches", options.get("num_warmup_batches", 0))
    if image_size < spec.min_image_size:
        raise UsageError(
            f"--image-size {image_size} is too small for {model} (minimum {spec.min_image_size})"
        )
    for flag, value, valid in (
        ("--precision", options.get("precision", "fp32"), PRECISIONS),
        ("--device", options.get("device", "auto"), DEVICES),
        ("--data-format", data_format, DATA_FORMATS + (None,)),
    ):
        if value not in valid:
            raise UsageError(f"{flag} {value!r} is invalid (choices: {choices(v for v in valid if v)})")
    if options.get("xla") and framework != "tensorflow":
        raise UsageError("--xla applies to --framework tensorflow only")
    if options.get("compile") is not None:
        from .compilation import COMPILE_MODES

        if framework != "torch":
            raise UsageError("--compile applies to --framework torch only (TensorFlow compiles its step with --xla)")
        if options["compile"] not in COMPILE_MODES:
            raise UsageError(f"--compile {options['compile']!r} is invalid (choices: {choices(COMPILE_MODES)})")
    if options.get("device") == "cpu":  # --device auto on a CPU-only host: the backend refuses the same way
        from .precision import plan

        plan(options.get("precision", "fp32"), "cpu")
    validate_strategy(framework, options)
    validate_accuracy(options)
    if framework == "tensorflow" and data_format == "channels_first" and options.get("device") == "cpu":
        raise UsageError("--data-format channels_first: TensorFlow's CPU convolutions support only channels_last")
    data_dir = options.get("data_dir")
    if data_dir is not None:
        options["data_dir"] = str(validate_data_dir(data_dir))
    config = BenchConfig(
        framework=framework,
        model=model,
        image_size=image_size,
        data_format=data_format or NATIVE_DATA_FORMAT[framework],
        **options,
    )
    if installed_here:
        require_installed(framework)
    return config


# Options that mean something only with --target-accuracy (--base-lr is also the LR of throughput runs).
ACCURACY_ONLY = ("eval_every", "max_epochs", "time_budget", "base_batch", "lr_rule", "warmup_epochs", "val_fraction",
                 "val_images", "fashion_mnist_dir")
DEFAULTS = {f.name: f.default for f in fields(BenchConfig)}  # the one home of each default: parser, record, sweeps


def validate_accuracy(options: dict) -> None:
    """--target-accuracy and the options that only mean something with it."""
    target = options.get("target_accuracy")
    if target is None:
        given = [name for name in ACCURACY_ONLY if options.get(name, DEFAULTS[name]) != DEFAULTS[name]]
        if given:
            raise UsageError(f"--{given[0].replace('_', '-')} applies to time-to-accuracy runs only (add --target-accuracy)")
        return
    if not 0 < target <= 1:
        raise UsageError(f"--target-accuracy is a fraction in (0, 1], got {target:g}")
    if options.get("lr_rule", lr_rules.DEFAULT_RULE) not in lr_rules.RULES:
        raise UsageError(f"--lr-rule {options['lr_rule']!r} is invalid (choices: {choices(lr_rules.RULES)})")
    for name in ("max_epochs", "base_lr", "time_budget"):
        value = options.get(name)
        if value is not None and value <= 0:
            raise UsageError(f"--{name.replace('_', '-')} must be positive, got {value:g}")
    for name in ("eval_every", "base_batch", "val_images"):
        _positive("--" + name.replace("_", "-"), options.get(name))
    if (options.get("warmup_epochs") or 0) < 0:
        raise UsageError(f"--warmup-epochs must be zero or more, got {options['warmup_epochs']:g}")
    if not 0 < options.get("val_fraction", DEFAULTS["val_fraction"]) < 1:
        raise UsageError(f"--val-fraction must be between 0 and 1, got {options['val_fraction']:g}")
    if options.get("data_dir") is None:
        from .labelled import check_fashion_mnist

        options["fashion_mnist_dir"] = str(check_fashion_mnist(options.get("fashion_mnist_dir", DEFAULTS["fashion_mnist_dir"])))
        options["num_classes"] = FASHION_MNIST_CLASSES
    else:
        from .dataset import list_classes

        options["num_classes"] = len(list_classes(validate_data_dir(options["data_dir"])))
    if options.get("base_batch") is None:
        options["base_batch"] = options.get("batch_size", DEFAULTS["batch_size"])


def validate_strategy(framework: str, options: dict) -> None:
    name = options.get("strategy", strategies.DEFAULT)
    if name not in STRATEGIES:
        raise UsageError(f"unknown strategy {name!r} (choices: {choices(STRATEGIES)})")
    strategy = strategies.get(name)
    if not strategy.supports(framework):
        valid = [s.name for s in strategies.STRATEGIES.values() if s.supports(framework)]
        raise UsageError(f"--strategy {name} is not available for {framework} (choices: {choices(valid)})")
    num_ps = options.get("num_ps", 0)
    if strategy.uses_ps and num_ps < 1:
        raise UsageError(f"--strategy {name} needs --num-ps 1 or more")
    if not strategy.uses_ps and num_ps:
        takers = " or ".join(s.name for s in strategies.STRATEGIES.values() if s.uses_ps)
        raise UsageError(f"--num-ps applies to --strategy {takers} only (got --strategy {name})")
    if options.get("ps_placement", "round-robin") not in PS_PLACEMENTS:
        raise UsageError(f"--ps-placement {options['ps_placement']!r} is invalid (choices: {choices(PS_PLACEMENTS)})")
    for flag in ("worker_port", "ps_port", "rendezvous_port"):
        port = options.get(flag)
        if port is not None and not 1 <= port <= 65535 - 64:
            raise UsageError(f"--{flag.replace('_', '-')} {port} is out of range (1-65471)")
    if options.get("rendezvous_timeout", 1) <= 0:
        raise UsageError("--timeout must be positive")
