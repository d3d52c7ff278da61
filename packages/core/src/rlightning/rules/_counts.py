"""Counts and sizes given as arguments (private).

Import these names from :mod:`rlightning.rules`.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet

from rlightning.rules._errors import rule_error


def check_count(
    value: object,
    name: str,
    *,
    minimum: float = 0,
    integer: bool = True,
) -> int | float:
    """Return ``value`` as a count (an int) or, with ``integer=False``, a finite real amount.

    The owner of rule ``count``: a count (runners, envs per runner, ``max_batch`` rows,
    ``max_wait_us`` microseconds) is an int -- a Python int or a numpy integer, never a bool
    (``True`` is no count of 1), a float (``4.0`` is refused, not truncated: a float where a
    count is expected is a unit or arithmetic mistake) or a str (``"4"`` is not parsed). An
    amount (``num_cpus``, ``num_gpus``, which Ray takes fractional) is a real number that is not
    a bool, NaN or infinite. Both are at least ``minimum``.

    Args:
        value: The argument given.
        name: The argument, as the caller names it (``"start_runners n_runners"``).
        minimum: The smallest value allowed.
        integer: True for a count, False for an amount.

    Returns:
        ``int(value)`` for a count, ``float(value)`` for an amount.

    Raises:
        TypeError: ``value`` is of the wrong kind (named, with what was given).
        ValueError: ``value`` is NaN, infinite (amounts) or below ``minimum``.

    Examples:
        >>> check_count(4, "n_runners", minimum=1)
        4
        >>> check_count(2.0, "n_runners", minimum=1)
        Traceback (most recent call last):
        ...
        TypeError: n_runners must be an int count; got 2.0; expected an int >= 1 (not a bool, float or str) [rule count]
    """  # noqa: E501  (doctest output is one line)
    kind = "an int" if integer else "a finite number"
    expected = f"{kind} >= {minimum:g} (not a bool{', float' if integer else ''} or str)"
    if integer:
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise rule_error(
                TypeError, "count", name, "must be an int count", value, expected=expected
            )
        result: int | float = int(value)
    else:
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise rule_error(TypeError, "count", name, "must be a number", value, expected=expected)
        result = float(value)
        if not math.isfinite(result):
            raise rule_error(ValueError, "count", name, "must be finite", value, expected=expected)
    if result < minimum:
        raise rule_error(
            ValueError, "count", name, f"must be >= {minimum:g}", value, expected=expected
        )
    return result


def check_seeds(seeds: object, name: str) -> list[int | None]:
    """Return ``seeds`` as a list of seeds: each None (no seed) or a count (an int >= 0).

    The owner of rule ``count`` for seed lists (one seed per env copy, per runner): each entry
    is checked by :func:`check_count` with ``minimum=0``, so a bool (``True`` is no seed of 1),
    a float (``1.5`` is not truncated) or a str is refused, naming its index.

    Args:
        seeds: The argument given (a list, tuple, range or numpy array of seeds).
        name: The argument, as the caller names it (``"SharedRolloutCollector seeds"``).

    Returns:
        A new list: None kept, every other seed as a Python int. Nothing is mutated.

    Raises:
        TypeError: ``seeds`` is not iterable (a lone int, a 0-d numpy array), is a str,
            bytes or mapping, is unordered (a set, a frozenset, a dict's keys: its iteration
            order is not the order the seeds were written in), or an entry is a bool, float or
            str (named as ``name[index]``).
        ValueError: an entry is negative.

    Examples:
        >>> check_seeds([0, None, 2], "seeds")
        [0, None, 2]
        >>> check_seeds(3, "seeds")
        Traceback (most recent call last):
        ...
        TypeError: seeds must be a sequence of seeds (one int >= 0, or None, per item), got int 3
    """
    if isinstance(seeds, AbstractSet):  # {5, 1} iterates 1, 5: copy 0 would get seed 1
        raise TypeError(
            f"{name} must be an ordered sequence of seeds (one per item, in order: a list, "
            f"tuple, range or numpy array), got the unordered {type(seeds).__name__} {seeds!r}"
        )
    if (
        isinstance(seeds, str | bytes | Mapping)
        or not isinstance(seeds, Iterable)
        or getattr(seeds, "ndim", None) == 0  # a 0-d numpy array: iterating it raises
    ):
        raise TypeError(
            f"{name} must be a sequence of seeds (one int >= 0, or None, per item), got "
            f"{type(seeds).__name__} {seeds!r}"
        )
    return [
        None if seed is None else int(check_count(seed, f"{name}[{k}]", minimum=0))
        for k, seed in enumerate(seeds)
    ]
