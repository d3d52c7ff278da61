"""Zero-copy pickling of responses (``PolicyResponse.__reduce_ex__``).

A response pickles as its class, ``env_id`` and field dict, so class, id and fields survive
``pickle``, ``copy``, ``deepcopy``, cloudpickle and Ray. numpy arrays pickle themselves: with
protocol 5 and a ``buffer_callback`` (what Ray and ``multiprocessing.shared_memory`` users pass)
their data travels out of band, without a copy.

torch's own tensor pickling is not zero-copy and is slow for per-step payloads (it serialises each
storage through ``torch.save``: measured here about 100 µs to dump and 150 µs to load a dict of
four small CPU tensors). So a plain CPU tensor in a response (nested ones too) is pickled as a
numpy view of its memory plus its dtype: the view travels out of band like any array, and loading
rebuilds the tensor on that same memory with ``torch.from_numpy``. Dtypes numpy lacks (bfloat16,
complex32, the float8 family) travel as an integer view of the same item size and are viewed back
(``Tensor.view(dtype)``), so values are bit-exact. ``requires_grad`` is kept; the loaded tensor is a
leaf, as with torch's own pickling. The approach follows Ray's ``zero_copy_tensors_reducer``
(``ray/_private/tensor_serialization_utils.py``) without needing
``RAY_ENABLE_ZERO_COPY_TORCH_TENSORS``.

What keeps torch's own pickling: tensors on other devices (CUDA, ...), sparse, quantized or nested
tensors and tensor subclasses (``nn.Parameter``). A non-contiguous tensor is copied by numpy into
the pickle (in band), as any non-contiguous array is.

When the out-of-band buffers are read-only (Ray's object store), the loaded tensors still alias
that memory (the zero-copy ``ray.get`` of issue 6), and are read-only **by contract**: torch has
no read-only tensors, so nothing stops an in-place write (``add_``, ``t[0] = ...``), which would
change the stored object under every other reader on the node (every later ``ray.get`` of it,
every task given it). rlightning never writes into a received tensor; a user who must write in
place calls ``clone()`` first. torch's own warning ("The given NumPy array is not writable ...
undefined behavior", once per process, pointing here) is not raised: the tensor is built on a
writable view of the same memory (:func:`_alias`), since the decision it asks for is taken and
documented (docs/decisions.md, "Tensors from read-only buffers alias them, read-only by
contract"). numpy arrays stay read-only views, as numpy enforces.
"""

from __future__ import annotations

import copy
import copyreg
import io
import pickle
import sys
import threading
from collections import Counter
from typing import Any

import numpy as np

from rlightning._torch import (
    NUMPY_UNSUPPORTED_DTYPES,
    require_torch,
    tensor_type,
    torch_if_imported,
)
from rlightning._tree import ATOMIC_TYPES as _ATOMIC
from rlightning._tree import map_leaves

__all__ = [
    "IN_BAND_MAX_BYTES",
    "pack_responses",
    "pack_steps",
    "reduce_in_band",
    "reduce_response",
]


class _TensorPickle:
    """Stand-in for a CPU tensor while its response is pickled (see module docstring)."""

    __slots__ = ("tensor",)

    def __init__(self, tensor: Any) -> None:
        self.tensor = tensor

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        tensor = self.tensor
        requires_grad = tensor.requires_grad
        data = tensor.detach() if requires_grad else tensor
        try:
            array = data.numpy()  # refuses conj/neg bits, dtypes numpy lacks, odd layouts
        except (TypeError, RuntimeError):
            return self._slow_reduce(protocol)
        if requires_grad:
            return (_rebuild_tensor_ex, (array, None, True))
        return (_rebuild_tensor, (array,))

    def _slow_reduce(self, protocol: Any) -> tuple[Any, ...]:
        tensor = self.tensor
        if tensor.layout is not _strided() or tensor.is_quantized or tensor.is_nested:
            return tensor.__reduce_ex__(protocol)  # type: ignore[no-any-return]  # torch's own
        data = tensor.detach().resolve_conj().resolve_neg()
        dtype = None
        if data.dtype in NUMPY_UNSUPPORTED_DTYPES:
            view = _INT_BY_SIZE.get(data.element_size())
            if view is None:
                return tensor.__reduce_ex__(protocol)  # type: ignore[no-any-return]
            dtype = data.dtype
            data = data.view(getattr(torch_if_imported(), view))
        try:
            array = data.numpy()
        except (TypeError, RuntimeError):
            return tensor.__reduce_ex__(protocol)  # type: ignore[no-any-return]
        return (_rebuild_tensor_ex, (array, dtype, tensor.requires_grad))

    def __copy__(self) -> Any:
        return self.tensor

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return copy.deepcopy(self.tensor, memo)


