"""Replay buffers: the adapter loop against SB3's own off-policy ``collect_rollouts``.

SB3's ``collect_rollouts`` draws each step's actions with ``_sample_action`` and stores them
with ``_store_transition``; the adapter loop draws them with ``SB3PolicyAdapter.act`` and stores
them with ``add_replay_step``. For DQN, SAC, TD3 and DDPG over generated spaces, observations,
1-8 envs, ``learning_starts`` before, at and after the steps run, no action noise or Normal or
Ornstein-Uhlenbeck noise, rewards in every form and observations in every memory layout, every
replay-buffer array, the model's counters and the actions each env received must be equal.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3 import DDPG, DQN, SAC, TD3
from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise
from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit

from rlightning_sb3 import SB3PolicyAdapter, add_replay_step, start_training

pytestmark = pytest.mark.torch

PARITY = settings.get_profile("rlightning-parity")
FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
ALGOS = {"dqn": DQN, "sac": SAC, "td3": TD3, "ddpg": DDPG}


@st.composite
def replay_cases(draw: st.DrawFn, gen: Any) -> dict[str, Any]:
    algo = draw(st.sampled_from(sorted(ALGOS)))
    kinds = ("discrete",) if algo == "dqn" else ("box",)
    action = draw(gen.action_specs(kinds, starts=False, box_dtypes=("float32", "float64")))
    obs = draw(st.sampled_from(("box", "dict", "image", "discrete")))
    reward = draw(st.sampled_from(("int", "float", "float-any")))
    spec = gen.EnvSpec(
        obs=obs,
        action=action,
        reward=reward,
        terminate_p=draw(st.sampled_from((0.0, 0.1, 0.3))),
        max_steps=draw(st.integers(1, 6)),
    )
    n_envs = draw(st.integers(1, 8 if obs != "image" else 3))
    steps = draw(st.integers(2, 6))
    return {
        "algo": algo,
        "spec": spec,
        "n_envs": n_envs,
        "steps": steps,
        "learning_starts": draw(st.integers(0, steps * n_envs + 1)),
        "noise": draw(st.sampled_from(("none", "normal", "ou") if algo != "dqn" else ("none",))),
        "seed": draw(st.integers(0, 2**16)),
        "reward_form": draw(st.sampled_from(gen.reward_forms(reward))),
        "layout": draw(st.sampled_from(gen.LAYOUTS)),
        "order": draw(st.sampled_from(("batch", "shuffled"))),
        # SB3's memory-saving ReplayBuffer (next observation in the next row); not for Dict
        # observations, and without timeout handling (SB3 refuses the combination)
        "optimize_memory": obs != "dict" and draw(st.booleans()),
    }


def _model(case: dict[str, Any], strict: bool, gen: Any) -> Any:
    spec = case["spec"]
    venv = gen.make_venv(spec, case["n_envs"], case["seed"], strict)
    kwargs: dict[str, Any] = {
        "learning_starts": case["learning_starts"],
        "buffer_size": case["steps"] * case["n_envs"] + 4,
        "batch_size": 4,
        "seed": case["seed"],
        "device": "cpu",
        "policy_kwargs": gen.policy_kwargs(spec.obs),
    }
    if case["optimize_memory"]:
        kwargs.update(
            optimize_memory_usage=True,
            replay_buffer_kwargs={"handle_timeout_termination": False},
        )
    if case["algo"] == "dqn":
        kwargs.update(exploration_fraction=0.01, target_update_interval=2)
    elif case["noise"] != "none":
        dim = int(np.prod(venv.action_space.shape))
        cls = NormalActionNoise if case["noise"] == "normal" else OrnsteinUhlenbeckActionNoise
        kwargs["action_noise"] = cls(np.zeros(dim), 0.4 * np.ones(dim))
    return ALGOS[case["algo"]](gen.policy_name(spec.obs), venv, **kwargs)


def _sb3_side(model: Any, steps: int, gen: Any) -> Any:
    _, callback = model._setup_learn(gen.TOTAL, callback=None)
    callback.on_training_start(locals(), globals())
    gen.seed_global_rngs()
    rollout = model.collect_rollouts(
        model.get_env(),
        callback,
        TrainFreq(steps, TrainFrequencyUnit.STEP),
        model.replay_buffer,
        model.action_noise,
        model.learning_starts,
    )
    assert rollout.continue_training
    return copy.deepcopy(model.replay_buffer)


def _our_side(model: Any, case: dict[str, Any], gen: Any) -> Any:
    obs = start_training(model, gen.TOTAL)
    gen.seed_global_rngs()
    env = model.get_env()
    ids = [f"env-{i}" for i in range(env.num_envs)]
    adapter = SB3PolicyAdapter(model)
    layout = case["layout"]
    order = np.random.default_rng(case["seed"])
    for _ in range(case["steps"]):
        responses = adapter.act(obs, ids)
        if case["order"] == "shuffled":  # per-env responses in any order: env_ids sorts them
            responses = [responses[i] for i in order.permutation(len(ids))]
        new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, ids))
        gen.note_episode_ends(case, dones, infos)
        add_replay_step(
            model,
            gen.with_layout(obs, layout),
            responses,
            gen.with_layout(new_obs, layout),
            gen.as_reward_form(rewards, case["reward_form"], env),
            dones,
            infos,
            env_ids=ids,
        )
        obs = new_obs
    return copy.deepcopy(model.replay_buffer)


@settings(PARITY)
@given(data=st.data())
def test_replay_buffers_equal_sb3_collect_rollouts(data: Any, gen: Any) -> None:
    case = data.draw(replay_cases(gen))
    sb3_model, our_model = _model(case, False, gen), _model(case, True, gen)
    expected = _sb3_side(sb3_model, case["steps"], gen)
    got = _our_side(our_model, case, gen)
    fields = (
        FIELDS
        if not case["optimize_memory"]
        else tuple(
            f
            for f in FIELDS
            if f != "next_observations"  # stored in the next row of observations
        )
    )
    gen.assert_fields_equal(expected, got, fields)
    assert (expected.pos, expected.full) == (got.pos, got.full)
    for name in ("num_timesteps", "_episode_num", "_n_calls", "exploration_rate"):
        assert getattr(sb3_model, name, None) == getattr(our_model, name, None), name
    sb3_envs, our_envs = gen.gen_envs(sb3_model.get_env()), gen.gen_envs(our_model.get_env())
    assert all(not e.outside for e in sb3_envs), "SB3 itself passed an action outside the space"
    gen.assert_received_equal(sb3_envs, our_envs)
    spec = case["spec"]
    gen.count(
        "replay",
        algo=case["algo"],
        obs=spec.obs,
        n_envs=case["n_envs"],
        noise=case["noise"],
        warmup=case["learning_starts"] >= case["steps"] * case["n_envs"],
        reward_form=case["reward_form"],
        layout=case["layout"],
        order=case["order"],
        episode_ends="+".join(sorted(case.get("ends", ()))) or "none",
        optimize_memory=case["optimize_memory"],
    )
