"""PettingZoo parity: generated multi-agent envs, the SB3 adapter and PettingZoo's rules as oracles.

A generated ``ParallelEnv`` (:class:`GenParallelEnv`) has homogeneous agents of one drawn action
space, agents that die or join mid-episode, and action masks in the observations or in the
infos, some of which allow no action (a waiting agent). Each step, ``SharedPolicyAdapter.act``
or ``respond`` answers on one model, and :class:`rlightning_sb3.SB3PolicyAdapter` answers on a
deep copy of it (same weights, same action-space RNG, same noise state), from the same global
RNG states, for the stacked observations of the agents that can act: every field must be equal,
exactly (the same batch goes through the same kernels). PettingZoo's rules are checked on what
the env receives: ``to_parallel_actions`` gives exactly ``env.agents``, every action is in its
agent's space and allowed by its mask, and a waiting agent gets None. The AEC form
(``parallel_to_aec``) is driven with ``respond`` + ``aec_action``: an agent that is done gets
None, and every other action is in its space and allowed by its mask.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from pettingzoo.utils.conversions import parallel_to_aec

from pettingzoo import ParallelEnv
from rlightning import rules
from rlightning.testing import check_multi_agent_policy_response
from rlightning_pettingzoo import (
    SharedPolicyAdapter,
    aec_action,
    find_action_mask,
    respond,
    to_parallel_actions,
)
from rlightning_sb3 import SB3PolicyAdapter

pytestmark = pytest.mark.torch

PARITY = settings.get_profile("rlightning-parity")
OBS_DIM = 3


class GenParallelEnv(ParallelEnv[str, Any, Any]):
    """Homogeneous agents of one action space; deaths, late joins and masks drawn per step.

    Everything comes from the env's own RNG (seeded by ``reset``), so two copies reset with the
    same seed see the same observations, masks, deaths and joins whatever actions they get.
    """

    metadata = {"name": "gen_parallel_v0", "is_parallelizable": True}  # noqa: RUF012
    render_mode = None

    def __init__(
        self,
        action_space: spaces.Space[Any],
        n_agents: int,
        masks: str,
        p_die: float,
        p_join: float,
        p_wait: float,
        max_steps: int = 6,
    ) -> None:
        self.possible_agents = [f"agent_{i}" for i in range(n_agents)]
        self._action_space = action_space
        self._masks = masks  # "none", "observation" or "info"
        self._p = (p_die, p_join, p_wait)
        self._max_steps = max_steps
        box = spaces.Box(-1.0, 1.0, (OBS_DIM,), np.float32)
        if masks == "observation":
            self._obs_space: spaces.Space[Any] = spaces.Dict(
                {
                    "observation": box,
                    "action_mask": spaces.MultiBinary(rules.mask_size(action_space)),
                }
            )
        else:
            self._obs_space = box
        self.received: list[dict[str, Any]] = []

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return self._obs_space

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return self._action_space

    def _mask(self) -> np.ndarray:
        """A flat mask for the current step; all zeros (the agent waits) with p_wait."""
        size = rules.mask_size(self._action_space)
        if self.rng.random() < self._p[2]:
            return np.zeros(size, np.int8)
        mask = (self.rng.random(size) < 0.6).astype(np.int8)
        blocks = (
            [int(n) for n in self._action_space.nvec]
            if isinstance(self._action_space, spaces.MultiDiscrete)
            else [size]
        )
        start = 0
        for n in blocks:  # at least one legal value per dimension
            if not mask[start : start + n].any():
                mask[start + int(self.rng.integers(n))] = 1
            start += n
        return mask

    def _gym_mask(self, flat: np.ndarray) -> Any:
        if isinstance(self._action_space, spaces.MultiDiscrete):
            return tuple(np.split(flat, np.cumsum(self._action_space.nvec)[:-1]))
        return flat

    def _observe(self) -> tuple[dict[str, Any], dict[str, Any]]:
        observations: dict[str, Any] = {}
        infos: dict[str, Any] = {}
        self.current_masks = {}
        for agent in self.agents:
            vec = self.rng.uniform(-1, 1, OBS_DIM).astype(np.float32)
            infos[agent] = {}
            if self._masks == "none":
                observations[agent] = vec
                continue
            flat = self._mask()
            self.current_masks[agent] = flat
            if self._masks == "observation":
                observations[agent] = {"observation": vec, "action_mask": flat}
            else:
                observations[agent] = vec
                infos[agent]["action_mask"] = self._gym_mask(flat)
        return observations, infos

    def reset(
        self, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        self.rng = np.random.default_rng(seed)
        self.steps = 0
        n_first = max(1, len(self.possible_agents) - int(self.rng.integers(0, 2)))
        self.agents = self.possible_agents[:n_first]
        return self._observe()

    def step(self, actions: dict[str, Any]) -> tuple[Any, ...]:
        # Every live agent acts (PettingZoo's parallel API); parallel_to_aec also hands back the
        # last actions of agents that have left, which a parallel env ignores.
        assert set(actions) >= set(self.agents), (actions, self.agents)
        for agent in self.agents:
            action = actions[agent]
            mask = self.current_masks.get(agent)
            if mask is not None and not mask.any():
                assert action is None, (agent, action)  # a waiting agent
                continue
            assert self._action_space.contains(action), (agent, action, self._action_space)
            if mask is not None:
                assert rules.action_allowed(self._action_space, mask, action, layout="flat")
        self.received.append({agent: actions[agent] for agent in self.agents})
        self.steps += 1
        p_die, p_join, _ = self._p
        terminations = {a: bool(self.rng.random() < p_die) for a in self.agents}
        truncations = dict.fromkeys(self.agents, self.steps >= self._max_steps)
        rewards = dict.fromkeys(self.agents, 0.0)
        alive = [a for a in self.agents if not terminations[a] and not truncations[a]]
        waiting = [a for a in self.possible_agents if a not in self.agents]
        if waiting and alive and self.rng.random() < p_join:
            alive.append(waiting[0])  # joins this step (it was never live before)
        self.agents = [a for a in self.possible_agents if a in alive]
        observations, infos = self._observe()
        return observations, rewards, terminations, truncations, infos


class _AgentSpaces(gym.Env[Any, Any]):
    def __init__(self, observation_space: Any, action_space: Any) -> None:
        self.observation_space = observation_space
        self.action_space = action_space


def _model(gen: Any, algo: str, env: GenParallelEnv, seed: int) -> Any:
    from stable_baselines3.common.vec_env import DummyVecEnv

    agent = env.possible_agents[0]
    spaces_env = DummyVecEnv(
        [functools.partial(_AgentSpaces, env.observation_space(agent), env.action_space(agent))]
    )
    obs_kind = "dict" if isinstance(env.observation_space(agent), spaces.Dict) else "box"
    return gen.build_model(algo, spaces_env, obs_kind, seed)


def _stack(observations: list[Any]) -> Any:
    if isinstance(observations[0], dict):
        return {k: np.stack([o[k] for o in observations]) for k in observations[0]}
    return np.stack(observations)


def _oracle(
    adapter: SB3PolicyAdapter,
    env: GenParallelEnv,
    observations: Any,
    infos: Any,
    agents: list[str],
    deterministic: bool,
) -> dict[str, dict[str, Any]]:
    """What the SB3 adapter answers for the agents that can act (stacked, one row each)."""
    space = env.action_space(agents[0]) if agents else None
    acting, rows = [], []
    for agent in agents:
        mask = find_action_mask(agent, observations, infos)
        flat = None
        if mask is not None:
            layout = "gymnasium" if isinstance(mask, tuple) else "flat"
            checked = rules.check_action_mask(space, mask, layout=layout, allow_empty=True)
            if checked is None:
                continue  # waits: no policy is asked
            flat = np.concatenate(checked) if isinstance(checked, tuple) else checked
        acting.append(agent)
        rows.append(flat)
    if not acting:
        return {}
    masks = None
    if adapter.is_maskable and any(r is not None for r in rows):
        masks = np.stack([np.ones(rules.mask_size(space), bool) if r is None else r for r in rows])
    batch = adapter.act(
        _stack([observations[a] for a in acting]),
        [repr(a) for a in acting],
        action_masks=masks,
        explore=not deterministic,
    )
    out: dict[str, dict[str, Any]] = {}
    for i, agent in enumerate(acting):
        fields = batch[i].to_dict()
        fields.pop("episode_start", None)
        out[agent] = {
            k: (v.cpu().numpy() if isinstance(v, th.Tensor) else v) for k, v in fields.items()
        }
    return out


def _same_rng_states() -> tuple[Any, Any]:
    return th.get_rng_state(), np.random.get_state()


def _equal_states(a: tuple[Any, Any], b: tuple[Any, Any]) -> bool:
    return bool(th.equal(a[0], b[0])) and np.array_equal(a[1][1], b[1][1]) and a[1][2:] == b[1][2:]


def _restore(states: tuple[Any, Any]) -> None:
    th.set_rng_state(states[0])
    np.random.set_state(states[1])


@st.composite
def _cases(draw: st.DrawFn, gen: Any) -> dict[str, Any]:
    algo = draw(
        st.sampled_from(("ppo", "a2c", "maskable_ppo", "maskable_ppo", "dqn", "sac", "td3"))
    )
    kinds = {
        "maskable_ppo": ("discrete", "multidiscrete"),
        "dqn": ("discrete",),
        "sac": ("box",),
        "td3": ("box",),
    }.get(algo, ("discrete", "multidiscrete", "box"))
    action = draw(gen.action_specs(kinds, starts=False))
    # PettingZoo's masks are gymnasium's layout: a MultiDiscrete mask is a tuple, which only an
    # info dict can hold; a Discrete mask may live in a Dict observation too.
    # Only MaskablePPO reads masks (other models act as SB3 would, ignoring them).
    masks = {
        "discrete": st.sampled_from(("observation", "info")),
        "multidiscrete": st.just("info"),
    }.get(action[0], st.just("none"))
    masks = draw(masks) if algo == "maskable_ppo" else "none"
    noise = algo == "td3" and draw(st.booleans())
    return {
        "algo": algo,
        "action": action,
        "n_agents": draw(st.integers(1, 5)),
        "masks": masks,
        "p_die": draw(st.sampled_from((0.0, 0.2))),
        # agents that join after the first step cannot have noise processes (refused, documented)
        "p_join": 0.0 if noise else draw(st.sampled_from((0.0, 0.5))),
        "p_wait": draw(st.sampled_from((0.0, 0.3))) if masks != "none" else 0.0,
        "deterministic": draw(st.booleans()),
        "noise": noise,
        "via": draw(st.sampled_from(("shared", "respond"))),
        "seed": draw(st.integers(0, 2**16)),
    }


@settings(PARITY)
@given(data=st.data())
def test_pettingzoo_policies_answer_what_the_sb3_adapter_answers(data: Any, gen: Any) -> None:
    case = data.draw(_cases(gen))
    env = GenParallelEnv(
        gen.make_action_space(case["action"]),
        case["n_agents"],
        case["masks"],
        case["p_die"],
        case["p_join"],
        case["p_wait"],
    )
    model = _model(gen, case["algo"], env, case["seed"] % 97)
    if case["noise"]:
        from stable_baselines3.common.noise import NormalActionNoise

        dim = env.action_space("agent_0").shape[0]
        model.action_noise = NormalActionNoise(np.zeros(dim), 0.3 * np.ones(dim))
    twin = copy.deepcopy(model)  # same weights, action-space RNG and noise state
    oracle = SB3PolicyAdapter(twin)
    shared = SharedPolicyAdapter(model)
    spaces_ = {a: env.action_space(a) for a in env.possible_agents}
    observations, infos = env.reset(seed=case["seed"])
    np.random.seed(case["seed"])
    th.manual_seed(case["seed"])
    while env.agents:
        states = _same_rng_states()
        if case["via"] == "shared" and case["noise"] and not case["deterministic"]:
            # refused: its rows are keyed by agent only, so one noise process would serve the
            # same agent of every env and none is reset at an episode end (SB3 keeps one per
            # (env, agent) slot)
            with pytest.raises(ValueError, match=r"cannot draw .* action noise"):
                shared.act(env, observations, "e", infos=infos, deterministic=False)
            break
        if case["via"] == "shared":
            response = shared.act(
                env, observations, "e", infos=infos, deterministic=case["deterministic"]
            )
        else:
            policies = dict.fromkeys(env.agents, model)
            response = respond(
                env, observations, policies, "e", infos=infos, deterministic=case["deterministic"]
            )
        after = _same_rng_states()
        _restore(states)
        agents = shared.agent_order(env) if case["via"] == "shared" else list(env.agents)
        expected = _oracle(oracle, env, observations, infos, agents, case["deterministic"])
        assert _equal_states(after, _same_rng_states()), "the two sides drew other numbers"
        check_multi_agent_policy_response(response, spaces_, live_agents=env.agents)
        for agent in env.agents:
            view = response.for_agent(agent).to_dict()
            if agent not in expected:  # waits
                assert view["action"] is None
                assert all(view.get(k) is None for k in ("buffer_action", "value", "log_prob"))
                continue
            for name, want in expected[agent].items():
                if name == "action_mask":  # the mask as found (PettingZoo's), not an output
                    continue
                got = view[name]
                assert np.asarray(got).dtype == np.asarray(want).dtype, (name, got, want)
                np.testing.assert_array_equal(got, want, err_msg=f"{agent}.{name}", strict=True)
        actions = to_parallel_actions(response, env)
        assert list(actions) == list(env.agents)
        observations, _, _, _, infos = env.step(actions)
    gen.count("pettingzoo", algo=case["algo"], action=case["action"][0], masks=case["masks"],
              via=case["via"])  # fmt: skip


@settings(PARITY)
@given(data=st.data())
def test_aec_form_follows_pettingzoo_rules(data: Any, gen: Any) -> None:
    case = data.draw(_cases(gen))
    parallel = GenParallelEnv(
        gen.make_action_space(case["action"]),
        case["n_agents"],
        case["masks"],
        case["p_die"],
        0.0,  # parallel_to_aec: the agents are env.possible_agents' live ones at reset
        case["p_wait"],
    )
    model = _model(gen, case["algo"], parallel, case["seed"] % 97)
    env = parallel_to_aec(parallel)
    env.reset(seed=case["seed"])
    steps = 0
    for agent in env.agent_iter(max_iter=60):
        observation, _, termination, truncation, info = env.last()
        flat = parallel.current_masks.get(agent)
        waits = flat is not None and not flat.any()
        if termination or truncation:
            assert aec_action(None, env) is None  # PettingZoo: a done agent steps with None
            env.step(None)
            continue
        response = respond(
            env, {agent: observation}, {agent: model}, "e", infos={agent: info},
            deterministic=case["deterministic"],
        )  # fmt: skip
        if waits:
            assert response.action == {agent: None}
            env.step(None)  # the parallel env, through parallel_to_aec, reads it as waiting
            continue
        action = aec_action(response, env)
        assert env.action_space(agent).contains(action)
        env.step(action)
        steps += 1
    gen.count("pettingzoo-aec", algo=case["algo"], masks=case["masks"])
