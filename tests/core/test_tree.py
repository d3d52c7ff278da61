"""Equality and repr of responses: the leaf walk of ``rlightning._tree``.

``==`` never raises, returns a bool, and finds a value equal to its own copy (NaN, NaT and cycles
included); ``repr`` is bounded and survives containers that contain themselves and tensors of
any layout.
"""

from __future__ import annotations

import copy
import pickle
from collections import OrderedDict, namedtuple
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

from rlightning import MultiAgentPolicyResponse, PolicyResponse

Hidden = namedtuple("Hidden", ["h", "c"])


def _torch() -> ModuleType:
    module: ModuleType = pytest.importorskip("torch", reason="torch is not installed")
    return module


class _MyFloat(float):
    """A float subclass (picklable: defined at module level)."""


def _self_referential_list() -> list[Any]:
    cycle: list[Any] = [1]
    cycle.append(cycle)
    return cycle


def _self_referential_dict() -> dict[str, Any]:
    cycle: dict[str, Any] = {"a": 1}
    cycle["self"] = cycle
    return cycle


# ---------------------------------------------------------------------------------------- equality
def test_equality_compares_class_env_id_fields():
    a = PolicyResponse("e", action=np.array([1, 2]), value=np.float32(0.5))
    assert a == PolicyResponse("e", action=np.array([1, 2]), value=np.float32(0.5))
    assert a != PolicyResponse("f", action=np.array([1, 2]), value=np.float32(0.5))
    assert a != PolicyResponse("e", action=np.array([1, 3]), value=np.float32(0.5))
    assert a != PolicyResponse("e", action=np.array([1, 2], dtype=np.int32), value=np.float32(0.5))
    assert a != PolicyResponse("e", action=np.array([[1, 2]]), value=np.float32(0.5))
    assert a != PolicyResponse("e", action=np.array([1, 2]))
    assert a != MultiAgentPolicyResponse("e", action={"x": 1})
    assert a != {"action": np.array([1, 2])}


def test_equality_never_raises_ambiguous_truth_value():
    a = PolicyResponse("e", action=np.ones((2, 2)))
    b = PolicyResponse("e", action=np.ones((2, 2)))
    assert (a == b) is True
    assert (a != b) is False


def test_equality_nan_and_nested_types():
    a = PolicyResponse("e", x=np.array([np.nan, 1.0]), y=float("nan"), h=Hidden(np.zeros(1), [1]))
    b = PolicyResponse("e", x=np.array([np.nan, 1.0]), y=float("nan"), h=Hidden(np.zeros(1), [1]))
    assert a == b
    assert PolicyResponse("e", h=(1, 2)) != PolicyResponse("e", h=[1, 2])
    assert PolicyResponse("e", h=Hidden(1, 2)) != PolicyResponse("e", h=(1, 2))


def test_equality_with_object_arrays_and_custom_eq():
    class Weird:
        def __eq__(self, other):
            raise RuntimeError("cannot compare")

    w = Weird()
    assert PolicyResponse("e", x=w) == PolicyResponse("e", x=w)  # same object
    assert PolicyResponse("e", x=Weird()) != PolicyResponse("e", x=Weird())
    objs = np.array([np.zeros(2), np.ones(3)], dtype=object)
    objs2 = np.array([np.zeros(2), np.ones(3)], dtype=object)
    assert PolicyResponse("e", x=objs) == PolicyResponse("e", x=objs2)


def test_eq_with_plain_simplenamespace() -> None:
    response = PolicyResponse("env-0", action=1)
    plain = SimpleNamespace(env_id="env-0", action=1)
    assert (response == plain) is False
    assert (plain == response) is False
    with_array = PolicyResponse("env-0", action=np.arange(3))
    assert (with_array == SimpleNamespace(env_id="env-0", action=np.arange(3))) is False


def test_eq_self_referential_copy() -> None:
    response = PolicyResponse("env-0", x=_self_referential_list())
    assert response == pickle.loads(pickle.dumps(response))


@pytest.mark.parametrize(
    "value",
    [
        complex("nan"),
        _MyFloat("nan"),
        np.datetime64("NaT"),
        np.array(["NaT"], dtype="datetime64[s]"),
        np.array([float("nan"), None], dtype=object),
        np.array([(np.nan, 1)], dtype=[("a", "f8"), ("b", "i4")]),
    ],
    ids=["complex", "float-subclass", "NaT", "NaT-array", "object-array", "structured-array"],
)
def test_nan_equal_to_its_own_copy(value: Any) -> None:
    assert PolicyResponse("env-0", x=value) == copy.deepcopy(PolicyResponse("env-0", x=value))
    response = PolicyResponse("env-0", x=value)
    assert response == pickle.loads(pickle.dumps(response))


