"""Pickling and copying responses (``rlightning._pickle``).

Protocol 5 out-of-band buffers alias the response's own memory; cycles, user subclasses, str
subclasses as env ids and exotic tensor dtypes survive pickle, copy and deepcopy.
"""

from __future__ import annotations

import copy
import copyreg
import pickle
import time
import warnings
from collections import namedtuple
from typing import Any

import numpy as np
import pytest

from rlightning import MultiAgentPolicyResponse, PerEnv, PolicyResponse

Hidden = namedtuple("Hidden", ["h", "c"])


def _address(buffer: pickle.PickleBuffer) -> int:
    """Start address of the memory a PickleBuffer exposes."""
    raw = buffer.raw()
    return (
        int(np.frombuffer(raw, dtype=np.uint8).__array_interface__["data"][0]) if raw.nbytes else 0
    )


def _dumps_oob(obj: Any) -> tuple[bytes, list[pickle.PickleBuffer]]:
    buffers: list[pickle.PickleBuffer] = []
    data = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    return data, buffers


def test_numpy_fields_travel_out_of_band_without_copy() -> None:
    action = np.arange(1000, dtype=np.float32)
    nested = {"obs": [np.ones((8, 8)), (np.zeros(3, dtype=np.int8), "tag")]}
    response = PolicyResponse("env-0", action=action, nested=nested, value=0.5)
    data, buffers = _dumps_oob(response)
    addresses = {_address(b) for b in buffers}
    assert addresses == {
        action.ctypes.data,
        nested["obs"][0].ctypes.data,
        nested["obs"][1][0].ctypes.data,
    }
    assert len(data) < 1024  # only the structure is in band
    back = pickle.loads(data, buffers=buffers)
    assert back == response
    assert type(back) is PolicyResponse
    assert back.env_id == "env-0"
    assert np.shares_memory(back.action, action)  # loaded on the very same memory


def test_in_band_pickling_and_copies_still_work() -> None:
    response = MultiAgentPolicyResponse(
        "e", action={"a": np.array([1]), "b": np.array([2])}, stacked=PerEnv([1, 2])
    )
    for protocol in range(pickle.HIGHEST_PROTOCOL + 1):
        assert pickle.loads(pickle.dumps(response, protocol=protocol)) == response
    try:
        import cloudpickle  # what Ray uses; optional here
    except ImportError:
        pass
    else:
        assert cloudpickle.loads(cloudpickle.dumps(response)) == response
    assert copy.copy(response) == response
    deep = copy.deepcopy(response)
    assert deep == response
    assert not np.shares_memory(deep.action["a"], response.action["a"])


def test_stacked_response_pickles_with_its_env_ids() -> None:
    stacked = PolicyResponse.stack(
        [PolicyResponse(f"e{i}", log_prob=np.array(i * 1.0)) for i in range(3)]
    )
    back = pickle.loads(pickle.dumps(stacked, protocol=5))
    assert back.env_ids.array_rows == stacked.env_ids.array_rows
    assert back.unbind() == stacked.unbind()


_TORCH_DTYPES = [
    "float32",
    "float64",
    "float16",
    "bfloat16",
    "int64",
    "int8",
    "uint8",
    "bool",
    "complex64",
    "complex32",
    "float8_e4m3fn",
    "float8_e5m2",
]


@pytest.mark.torch
@pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")
@pytest.mark.parametrize("dtype_name", _TORCH_DTYPES)
def test_cpu_tensors_travel_out_of_band_without_copy(dtype_name: str) -> None:
    import torch

    dtype = getattr(torch, dtype_name)
    source = torch.randn(64, 3, dtype=torch.float32)
    tensor = (
        source.to(dtype) if dtype is not torch.complex32 else source.to(torch.complex64).to(dtype)
    )
    response = PolicyResponse("env-1", action=tensor, nested={"h": [tensor[1:5]]})
    data, buffers = _dumps_oob(response)
    addresses = sorted(_address(b) for b in buffers)
    expected = sorted([tensor.data_ptr(), tensor[1:5].data_ptr()])
    assert addresses == expected  # the buffers alias the tensors' own memory
    assert sum(b.raw().nbytes for b in buffers) == (64 + 4) * 3 * tensor.element_size()
    back = pickle.loads(data, buffers=buffers)
    assert back.action.dtype == dtype
    assert back.action.data_ptr() == tensor.data_ptr()  # rebuilt on the same memory
    assert torch.equal(back.action.view(torch.uint8), tensor.view(torch.uint8))  # bit-exact
    assert back.nested["h"][0].shape == (4, 3)
    # in band (no buffer_callback): still equal, bit for bit
    in_band = pickle.loads(pickle.dumps(response, protocol=5))
    assert torch.equal(in_band.action.view(torch.uint8), tensor.view(torch.uint8))


