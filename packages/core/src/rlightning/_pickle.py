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

__all__ = ["reduce_response"]


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