def test_masked_arrays_with_different_masks_differ() -> None:
    a = PolicyResponse("env-0", x=np.ma.masked_array([1, 2], mask=[False, True]))
    b = PolicyResponse("env-0", x=np.ma.masked_array([1, 2], mask=[False, False]))
    assert a != b


@pytest.mark.torch
def test_eq_object_array_of_tensors_does_not_raise() -> None:
    torch = _torch()

    def make(second: float) -> np.ndarray[Any, Any]:
        out = np.empty(2, dtype=object)
        out[0], out[1] = torch.ones(3), torch.full((3,), second)
        return out

    assert PolicyResponse("env-0", x=make(0.0)) == PolicyResponse("env-0", x=make(0.0))
    assert PolicyResponse("env-0", x=make(0.0)) != PolicyResponse("env-0", x=make(1.0))


def _sparse_coo() -> Any:
    return _torch().zeros(3).to_sparse()


def _sparse_csr() -> Any:
    return _torch().eye(3).to_sparse_csr()


def _nested() -> Any:
    torch = _torch()
    return torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])


def _meta() -> Any:
    return _torch().zeros(3, device="meta")


@pytest.mark.torch
@pytest.mark.parametrize("make", [_sparse_coo, _sparse_csr, _nested, _meta])
def test_eq_never_raises_on_tensor_layouts(make: Any) -> None:
    response = PolicyResponse("env-0", x=make())
    restored = pickle.loads(pickle.dumps(response))
    result = response == restored
    assert isinstance(result, bool)
    if make is not _meta:  # a meta tensor has no values to compare
        assert result is True


# -------------------------------------------------------------------------------------------- repr
def test_repr_summarises_big_arrays_and_shows_small_ones():
    r = PolicyResponse("e", action=np.array([1, 2]), obs=np.zeros((64, 64), dtype=np.float32))
    text = repr(r)
    assert text == (
        "PolicyResponse(env_id='e', action=array([1, 2], dtype=int64), "
        "obs=array(shape=(64, 64), dtype=float32))"
    )
    assert len(repr(PolicyResponse("e", obs=np.zeros(10**6)))) < 100


def test_repr_nested_containers():
    r = PolicyResponse(
        None, state=Hidden(h=np.zeros(100), c=[1]), d=OrderedDict(a=1), t=(1,), text="x" * 500
    )
    text = repr(r)
    assert "state=Hidden(h=array(shape=(100,), dtype=float64), c=[1])" in text
    assert "d=OrderedDict({'a': 1})" in text
    assert "t=(1,)" in text
    assert len(text) < 300


@pytest.mark.parametrize("make", [_self_referential_list, _self_referential_dict])
def test_repr_of_self_referential_container(make: Any) -> None:
    text = repr(PolicyResponse("env-0", x=make()))
    assert text.startswith("PolicyResponse(env_id='env-0', x=")
    assert "..." in text


def test_repr_of_response_holding_itself() -> None:
    response = PolicyResponse("env-0", action=1)
    response.me = response
    assert repr(response).startswith("PolicyResponse(env_id='env-0', action=1, me=")


def test_repr_is_bounded_for_big_containers() -> None:
    assert len(repr(PolicyResponse("env-0", x=list(range(100_000))))) < 10_000
    assert len(repr(PolicyResponse("env-0", x={i: i for i in range(100_000)}))) < 10_000


@pytest.mark.torch
@pytest.mark.parametrize(
    "kind",
    [
        "sparse_coo",
        "nested_strided",
        "nested_jagged",
        "float4",
    ],
)
def test_repr_never_raises_on_tensor_kinds(kind: str) -> None:
    torch = _torch()
    if kind == "sparse_coo":
        value = torch.zeros(3).to_sparse()
    elif kind == "nested_strided":
        value = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    elif kind == "nested_jagged":
        value = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)], layout=torch.jagged)
    else:
        if not hasattr(torch, "float4_e2m1fn_x2"):
            pytest.skip("torch has no float4_e2m1fn_x2")
        value = torch.zeros(3, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    text = repr(PolicyResponse("env-0", x=value))
    assert text.startswith("PolicyResponse(env_id='env-0', x=tensor(")
