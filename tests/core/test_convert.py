"""Conversions of a response's fields: ``numpy()``, ``cpu()``, ``to()`` (``rlightning._convert``).

Each fast path skips work a value does not need; these tests pin that it gives exactly what the
general path gives, keeps objects that need no change as the very same objects, keeps the
container types (and their attributes) it rebuilds, and refuses bad input with an error naming
the field, leaving the response unchanged.
"""

from __future__ import annotations

import collections
import pickle
import re
from collections import namedtuple
from typing import Any, NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlightning import PolicyResponse
from rlightning._tree import map_leaves, map_tensors, tree_equal

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch


class Pair(NamedTuple):
    first: Any
    second: Any


def _reference_numpy(value: Any) -> Any:
    """The plain recursive conversion the fast paths must agree with."""

    def leaf(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            if x.dtype == torch.bfloat16:
                x = x.detach().float()
            return x.detach().cpu().resolve_conj().resolve_neg().numpy()
        return x

    return map_leaves(leaf, value)


# ------------------------------------------------------------------------------------ numpy()
def test_numpy_of_cpu_tensor_is_a_view_sharing_memory() -> None:
    t = torch.arange(4, dtype=torch.float32)
    r = PolicyResponse("e", action=t)
    assert r.numpy() is r
    assert isinstance(r.action, np.ndarray)
    assert r.action.dtype == np.float32
    t[0] = 42.0  # no copy was made: the array sees the tensor's memory
    assert r.action[0] == 42.0


def test_numpy_of_tensor_requiring_grad_detaches() -> None:
    t = torch.ones(3, requires_grad=True)
    r = PolicyResponse("e", value=t * 2).numpy()
    np.testing.assert_array_equal(r.value, np.full(3, 2.0, np.float32))


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [
        (torch.bfloat16, np.float32),
        (torch.float16, np.float16),
        (torch.int8, np.int8),
        (torch.bool, np.bool_),
        (torch.int64, np.int64),
    ],
)
def test_numpy_dtypes(dtype: Any, expected: Any) -> None:
    t = torch.tensor([1, 0, 1]).to(dtype)
    for r in (
        PolicyResponse("e", action=t).numpy(),
        PolicyResponse("e", action={"a": t}).numpy(),
    ):
        value = r.action if isinstance(r.action, np.ndarray) else r.action["a"]
        assert value.dtype == expected
        np.testing.assert_array_equal(value.astype(np.float64), [1.0, 0.0, 1.0])


def test_numpy_resolves_conjugate_and_negative_bits() -> None:
    z = torch.tensor([1 + 2j, 3 - 4j])
    conj = z.conj()
    neg = z.conj().imag
    assert conj.is_conj()
    assert neg.is_neg()
    r = PolicyResponse("e", conj=conj, neg=neg, nested={"conj": conj, "neg": neg}).numpy()
    np.testing.assert_array_equal(r.conj, [1 - 2j, 3 + 4j])
    np.testing.assert_array_equal(r.neg, [-2.0, 4.0])
    np.testing.assert_array_equal(r.nested["conj"], [1 - 2j, 3 + 4j])
    np.testing.assert_array_equal(r.nested["neg"], [-2.0, 4.0])


def test_numpy_error_names_the_field_top_level_and_nested() -> None:
    sparse = torch.zeros(2).to_sparse()
    msg = "numpy() failed for field 'action': TypeError: can't convert Sparse layout tensor"
    with pytest.raises(TypeError, match=re.escape(msg)):
        PolicyResponse("e", action=sparse).numpy()
    msg = "numpy() failed for field 'extra': TypeError: can't convert Sparse layout tensor"
    with pytest.raises(TypeError, match=re.escape(msg)):
        PolicyResponse("e", action=1, extra={"a": torch.zeros(1), "b": sparse}).numpy()


def test_numpy_keeps_containers_without_tensors_as_the_same_objects() -> None:
    info = {"a": 1, "b": [np.zeros(2), "x"], "c": (None, 2.5)}
    arrays = [np.zeros(2)]
    r = PolicyResponse("e", action=np.zeros(1), info=info, arrays=arrays, n=3).numpy()
    assert r.info is info
    assert r.arrays is arrays
    assert r.info["b"][0] is info["b"][0]


def test_numpy_rebuilds_only_changed_containers_and_never_mutates_them() -> None:
    t = torch.zeros(2)
    untouched = {"k": 1}
    per_agent = {"a0": t, "a1": t.clone(), "meta": untouched}
    ordered = collections.OrderedDict(x=t)
    pair = Pair(t, "s")
    seq = [1, t, (t, "y")]
    r = PolicyResponse("e", action=per_agent, od=ordered, pair=pair, seq=seq).numpy()
    # The inputs are untouched ...
    assert per_agent["a0"] is t
    assert ordered["x"] is t
    assert pair.first is t
    assert seq[1] is t
    # ... the results keep the container types, convert tensors, and keep other items as is.
    assert type(r.action) is dict
    assert r.action is not per_agent
    assert isinstance(r.action["a0"], np.ndarray)
    assert r.action["meta"] is untouched
    assert type(r.od) is collections.OrderedDict
    assert isinstance(r.od["x"], np.ndarray)
    assert type(r.pair) is Pair
    assert isinstance(r.pair.first, np.ndarray)
    assert r.pair.second == "s"
    assert type(r.seq) is list
    assert r.seq[0] == 1
    assert isinstance(r.seq[1], np.ndarray)
    assert type(r.seq[2]) is tuple
    assert isinstance(r.seq[2][0], np.ndarray)


