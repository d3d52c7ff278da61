"""Fixtures for the PettingZoo adapter tests: env modules across PettingZoo versions, SB3 models.

The supported PettingZoo range spans renames: MPE moved from ``pettingzoo.mpe`` to ``mpe2``, and
knights_archers_zombies is ``_v10`` up to PettingZoo 1.25 and ``_v11`` after. The fixtures hand
out whichever the installed versions have.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest


def _first_module(*names: str) -> ModuleType:
    errors = []
    for name in names:
        try:
            return importlib.import_module(name)
        except ImportError as exc:
            errors.append(f"{name}: {exc}")
    raise ImportError("none of these could be imported: " + "; ".join(errors))


@pytest.fixture(scope="session")
def simple_spread() -> ModuleType:
    """mpe2's ``simple_spread_v3`` (PettingZoo's own before MPE moved to mpe2)."""
    return _first_module("mpe2.simple_spread_v3", "pettingzoo.mpe.simple_spread_v3")


@pytest.fixture(scope="session")
def simple_adversary() -> ModuleType:
    """``simple_adversary_v3``: an adversary and good agents with different observation sizes."""
    return _first_module("mpe2.simple_adversary_v3", "pettingzoo.mpe.simple_adversary_v3")


@pytest.fixture(scope="session")
def kaz() -> ModuleType:
    """butterfly ``knights_archers_zombies`` (v11, or v10 on older PettingZoo)."""
    return _first_module(
        "pettingzoo.butterfly.knights_archers_zombies_v11",
        "pettingzoo.butterfly.knights_archers_zombies_v10",
    )


@pytest.fixture(scope="session")
def make_sb3() -> Callable[..., Any]:
    """Build a real SB3 model for given spaces, the way ``BaseAlgorithm.load`` builds one.

    SB3 algorithms take an env only to read its spaces; ``load`` instead creates the algorithm
    with ``_init_setup_model=False``, sets ``observation_space``/``action_space`` and calls
    ``_setup_model()``. Doing the same here gives an untrained but complete model (policy,
    optimizer, rollout buffer) for any PettingZoo agent's spaces.
    """
    pytest.importorskip("stable_baselines3")

    def make(algo: type[Any], policy: str, obs_space: Any, act_space: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("device", "cpu")
        model = algo(policy, None, _init_setup_model=False, seed=0, **kwargs)
        model.observation_space = obs_space
        model.action_space = act_space
        model.n_envs = 1
        model._setup_model()
        return model

    return make


@pytest.fixture(scope="session", autouse=True)
def _one_torch_thread() -> None:
    """Run torch on one thread: the tiny forward passes here are many times faster that way on a
    small shared machine (thread hand-off dominates a (4, 135) x (135, 64) matmul)."""
    if importlib.util.find_spec("torch") is not None:
        import torch

        torch.set_num_threads(1)


# ----------------------------------------------------------------------- MPE simple_spread, reset


@pytest.fixture
def spread(simple_spread: ModuleType) -> Any:
    env = simple_spread.parallel_env(continuous_actions=False)
    env.reset(seed=0)
    return env


@pytest.fixture
def spread_box(simple_spread: ModuleType) -> Any:
    env = simple_spread.parallel_env(continuous_actions=True)
    env.reset(seed=0)
    return env


@pytest.fixture
def many_agent_env() -> Callable[[int], Any]:
    """``benchmarks/cases_adapters.py``'s many-agent env factory: ``many_agent_env(n)`` is reset,
    with ``n`` agents of ``Discrete(5)`` actions (a test may replace ``env._act[agent]``)."""
    from benchmarks.cases_adapters import make_many_agent_env

    return make_many_agent_env
