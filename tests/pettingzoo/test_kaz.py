"""Agents that leave: knights_archers_zombies episodes where agents die mid-episode."""

from __future__ import annotations

import re
import warnings
from types import ModuleType
from typing import Any

import pytest

from rlightning.testing import check_multi_agent_policy_response
from rlightning_pettingzoo import (
    InactiveAgentActionWarning,
    SharedPolicyAdapter,
    from_parallel_actions,
    sample_response,
    to_parallel_actions,
)

MAX_CYCLES = 300


def _seed_spaces(env: Any, seed: int) -> None:
    for i, agent in enumerate(env.possible_agents):
        env.action_space(agent).seed(seed + i)


def _random_episode(kaz: ModuleType, seed: int, stale: bool = False) -> dict[str, Any]:
    """One episode of random actions on a fresh env (a reused KAZ env carries state across
    resets, so only a fresh one replays a seed exactly). With ``stale``, the response also answers
    for dead agents (constant 0, so the random stream and the trajectory stay the same) and the
    drops are recorded."""
    env = kaz.parallel_env(max_cycles=MAX_CYCLES)
    observations, infos = env.reset(seed=seed)
    _seed_spaces(env, seed)
    spaces = {a: env.action_space(a) for a in env.possible_agents}
    deaths: list[tuple[int, list[str]]] = []
    drops: list[tuple[str, ...]] = []
    step = 0
    while env.agents:
        live = list(env.agents)
        response = sample_response(env, "kaz", observations, infos)
        assert list(response.action) == live  # never an action for a dead agent
        check_multi_agent_policy_response(response, spaces, live_agents=live)
        if stale:
            dead = [a for a in env.possible_agents if a not in live]
            response = from_parallel_actions({**response.action, **dict.fromkeys(dead, 0)}, "kaz")
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                actions = to_parallel_actions(response, env, drop_inactive=True)
            reported = [
                w.message for w in caught if isinstance(w.message, InactiveAgentActionWarning)
            ]
            assert len(reported) == (1 if dead else 0)
            if dead:
                assert list(reported[0].agents) == dead
                drops.append(reported[0].agents)
        else:
            actions = to_parallel_actions(response, env)
        assert list(actions) == live
        observations, _, terminations, truncations, infos = env.step(actions)
        step += 1
        gone = [a for a in live if a not in env.agents]
        assert all(terminations[a] or truncations[a] for a in gone)
        if gone and env.agents:
            deaths.append((step, gone))
    return {"steps": step, "deaths": deaths, "drops": drops}


@pytest.fixture(scope="module")
def death_seed(kaz: ModuleType) -> int:
    """The first seed whose random episode has an agent die while others live on."""
    for seed in range(20):
        if _random_episode(kaz, seed)["deaths"]:
            return seed
    pytest.fail("no knights_archers_zombies episode in 20 seeds had an agent die mid-episode")


def test_agents_die_and_get_no_action(kaz: ModuleType, death_seed: int) -> None:
    result = _random_episode(kaz, death_seed)
    assert result["deaths"]
    first_death_step, dead = result["deaths"][0]
    assert 1 < first_death_step < result["steps"]
    assert set(dead) < set(kaz.parallel_env().possible_agents)


def test_stale_answers_are_dropped_and_reported(kaz: ModuleType, death_seed: int) -> None:
    """A policy answering for all possible agents: each dead agent's action is dropped with a
    warning naming it, every step after its death, and the episode is the same."""
    plain = _random_episode(kaz, death_seed)
    stale = _random_episode(kaz, death_seed, stale=True)
    assert stale["deaths"] == plain["deaths"]
    assert stale["steps"] == plain["steps"]
    first_death_step, dead = plain["deaths"][0]
    assert stale["drops"][0] == tuple(dead)
    assert len(stale["drops"]) == plain["steps"] - first_death_step


def test_stale_answer_without_drop_is_an_error(kaz: ModuleType, death_seed: int) -> None:
    env = kaz.parallel_env(max_cycles=MAX_CYCLES)
    observations, infos = env.reset(seed=death_seed)
    _seed_spaces(env, death_seed)
    while len(env.agents) == len(env.possible_agents):
        response = sample_response(env, "kaz", observations, infos)
        observations, _, _, _, infos = env.step(to_parallel_actions(response, env))
    assert env.agents
    dead = [a for a in env.possible_agents if a not in env.agents]
    stale = from_parallel_actions(dict.fromkeys(env.possible_agents, 0), "kaz")
    with pytest.raises(
        ValueError,
        match=re.escape(f"response.action has action(s) for agent(s) {dead} that are not live"),
    ):
        to_parallel_actions(stale, env)


@pytest.mark.torch
def test_shared_policy_through_deaths(kaz: ModuleType, make_sb3: Any) -> None:
    """A shared PPO acts for the live agents only, in a stable order, through whole episodes in
    which agents die."""
    import torch
    from stable_baselines3 import PPO

    torch.manual_seed(0)
    probe = kaz.parallel_env()
    agent = probe.possible_agents[0]
    model = make_sb3(PPO, "MlpPolicy", probe.observation_space(agent), probe.action_space(agent))
    adapter = SharedPolicyAdapter(model)
    spaces = {a: probe.action_space(a) for a in probe.possible_agents}
    deaths = 0
    for seed in range(6):
        env = kaz.parallel_env(max_cycles=MAX_CYCLES)
        observations, infos = env.reset(seed=seed)
        while env.agents:
            live = list(env.agents)
            response = adapter.act(env, observations, "kaz", infos=infos)
            assert list(response.action) == [a for a in env.possible_agents if a in live]
            check_multi_agent_policy_response(response, spaces, live_agents=live)
            observations, _, _, _, infos = env.step(to_parallel_actions(response, env))
            deaths += bool(env.agents) and len(env.agents) < len(live)
        if deaths:
            break
    assert deaths >= 1, "no agent died mid-episode under the shared policy in 6 episodes"
