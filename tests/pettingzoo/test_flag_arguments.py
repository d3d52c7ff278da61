"""Rule ``flag`` (``rlightning.rules.check_flag``) on the PettingZoo paths: a boolean argument
is a bool, refused otherwise before any env steps or any buffer is filled.

Before: ``fill_recorded(update_model="False")`` and ``fill_recorded_groups(...)`` read the flag
by truthiness (a string was taken as True: the learner's counters, callback and logger
advanced; ``0`` silently skipped them); ``respond``/``SharedPolicyAdapter.act`` took
``deterministic="False"`` as True. The in-process collectors had their own copy of the check
(``_sb3.check_update_model``), now removed. A ``numpy.bool_`` is a bool (what numpy comparisons
return), read as its value.

The envs count their own ``step`` calls (a real PettingZoo wrapper around a real env), so
"nothing stepped" is the env's own word.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pettingzoo.classic import rps_v2, tictactoe_v3
from pettingzoo.utils.wrappers import BaseParallelWrapper, BaseWrapper
from rlightning_test_support import sibling
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import (
    AECGroupRolloutCollector,
    AECRolloutCollector,
    GroupRolloutCollector,
    GroupRolloutRecorder,
    RolloutRecorder,
    SharedPolicyAdapter,
    SharedRolloutCollector,
    fill_recorded,
    fill_recorded_groups,
    respond,
)
from rlightning_sb3 import start_training

_Seat = sibling(__file__, "test_review4_group_inputs.py")._Seat

#: Values that are no bool: each would pick a branch by truthiness.
NOT_BOOLS: list[Any] = ["False", "no", 0, 1, None, 1.0, np.int64(1), np.array([True])]


class CountingParallel(BaseParallelWrapper):  # type: ignore[misc]  # pettingzoo is untyped
    """A parallel env that counts its ``step`` calls."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, actions: Any) -> Any:
        self.steps += 1
        return super().step(actions)