def test_numpy_converts_tensor_subclasses() -> None:
    p = torch.nn.Parameter(torch.ones(2))
    r = PolicyResponse("e", weight=p, nested={"w": p}).numpy()
    np.testing.assert_array_equal(r.weight, [1.0, 1.0])
    np.testing.assert_array_equal(r.nested["w"], [1.0, 1.0])


# ---------------------------------------------------------------------------------- cpu(), to()
def test_cpu_keeps_cpu_tensors_and_containers_as_the_same_objects() -> None:
    t = torch.zeros(3)
    p = torch.nn.Parameter(torch.ones(1))
    per_agent = {"a": t, "b": [t, (t,)]}
    pair = Pair(t, p)
    r = PolicyResponse("e", action=t, param=p, per_agent=per_agent, pair=pair, n=1)
    assert r.cpu() is r
    assert r.action is t
    assert r.param is p
    assert r.per_agent is per_agent
    assert r.pair is pair
    assert r.to("cpu") is r
    assert r.to("cpu", non_blocking=True) is r
    assert r.to(torch.device("cpu")) is r
    assert r.action is t
    assert r.per_agent is per_agent


def test_cpu_error_names_the_field_top_level_and_nested() -> None:
    # A meta tensor has no data to copy: torch's NotImplementedError becomes a RuntimeError.
    meta = torch.zeros(2, device="meta")
    msg = "to('cpu') failed for field 'action': NotImplementedError: Cannot copy out of meta"
    with pytest.raises(RuntimeError, match=re.escape(msg)):
        PolicyResponse("e", action=meta).cpu()
    msg = "to('cpu') failed for field 'extra': NotImplementedError: Cannot copy out of meta"
    with pytest.raises(RuntimeError, match=re.escape(msg)):
        PolicyResponse("e", action=1, extra=[torch.zeros(1), meta]).to("cpu", non_blocking=True)


# --------------------------------------------------------------------------------- properties
_leaves = st.one_of(
    st.integers(-5, 5),
    st.none(),
    st.text(max_size=3),
    st.builds(lambda n: np.arange(n, dtype=np.float32), st.integers(0, 3)),
    st.builds(lambda n: torch.arange(n, dtype=torch.float32), st.integers(0, 3)),
    st.builds(lambda n: torch.arange(n, dtype=torch.int64), st.integers(0, 3)),
    st.builds(lambda n: torch.ones(n, requires_grad=True) * 2, st.integers(0, 3)),
    st.builds(lambda n: torch.ones(n, dtype=torch.bfloat16), st.integers(0, 3)),
)
_trees = st.recursive(
    _leaves,
    lambda children: st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=2), children, max_size=3),
        st.builds(Pair, children, children),
        st.dictionaries(st.text(max_size=2), children, max_size=3).map(collections.OrderedDict),
    ),
    max_leaves=8,
)


def _has_tensor(value: Any) -> bool:
    found: list[bool] = []

    def visit(x: Any) -> Any:
        found.append(isinstance(x, torch.Tensor))
        return x

    map_leaves(visit, value)
    return any(found)


@settings(max_examples=150, deadline=None)
@given(tree=_trees)
def test_numpy_agrees_with_the_plain_recursive_conversion(tree: Any) -> None:
    expected = _reference_numpy(tree)
    r = PolicyResponse("e", field=tree).numpy()
    assert tree_equal(r.field, expected)
    if not _has_tensor(tree):
        assert r.field is tree


@settings(max_examples=150, deadline=None)
@given(tree=_trees)
def test_cpu_of_cpu_structures_changes_nothing(tree: Any) -> None:
    r = PolicyResponse("e", field=tree).cpu()
    assert r.field is tree


@settings(max_examples=100, deadline=None)
@given(tree=_trees)
def test_map_tensors_agrees_with_map_leaves(tree: Any) -> None:
    def double(x: Any) -> Any:
        return x * 2 if isinstance(x, torch.Tensor) else x

    expected = map_leaves(double, tree)
    got = map_tensors(double, tree, torch.Tensor)
    assert tree_equal(got, expected)
    if not _has_tensor(tree):
        assert got is tree


