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
import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from rlightning._torch import tensor_type

__all__ = [
    "ATOMIC_TYPES",
    "MAX_REPR_CHARS",
    "map_leaves",
    "map_tensors",
    "short_repr",
    "tree_equal",
    "tree_repr",
]

#: Types that are certainly leaves: checked first so the common case is one lookup (shared by
#: the tree walks, the conversions and pickling).
ATOMIC_TYPES: frozenset[type] = frozenset(
    {int, float, bool, str, bytes, complex, type(None), np.ndarray}
)
_ATOMIC = ATOMIC_TYPES
_CONTAINERS = (dict, list, tuple)


def rebuild_sequence(original: list[Any] | tuple[Any, ...], items: list[Any]) -> Any:
    """Rebuild a list or tuple like ``original`` (same type) holding ``items``.

    namedtuples through ``_make``, other tuple subclasses through their constructor, list
    subclasses through ``copy.copy`` then slice assignment; extra instance attributes of a tuple
    subclass are carried over. ``original`` is never mutated.
    """
    kind = type(original)
    if kind is list:
        return items
    if kind is tuple:
        return tuple(items)
    if isinstance(original, tuple):
        make = getattr(kind, "_make", None)
        rebuilt = make(items) if make is not None else kind(items)  # namedtuple, or a subclass
        extra = getattr(original, "__dict__", None)
        if extra:  # a subclass that added instance attributes: keep them
            rebuilt.__dict__.update(extra)
        return rebuilt
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
        return rebuild_sequence(value, items)
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
        changed: dict[Any, Any] | None = None
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
                if changed is None:
                    changed = {}
                changed[key] = new
        if changed is None:
            return value
        # OrderedDict, defaultdict, custom subclasses: copy.copy keeps type and extra state.
        out = value.copy() if kind is dict else copy.copy(value)
        out.update(changed)
        return out
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
        return rebuild_sequence(value, items)
    if isinstance(value, tensor):
        return fn(value)
    return value


def _arrays_equal(a: np.ndarray[Any, Any], b: np.ndarray[Any, Any], active: set[Any]) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if isinstance(a, np.ma.MaskedArray) or isinstance(b, np.ma.MaskedArray):
        mask_a, mask_b = np.ma.getmaskarray(a), np.ma.getmaskarray(b)
        if not np.array_equal(mask_a, mask_b):
            return False
        return _arrays_equal(np.asarray(a)[~mask_a], np.asarray(b)[~mask_b], active)
    names = a.dtype.names
    if names is not None:  # structured: field by field, so NaNs inside compare as NaNs
        return all(_arrays_equal(a[name], b[name], active) for name in names)
    if a.dtype.kind == "O":  # objects: each item by the same rules
        return all(_equal(x, y, active) for x, y in zip(a.ravel(), b.ravel(), strict=True))
    try:
        return bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fcmM"))
    except (TypeError, ValueError):
        return bool(np.array_equal(a, b))


def _tensors_equal(a: Any, b: Any) -> bool:
    try:
        if a.dtype != b.dtype or a.device != b.device or a.layout != b.layout:
            return False
        if a.is_nested or b.is_nested:
            if not (a.is_nested and b.is_nested):
                return False
            parts_a, parts_b = a.unbind(), b.unbind()
            return len(parts_a) == len(parts_b) and all(
                _tensors_equal(x, y) for x, y in zip(parts_a, parts_b, strict=True)
            )
        if a.shape != b.shape:
            return False
        if a.device.type == "meta":  # no values to compare: only the same tensor is equal
            return False
        if a.is_quantized:
            if (a.qscheme(), a.q_scale(), a.q_zero_point()) != (
                b.qscheme(),
                b.q_scale(),
                b.q_zero_point(),
            ):
                return False
            a, b = a.int_repr(), b.int_repr()
        elif a.is_sparse or a.layout != _strided_layout():
            a, b = a.to_dense(), b.to_dense()
        if a.is_floating_point() or a.is_complex():
            both_nan = a.isnan() & b.isnan()
            return bool(((a == b) | both_nan).all())
        return bool((a == b).all())
    except Exception:  # a layout or dtype torch cannot compare: equal only if the same object
        return False


def _strided_layout() -> Any:
    import torch

    return torch.strided


