"""One walk over nested containers, shared by conversions, equality and repr.

Containers are ``dict`` (and subclasses such as ``OrderedDict`` and ``defaultdict``), ``list``
(and subclasses) and ``tuple`` (plain, ``namedtuple`` and other subclasses). Everything else is a
leaf. The walk rebuilds a container only when one of its leaves changed, so a structure that
needs no work comes back as the very same object (no copy, no rebuild), and it never mutates the
containers it was given.

A hand-written walk is used rather than a pytree library: our structures are small and shallow,
and measured here the per-call overhead of a generic pytree flatten/unflatten is several times
the cost of the walk itself (see ``docs/performance.md``).
"""

from __future__ import annotations

import copy
import math
import reprlib
from collections.abc import Callable
from typing import Any

import numpy as np

from rlightning._torch import tensor_type

__all__ = ["is_container", "map_leaves", "map_tensors", "tree_equal", "tree_repr"]

# Types that are certainly leaves: checked first so the common case is one lookup.
_ATOMIC: frozenset[type] = frozenset(
    {int, float, bool, str, bytes, complex, type(None), np.ndarray}
)
_CONTAINERS = (dict, list, tuple)


def is_container(value: object) -> bool:
    """Return True if the walk descends into ``value`` (dict, list or tuple, subclasses too).

    Args:
        value: Any object.

    Returns:
        Whether ``value`` is a container that :func:`map_leaves` rebuilds.
    """
    return isinstance(value, (dict, list, tuple))


def _rebuild_sequence(original: list[Any] | tuple[Any, ...], items: list[Any]) -> Any:
    kind = type(original)
    if kind is list:
        return items
    if kind is tuple:
        return tuple(items)
    if isinstance(original, tuple):
        make = getattr(kind, "_make", None)
        if make is not None:  # namedtuple
            return make(items)
        return kind(items)
    # A list subclass: copy it (keeps its type and attributes), then fill in the new items.
    new = copy.copy(original)
    new[:] = items
    return new


def map_leaves(fn: Callable[[Any], Any], value: Any) -> Any:
    """Apply ``fn`` to every leaf of ``value`` and rebuild the containers that changed.

    Args:
        fn: Called on each leaf; returns the leaf itself when it needs no change.
        value: A leaf, or nested dict/list/tuple/namedtuple containers of leaves.

    Returns:
        ``value`` itself when ``fn`` changed no leaf; otherwise new containers of the same types
        (``namedtuple`` and dict subclasses included) holding the new leaves. The containers
        passed in are never mutated.

    Raises:
        RecursionError: the structure contains itself.
    """
    kind = type(value)
    if kind in _ATOMIC:
        return fn(value)
    if kind is dict or isinstance(value, dict):
        changed: dict[Any, Any] | None = None
        for key, item in value.items():
            new_item = map_leaves(fn, item)
            if new_item is not item:
                if changed is None:
                    changed = {}
                changed[key] = new_item
        if changed is None:
            return value
        # copy.copy keeps the type and extra state of OrderedDict, defaultdict and subclasses.
        out = value.copy() if kind is dict else copy.copy(value)
        out.update(changed)
        return out
    if kind is list or kind is tuple or isinstance(value, (list, tuple)):
        items = [map_leaves(fn, item) for item in value]
        if all(new is old for new, old in zip(items, value, strict=True)):
            return value
        return _rebuild_sequence(value, items)
    return fn(value)


def map_tensors(fn: Callable[[Any], Any], value: Any, tensor: type[Any]) -> Any:
    """Apply ``fn`` to every instance of ``tensor`` in ``value``; rebuild what changed.

    The fast form of :func:`map_leaves` behind the conversions: the same containers and the same
    rebuilding rules, but ``fn`` is called only on tensors (every other leaf is kept as is
    without a call), and leaves are dispatched inline rather than by recursion, so a container
    of tensors costs one type check per item plus ``fn``.

    Args:
        fn: Called on each tensor; returns the tensor itself when it needs no change.
        value: A tensor, any other leaf, or nested dict/list/tuple/namedtuple containers.
        tensor: The tensor class (``torch.Tensor``); subclasses count too.

    Returns:
        ``value`` itself when ``fn`` changed no tensor; otherwise new containers of the same types
        (``namedtuple`` and dict subclasses included) holding the new leaves. The containers
        passed in are never mutated.

    Raises:
        RecursionError: the structure contains itself.
    """
    kind = type(value)
    if kind is tensor:
        return fn(value)
    if kind in _ATOMIC:
        return value
    if kind is dict or isinstance(value, dict):
        out: dict[Any, Any] | None = None  # a copy, made at the first change (plain dicts)
        changed: dict[Any, Any] | None = None  # the changes, for dict subclasses
        for key, item in value.items():
            item_kind = type(item)
            if item_kind is tensor:
                new = fn(item)
            elif item_kind in _ATOMIC:
                continue
            elif isinstance(item, _CONTAINERS):
                new = map_tensors(fn, item, tensor)
            elif isinstance(item, tensor):
                new = fn(item)
            else:
                continue
            if new is not item:
                if kind is dict:
                    if out is None:
                        out = value.copy()
                    out[key] = new
                else:
                    if changed is None:
                        changed = {}
                    changed[key] = new
        if out is not None:
            return out
        if changed is None:
            return value
        # OrderedDict, defaultdict, custom subclasses: copy.copy keeps type and extra state.
        subclass_copy = copy.copy(value)
        subclass_copy.update(changed)
        return subclass_copy
    if isinstance(value, (list, tuple)):
        items: list[Any] | None = None
        for index, item in enumerate(value):
            item_kind = type(item)
            if item_kind is tensor:
                new = fn(item)
            elif item_kind in _ATOMIC:
                continue
            elif isinstance(item, _CONTAINERS):
                new = map_tensors(fn, item, tensor)
            elif isinstance(item, tensor):
                new = fn(item)
            else:
                continue
            if new is not item:
                if items is None:
                    items = list(value)
                items[index] = new
        if items is None:
            return value
        return _rebuild_sequence(value, items)
    if isinstance(value, tensor):
        return fn(value)
    return value