class CountingAEC(BaseWrapper):  # type: ignore[misc]
    """An AEC env that counts its ``step`` calls."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.steps = 0

    def step(self, action: Any) -> None:
        self.steps += 1
        super().step(action)


def _rps() -> CountingParallel:
    return CountingParallel(rps_v2.parallel_env())


def _ttt() -> CountingAEC:
    return CountingAEC(tictactoe_v3.env())


def _ppo(game: Any, n_envs: int = 1) -> PPO:
    policy = "MultiInputPolicy" if game is tictactoe_v3 else "MlpPolicy"
    slots = DummyVecEnv([lambda: _Seat(game)] * n_envs)
    return PPO(policy, slots, n_steps=4, batch_size=4 * n_envs, device="cpu", seed=0)


COLLECTORS = [
    (lambda m: SharedRolloutCollector(m["rps"], [_rps]), "SharedRolloutCollector"),
    (
        lambda m: GroupRolloutCollector({"g": m["rps"]}, [_rps], group_of=lambda a: "g"),
        "GroupRolloutCollector",
    ),
    (lambda m: AECRolloutCollector(m["ttt"], [_ttt]), "AECRolloutCollector"),
    (
        lambda m: AECGroupRolloutCollector({"g": m["ttt"]}, [_ttt], group_of=lambda a: "g"),
        "AECGroupRolloutCollector",
    ),
]
COLLECTOR_IDS = ["shared", "groups", "aec", "aec-groups"]


def _models() -> dict[str, PPO]:
    models = {"rps": _ppo(rps_v2, 2), "ttt": _ppo(tictactoe_v3)}
    for model in models.values():
        start_training(model, 100)
    return models


@pytest.mark.parametrize(("make", "name"), COLLECTORS, ids=COLLECTOR_IDS)
@pytest.mark.parametrize("value", NOT_BOOLS, ids=repr)
def test_collect_refuses_a_non_bool_update_model_before_any_step(
    make: Any, name: str, value: Any
) -> None:
    models = _models()
    collector = make(models)
    message = f"{name}.collect: update_model must be a bool, not {type(value).__name__}; got "
    with pytest.raises(TypeError, match=rf"^{message}.*\[rule flag\]$"):
        collector.collect(update_model=value)
    assert [env.steps for env in collector.envs] == [0]  # no env stepped
    for model in models.values():
        assert model.num_timesteps == 0 and model.rollout_buffer.pos == 0


@pytest.mark.parametrize(("make", "name"), COLLECTORS, ids=COLLECTOR_IDS)
@pytest.mark.parametrize("value", [np.bool_(True), np.bool_(False)], ids=repr)
def test_collect_reads_a_numpy_bool_as_its_value(make: Any, name: str, value: Any) -> None:
    models = _models()
    collector = make(models)
    collector.collect(update_model=value)
    assert collector.envs[0].steps > 0
    used = models["ttt" if "AEC" in name else "rps"]
    assert (used.num_timesteps > 0) is bool(value)  # False: learn()'s counters untouched


def _recording() -> tuple[PPO, list[Any]]:
    """A started learner and one rollout recorded by a replica of its shape."""
    recorder = RolloutRecorder(_ppo(rps_v2, 2), [_rps])
    recorded = [recorder.record()]
    assert recorder.envs[0].steps > 0
    learner = _ppo(rps_v2, 2)
    start_training(learner, 100)
    return learner, recorded


@pytest.mark.parametrize("value", NOT_BOOLS, ids=repr)
def test_fill_recorded_refuses_a_non_bool_update_model_before_filling(value: Any) -> None:
    learner, recorded = _recording()
    with pytest.raises(
        TypeError,
        match=rf"^fill_recorded: update_model must be a bool, not {type(value).__name__}; ",
    ):
        fill_recorded(learner, recorded, update_model=value)
    assert learner.rollout_buffer.pos == 0 and not learner.rollout_buffer.full
    assert learner.num_timesteps == 0


@pytest.mark.parametrize("value", [np.bool_(True), np.bool_(False)], ids=repr)
def test_fill_recorded_reads_a_numpy_bool_as_its_value(value: Any) -> None:
    learner, recorded = _recording()
    fill_recorded(learner, recorded, update_model=value)
    assert learner.rollout_buffer.full
    assert (learner.num_timesteps == 8) is bool(value)


def _group_recording() -> tuple[dict[str, PPO], list[Any]]:
    recorder = GroupRolloutRecorder({"g": _ppo(rps_v2, 2)}, [_rps], group_of=lambda a: "g")
    recorded = [recorder.record()]
    learners = {"g": _ppo(rps_v2, 2)}
    start_training(learners["g"], 100)
    return learners, recorded


@pytest.mark.parametrize("value", ["False", 0, None], ids=repr)
def test_fill_recorded_groups_refuses_a_non_bool_update_model_before_filling(value: Any) -> None:
    learners, recorded = _group_recording()
    with pytest.raises(
        TypeError,
        match=rf"^my-learner: update_model must be a bool, not {type(value).__name__}; ",
    ):
        fill_recorded_groups(learners, recorded, update_model=value, caller="my-learner")
    assert learners["g"].rollout_buffer.pos == 0 and learners["g"].num_timesteps == 0


def test_fill_recorded_groups_reads_a_numpy_bool() -> None:
    learners, recorded = _group_recording()
    fill_recorded_groups(learners, recorded, update_model=np.bool_(False))
    assert learners["g"].rollout_buffer.full and learners["g"].num_timesteps == 0


@pytest.mark.parametrize("value", ["False", 0, None], ids=repr)
def test_deterministic_must_be_a_bool(value: Any) -> None:
    env = rps_v2.parallel_env()
    observations, _ = env.reset(seed=0)
    model = _ppo(rps_v2)
    policies = dict.fromkeys(env.agents, model)
    kind = type(value).__name__
    with pytest.raises(TypeError, match=rf"^respond: deterministic must be a bool, not {kind}"):
        respond(env, observations, policies, deterministic=value)
    with pytest.raises(
        TypeError, match=rf"^SharedPolicyAdapter.act\(\): deterministic must be a bool, not {kind}"
    ):
        SharedPolicyAdapter(model).act(env, observations, deterministic=value)
    # a numpy bool is one: True takes the mode, as model.predict(deterministic=True)
    response = respond(env, observations, policies, deterministic=np.bool_(True))
    for agent in env.agents:
        expected, _ = model.predict(observations[agent], deterministic=True)
        assert response.action[agent] == expected
