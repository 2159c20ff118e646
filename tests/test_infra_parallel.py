"""The order `make test` hands modules to its workers (tests/infra/parallel.py)."""

from __future__ import annotations

from infra.parallel import HEAVY, order

NO_IMAGE, IMAGE = "test_models", "test_runtimes_apptainer"  # heavy modules, one of each kind
MODULES = {"test_horovod": True, IMAGE: True, "test_runtimes_real": True, NO_IMAGE: False, "test_trace": False,
           "test_cli": False, "test_containers": True}


def ordered(cold: bool) -> list[str]:
    return sorted(MODULES, key=lambda module: order(module, MODULES[module], cold))


def test_warm_runs_follow_heavy():
    assert ordered(cold=False) == sorted(MODULES, key=lambda m: HEAVY.index(m) if m in HEAVY else len(HEAVY))
    assert ordered(cold=False)[:2] == ["test_horovod", IMAGE]


def test_cold_runs_put_the_heavy_modules_without_images_beside_the_builds():
    assert ordered(cold=True) == ["test_horovod", NO_IMAGE, "test_trace", IMAGE, "test_runtimes_real", "test_cli",
                                  "test_containers"]
