"""AEC API: aec_action plays whole classic games; None for finished agents; masks honoured."""

from __future__ import annotations

import logging
import re
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3, rps_v2, tictactoe_v3

from rlightning import MultiAgentPolicyResponse
from rlightning.testing import check_policy_response
from rlightning_pettingzoo import aec_action, respond, sample_response

GAMES = [tictactoe_v3, connect_four_v3, rps_v2]


def _play(env: Any, seed: int) -> dict[str, Any]:
    """One whole game through sample_response + aec_action; returns what happened."""
    env.reset(seed=seed)
    for i, agent in enumerate(env.possible_agents):
        env.action_space(agent).seed(seed + i)
    moves = 0
    none_steps: list[str] = []
    final_rewards: dict[str, float] = {}
    for agent in env.agent_iter():
        observation, reward, termination, truncation, _ = env.last()
        response = sample_response(env, f"game-{seed}")
        action = aec_action(response, env)
        if termination or truncation:
            assert action is None
            assert response.action == {}  # no action is even produced for a finished agent
            none_steps.append(agent)
            final_rewards[agent] = float(reward)
        else:
            assert list(response.action) == [agent]
            view = response.for_agent(agent)
            check_policy_response(view, env.action_space(agent))  # incl. the mask rule
            if isinstance(observation, dict):
                assert observation["action_mask"][action] == 1
            moves += 1
        env.step(action)
    return {"moves": moves, "none_steps": none_steps, "rewards": final_rewards}


@pytest.mark.parametrize("game", GAMES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_whole_games(game: ModuleType, caplog: pytest.LogCaptureFixture) -> None:
    env = game.env()
    with caplog.at_level(logging.WARNING):
        for seed in range(4):
            result = _play(env, seed)
            # Every agent stepped None exactly once at the end, as PettingZoo requires.
            assert sorted(result["none_steps"]) == sorted(env.possible_agents)
            assert result["moves"] >= 1
            assert env.agents == []
            if game is not rps_v2:
                # Zero-sum board games: +1/-1 for a win, 0/0 for a draw.
                assert sorted(result["rewards"].values()) in ([-1.0, 1.0], [0.0, 0.0])
    assert not [r for r in caplog.records if "llegal" in r.getMessage()]


def test_tictactoe_game_lengths_are_legal() -> None:
    """Legal random play ends a tic-tac-toe game in 5 to 9 moves, never earlier."""
    env = tictactoe_v3.env()
    lengths = {_play(env, seed)["moves"] for seed in range(10)}
    assert min(lengths) >= 5
    assert max(lengths) <= 9


def test_rps_ends_by_truncation() -> None:
    env = rps_v2.env(max_cycles=5)
    result = _play(env, seed=0)
    assert result["moves"] == 10  # 5 rounds x 2 players
    assert sorted(result["none_steps"]) == ["player_0", "player_1"]


def test_none_for_a_finished_agent_whatever_the_response_holds() -> None:
    env = rps_v2.env(max_cycles=1)
    env.reset(seed=0)
    for agent in env.agent_iter():
        _, _, termination, truncation, _ = env.last()
        if termination or truncation:
            assert aec_action(None, env) is None
            stale = MultiAgentPolicyResponse("e", action={agent: 1})
            assert aec_action(stale, env) is None
            with pytest.raises(
                TypeError,
                match=re.escape(
                    "response for a finished agent must be a MultiAgentPolicyResponse, not dict; "
                    f"got {{{agent!r}: 1}}; fix: pass None (a terminated or truncated agent steps "
                    "None) or a MultiAgentPolicyResponse [rule response-type]"
                ),
            ):
                aec_action({agent: 1}, env)  # type: ignore[arg-type]
            env.step(None)
        else:
            env.step(aec_action(MultiAgentPolicyResponse("e", action={agent: 0}), env))
    assert env.agents == []


def test_only_the_selected_agent_acts() -> None:
    env = tictactoe_v3.env()
    env.reset(seed=0)
    assert env.agent_selection == "player_1"
    response = MultiAgentPolicyResponse("e", action={"player_2": 8, "player_1": 4})
    assert aec_action(response, env) == 4


def test_missing_action_for_selected_agent() -> None:
    env = tictactoe_v3.env()
    env.reset(seed=0)
    response = MultiAgentPolicyResponse("env-1", action={"player_2": 0})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "tictactoe_v3 (response env_id='env-1'): response.action lacks live agent(s) "
            "['player_1']; got {'player_2': 0}; expected an action for agent 'player_1', the "
            "env.agent_selection that acts now [rule live-agents]"
        ),
    ):
        aec_action(response, env)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "response for live agent 'player_1' must be a MultiAgentPolicyResponse, not NoneType"
        ),
    ):
        aec_action(None, env)


def test_action_outside_space() -> None:
    env = connect_four_v3.env()
    env.reset(seed=0)
    response = MultiAgentPolicyResponse(None, action={"player_0": np.int64(7)})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "connect_four_v3 (response env_id=None): action for agent 'player_0' is not in "
            # repr(np.int64(7)) is "np.int64(7)" under numpy 2 and "7" under numpy 1.x
            f"Discrete(7): 7 is outside [0, 6]; got {np.int64(7)!r} [rule action-in-space]"
        ),
    ):
        aec_action(response, env)


