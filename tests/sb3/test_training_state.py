"""The model's training state after a response loop: what SB3's ``learn()`` leaves and reads.

``learn()`` continues from ``_last_obs``, ``_last_episode_starts``, RecurrentPPO's
``_last_lstm_states`` and the counters; the buffer helpers must leave them as
``collect_rollouts`` does, and ``SB3PolicyAdapter.load_training_state`` must hand them to a loop
that continues. The oracle is SB3 itself: two ``learn()`` calls on a model built from the same
seeds. Each test runs one half (or both) as a response loop and compares every buffer array,
every parameter and the training state exactly.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3 import A2C, DQN, PPO, SAC, TD3
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.env_util import make_vec_env

from rlightning_sb3 import (
    SB3PolicyAdapter,
    StopTraining,
    add_replay_step,
    add_rollout_step,
    finish_rollout,
    finish_training,
    start_training,
)

pytestmark = pytest.mark.torch

ON_POLICY = ("ppo", "a2c", "recurrent_ppo", "maskable_ppo")
ALGOS = (*ON_POLICY, "sac", "td3", "dqn")
N_ENVS = 2
FIRST, SECOND = 24, 40  # two learn() budgets: 1.5 and 2.5 rollouts of 8 steps x 2 envs


def _model(algo: str, tiny: Any, seed: int = 3) -> BaseAlgorithm:
    contrib = pytest.importorskip("sb3_contrib")
    action = "box" if algo in ("sac", "td3") else "discrete"
    env = make_vec_env(tiny.env_id("flat", action), n_envs=N_ENVS, seed=seed)
    kwargs: dict[str, Any] = {"seed": seed, "device": "cpu", "policy_kwargs": {"net_arch": [8]}}
    if algo in ON_POLICY:
        kwargs["n_steps"] = 8
        if algo != "a2c":
            kwargs.update(batch_size=8 * N_ENVS, n_epochs=1)
    else:
        kwargs.update(learning_starts=6, buffer_size=200, batch_size=8)
    policy = "MlpPolicy"
    if algo == "recurrent_ppo":
        kwargs["policy_kwargs"]["lstm_hidden_size"] = 4
        policy = "MlpLstmPolicy"
    cls = {
        "ppo": PPO,
        "a2c": A2C,
        "recurrent_ppo": contrib.RecurrentPPO,
        "maskable_ppo": contrib.MaskablePPO,
        "sac": SAC,
        "td3": TD3,
        "dqn": DQN,
    }[algo]
    model = cls(policy, env, **kwargs)
    seed_global_rngs()
    return model


def seed_global_rngs() -> None:
    """The global RNGs both sides start from (SB3 samples actions and batches from them)."""
    th.manual_seed(11)
    np.random.seed(11)


class Record(BaseCallback):
    """Keeps a copy of the rollout buffer at each rollout's end; optionally stops at a step."""

    def __init__(self, stop_at: int | None = None) -> None:
        super().__init__()
        self.stop_at = stop_at
        self.buffers: list[Any] = []

    def _on_step(self) -> bool:
        return self.stop_at is None or self.n_calls != self.stop_at

    def _on_rollout_end(self) -> None:
        buffer = getattr(self.model, "rollout_buffer", None)
        if buffer is not None:
            self.buffers.append(copy.deepcopy(buffer))


def response_loop(
    model: Any,
    adapter: SB3PolicyAdapter,
    total: int,
    reset: bool,
    record: Record,
) -> None:
    """``model.learn(total, reset_num_timesteps=reset, callback=record)``, from responses."""
    env = model.get_env()
    ids = [f"env-{i}" for i in range(env.num_envs)]
    obs = start_training(model, total, reset_num_timesteps=reset, callback=record)
    starts = adapter.load_training_state(ids)
    end = model.num_timesteps + total if not reset else total
    try:
        if hasattr(model, "rollout_buffer"):
            masks = adapter.is_maskable
            while model.num_timesteps < end:
                for _ in range(model.n_steps):
                    kwargs = (
                        {"action_masks": np.stack(env.env_method("action_masks"))} if masks else {}
                    )
                    responses = adapter.act(obs, ids, episode_start=starts, **kwargs)
                    new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, ids))
                    add_rollout_step(
                        model, obs, responses, rewards, dones, infos,
                        env_ids=ids, new_observation=new_obs,
                    )  # fmt: skip
                    obs, starts = new_obs, dones
                finish_rollout(model, obs, dones, responses=responses, env_ids=ids)
                model.train()
        else:
            while model.num_timesteps < end:
                steps = 0
                done = False
                while not done:
                    responses = adapter.act(obs, ids)
                    new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, ids))
                    done = add_replay_step(
                        model, obs, responses, new_obs, rewards, dones, infos, env_ids=ids
                    )
                    obs = new_obs
                    steps += 1
                if model.num_timesteps > model.learning_starts:
                    gradient_steps = model.gradient_steps
                    if gradient_steps < 0:
                        gradient_steps = steps * env.num_envs
                    model.train(batch_size=model.batch_size, gradient_steps=gradient_steps)
    except StopTraining:
        pass
    finish_training(model)