def _equal(a: Any, b: Any, active: set[Any]) -> bool:
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is np.ndarray or isinstance(a, np.ndarray):
        return _arrays_equal(a, b, active)
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, complex):
        return _equal(a.real, b.real, active) and _equal(a.imag, b.imag, active)
    if isinstance(a, (dict, list, tuple)):
        pair = (id(a), id(b))
        if pair in active:  # a cycle: equal so far, the rest is compared further up
            return True
        active.add(pair)
        try:
            if isinstance(a, dict):
                if a.keys() != b.keys():
                    return False
                return all(_equal(item, b[key], active) for key, item in a.items())
            if len(a) != len(b):
                return False
            return all(_equal(x, y, active) for x, y in zip(a, b, strict=True))
        finally:
            active.discard(pair)
    tensor = tensor_type()
    if tensor is not None and isinstance(a, tensor):
        return _tensors_equal(a, b)
    if isinstance(a, np.generic):
        return _arrays_equal(np.asarray(a), np.asarray(b), active)
    try:
        result = a == b
        if isinstance(result, np.ndarray):
            return bool(result.all())
        return bool(result)
    except Exception:  # an __eq__ that cannot answer means "not equal", never an error
        return False


def tree_equal(a: Any, b: Any) -> bool:
    """Compare two nested structures exactly; never raises on arrays or tensors.

    Containers must have the same type and keys/length. numpy arrays are equal when shape, dtype
    and values are equal (masked arrays: the same mask and the same unmasked values; structured
    and object arrays field by field and item by item); torch tensors when shape, dtype, device,
    layout and values are equal (sparse tensors by their dense values, nested tensors part by
    part, quantized ones by their integer representation and quantization parameters). NaNs
    (and NaTs) in the same positions count as equal, so a structure always equals its own copy.
    An array never equals a tensor or a list. Containers that contain themselves compare
    without recursing forever.

    Args:
        a: First structure.
        b: Second structure.

    Returns:
        True if the structures are equal.
    """
    return _equal(a, b, set())


_SMALL = 8  # arrays and CPU tensors with 1 to 8 elements show their values
_MAX_ITEMS = 8  # items shown per container
_MAX_LEVEL = 6  # containers nested deeper show as [...] / {...}
_MAX_NODES = 64  # values (containers, keys and leaves) one tree_repr looks at
_MAX_LEAF = 120  # characters of one leaf's repr
_MAX_NAME = 60  # characters of a type name
#: Longest string :func:`tree_repr` returns.
MAX_REPR_CHARS = 2000
_NUMERIC_KINDS = frozenset("biufc")


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _type_name(value: Any) -> str:
    return _clip(type(value).__name__, _MAX_NAME)


def _tensor_repr(value: Any) -> str:
    where = f"dtype={value.dtype}, device={value.device}"
    try:
        if value.is_nested:
            return f"tensor(nested, {value.size(0)} parts, {where})"
        shape = tuple(value.shape)
        strided = not value.is_sparse and value.layout == _strided_layout()
        # 1 to 8 elements: tolist() visits at most 8 values (a zero-size tensor of shape
        # (2**30, 0) would make 2**30 empty lists, so it shows its shape instead).
        small = value.device.type == "cpu" and 0 < value.numel() <= _SMALL
        if strided and small and not value.is_quantized:
            return f"tensor({value.detach().tolist()}, {where})"
        layout = "" if strided else f", layout={value.layout}"
        return f"tensor(shape={shape}, {where}{layout})"
    except Exception:  # dtypes torch cannot print (float4, ...): the summary without values
        return f"tensor({where})"


def _array_repr(value: np.ndarray[Any, Any]) -> str:
    dtype = value.dtype
    name = "array" if type(value) is np.ndarray else _type_name(value)
    # Values only for 1 to 8 plain numbers: array2string then visits at most 8 elements (object,
    # string and structured items can be arbitrarily large; a zero-size array shows its shape).
    if 0 < value.size <= _SMALL and dtype.kind in _NUMERIC_KINDS and dtype.names is None:
        try:
            if isinstance(value, np.ma.MaskedArray):  # array2string would print masked slots
                values = str(value)  # numpy.ma's own: masked slots as --
            else:
                values = np.array2string(value, precision=4, separator=", ")
        except Exception:  # a subclass whose printing fails: the summary
            pass
        else:
            return f"{name}({values}, dtype={dtype})"
    return f"{name}(shape={value.shape}, dtype={dtype})"


def _leaf_repr(value: Any) -> str:
    """A repr of a leaf in at most ``_MAX_LEAF`` characters, visiting a bounded part of it."""
    try:
        if isinstance(value, np.ndarray):
            return _clip(_array_repr(value), _MAX_LEAF)
        tensor = tensor_type()
        if tensor is not None and isinstance(value, tensor):
            return _clip(_tensor_repr(value), _MAX_LEAF)
        if isinstance(value, str):  # str's own slicing and len: a subclass's are not run
            more = "..." if str.__len__(value) > _MAX_LEAF else ""
            return _clip(repr(str.__getitem__(value, slice(0, _MAX_LEAF))) + more, _MAX_LEAF)
        if isinstance(value, (bytes, bytearray)):
            view = memoryview(value)
            more = "..." if view.nbytes > _MAX_LEAF else ""
            return _clip(repr(bytes(view[:_MAX_LEAF])) + more, _MAX_LEAF)
        if isinstance(value, int) and int.bit_length(value) > 256:  # repr would be 78+ digits
            return f"<{_type_name(value)} of {int.bit_length(value)} bits>"
        text = repr(value)
    except Exception as exc:  # a leaf whose repr fails (or recurses forever) is named instead
        return f"<{_type_name(value)} (repr failed: {_type_name(exc)})>"
    return _clip(text, _MAX_LEAF)


