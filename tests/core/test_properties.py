"""Property tests of the core: gymnasium-space round trips, and any value hypothesis can build.

Part 1: make_example -> numpy() -> cpu() -> pickle round trip -> equal to what went in; and with
torch, tensors made from the sampled arrays come back through numpy() equal to the samples.

Part 2: ``repr``, ``==``, ``to_dict``, ``numpy()``, ``stack``, ``unbind`` and the wire format
(``to_bytes``, then ``repr``/``unbind``/``stack`` of what ``from_bytes`` gives) on any value: huge
ints, NaN, object arrays, zero-size arrays with huge dimensions, numpy scalars, subclasses of
dict/list/tuple/str/ndarray, containers that contain themselves, torch tensors. Each either works
without changing the data or raises a documented TypeError/ValueError that names the field; and
``repr`` is bounded: at most ``MAX_REPR_CHARS`` characters per field, at most 64 values looked
at (counted below with leaves that count their own ``repr`` calls), bounded peak memory.
"""

from __future__ import annotations

import contextlib
import copy
import importlib.util
import pickle
import sys
import tracemalloc
from collections import OrderedDict, namedtuple
from collections.abc import Iterator
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from benchmarks.fuzz_wire import check_decoded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlightning import MultiAgentPolicyResponse, PerEnv, PolicyResponse
from rlightning._tree import MAX_REPR_CHARS, map_leaves, tree_equal, tree_repr

HAS_TORCH = importlib.util.find_spec("torch") is not None

shapes = st.lists(st.integers(1, 4), min_size=0, max_size=3).map(tuple)

box = st.builds(
    lambda shape, dtype, seed: gym.spaces.Box(
        low=0 if dtype == np.uint8 else -2, high=3, shape=shape, dtype=dtype, seed=seed
    ),
    shapes,
    st.sampled_from([np.float32, np.float64, np.int64, np.uint8]),
    st.integers(0, 2**16),
)
discrete = st.builds(
    lambda n, start, seed: gym.spaces.Discrete(n, start=start, seed=seed),
    st.integers(1, 10),
    st.integers(-3, 3),
    st.integers(0, 2**16),
)
multi_discrete = st.builds(
    lambda nvec, seed: gym.spaces.MultiDiscrete(nvec, seed=seed),
    st.lists(st.integers(1, 5), min_size=1, max_size=4),
    st.integers(0, 2**16),
)
multi_binary = st.builds(
    lambda n, seed: gym.spaces.MultiBinary(n, seed=seed), st.integers(1, 6), st.integers(0, 2**16)
)
text = st.builds(
    lambda n, seed: gym.spaces.Text(n, seed=seed), st.integers(1, 8), st.integers(0, 2**16)
)
leaf_spaces = st.one_of(box, discrete, multi_discrete, multi_binary, text)
names = st.text(alphabet="abcdefgh_", min_size=1, max_size=5)


def _extend(children: st.SearchStrategy[gym.Space[Any]]) -> st.SearchStrategy[gym.Space[Any]]:
    return st.one_of(
        st.dictionaries(names, children, min_size=1, max_size=3).map(gym.spaces.Dict),
        st.lists(children, min_size=1, max_size=3).map(lambda s: gym.spaces.Tuple(tuple(s))),
    )


spaces = st.recursive(leaf_spaces, _extend, max_leaves=8)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    space=spaces,
    env_id=st.one_of(st.none(), st.text(max_size=5)),
    protocol=st.sampled_from([2, 4, 5]),
)
def test_make_example_conversions_pickle_round_trip(space, env_id, protocol):
    response = PolicyResponse.make_example(space, env_id, value=np.float32(0.5))
    reference = copy.deepcopy(response)
    assert space.contains(response.action)
    assert response.numpy() is response
    assert response.cpu() is response
    back = pickle.loads(pickle.dumps(response, protocol=protocol))
    assert back == reference
    assert back.to_dict().keys() == {"action", "value"}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(agent_spaces=st.dictionaries(names, spaces, min_size=1, max_size=4))
def test_multi_agent_make_example_split_and_rebuild(agent_spaces):
    response = MultiAgentPolicyResponse.make_example(agent_spaces, "env")
    parts = {agent: response.for_agent(agent) for agent in response.agent_ids}
    for agent, part in parts.items():
        assert agent_spaces[agent].contains(part.action)
    rebuilt = MultiAgentPolicyResponse.from_agents("env", parts)
    assert rebuilt == response
    assert pickle.loads(pickle.dumps(rebuilt, 5)) == response


