"""Minimized inputs the parity fuzzer found on the act side: observations torch cannot view.

``torch.as_tensor`` refuses numpy arrays with a negative stride or a non-native byte order;
the adapter hands such an observation to it and raises torch's error (which names neither the
argument nor the envs) instead of reading the same values. SB3's own ``model.predict`` reads a
negative-stride observation (``np.array`` copies it) but not a non-native byte order.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch as th

from rlightning_sb3 import SB3PolicyAdapter

pytestmark = pytest.mark.torch

TORCH_REFUSES = "the adapter passes the array to torch.as_tensor, which refuses it"


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
        answers.append(adapter.env_actions(method(gen.with_layout(obs, this), ["e"])))
    np.testing.assert_array_equal(answers[1], answers[0], strict=True)


@pytest.mark.xfail(strict=True, reason=TORCH_REFUSES)
@pytest.mark.parametrize("obs_kind", ["box", "dict"])
def test_predict_reads_a_non_native_byte_order_observation(obs_kind: str, gen: Any) -> None:
    _same_answer(gen, "predict", "byteswapped", obs_kind)


@pytest.mark.xfail(strict=True, reason=TORCH_REFUSES)
@pytest.mark.parametrize("layout", ["negative", "byteswapped"])
@pytest.mark.parametrize("obs_kind", ["box", "dict"])
def test_act_reads_negative_strides_and_non_native_byte_order(
    layout: str, obs_kind: str, gen: Any
) -> None:
    _same_answer(gen, "act", layout, obs_kind)


def test_predict_reads_negative_strides(gen: Any) -> None:
    _same_answer(gen, "predict", "negative", "box")


@pytest.mark.xfail(
    strict=True,
    reason="after start_training the noise is a VectorizedActionNoise of n_envs processes; act on "
    "a subset of the envs adds all n_envs samples to the smaller batch (numpy broadcast error)",
)
def test_off_policy_act_on_a_subset_of_envs_after_start_training(gen: Any) -> None:
    from stable_baselines3.common.noise import NormalActionNoise

    from rlightning_sb3 import start_training

    spec = gen.EnvSpec(obs="box", action=("box", (-1.0,), (1.0,), "float32"), reward="float",
                       terminate_p=0.0, max_steps=4)  # fmt: skip
    venv = gen.make_venv(spec, 4, 0, True)
    model = gen.build_model("td3", venv, "box", 0)
    model.action_noise = NormalActionNoise(np.zeros(1), 0.5 * np.ones(1))
    obs = start_training(model, gen.TOTAL)
    responses = SB3PolicyAdapter(model).act(obs[[1, 3]], ["env-1", "env-3"])
    actions = SB3PolicyAdapter(model).env_actions(responses)
    assert actions.shape == (2, 1)
    assert all(venv.action_space.contains(a) for a in actions)
