"""Action masks: found in observations or infos, honoured by sample_response."""

from __future__ import annotations

import copy
import logging
import pickle
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3, tictactoe_v3
from pettingzoo.utils.conversions import turn_based_aec_to_parallel

from rlightning import MultiAgentPolicyResponse
from rlightning.testing import check_multi_agent_policy_response
from rlightning_pettingzoo import (
    SharedPolicyAdapter,
    find_action_mask,
    respond,
    sample_response,
    to_parallel_actions,
)


def test_find_action_mask_order() -> None:
    in_obs = np.array([1, 0], np.int8)
    in_info = np.array([0, 1], np.int8)
    observations = {"a": {"observation": 0, "action_mask": in_obs}, "b": np.zeros(2)}
    infos = {"a": {"action_mask": in_info}, "b": {"action_mask": in_info}, "c": {}}
    assert find_action_mask("a", observations, infos) is in_obs  # observation first
    assert find_action_mask("b", observations, infos) is in_info  # then info
    assert find_action_mask("c", observations, infos) is None
    assert find_action_mask("a") is None
    assert find_action_mask("a", infos=infos) is in_info


def _turn_based(game: Any) -> Any:
    return turn_based_aec_to_parallel(game.env())


@pytest.mark.parametrize("game", [tictactoe_v3, connect_four_v3], ids=["tictactoe", "connect4"])
@pytest.mark.parametrize("where", ["observation", "info"])
def test_parallel_turn_based_games_never_sample_an_illegal_move(
    game: Any, where: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Classic games in parallel form: each mask lives in the observation (or, rearranged, in
    the info); the mover's sampled action is always legal; the waiting player has an all-zero
    mask, waits (action None, rule no-legal-action) and to_parallel_actions passes None on."""
    env = _turn_based(game)
    spaces = {a: env.action_space(a) for a in env.possible_agents}
    with caplog.at_level(logging.WARNING):
        for seed in range(3):
            observations, infos = env.reset(seed=seed)
            for i, agent in enumerate(env.possible_agents):
                env.action_space(agent).seed(seed + i)
            moves = 0
            while env.agents:
                if where == "info":
                    infos = {
                        a: {**infos[a], "action_mask": observations[a]["action_mask"]}
                        for a in infos
                    }
                    observations = {a: observations[a]["observation"] for a in observations}
                response = sample_response(env, "g", observations, infos)
                check_multi_agent_policy_response(response, spaces, live_agents=env.agents)
                for agent, action in response.action.items():
                    mask = find_action_mask(agent, observations, infos)
                    assert mask is not None
                    assert response.action_mask[agent] is mask
                    if mask.any():
                        assert mask[action] == 1
                        moves += 1
                    else:
                        assert action is None  # it waits: no made-up move
                actions = to_parallel_actions(response, env)
                assert sum(a is None for a in actions.values()) == len(env.agents) - 1
                observations, _, _, _, infos = env.step(actions)
            assert moves >= 5 if game is tictactoe_v3 else moves >= 7
    assert not [r for r in caplog.records if "llegal" in r.getMessage()]


def test_masked_observations_need_observations() -> None:
    env = _turn_based(tictactoe_v3)
    env.reset(seed=0)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "tictactoe_v3's observations carry action masks (observation_space has "
            "'action_mask' for agent(s) ['player_1', 'player_2']) but observations= does not "
            "hold theirs; pass the observations from the last reset()/step() so no illegal "
            "action is sampled"
        ),
    ):
        sample_response(env)
    observations, infos = env.reset(seed=0)
    with pytest.raises(ValueError, match=re.escape("for agent(s) ['player_2']) but")):
        sample_response(env, None, {"player_1": observations["player_1"]}, infos)


def test_aec_masks_are_read_from_the_env() -> None:
    env = tictactoe_v3.env()
    env.reset(seed=0)
    env.step(4)
    for seed in range(20):
        env.action_space("player_2").seed(seed)
        response = sample_response(env, "g")
        assert response.action["player_2"] != 4
        assert response.action_mask["player_2"][4] == 0
        # An observations dict without the selected agent: its observation is read from the env.
        other = sample_response(env, "g", observations={"player_1": env.observe("player_1")})
        assert other.action["player_2"] != 4


def test_bad_masks_are_refused() -> None:
    env = _turn_based(tictactoe_v3)
    observations, infos = env.reset(seed=0)
    observations = {a: {**o, "action_mask": np.ones(3, np.int8)} for a, o in observations.items()}
    with pytest.raises(
        ValueError,
        match=re.escape(
            "tictactoe_v3: action mask of agent 'player_1' must have shape (9,), not (3,); "
            "got array([1, 1, 1], dtype=int8); expected 9 0/1 entries for Discrete(9) "
            "[rule action-mask]"
        ),
    ):
        sample_response(env, None, observations, infos)
    observations = {a: {**o, "action_mask": np.full(9, 2)} for a, o in observations.items()}
    with pytest.raises(ValueError, match=re.escape("element [0] = 2 is neither")):
        sample_response(env, None, observations, infos)


def test_float_masks_of_exact_zeros_and_ones_are_read_as_bools() -> None:
    """rules.check_action_mask accepts 0.0/1.0 (a float mask is a 0/1 mask): legal moves only."""
    env = _turn_based(tictactoe_v3)
    observations, infos = env.reset(seed=0)
    mask = np.zeros(9)
    mask[[2, 7]] = 1.0
    observations = {a: {**o, "action_mask": mask} for a, o in observations.items()}
    for seed in range(10):
        env.action_space("player_1").seed(seed)
        assert sample_response(env, None, observations, infos).action["player_1"] in (2, 7)


BAD_MASKS = [
    (np.full(9, 0.5), "must hold only booleans or exactly 0 and 1: element [0] = 0.5 is neither"),
    (
        np.full(9, np.nan),
        "must hold only booleans or exactly 0 and 1: element [0] = nan is neither",
    ),
    (
        np.full(9, 2, np.int8),
        "must hold only booleans or exactly 0 and 1: element [0] = 2 is neither",
    ),
    (
        np.full(9, -1, np.int64),
        "must hold only booleans or exactly 0 and 1: element [0] = -1 is neither",
    ),
    (np.ones(5, np.int8), "must have shape (9,), not (5,)"),
    (np.ones((3, 3), np.int8), "must have shape (9,), not (3, 3)"),
    ([1] * 8, "must have shape (9,), not (8,)"),
]


def _bad_mask_pattern(mask: Any, fragment: str) -> str:
    return re.escape(f"tictactoe_v3: action mask of agent 'player_1' {fragment}")


def _masked(mask: Any) -> tuple[Any, dict[Any, Any], dict[Any, Any]]:
    env = _turn_based(tictactoe_v3)
    observations, infos = env.reset(seed=0)
    return env, {a: {**o, "action_mask": mask} for a, o in observations.items()}, infos


@pytest.mark.parametrize(("mask", "fragment"), BAD_MASKS)
def test_sampling_and_callable_policies_refuse_a_malformed_mask(mask: Any, fragment: str) -> None:
    """One rule, the core checker's action-mask rule: nothing reads 0.5 or NaN as legal."""
    env, observations, infos = _masked(mask)
    pattern = _bad_mask_pattern(mask, fragment)
    with pytest.raises(ValueError, match=pattern):
        sample_response(env, None, observations, infos)
    with pytest.raises(ValueError, match=pattern):
        respond(env, observations, {a: (lambda o: 0) for a in env.agents})
    aec = tictactoe_v3.env()
    aec.reset(seed=0)
    observation = {**aec.observe("player_1"), "action_mask": mask}
    with pytest.raises(ValueError, match=pattern):
        sample_response(aec, None, {"player_1": observation})


@pytest.mark.torch
@pytest.mark.parametrize(("mask", "fragment"), BAD_MASKS)
def test_maskable_ppo_paths_refuse_a_malformed_mask(
    mask: Any, fragment: str, make_sb3: Any
) -> None:
    """respond and SharedPolicyAdapter check a mask before sb3-contrib sees it (it would read
    np.asarray(mask, dtype=bool), so 0.5 or NaN became "allowed")."""
    sb3_contrib = pytest.importorskip("sb3_contrib")
    env, observations, infos = _masked(mask)
    model = make_sb3(
        sb3_contrib.MaskablePPO,
        "MultiInputPolicy",
        env.observation_space("player_1"),
        env.action_space("player_1"),
    )
    pattern = _bad_mask_pattern(mask, fragment)
    with pytest.raises(ValueError, match=pattern):
        respond(env, observations, {a: model for a in env.agents})
    with pytest.raises(ValueError, match=pattern):
        SharedPolicyAdapter(model).act(env, observations, infos=infos)


class _Name(str):
    """A str subclass: a valid env_id that the constructor, not the fast path, stores."""


@pytest.mark.parametrize("env_id", [None, "env-3", _Name("env-4")], ids=["none", "str", "str-sub"])
def test_unmasked_parallel_response_is_the_constructors(
    simple_spread: ModuleType, env_id: str | None
) -> None:
    """sample_response builds its unmasked parallel response without __init__ (a per-step
    saving); it must be the response the constructor builds: same type, fields, field order."""
    env = simple_spread.parallel_env()
    env.reset(seed=0)
    for i, agent in enumerate(env.agents):
        env.action_space(agent).seed(i)
    response = sample_response(env, env_id)
    expected = MultiAgentPolicyResponse(env_id, action=dict(response.action))
    assert type(response) is MultiAgentPolicyResponse
    assert list(vars(response).items()) == list(vars(expected).items())
    assert response == expected and repr(response) == repr(expected)
    assert response.env_id is env_id and list(response.action) == env.agents
    assert all(env.action_space(a).contains(v) for a, v in response.action.items())
    response.value = dict.fromkeys(env.agents, 0.5)  # an ordinary, mutable response
    assert response.for_agent(env.agents[0]).value == 0.5


def test_unmasked_parallel_response_refuses_a_bad_env_id(simple_spread: ModuleType) -> None:
    env = simple_spread.parallel_env()
    env.reset(seed=0)
    with pytest.raises(TypeError, match=re.escape("env_id must be a str or None, not int; got 3")):
        sample_response(env, 3)  # type: ignore[arg-type]


def test_sample_response_refuses_a_non_env() -> None:
    with pytest.raises(
        TypeError, match=re.escape("env must be a PettingZoo AECEnv or ParallelEnv, got dict")
    ):
        sample_response({"agents": ["a"]})


# ----------------------------------------------------------- malformed masks and agents that wait


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


# -------------------------------------------------------------- sample_response's own constructor


class _Str(str):
    pass


@pytest.mark.parametrize("env_id", [None, "", "env-0", _Str("sub")])
def test_sample_response_equals_constructed_response(
    many_agent_env: Callable[[int], Any], env_id: Any
) -> None:
    env = many_agent_env(3)
    for agent in env.agents:
        env.action_space(agent).seed(1)
    got = sample_response(env, env_id)
    want = MultiAgentPolicyResponse(env_id, action=dict(got.action))
    assert got == want and repr(got) == repr(want)
    assert list(vars(got)) == list(vars(want))
    assert pickle.loads(pickle.dumps(got)) == want
    assert copy.deepcopy(got) == want and copy.copy(got) == want
    if type(env_id) is _Str:  # the wire format carries a plain str only: both refuse it
        for response in (got, want):
            with pytest.raises(TypeError, match="a str subclass"):
                response.to_bytes()
    else:
        assert got.to_bytes() == want.to_bytes()
    with pytest.raises(ValueError, match="would shadow"):
        got.numpy = 1
    with pytest.raises(TypeError):
        got.action = [1]


@pytest.mark.parametrize("env_id", [b"env", 1, 1.0])
def test_sample_response_bad_env_id_raises(
    many_agent_env: Callable[[int], Any], env_id: Any
) -> None:
    env = many_agent_env(2)
    with pytest.raises(TypeError):
        sample_response(env, env_id)
    env.agents = []
    with pytest.raises(TypeError):
        sample_response(env, env_id)
