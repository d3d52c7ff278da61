"""Parallel API: to_parallel_actions / from_parallel_actions on real PettingZoo envs."""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pettingzoo.butterfly import pistonball_v6
from pettingzoo.classic import tictactoe_v3

from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning.testing import check_multi_agent_policy_response
from rlightning_pettingzoo import (
    InactiveAgentActionWarning,
    from_parallel_actions,
    sample_response,
    to_parallel_actions,
)


def _spaces(env: Any) -> dict[str, Any]:
    return {agent: env.action_space(agent) for agent in env.possible_agents}


def _run_episode(env: Any, seed: int) -> tuple[int, dict[str, float]]:
    """A whole episode of random actions through responses; every response is checked."""
    observations, infos = env.reset(seed=seed)
    for i, agent in enumerate(env.possible_agents):
        env.action_space(agent).seed(seed + i)
    returns = dict.fromkeys(env.possible_agents, 0.0)
    steps = 0
    while env.agents:
        response = sample_response(env, "env-0", observations, infos)
        check_multi_agent_policy_response(response, _spaces(env), live_agents=env.agents)
        actions = to_parallel_actions(response, env)
        assert list(actions) == env.agents
        assert all(actions[a] is response.action[a] for a in actions)
        observations, rewards, _, _, infos = env.step(actions)
        for agent, reward in rewards.items():
            returns[agent] += float(reward)
        steps += 1
    return steps, returns


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_simple_spread_episodes(simple_spread: ModuleType, continuous: bool) -> None:
    env = simple_spread.parallel_env(max_cycles=25, continuous_actions=continuous)
    for seed in range(3):
        steps, returns = _run_episode(env, seed)
        assert steps == 25
        assert set(returns) == {"agent_0", "agent_1", "agent_2"}
        assert all(r < 0 for r in returns.values())  # simple_spread rewards are distances


def test_pistonball_episode() -> None:
    env = pistonball_v6.parallel_env(n_pistons=20, max_cycles=20)
    steps, returns = _run_episode(env, seed=0)
    assert 1 <= steps <= 20
    assert len(returns) == 20


def test_pistonball_out_of_bounds_names_agent_space_value() -> None:
    env = pistonball_v6.parallel_env(n_pistons=20, max_cycles=5)
    env.reset(seed=0)
    actions = {a: np.zeros(1, np.float32) for a in env.agents}
    actions["piston_3"] = np.array([1.7], np.float32)
    response = MultiAgentPolicyResponse("env-7", action=actions)
    msg = (
        "pistonball_v6 (response env_id='env-7'): action for agent 'piston_3' is not in "
        "Box(-1.0, 1.0, (1,), float32): element [0] = 1.7 is above high = 1.0; got "
        "array([1.7], dtype=float32) [rule action-in-space]"
    )
    with pytest.raises(ValueError, match=re.escape(msg)):
        to_parallel_actions(response, env)


def test_float64_action_for_float32_box_is_refused(simple_spread: ModuleType) -> None:
    env = simple_spread.parallel_env(continuous_actions=True)
    env.reset(seed=0)
    actions = {a: np.full(5, 0.5, np.float32) for a in env.agents}
    actions["agent_1"] = np.full(5, 0.5)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "action for agent 'agent_1' is not in Box(0.0, 1.0, (5,), float32): dtype float64 "
            "cannot be cast safely to the space's float32 (cast it with .astype(np.float32))"
        ),
    ):
        to_parallel_actions(MultiAgentPolicyResponse(None, action=actions), env)


def test_discrete_out_of_range(simple_spread: ModuleType) -> None:
    env = simple_spread.parallel_env()
    env.reset(seed=0)
    response = MultiAgentPolicyResponse(None, action={"agent_0": 0, "agent_1": 5, "agent_2": 1})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "simple_spread_v3 (response env_id=None): action for agent 'agent_1' is not in "
            "Discrete(5): 5 is outside [0, 4]; got 5 [rule action-in-space]"
        ),
    ):
        to_parallel_actions(response, env)


def test_missing_live_agents_are_named(simple_spread: ModuleType) -> None:
    env = simple_spread.parallel_env()
    env.reset(seed=0)
    response = MultiAgentPolicyResponse("env-0", action={"agent_1": 0})
    msg = (
        "simple_spread_v3 (response env_id='env-0'): response.action lacks live agent(s) "
        "['agent_0', 'agent_2']; got {'agent_1': 0}; expected an action for every agent of "
        "env.agents ['agent_0', 'agent_1', 'agent_2'] (a parallel step() takes one for each; None "
        "for an agent that waits) [rule live-agents]"
    )
    with pytest.raises(ValueError, match=re.escape(msg)):
        to_parallel_actions(response, env)


