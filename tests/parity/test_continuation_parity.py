"""Continuing training: response loops and ``learn()`` in any order against two ``learn()`` calls.

SB3's ``learn(..., reset_num_timesteps=False)`` continues from the model's training state
(``_last_obs``, ``_last_episode_starts``, ``_last_original_obs``, RecurrentPPO's
``_last_lstm_states``, the counters and episode infos). On generated envs (``conftest.py``),
plain or under ``VecNormalize`` or ``VecFrameStack``, for PPO, A2C, RecurrentPPO, MaskablePPO,
SAC, TD3, DDPG and DQN, the oracle model runs ``learn(first)`` then ``learn(second,
reset_num_timesteps=reset)``; an identical model runs the same two budgets as

* a response loop (``start_training``, ``SB3PolicyAdapter.load_training_state``, ``act``, the
  buffer helpers, ``model.train`` where ``learn()`` trains, ``finish_training``) then ``learn``,
* ``learn`` then a response loop, or
* two response loops on one adapter,

with a callback that may stop the first run mid-rollout (``collect_rollouts`` returns before
updating ``_last_obs``). Compared exactly: every rollout buffer at each ``on_rollout_end``, the
replay buffer and the training state after each run, the actions each env received and every
parameter at the end.
"""

from __future__ import annotations

import copy
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch as th
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3
from stable_baselines3.common.callbacks import BaseCallback

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

PARITY = settings.get_profile("rlightning-parity")
ON_POLICY = ("ppo", "a2c", "recurrent_ppo", "maskable_ppo")
OFF_POLICY = ("sac", "td3", "ddpg", "dqn")
ROLLOUT_FIELDS = (
    "observations",
    "actions",
    "rewards",
    "episode_starts",
    "values",
    "log_probs",
    "advantages",
    "returns",
)
RECURRENT_FIELDS = ("hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf")
REPLAY_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
STATE = ("_last_obs", "_last_episode_starts", "_last_original_obs")
COUNTERS = ("num_timesteps", "_episode_num", "_n_updates", "_total_timesteps")


