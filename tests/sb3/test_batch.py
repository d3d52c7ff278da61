"""ResponseBatch in the SB3 adapter: act()/predict() answer one, the helpers read it unsplit.

A batch rebuilt from its fields (as a transport would) is checked as strictly as the per-env
responses it splits into.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.vec_env import VecEnv

from rlightning import PerEnv, PolicyResponse, ResponseBatch
from rlightning_sb3 import SB3PolicyAdapter, add_rollout_step, start_training

IDS = ["a", "b", "c"]


def _vec(n: int) -> VecEnv:
    return make_vec_env("CartPole-v1", n_envs=n, seed=0)


@pytest.fixture
def ppo3() -> PPO:
    return PPO(
        "MlpPolicy",
        _vec(3),
        n_steps=4,
        batch_size=12,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )


def test_act_answers_an_unsplit_batch_that_splits_as_per_env_responses(ppo3: PPO) -> None:
    adapter = SB3PolicyAdapter(ppo3)
    obs = start_training(ppo3, 100)
    batch = adapter.act(obs, IDS)
    assert type(batch) is ResponseBatch
    stacked = batch.stacked
    assert stacked is not None
    assert stacked.env_ids == IDS
    assert stacked.action.shape == (3,)
    assert stacked.buffer_action.shape == (3, 1)
    assert stacked.value.shape == (3,)
    assert len(batch) == 3 and batch.stacked is stacked
    split = list(batch)
    assert [r.env_id for r in split] == IDS
    for i, r in enumerate(split):
        assert type(r) is PolicyResponse
        assert r.action == stacked.action[i]
        assert r.value.shape == ()
        assert r.value.data_ptr() == stacked.value[i].data_ptr()  # a view, no copy
        assert r.episode_start is True


def test_env_actions_and_add_rollout_step_keep_the_batch_unsplit(ppo3: PPO) -> None:
    adapter = SB3PolicyAdapter(ppo3)
    obs = start_training(ppo3, 100)
    batch = adapter.act(obs, IDS)
    split_twin = ResponseBatch(copy.copy(batch.stacked))  # same data, to be split
    actions = adapter.env_actions(batch, IDS)
    assert batch.stacked is not None
    np.testing.assert_array_equal(actions, adapter.env_actions(list(split_twin)))
    assert actions is not batch.stacked.action  # a copy, as the per-env path gives
    env = ppo3.get_env()
    _new_obs, rewards, dones, infos = env.step(actions)
    buf_fast = copy.deepcopy(ppo3.rollout_buffer)
    buf_split = copy.deepcopy(ppo3.rollout_buffer)
    got = add_rollout_step(
        ppo3, obs, batch, rewards, dones, infos, buffer=buf_fast, update_model=False
    )
    want = add_rollout_step(
        ppo3,
        obs,
        split_twin.responses(),
        rewards,
        dones,
        infos,
        buffer=buf_split,
        update_model=False,
    )
    assert batch.stacked is not None
    np.testing.assert_array_equal(got, want)
    for name in ("observations", "actions", "rewards", "episode_starts", "values", "log_probs"):
        np.testing.assert_array_equal(getattr(buf_fast, name), getattr(buf_split, name))


def test_a_changed_split_response_is_what_env_actions_reads(ppo3: PPO) -> None:
    adapter = SB3PolicyAdapter(ppo3)
    obs = start_training(ppo3, 100)
    batch = adapter.act(obs, IDS)
    batch[1].action = np.int64(1 - int(batch[1].action))
    assert batch.stacked is None  # split: the responses are the data now
    expected = np.array([r.action for r in batch])
    np.testing.assert_array_equal(adapter.env_actions(batch), expected)


def test_reordered_env_ids_take_the_checked_path(ppo3: PPO) -> None:
    adapter = SB3PolicyAdapter(ppo3)
    obs = start_training(ppo3, 100)
    batch = adapter.act(obs, IDS)
    stacked_actions = batch.stacked.action.copy()
    got = adapter.env_actions(batch, ["c", "a", "b"])
    np.testing.assert_array_equal(got, stacked_actions[[2, 0, 1]])
    with pytest.raises(ValueError, match=re.escape("env_ids has 2 ids but there are 3")):
        adapter.env_actions(adapter.act(obs, IDS), ["a", "b"])


def test_predict_answers_a_batch_holding_sb3s_actions(ppo3: PPO) -> None:
    adapter = SB3PolicyAdapter(ppo3)
    obs = np.zeros((3, 4), np.float32)
    batch = adapter.predict(obs, env_ids=IDS, deterministic=True, ts_env_sent_ns=[1, 2, 3])
    expected, _ = ppo3.predict(obs, deterministic=True)
    assert type(batch) is ResponseBatch
    np.testing.assert_array_equal(batch.stacked.action, expected)
    assert [r.ts_env_sent_ns for r in batch] == [1, 2, 3]
    one = adapter.predict(obs[0], env_ids="a", deterministic=True, ts_env_sent_ns=5)
    assert type(one) is PolicyResponse and one.ts_env_sent_ns == 5


@pytest.mark.parametrize("method", ["act", "predict"])
def test_nan_is_named_with_torch_validation_off_too(ppo3: PPO, method: str) -> None:
    adapter = SB3PolicyAdapter(ppo3)
    obs = np.zeros((3, 4), np.float32)
    obs[2, 1] = np.nan
    msg = "observation holds NaN for env(s) ['c']"
    with pytest.raises(ValueError, match=re.escape(msg)):  # torch raised; the env is named
        getattr(adapter, method)(obs, env_ids=IDS)
    previous = th.distributions.Distribution._validate_args
    th.distributions.Distribution.set_default_validate_args(False)
    try:
        with pytest.raises(ValueError, match=re.escape(msg)):  # scanned before the forward
            getattr(adapter, method)(obs, env_ids=IDS)
    finally:
        th.distributions.Distribution.set_default_validate_args(previous)


def test_a_bare_stacked_response_is_refused_with_the_fix(ppo3: PPO) -> None:
    adapter = SB3PolicyAdapter(ppo3)
    stacked = adapter.act(np.zeros((3, 4), np.float32), IDS).stacked
    msg = "got one stacked PolicyResponse of envs ['a', 'b', 'c']; pass rlightning.ResponseBatch"
    with pytest.raises(TypeError, match=re.escape(msg)):
        adapter.env_actions(stacked)  # type: ignore[arg-type]
    np.testing.assert_array_equal(adapter.env_actions(ResponseBatch(stacked)), stacked.action)


def test_env_ids_as_an_equal_tuple_keep_the_batch_unsplit(ppo3: PPO) -> None:
    adapter = SB3PolicyAdapter(ppo3)
    batch = adapter.act(np.zeros((3, 4), np.float32), IDS)
    adapter.env_actions(batch, tuple(IDS))
    assert batch.stacked is not None


def test_the_stacked_response_equals_one_built_by_the_constructor(ppo3: PPO) -> None:
    adapter = SB3PolicyAdapter(ppo3)
    stacked = adapter.act(np.zeros((3, 4), np.float32), IDS, ts_env_sent_ns=7).stacked
    rebuilt = PolicyResponse(None, **{k: v for k, v in vars(stacked).items() if k != "env_id"})
    assert type(stacked) is PolicyResponse
    assert list(vars(stacked)) == list(vars(rebuilt))
    assert stacked == rebuilt and repr(stacked) == repr(rebuilt)


# ------------------------------------------ a batch rebuilt from its fields, as a transport would


TWO_IDS = ["a", "b"]


def _constructed(model: PPO, **changes: Any) -> tuple[Any, PolicyResponse]:
    """A batch as a transport would rebuild it: ResponseBatch(stacked) from act's fields."""
    adapter = SB3PolicyAdapter(model)
    obs = start_training(model, 100)
    stacked = adapter.act(obs, TWO_IDS).stacked
    assert stacked is not None
    fields = {k: v for k, v in stacked.__dict__.items() if k != "env_id"}
    fields.update(changes)
    return obs, PolicyResponse(None, **fields)