def test_action_for_unknown_agent_is_an_error(simple_spread: ModuleType) -> None:
    env = simple_spread.parallel_env()
    env.reset(seed=0)
    actions = {"agent_0": 0, "agent_1": 1, "ghost": 2, "agent_2": 3}
    response = MultiAgentPolicyResponse("env-0", action=actions)
    msg = (
        "simple_spread_v3 (response env_id='env-0'): response.action has action(s) for agent(s) "
        "['ghost'] that are not live (live: ['agent_0', 'agent_1', 'agent_2']); got {'agent_0': "
        "0, 'agent_1': 1, 'ghost': 2, 'agent_2': 3}; fix: drop them (a terminated, truncated or "
        "unknown agent takes no action), or pass drop_inactive=True [rule no-inactive-action]"
    )
    with pytest.raises(ValueError, match=re.escape(msg)):
        to_parallel_actions(response, env)


def test_drop_inactive_reports_with_a_warning(simple_spread: ModuleType) -> None:
    env = simple_spread.parallel_env()
    env.reset(seed=0)
    actions = {"ghost": 2, "agent_0": 0, "agent_1": 1, "agent_2": 3}
    response = MultiAgentPolicyResponse("env-0", action=actions)
    with pytest.warns(InactiveAgentActionWarning) as record:
        out = to_parallel_actions(response, env, drop_inactive=True)
    assert out == {"agent_0": 0, "agent_1": 1, "agent_2": 3}
    assert list(out) == env.agents
    (warning,) = record.list
    assert isinstance(warning.message, InactiveAgentActionWarning)
    assert warning.message.agents == ("ghost",)
    assert warning.message.env_id == "env-0"
    assert str(warning.message) == (
        "simple_spread_v3 (response env_id='env-0'): dropped action(s) for agent(s) ['ghost'], "
        "not in env.agents"
    )
    assert warning.filename == __file__  # points at the caller, not the adapter
    assert response.action == actions  # the response itself is untouched
    # No warning when nothing is dropped.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        to_parallel_actions(MultiAgentPolicyResponse(None, action=out), env, drop_inactive=True)


def test_live_agents_come_from_env_agents_not_observation_keys(simple_spread: ModuleType) -> None:
    """After the last step every agent has a final observation but none is live."""
    env = simple_spread.parallel_env(max_cycles=2)
    observations, _ = env.reset(seed=0)
    for _ in range(2):
        response = from_parallel_actions(dict.fromkeys(env.agents, 0))
        observations, *_ = env.step(to_parallel_actions(response, env))
    assert env.agents == []
    assert set(observations) == {"agent_0", "agent_1", "agent_2"}
    stale = from_parallel_actions(dict.fromkeys(observations, 0), "env-0")
    with pytest.raises(ValueError, match=re.escape("[rule no-inactive-action]")):
        to_parallel_actions(stale, env)
    empty = sample_response(env, "env-0", observations)
    assert empty.action == {}
    assert to_parallel_actions(empty, env) == {}


def test_wrong_kinds(simple_spread: ModuleType) -> None:
    env = simple_spread.parallel_env()
    env.reset(seed=0)
    how = (
        "make one with MultiAgentPolicyResponse(env_id, action={agent: action, ...}) (one action "
        "per agent of env.agents; other fields per-agent as dicts keyed by the same agents), or "
        "MultiAgentPolicyResponse.from_agents(env_id, {agent: response, ...}) from one "
        "single-agent PolicyResponse per agent"
    )
    with pytest.raises(
        TypeError,
        match=re.escape(
            "response must be a MultiAgentPolicyResponse, not dict; got {'agent_0': 0}; fix: "
            f"{how} [rule response-type]"
        ),
    ):
        to_parallel_actions({"agent_0": 0}, env)  # type: ignore[arg-type]
    single = (
        "response must be a MultiAgentPolicyResponse, not PolicyResponse; got PolicyResponse("
        "env_id='e', action=0, log_prob=-0.1, ts_env_sent_ns=1); fix: a parallel env steps every "
        f"agent at once, so the response needs one action per agent; {how} [rule response-type]"
    )
    with pytest.raises(TypeError, match=re.escape(single)):
        to_parallel_actions(
            PolicyResponse("e", action=0, log_prob=-0.1, ts_env_sent_ns=1),
            env,  # type: ignore[arg-type]
        )
    aec = tictactoe_v3.env()
    aec.reset(seed=0)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "to_parallel_actions() needs a PettingZoo ParallelEnv (e.g. "
            "simple_spread_v3.parallel_env()), got OrderEnforcingWrapper (an AEC env: use "
            "aec_action())"
        ),
    ):
        to_parallel_actions(MultiAgentPolicyResponse(None, action={"player_1": 0}), aec)


