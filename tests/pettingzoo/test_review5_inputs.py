"""review5: unclear errors of the in-process collectors, now refused by name.

* a ``group_of`` function that raises (e.g. ``KeyError`` for an agent it does not know) let its
  bare error through: now a ``ValueError`` naming the collector and the agent, the function's
  error chained as the cause;
* ``collect(update_model="no")`` was taken as True (truthiness) by the on-policy collectors:
  now a ``TypeError`` before any env step (rule ``flag``, ``rlightning.rules.check_flag``; the
  env step counts are held in tests/pettingzoo/test_flag_arguments.py);
* ``train_freq`` counted in episodes with ``n_envs > 1`` was accepted by the replay collectors,
  where SB3 asserts one env ("You must use only one env when doing episodic training",
  ``OffPolicyAlgorithm._setup_learn``): now a ``ValueError`` naming the collector and
  ``n_envs``, before any env is built.
"""

from __future__ import annotations

from typing import Any

import pytest
from pettingzoo.classic import rps_v2, tictactoe_v3
from rlightning_test_support import sibling
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import (
    AECGroupRolloutCollector,
    AECReplayCollector,
    AECRolloutCollector,
    GroupReplayCollector,
    GroupRolloutCollector,
    SharedReplayCollector,
    SharedRolloutCollector,
)
from rlightning_sb3 import start_training

_Seat = sibling(__file__, "test_review4_group_inputs.py")._Seat


def _slots(game: Any, n_envs: int) -> DummyVecEnv:
    """``n_envs`` never-stepped slots of one seat of ``game``'s spaces."""
    return DummyVecEnv([lambda: _Seat(game)] * n_envs)


def _policy(game: Any) -> str:
    return "MultiInputPolicy" if game is tictactoe_v3 else "MlpPolicy"


def _ppo(game: Any, n_envs: int = 1) -> PPO:
    return PPO(_policy(game), _slots(game, n_envs), n_steps=4, batch_size=4 * n_envs)


def _dqn(game: Any, n_envs: int, **kwargs: Any) -> DQN:
    return DQN(_policy(game), _slots(game, n_envs), **kwargs)


def _only_first(first: str) -> Any:
    """A group_of function that knows one agent only (KeyError for the others)."""
    return lambda agent: {first: "g"}[agent]


@pytest.mark.parametrize(
    ("make", "name", "agent"),
    [
        (
            lambda: GroupRolloutCollector(
                {"g": _ppo(rps_v2)}, [rps_v2.parallel_env], group_of=_only_first("player_0")
            ),
            "GroupRolloutCollector",
            "player_1",
        ),
        (
            lambda: GroupReplayCollector(
                {"g": _dqn(rps_v2, 1)}, [rps_v2.parallel_env], group_of=_only_first("player_0")
            ),
            "GroupReplayCollector",
            "player_1",
        ),
        (
            lambda: AECGroupRolloutCollector(
                {"g": _ppo(tictactoe_v3)}, [tictactoe_v3.env], group_of=_only_first("player_1")
            ),
            "AECGroupRolloutCollector",
            "player_2",
        ),
    ],
    ids=["groups", "group-replay", "aec-groups"],
)
def test_a_group_of_function_that_raises_is_named_with_the_agent(
    make: Any, name: str, agent: str
) -> None:
    with pytest.raises(
        ValueError,
        match=rf"{name}: the group_of function raised KeyError\('{agent}'\) for agent '{agent}'",
    ) as caught:
        make()
    assert isinstance(caught.value.__cause__, KeyError)  # the function's own error, chained


@pytest.mark.parametrize(
    ("make", "name"),
    [
        (
            lambda m: SharedRolloutCollector(m["one"], [rps_v2.parallel_env]),
            "SharedRolloutCollector",
        ),
        (
            lambda m: GroupRolloutCollector(
                {"g": m["one"]}, [rps_v2.parallel_env], group_of=lambda a: "g"
            ),
            "GroupRolloutCollector",
        ),
        (lambda m: AECRolloutCollector(m["ttt"], [tictactoe_v3.env]), "AECRolloutCollector"),
        (
            lambda m: AECGroupRolloutCollector(
                {"g": m["ttt"]}, [tictactoe_v3.env], group_of=lambda a: "g"
            ),
            "AECGroupRolloutCollector",
        ),
    ],
    ids=["shared", "groups", "aec", "aec-groups"],
)
@pytest.mark.parametrize("value", ["no", 0, None])
def test_update_model_must_be_a_bool(make: Any, name: str, value: Any) -> None:
    models = {"one": _ppo(rps_v2, 2), "ttt": _ppo(tictactoe_v3)}
    for model in models.values():
        start_training(model, 100)
    collector = make(models)
    with pytest.raises(
        TypeError,
        match=rf"{name}.collect: update_model must be a bool, not {type(value).__name__}; got",
    ):
        collector.collect(update_model=value)
    for model in models.values():  # refused before any step
        assert model.num_timesteps == 0 and model.rollout_buffer.pos == 0


@pytest.mark.parametrize(
    ("make", "name", "whose"),
    [
        (
            lambda n: SharedReplayCollector(
                _dqn(rps_v2, n, train_freq=(1, "episode")), [rps_v2.parallel_env]
            ),
            "SharedReplayCollector",
            "",
        ),
        (
            lambda n: GroupReplayCollector(
                {"g": _dqn(rps_v2, n, train_freq=(2, "episode"))},
                [rps_v2.parallel_env],
                group_of=lambda a: "g",
            ),
            "GroupReplayCollector",
            r" \(group 'g'\)",
        ),
        (
            lambda n: AECReplayCollector(
                _dqn(tictactoe_v3, n, train_freq=(1, "episode")), [tictactoe_v3.env]
            ),
            "AECReplayCollector",
            "",
        ),
    ],
    ids=["shared", "groups", "aec"],
)
def test_episodic_train_freq_needs_one_buffer_column(make: Any, name: str, whose: str) -> None:
    make(1)  # one column: SB3's episodic training, accepted
    with pytest.raises(
        ValueError,
        match=rf"{name}{whose}: train_freq=\(\d, 'episode'\) counts episodes, which SB3 allows "
        r"with one env only .* n_envs=2 buffer columns",
    ):
        make(2)
