"""The in-process collectors check their ``seeds`` as the Ray collector does (each failed before).

``seeds=[True, 1]`` reached ``env.reset(seed=True)``, which PettingZoo's and gymnasium's seeding
takes as the seed 1 (a silent change of what the user gave); ``seeds=[1.5]`` failed inside the
env's ``reset`` at the first ``collect()`` (numpy's message, no copy named); ``seeds=5`` failed
with Python's bare ``'int' object is not iterable``. Now every collector refuses them at
construction through ``rlightning.rules.check_seeds``, naming itself and the seed's index, and
takes numpy integers as seeds.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3
from rlightning_test_support import sibling
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning.rules import check_seeds
from rlightning_pettingzoo import (
    AECReplayCollector,
    AECRolloutCollector,
    GroupRolloutCollector,
    SharedReplayCollector,
    SharedRolloutCollector,
)

ENVS = sibling(__file__, "collector_envs.py")
AgentSlot, ScheduleEnv = ENVS.AgentSlot, ENVS.ScheduleEnv

SCHEDULE = [(0, 4, "truncated"), (1, 3, "terminated")]


class _TicTacToeSlot(AgentSlot):  # type: ignore[misc, valid-type]
    """One tictactoe seat's spaces (sizes the buffer; never stepped)."""

    def __init__(self) -> None:
        env = tictactoe_v3.env()
        self.observation_space = env.observation_space("player_1")
        self.action_space = env.action_space("player_1")


def _shared(seeds: Any) -> Any:
    model = PPO("MlpPolicy", DummyVecEnv([AgentSlot] * 2), n_steps=4, batch_size=8, device="cpu")
    return SharedRolloutCollector(model, [partial(ScheduleEnv, SCHEDULE, 0)], seeds=seeds)


def _replay(seeds: Any) -> Any:
    model = DQN("MlpPolicy", DummyVecEnv([AgentSlot] * 2), learning_starts=0, device="cpu")
    return SharedReplayCollector(model, [partial(ScheduleEnv, SCHEDULE, 0)], seeds=seeds)


def _group(seeds: Any) -> Any:
    model = PPO("MlpPolicy", DummyVecEnv([AgentSlot]), n_steps=4, batch_size=4, device="cpu")
    return GroupRolloutCollector(
        {"all": model}, [partial(ScheduleEnv, SCHEDULE, 0)], group_of=lambda a: "all", seeds=seeds
    )


def _aec(seeds: Any) -> Any:
    model = PPO(
        "MultiInputPolicy", DummyVecEnv([_TicTacToeSlot]), n_steps=4, batch_size=4, device="cpu"
    )
    return AECRolloutCollector(
        model, [tictactoe_v3.env], opponents={"player_2": "random"}, seeds=seeds
    )


def _aec_replay(seeds: Any) -> Any:
    model = DQN("MultiInputPolicy", DummyVecEnv([_TicTacToeSlot]), buffer_size=16, device="cpu")
    return AECReplayCollector(
        model, [tictactoe_v3.env], opponents={"player_2": "random"}, seeds=seeds
    )


BUILDERS: dict[str, Callable[[Any], Any]] = {
    "SharedRolloutCollector": _shared,
    "SharedReplayCollector": _replay,
    "GroupRolloutCollector": _group,
    "AECRolloutCollector": _aec,
    "AECReplayCollector": _aec_replay,
}


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize(
    ("seeds", "error", "match"),
    [
        ([True], TypeError, r"seeds\[0\] must be an int count; got True"),
        ([1.5], TypeError, r"seeds\[0\] must be an int count; got 1.5"),
        (["3"], TypeError, r"seeds\[0\] must be an int count; got '3'"),
        ([-1], ValueError, r"seeds\[0\] must be >= 0; got -1"),
        (5, TypeError, r"seeds must be a sequence of seeds .* got int 5"),
        ([0, 1], ValueError, r"seeds must hold one seed per env copy \(1\), got 2"),
    ],
)
def test_bad_seeds_are_refused_at_construction(
    name: str, seeds: Any, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match) as caught:
        BUILDERS[name](seeds)
    assert name in str(caught.value)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_numpy_and_none_seeds_are_seeds(name: str) -> None:
    for seeds in (np.arange(1), [np.int64(7)], [None], None, (3,)):
        collector = BUILDERS[name](seeds)
        expected = [None] if seeds is None else [None if s is None else int(s) for s in seeds]
        assert collector._seeds == expected
        assert all(s is None or type(s) is int for s in collector._seeds)


def test_check_seeds_returns_python_ints_and_keeps_none() -> None:
    given = [np.int32(2), None, 0]
    assert check_seeds(given, "seeds") == [2, None, 0]
    assert given == [np.int32(2), None, 0]  # not mutated
    with pytest.raises(TypeError, match=r"must be a sequence .* got dict"):
        check_seeds({0: 1}, "seeds")