# ---------------------------------------------------------------------------- from_parallel_actions
def test_from_parallel_actions_round_trip(simple_spread: ModuleType) -> None:
    env = simple_spread.parallel_env()
    env.reset(seed=0)
    actions = {"agent_0": 1, "agent_1": 2, "agent_2": 3}
    log_prob = {"agent_0": -0.1, "agent_1": -0.2, "agent_2": -0.3}
    response = from_parallel_actions(actions, "env-3", log_prob=log_prob)
    assert isinstance(response, MultiAgentPolicyResponse)
    assert response.env_id == "env-3"
    assert response.action == actions
    assert response.action is not actions  # copied: later edits of the caller's dict do not leak
    assert response.log_prob == log_prob
    assert response.is_per_agent("log_prob")
    assert response.for_agent("agent_1") == PolicyResponse("env-3", action=2, log_prob=-0.2)
    assert to_parallel_actions(response, env) == actions


def test_from_parallel_actions_errors() -> None:
    with pytest.raises(
        ValueError,
        match=re.escape(
            "from_parallel_actions(): value is a per-agent field but not keyed by exactly "
            "action's agents ['a', 'b']: missing ['b'], extra ['c']; got {'a': 1.0, 'c': 2.0}; "
            "fix: give every agent of action an entry (None for an agent that has none) "
            "[rule per-agent-keys]"
        ),
    ):
        from_parallel_actions({"a": 0, "b": 1}, value={"a": 1.0, "c": 2.0})
    with pytest.raises(TypeError, match=re.escape("actions must be a mapping")):
        from_parallel_actions([0, 1])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape("per-agent field 'value' must be a mapping")):
        from_parallel_actions({"a": 0}, value=1.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="would shadow"):
        from_parallel_actions({"a": 0}, cpu={"a": 1})
    with pytest.raises(
        TypeError,
        match=re.escape(
            "from_parallel_actions() got the actions twice: as actions ['a'] and as the "
            "per-agent field action= {'a': 99}"
        ),
    ):
        from_parallel_actions({"a": 1}, action={"a": 99})


@pytest.mark.parametrize("stamp", ["ts_env_sent_ns", "ts_policy_sent_ns"])
def test_from_parallel_actions_refuses_per_agent_stamps(stamp: str) -> None:
    with pytest.raises(
        ValueError, match=re.escape(f"{stamp!r} is a timing stamp, one value per response")
    ):
        from_parallel_actions({"a": 1, "b": 1}, "e", **{stamp: {"a": 5, "b": 5}})
    response = from_parallel_actions({"a": 1, "b": 1}, "e")
    setattr(response, stamp, 5)  # the documented way: one stamp on the response
    assert getattr(response, stamp) == 5


# ---------------------------------------------------------------------------- property
AGENTS = ["agent_0", "agent_1", "agent_2"]


