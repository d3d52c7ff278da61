"""SB3's VecEnv wrappers: the adapter loop against SB3's own ``collect_rollouts``.

Generated envs (``conftest.py``) under ``VecNormalize`` (observations and/or rewards, clipped
or not; over ``VecFrameStack`` too), ``VecFrameStack``, ``VecMonitor`` (instead of
``Monitor``) and ``VecTransposeImage`` (explicit, over ``VecFrameStack``), for the on-policy
algorithms (PPO, A2C, RecurrentPPO, MaskablePPO: the buffer holds what the wrapper returned,
normalized, and a truncated episode is bootstrapped from the normalized terminal observation)
and the off-policy ones (SAC, TD3, DDPG, DQN: ``OffPolicyAlgorithm._store_transition`` stores
the originals, read from ``model.get_vec_normalize_env()``). SB3's ``collect_rollouts`` fills
one model's buffer; ``start_training``, ``act`` and the buffer helpers, given what the wrapped
VecEnv returned (observations handed to the helpers in every memory layout), fill an identical
model's. Every buffer array, the actions each env received, the counters, the finished
episodes and the training state the model is left with (``_last_obs``,
``_last_episode_starts``, ``_last_original_obs``) must be equal exactly.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3
from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit

from rlightning_sb3 import (
    SB3PolicyAdapter,
    add_replay_step,
    add_rollout_step,
    finish_rollout,
    start_training,
)

pytestmark = pytest.mark.torch

PARITY = settings.get_profile("rlightning-parity")
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
REPLAY_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
ON_POLICY = ("ppo", "a2c", "recurrent_ppo", "maskable_ppo")
OFF_POLICY = ("sac", "td3", "ddpg", "dqn")


@st.composite
def wrapper_cases(draw: st.DrawFn, gen: Any, algo: str) -> dict[str, Any]:
    if algo in ("sac", "td3", "ddpg"):
        kinds: tuple[str, ...] = ("box",)
    elif algo == "dqn":
        kinds = ("discrete",)
    else:
        kinds = ("discrete", "multidiscrete", "multibinary")
        if algo != "maskable_ppo":
            kinds = (*kinds, "box")
    action = draw(gen.action_specs(kinds, starts=False))
    wrapper = draw(st.sampled_from(sorted(gen.WRAPPER_OBSERVATIONS)))
    observations = gen.WRAPPER_OBSERVATIONS[wrapper]
    if wrapper == "normalize" and algo in OFF_POLICY:
        # SB3's _store_transition cannot unnormalize a Discrete terminal observation (it
        # indexes next_obs[i, :] of a 1-d batch: IndexError); the helpers refuse it too
        observations = tuple(o for o in observations if o != "discrete")
    obs = draw(st.sampled_from(observations))
    reward = draw(st.sampled_from(("int", "float", "float-any")))
    spec = gen.EnvSpec(
        obs=obs,
        action=action,
        reward=reward,
        terminate_p=draw(st.sampled_from((0.0, 0.2))),
        max_steps=draw(st.integers(1, 5)),
        masks=algo == "maskable_ppo",
    )
    return {
        "algo": algo,
        "spec": spec,
        "wrapper": draw(gen.wrapper_specs(wrapper, obs)),
        "n_envs": draw(st.integers(1, 4 if obs != "image" else 2)),
        "steps": draw(st.integers(2, 4)),
        "rollouts": draw(st.integers(1, 2)),
        "seed": draw(st.integers(0, 2**16)),
        "layout": draw(st.sampled_from(gen.LAYOUTS)),
        "learning_starts": draw(st.integers(0, 9)),  # off-policy: warm-up before, within, after
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
        steps = case["steps"] * case["rollouts"]
        kwargs.update(
            learning_starts=case["learning_starts"], buffer_size=steps * case["n_envs"] + 2
        )
    else:
        kwargs["n_steps"] = case["steps"]
        if algo != "a2c":
            kwargs["batch_size"] = case["steps"] * case["n_envs"]
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
    if algo == "dqn":
        model.exploration_rate = 0.5
    return model


def _sb3_side(model: Any, case: dict[str, Any], gen: Any) -> list[Any]:
    _, callback = model._setup_learn(gen.TOTAL, callback=None)
    callback.on_training_start(locals(), globals())
    gen.seed_global_rngs()
    snapshots = []
    env = model.get_env()
    for _ in range(case["rollouts"]):
        if case["algo"] in OFF_POLICY:
            rollout = model.collect_rollouts(
                env,
                callback,
                TrainFreq(case["steps"], TrainFrequencyUnit.STEP),
                model.replay_buffer,
                model.action_noise,
                model.learning_starts,
            )
            assert rollout.continue_training
            snapshots.append(copy.deepcopy(model.replay_buffer))
        else:
            assert model.collect_rollouts(env, callback, model.rollout_buffer, model.n_steps)
            snapshots.append(copy.deepcopy(model.rollout_buffer))
    return snapshots


def _our_side(model: Any, case: dict[str, Any], gen: Any) -> list[Any]:
    obs = start_training(model, gen.TOTAL)
    gen.seed_global_rngs()
    env = model.get_env()
    ids = [f"env-{i}" for i in range(env.num_envs)]
    adapter = SB3PolicyAdapter(model)
    starts = adapter.load_training_state(ids)
    layout = case["layout"]
    masks = case["algo"] == "maskable_ppo"
    snapshots = []
    for _ in range(case["rollouts"]):
        for _ in range(case["steps"]):
            kwargs: dict[str, Any] = {}
            if masks:
                kwargs["action_masks"] = np.stack(env.env_method("action_masks"))
            if case["algo"] in ON_POLICY:
                kwargs["episode_start"] = starts
            responses = adapter.act(obs, ids, **kwargs)
            new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, ids))
            gen.note_episode_ends(case, dones, infos)
            if case["algo"] in OFF_POLICY:
                add_replay_step(
                    model,
                    gen.with_layout(obs, layout),
                    responses,
                    gen.with_layout(new_obs, layout),
                    rewards,
                    dones,
                    infos,
                    env_ids=ids,
                )
            else:
                add_rollout_step(
                    model,
                    gen.with_layout(obs, layout),
                    responses,
                    rewards,
                    dones,
                    infos,
                    env_ids=ids,
                    new_observation=new_obs,
                )
            obs, starts = new_obs, dones
        if case["algo"] in OFF_POLICY:
            snapshots.append(copy.deepcopy(model.replay_buffer))
        else:
            finish_rollout(model, obs, dones, responses=responses, env_ids=ids)
            snapshots.append(copy.deepcopy(model.rollout_buffer))
    return snapshots


@pytest.mark.parametrize("algo", ON_POLICY + OFF_POLICY)
@settings(PARITY, max_examples=max(1, PARITY.max_examples // 8))  # the profile's, over 8 algos
@given(data=st.data())
def test_wrapped_buffers_equal_sb3_collect_rollouts(data: Any, gen: Any, algo: str) -> None:
    case = data.draw(wrapper_cases(gen, algo))
    sb3_model, our_model = _model(case, False, gen), _model(case, True, gen)
    expected = _sb3_side(sb3_model, case, gen)
    got = _our_side(our_model, case, gen)
    algo = case["algo"]
    fields = REPLAY_FIELDS if algo in OFF_POLICY else ROLLOUT_FIELDS
    if algo == "recurrent_ppo":
        fields = (*fields, "hidden_states_pi", "cell_states_pi", "hidden_states_vf")
    if algo == "maskable_ppo":
        fields = (*fields, "action_masks")
    for a, b in zip(expected, got, strict=True):
        gen.assert_fields_equal(a, b, fields)
        assert (a.pos, a.full) == (b.pos, b.full)
    sb3_envs, our_envs = gen.gen_envs(sb3_model.get_env()), gen.gen_envs(our_model.get_env())
    gen.assert_received_equal(sb3_envs, our_envs)
    for name in ("num_timesteps", "_episode_num"):
        assert getattr(sb3_model, name) == getattr(our_model, name), name
    episodes = [[(e["r"], e["l"]) for e in m.ep_info_buffer] for m in (sb3_model, our_model)]
    assert episodes[0] == episodes[1]  # VecMonitor's and Monitor's "t" are wall time
    # where a learn() would continue from (None equals only None)
    gen.assert_fields_equal(
        sb3_model, our_model, ("_last_obs", "_last_episode_starts", "_last_original_obs")
    )
    gen.count(
        "wrapper",
        algo=algo,
        wrapper=case["wrapper"][0],
        obs=case["spec"].obs,
        n_envs=case["n_envs"],
        layout=case["layout"],
        episode_ends="+".join(sorted(case.get("ends", ()))) or "none",
    )
