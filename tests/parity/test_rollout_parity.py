"""Rollout buffers: the adapter loop against SB3's own ``collect_rollouts``, on generated envs.

For PPO, A2C, sb3-contrib's RecurrentPPO and MaskablePPO, over generated action spaces (the
ones SB3 handles: Discrete, MultiDiscrete and MultiBinary with ``start`` 0, float Box), flat,
Dict, image and Discrete observations, 1-8 envs, integer and float rewards passed on as lists,
int32/int64/float32/float64 arrays, terminations and time-limit truncations: SB3's
``collect_rollouts`` fills one model's buffer; ``start_training`` + ``act`` +
``add_rollout_step`` + ``finish_rollout`` fill an identical model's, with the observations
handed to the buffer helpers in every memory layout. Every buffer array must be equal exactly,
and the two sides' envs must have received exactly the same actions, each inside the space.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3 import A2C, PPO

from rlightning_sb3 import SB3PolicyAdapter, add_rollout_step, finish_rollout, start_training

pytestmark = pytest.mark.torch

PARITY = settings.get_profile("rlightning-parity")
FIELDS = (
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
ALGOS = ("ppo", "a2c", "recurrent_ppo", "maskable_ppo")


def _model(algo: str, venv: Any, obs: str, n_steps: int, seed: int, gen: Any) -> Any:
    contrib = pytest.importorskip("sb3_contrib")
    recurrent = algo == "recurrent_ppo"
    kwargs: dict[str, Any] = {
        "n_steps": n_steps,
        "seed": seed,
        "device": "cpu",
        "policy_kwargs": gen.policy_kwargs(obs, recurrent),
    }
    if algo != "a2c":
        kwargs.update(batch_size=n_steps * venv.num_envs, n_epochs=1)
    cls = {
        "ppo": PPO,
        "a2c": A2C,
        "recurrent_ppo": contrib.RecurrentPPO,
        "maskable_ppo": contrib.MaskablePPO,
    }[algo]
    return cls(gen.policy_name(obs, recurrent), venv, **kwargs)


@st.composite
def rollout_cases(draw: st.DrawFn, gen: Any) -> dict[str, Any]:
    algo = draw(st.sampled_from(ALGOS))
    kinds = ("discrete", "multidiscrete", "multibinary")
    if algo != "maskable_ppo":
        kinds = (*kinds, "box")
    action = draw(gen.action_specs(kinds, starts=False, box_dtypes=("float32", "float64")))
    obs = draw(st.sampled_from(("box", "dict", "image", "discrete")))
    reward = draw(st.sampled_from(("int", "float", "float-any")))
    spec = gen.EnvSpec(
        obs=obs,
        action=action,
        reward=reward,
        terminate_p=draw(st.sampled_from((0.0, 0.1, 0.3))),
        max_steps=draw(st.integers(1, 6)),
        masks=algo == "maskable_ppo",
    )
    return {
        "algo": algo,
        "spec": spec,
        "n_envs": draw(st.integers(1, 8 if obs != "image" else 3)),
        "n_steps": draw(st.integers(2, 5)),
        "seed": draw(st.integers(0, 2**16)),
        "reward_form": draw(st.sampled_from(gen.reward_forms(reward))),
        "layout": draw(st.sampled_from(gen.LAYOUTS)),
        "rollouts": draw(st.integers(1, 2)),
        "order": draw(st.sampled_from(("batch", "shuffled"))),
    }


def _sb3_side(model: Any, rollouts: int, gen: Any) -> list[Any]:
    _, callback = model._setup_learn(gen.TOTAL, callback=None)
    callback.on_training_start(locals(), globals())
    gen.seed_global_rngs()
    snapshots = []
    for _ in range(rollouts):
        assert model.collect_rollouts(
            model.get_env(), callback, model.rollout_buffer, model.n_steps
        )
        snapshots.append(copy.deepcopy(model.rollout_buffer))
    return snapshots


def _our_side(model: Any, case: dict[str, Any], gen: Any) -> list[Any]:
    obs = start_training(model, gen.TOTAL)
    gen.seed_global_rngs()
    env = model.get_env()
    ids = [f"env-{i}" for i in range(env.num_envs)]
    adapter = SB3PolicyAdapter(model)
    starts = np.ones(env.num_envs, dtype=bool)
    masks = case["algo"] == "maskable_ppo"
    layout = case["layout"]
    order = np.random.default_rng(case["seed"])

    def value_layout(value: Any) -> Any:
        # What V() is computed from: a CNN's float32 result depends on the memory layout in the
        # last bits (SB3 computes it from VecTransposeImage's transposed view), so image
        # observations keep the VecEnv's own arrays there; every other network must give the
        # same bits for every layout.
        return value if case["spec"].obs == "image" else gen.with_layout(value, layout)

    snapshots = []
    for _ in range(case["rollouts"]):
        for _ in range(model.n_steps):
            kwargs: dict[str, Any] = {"episode_start": starts}
            if masks:
                kwargs["action_masks"] = np.stack(env.env_method("action_masks"))
            responses = adapter.act(obs, ids, **kwargs)
            if case["order"] == "shuffled":  # per-env responses in any order: env_ids sorts them
                responses = [responses[i] for i in order.permutation(len(ids))]
            new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, ids))
            gen.note_episode_ends(case, dones, infos)
            rewards_in = gen.as_reward_form(rewards, case["reward_form"], env)
            infos_in = [
                {**info, "terminal_observation": value_layout(info["terminal_observation"])}
                if "terminal_observation" in info
                else info
                for info in infos
            ]
            add_rollout_step(
                model,
                gen.with_layout(obs, layout),
                responses,
                rewards_in,
                dones,
                infos_in,
                env_ids=ids,
            )
            obs, starts = new_obs, dones
        finish_rollout(model, value_layout(obs), dones, responses=responses, env_ids=ids)
        snapshots.append(copy.deepcopy(model.rollout_buffer))
    return snapshots


@settings(PARITY)
@given(data=st.data())
def test_rollout_buffers_equal_sb3_collect_rollouts(data: Any, gen: Any) -> None:
    case = data.draw(rollout_cases(gen))
    spec, n_envs, seed = case["spec"], case["n_envs"], case["seed"]
    sb3_model = _model(
        case["algo"], gen.make_venv(spec, n_envs, seed, False), spec.obs, case["n_steps"], seed, gen
    )
    our_model = _model(
        case["algo"], gen.make_venv(spec, n_envs, seed, True), spec.obs, case["n_steps"], seed, gen
    )
    expected = _sb3_side(sb3_model, case["rollouts"], gen)
    got = _our_side(our_model, case, gen)
    fields = FIELDS
    if case["algo"] == "recurrent_ppo":
        fields = (*fields, *RECURRENT_FIELDS)
    if case["algo"] == "maskable_ppo":
        fields = (*fields, "action_masks")
    for a, b in zip(expected, got, strict=True):
        gen.assert_fields_equal(a, b, fields)
        assert (a.pos, a.full) == (b.pos, b.full)
    sb3_envs, our_envs = gen.gen_envs(sb3_model.get_env()), gen.gen_envs(our_model.get_env())
    assert all(not e.outside for e in sb3_envs), "SB3 itself passed an action outside the space"
    gen.assert_received_equal(sb3_envs, our_envs)
    assert sb3_model.num_timesteps == our_model.num_timesteps
    episodes = [[(e["r"], e["l"]) for e in m.ep_info_buffer] for m in (sb3_model, our_model)]
    assert episodes[0] == episodes[1]  # Monitor's "t" is wall time: not compared
    gen.count(
        "rollout",
        algo=case["algo"],
        action=spec.action[0],
        obs=spec.obs,
        n_envs=n_envs,
        reward_form=case["reward_form"],
        layout=case["layout"],
        order=case["order"],
        episode_ends="+".join(sorted(case.get("ends", ()))) or "none",
    )
