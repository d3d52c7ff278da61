"""A local Ray cluster per test module, and the helpers its actors run.

Workers find rlightning's packages through PYTHONPATH (tox installs them; a source checkout
passes them on); the helper module is pickled by value, so workers need not import tests.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ray = pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]
SOURCES = [ROOT / "packages" / p / "src" for p in ("core", "sb3", "pettingzoo", "ray")]


def _load_helpers() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "rlightning_ray_test_helpers", Path(__file__).with_name("ray_helpers.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)
    return module


HELPERS = _load_helpers()


@pytest.fixture(scope="session")
def helpers() -> ModuleType:
    return HELPERS


@pytest.fixture(scope="session")
def worker_path() -> Iterator[None]:
    saved = os.environ.get("PYTHONPATH")
    paths = [str(p) for p in SOURCES] + ([saved] if saved else [])
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    yield
    if saved is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = saved


@pytest.fixture(scope="module")
def local_ray(worker_path: None) -> Iterator[None]:
    """``ray.init(num_cpus=2)`` for one test module."""
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=200 * 1024 * 1024,
        log_to_driver=False,
    )
    try:
        yield
    finally:
        ray.shutdown()
