"""Breaker tests for the PettingZoo per-step fast paths (perf item 7, branch pz7).

``to_parallel_actions`` reads the Discrete table (``_checks.int_ranges``) inline and the checker
cache by ``id(env)``; ``sample_response`` builds its response without the constructor. The
unhashable-type and repeated-agent tests pin defects found by feeding these paths unusual input
(fixed); the others pin cases that were tried and hold (so a later cut of the fast paths keeps
them).
"""

from __future__ import annotations

import copy
import gc
import inspect
import pickle
import re
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from rlightning import MultiAgentPolicyResponse
from rlightning_pettingzoo import sample_response, to_parallel_actions
from rlightning_pettingzoo._checks import make_checker


def _env(n: int) -> Any:
    """``benchmarks/cases_adapters.py``'s many-agent env (``Discrete(5)`` actions), reset."""
    from benchmarks.cases_adapters import make_many_agent_env

    return make_many_agent_env(n)


class _EqMeta(type):
    """A metaclass defining ``__eq__`` only: Python then sets ``__hash__ = None``, so the
    *classes* it makes are unhashable (their instances are ordinary objects)."""

    def __eq__(cls, other: object) -> bool:
        return cls is other


class _Unhashable(metaclass=_EqMeta):
    """An action whose ``type()`` cannot be a dict key."""


# ---------------------------------------------------------------------------------------- defects


@pytest.mark.parametrize(
    "space",
    [spaces.Discrete(5), spaces.Box(-1.0, 1.0, (2,), np.float32), spaces.MultiDiscrete([2, 2])],
    ids=["Discrete", "Box", "MultiDiscrete"],
)
def test_unhashable_action_type_is_a_value_error(space: spaces.Space[Any]) -> None:
    env = _env(1)
    env._act["agent_0"] = space
    response = MultiAgentPolicyResponse("e0", action={"agent_0": _Unhashable()})
    with pytest.raises(ValueError, match=re.escape("[rule action-in-space]")):
        to_parallel_actions(response, env)


def test_discrete_checker_unhashable_type_is_false() -> None:
    space = spaces.Discrete(5)
    assert space.contains(_Unhashable()) is False
    assert make_checker(space)(_Unhashable()) is False


def test_duplicate_live_agent_does_not_hide_an_inactive_action() -> None:
    env = _env(2)
    env.agents = ["agent_0", "agent_0"]  # a malformed env; the extra action must not vanish
    response = MultiAgentPolicyResponse("e0", action={"agent_0": 1, "agent_1": 2})
    with pytest.raises(ValueError, match=re.escape("[rule no-inactive-action]")):
        to_parallel_actions(response, env)


# ----------------------------------------------------------------------- tried, and they hold


def test_checker_cache_survives_env_id_reuse() -> None:
    # Envs created and dropped in a loop reuse addresses; each must be checked against its own
    # space, never a cached table of a dead env at the same id().
    for i in range(120):
        env = _env(1)
        n = 1 + i % 5
        env._act["agent_0"] = spaces.Discrete(n, start=-(i % 3))
        start = -(i % 3)
        for value in range(start - 1, start + 6):
            response = MultiAgentPolicyResponse(None, action={"agent_0": value})
            if start <= value < start + n:
                assert to_parallel_actions(response, env) == {"agent_0": value}
            else:
                with pytest.raises(ValueError, match=re.escape("[rule action-in-space]")):
                    to_parallel_actions(response, env)
        del env
        if i % 40 == 0:
            gc.collect()


def test_space_replaced_between_steps_is_rechecked() -> None:
    env = _env(1)
    ok = MultiAgentPolicyResponse(None, action={"agent_0": 4})
    assert to_parallel_actions(ok, env) == {"agent_0": 4}
    env._act["agent_0"] = spaces.Discrete(4)  # a new object: the cached table must not be used
    with pytest.raises(ValueError, match=re.escape("[rule action-in-space]")):
        to_parallel_actions(ok, env)
    if "dtype" not in inspect.signature(spaces.Discrete.__init__).parameters:
        return  # gymnasium 1.0 (pz-lowest): Discrete is int64 only, the uint8 part cannot run
    env._act["agent_0"] = spaces.Discrete(3, start=2, dtype=np.uint8)
    assert to_parallel_actions(ok, env) == {"agent_0": 4}
    for bad in (np.int64(4), True, np.bool_(True), 4.0, np.array(4, dtype=np.int16)):
        response = MultiAgentPolicyResponse(None, action={"agent_0": bad})
        assert env._act["agent_0"].contains(bad) is False
        with pytest.raises(ValueError, match=re.escape("[rule action-in-space]")):
            to_parallel_actions(response, env)


class _Str(str):
    pass


@pytest.mark.parametrize("env_id", [None, "", "env-0", _Str("sub")])
def test_sample_response_equals_constructed_response(env_id: Any) -> None:
    env = _env(3)
    for agent in env.agents:
        env.action_space(agent).seed(1)
    got = sample_response(env, env_id)
    want = MultiAgentPolicyResponse(env_id, action=dict(got.action))
    assert got == want and repr(got) == repr(want)
    assert list(vars(got)) == list(vars(want))
    assert pickle.loads(pickle.dumps(got)) == want
    assert copy.deepcopy(got) == want and copy.copy(got) == want
    assert got.to_bytes() == want.to_bytes()
    with pytest.raises(ValueError, match="would shadow"):
        got.numpy = 1
    with pytest.raises(TypeError):
        got.action = [1]


@pytest.mark.parametrize("env_id", [b"env", 1, 1.0])
def test_sample_response_bad_env_id_raises(env_id: Any) -> None:
    env = _env(2)
    with pytest.raises(TypeError):
        sample_response(env, env_id)
    env.agents = []
    with pytest.raises(TypeError):
        sample_response(env, env_id)