def test_cpu_in_a_fresh_process_does_not_skip_tensors_before_the_type_is_cached() -> None:
    # cpu()'s inline check compares types with a cached torch.Tensor that the first conversion
    # fills in; before that, a tensor must take the full path (here: a meta tensor refused).
    import subprocess
    import sys

    code = (
        "import torch\n"
        "from rlightning import PolicyResponse\n"
        "from rlightning import _convert\n"
        "assert _convert._tensor is None\n"
        "r = PolicyResponse('e', action=torch.zeros(2, device='meta'))\n"
        "try:\n"
        "    r.cpu()\n"
        "except RuntimeError as exc:\n"
        "    assert \"field 'action'\" in str(exc), exc\n"
        "else:\n"
        "    raise SystemExit('cpu() kept a meta tensor')\n"
        "assert _convert._tensor is torch.Tensor\n"
        "t = torch.zeros(2)\n"
        "r = PolicyResponse('e', action=t, n=None)\n"
        "assert r.cpu() is r and r.action is t\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------- unusual values and failed conversions
def _self_referential_list() -> list[Any]:
    cycle: list[Any] = [1]
    cycle.append(cycle)
    return cycle


Base = namedtuple("Base", ["x", "y"])


class _Tagged(Base):
    """A namedtuple subclass with an extra instance attribute."""

    tag: str

    def __new__(cls, x: Any, y: Any, tag: str = "default") -> _Tagged:
        self = super().__new__(cls, x, y)
        self.tag = tag
        return self


@pytest.mark.torch
def test_numpy_keeps_namedtuple_subclass_attributes() -> None:
    response = PolicyResponse("env-0", v=_Tagged(torch.ones(2), 1, tag="important"))
    try:
        response.numpy()
    except TypeError as exc:  # refusing, naming the field, is acceptable; dropping is not
        refusal = str(exc)
    else:
        refusal = ""
    if refusal:
        assert "'v'" in refusal
        return
    assert isinstance(response.v.x, np.ndarray)
    assert response.v.tag == "important"


@pytest.mark.torch
def test_conversions_on_self_referential_field() -> None:
    for convert in ("numpy", "cpu"):
        response = PolicyResponse("env-0", x=_self_referential_list())
        try:
            getattr(response, convert)()
        except ValueError as exc:  # a clear error naming the field is acceptable
            refusal = str(exc)
        else:
            refusal = ""
        assert not refusal or "'x'" in refusal


@pytest.mark.torch
def test_failed_numpy_leaves_response_unchanged() -> None:
    response = PolicyResponse("env-0", a=torch.ones(2), b=torch.zeros(3).to_sparse())
    with pytest.raises(TypeError, match="'b'"):
        response.numpy()
    assert isinstance(response.a, torch.Tensor)


@pytest.mark.torch
@pytest.mark.parametrize("kind", ["meta", "nested", "float4"])
def test_numpy_unconvertible_tensor_is_type_error(kind: str) -> None:
    if kind == "meta":
        value = torch.zeros(3, device="meta")
    elif kind == "nested":
        value = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    else:
        if not hasattr(torch, "float4_e2m1fn_x2"):
            pytest.skip("torch has no float4_e2m1fn_x2")
        value = torch.zeros(3, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    with pytest.raises(TypeError, match="'x'"):
        PolicyResponse("env-0", x=value).numpy()


@pytest.mark.torch
def test_to_cuda_without_a_gpu_names_the_field() -> None:
    if torch.cuda.is_available():  # a CPU-only build and a CUDA build without a GPU both refuse
        pytest.skip("a GPU is visible, so moving to 'cuda' succeeds and there is no error to test")
    response = PolicyResponse("env-0", x=torch.ones(2))
    with pytest.raises(RuntimeError, match="'x'"):
        response.to("cuda")


@pytest.mark.torch
def test_dict_and_list_subclasses_with_required_init_args_survive_numpy() -> None:

    class Owned(dict[str, Any]):
        def __init__(self, owner: str, **items: Any) -> None:
            super().__init__(**items)
            self.owner = owner

    class Named(list[Any]):
        def __init__(self, items: list[Any], name: str) -> None:
            super().__init__(items)
            self.name = name

    response = PolicyResponse(
        "env-0", d=Owned("me", t=torch.ones(2)), l=Named([torch.ones(1)], "n")
    )
    response.numpy()
    assert type(response.d) is Owned and response.d.owner == "me"
    assert isinstance(response.d["t"], np.ndarray)
    assert type(response.l) is Named and response.l.name == "n"
    assert isinstance(response.l[0], np.ndarray)


@pytest.mark.torch
def test_tensor_edge_cases_through_numpy_pickle_eq() -> None:
    values = {
        "grad": torch.ones(3, requires_grad=True) * 2,
        "noncontig": torch.arange(12.0).reshape(3, 4).t(),
        "expanded": torch.zeros(1).expand(5),
        "conj": torch.tensor([1 + 1j]).conj(),
        "bool": torch.tensor([True, False]),
        "nan_bf16": torch.tensor([float("nan")], dtype=torch.bfloat16),
        "empty": torch.zeros(0, 3),
        "scalar": torch.tensor(1.5),
    }
    response = PolicyResponse("env-0", **values)
    assert pickle.loads(pickle.dumps(response)) == response
    response.numpy()
    for name, tensor in values.items():
        assert isinstance(getattr(response, name), np.ndarray), name
        np.testing.assert_array_equal(
            getattr(response, name),
            tensor.detach().resolve_conj().float().numpy()
            if tensor.dtype == torch.bfloat16
            else tensor.detach().resolve_conj().numpy(),
        )