@pytest.mark.torch
def test_tensor_flags_and_odd_tensors_round_trip() -> None:
    import torch

    leaf = torch.randn(3, requires_grad=True)
    non_leaf = leaf * 2
    conj = torch.tensor([1 + 2j, 3 - 1j]).conj()
    transposed = torch.arange(6.0).reshape(2, 3).t()
    strided = torch.arange(10.0)[::3]
    parameter = torch.nn.Parameter(torch.ones(2))
    response = PolicyResponse(
        None,
        leaf=leaf,
        non_leaf=non_leaf,
        conj=conj,
        transposed=transposed,
        strided=strided,
        parameter=parameter,
        scalar=torch.tensor(7),
        empty=torch.zeros(0, 4),
    )
    data, buffers = _dumps_oob(response)
    back = pickle.loads(data, buffers=buffers)
    assert back.leaf.requires_grad
    assert back.leaf.is_leaf
    assert back.non_leaf.requires_grad
    assert back.non_leaf.is_leaf
    assert torch.equal(back.non_leaf.detach(), non_leaf.detach())
    assert torch.equal(back.conj, conj.resolve_conj())
    assert torch.equal(back.transposed, transposed)
    assert torch.equal(back.strided, strided)
    assert type(back.parameter) is torch.nn.Parameter  # subclasses keep torch's pickling
    assert back.scalar.shape == ()
    assert back.scalar.item() == 7
    assert back.empty.shape == (0, 4)


@pytest.mark.torch
def test_aliasing_and_copy_semantics_with_tensors() -> None:
    import torch

    shared = torch.ones(5)
    response = PolicyResponse("e", a=shared, b=[shared], c=torch.zeros(2, requires_grad=True))
    back = pickle.loads(pickle.dumps(response, protocol=5))
    assert back.a is back.b[0]  # one tensor object stays one object
    shallow = copy.copy(response)
    assert shallow.a is shared
    assert shallow.b[0] is shared
    deep = copy.deepcopy(response)
    assert deep == response
    assert deep.a.data_ptr() != shared.data_ptr()
    assert deep.a is deep.b[0]
    assert vars(response)["a"] is shared  # pickling does not mutate the response


@pytest.mark.torch
def test_read_only_buffers_give_tensors_on_that_memory_without_a_warning() -> None:
    """Zero-copy, read-only by contract (docs/decisions.md); torch's warning is not raised."""
    import gc

    import torch

    tensor = torch.arange(16, dtype=torch.bfloat16)
    plain = torch.arange(4, dtype=torch.float32)
    empty = torch.zeros((0, 3))
    data, buffers = _dumps_oob(
        PolicyResponse("e", x=tensor, y=tensor.float().numpy(), z=plain, w=empty)
    )
    frozen = [memoryview(bytes(b.raw())) for b in buffers]  # like Ray's read-only object store
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "The given NumPy array is not writable" included
        back = pickle.loads(data, buffers=frozen)
    assert not back.y.flags.writeable
    addresses = {np.frombuffer(f, np.uint8).ctypes.data for f in frozen if len(f)}
    assert back.x.data_ptr() in addresses and back.z.data_ptr() in addresses
    assert back.w.shape == (0, 3)
    del frozen, buffers, data
    gc.collect()  # the tensors keep their memory alive
    assert torch.equal(back.x, tensor) and torch.equal(back.z, plain)