_ADAPTERS: dict[int, SB3PolicyAdapter] = {}


def run(model: Any, how: str, total: int, reset: bool, record: Record) -> None:
    """One ``learn()`` of ``total`` steps: SB3's own (``"learn"``) or the response loop.

    The loops of one model share one adapter (what it carried from the last loop is stale
    after a ``learn()`` or a stop: ``load_training_state`` replaces it).
    """
    if how == "learn":
        model.learn(total, reset_num_timesteps=reset, callback=record)
    else:
        adapter = _ADAPTERS.get(id(model))
        if adapter is None or adapter.model is not model:
            adapter = _ADAPTERS[id(model)] = SB3PolicyAdapter(model)
        response_loop(model, adapter, total, reset, record)


def _arrays(value: Any) -> dict[str, np.ndarray]:
    if isinstance(value, dict):
        return {k: np.asarray(v) for k, v in value.items()}
    return {"": np.asarray(value)}


def assert_same_arrays(a: Any, b: Any, label: str) -> None:
    for key, x in _arrays(a).items():
        np.testing.assert_array_equal(x, _arrays(b)[key], err_msg=f"{label}{key}", strict=True)


def assert_same_training(a: Any, b: Any, records: tuple[Record, Record]) -> None:
    """Buffers, parameters and training state of the two models are equal, exactly."""
    for name in ("num_timesteps", "_episode_num", "_n_updates", "_total_timesteps"):
        assert getattr(a, name) == getattr(b, name), name
    assert [(e["r"], e["l"]) for e in a.ep_info_buffer] == [
        (e["r"], e["l"]) for e in b.ep_info_buffer
    ]
    assert list(a.ep_success_buffer) == list(b.ep_success_buffer)
    assert_same_arrays(a._last_obs, b._last_obs, "_last_obs")
    assert_same_arrays(a._last_episode_starts, b._last_episode_starts, "_last_episode_starts")
    if a._last_original_obs is not None or b._last_original_obs is not None:
        assert_same_arrays(a._last_original_obs, b._last_original_obs, "_last_original_obs")
    if hasattr(a, "_last_lstm_states"):
        for x, y in zip(
            (*a._last_lstm_states.pi, *a._last_lstm_states.vf),
            (*b._last_lstm_states.pi, *b._last_lstm_states.vf),
            strict=True,
        ):
            assert th.equal(x, y), "_last_lstm_states"
    ours = b.policy.state_dict()
    for key, x in a.policy.state_dict().items():
        assert th.equal(x, ours[key]), key
    assert len(records[0].buffers) == len(records[1].buffers)
    for t, (x, y) in enumerate(zip(records[0].buffers, records[1].buffers, strict=True)):
        for name in ("observations", "actions", "rewards", "episode_starts", "values", "log_probs",
                     "advantages", "returns", "hidden_states_pi", "cell_states_vf",
                     "action_masks"):  # fmt: skip
            if hasattr(x, name):
                assert_same_arrays(getattr(x, name), getattr(y, name), f"rollout {t} {name}")
    if hasattr(a, "replay_buffer"):
        for name in ("observations", "next_observations", "actions", "rewards", "dones",
                     "timeouts"):  # fmt: skip
            assert_same_arrays(getattr(a.replay_buffer, name), getattr(b.replay_buffer, name), name)
        assert a.replay_buffer.pos == b.replay_buffer.pos


def _two_runs(algo: str, tiny: Any, first: str, second: str, reset: bool = False) -> None:
    records = (Record(), Record())
    sb3 = _model(algo, tiny)
    run(sb3, "learn", FIRST, True, records[0])
    run(sb3, "learn", SECOND, reset, records[0])
    ours = _model(algo, tiny)
    run(ours, first, FIRST, True, records[1])
    run(ours, second, SECOND, reset, records[1])
    assert sb3.num_timesteps >= (SECOND if reset else FIRST + SECOND)
    assert_same_training(sb3, ours, records)


@pytest.mark.parametrize("algo", ALGOS)
def test_learn_after_a_response_loop_continues_where_the_loop_stopped(algo: str, tiny: Any) -> None:
    # the loop left _last_obs (and _last_episode_starts, _last_lstm_states) at the env's reset
    _two_runs(algo, tiny, "loop", "learn")


@pytest.mark.parametrize("algo", ALGOS)
def test_a_response_loop_after_learn_continues_where_learn_stopped(algo: str, tiny: Any) -> None:
    # load_training_state hands the loop learn()'s episode starts and LSTM states
    _two_runs(algo, tiny, "learn", "loop")