def test_add_rollout_step_refuses_short_columns_of_a_constructed_batch(
    cartpole2: Callable[[str], Any],
) -> None:
    model = cartpole2("ppo")
    obs, stacked = _constructed(model, value=th.tensor([0.25]), log_prob=th.tensor([-0.5]))
    stacked.episode_start = PerEnv([True])
    with pytest.raises(ValueError, match="value"):
        add_rollout_step(
            model, obs, ResponseBatch(stacked), np.zeros(2), np.zeros(2, bool), [{}, {}]
        )


def test_the_per_env_path_refuses_the_same_short_columns(cartpole2: Callable[[str], Any]) -> None:
    # Control: the same batch, split, is refused (unbind names the field).
    model = cartpole2("ppo")
    obs, stacked = _constructed(model, value=th.tensor([0.25]), log_prob=th.tensor([-0.5]))
    with pytest.raises(ValueError, match=re.escape("field 'value' is a tensor of shape (1,)")):
        add_rollout_step(
            model, obs, list(ResponseBatch(stacked)), np.zeros(2), np.zeros(2, bool), [{}, {}]
        )


@pytest.mark.parametrize("ids", [["a", "a"], [None, None]], ids=["repeated", "none"])
def test_env_actions_refuses_repeated_env_ids_of_a_constructed_batch(
    cartpole2: Callable[[str], Any], ids: list[Any]
) -> None:
    model = cartpole2("ppo")
    _, stacked = _constructed(model, env_ids=ids)
    adapter = SB3PolicyAdapter(model)
    with pytest.raises(ValueError, match=re.escape("several responses for env id(s)")):
        adapter.env_actions(ResponseBatch(stacked))


def test_env_actions_per_env_path_refuses_repeated_env_ids(cartpole2: Callable[[str], Any]) -> None:
    # Control: the split batch is refused.
    model = cartpole2("ppo")
    _, stacked = _constructed(model, env_ids=["a", "a"])
    with pytest.raises(ValueError, match=re.escape("several responses for env id(s) ['a']")):
        SB3PolicyAdapter(model).env_actions(list(ResponseBatch(stacked)))


def test_add_rollout_step_refuses_repeated_env_ids_of_a_constructed_batch(
    cartpole2: Callable[[str], Any],
) -> None:
    model = cartpole2("ppo")
    obs, stacked = _constructed(model, env_ids=["a", "a"])
    with pytest.raises(ValueError, match=re.escape("several responses for env id(s) ['a']")):
        add_rollout_step(
            model, obs, ResponseBatch(stacked), np.zeros(2), np.zeros(2, bool), [{}, {}]
        )