@pytest.mark.torch
@pytest.mark.skipif(not HAS_TORCH, reason="torch is not installed (core-notorch env)")
@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(space=spaces)
def test_tensors_of_samples_come_back_through_numpy(space):
    import torch

    sample = space.sample()

    def to_tensor(leaf: Any) -> Any:
        if isinstance(leaf, np.ndarray) and leaf.dtype != np.uint16:
            return torch.from_numpy(leaf.copy())
        return leaf

    response = PolicyResponse("e", action=map_leaves(to_tensor, sample))
    restored = pickle.loads(pickle.dumps(response, 5)).cpu().numpy()
    assert restored == PolicyResponse("e", action=sample)


# ----------------------------------------------------------- any value hypothesis can build
class StrSub(str):
    """A str subclass (its repr is str's)."""


class ListSub(list):  # type: ignore[type-arg]
    """A list subclass with an extra attribute."""

    tag = "list-sub"


class DictSub(dict):  # type: ignore[type-arg]
    """A dict subclass."""


class ArraySub(np.ndarray):  # type: ignore[type-arg]
    """An ndarray subclass (what ``view(ArraySub)`` gives)."""


Pair = namedtuple("Pair", ["first", "second"])

_NUMERIC = st.sampled_from(["bool", "int8", "uint16", "int64", "float16", "float32", "float64",
                            "complex128"])  # fmt: skip
_huge_empty_shape = st.builds(
    lambda dims, big, at: [*dims[:at], big, *dims[at:]],
    st.lists(st.sampled_from([0, 1, 3]), min_size=1, max_size=3).filter(lambda dims: 0 in dims),
    st.sampled_from([1 << 20, 1 << 30]),
    st.integers(0, 3),
)  # one huge dimension beside a zero-size one: no memory, but 2**30 empty rows


def _object_array(items: list[Any]) -> np.ndarray[Any, Any]:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(300, 20_000).map(lambda bits: 7 - (1 << bits)),  # past repr's 4300 digits
    st.floats(),  # NaN and infinities included
    st.complex_numbers(),
    st.text(max_size=5),
    st.text(min_size=200, max_size=300),
    st.binary(max_size=300),
    st.text(max_size=5).map(StrSub),
    hnp.arrays(_NUMERIC, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)),
    hnp.arrays(_NUMERIC, hnp.array_shapes(max_dims=2, max_side=3)).map(lambda a: a.view(ArraySub)),
    _NUMERIC.flatmap(lambda d: hnp.from_dtype(np.dtype(d))),  # numpy scalars
    st.builds(lambda dims, d: np.zeros(dims, d), _huge_empty_shape, _NUMERIC),
    st.lists(st.one_of(st.integers(), st.floats(), st.text(max_size=3)), max_size=10).map(
        _object_array
    ),
    st.builds(lambda n: np.ma.masked_array(np.arange(n), mask=np.arange(n) % 2), st.integers(0, 9)),
)
_keys = st.one_of(st.text(max_size=4), st.integers(), st.tuples(st.integers(-2, 2), st.text()))


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(inner, max_size=12),
        st.lists(inner, max_size=4).map(tuple),
        st.lists(inner, max_size=4).map(ListSub),
        st.lists(inner, max_size=4).map(PerEnv),
        st.builds(Pair, inner, inner),
        st.dictionaries(_keys, inner, max_size=12),
        st.dictionaries(_keys, inner, max_size=4).map(DictSub),
        st.dictionaries(_keys, inner, max_size=4).map(OrderedDict),
    )


def _with_cycle(value: Any) -> Any:
    """``value`` inside a list that also contains itself, and a dict that contains itself."""
    outer: list[Any] = [value]
    outer.append(outer)
    mapping: dict[str, Any] = {"v": value}
    mapping["self"] = mapping
    return [outer, mapping]


_values = st.recursive(_leaves, _containers, max_leaves=40)
_any_values = st.one_of(_values, _values.map(_with_cycle))
FIELD = "fld"


def _check_explained(exc: Exception) -> None:
    """A refusal must be a TypeError/ValueError whose message names the field."""
    assert isinstance(exc, (TypeError, ValueError)), f"unexplained {type(exc).__name__}: {exc}"
    assert FIELD in str(exc), f"the message does not name the field: {exc}"