@settings(max_examples=50, deadline=None)
@given(
    chosen=st.sets(st.sampled_from([*AGENTS, "ghost", "agent_9"])),
    drop=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_liveness_rules_hold_for_any_agent_set(
    simple_spread: ModuleType, chosen: set[str], drop: bool, seed: int
) -> None:
    env = simple_spread.parallel_env()
    env.reset(seed=seed)
    response = from_parallel_actions({a: seed % 5 for a in sorted(chosen)})
    missing = [a for a in AGENTS if a not in chosen]
    extra = sorted(chosen - set(AGENTS))
    if missing:
        lacks = f"response.action lacks live agent(s) {missing}"
        with pytest.raises(ValueError, match=re.escape(lacks)):
            to_parallel_actions(response, env, drop_inactive=drop)
    elif extra and not drop:
        not_live = f"action(s) for agent(s) {extra} that are not live"
        with pytest.raises(ValueError, match=re.escape(not_live)):
            to_parallel_actions(response, env)
    elif extra:
        with pytest.warns(InactiveAgentActionWarning):
            assert list(to_parallel_actions(response, env, drop_inactive=True)) == AGENTS
    else:
        assert to_parallel_actions(response, env, drop_inactive=drop) == dict.fromkeys(
            AGENTS, seed % 5
        )


def test_env_names_survive_mpe2s_shared_metadata(
    simple_spread: ModuleType, simple_adversary: ModuleType
) -> None:
    """mpe2 envs share one metadata dict; its name is used only while it fits the env's class."""
    from rlightning_pettingzoo._envs import describe_env

    spread = simple_spread.parallel_env()
    assert describe_env(spread) == "simple_spread_v3"
    adversary = simple_adversary.parallel_env()  # overwrites the shared metadata["name"]
    assert spread.metadata["name"] == "simple_adversary_v3"  # the upstream quirk itself
    cls = type(spread.unwrapped)
    assert describe_env(spread) == f"{cls.__module__}.{cls.__qualname__}"
    assert describe_env(adversary) == "simple_adversary_v3"
    assert describe_env(tictactoe_v3.env()) == "tictactoe_v3"  # its own class's metadata
    assert describe_env(pistonball_v6.parallel_env()) == "pistonball_v6"
    spread.reset(seed=0)
    with pytest.raises(ValueError, match=re.escape(f"{cls.__module__}.{cls.__qualname__} (")):
        to_parallel_actions(MultiAgentPolicyResponse("e", action={"agent_0": 1}), spread)


# -------------------------------------------------- refusals that name the agent, space and value


def _ma(actions: dict[Any, Any], **fields: Any) -> MultiAgentPolicyResponse:
    return MultiAgentPolicyResponse("env-0", action=actions, **fields)


def test_a_single_missing_live_agent_is_named(spread: Any) -> None:
    with pytest.raises(
        ValueError, match=re.escape("response.action lacks live agent(s) ['agent_2']")
    ):
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
    with pytest.raises(ValueError, match=re.escape("got {0: 1, 1: 1, 2: 1}")):
        to_parallel_actions(_ma({0: 1, 1: 1, 2: 1}), spread)


def test_numpy_str_agent_ids_find_their_agents(spread: Any) -> None:
    out = to_parallel_actions(_ma({np.str_(a): 1 for a in spread.agents}), spread)
    assert list(out) == spread.agents and all(type(a) is str for a in out)


def test_a_single_agent_response_is_a_type_error(spread: Any) -> None:
    got = "not PolicyResponse; got PolicyResponse(env_id='env-0', action=1); fix: "
    with pytest.raises(TypeError, match=re.escape(got)) as info:
        to_parallel_actions(PolicyResponse("env-0", action=1), spread)  # type: ignore[arg-type]
    # it says how to make a multi-agent one, both ways
    assert "MultiAgentPolicyResponse(env_id, action={agent: action, ...})" in str(info.value)
    assert "MultiAgentPolicyResponse.from_agents(env_id, {agent: response, ...})" in str(info.value)


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


def test_errors_name_the_right_env_when_several_mpe_envs_exist(
    simple_spread: ModuleType, simple_adversary: ModuleType
) -> None:
    spread = simple_spread.parallel_env()
    spread.reset(seed=0)
    simple_adversary.parallel_env().reset(seed=0)
    with pytest.raises(ValueError, match="simple_spread"):
        to_parallel_actions(_ma({"agent_0": 1}), spread)


# -------------------------------------------------------------------------------- a malformed env


def test_duplicate_live_agent_does_not_hide_an_inactive_action(
    many_agent_env: Callable[[int], Any],
) -> None:
    env = many_agent_env(2)
    env.agents = ["agent_0", "agent_0"]  # a malformed env; the extra action must not vanish
    response = MultiAgentPolicyResponse("e0", action={"agent_0": 1, "agent_1": 2})
    with pytest.raises(ValueError, match=re.escape("[rule no-inactive-action]")):
        to_parallel_actions(response, env)


@pytest.mark.parametrize(
    "actions",
    [
        {"agent_1": 0},
        {"agent_0": 0, "agent_1": 1, "ghost": 2, "agent_2": 3},
        {"agent_0": 0, "agent_2": 3, "ghost": 2},
    ],
    ids=["missing", "inactive", "both"],
)
def test_to_parallel_actions_and_the_checker_share_the_liveness_rule(
    spread: Any, actions: dict[str, Any]
) -> None:
    """One rule (rlightning.rules.check_live_agents): the same verdict, rule and problem."""
    response = MultiAgentPolicyResponse("env-0", action=actions)
    action_spaces = {a: spread.action_space("agent_0") for a in [*spread.possible_agents, "ghost"]}
    liveness = r"\[rule (live-agents|no-inactive-action)\]$"
    with pytest.raises(ValueError, match=liveness) as adapter:
        to_parallel_actions(response, spread)
    with pytest.raises(ValueError, match=liveness) as checker:
        check_multi_agent_policy_response(response, action_spaces, live_agents=spread.agents)
    rule = re.search(r"\[rule [a-z-]+\]$", str(checker.value))
    assert rule is not None and str(adapter.value).endswith(rule.group())
    # The adapter names the env and what a parallel step takes; the problem is the checker's.
    problem = str(checker.value).split("; got ")[0]
    assert f"simple_spread_v3 (response env_id='env-0'): {problem}; got " in str(adapter.value)


@pytest.mark.parametrize("name", ["ts_policy_recv_ns", "ts_infer_start_ns", "policy_version"])
def test_from_parallel_actions_refuses_every_shared_field_per_agent(name: str) -> None:
    """rlightning.rules.SHARED_FIELDS: Ray's stamps and policy_version are one per response."""
    with pytest.raises(ValueError, match=re.escape(f"{name!r} is ")):
        from_parallel_actions({"a": 1, "b": 1}, "e", **{name: {"a": 5, "b": 5}})
