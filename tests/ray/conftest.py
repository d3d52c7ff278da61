"""One local Ray cluster for the whole session, and the helpers its actors run.

``ray.init(address="local", ...)`` always starts a cluster of its own: a bare ``ray.init()``
joins any cluster already running on the machine (another job's). The cluster is shared by
every module (starting one costs seconds) and shut down at the end of the session, or by a
module that needs a cluster of another shape (``test_multinode.py``), after which the next
module starts a new one. Actors die when the tests drop their handles.

Workers find rlightning's packages through PYTHONPATH (tox installs them; a source checkout
passes them on); the helper modules are pickled by value, so workers need not import tests.
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


def _load(name: str, filename: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(filename))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)
    return module


# envs first: the helpers module uses them
ENVS = _load("rlightning_ray_test_envs", "ray_envs.py")
HELPERS = _load("rlightning_ray_test_helpers", "ray_helpers.py")
if importlib.util.find_spec("pettingzoo") is not None:  # the PettingZoo collector tests' own
    _load("rlightning_ray_test_pz_checks", "pz_checks.py")


@pytest.fixture(scope="session")
def helpers() -> ModuleType:
    return HELPERS


@pytest.fixture(scope="session")
def envs() -> ModuleType:
    """Test envs that import neither torch nor SB3 (cheap runner processes)."""
    return ENVS


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


@pytest.fixture(scope="session")
def ray_session(worker_path: None) -> Iterator[None]:
    """Shuts the session's cluster down at the end (see the module docstring)."""
    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="module")
def local_ray(ray_session: None) -> None:
    """A local cluster of 2 CPUs of this session's own (``address="local"``), started once."""
    if not ray.is_initialized():
        ray.init(
            address="local",
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=200 * 1024 * 1024,
            log_to_driver=False,
        )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the PettingZoo collectors' Ray tests (``test_pz_*.py``) ``ray_pettingzoo``.

    The ``ray`` tox environment runs the rest (``-m "not ray_pettingzoo"``: the transport, the
    runners, the server), ``ray-pettingzoo`` these (``-m ray_pettingzoo``); a new ``test_pz_``
    file is in the second without a list to keep.
    """
    for item in items:
        if item.path.name.startswith("test_pz_"):
            item.add_marker(pytest.mark.ray_pettingzoo)
