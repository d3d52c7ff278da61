"""The cached action checkers of to_parallel_actions give gymnasium's verdict, exactly.

``rlightning_pettingzoo._checks.make_checker(space)`` answers common cases with precomputed
comparisons; these tests compare it, under hypothesis, with ``space.contains`` and with
``rlightning.testing.space_violation`` (the check ``to_parallel_actions`` reported before), on
``Discrete`` and ``Box`` spaces of every integer/float dtype and on values of many kinds.
"""

from __future__ import annotations

import gc
import inspect
import re
import warnings
from collections.abc import Callable
from typing import Any, ClassVar

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from pettingzoo import ParallelEnv
from rlightning import MultiAgentPolicyResponse
from rlightning.testing import space_violation
from rlightning_pettingzoo import sample_response, to_parallel_actions
from rlightning_pettingzoo._checks import (
    _CACHES,
    cache_entry,
    checker_cache,
    int_ranges,
    make_checker,
)

INT_DTYPES: tuple[Any, ...] = (
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
)
FLOAT_DTYPES: tuple[Any, ...] = (np.float16, np.float32, np.float64)


def _contains_quietly(space: spaces.Space[Any], value: Any) -> bool:
    """``space.contains(value)``, with gymnasium's "Casting input x" warning silenced."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return bool(space.contains(value))
        except Exception:
            return False


# Discrete takes a dtype from gymnasium 1.1 on; gymnasium 1.0 (pz-lowest) has int64 only.
DISCRETE_HAS_DTYPE = "dtype" in inspect.signature(spaces.Discrete.__init__).parameters
DISCRETE_DTYPES: tuple[Any, ...] = INT_DTYPES if DISCRETE_HAS_DTYPE else (np.int64,)


@st.composite
def discrete_spaces(draw: st.DrawFn) -> spaces.Discrete[Any]:
    dtype = draw(st.sampled_from(DISCRETE_DTYPES))
    info = np.iinfo(dtype)
    n = draw(st.integers(1, min(50, int(info.max))))
    start = draw(st.integers(max(int(info.min), -60), min(int(info.max) - n + 1, 60)))
    if not DISCRETE_HAS_DTYPE:
        return spaces.Discrete(n, start=start)
    return spaces.Discrete(n, start=start, dtype=dtype)


def _int_scalar(dtype: Any, value: int) -> Any:
    """``dtype(value)`` when ``value`` fits the integer dtype, else None."""
    info = np.iinfo(dtype)
    return dtype(value) if info.min <= value <= info.max else None


def _int_values(space: spaces.Discrete[Any]) -> st.SearchStrategy[Any]:
    start, n = int(space.start), int(space.n)
    near = st.integers(start - 3, start + n + 2)
    python_ints = st.one_of(near, st.integers(-(2**70), 2**70), st.sampled_from([-1, 0, 1, 2**63]))
    numpy_scalars = (
        st.tuples(st.sampled_from(INT_DTYPES), near)
        .filter(lambda tv: np.iinfo(tv[0]).min <= tv[1] <= np.iinfo(tv[0]).max)
        .map(lambda tv: tv[0](tv[1]))
    )
    others = st.one_of(
        st.booleans(),
        near.map(float),
        near.map(np.float64),
        near.map(lambda v: np.array(v, dtype=np.int64)),  # 0-d array
        near.map(lambda v: np.array([v], dtype=np.int64)),  # shape (1,)
        st.sampled_from([None, "1", (1,), [1], 1.5]),
    )
    return st.one_of(python_ints, numpy_scalars, others)


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_discrete_checker_is_gymnasium_contains(data: st.DataObject) -> None:
    space = data.draw(discrete_spaces())
    check = make_checker(space)
    for _ in range(5):
        value = data.draw(_int_values(space))
        expected = _contains_quietly(space, value)
        assert check(value) is expected, (space, value, type(value))
        assert (space_violation(space, value) is None) is expected


@st.composite
def box_spaces(draw: st.DrawFn) -> spaces.Box[Any]:
    dtype = draw(st.sampled_from((*FLOAT_DTYPES, np.int32, np.uint8, np.int64)))
    shape = draw(st.sampled_from([(), (1,), (3,), (2, 2)]))
    if np.issubdtype(dtype, np.integer):
        low = draw(st.integers(0, 5))
        high = low + draw(st.integers(0, 5))
        return spaces.Box(low, high, shape, dtype)
    bound = st.one_of(st.floats(-10, 10, width=16), st.just(float("inf")))
    low_f = -draw(bound)
    high_f = draw(bound)
    if low_f > high_f:
        low_f, high_f = high_f, low_f
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # precision lowered for float16 bounds
        return spaces.Box(low_f, high_f, shape, dtype)


def _box_values(space: spaces.Box[Any]) -> st.SearchStrategy[Any]:
    shapes = st.sampled_from([space.shape, (), (1,), (3,), (2, 2), (4,)])
    dtypes = st.sampled_from(FLOAT_DTYPES + INT_DTYPES + (np.bool_,))
    elements = st.one_of(
        st.floats(-12, 12, width=16),
        st.sampled_from([float("nan"), float("inf"), -float("inf"), 0.0]),
    )

    @st.composite
    def arrays(draw: st.DrawFn) -> Any:
        shape = draw(shapes)
        dtype = draw(dtypes)
        size = int(np.prod(shape))
        raw = np.array(draw(st.lists(elements, min_size=size, max_size=size)), dtype=np.float64)
        with warnings.catch_warnings(), np.errstate(invalid="ignore", over="ignore"):
            warnings.simplefilter("ignore")
            return raw.reshape(shape).astype(dtype)

    return st.one_of(
        arrays(),
        arrays().map(lambda a: a.tolist()),
        st.floats(-12, 12, width=16).map(np.float32),
        st.sampled_from([None, "x", 1, 0.5]),
    )


@settings(max_examples=400, deadline=None)
@given(st.data())
def test_box_checker_is_gymnasium_contains(data: st.DataObject) -> None:
    space = data.draw(box_spaces())
    check = make_checker(space)
    for _ in range(5):
        value = data.draw(_box_values(space))
        with np.errstate(over="ignore", invalid="ignore"):  # casting lists to float16
            expected = space_violation(space, value) is None
            assert check(value) is expected, (space, value)
        if isinstance(value, np.ndarray):  # gymnasium's own verdict, no cast involved
            assert _contains_quietly(space, value) is expected


def test_box_checker_samples_and_refuses_nan() -> None:
    space = spaces.Box(-1.0, 1.0, (3,), np.float32, seed=0)
    check = make_checker(space)
    assert all(check(space.sample()) for _ in range(200))
    assert not check(np.array([0.0, np.nan, 0.0], dtype=np.float32))
    assert not check(np.zeros(3, dtype=np.float64))  # float64 does not cast safely to float32
    assert check(np.zeros(3, dtype=np.int8))


@pytest.mark.parametrize(
    "space",
    [
        spaces.MultiDiscrete([3, 4]),
        spaces.MultiBinary(3),
        spaces.Tuple((spaces.Discrete(2), spaces.Box(0, 1, (2,)))),
        spaces.Dict({"a": spaces.Discrete(3)}),
    ],
    ids=["MultiDiscrete", "MultiBinary", "Tuple", "Dict"],
)
def test_other_spaces_use_the_full_check(space: spaces.Space[Any]) -> None:
    space.seed(0)
    check = make_checker(space)
    for _ in range(50):
        assert check(space.sample())
    for value in (None, 99, "x", np.full(7, 9)):
        assert check(value) is (space_violation(space, value) is None)


class _SpacesEnv(ParallelEnv):  # type: ignore[misc]
    """A real ParallelEnv whose action spaces the test may swap, or build fresh on each call."""

    metadata: ClassVar[dict[str, Any]] = {"name": "spaces_v0", "render_modes": []}

    def __init__(self, fresh: bool = False) -> None:
        self.possible_agents = ["a", "b"]
        self.fresh = fresh
        self.spaces = {agent: spaces.Discrete(5, seed=i) for i, agent in enumerate("ab")}

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return spaces.Box(-1.0, 1.0, (2,), np.float32)

    def action_space(self, agent: str) -> spaces.Space[Any]:
        if self.fresh:
            return spaces.Discrete(5)
        return self.spaces[agent]

    def reset(self, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        self.agents = list(self.possible_agents)
        return {a: np.zeros(2, np.float32) for a in self.agents}, {a: {} for a in self.agents}


def test_a_changed_space_is_checked_again() -> None:
    env = _SpacesEnv()
    env.reset()
    response = MultiAgentPolicyResponse("env-0", action={"a": 4, "b": np.int64(4)})
    assert to_parallel_actions(response, env) == {"a": 4, "b": 4}
    env.spaces["b"] = spaces.Discrete(3)  # a new space object: its checker is rebuilt
    msg = "action for agent 'b' is not in Discrete(3): 4 is outside [0, 2]"
    with pytest.raises(ValueError, match=re.escape(msg)):
        to_parallel_actions(response, env)
    assert checker_cache(env)["b"][0] is env.spaces["b"]


def test_spaces_built_on_each_call_are_checked() -> None:
    env = _SpacesEnv(fresh=True)
    env.reset()
    for _ in range(3):
        assert to_parallel_actions(sample_response(env), env).keys() == {"a", "b"}
    response = MultiAgentPolicyResponse("env-0", action={"a": 5, "b": 0})
    with pytest.raises(ValueError, match=re.escape("5 is outside [0, 4]")):
        to_parallel_actions(response, env)


def test_checker_cache_is_per_env_and_dies_with_it() -> None:
    import gc
    import weakref

    first, second = _SpacesEnv(), _SpacesEnv()
    first.reset()
    second.reset()
    to_parallel_actions(sample_response(first), first)
    assert checker_cache(first).keys() == {"a", "b"}
    assert checker_cache(second) == {}
    ref = weakref.ref(first)
    key = id(first)
    assert key in _CACHES
    del first
    gc.collect()
    assert ref() is None
    assert key not in _CACHES  # the env's checkers went with it


def test_int_ranges_tables() -> None:
    space = spaces.Discrete(3, start=-1)
    ranges = int_ranges(space)
    assert ranges[int] == (-1, 1)
    assert ranges[np.int64] == ranges[np.int8] == ranges[np.uint32] == (-1, 1)
    assert bool not in ranges and np.bool_ not in ranges and np.float64 not in ranges
    if DISCRETE_HAS_DTYPE:  # a uint8 space: int8 and int64 scalars do not cast safely
        small = int_ranges(spaces.Discrete(5, start=2, dtype=np.uint8))
        assert np.int64 not in small and np.int8 not in small
        assert small[np.uint8] == small[int] == (2, 6)

    class MyDiscrete(spaces.Discrete):  # a subclass may override contains(): no table
        pass

    assert int_ranges(MyDiscrete(3)) == {}
    assert int_ranges(spaces.Box(0.0, 1.0, (2,))) == {}
    entry = cache_entry(space)
    assert entry[0] is space and entry[2] == ranges and entry[1](1) and not entry[1](2)


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_to_parallel_actions_fast_path_is_gymnasium_contains(data: st.DataObject) -> None:
    """to_parallel_actions inlines the checkers' int test (_checks.int_ranges): its verdict on
    every value is still gymnasium's, and a refused value gets the documented error."""
    space = data.draw(discrete_spaces())
    env = _SpacesEnv()
    env.spaces = {"a": spaces.Discrete(5), "b": space}
    env.reset()
    for _ in range(3):
        value = data.draw(_int_values(space))
        response = MultiAgentPolicyResponse("env-0", action={"a": 1, "b": value})
        if _contains_quietly(space, value):
            out = to_parallel_actions(response, env)
            assert out == {"a": 1, "b": value} and out["b"] is value
        else:
            with pytest.raises(
                ValueError, match=re.escape(f"action for agent 'b' is not in {space}")
            ):
                to_parallel_actions(response, env)


