"""The Framework interface: a small required part (frameworks/base.py) and optional capabilities asked for by
their callers (frameworks/capabilities.py); no default that raises, no field set from outside."""

from __future__ import annotations

import ast
import inspect

import pytest

from benchmarks.frameworks import base, capabilities
from benchmarks.settings.config import build_config
from infra.helpers import ROOT

CAPABILITIES = (capabilities.CompilesFirstStep, capabilities.CountsFlops, capabilities.ProbesGemm,
                capabilities.ProfilesSteps, capabilities.ProfilesServing, capabilities.DrivesWorkers,
                capabilities.TrainsToAccuracy)


class Minimal(base.Framework):
    """Only what every backend must do: it trains and is timed; nothing more."""

    name = "minimal"

    def parameter_checksum(self) -> str:
        return "0"

    def version(self) -> str:
        return "0"

    def setup(self) -> None:
        pass

    def device_info(self) -> base.DeviceInfo:
        return base.DeviceInfo("cpu", "cpu", 1)

    def synthetic_batches(self) -> list:
        return [None]

    def real_batches(self):
        raise AssertionError("synthetic only")

    def train_step(self, batch) -> object:
        return 0.0

    def synchronize(self) -> None:
        pass

    def loss_value(self, loss) -> float:
        return float(loss)

    def is_out_of_memory(self, error: BaseException) -> bool:
        return False


def test_the_required_interface_is_enough_to_train_and_time():
    backend = Minimal(build_config(framework="torch", model="alexnet", installed_here=False), keep_losses=True)
    loop = backend.timed_loop(backend.batches(), 3)
    assert len(loop.step_times_s) == 3 and loop.losses == [0.0] * 3 and backend.skip_images == frozenset()
    assert not any(isinstance(backend, capability) for capability in CAPABILITIES)
    assert not capabilities.compiles(backend)
    assert backend.model_info() is None  # stated by a backend that can (the record's `model`); not required
    with pytest.raises(NotImplementedError, match="^minimal does not count FLOPs$"):  # the record's reason
        capabilities.of(backend, capabilities.CountsFlops, f"{backend.name} does not count FLOPs")


def test_a_backend_with_a_capability_is_handed_back_as_it():
    class Counting(Minimal):
        def count_flops(self):
            return "counted"

    backend = Counting(build_config(framework="torch", model="alexnet", installed_here=False))
    assert capabilities.of(backend, capabilities.CountsFlops, "never said").count_flops() == "counted"


def test_the_base_class_has_no_default_that_raises_and_its_abstract_part_is_small():
    tree = ast.parse(inspect.getsource(base.Framework))
    raising = [node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)
               and any(isinstance(n, ast.Raise) for n in ast.walk(node))]
    assert raising == []
    assert len(base.Framework.__abstractmethods__) <= 10, sorted(base.Framework.__abstractmethods__)


def test_no_field_of_a_backend_is_set_from_outside():
    """`backend.x = ...` outside frameworks/ would be a field a caller sets: constructor arguments instead."""
    setters = []
    for path in sorted((ROOT / "benchmarks").rglob("*.py")):
        if "frameworks" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(
                node, (ast.AugAssign, ast.AnnAssign)) else []
            for target in targets:
                if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Attribute) \
                        and target.value.attr == "backend":
                    setters.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert setters == []


@pytest.mark.parametrize("name", ["torch", "tensorflow"])
def test_every_shipped_backend_has_every_training_capability(name):
    """Read from the source: importing TensorFlow beside torch in one test process is avoided (helpers.py)."""
    from benchmarks.core.framework_specs import FRAMEWORKS

    module = FRAMEWORKS[name].backend.partition(":")[0]
    source = (ROOT / (module.replace(".", "/") + ".py")).read_text()
    for capability in (capabilities.CountsFlops, capabilities.ProbesGemm, capabilities.ProfilesSteps,
                       capabilities.TrainsToAccuracy, capabilities.CompilesFirstStep):
        members = [m for m, v in vars(capability).items()
                   if not m.startswith("_") and (inspect.isfunction(v) or isinstance(v, property))]
        assert members, capability
        for member in members:
            assert f"def {member}(" in source, (name, capability.__name__, member)


def test_a_backend_with_only_the_required_part_gets_its_framework_into_the_record():
    """The record's provenance.framework comes from the required part alone (version, device_info): a backend
    need not hold a `model` attribute or state model_info (docs/architecture.md, "Recipes checked")."""
    from benchmarks.results import provenance, record
    from benchmarks.results.mllog import MLLogger
    from benchmarks.run.measurement import Measurement

    config = build_config(framework="torch", model="alexnet", installed_here=False)
    base = {"run_id": record.new_run_id(), "timestamp_utc": record.utc_now(),
            "provenance": {**provenance.host_provenance(), "command": ["bench"]}}
    measurement = Measurement(config, base, MLLogger(False, None))
    measurement.backend = Minimal(config)  # as run() loads it
    written = measurement.finish("failed", {"kind": "crash", "message": "planted"})
    assert written["provenance"]["framework"]["name"] == "minimal" and written["model"] is None
