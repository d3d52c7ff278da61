"""Per-field conversions behind ``PolicyResponse.numpy()`` and ``PolicyResponse.to()``.

Each function walks a response's field dict once and replaces, in that dict, only the values that
change. A field that is a tensor costs one ``type(...) is`` check before its conversion; any
other field that is not a container costs one set lookup; a container is rebuilt only when a
tensor in it changed (see :func:`rlightning._tree.map_tensors`).

Fast paths, measured in ``docs/performance.md``:

* ``torch.Tensor`` and the set of dtypes numpy lacks are looked up once and cached, never per
  call (and torch is never imported here: without it no tensor can exist).
* ``cpu()`` reads ``tensor.is_cpu`` and keeps a CPU tensor as the very same object, which is
  cheaper than calling ``tensor.cpu()`` (that returns it too, after a dispatch).
* ``numpy()`` of a CPU tensor that needs no grad is one call, ``tensor.numpy()`` (a view that
  shares the tensor's memory), instead of the three calls of ``tensor.detach().cpu().numpy()``;
  any other tensor takes one ``tensor.numpy(force=True)`` (detach, move, resolve conjugate and
  negative bits), after widening a dtype numpy lacks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlightning._torch import NUMPY_UNSUPPORTED_DTYPES, tensor_type
from rlightning._tree import ATOMIC_TYPES, map_tensors

__all__ = [
    "ATOMIC_TYPES",
    "fields_to_cpu",
    "fields_to_device",
    "fields_to_numpy",
    "tensor_to_numpy",
]

#: Leaf types no conversion touches (one set lookup each); the same set the tree walks use.
_ATOMIC = ATOMIC_TYPES
_CONTAINERS = (dict, list, tuple)

#: ``torch.Tensor``, cached here at the first conversion after torch is imported, so that the
#: hot paths read one module global (``_tensor or _tensor_type()``). While it is None, a
#: ``type(value) is _tensor`` test is simply False (``type()`` never returns None).
_tensor: type[Any] | None = None

#: Dtypes numpy lacks, as a plain frozenset; filled on the first conversion (torch is imported
#: by then, since a tensor exists).
_unsupported: frozenset[Any] | None = None


def _tensor_type() -> type[Any] | None:
    global _tensor  # a write-once cache
    _tensor = tensor_type()
    return _tensor


def _unsupported_dtypes() -> frozenset[Any]:
    global _unsupported  # a write-once cache
    if _unsupported is None:
        _unsupported = NUMPY_UNSUPPORTED_DTYPES.frozen()
    return _unsupported


def tensor_to_numpy(tensor: Any) -> np.ndarray[Any, Any]:
    """Convert one tensor to a numpy array: detach, move to CPU, widen dtypes numpy lacks.

    A CPU tensor that needs no grad and has a numpy dtype is returned as a view that shares its
    memory. bfloat16 and the float8 family become float32, complex32 becomes complex64 (numpy has
    no such dtypes).

    Args:
        tensor: A ``torch.Tensor`` on any device.

    Returns:
        The array, shape unchanged.
    """
    # Fast path: numpy() itself, without force's detach/cpu/resolve calls. It refuses only what
    # the general path below handles (a tensor that requires grad or is not on the CPU, a dtype
    # numpy lacks, a conjugate or negative bit, a layout that is not strided), so those fall
    # through, at the cost of one exception; asking ``requires_grad``/``is_cpu`` first would
    # cost two property reads on every tensor of the common case.
    try:
        fast: np.ndarray[Any, Any] = tensor.numpy()
    except (TypeError, RuntimeError):  # NotImplementedError (meta tensors) is a RuntimeError
        pass
    else:
        return fast
    unsupported = _unsupported if _unsupported is not None else _unsupported_dtypes()
    if tensor.dtype in unsupported:
        import torch

        wide = torch.complex64 if tensor.is_complex() else torch.float32
        tensor = tensor.detach().to(wide)
    result: np.ndarray[Any, Any] = tensor.numpy(force=True)
    return result


def _dict_to_numpy(value: dict[Any, Any], tensor: type[Any]) -> dict[Any, Any]:
    """``map_tensors(tensor_to_numpy, value, tensor)`` for a plain dict, the fast path inline.

    A dict of per-agent tensors is the common nested field; converting its CPU tensors here
    saves a call per item. Same result and the same rules: the dict is copied at the first
    change and never mutated.
    """
    out: dict[Any, Any] | None = None
    for key, item in value.items():
        if type(item) is tensor:
            try:
                new = item.numpy()
            except (TypeError, RuntimeError):  # see tensor_to_numpy
                new = tensor_to_numpy(item)
        else:
            new = map_tensors(tensor_to_numpy, item, tensor)
        if new is not item:
            if out is None:
                out = value.copy()
            out[key] = new
    return value if out is None else out


def _cpu_leaf(tensor: Any) -> Any:
    return tensor if tensor.is_cpu else tensor.to("cpu")


def _failed(exc: Exception, what: str, key: object, error: type[Exception]) -> Exception:
    """The error a conversion raises when ``exc`` stopped it at field ``key``."""
    if isinstance(exc, RecursionError):
        return ValueError(
            f"{what} failed for field {key!r}: it contains itself (a reference cycle); "
            "conversions walk nested dicts, lists and tuples, which must not contain themselves"
        )
    return error(f"{what} failed for field {key!r}: {type(exc).__name__}: {exc}")


def fields_to_numpy(fields: dict[str, Any]) -> None:
    """Convert every tensor in ``fields`` (nested too) to numpy, in place; see ``numpy()``.

    All or nothing: ``fields`` is only written once every field converted.

    Raises:
        TypeError: a tensor cannot be converted; the message names the field.
        ValueError: a field contains itself (a reference cycle).
    """
    tensor = _tensor or _tensor_type()
    if tensor is None:  # torch not imported: no tensor can exist
        return
    key = None
    changes: dict[str, Any] | None = None
    new: Any
    try:
        for key, value in fields.items():
            kind = type(value)
            if kind is tensor:
                new = tensor_to_numpy(value)
            elif kind in _ATOMIC:
                continue
            elif kind is dict:
                new = _dict_to_numpy(value, tensor)
            elif isinstance(value, _CONTAINERS):
                new = map_tensors(tensor_to_numpy, value, tensor)
            elif isinstance(value, tensor):
                new = tensor_to_numpy(value)
            else:
                continue
            if new is not value:
                if changes is None:
                    changes = {}
                changes[key] = new
    except MemoryError:
        raise
    except Exception as exc:
        raise _failed(exc, "numpy()", key, TypeError) from exc
    if changes is not None:
        fields.update(changes)


def _convert_fields(
    fields: dict[str, Any], tensor: type[Any], leaf: Callable[[Any], Any], what: str
) -> None:
    """Replace each tensor of ``fields`` (nested too) by ``leaf(tensor)``; all or nothing."""
    key = None
    changes: dict[str, Any] | None = None
    try:
        for key, value in fields.items():
            kind = type(value)
            if kind in _ATOMIC:
                continue
            if kind is tensor or isinstance(value, tensor):
                new = leaf(value)
            elif isinstance(value, _CONTAINERS):
                new = map_tensors(leaf, value, tensor)
            else:
                continue
            if new is not value:
                if changes is None:
                    changes = {}
                changes[key] = new
    except MemoryError:
        raise
    except Exception as exc:  # torch raises AssertionError for CUDA on a CPU-only build
        raise _failed(exc, what, key, RuntimeError) from exc
    if changes is not None:
        fields.update(changes)


def fields_to_cpu(fields: dict[str, Any], non_blocking: bool) -> None:
    """Move every tensor in ``fields`` (nested too) to the CPU, in place; see ``to()``.

    A tensor already on the CPU is kept as the same object, and a container whose tensors are all
    on the CPU is kept as the same object. All or nothing, as :func:`fields_to_numpy`.

    Raises:
        RuntimeError: torch cannot move a tensor; the message names the field.
        ValueError: a field contains itself (a reference cycle).
    """
    tensor = _tensor or _tensor_type()
    if tensor is None:
        return
    if non_blocking:
        _convert_fields(
            fields,
            tensor,
            lambda t: t if t.is_cpu else t.to("cpu", non_blocking=True),
            "to('cpu')",
        )
        return
    # The common case, inline: a top-level CPU tensor costs a type check and ``is_cpu``.
    key = None
    changes: dict[str, Any] | None = None
    try:
        for key, value in fields.items():
            kind = type(value)
            if kind is tensor:
                if value.is_cpu:
                    continue
                new = value.to("cpu")
            elif kind in _ATOMIC:
                continue
            elif isinstance(value, _CONTAINERS):
                new = map_tensors(_cpu_leaf, value, tensor)
                if new is value:
                    continue
            elif isinstance(value, tensor) and not value.is_cpu:
                new = value.to("cpu")
            else:
                continue
            if changes is None:
                changes = {}
            changes[key] = new
    except MemoryError:
        raise
    except Exception as exc:
        raise _failed(exc, "to('cpu')", key, RuntimeError) from exc
    if changes is not None:
        fields.update(changes)


def fields_to_device(fields: dict[str, Any], device: Any, non_blocking: bool) -> None:
    """Move every tensor in ``fields`` (nested too) to ``device``, in place; see ``to()``.

    Raises:
        RuntimeError: torch cannot move a tensor there; the message names the field.
        ValueError: a field contains itself (a reference cycle).
    """
    tensor = _tensor or _tensor_type()
    if tensor is None:
        return

    def leaf(value: Any) -> Any:
        return value.to(device, non_blocking=non_blocking)

    _convert_fields(fields, tensor, leaf, f"to({device!r})")
