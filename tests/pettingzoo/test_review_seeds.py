"""``rlightning.rules.check_seeds`` refuses unordered seeds and a 0-d array (each failed before).

``seeds={5, 1}`` was taken in the set's iteration order (1, 5): copy 0 was reset with seed 1,
copy 1 with seed 5, silently not what was written (a ``frozenset`` or ``dict.keys()`` alike).
``seeds=np.array(5)`` failed with numpy's bare ``iteration over a 0-d array``. Every collector
(in process and on Ray runners) checks its seeds with ``check_seeds``.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest
from rlightning_test_support import sibling
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning.rules import check_seeds
from rlightning_pettingzoo import SharedRolloutCollector

ENVS = sibling(__file__, "collector_envs.py")


@pytest.mark.parametrize(
    "seeds", [{5, 1}, frozenset({7, 3}), {5: "a", 1: "b"}.keys()], ids=["set", "frozenset", "keys"]
)
def test_unordered_seeds_are_refused(seeds: Any) -> None:
    with pytest.raises(TypeError, match=r"seeds must be an ordered sequence.*unordered"):
        check_seeds(seeds, "seeds")
    model = PPO("MlpPolicy", DummyVecEnv([ENVS.AgentSlot]), n_steps=4, batch_size=4, device="cpu")
    fns = [partial(ENVS.ScheduleEnv, [(0, 3, "truncated")], c) for c in range(2)]
    with pytest.raises(TypeError, match=r"SharedRolloutCollector seeds must be an ordered"):
        SharedRolloutCollector(model, fns, seeds=seeds)


def test_a_zero_dimensional_array_is_refused_as_a_lone_seed() -> None:
    with pytest.raises(TypeError, match=r"seeds must be a sequence of seeds.*got ndarray"):
        check_seeds(np.array(5), "seeds")
    assert check_seeds(np.array([5, 1]), "seeds") == [5, 1]  # ordered arrays still pass
    assert check_seeds(range(3), "seeds") == [0, 1, 2]
