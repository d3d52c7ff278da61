"""Adversarial inputs for the PettingZoo adapter (issue 4).

Each test states what a careful user wants. Tests marked ``xfail(strict=True)`` record a defect
found by this review (the reason says which); the others are edge cases that already behave.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.classic import tictactoe_v3

from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning_pettingzoo import (
    InactiveAgentActionWarning,
    SharedPolicyAdapter,
    aec_action,
    from_parallel_actions,
    respond,
    sample_response,
    to_parallel_actions,
)


def _ma(actions: dict[Any, Any], **fields: Any) -> MultiAgentPolicyResponse:
    return MultiAgentPolicyResponse("env-0", action=actions, **fields)


@pytest.fixture
def spread(simple_spread: ModuleType) -> Any:
    env = simple_spread.parallel_env(continuous_actions=False)
    env.reset(seed=0)
    return env


@pytest.fixture
def spread_box(simple_spread: ModuleType) -> Any:
    env = simple_spread.parallel_env(continuous_actions=True)
    env.reset(seed=0)
    return env


def _finished_tictactoe() -> Any:
    env = tictactoe_v3.env()
    env.reset(seed=0)
    for agent in env.agent_iter():
        env.action_space(agent).seed(0)
        env.step(aec_action(sample_response(env, "g"), env))
    assert env.agents == []
    return env


# ------------------------------------------------------------------- parallel: which agents


def test_missing_live_agents_are_named(spread: Any) -> None:
    with pytest.raises(ValueError, match=re.escape("no action for live agent(s) ['agent_2']")):
        to_parallel_actions(_ma({"agent_0": 1, "agent_1": 1}), spread)


def test_action_for_an_agent_that_is_not_live_is_named(spread: Any) -> None:
    actions = {a: 1 for a in spread.agents} | {"ghost": 1}
    with pytest.raises(ValueError, match=re.escape("action(s) for agent(s) ['ghost']")):
        to_parallel_actions(_ma(actions), spread)


def test_drop_inactive_reports_the_dropped_agents(spread: Any) -> None:
    actions = {a: 1 for a in spread.agents} | {"ghost": 1}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", InactiveAgentActionWarning)
        out = to_parallel_actions(_ma(actions), spread, drop_inactive=True)
    assert list(out) == spread.agents
    dropped = [w.message for w in caught if isinstance(w.message, InactiveAgentActionWarning)]
    assert [w.agents for w in dropped] == [("ghost",)]


def test_agent_ids_of_the_wrong_type_are_reported_as_missing_agents(spread: Any) -> None:
    with pytest.raises(ValueError, match=re.escape("got actions for [0, 1, 2]")):
        to_parallel_actions(_ma({0: 1, 1: 1, 2: 1}), spread)


def test_numpy_str_agent_ids_find_their_agents(spread: Any) -> None:
    out = to_parallel_actions(_ma({np.str_(a): 1 for a in spread.agents}), spread)
    assert list(out) == spread.agents and all(type(a) is str for a in out)


def test_a_single_agent_response_is_a_type_error(spread: Any) -> None:
    with pytest.raises(TypeError, match="MultiAgentPolicyResponse, got PolicyResponse"):
        to_parallel_actions(PolicyResponse("env-0", action=1), spread)  # type: ignore[arg-type]


# ----------------------------------------------------------------- parallel: action in space


@pytest.mark.parametrize(
    ("action", "fragment"),
    [
        (7, "7 is outside [0, 4]"),
        (-1, "-1 is outside [0, 4]"),
        (2**70, "outside [0, 4]"),
        (1.0, "it is a float"),
        (np.bool_(True), "it is a bool"),
        (np.array([1]), "ndarray of shape (1,)"),
        ("1", "it is a str"),
        (None, "it is a NoneType"),
    ],
)
def test_discrete_actions_outside_the_space_name_agent_space_and_value(
    spread: Any, action: Any, fragment: str
) -> None:
    actions = {a: 1 for a in spread.agents} | {"agent_1": action}
    with pytest.raises(ValueError, match=re.escape(fragment)) as info:
        to_parallel_actions(_ma(actions), spread)
    assert "agent 'agent_1'" in str(info.value) and "Discrete(5)" in str(info.value)


@pytest.mark.parametrize("action", [np.int64(4), np.uint8(0), 3])
def test_numpy_and_python_ints_are_valid_discrete_actions(spread: Any, action: Any) -> None:
    out = to_parallel_actions(_ma({a: action for a in spread.agents}), spread)
    assert all(v is action for v in out.values())


@pytest.mark.torch
def test_a_tensor_action_is_refused_with_a_hint(spread: Any) -> None:
    torch = pytest.importorskip("torch")
    actions = {a: torch.tensor(1) for a in spread.agents}
    with pytest.raises(ValueError, match=re.escape("convert with response.numpy()")):
        to_parallel_actions(_ma(actions), spread)


@pytest.mark.parametrize(
    ("action", "fragment"),
    [
        (np.full(5, np.nan, np.float32), "element [0] is NaN"),
        (np.full(5, np.inf, np.float32), "is above high"),
        (np.zeros(5, np.float64), "dtype float64 cannot be cast safely"),
        (np.zeros(3, np.float32), "shape (3,) is not the space's shape (5,)"),
        (np.array([object()] * 5), "dtype object"),
    ],
)
def test_box_actions_outside_the_space_are_named(
    spread_box: Any, action: Any, fragment: str
) -> None:
    actions = {a: np.zeros(5, np.float32) for a in spread_box.agents} | {"agent_2": action}
    with pytest.raises(ValueError, match=re.escape(fragment)) as info:
        to_parallel_actions(_ma(actions), spread_box)
    assert "agent 'agent_2'" in str(info.value)


# ------------------------------------------------------------------ from_parallel_actions


def test_per_agent_field_keyed_by_other_agents_names_both(spread: Any) -> None:
    with pytest.raises(ValueError, match=re.escape("missing ['b'], extra ['c']")):
        from_parallel_actions({"a": 0, "b": 1}, "e", log_prob={"a": 0.0, "c": 1.0})


def test_per_agent_field_that_is_not_a_mapping_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="'log_prob' must be a mapping"):
        from_parallel_actions({"a": 0}, "e", log_prob=[0.0])  # type: ignore[arg-type]


def test_a_per_agent_field_named_action_cannot_replace_the_actions() -> None:
    with pytest.raises((TypeError, ValueError), match="action"):
        from_parallel_actions({"a": 1}, "e", action={"a": 99})


def test_per_agent_stamps_are_refused_as_in_from_agents() -> None:
    with pytest.raises(ValueError, match="ts_env_sent_ns"):
        from_parallel_actions({"a": 1, "b": 1}, "e", ts_env_sent_ns={"a": 5, "b": 6})


# ---------------------------------------------------------------------------------- AEC


def test_aec_illegal_move_is_named_before_the_game_punishes_it() -> None:
    env = tictactoe_v3.env()
    env.reset(seed=0)
    env.step(4)
    agent = env.agent_selection
    with pytest.raises(ValueError, match=re.escape(f"action 4 for agent '{agent}' is illegal")):
        aec_action(_ma({agent: 4}), env)


def test_aec_action_ignores_other_agents_entries() -> None:
    env = tictactoe_v3.env()
    env.reset(seed=0)
    agent = env.agent_selection
    assert aec_action(_ma({agent: np.int64(0), "someone_else": 99}), env) == 0


def test_aec_action_outside_the_space_is_named() -> None:
    env = tictactoe_v3.env()
    env.reset(seed=0)
    agent = env.agent_selection
    with pytest.raises(ValueError, match=re.escape("9 is outside [0, 8]")):
        aec_action(_ma({agent: 9}), env)


def test_aec_action_after_the_game_ended_says_so() -> None:
    env = _finished_tictactoe()
    agent = env.agent_selection
    with pytest.raises(ValueError, match=r"(?i)reset|no (live )?agents|ended|over"):
        aec_action(_ma({agent: 0}), env)


def test_sample_response_after_the_game_ended_gives_no_action() -> None:
    env = _finished_tictactoe()
    try:
        response = sample_response(env, "g")
    except ValueError:
        return
    assert response.action == {}


# --------------------------------------------------------------------------------- masks


def _tictactoe_observation() -> tuple[Any, Any, dict[str, Any]]:
    env = tictactoe_v3.env()
    env.reset(seed=0)
    agent = env.agent_selection
    return env, agent, dict(env.observe(agent))


@pytest.mark.parametrize("mask", [np.ones(8, np.int8), np.full(9, 0.5), np.ones((3, 3), np.int8)])
def test_sample_response_refuses_a_malformed_mask_naming_the_agent(mask: Any) -> None:
    env, agent, obs = _tictactoe_observation()
    obs["action_mask"] = mask
    with pytest.raises(ValueError, match=re.escape(f"action mask of agent '{agent}'")):
        sample_response(env, "g", {agent: obs})


def test_an_all_zero_mask_means_the_agent_waits() -> None:
    """No legal action: the action is None (never a made-up move)."""
    env, agent, obs = _tictactoe_observation()
    obs["action_mask"] = np.zeros(9, np.int8)
    assert sample_response(env, "g", {agent: obs}).action == {agent: None}


def test_sampled_actions_respect_a_one_hot_mask() -> None:
    env, agent, obs = _tictactoe_observation()
    for legal in range(9):
        obs["action_mask"] = np.eye(9, dtype=np.int8)[legal]
        assert sample_response(env, "g", {agent: obs}).action[agent] == legal


def test_parallel_env_with_masked_observations_refuses_to_sample_blind() -> None:
    from pettingzoo.utils.conversions import turn_based_aec_to_parallel

    env = turn_based_aec_to_parallel(tictactoe_v3.env())
    env.reset(seed=0)
    with pytest.raises(ValueError, match="carry action masks"):
        sample_response(env, "g")


@pytest.mark.torch
def test_respond_refuses_a_non_binary_mask_for_maskable_ppo(make_sb3: Callable[..., Any]) -> None:
    sb3_contrib = pytest.importorskip("sb3_contrib")
    env, agent, obs = _tictactoe_observation()
    model = make_sb3(
        sb3_contrib.MaskablePPO,
        "MultiInputPolicy",
        env.observation_space(agent),
        env.action_space(agent),
    )
    obs["action_mask"] = np.full(9, 0.5)
    with pytest.raises(ValueError, match=re.escape(f"'{agent}'")):
        respond(env, {agent: obs}, {agent: model}, "g")


@pytest.mark.torch
def test_respond_names_the_agent_of_a_mask_of_the_wrong_length(
    make_sb3: Callable[..., Any],
) -> None:
    sb3_contrib = pytest.importorskip("sb3_contrib")
    env, agent, obs = _tictactoe_observation()
    model = make_sb3(
        sb3_contrib.MaskablePPO,
        "MultiInputPolicy",
        env.observation_space(agent),
        env.action_space(agent),
    )
    obs["action_mask"] = np.ones(5, np.int8)
    with pytest.raises(ValueError, match=re.escape(f"'{agent}'")):
        respond(env, {agent: obs}, {agent: model}, "g")


# ------------------------------------------------------------------- per-agent policies


def test_respond_with_a_policy_missing_names_the_agents(spread: Any) -> None:
    with pytest.raises(ValueError, match=re.escape("no entry for acting agent(s) ['agent_1'")):
        respond(spread, {a: None for a in spread.agents}, {"agent_0": lambda o: 0})


def test_respond_with_a_non_callable_policy_is_a_type_error(spread: Any) -> None:
    obs = {a: None for a in spread.agents}
    with pytest.raises(TypeError, match="policy for agent 'agent_0' must be an SB3 model"):
        respond(spread, obs, {a: 5 for a in spread.agents})


def test_respond_refuses_a_response_for_another_env(spread: Any) -> None:
    obs = {a: None for a in spread.agents}
    policies = {a: (lambda o: PolicyResponse("other", action=1)) for a in spread.agents}
    with pytest.raises(ValueError, match=re.escape("returned env_id='other', expected 'env-0'")):
        respond(spread, obs, policies, "env-0")


# -------------------------------------------------------------------------- shared policy


@pytest.mark.torch
def test_shared_policy_on_heterogeneous_agents_names_both_spaces(
    simple_adversary: ModuleType, make_sb3: Callable[..., Any]
) -> None:
    from stable_baselines3 import PPO

    env = simple_adversary.parallel_env()
    observations, _ = env.reset(seed=0)
    model = make_sb3(
        PPO, "MlpPolicy", env.observation_space("agent_0"), env.action_space("agent_0")
    )
    with pytest.raises(ValueError, match="not homogeneous") as info:
        SharedPolicyAdapter(model).act(env, observations)
    assert "(10,)" in str(info.value) and "(8,)" in str(info.value)


@pytest.mark.torch
def test_shared_policy_with_a_model_of_another_observation_space_names_it(
    spread: Any, make_sb3: Callable[..., Any]
) -> None:
    from stable_baselines3 import PPO

    space = spaces.Box(-1, 1, (10,), np.float32)
    model = make_sb3(PPO, "MlpPolicy", space, spread.action_space("agent_0"))
    observations = {a: np.zeros(18, np.float32) for a in spread.agents}
    with pytest.raises(ValueError, match="'agent_0'"):
        SharedPolicyAdapter(model).act(spread, observations)


@pytest.mark.torch
def test_shared_policy_names_the_agent_with_a_malformed_observation(
    spread: Any, make_sb3: Callable[..., Any]
) -> None:
    from stable_baselines3 import PPO

    space = spread.observation_space("agent_0")
    model = make_sb3(PPO, "MlpPolicy", space, spread.action_space("agent_0"))
    observations = {a: np.zeros(18, np.float32) for a in spread.agents}
    observations["agent_1"] = np.zeros(17, np.float32)
    with pytest.raises(ValueError, match="'agent_1'"):
        SharedPolicyAdapter(model).act(spread, observations)


def test_errors_name_the_right_env_when_several_mpe_envs_exist(
    simple_spread: ModuleType, simple_adversary: ModuleType
) -> None:
    spread = simple_spread.parallel_env()
    spread.reset(seed=0)
    simple_adversary.parallel_env().reset(seed=0)
    with pytest.raises(ValueError, match="simple_spread"):
        to_parallel_actions(_ma({"agent_0": 1}), spread)