#: Integer torch dtype (by name) of each item size, to carry dtypes numpy lacks as raw bits.
_INT_BY_SIZE: dict[int, str] = {1: "uint8", 2: "int16", 4: "int32", 8: "int64"}


def _rebuild_tensor(array: np.ndarray[Any, Any]) -> Any:
    """Rebuild a pickled CPU tensor on the memory of ``array`` (no copy; see the module doc)."""
    torch = torch_if_imported() or require_torch("unpickling a torch tensor")
    return torch.from_numpy(array if array.flags.writeable else _alias(array))


class _WritableInterface:
    """``array``'s ``__array_interface__`` with its data marked writable (keeps ``array`` alive)."""

    __slots__ = ("array",)

    def __init__(self, array: np.ndarray[Any, Any]) -> None:
        self.array = array

    @property
    def __array_interface__(self) -> dict[str, Any]:
        interface = dict(self.array.__array_interface__)
        interface["data"] = (interface["data"][0], False)  # (address, read-only flag)
        return interface


def _alias(array: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """A writable array on the memory of the read-only ``array``, no copy (module docstring).

    The result's base is a :class:`_WritableInterface` holding ``array``, so the memory (Ray's
    buffer) lives as long as the tensor built on it. An empty array is returned as a new one.
    """
    if array.size == 0:
        return np.empty(array.shape, array.dtype)
    return np.asarray(_WritableInterface(array))


def _rebuild_tensor_ex(array: np.ndarray[Any, Any], dtype: Any, requires_grad: bool) -> Any:
    """Rebuild a pickled CPU tensor viewed as ``dtype``, with ``requires_grad`` (no copy)."""
    tensor = _rebuild_tensor(array)
    if dtype is not None:
        tensor = tensor.view(dtype)
    if requires_grad:
        tensor.requires_grad_(True)
    return tensor


def _strided() -> Any:
    torch = torch_if_imported()
    assert torch is not None
    return torch.strided


def _wrap_fields(fields: dict[str, Any], tensor_cls: type[Any]) -> bool:
    """Replace, in ``fields`` (a copy), each eligible tensor by a :class:`_TensorPickle`."""
    seen: dict[int, _TensorPickle] = {}  # one stand-in per tensor object keeps aliasing

    def wrap(value: Any) -> Any:
        if type(value) is tensor_cls and value.is_cpu:
            stand_in = seen.get(id(value))
            if stand_in is None:
                stand_in = seen[id(value)] = _TensorPickle(value)
            return stand_in
        return value

    for key, value in fields.items():
        kind = type(value)
        if kind in _ATOMIC:
            continue
        if kind is tensor_cls:
            fields[key] = wrap(value)
        elif isinstance(value, (dict, list, tuple)):
            try:
                new = map_leaves(wrap, value)
            except RecursionError:  # a container that contains itself: torch's own pickling
                continue
            if new is not value:
                fields[key] = new
    return bool(seen)


def reduce_response(response: Any, protocol: int) -> tuple[Any, ...]:
    """Return the ``__reduce_ex__`` value of a response (see module docstring).

    The response is rebuilt without calling ``__init__`` (``copyreg.__newobj__``, then its field
    dict as the state), so a user subclass whose ``__init__`` takes other arguments or sets
    fields itself is restored exactly as it was, and a response that holds itself (directly or
    in a container) pickles and deep-copies like any self-referential object.

    Args:
        response: A ``PolicyResponse`` (or subclass).
        protocol: The pickle protocol (unused: numpy decides in band or out of band from it).

    Returns:
        ``(copyreg.__newobj__, (cls,), fields)`` where ``fields`` is a shallow copy of the
        response's fields (``env_id`` included) with plain CPU tensors swapped for zero-copy
        stand-ins. The response is not mutated.
    """
    fields = response.__dict__.copy()
    tensor_cls = tensor_type()
    if tensor_cls is not None:
        _wrap_fields(fields, tensor_cls)
    # copyreg.__newobj__ is what pickle turns into its NEWOBJ opcode (cls.__new__(cls)).
    return (copyreg.__newobj__, (type(response),), fields)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------- column-wise lists
#
# A runner's fragment holds ``n_steps`` responses and ``n_steps`` observation batches. Pickled one
# by one, each response costs a NEWOBJ, a field dict, a reducer call per tensor and one numpy
# buffer per array (Ray then handles each buffer out of band: several hundred per fragment). Packed
# column-wise, each field of the responses travels as one stacked array: issue 20's per-fragment
# cost. Loading rebuilds the same responses: the same class and field order, each value of the
# same type, dtype, shape and device, a numpy array a C-contiguous array of its own step (a view
# of the stacked buffer, writable exactly when the per-step pickling would have made it writable:
# in band yes, Ray's read-only out-of-band buffer no), a tensor built on that view as
# :func:`_rebuild_tensor` builds it (its own storage of its own size, no offset), an int an int.
# A column is stacked only when that is exact; any other column travels step by step, through
# :func:`reduce_response`'s own wrapping.


def _stackable_array(values: list[Any]) -> bool:
    """Whether ``values`` are distinct C-contiguous ndarrays of one dtype, shape and flag."""
    first = values[0]
    if type(first) is not np.ndarray or first.dtype.hasobject:
        return False
    dtype, shape, writeable = first.dtype, first.shape, first.flags.writeable
    seen = set()
    for value in values:
        if (
            type(value) is not np.ndarray
            or value.flags.writeable != writeable
            or value.dtype != dtype
            or value.shape != shape
            or not value.flags.c_contiguous
        ):
            return False
        seen.add(id(value))
    return len(seen) == len(values)


def _stack(values: list[np.ndarray[Any, Any]]) -> np.ndarray[Any, Any]:
    """``np.stack(values)``, read-only when they are.

    A read-only array pickles in band as bytes and loads read-only, a writable one as a
    bytearray and loads writable: the stack keeps what each step would have had.
    """
    stacked = np.stack(values)
    if not values[0].flags.writeable:
        stacked.flags.writeable = False
    return stacked


def _rows(stacked: np.ndarray[Any, Any]) -> list[np.ndarray[Any, Any]]:
    """Each step's row of ``stacked`` as an array view (0-d arrays too, never numpy scalars)."""
    return [stacked[t, ...] for t in range(len(stacked))]


def _stackable_tensor(values: list[Any], tensor_cls: type[Any] | None) -> bool:
    """Whether ``values`` are distinct plain CPU tensors :class:`_TensorPickle` sends as views."""
    if tensor_cls is None or type(values[0]) is not tensor_cls:
        return False
    first = values[0]
    dtype, shape = first.dtype, first.shape
    if dtype in NUMPY_UNSUPPORTED_DTYPES:
        return False
    strided = _strided()
    seen = set()
    for value in values:
        if (
            type(value) is not tensor_cls
            or not value.is_cpu
            or value.requires_grad
            or value.layout is not strided
            or value.is_quantized
            or value.dtype != dtype
            or value.shape != shape
            or not value.is_contiguous()
            or value.is_conj()
            or value.is_neg()
        ):
            return False
        seen.add(id(value))
    return len(seen) == len(values)


def _stackable_int(values: list[Any]) -> bool:
    """Whether ``values`` are all ``int`` (not bool) within int64."""
    return all(type(v) is int and -(2**63) <= v < 2**63 for v in values)


def _column_kind(values: list[Any], tensor_cls: type[Any] | None) -> str:
    """How a column travels: ``array``/``tensor``/``int`` stacked, else ``steps``."""
    if _stackable_array(values):
        return "array"
    if _stackable_tensor(values, tensor_cls):
        return "tensor"
    if _stackable_int(values):
        return "int"
    return "steps"


def _pack_column(kind: str, values: list[Any]) -> tuple[str, Any]:
    """One column of kind ``kind`` (:func:`_column_kind`) as ``(kind, data)``."""
    if kind == "array":
        return (kind, _stack(values))
    if kind == "tensor":
        return (kind, np.stack([value.numpy() for value in values]))
    if kind == "int":
        return (kind, np.array(values, dtype=np.int64))
    return (kind, values)


def _unpack_column(kind: str, data: Any) -> list[Any]:
    """The per-step values of a column packed by :func:`_pack_column`."""
    if kind == "array":
        return _rows(data)
    if kind == "tensor":
        return [_rebuild_tensor(row) for row in _rows(data)]
    if kind == "int":
        return data.tolist()  # type: ignore[no-any-return]
    return data  # type: ignore[no-any-return]


class _Packed:
    """A list of responses (or of step values) while its holder is pickled (column-wise)."""

    __slots__ = ("items", "responses")

    def __init__(self, items: list[Any], responses: bool) -> None:
        self.items = items
        self.responses = responses

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        if self.responses:
            packed = _pack_response_list(self.items)
            if packed is not None:
                return packed
        else:
            packed = _pack_step_list(self.items)
            if packed is not None:
                return packed
        return (list, (list(self.items),))

    def __copy__(self) -> Any:
        return self.items

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        return copy.deepcopy(self.items, memo)


def _pack_response_list(responses: list[Any]) -> tuple[Any, ...] | None:
    """The column-wise reduce value of ``responses``, or None when it would not be exact."""
    if len(responses) < 2:
        return None
    cls = type(responses[0])
    code = getattr(getattr(cls, "__reduce_ex__", None), "__code__", None)
    if (
        getattr(cls, "__setstate__", None) is not None
        or code is None
        or "reduce_response" not in code.co_names
    ):
        return None  # a class that pickles otherwise than reduce_response: as it does
    keys = tuple(responses[0].__dict__)
    dicts = []
    for response in responses:
        if type(response) is not cls or tuple(response.__dict__) != keys:
            return None
        dicts.append(response.__dict__)
    tensor_cls = tensor_type()
    values = [[d[key] for d in dicts] for key in keys]
    kinds = [_column_kind(column, tensor_cls) for column in values]
    # an object stacked in one column and also held by another field would lose its identity
    # (pickle's memo keeps it for values sent step by step): such columns go step by step,
    # except a column that is another stacked column object for object (DQN's ``buffer_action``
    # is its ``action``): it travels as that column's index and loads as the same objects
    same: dict[int, int] = {}
    for j in range(len(values)):
        if kinds[j] in ("array", "tensor"):
            for i in range(j):
                if kinds[i] == kinds[j] and i not in same and _same_objects(values[i], values[j]):
                    same[j] = i
                    break
    counts: Counter[int] = Counter()
    for j, column in enumerate(values):
        if j not in same:
            counts.update(map(id, column))
    for j, column in enumerate(values):
        if j in same:
            continue
        if kinds[j] in ("array", "tensor") and any(counts[id(v)] > 1 for v in column):
            kinds[j] = "steps"
    for j, i in list(same.items()):
        if kinds[i] == "steps":  # its original was demoted: it goes step by step too (memo)
            kinds[j] = "steps"
            del same[j]
        else:
            kinds[j] = "same"
    if all(kind == "steps" for kind in kinds):
        return None
    steps = [j for j, kind in enumerate(kinds) if kind == "steps"]
    if tensor_cls is not None and not all(_flat_atomic(v) for j in steps for v in values[j]):
        for j in steps:
            values[j] = list(values[j])
        for t in range(len(dicts)):  # one stand-in per tensor per response, as reduce_response
            fields = {keys[j]: values[j][t] for j in steps}
            _wrap_fields(fields, tensor_cls)
            for j in steps:
                values[j][t] = fields[keys[j]]
    columns = [
        (kind, same[j]) if kind == "same" else _pack_column(kind, values[j])
        for j, kind in enumerate(kinds)
    ]
    return (_rebuild_responses, (cls, keys, len(responses), columns))


def _same_objects(a: list[Any], b: list[Any]) -> bool:
    """Whether ``a[t] is b[t]`` for every step."""
    return all(x is y for x, y in zip(a, b, strict=True))


def _flat_atomic(value: Any) -> bool:
    """Whether ``value`` is atomic or a list/tuple of atomics (no tensor to wrap inside)."""
    if type(value) in _ATOMIC:
        return True
    return isinstance(value, (list, tuple)) and _ATOMIC.issuperset(map(type, value))


def _rebuild_responses(
    cls: type[Any], keys: tuple[str, ...], n: int, columns: list[tuple[str, Any]]
) -> list[Any]:
    """The responses packed by :func:`pack_responses`: ``n`` new ``cls``, fields in order."""
    values: list[list[Any]] = []
    for kind, data in columns:
        values.append(values[data] if kind == "same" else _unpack_column(kind, data))
    responses = []
    new: Any = cls.__new__
    for t in range(n):
        response = new(cls)
        response.__dict__.update(zip(keys, [column[t] for column in values], strict=True))
        responses.append(response)
    return responses


def _pack_step_list(items: list[Any]) -> tuple[Any, ...] | None:
    """The column-wise reduce value of ``n_steps`` arrays (or dicts of arrays), or None."""
    if len(items) < 2:
        return None
    if _stackable_array(items):
        return (_rebuild_steps, (_stack(items),))
    first = items[0]
    if type(first) is not dict:
        return None
    keys = tuple(first)
    if not all(type(item) is dict and tuple(item) == keys for item in items):
        return None
    columns = [[item[key] for item in items] for key in keys]
    if not all(_stackable_array(column) for column in columns):
        return None
    ids = [id(v) for column in columns for v in column]
    if len(set(ids)) != len(ids):
        return None
    return (_rebuild_step_dicts, (keys, [_stack(column) for column in columns]))


def _rebuild_steps(stacked: np.ndarray[Any, Any]) -> list[Any]:
    """The per-step arrays packed by :func:`pack_steps`."""
    return _rows(stacked)


def _rebuild_step_dicts(keys: tuple[str, ...], stacked: list[np.ndarray[Any, Any]]) -> list[Any]:
    """The per-step dicts of arrays packed by :func:`pack_steps`, keys in order."""
    rows = [_rows(column) for column in stacked]
    return [dict(zip(keys, step, strict=True)) for step in zip(*rows, strict=True)]


def pack_responses(responses: list[Any]) -> Any:
    """A stand-in that pickles ``responses`` column-wise (see the section comment above).

    Args:
        responses: A list of ``PolicyResponse`` (any class whose ``__reduce_ex__`` is
            :func:`reduce_response`'s).

    Returns:
        An object to put in a pickled state in place of ``responses``: it pickles as the
        rebuilt list (one stacked array per numpy, tensor or int column; each other column step
        by step), or as the plain list when stacking would not be exact (responses of several
        classes or field sets, an object shared between fields, fewer than two responses).
        ``copy``/``deepcopy`` of it give the list itself / a deep copy. Nothing is mutated.
    """
    return _Packed(responses, True)


def pack_steps(items: list[Any]) -> Any:
    """A stand-in that pickles ``n_steps`` arrays (or dicts of arrays) as one stack per key.

    Args:
        items: Per-step observation (or mask) batches: distinct C-contiguous ndarrays of one
            dtype and shape, or dicts of them with one key order; anything else pickles as the
            plain list.

    Returns:
        As :func:`pack_responses`, for a list of arrays: each loads as a C-contiguous view of its
        step of the stacked array (writable as a per-step load would be).
    """
    return _Packed(items, False)


# --- One pickle for a whole state (fragments) ----------------------------------------------------
#
# Ray pickles with cloudpickle, whose ``reducer_override`` is a Python function the C pickler calls
# for every object it saves that is not a builtin atom: every list, dict, array and stand-in of a
# fragment's ~60 steps of infos. The standard pickler (``pickle.dumps``, C, no override) saves the
# same state in a fraction of that. So a fragment pickles its state with it, into one bytes object,
# and hands the outer pickler (Ray's) only that bytes object and the large buffers: those stay out
# of band, zero-copy (``pickle.PickleBuffer``: Ray's ``buffer_callback`` takes them as it takes an
# array's). What the standard pickler cannot save (a lambda in an info dict: cloudpickle can) makes
# the state travel as before, through the outer pickler.

#: Buffers (an array's data) of at least this many bytes stay out of band, zero-copy; smaller ones
#: are copied into the one bytes object (cheaper than one out-of-band buffer each in Ray).
IN_BAND_MAX_BYTES = 64 * 1024


#: Per thread, the ids of the objects :func:`reduce_in_band` is pickling now (a state that holds
#: its object: the inner pickle is refused, the caller's pickler keeps the cycle).
_IN_BAND = threading.local()


class _CallersOwn(pickle.PicklingError):
    """A state holds a value the standard pickler would save otherwise than the caller's."""


def _refuse(value: Any) -> tuple[Any, ...]:
    raise _CallersOwn(type(value).__name__)


def _callers_dispatch() -> dict[type, Any]:
    """The dispatch table for the inner pickle, copyreg's and a refusal per type of the caller.

    The caller's cloudpickle reduces those types its own way (Ray's ``ObjectRef``,
    ``ActorHandle``, serializers registered with ``ray.util.register_serializer``,
    cloudpickle's by-value types).
    """
    table: dict[type, Any] = dict(copyreg.dispatch_table)
    for name in ("ray.cloudpickle", "cloudpickle"):
        module = sys.modules.get(name)
        dispatch = getattr(getattr(module, "CloudPickler", None), "dispatch", None)
        if dispatch is not None:
            table.update(dict.fromkeys([t for t in dispatch if t not in table], _refuse))
    return table


def _by_value_names() -> list[bytes]:
    """Module names whose classes cloudpickle saves by value (``__main__``, registered ones)."""
    names = {"__main__"}
    for name in ("ray.cloudpickle.cloudpickle", "cloudpickle.cloudpickle"):
        names.update(getattr(sys.modules.get(name), "_PICKLE_BY_VALUE_MODULES", ()))
    return [name.encode() for name in names]


def reduce_in_band(obj: Any, state: dict[str, Any], protocol: Any) -> tuple[Any, ...]:
    """The reduce value of ``obj``: ``state`` pickled by the standard pickler, as one bytes object.

    For ``__reduce_ex__`` of a class whose instance dict is ``state`` (``rlightning_ray``'s
    fragments). With protocol 5, ``state`` is pickled by ``pickle.dumps(protocol=5)`` with a
    ``buffer_callback``: buffers of at least :data:`IN_BAND_MAX_BYTES` bytes (large arrays, CPU
    tensors' numpy views) are left out of the bytes and returned beside it as
    ``pickle.PickleBuffer`` objects, so the caller's pickler (Ray's) may send them out of band,
    without a copy; smaller ones are copied in. Loading calls ``pickle.loads(data,
    buffers=...)`` and sets the loaded dict as ``obj.__dict__``.

    What loads differs from a plain pickle in two ways, both documented in docs/decisions.md
    ("Fragments cross Ray as one pickle"): small arrays load writable, with their own memory,
    where Ray's out-of-band loads would have given read-only views of the object store (large
    ones still do); and an object held both inside ``state`` and elsewhere in the outer pickle
    loads as two objects (the two pickles have separate memos).

    Args:
        obj: The object being pickled (its class is rebuilt with ``cls.__new__``).
        state: Its instance dict (or a modified copy: stand-ins such as
            :func:`pack_responses` are pickled as they are in any pickle).
        protocol: The protocol the caller's pickler asked for.

    Returns:
        ``(_load_in_band, (cls, data, *buffers))`` (loading calls the class's
        ``__setstate__`` where it has one, as pickle does); otherwise the plain
        ``(copyreg.__newobj__, (cls,), state)``, which the caller's pickler saves as it saves
        any object. Otherwise means: protocol < 5; a state the standard pickler cannot save
        (``pickle.PicklingError``, ``TypeError``, ``AttributeError``, ``RecursionError``: a
        lambda, a local class); a state that holds ``obj`` itself (the caller's memo keeps the
        cycle); a value of a type the caller's cloudpickle reduces its own way (its
        ``CloudPickler.dispatch``: Ray's ``ObjectRef`` and ``ActorHandle``, which must be
        counted by Ray's serializer, and types given to ``ray.util.register_serializer``); and
        a pickle that names ``__main__`` or a module registered with cloudpickle's
        ``register_pickle_by_value`` (cloudpickle ships those classes by value; the standard
        pickler by name, which another process cannot import). Nothing is mutated.
    """
    cls = type(obj)
    active: set[int] | None = getattr(_IN_BAND, "ids", None)
    if active is None:
        active = _IN_BAND.ids = set()
    if id(obj) in active:
        raise _CallersOwn(f"{cls.__name__} holds itself")  # the outer call falls back
    if isinstance(protocol, int) and protocol >= 5:
        buffers: list[pickle.PickleBuffer] = []

        def keep_large(buffer: pickle.PickleBuffer) -> bool:
            if buffer.raw().nbytes < IN_BAND_MAX_BYTES:
                return True  # copied into the bytes
            buffers.append(buffer)
            return False

        out = io.BytesIO()
        pickler = pickle.Pickler(out, protocol=5, buffer_callback=keep_large)
        pickler.dispatch_table = _callers_dispatch()
        active.add(id(obj))
        try:
            pickler.dump(state)
        except (pickle.PicklingError, TypeError, AttributeError, RecursionError):
            pass
        else:
            data = out.getvalue()
            if not any(name in data for name in _by_value_names()):
                return (_load_in_band, (cls, data, *buffers))
        finally:
            active.discard(id(obj))
    # copyreg.__newobj__ is pickle's NEWOBJ; the state is set as the instance dict
    return (copyreg.__newobj__, (cls,), state)  # type: ignore[attr-defined]


def _load_in_band(cls: type[Any], data: bytes, *buffers: Any) -> Any:
    """The object :func:`reduce_in_band` pickled: a new ``cls`` with the loaded instance dict."""
    make: Any = cls.__new__
    new = make(cls)
    state = pickle.loads(data, buffers=buffers)
    setstate = getattr(new, "__setstate__", None)
    if setstate is not None:
        setstate(state)  # as pickle's BUILD does for the fallback's state
    else:
        new.__dict__.update(state)
    return new