@st.composite
def continuation_cases(draw: st.DrawFn, gen: Any, algo: str) -> dict[str, Any]:
    if algo in ("sac", "td3", "ddpg"):
        kinds: tuple[str, ...] = ("box",)
    elif algo == "dqn":
        kinds = ("discrete",)
    else:
        kinds = ("discrete", "multidiscrete")
        if algo != "recurrent_ppo":  # sb3-contrib's RecurrentPPO.train fails on MultiBinary
            kinds = (*kinds, "multibinary")  # (int8 actions in binary_cross_entropy)
        if algo != "maskable_ppo":
            kinds = (*kinds, "box")
    wrapper = draw(st.sampled_from(("none", "none", "normalize", "frame_stack")))
    observations = gen.WRAPPER_OBSERVATIONS[wrapper]
    if wrapper == "normalize" and algo in OFF_POLICY:  # see test_wrapper_parity.py
        observations = tuple(o for o in observations if o != "discrete")
    obs = draw(st.sampled_from(observations))
    spec = gen.EnvSpec(
        obs=obs,
        action=draw(gen.action_specs(kinds, starts=False)),
        reward=draw(st.sampled_from(("int", "float", "float-any"))),
        terminate_p=draw(st.sampled_from((0.0, 0.2))),
        max_steps=draw(st.integers(1, 5)),
        masks=algo == "maskable_ppo",
    )
    n_envs = draw(st.integers(1, 3 if obs != "image" else 2))
    # budgets in env steps: learn() runs whole rollouts past them (on-policy), whole
    # train_freq rollouts (off-policy)
    first = draw(st.integers(1, 8)) * n_envs
    return {
        "algo": algo,
        "spec": spec,
        "wrapper": draw(gen.wrapper_specs(wrapper, obs)),
        "n_envs": n_envs,
        "n_steps": draw(st.integers(2, 4)),
        "train_freq": draw(st.integers(1, 2)) if algo != "dqn" else 4,
        "gradient_steps": draw(st.sampled_from((1, -1))),
        "learning_starts": draw(st.integers(0, 6)),
        "first": first,
        "second": draw(st.integers(1, 8)) * n_envs,
        "order": draw(st.sampled_from(("loop-learn", "learn-loop", "loop-loop"))),
        "reset": draw(st.sampled_from((False, False, False, True))),
        "stop_at": draw(st.one_of(st.none(), st.integers(1, max(1, first // n_envs)))),
        "seed": draw(st.integers(0, 2**16)),
    }


def _model(case: dict[str, Any], strict: bool, gen: Any) -> Any:
    contrib = pytest.importorskip("sb3_contrib")
    spec, algo = case["spec"], case["algo"]
    venv = gen.make_wrapped_venv(spec, case["n_envs"], case["seed"], strict, case["wrapper"])
    recurrent = algo == "recurrent_ppo"
    kwargs: dict[str, Any] = {
        "seed": case["seed"],
        "device": "cpu",
        "policy_kwargs": gen.policy_kwargs(spec.obs, recurrent),
    }
    if algo in OFF_POLICY:
        kwargs.update(
            learning_starts=case["learning_starts"],
            train_freq=case["train_freq"],
            gradient_steps=case["gradient_steps"],
            batch_size=4,
            buffer_size=200,
        )
        if algo == "dqn":
            kwargs.update(exploration_fraction=0.2, target_update_interval=3)
    else:
        kwargs["n_steps"] = case["n_steps"]
        if algo != "a2c":
            kwargs.update(batch_size=case["n_steps"] * case["n_envs"], n_epochs=1)
    cls = {
        "ppo": PPO,
        "a2c": A2C,
        "recurrent_ppo": contrib.RecurrentPPO,
        "maskable_ppo": contrib.MaskablePPO,
        "sac": SAC,
        "td3": TD3,
        "ddpg": DDPG,
        "dqn": DQN,
    }[algo]
    model = cls(gen.policy_name(spec.obs, recurrent), venv, **kwargs)
    gen.seed_global_rngs()
    return model


class Record(BaseCallback):
    """A copy of the rollout buffer at each ``on_rollout_end``; stops at ``on_step`` number
    ``stop_at`` when set."""

    def __init__(self, stop_at: int | None) -> None:
        super().__init__()
        self.stop_at = stop_at
        self.buffers: list[Any] = []

    def _on_step(self) -> bool:
        return self.stop_at is None or self.n_calls != self.stop_at

    def _on_rollout_end(self) -> None:
        buffer = getattr(self.model, "rollout_buffer", None)
        if buffer is not None:
            self.buffers.append(copy.deepcopy(buffer))


def response_learn(
    model: Any, adapter: SB3PolicyAdapter, total: int, reset: bool, record: Record
) -> None:
    """``model.learn(total, callback=record, reset_num_timesteps=reset)`` from responses.

    As ``OnPolicyAlgorithm.learn`` (rollouts of ``n_steps``, ``train()`` after each) and
    ``OffPolicyAlgorithm.learn`` (rollouts of ``train_freq``, then ``train`` when
    ``num_timesteps > learning_starts``, ``gradient_steps=-1`` meaning the rollout's steps).
    """
    env = model.get_env()
    ids = [f"env-{i}" for i in range(env.num_envs)]
    obs = start_training(model, total, reset_num_timesteps=reset, callback=record)
    starts = adapter.load_training_state(ids)
    end = model._total_timesteps
    try:
        while model.num_timesteps < end:
            if hasattr(model, "rollout_buffer"):
                for _ in range(model.n_steps):
                    kwargs: dict[str, Any] = {"episode_start": starts}
                    if adapter.is_maskable:
                        kwargs["action_masks"] = np.stack(env.env_method("action_masks"))
                    responses = adapter.act(obs, ids, **kwargs)
                    new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, ids))
                    add_rollout_step(
                        model, obs, responses, rewards, dones, infos,
                        env_ids=ids, new_observation=new_obs,
                    )  # fmt: skip
                    obs, starts = new_obs, dones
                finish_rollout(model, obs, dones, responses=responses, env_ids=ids)
                model.train()
                continue
            steps, done = 0, False
            while not done:
                responses = adapter.act(obs, ids)
                new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, ids))
                done = add_replay_step(
                    model, obs, responses, new_obs, rewards, dones, infos, env_ids=ids
                )
                obs = new_obs
                steps += 1
            if model.num_timesteps > 0 and model.num_timesteps > model.learning_starts:
                gradient_steps = model.gradient_steps
                if gradient_steps < 0:
                    gradient_steps = steps * env.num_envs
                if gradient_steps > 0:
                    model.train(batch_size=model.batch_size, gradient_steps=gradient_steps)
    except StopTraining:
        pass
    finish_training(model)