def _snapshot(value: Any) -> Any:
    return copy.deepcopy(value)


def _check_any_value(value: Any, extra: dict[str, Any]) -> None:
    response = PolicyResponse("e", **{FIELD: value}, **extra)
    before = _snapshot(value)
    assert tree_equal(before, value)  # a value always equals its own deep copy

    tracemalloc.start()
    try:
        text = repr(response)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(text) <= (MAX_REPR_CHARS + 100) * (len(vars(response)) + 1)
    assert peak < 4 << 20
    assert response == response
    assert response == PolicyResponse("e", **{FIELD: before}, **extra)
    assert not response == PolicyResponse("other", **{FIELD: before}, **extra)  # noqa: SIM201
    assert response.to_dict() == {FIELD: value}  # the stamps are left out
    assert response.to_dict()[FIELD] is value

    try:
        assert response.numpy() is response
    except Exception as exc:
        _check_explained(exc)
    # numpy() converts tensors only: everything else is the very same object
    if not _has_tensor(before):
        assert getattr(response, FIELD) is value
    assert tree_equal(_numpy_view(before), _numpy_view(getattr(response, FIELD)))

    rows = [PolicyResponse(f"e{i}", **{FIELD: copy.deepcopy(value)}, **extra) for i in range(2)]
    try:
        stacked = PolicyResponse.stack(rows)
    except Exception as exc:
        _check_explained(exc)
    else:
        assert PolicyResponse.unbind(stacked) == rows
    assert tree_equal(getattr(rows[0], FIELD), _numpy_view(before)) or _has_tensor(before)


def _has_tensor(value: Any) -> bool:
    found = []

    def visit(leaf: Any) -> Any:
        if type(leaf).__module__.startswith("torch"):
            found.append(leaf)
        return leaf

    try:
        map_leaves(visit, value)
    except RecursionError:
        return False
    return bool(found)


def _numpy_view(value: Any) -> Any:
    """``value`` with tensors as numpy arrays (what numpy() documents: bfloat16 -> float32)."""

    def convert(leaf: Any) -> Any:
        if not _is_plain_tensor(leaf):
            return leaf
        leaf = leaf.detach().cpu()
        return (leaf.float() if str(leaf.dtype) == "torch.bfloat16" else leaf).numpy()

    try:
        return map_leaves(convert, value)
    except RecursionError:
        return value


def _is_plain_tensor(leaf: Any) -> bool:
    return type(leaf).__module__.startswith("torch") and hasattr(leaf, "detach")


@pytest.fixture
def unlimited_int_digits() -> Iterator[None]:
    """Let hypothesis print a failing example holding a huge int (tree_repr never needs this)."""
    previous = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        yield
    finally:
        sys.set_int_max_str_digits(previous)


@pytest.mark.usefixtures("unlimited_int_digits")
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=_any_values, stamp=st.integers(0, 2**63))
def test_any_value_repr_eq_to_dict_numpy_stack_unbind(value: Any, stamp: int) -> None:
    _check_any_value(value, {"ts_env_sent_ns": stamp})


def _check_through_the_wire(value: Any, extra: dict[str, Any]) -> None:
    """``value`` in a response and in a stack of 3, each through to_bytes / from_bytes.

    The encoder either refuses (a TypeError/ValueError naming the field) or writes a message
    that decodes; what decodes then goes through ``check_decoded``: ``repr``, ``unbind()`` (its
    peak within docs/transport.md's bound, relative to the message size), ``stack`` and
    re-encoding to an equal response.
    """
    candidates = [PolicyResponse("e", **{FIELD: value}, **extra)]
    rows = [PolicyResponse(f"e{i}", **{FIELD: copy.deepcopy(value)}, **extra) for i in range(3)]
    with contextlib.suppress(TypeError, ValueError, RecursionError):  # checked elsewhere
        candidates.append(PolicyResponse.stack(rows))
    for response in candidates:
        try:
            data = response.to_bytes()
        except Exception as exc:
            _check_explained(exc)
            continue
        decoded = PolicyResponse.from_bytes(data)
        assert set(vars(decoded)) == set(vars(response))
        check_decoded(decoded, len(data))


