"""RaySharedRolloutCollector refuses bad seeds and timeouts at once, naming the argument.

Before: ``seeds=5`` or ``acting_seeds=5`` failed with Python's bare ``'int' object is not
iterable``; a float, str or negative seed reached the runners' processes (``env.reset(seed=1.5)``
or ``set_acting_seed("a")`` there: a runner build failure, or a reset seeded with a float); a
``timeout_s`` of ``-1`` reached ``ray.get(timeout=-1)``, whose error escaped the collector's
runner naming. Every check here runs before any Ray actor is started (no cluster needed).
"""

from __future__ import annotations

import importlib.util
import math
import sys
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_ray.pettingzoo import RaySharedRolloutCollector


def _load_envs() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "pettingzoo" / "collector_envs.py"
    spec = importlib.util.spec_from_file_location("rlightning_ray_test_pz_inputs_envs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


ENVS = _load_envs()
SCHEDULE = [(0, 6, "truncated"), (1, 3, "terminated"), (2, 5, "truncated")]


@pytest.fixture(scope="module")
def model() -> Any:
    env = DummyVecEnv([ENVS.AgentSlot] * 2)
    return PPO("MlpPolicy", env, n_steps=8, batch_size=8, n_epochs=1, seed=0, device="cpu")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"seeds": 5}, TypeError, r"seeds must be a sequence .* got int 5"),
        ({"seeds": "ab"}, TypeError, r"seeds must be a sequence .* got str"),
        ({"acting_seeds": 5}, TypeError, r"acting_seeds must be a sequence .* got int 5"),
        ({"seeds": [1.5, 2]}, TypeError, r"seeds\[0\] must be an int count; got 1.5"),
        ({"seeds": [3, True]}, TypeError, r"seeds\[1\] must be an int count; got True"),
        ({"acting_seeds": ["a", 1]}, TypeError, r"acting_seeds\[0\] must be an int count"),
        ({"acting_seeds": [1, -2]}, ValueError, r"acting_seeds\[1\] .*got -2"),
        ({"timeout_s": -1}, ValueError, r"timeout_s must be None .* > 0, got -1"),
        ({"timeout_s": 0}, ValueError, r"timeout_s must be None .* > 0, got 0"),
        ({"timeout_s": math.nan}, ValueError, r"timeout_s must be None .* > 0, got nan"),
        ({"timeout_s": "10"}, TypeError, r"timeout_s must be None .* got str '10'"),
    ],
)
def test_bad_seeds_and_timeouts_are_named(
    model: Any, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    fn = partial(ENVS.ScheduleEnv, SCHEDULE, 0)
    with pytest.raises(error, match=match):
        RaySharedRolloutCollector(model, [fn, fn], n_runners=2, **kwargs)


def test_numpy_seeds_pass_the_checks(model: Any) -> None:
    """Seeds as numpy integers (``np.arange``) are seeds: the next check (``timeout_s``) is met."""
    fn = partial(ENVS.ScheduleEnv, SCHEDULE, 0)
    with pytest.raises(ValueError, match="timeout_s must be None"):
        RaySharedRolloutCollector(
            model,
            [fn, fn],
            n_runners=2,
            seeds=np.arange(2),
            acting_seeds=(np.int64(4), None),
            timeout_s=-1,
        )