@pytest.mark.parametrize("algo", ALGOS)
def test_a_second_start_training_continues_where_the_first_loop_stopped(
    algo: str, tiny: Any
) -> None:
    # start_training(reset_num_timesteps=False) returned the first loop's start observation
    _two_runs(algo, tiny, "loop", "loop")


@pytest.mark.parametrize("algo", ["ppo", "recurrent_ppo"])
def test_a_loop_after_a_reset_stores_the_lstm_states_learn_left(algo: str, tiny: Any) -> None:
    # start_training(reset_num_timesteps=True) resets the env but not RecurrentPPO's
    # _last_lstm_states: the first step's buffer_state is where the last run stopped
    _two_runs(algo, tiny, "learn", "loop", reset=True)


@pytest.mark.parametrize("algo", ["ppo", "recurrent_ppo", "maskable_ppo", "sac", "dqn"])
@pytest.mark.parametrize("then", ["learn", "loop"])
def test_a_callback_that_stops_leaves_the_state_collect_rollouts_leaves(
    algo: str, then: str, tiny: Any
) -> None:
    # collect_rollouts returns before updating _last_obs (and the starts, the LSTM states)
    records = (Record(stop_at=11), Record(stop_at=11))
    sb3 = _model(algo, tiny)
    run(sb3, "learn", FIRST, True, records[0])
    stopped = copy.deepcopy(sb3)
    records[0].stop_at = None
    run(sb3, "learn", SECOND, False, records[0])
    ours = _model(algo, tiny)
    run(ours, "loop", FIRST, True, records[1])
    assert ours.num_timesteps == 11 * N_ENVS
    assert_same_training(stopped, ours, (Record(), Record()))
    records[1].stop_at = None
    run(ours, then, SECOND, False, records[1])
    assert_same_training(sb3, ours, records)


def test_a_rollout_step_without_its_new_observation_leaves_no_stale_observation(
    tiny: Any,
) -> None:
    # without new_observation the model cannot know the next observation: _last_obs is None
    # (learn() would reset the env) until finish_rollout gives it
    model = _model("ppo", tiny)
    adapter = SB3PolicyAdapter(model)
    env = model.get_env()
    ids = ["a", "b"]
    obs = start_training(model, 100)
    starts = adapter.load_training_state(ids)
    for _ in range(model.n_steps):
        responses = adapter.act(obs, ids, episode_start=starts)
        new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, ids))
        add_rollout_step(model, obs, responses, rewards, dones, infos, env_ids=ids)
        assert model._last_obs is None
        np.testing.assert_array_equal(model._last_episode_starts, dones, strict=True)
        obs, starts = new_obs, dones
    finish_rollout(model, obs, dones, responses=responses, env_ids=ids)
    np.testing.assert_array_equal(model._last_obs, obs, strict=True)
    assert model._last_episode_starts is not None
    np.testing.assert_array_equal(model._last_episode_starts, dones, strict=True)
    finish_training(model)


def test_load_training_state_gives_the_starts_and_lstm_states_the_model_holds(
    tiny: Any,
) -> None:
    model: Any = _model("recurrent_ppo", tiny)
    model.learn(16)
    adapter = SB3PolicyAdapter(model)
    starts = adapter.load_training_state(["a", "b"])
    np.testing.assert_array_equal(starts, model._last_episode_starts, strict=True)
    assert starts is not model._last_episode_starts
    obs = start_training(model, 16, reset_num_timesteps=False)
    responses = adapter.act(obs, ["b", "a"], episode_start=starts[::-1])
    for row, env_id in enumerate(["b", "a"]):
        column = ["a", "b"].index(env_id)
        state = responses[row].buffer_state
        assert th.equal(state.pi[0], model._last_lstm_states.pi[0][:, column])
        assert th.equal(state.vf[1], model._last_lstm_states.vf[1][:, column])
    finish_training(model)


def test_load_training_state_refuses_ids_that_are_not_the_envs(tiny: Any) -> None:
    model = _model("ppo", tiny)
    adapter = SB3PolicyAdapter(model)
    with pytest.raises(ValueError, match=re.escape("has no training state to continue from")):
        adapter.load_training_state(["a", "b"])
    start_training(model, 16)
    with pytest.raises(ValueError, match=re.escape("env_ids has 1 ids but PPO's env has 2 envs")):
        adapter.load_training_state(["a"])
    with pytest.raises(ValueError, match=re.escape("env_ids repeats ['a']")):
        adapter.load_training_state(["a", "a"])
    with pytest.raises(TypeError, match=re.escape("env_ids[1] must be a str, got int 1")):
        adapter.load_training_state(["a", 1])  # type: ignore[list-item]
    finish_training(model)
