"""review4: the in-process group collectors refuse ``models`` that is not a mapping, by name.

Before, a list of models reached ``models.items()`` and raised ``AttributeError: 'list' object
has no attribute 'items'`` (naming neither the collector nor the argument); the Ray group
collectors already refused it (``remote_groups._check_groups``).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
from pettingzoo.classic import rps_v2, tictactoe_v3
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import (
    AECGroupRolloutCollector,
    GroupReplayCollector,
    GroupRolloutCollector,
)


class _Seat(gym.Env[Any, Any]):
    def __init__(self, game: Any) -> None:
        env = game.env()
        self.observation_space = env.observation_space(env.possible_agents[0])
        self.action_space = env.action_space(env.possible_agents[0])

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return self.observation_space.sample(), {}


def _vec(game: Any) -> DummyVecEnv:
    return DummyVecEnv([lambda: _Seat(game)])


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (
            lambda: AECGroupRolloutCollector(
                [PPO("MultiInputPolicy", _vec(tictactoe_v3), n_steps=4)],  # type: ignore[arg-type]
                [tictactoe_v3.env],
                group_of=lambda agent: 0,
            ),
            "AECGroupRolloutCollector",
        ),
        (
            lambda: GroupRolloutCollector(
                [PPO("MlpPolicy", _vec(rps_v2), n_steps=4)],  # type: ignore[arg-type]
                [rps_v2.parallel_env],
                group_of=lambda agent: 0,
            ),
            "GroupRolloutCollector",
        ),
        (
            lambda: GroupReplayCollector(
                [DQN("MlpPolicy", _vec(rps_v2))],  # type: ignore[arg-type]
                [rps_v2.parallel_env],
                group_of=lambda agent: 0,
            ),
            "GroupReplayCollector",
        ),
    ],
    ids=["aec-groups", "groups", "group-replay"],
)
def test_models_given_as_a_list_are_refused_by_name(make: Any, name: str) -> None:
    with pytest.raises(TypeError, match=rf"{name} needs models: a mapping group name -> SB3 "):
        make()


def test_an_env_instance_instead_of_its_maker_is_named() -> None:
    """A newcomer's slip: the env itself in env_fns (it was a bare "object is not callable")."""
    from mpe2 import simple_spread_v3

    from rlightning_pettingzoo import SharedRolloutCollector

    env = simple_spread_v3.parallel_env()

    class Slot(gym.Env[Any, Any]):
        observation_space = env.observation_space("agent_0")
        action_space = env.action_space("agent_0")

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            return self.observation_space.sample(), {}

    model = PPO("MlpPolicy", DummyVecEnv([Slot] * 6), n_steps=4, batch_size=24)
    with pytest.raises(TypeError, match=r"SharedRolloutCollector env_fns\[1\] must be a function"):
        SharedRolloutCollector(model, [simple_spread_v3.parallel_env, env])
