"""Breaker tests: the stacked fast paths of act/predict, env_actions and the buffer helpers.

Each test pins a defect a breaker found by trying bad input on the ResponseBatch paths (all
fixed); the per-env path (or the code before ResponseBatch) refuses the same input.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.env_util import make_vec_env

from rlightning import PerEnv, PolicyResponse, ResponseBatch
from rlightning_sb3 import SB3PolicyAdapter, add_rollout_step, start_training

IDS = ["a", "b"]


def _ppo() -> PPO:
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    return PPO(
        "MlpPolicy",
        env,
        n_steps=4,
        batch_size=8,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )


def _dqn() -> DQN:
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    return DQN(
        "MlpPolicy",
        env,
        learning_starts=0,
        buffer_size=50,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )


@pytest.mark.parametrize("make", [_ppo, _dqn], ids=["ppo", "dqn"])
@pytest.mark.parametrize("method", ["act", "predict"])
@pytest.mark.parametrize("rows", [3, 1])
def test_a_batch_whose_rows_differ_from_the_repeated_env_ids_is_refused(
    make: Any, method: str, rows: int
) -> None:
    model = make()
    adapter = SB3PolicyAdapter(model)
    obs = model.get_env().reset()
    adapter.act(obs, IDS)  # the ids are now cached
    other = np.concatenate([obs, obs])[:rows]
    msg = f"env_ids has 2 ids but the observation batch has {rows} rows"
    with pytest.raises(ValueError, match=re.escape(msg)):
        getattr(adapter, method)(other, list(IDS))


def test_the_same_batch_with_fresh_ids_is_refused_as_expected() -> None:
    # Control for the test above: without the cached ids the check runs.
    model = _ppo()
    obs = model.get_env().reset()
    msg = "env_ids has 2 ids but the observation batch has 3 rows"
    with pytest.raises(ValueError, match=re.escape(msg)):
        SB3PolicyAdapter(model).act(np.concatenate([obs, obs[:1]]), IDS)


def _constructed(model: PPO, **changes: Any) -> tuple[Any, PolicyResponse]:
    """A batch as a transport would rebuild it: ResponseBatch(stacked) from act's fields."""
    adapter = SB3PolicyAdapter(model)
    obs = start_training(model, 100)
    stacked = adapter.act(obs, IDS).stacked
    assert stacked is not None
    fields = {k: v for k, v in stacked.__dict__.items() if k != "env_id"}
    fields.update(changes)
    return obs, PolicyResponse(None, **fields)


def test_add_rollout_step_refuses_short_columns_of_a_constructed_batch() -> None:
    model = _ppo()
    obs, stacked = _constructed(model, value=th.tensor([0.25]), log_prob=th.tensor([-0.5]))
    stacked.episode_start = PerEnv([True])
    with pytest.raises(ValueError, match="value"):
        add_rollout_step(
            model, obs, ResponseBatch(stacked), np.zeros(2), np.zeros(2, bool), [{}, {}]
        )


def test_the_per_env_path_refuses_the_same_short_columns() -> None:
    # Control: the same batch, split, is refused (unbind names the field).
    model = _ppo()
    obs, stacked = _constructed(model, value=th.tensor([0.25]), log_prob=th.tensor([-0.5]))
    with pytest.raises(ValueError, match=re.escape("field 'value' is a tensor of shape (1,)")):
        add_rollout_step(
            model, obs, list(ResponseBatch(stacked)), np.zeros(2), np.zeros(2, bool), [{}, {}]
        )


@pytest.mark.parametrize("ids", [["a", "a"], [None, None]], ids=["repeated", "none"])
def test_env_actions_refuses_repeated_env_ids_of_a_constructed_batch(ids: list[Any]) -> None:
    model = _ppo()
    _, stacked = _constructed(model, env_ids=ids)
    adapter = SB3PolicyAdapter(model)
    with pytest.raises(ValueError, match=re.escape("several responses for env id(s)")):
        adapter.env_actions(ResponseBatch(stacked))


def test_env_actions_per_env_path_refuses_repeated_env_ids() -> None:
    # Control: the split batch is refused.
    model = _ppo()
    _, stacked = _constructed(model, env_ids=["a", "a"])
    with pytest.raises(ValueError, match=re.escape("several responses for env id(s) ['a']")):
        SB3PolicyAdapter(model).env_actions(list(ResponseBatch(stacked)))


def test_add_rollout_step_refuses_repeated_env_ids_of_a_constructed_batch() -> None:
    model = _ppo()
    obs, stacked = _constructed(model, env_ids=["a", "a"])
    with pytest.raises(ValueError, match=re.escape("several responses for env id(s) ['a']")):
        add_rollout_step(
            model, obs, ResponseBatch(stacked), np.zeros(2), np.zeros(2, bool), [{}, {}]
        )


def test_episode_start_that_is_not_boolean_is_refused_by_add_rollout_step() -> None:
    from stable_baselines3 import PPO

    from rlightning import PolicyResponse
    from rlightning_sb3 import SB3PolicyAdapter, add_rollout_step, start_training

    model = PPO(
        "MlpPolicy", "CartPole-v1", n_steps=4, batch_size=4, policy_kwargs={"net_arch": [8]}
    )
    obs = start_training(model, 100)
    response = SB3PolicyAdapter(model).act(obs, ["e0"])[0]
    bad = PolicyResponse(**{**vars(response), "episode_start": "no"})
    with pytest.raises(
        TypeError,  # a str is the wrong kind of thing, not a bad number
        match=re.escape(
            "episode_start must hold booleans or the numbers 0 and 1, not dtype <U2; got ['no']"
            " [rule boolean]"
        ),
    ):
        add_rollout_step(model, obs, [bad], [1.0], [False], [{}])


def test_action_masks_are_copied_so_reusing_the_array_changes_no_response() -> None:
    from sb3_contrib import MaskablePPO

    from rlightning_sb3 import SB3PolicyAdapter

    model = MaskablePPO("MlpPolicy", "CartPole-v1", n_steps=4, batch_size=4, seed=0)
    adapter = SB3PolicyAdapter(model)
    masks = np.ones((1, 2), dtype=bool)
    response = adapter.act(np.zeros((1, 4), np.float32), ["e0"], action_masks=masks)[0]
    masks[0, 0] = False  # the caller refills its array for the next step
    assert response.action_mask.tolist() == [True, True]
