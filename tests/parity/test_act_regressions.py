"""Minimized inputs the parity fuzzer found on the act side.

``torch.as_tensor`` refuses numpy arrays with a negative stride or a non-native byte order
(SB3's own ``model.predict`` reads a negative-stride observation, as ``np.array`` copies it,
but not a non-native byte order): the adapter reads such an observation from a native copy and
answers exactly what it answers for the C-ordered array. Off-policy noise after
``start_training`` serves any subset of the envs once the first call named them all.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch as th

from rlightning_sb3 import SB3PolicyAdapter

pytestmark = pytest.mark.torch


def _model_and_obs(gen: Any, obs_kind: str = "box") -> tuple[Any, Any]:
    # PPO, Box(3,) (or Dict) observations, Discrete(2) actions, one env.
    spec = gen.EnvSpec(obs=obs_kind, action=("discrete", 2, 0), reward="float", terminate_p=0.0,
                       max_steps=4)  # fmt: skip
    venv = gen.make_venv(spec, 1, 0, True)
    return gen.build_model("ppo", venv, obs_kind, 0), venv.reset()


def _same_answer(gen: Any, call: str, layout: str, obs_kind: str) -> None:
    model, obs = _model_and_obs(gen, obs_kind)
    answers = []
    for this in ("c", layout):
        th.manual_seed(0)
        adapter = SB3PolicyAdapter(model)
        method = adapter.act if call == "act" else adapter.predict
        answers.append(adapter.env_actions(method(gen.with_layout(obs, this), env_ids=["e"])))
    np.testing.assert_array_equal(answers[1], answers[0], strict=True)


@pytest.mark.parametrize("obs_kind", ["box", "dict"])
def test_predict_reads_a_non_native_byte_order_observation(obs_kind: str, gen: Any) -> None:
    _same_answer(gen, "predict", "byteswapped", obs_kind)


@pytest.mark.parametrize("layout", ["negative", "byteswapped"])
@pytest.mark.parametrize("obs_kind", ["box", "dict"])
def test_act_reads_negative_strides_and_non_native_byte_order(
    layout: str, obs_kind: str, gen: Any
) -> None:
    _same_answer(gen, "act", layout, obs_kind)


def test_predict_reads_negative_strides(gen: Any) -> None:
    _same_answer(gen, "predict", "negative", "box")


def test_off_policy_act_on_a_subset_of_envs_after_start_training(gen: Any) -> None:
    from stable_baselines3.common.noise import NormalActionNoise

    from rlightning_sb3 import start_training
    from rlightning_sb3._noise import bound_env_ids

    spec = gen.EnvSpec(obs="box", action=("box", (-1.0,), (1.0,), "float32"), reward="float",
                       terminate_p=0.0, max_steps=4)  # fmt: skip
    venv = gen.make_venv(spec, 4, 0, True)
    model = gen.build_model("td3", venv, "box", 0)
    model.action_noise = NormalActionNoise(np.zeros(1), 0.5 * np.ones(1))
    obs = start_training(model, gen.TOTAL)
    adapter = SB3PolicyAdapter(model)
    ids = [f"env-{i}" for i in range(4)]
    # An exploring call ties each env id it meets first to the next free one of the noise's 4
    # processes (the model's n_envs: as _setup_learn wraps it): a subset first, then the rest.
    adapter.act(obs[[1, 3]], ["env-1", "env-3"])
    assert len(model.action_noise.noises) == 4
    adapter.act(obs, ids)
    assert bound_env_ids(model.action_noise) == ["env-1", "env-3", "env-0", "env-2"]
    with pytest.raises(ValueError, match=re.escape("env_ids ['env-4'] have no noise process")):
        adapter.act(obs[:1], ["env-4"])
    responses = adapter.act(obs[[1, 3]], ["env-1", "env-3"])  # then any subset
    actions = adapter.env_actions(responses)
    assert actions.shape == (2, 1)
    assert all(venv.action_space.contains(a) for a in actions)