# ------------------------------------------------------- the checker cache of to_parallel_actions


class _EqMeta(type):
    """A metaclass defining ``__eq__`` only: Python then sets ``__hash__ = None``, so the
    *classes* it makes are unhashable (their instances are ordinary objects)."""

    def __eq__(cls, other: object) -> bool:
        return cls is other


class _Unhashable(metaclass=_EqMeta):
    """An action whose ``type()`` cannot be a dict key."""


@pytest.mark.parametrize(
    "space",
    [spaces.Discrete(5), spaces.Box(-1.0, 1.0, (2,), np.float32), spaces.MultiDiscrete([2, 2])],
    ids=["Discrete", "Box", "MultiDiscrete"],
)
def test_unhashable_action_type_is_a_value_error(
    many_agent_env: Callable[[int], Any], space: spaces.Space[Any]
) -> None:
    env = many_agent_env(1)
    env._act["agent_0"] = space
    response = MultiAgentPolicyResponse("e0", action={"agent_0": _Unhashable()})
    with pytest.raises(ValueError, match=re.escape("[rule action-in-space]")):
        to_parallel_actions(response, env)


def test_discrete_checker_unhashable_type_is_false() -> None:
    space = spaces.Discrete(5)
    assert space.contains(_Unhashable()) is False
    assert make_checker(space)(_Unhashable()) is False


def test_checker_cache_survives_env_id_reuse(many_agent_env: Callable[[int], Any]) -> None:
    # Envs created and dropped in a loop reuse addresses; each must be checked against its own
    # space, never a cached table of a dead env at the same id().
    for i in range(120):
        env = many_agent_env(1)
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


def test_space_replaced_between_steps_is_rechecked(many_agent_env: Callable[[int], Any]) -> None:
    env = many_agent_env(1)
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
