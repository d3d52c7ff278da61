"""Per-field conversions behind ``PolicyResponse.numpy()`` and ``PolicyResponse.to()``.

Each function walks a response's field dict once and replaces, in that dict, only the values that
change. A field that is not a container costs one type check; a container is rebuilt only when a
leaf in it changed (see :func:`rlightning._tree.map_leaves`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from rlightning._torch import NUMPY_UNSUPPORTED_DTYPES, tensor_type
from rlightning._tree import map_leaves

__all__ = ["fields_to_cpu", "fields_to_device", "fields_to_numpy", "tensor_to_numpy"]

_ATOMIC: frozenset[type] = frozenset(
    {int, float, bool, str, bytes, complex, type(None), np.ndarray}
)


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
    if tensor.dtype in NUMPY_UNSUPPORTED_DTYPES:
        import torch

        wide = torch.complex64 if tensor.is_complex() else torch.float32
        tensor = tensor.detach().to(wide)
    result: np.ndarray[Any, Any] = tensor.numpy(force=True)
    return result


def _convert_fields(
    fields: dict[str, Any], tensor: type[Any], leaf: Callable[[Any], Any], what: str
) -> None:
    """Replace, in place, each value of ``fields`` that ``leaf`` changes (tensors only)."""

    def on_leaf(value: Any) -> Any:
        return leaf(value) if isinstance(value, tensor) else value

    for key, value in fields.items():
        kind = type(value)
        if kind in _ATOMIC:
            continue
        try:
            if kind is tensor or isinstance(value, tensor):
                fields[key] = leaf(value)
            elif isinstance(value, (dict, list, tuple)):
                new = map_leaves(on_leaf, value)
                if new is not value:
                    fields[key] = new
        except (TypeError, RuntimeError, ValueError) as exc:
            raise type(exc)(f"{what} failed for field {key!r}: {exc}") from exc


def fields_to_numpy(fields: dict[str, Any]) -> None:
    """Convert every tensor in ``fields`` (nested too) to numpy, in place; see ``numpy()``."""
    tensor = tensor_type()
    if tensor is None:  # torch not imported: no tensor can exist
        return
    _convert_fields(fields, tensor, tensor_to_numpy, "numpy()")


def fields_to_cpu(fields: dict[str, Any], non_blocking: bool) -> None:
    """Move every tensor in ``fields`` (nested too) to the CPU, in place; see ``to()``."""
    tensor = tensor_type()
    if tensor is None:
        return

    def leaf(value: Any) -> Any:
        return value if value.is_cpu else value.to("cpu", non_blocking=non_blocking)

    _convert_fields(fields, tensor, leaf, "to('cpu')")


def fields_to_device(fields: dict[str, Any], device: Any, non_blocking: bool) -> None:
    """Move every tensor in ``fields`` (nested too) to ``device``, in place; see ``to()``."""
    tensor = tensor_type()
    if tensor is None:
        return

    def leaf(value: Any) -> Any:
        return value.to(device, non_blocking=non_blocking)

    _convert_fields(fields, tensor, leaf, f"to({device!r})")