def test_numpy_only_responses_take_the_plain_path() -> None:
    # no tensor: no stand-ins, the plain restore function, arrays out of band
    response = PolicyResponse("e", action=np.zeros(4))
    data, buffers = _dumps_oob(response)
    assert len(buffers) == 1
    assert b"_restore_wrapped" not in data


# ------------------------------------------------------------------ in band: round trips, copies
@pytest.mark.parametrize("protocol", [pickle.DEFAULT_PROTOCOL, 5])
def test_pickle_round_trip(protocol):
    r = MultiAgentPolicyResponse(
        "env-3",
        action={"a": np.int64(1), "b": np.int64(0)},
        value={"a": np.float32(0.1), "b": np.float32(0.2)},
        state=Hidden(np.zeros(3), np.ones(3)),
        ts_env_sent_ns=123,
    )
    back = pickle.loads(pickle.dumps(r, protocol=protocol))
    assert type(back) is MultiAgentPolicyResponse
    assert back == r
    assert back.env_id == "env-3"
    assert type(back.state) is Hidden


def test_copy_and_deepcopy():
    a = np.zeros(3)
    r = PolicyResponse("e", action=a, d={"k": [1]})
    shallow = copy.copy(r)
    deep = copy.deepcopy(r)
    assert shallow == r == deep
    assert type(shallow) is type(deep) is PolicyResponse
    assert shallow is not r
    assert shallow.action is a
    assert deep.action is not a
    deep.d["k"].append(2)
    assert r.d == {"k": [1]}


# ------------------------------------------------------------------ cycles, subclasses, dtypes
def test_pickle_and_deepcopy_of_cyclic_response() -> None:
    direct = PolicyResponse("env-0", action=1)
    direct.me = direct
    restored = pickle.loads(pickle.dumps(direct))
    assert restored.me is restored
    copied = copy.deepcopy(direct)
    assert copied.me is copied
    nested = PolicyResponse("env-0", action=1)
    nested.info = {"response": nested}
    restored = pickle.loads(pickle.dumps(nested))
    assert restored.info["response"] is restored
    copied = copy.deepcopy(nested)
    assert copied.info["response"] is copied


class _Stamped(PolicyResponse):
    """A user subclass whose __init__ records when the response was made."""

    def __init__(self, env_id: str | None, **data: Any) -> None:
        super().__init__(env_id, **data)
        self.created_ns = time.time_ns()


class _Fixed(PolicyResponse):
    """A user subclass with a fixed constructor signature."""

    def __init__(self, env_id: str | None, action: Any, value: float = 0.0) -> None:
        super().__init__(env_id, action=action, value=value)


def test_user_subclass_pickle_and_copy_keep_fields() -> None:
    stamped = _Stamped("env-0", action=1)
    stamped.created_ns = 123
    assert pickle.loads(pickle.dumps(stamped)).created_ns == 123
    assert copy.copy(stamped).created_ns == 123
    assert copy.deepcopy(stamped) == stamped
    fixed = _Fixed("env-0", 1, 2.0)
    fixed.extra = 3
    assert pickle.loads(pickle.dumps(fixed)) == fixed


class EnvName(str):
    """A user's str subclass used as an env id."""


def test_env_id_str_subclass_survives_pickle() -> None:
    response = PolicyResponse(EnvName("env-0"), action=1)
    restored = pickle.loads(pickle.dumps(response))
    assert type(restored.env_id) is EnvName and restored == response


@pytest.mark.torch
@pytest.mark.parametrize(
    "dtype_name", ["uint16", "uint32", "uint64", "complex32", "float8_e4m3fn", "float8_e5m2"]
)
def test_pickle_keeps_exotic_dtypes(dtype_name: str) -> None:
    import torch

    dtype = getattr(torch, dtype_name)
    response = PolicyResponse("env-0", x=torch.arange(3).to(dtype))
    restored = pickle.loads(pickle.dumps(response, protocol=5))
    assert restored.x.dtype == dtype
    assert restored == response


class _Holder:
    """A class pickled through ``reduce_in_band`` (as ``rlightning_ray``'s ``Fragment``)."""

    def __init__(self, **state: Any) -> None:
        self.__dict__.update(state)

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        from rlightning.batch import reduce_in_band

        return reduce_in_band(self, dict(self.__dict__), protocol)