class _ReprState:
    """What one :func:`tree_repr` call has seen: the containers open on the path, the budget."""

    __slots__ = ("active", "nodes")

    def __init__(self) -> None:
        self.active: set[int] = set()
        self.nodes = _MAX_NODES


def _items_repr(parts: list[str], total: int) -> str:
    if total > len(parts):
        parts = [*parts, f"...(+{total - len(parts)} more)"]
    return ", ".join(parts)


def _repr(value: Any, state: _ReprState, level: int) -> str:
    state.nodes -= 1
    if state.nodes < 0:
        return "..."
    if not isinstance(value, (dict, list, tuple, set, frozenset)):
        return _leaf_repr(value)
    is_dict = isinstance(value, dict)
    if id(value) in state.active or level >= _MAX_LEVEL:  # contains itself, or too deep
        return "{...}" if is_dict else "[...]"
    state.active.add(id(value))
    try:
        return _container_repr(value, state, level + 1)
    except Exception as exc:  # a subclass whose len/items/iteration fails
        return f"<{_type_name(value)} (repr failed: {_type_name(exc)})>"
    finally:
        state.active.discard(id(value))


def _container_repr(value: Any, state: _ReprState, level: int) -> str:
    kind = type(value)
    if isinstance(value, dict):
        parts = [
            f"{_repr(key, state, level)}: {_repr(item, state, level)}"
            for key, item in itertools.islice(value.items(), _MAX_ITEMS)
        ]
        body = "{" + _items_repr(parts, len(value)) + "}"
        return body if kind is dict else f"{_type_name(value)}({body})"
    fields = getattr(kind, "_fields", None)
    if isinstance(value, tuple) and fields is not None:
        pairs = itertools.islice(zip(fields, value, strict=False), _MAX_ITEMS)
        parts = [
            f"{_clip(str(name), _MAX_NAME)}={_repr(item, state, level)}" for name, item in pairs
        ]
        return f"{_type_name(value)}({_items_repr(parts, len(value))})"
    parts = [_repr(item, state, level) for item in itertools.islice(value, _MAX_ITEMS)]
    inner = _items_repr(parts, len(value))
    if isinstance(value, list):
        body, plain = f"[{inner}]", kind is list
    elif isinstance(value, tuple):
        body, plain = (f"({inner},)" if len(value) == 1 else f"({inner})"), kind is tuple
    elif value:  # set, frozenset: in iteration order, never sorted (that visits every item)
        body, plain = "{" + inner + "}", kind is set
    else:
        return "set()" if kind is set else f"{_type_name(value)}()"
    return body if plain else f"{_type_name(value)}({body})"


def tree_repr(value: Any) -> str:
    """Summarise a nested structure: arrays and tensors by shape, dtype and device.

    Arrays of 1 to 8 numbers and CPU tensors with 1 to 8 elements show their values; other
    arrays and tensors (zero-size ones included) show only shape, dtype and device, so a repr
    never syncs a GPU for a big tensor or prints megabytes. Containers show their first 8 items
    and how many more there are; a container inside itself shows as ``[...]`` or ``{...}``, and
    so does one nested more than 6 levels deep.

    Bounded for any value: it looks at no more than 64 values (containers, keys and leaves) and 8
    items of each container, a leaf's text is cut to 120 characters (str and bytes are sliced
    before their repr, ints beyond 256 bits show their size), and the result has at most
    :data:`MAX_REPR_CHARS` (2,000) characters. The only unbounded cost is the ``__repr__`` of a
    leaf of a type rlightning does not know (its text is still cut). Never raises: a value whose
    repr fails shows as ``<TypeName (repr failed: ErrorName)>``.

    Args:
        value: A leaf or nested containers.

    Returns:
        A one-line summary of at most :data:`MAX_REPR_CHARS` characters.
    """
    return _clip(_repr(value, _ReprState(), 0), MAX_REPR_CHARS)


def short_repr(value: Any, limit: int = 200) -> str:
    """:func:`tree_repr` cut to ``limit`` characters, for error messages built from any input."""
    return _clip(tree_repr(value), limit)