def test_illegal_move_is_caught_before_the_env_ends_the_game(
    caplog: pytest.LogCaptureFixture,
) -> None:
    env = tictactoe_v3.env()
    env.reset(seed=0)
    env.step(aec_action(MultiAgentPolicyResponse(None, action={"player_1": 4}), env))
    response = MultiAgentPolicyResponse(None, action={"player_2": 4})
    with pytest.raises(
        ValueError,
        match=re.escape(
            "tictactoe_v3 (response env_id=None): agent 'player_2' action 4 is masked out by the "
            "action mask (legal: [0, 1, 2, 3, 5, 6, 7, 8]); got 4 [rule action-mask]"
        ),
    ):
        aec_action(response, env)
    # Opting out hands the move to the env, whose TerminateIllegalWrapper ends the game.
    assert aec_action(response, env, check_mask=False) == 4
    with caplog.at_level(logging.WARNING):
        env.step(4)
    assert any(
        "llegal move" in r.getMessage() for r in caplog.records
    )  # what test_whole_games rules out
    assert all(env.terminations.values())
    assert env.rewards["player_2"] == -1


def test_parallel_env_is_refused(simple_spread: ModuleType) -> None:
    env = simple_spread.parallel_env()
    env.reset(seed=0)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "aec_action() needs a PettingZoo AECEnv (e.g. tictactoe_v3.env()), got "
            "aec_to_parallel_wrapper (a parallel env: use to_parallel_actions())"
        ),
    ):
        aec_action(MultiAgentPolicyResponse(None, action={"agent_0": 0}), env)


def test_simple_spread_aec_env(simple_spread: ModuleType) -> None:
    """The AEC form of an MPE env (no masks, Box and Discrete) runs through the same loop."""
    for continuous in (False, True):
        env = simple_spread.env(max_cycles=5, continuous_actions=continuous)
        result = _play(env, seed=0)
        assert result["moves"] == 15
        assert sorted(result["none_steps"]) == ["agent_0", "agent_1", "agent_2"]


@pytest.mark.parametrize("game", GAMES, ids=["tictactoe", "connect4", "rps"])
def test_after_the_game_ended_every_entry_point_says_call_reset(game: ModuleType) -> None:
    """Once env.agents is empty, agent_selection names a removed agent: nothing may act."""
    env = game.env()
    _play(env, seed=0)
    assert env.agents == []
    agent = env.agent_selection
    expected = re.escape(
        f"{game.__name__.rsplit('.', 1)[-1]}: env.agent_selection names a removed agent: the "
        "game is over (env.agents is empty: every agent has left), so no agent acts; got "
        f"{agent!r}; fix: call env.reset() before the next step"
    )
    with pytest.raises(ValueError, match=expected):
        aec_action(MultiAgentPolicyResponse("g", action={agent: 0}), env)
    with pytest.raises(ValueError, match=expected):
        aec_action(None, env)
    with pytest.raises(ValueError, match=expected):
        sample_response(env, "g")
    with pytest.raises(ValueError, match=expected):
        respond(env, {agent: env.observe(agent)}, {agent: lambda o: 0}, "g")
    env.reset(seed=1)  # and reset() makes it playable again
    assert sample_response(env, "g").agent_ids == [env.agent_selection]


# ------------------------------------------------------------------- refusals that name the agent


def _ma(actions: dict[Any, Any], **fields: Any) -> MultiAgentPolicyResponse:
    return MultiAgentPolicyResponse("env-0", action=actions, **fields)


def _finished_tictactoe() -> Any:
    env = tictactoe_v3.env()
    env.reset(seed=0)
    for agent in env.agent_iter():
        env.action_space(agent).seed(0)
        env.step(aec_action(sample_response(env, "g"), env))
    assert env.agents == []
    return env


def test_aec_illegal_move_is_named_before_the_game_punishes_it() -> None:
    env = tictactoe_v3.env()
    env.reset(seed=0)
    env.step(4)
    agent = env.agent_selection
    with pytest.raises(ValueError, match=re.escape(f"agent '{agent}' action 4 is masked out")):
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


def test_single_agent_response_says_how_to_make_a_multi_agent_one() -> None:
    from rlightning import PolicyResponse

    env = tictactoe_v3.env()
    env.reset(seed=0)
    with pytest.raises(TypeError) as caught:
        aec_action(PolicyResponse("e", action=1), env)  # type: ignore[arg-type]
    message = str(caught.value)
    assert message.startswith(
        "response for live agent 'player_1' must be a MultiAgentPolicyResponse, not "
        "PolicyResponse; got PolicyResponse(env_id='e', action=1); fix: an AEC env's response "
        "holds the acting agent's action keyed by its id (action={'player_1': ...}); make one "
        "with MultiAgentPolicyResponse(env_id, action={agent: action, ...})"
    ), message
    assert "MultiAgentPolicyResponse.from_agents(env_id, {agent: response, ...})" in message