def test_reduce_in_band_is_one_pickle_with_large_buffers_beside_it() -> None:
    from rlightning.batch import IN_BAND_MAX_BYTES

    large = np.arange(IN_BAND_MAX_BYTES // 4, dtype=np.float32)  # exactly the threshold
    small = np.arange(IN_BAND_MAX_BYTES // 4 - 1, dtype=np.float32)  # one item under it
    holder = _Holder(large=large, small=small, tags=["a", {"b": 1}], shared=[small, small])
    data, buffers = _dumps_oob(holder)
    assert len(buffers) == 1 and buffers[0].raw().nbytes == large.nbytes
    assert _address(buffers[0]) == large.__array_interface__["data"][0]  # not copied
    frozen = [memoryview(bytes(b.raw())).toreadonly() for b in buffers]
    loaded = pickle.loads(data, buffers=frozen)
    assert type(loaded) is _Holder and list(vars(loaded)) == list(vars(holder))
    assert np.array_equal(loaded.large, large) and not loaded.large.flags.writeable
    assert np.array_equal(loaded.small, small) and loaded.small.flags.writeable
    assert loaded.small.dtype == np.float32 and loaded.tags == ["a", {"b": 1}]
    assert loaded.shared[0] is loaded.shared[1] is loaded.small  # one memo inside the state
    for protocol in (2, 4, 5):  # without a buffer_callback everything is in band
        again = pickle.loads(pickle.dumps(holder, protocol=protocol))
        assert np.array_equal(again.large, large) and again.large.flags.writeable
        assert vars(again).keys() == vars(holder).keys()


def test_reduce_in_band_falls_back_to_the_callers_pickler() -> None:
    from rlightning.batch import reduce_in_band

    holder = _Holder(fn=lambda x: x, value=np.zeros(3))
    reduced = reduce_in_band(holder, dict(vars(holder)), 5)
    assert reduced[0] is copyreg.__newobj__  # type: ignore[attr-defined]
    assert reduced[2]["fn"] is holder.fn  # the state itself: the caller's pickler saves it
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(holder, protocol=5)  # the standard pickler cannot save a lambda anyway
    copied = copy.deepcopy(holder)  # copy takes the fallback's (newobj, state) too
    assert copied.fn is holder.fn and copied.value is not holder.value
    assert reduce_in_band(holder, {"value": 1}, 4)[1] == (_Holder,)


def test_reduce_in_band_keeps_what_a_plain_pickle_keeps() -> None:
    """A state holding its object, a class's ``__setstate__``, a ``__main__`` class."""
    import sys
    import types

    from rlightning.batch import reduce_in_band

    cyclic = _Holder(value=np.zeros(3))
    cyclic.me = [cyclic]
    assert reduce_in_band(cyclic, dict(vars(cyclic)), 5)[0] is copyreg.__newobj__  # type: ignore[attr-defined]
    loaded = pickle.loads(pickle.dumps(cyclic, protocol=5))
    assert loaded.me[0] is loaded and np.array_equal(loaded.value, cyclic.value)

    class Restoring(_Holder):
        def __setstate__(self, state: dict[str, Any]) -> None:
            self.__dict__.update(state, restored=True)

    Restoring.__qualname__ = "Restoring"
    globals()["Restoring"] = Restoring  # importable by name, as a module-level class
    try:
        for protocol in (2, 4, 5):
            assert pickle.loads(pickle.dumps(Restoring(a=1), protocol=protocol)).restored
    finally:
        del globals()["Restoring"]

    main = sys.modules["__main__"]
    info = types.new_class("MainInfo")
    info.__module__ = "__main__"
    main.MainInfo = info  # type: ignore[attr-defined]  # the standard pickler saves it by name
    try:
        holder = _Holder(info=info())
        reduced = reduce_in_band(holder, dict(vars(holder)), 5)
        assert reduced[0] is copyreg.__newobj__  # type: ignore[attr-defined]
    finally:
        delattr(main, "MainInfo")
