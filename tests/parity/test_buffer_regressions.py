"""Minimized inputs the parity fuzzer found on the buffer side, as plain regression tests."""

from __future__ import annotations

import copy
import re
from typing import Any

import numpy as np
import pytest
from stable_baselines3 import PPO

from rlightning_sb3 import SB3PolicyAdapter, add_rollout_step, finish_rollout, start_training

pytestmark = pytest.mark.torch


def _one_step_rollout(gen: Any, layout: str) -> Any:
    # PPO, Box(3,) observations, Discrete(2) actions, episodes of one step (every step is a
    # truncation with a terminal observation), n_steps=2, one env.
    spec = gen.EnvSpec(
        obs="box", action=("discrete", 2, 0), reward="int", terminate_p=0.0, max_steps=1
    )
    venv = gen.make_venv(spec, 1, 0, True)
    model = PPO(
        "MlpPolicy",
        venv,
        n_steps=2,
        batch_size=2,
        n_epochs=1,
        seed=0,
        device="cpu",
        policy_kwargs=gen.policy_kwargs("box"),
    )
    obs = start_training(model, gen.TOTAL)
    adapter = SB3PolicyAdapter(model)
    starts = np.ones(1, bool)
    for _ in range(model.n_steps):
        responses = adapter.act(obs, ["e"], episode_start=starts)
        new_obs, rewards, dones, infos = venv.step(adapter.env_actions(responses))
        infos = [
            {
                **i,
                "terminal_observation": gen.with_layout(i["terminal_observation"][None], layout)[0],
            }
            for i in infos
        ]
        add_rollout_step(model, gen.with_layout(obs, layout), responses, rewards, dones, infos)
        obs, starts = new_obs, dones
    finish_rollout(model, gen.with_layout(obs, layout), dones, responses=responses)
    return copy.deepcopy(model.rollout_buffer)


@pytest.mark.parametrize("layout", ["negative", "byteswapped"])
def test_finish_rollout_and_bootstrap_read_arrays_torch_cannot_view(layout: str, gen: Any) -> None:
    # finish_rollout once raised torch's "negative stride" / byte-order error for such an
    # observation; the terminal observation of a truncation too.
    expected = _one_step_rollout(gen, "c")
    got = _one_step_rollout(gen, layout)
    gen.assert_fields_equal(
        expected, got, ("observations", "rewards", "values", "advantages", "returns")
    )
    assert np.all(expected.rewards != np.round(expected.rewards))  # bootstrapped


@pytest.mark.parametrize(
    ("mask_row", "message", "rule"),
    [
        ([0, 0, 0], "action_masks['b'] allows no action of Discrete(3)", "[rule no-legal-action]"),
        ([1, 2, 0], "element [1, 1] ('b') = 2 is neither", "[rule action-mask]"),
    ],
    ids=["no-legal-action", "not-0/1"],
)
def test_rollout_step_refuses_a_response_mask_act_would_refuse(
    mask_row: list[int], message: str, rule: str, gen: Any
) -> None:
    # MaskablePPO, Discrete(3): a per-env response whose action_mask was replaced after act
    # (hand-built, or edited in transit) once reached the buffer, where sb3-contrib's
    # MaskableCategorical turns an all-False row into a uniform made-up log-probability.
    contrib = pytest.importorskip("sb3_contrib")
    spec = gen.EnvSpec(obs="box", action=("discrete", 3, 0), reward="float", terminate_p=0.0,
                       max_steps=4, masks=True)  # fmt: skip
    venv = gen.make_venv(spec, 2, 0, True)
    model = contrib.MaskablePPO("MlpPolicy", venv, n_steps=2, batch_size=4, seed=0, device="cpu",
                                policy_kwargs=gen.policy_kwargs("box"))  # fmt: skip
    obs = start_training(model, gen.TOTAL)
    ids = ["a", "b"]
    masks = np.stack(venv.env_method("action_masks"))
    responses = list(SB3PolicyAdapter(model).act(obs, ids, action_masks=masks))
    responses[1].action_mask = np.array(mask_row)
    _, rewards, dones, infos = venv.step(np.stack([r.action for r in responses]))
    with pytest.raises(ValueError, match=f"(?s){re.escape(message)}.*{re.escape(rule)}"):
        add_rollout_step(model, obs, responses, rewards, dones, infos, env_ids=ids)
    assert model.rollout_buffer.pos == 0  # nothing was stored