def _arrays_equal(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any]) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    try:
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))
    except (TypeError, ValueError):  # object arrays holding unorderable or array items
        return all(tree_equal(x, y) for x, y in zip(a.ravel(), b.ravel(), strict=True))


def _tensors_equal(a: Any, b: Any) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype or a.device != b.device:
        return False
    if a.is_floating_point() or a.is_complex():
        both_nan = a.isnan() & b.isnan()
        return bool(((a == b) | both_nan).all())
    import torch

    return bool(torch.equal(a, b))


def tree_equal(a: Any, b: Any) -> bool:
    """Compare two nested structures exactly; never raises on arrays or tensors.

    Containers must have the same type and keys/length. numpy arrays are equal when shape, dtype
    and values are equal; torch tensors when shape, dtype, device and values are equal. NaNs in
    the same positions count as equal, so a structure always equals its own copy. An array never
    equals a tensor or a list.

    Args:
        a: First structure.
        b: Second structure.

    Returns:
        True if the structures are equal.
    """
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is np.ndarray:
        return _arrays_equal(a, b)
    if kind is float:
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return False
        return all(tree_equal(item, b[key]) for key, item in a.items())
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return False
        return all(tree_equal(x, y) for x, y in zip(a, b, strict=True))
    tensor = tensor_type()
    if tensor is not None and isinstance(a, tensor):
        return _tensors_equal(a, b)
    if isinstance(a, np.generic):
        return _arrays_equal(np.asarray(a), np.asarray(b))
    try:
        result = a == b
        if isinstance(result, np.ndarray):
            return bool(result.all())
        return bool(result)
    except Exception:  # an __eq__ that cannot answer means "not equal", never an error
        return False


_SMALL = 8
_REPR = reprlib.Repr()
_REPR.maxstring = 80
_REPR.maxother = 80


def _leaf_repr(value: Any) -> str:
    if isinstance(value, np.ndarray):
        if value.size <= _SMALL and value.dtype != object:
            values = np.array2string(value, precision=4, separator=", ")
            return f"array({values}, dtype={value.dtype})"
        return f"array(shape={value.shape}, dtype={value.dtype})"
    tensor = tensor_type()
    if tensor is not None and isinstance(value, tensor):
        where = f"device={value.device}"
        if value.device.type == "cpu" and value.numel() <= _SMALL and not value.is_quantized:
            values = str(value.detach().tolist())
            return f"tensor({values}, dtype={value.dtype}, {where})"
        return f"tensor(shape={tuple(value.shape)}, dtype={value.dtype}, {where})"
    if isinstance(value, str):
        return _REPR.repr(value)
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def tree_repr(value: Any) -> str:
    """Summarise a nested structure: arrays and tensors by shape, dtype and device.

    Arrays and CPU tensors with at most 8 elements show their values; larger ones and tensors on
    other devices show only shape, dtype and device, so a repr never syncs a GPU for a big tensor
    or prints megabytes.

    Args:
        value: A leaf or nested containers.

    Returns:
        A one-line summary.
    """
    if isinstance(value, dict):
        inner = ", ".join(f"{key!r}: {tree_repr(item)}" for key, item in value.items())
        body = "{" + inner + "}"
        return body if type(value) is dict else f"{type(value).__name__}({body})"
    if isinstance(value, tuple) and hasattr(type(value), "_fields"):
        fields = getattr(type(value), "_fields", ())
        inner = ", ".join(
            f"{name}={tree_repr(item)}" for name, item in zip(fields, value, strict=True)
        )
        return f"{type(value).__name__}({inner})"
    if isinstance(value, (list, tuple)):
        inner = ", ".join(tree_repr(item) for item in value)
        if isinstance(value, list):
            body = f"[{inner}]"
        else:
            body = f"({inner},)" if len(value) == 1 else f"({inner})"
        return body if type(value) in (list, tuple) else f"{type(value).__name__}({body})"
    return _leaf_repr(value)