#: Values the wire format carries (most of ``_any_values`` hold a leaf it refuses): its leaves,
#: zero-size arrays with huge dimensions among them, in plain containers.
_wire_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.integers(14_000, 14_300).map(lambda bits: (1 << bits) - 1),  # near the 4,300-digit bound
    st.floats(),
    st.complex_numbers(),
    st.text(max_size=5),
    st.binary(max_size=30),
    hnp.arrays(_NUMERIC, hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)),
    _NUMERIC.flatmap(lambda d: hnp.from_dtype(np.dtype(d))),
    st.builds(lambda dims, d: np.zeros(dims, d), _huge_empty_shape, _NUMERIC),
    st.builds(lambda n, d: np.zeros((n, 0), d), st.sampled_from([3, 4096, 65536]), _NUMERIC),
)
_wire_values = st.recursive(
    _wire_leaves,
    lambda inner: st.one_of(
        st.lists(inner, max_size=12),
        st.lists(inner, max_size=4).map(tuple),
        st.lists(inner, max_size=4).map(PerEnv),
        st.dictionaries(_keys, inner, max_size=12),
    ),
    max_leaves=30,
)


@pytest.mark.usefixtures("unlimited_int_digits")
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=st.one_of(_wire_values, _any_values), stamp=st.integers(0, 2**63))
def test_any_value_through_the_wire_then_repr_unbind_stack_stay_bounded(
    value: Any, stamp: int
) -> None:
    _check_through_the_wire(value, {"ts_env_sent_ns": stamp})


_tensor_dtypes = ["bool", "uint8", "int64", "float16", "bfloat16", "float32", "complex64"]


@pytest.mark.torch
@pytest.mark.usefixtures("unlimited_int_digits")
@settings(max_examples=80, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_any_value_with_tensors_repr_eq_to_dict_numpy_stack_unbind(data: st.DataObject) -> None:
    torch = pytest.importorskip("torch")
    dims = st.one_of(
        st.lists(st.integers(0, 4), max_size=3), _huge_empty_shape.filter(lambda d: len(d) <= 3)
    )
    tensors = st.builds(
        lambda shape, dtype, grad: torch.zeros(shape, dtype=getattr(torch, dtype)).requires_grad_(
            grad and dtype in ("float32", "float16", "bfloat16", "complex64")
        ),
        dims,
        st.sampled_from(_tensor_dtypes),
        st.booleans(),
    )
    value = data.draw(st.recursive(st.one_of(_leaves, tensors), _containers, max_leaves=20))
    if data.draw(st.booleans()):
        value = _with_cycle(value)
    _check_any_value(value, {})
    _check_through_the_wire(value, {})


class _CountingLeaf:
    """A leaf that counts how often its repr is asked for."""

    calls = 0

    def __repr__(self) -> str:
        type(self).calls += 1
        return "leaf"


def test_repr_looks_at_a_bounded_number_of_values() -> None:
    leaf = _CountingLeaf()
    wide = [leaf] * 10_000
    deep: Any = leaf
    for _ in range(500):
        deep = [deep, deep]  # a DAG of 2**500 paths to the leaf
    for value in (wide, {i: wide for i in range(1000)}, deep, [[wide] * 100] * 100):
        _CountingLeaf.calls = 0
        text = tree_repr(value)
        assert _CountingLeaf.calls <= 64
        assert len(text) <= MAX_REPR_CHARS
    assert "...(+9992 more)" in tree_repr(wide)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (2**20000, "<int of 20001 bits>"),
        (np.zeros((1 << 30, 0), dtype=bool), "array(shape=(1073741824, 0), dtype=bool)"),
        (np.arange(3).view(ArraySub), "ArraySub([0, 1, 2], dtype=int64)"),
        ("x" * 10_000, "'xxxxxxxx"),
        (StrSub("abc"), "'abc'"),
        (frozenset(), "frozenset()"),
    ],
    ids=["huge-int", "huge-empty-array", "ndarray-subclass", "long-str", "str-subclass", "set"],
)
def test_repr_of_awkward_leaves(value: Any, shown: str) -> None:
    text = tree_repr(value)
    assert shown in text and len(text) <= 130


def test_repr_of_a_value_whose_repr_fails_names_its_type() -> None:
    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    assert tree_repr([Broken()]) == "[<Broken (repr failed: RuntimeError)>]"
    assert "repr failed" in repr(PolicyResponse("e", b=Broken()))