def _state(model: Any) -> dict[str, Any]:
    """What a ``learn()`` continues from, copied."""
    state: dict[str, Any] = {name: copy.deepcopy(getattr(model, name)) for name in STATE}
    state.update({name: getattr(model, name) for name in COUNTERS})
    state["episodes"] = [(e["r"], e["l"]) for e in model.ep_info_buffer]
    state["exploration_rate"] = getattr(model, "exploration_rate", None)
    if hasattr(model, "_last_lstm_states"):
        lstm = model._last_lstm_states
        state["_last_lstm_states"] = [t.clone() for t in (*lstm.pi, *lstm.vf)]
    if hasattr(model, "replay_buffer"):
        state["replay"] = copy.deepcopy(model.replay_buffer)
    return state


def _assert_states_equal(a: dict[str, Any], b: dict[str, Any], gen: Any, phase: str) -> None:
    for name in (*COUNTERS, "episodes", "exploration_rate"):
        assert a[name] == b[name], (phase, name)
    gen.assert_fields_equal(SimpleNamespace(**a), SimpleNamespace(**b), STATE)
    for s, t in zip(a.get("_last_lstm_states", ()), b.get("_last_lstm_states", ()), strict=True):
        assert th.equal(s, t), (phase, "_last_lstm_states")
    if "replay" in a:
        gen.assert_fields_equal(a["replay"], b["replay"], REPLAY_FIELDS)
        assert (a["replay"].pos, a["replay"].full) == (b["replay"].pos, b["replay"].full)


def _run(model: Any, how: str, total: int, reset: bool, record: Record, adapter: Any) -> None:
    if how == "learn":
        model.learn(total, reset_num_timesteps=reset, callback=record)
    else:
        response_learn(model, adapter, total, reset, record)


@pytest.mark.parametrize("algo", ON_POLICY + OFF_POLICY)
@settings(PARITY, max_examples=max(1, PARITY.max_examples // 8))  # the profile's, over 8 algos
@given(data=st.data())
def test_continued_training_equals_two_learn_calls(data: Any, gen: Any, algo: str) -> None:
    case = data.draw(continuation_cases(gen, algo))
    first_how, second_how = case["order"].split("-")
    runs = []
    for strict, hows in ((False, ("learn", "learn")), (True, (first_how, second_how))):
        model = _model(case, strict, gen)
        adapter = SB3PolicyAdapter(model)
        record = Record(case["stop_at"])
        _run(model, hows[0], case["first"], True, record, adapter)
        after_first = _state(model)
        record.stop_at = None
        _run(model, hows[1], case["second"], case["reset"], record, adapter)
        runs.append((model, record, after_first, _state(model)))
    (sb3, sb3_record, sb3_first, sb3_second), (ours, our_record, our_first, our_second) = runs
    _assert_states_equal(sb3_first, our_first, gen, "after the first run")
    _assert_states_equal(sb3_second, our_second, gen, "after the second run")
    fields = ROLLOUT_FIELDS
    if case["algo"] == "recurrent_ppo":
        fields = (*fields, *RECURRENT_FIELDS)
    if case["algo"] == "maskable_ppo":
        fields = (*fields, "action_masks")
    assert len(sb3_record.buffers) == len(our_record.buffers)
    for a, b in zip(sb3_record.buffers, our_record.buffers, strict=True):
        gen.assert_fields_equal(a, b, fields)
    gen.assert_received_equal(gen.gen_envs(sb3.get_env()), gen.gen_envs(ours.get_env()))
    ours_params = ours.policy.state_dict()
    for key, value in sb3.policy.state_dict().items():
        assert th.equal(value, ours_params[key]), key
    gen.count(
        "continuation",
        algo=case["algo"],
        order=case["order"],
        wrapper=case["wrapper"][0],
        obs=case["spec"].obs,
        reset=case["reset"],
        stopped=sb3_first["num_timesteps"] < case["first"],
        **({"rollouts": len(sb3_record.buffers)} if case["algo"] in ON_POLICY else {}),
    )
