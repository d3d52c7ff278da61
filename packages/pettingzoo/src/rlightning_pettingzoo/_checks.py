"""Fast membership tests for actions, with the verdict of gymnasium's ``Space.contains``.

:func:`to_parallel_actions` checks every action of every live agent on every step, and gymnasium's
``Discrete.contains`` alone costs about as much as sampling the action. This module builds, once
per action space object, a checker that answers the common cases (a Python ``int`` or numpy
integer scalar for ``Discrete``; a plain ``np.ndarray`` for ``Box``) with a few precomputed
comparisons, and hands every other value to the full check,
:func:`rlightning.rules.space_violation` (gymnasium's ``Space.contains`` behind it), so that the
verdict is always exactly that check's:

* a fast path answers only ``True``, and only where ``Space.contains`` is true in every gymnasium
  version the adapter supports (1.0 to 1.4): a Python ``int`` (exact type, not ``bool`` or a
  subclass) or numpy integer scalar (exact type, whose dtype casts safely to the space's) in
  ``[start, start + n)`` and within the dtype's range for ``Discrete``; an ``np.ndarray`` (exact
  type) of a dtype that casts safely, the space's shape and every element in ``[low, high]``
  (NaN is not) for ``Box``, as ``Box.contains`` decides;
* anything else, including every value that is *not* in the space, goes to the full check.

Only exact ``gymnasium.spaces.Discrete`` and ``Box`` get fast paths; subclasses, which may override
``contains``, and all other spaces use the full check alone. ``tests/pettingzoo/test_checks.py``
compares the checkers with ``space.contains`` and ``space_violation`` under hypothesis.

The ``Discrete`` fast path is also given as data, :func:`int_ranges` (``{value type: (lowest,
highest)}``), so that :func:`to_parallel_actions` can run it inline, without a call per agent;
the checker runs the very same table.

Checkers are cached per env (the cache goes when the env is collected) and per agent, together with
the space object they were built for and its table (:func:`cache_entry`).
``env.action_space(agent)`` is still called on every step: PettingZoo says it "MUST return the
same value for the same agent name", but an env may build a new space on each call (PettingZoo's
own custom-env tutorial memoises with ``functools.lru_cache`` and says to drop it "if your spaces
change over time"), so a cached checker is used only while the env returns the very same space
object (``is``), and rebuilt otherwise. A space mutated in place (``space.n = ...``) is not
noticed by the ``Discrete`` checker; gymnasium treats spaces as immutable values.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces

from rlightning.rules import space_violation

__all__ = [
    "CacheEntry",
    "Checker",
    "IntRanges",
    "cache_entry",
    "checker_cache",
    "int_ranges",
    "make_checker",
]

Checker = Callable[[Any], bool]
"""``checker(value) -> bool``: whether ``value`` is in the space it was built for."""

# The numpy integer scalar types (aliases such as np.intp collapse onto these keys).
_NP_INT_TYPES: tuple[type[np.integer[Any]], ...] = (
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.byte,
    np.ubyte,
    np.short,
    np.ushort,
    np.intc,
    np.uintc,
    np.int_,
    np.uint,
    np.longlong,
    np.ulonglong,
    np.intp,
    np.uintp,
)

# Per Discrete dtype: (dtype min, dtype max, {numpy int scalar type: casts safely to the dtype}).
_DISCRETE_DTYPE_INFO: dict[np.dtype[Any], tuple[int, int, dict[type, bool]]] = {}


def _discrete_dtype_info(dtype: np.dtype[Any]) -> tuple[int, int, dict[type, bool]]:
    info = _DISCRETE_DTYPE_INFO.get(dtype)
    if info is None:
        iinfo = np.iinfo(dtype)
        castable = {t: bool(np.can_cast(np.dtype(t), dtype)) for t in _NP_INT_TYPES}
        info = _DISCRETE_DTYPE_INFO[dtype] = (int(iinfo.min), int(iinfo.max), castable)
    return info


def _full_checker(space: spaces.Space[Any]) -> Checker:
    def check(value: Any) -> bool:
        return space_violation(space, value) is None

    return check


IntRanges = dict[type, tuple[int, int]]
"""``{value type: (lowest, highest)}``, see :func:`int_ranges`; never modified once built."""

# The table of every space but an exact Discrete. A plain dict, not a read-only MappingProxyType:
# the table is read once per agent and step, and a proxy's get() costs about twice a dict's.
_NO_RANGES: IntRanges = {}


def int_ranges(space: spaces.Space[Any]) -> IntRanges:
    """The fast path of ``space``'s checker as data, for callers that inline it in a loop.

    A value whose exact type is a key is in ``space`` when ``lowest <= operator.index(value) <=
    highest`` (the key's bounds); when that test fails, or the type is not a key, only the
    checker (:func:`make_checker`) can tell. The table of an exact ``Discrete`` holds ``int``
    (not ``bool``) and each numpy integer scalar type whose dtype casts safely to the space's,
    all with the bounds ``[max(start, dtype min), min(start + n - 1, dtype max)]`` (for a castable
    numpy type that is ``[start, start + n - 1]``: its values are within the dtype's range); every
    other space has an empty table.

    Args:
        space: Any gymnasium space.

    Returns:
        The table, not to be modified (the empty one is shared).
    """
    return cache_entry(space)[2]


def _discrete_ranges(space: spaces.Discrete[Any]) -> IntRanges:
    dtype_min, dtype_max, castable = _discrete_dtype_info(np.dtype(space.dtype))
    low = int(space.start)
    bounds = (max(low, dtype_min), min(low + int(space.n) - 1, dtype_max))
    ranges = {kind: bounds for kind, ok in castable.items() if ok}
    ranges[int] = bounds
    return ranges


def _discrete_checker(space: spaces.Discrete[Any], ranges: IntRanges) -> Checker:
    full = _full_checker(space)
    index = operator.index  # int(value) for the int and numpy integer keys, ~2x faster

    def check(value: Any) -> bool:
        try:
            bounds = ranges.get(type(value))
        except TypeError:  # a class that cannot be hashed: gymnasium's contains decides
            bounds = None
        if bounds is not None and bounds[0] <= index(value) <= bounds[1]:
            return True
        return full(value)

    return check


def _box_checker(space: spaces.Box[Any]) -> Checker:
    target = np.dtype(space.dtype)
    shape = space.shape
    castable: dict[np.dtype[Any], bool] = {}
    full = _full_checker(space)
    ndarray = np.ndarray

    def check(value: Any) -> bool:
        if type(value) is ndarray:
            dtype = value.dtype
            ok = castable.get(dtype)
            if ok is None:
                ok = castable[dtype] = bool(np.can_cast(dtype, target))
            if (
                ok
                and value.shape == shape
                and bool((value >= space.low).all())
                and bool((value <= space.high).all())
            ):
                return True
        return full(value)

    return check


def make_checker(space: spaces.Space[Any]) -> Checker:
    """Build the membership checker of ``space`` (see the module docstring).

    Args:
        space: Any gymnasium space; exact ``Discrete`` and ``Box`` get fast paths.

    Returns:
        ``checker(value) -> bool``, always equal to
        ``rlightning.rules.space_violation(space, value) is None`` (gymnasium's
        ``space.contains(value)``, a torch tensor never being in a space).
    """
    return cache_entry(space)[1]


CacheEntry = tuple[Any, Checker, IntRanges]
"""``(space, make_checker(space), int_ranges(space))``, an entry of :func:`checker_cache`."""


def cache_entry(space: spaces.Space[Any]) -> CacheEntry:
    """Build ``(space, make_checker(space), int_ranges(space))``, the table computed once.

    Args:
        space: Any gymnasium space.

    Returns:
        The entry to store in :func:`checker_cache` under the agent whose space it is.
    """
    kind = type(space)  # exact types: a subclass may override contains()
    if kind is spaces.Discrete and isinstance(space, spaces.Discrete):
        ranges = _discrete_ranges(space)
        return (space, _discrete_checker(space, ranges), ranges)
    if kind is spaces.Box and isinstance(space, spaces.Box):
        return (space, _box_checker(space), _NO_RANGES)
    return (space, _full_checker(space), _NO_RANGES)


# id(env) -> {agent: (space, checker, int ranges)}. A plain dict keyed by id() is read faster than a
# WeakKeyDictionary (which makes a weakref on every lookup); weakref.finalize drops the entry when
# the env is collected, before its id can be reused. Even a stale entry could not give a wrong
# verdict: it is used only for the very space object it holds (and keeps alive).
_CACHES: dict[int, dict[Any, CacheEntry]] = {}


def checker_cache(env: Any) -> dict[Any, CacheEntry]:
    """The ``{agent: (space, checker, int ranges)}`` cache of ``env``, created empty on first use.

    The cache lives as long as ``env``. An env that cannot be weakly referenced gets a new empty
    dict on each call (correct, only not cached across calls).

    Args:
        env: A PettingZoo env.

    Returns:
        The cache dict, to be read and filled by the caller; an entry is valid only while
        ``env.action_space(agent) is space``.
    """
    key = id(env)
    cache = _CACHES.get(key)
    if cache is None:
        try:
            weakref.finalize(env, _CACHES.pop, key, None)
        except TypeError:  # not weakly referenceable
            return {}
        cache = _CACHES[key] = {}
    return cache
