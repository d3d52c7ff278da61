"""Space membership with its reason (private).

Import these names from :mod:`rlightning.rules`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from rlightning._space_reasons import (
    _box_reason,
    _discrete_reason,
    _is_tensor,
    _multi_binary_reason,
    _multi_discrete_reason,
    as_box_array,
)


# ---------------------------------------------------------------------------- space membership
def contains(space: spaces.Space[Any], value: Any) -> bool:
    """Return gymnasium's ``space.contains(value)``, without its cast warning.

    ``Box.contains`` casts a non-array (e.g. the numpy scalar a shape-() Box samples) with
    ``np.asarray(x, dtype=space.dtype)`` and warns "Casting input x to numpy array."; the same
    cast is done here first, so the verdict is gymnasium's without the warning (which a test
    suite run with ``-W error`` would turn into an exception). Dict and Tuple are walked as their
    own ``contains`` walks them (a Tuple also takes a list or array, converted with ``tuple()``;
    a Dict takes a dict with exactly its keys), so nested Box leaves get the same treatment. A
    ``contains`` that raises counts as "not an element". One deviation: a torch tensor is never
    an element (environments take numpy or Python values; gymnasium's Box would cast a CPU one).

    Args:
        space: Any gymnasium space.
        value: The candidate element; not modified.

    Returns:
        Whether ``value`` is an element of ``space``.

    Examples:
        >>> from gymnasium.spaces import Box, Discrete
        >>> contains(Discrete(3, start=1), 3), contains(Box(-1, 1, ()), 0.5)
        (True, True)
    """
    if isinstance(space, spaces.Box):
        if not isinstance(value, np.ndarray):
            if _is_tensor(value):
                return False
            try:  # gymnasium's cast, without numpy's warnings; numpy 1.x's int wrap refused
                value = as_box_array(value, space.dtype)
            except (TypeError, ValueError, OverflowError, DeprecationWarning):
                return False
    elif isinstance(space, spaces.Tuple):
        if isinstance(value, (list, np.ndarray)):
            if isinstance(value, np.ndarray) and value.ndim == 0:
                return False  # gymnasium's tuple(x) raises on it: not an element
            value = tuple(value)
        return (
            isinstance(value, tuple)
            and len(value) == len(space.spaces)
            and all(contains(sub, part) for sub, part in zip(space.spaces, value, strict=True))
        )
    elif isinstance(space, spaces.Dict):
        return (
            isinstance(value, dict)
            and value.keys() == space.spaces.keys()
            and all(contains(sub, value[key]) for key, sub in space.spaces.items())
        )
    elif _is_tensor(value):
        return False
    try:
        return bool(space.contains(value))
    except Exception:  # a contains() that cannot judge the value means "not in the space"
        return False


def space_violation(space: spaces.Space[Any], value: Any) -> str | None:
    """Say why ``value`` is not an element of ``space``, or return None when it is.

    The verdict is :func:`contains` (gymnasium's ``space.contains``); this function only explains
    a rejection: for Box the dtype that cannot be cast safely, the shape, or the first element
    outside ``[low, high]`` (or NaN); for Discrete a value that is not an integer or is out of
    range; for MultiDiscrete and MultiBinary likewise; for Dict and Tuple the path to the part that
    fails. A torch tensor is never in a gymnasium space: the reason says to call ``numpy()``.

    Args:
        space: Any gymnasium space.
        value: The candidate element; not modified.

    Returns:
        None exactly when ``contains(space, value)``; otherwise a short reason in words (no
        trailing period).

    Examples:
        >>> import numpy as np
        >>> from gymnasium.spaces import Box, Discrete
        >>> space_violation(Discrete(3), 5)
        '5 is outside [0, 2]'
        >>> space_violation(Box(-1, 1, (2,)), np.array([0.5, 2.0], dtype=np.float32))
        'element [1] = 2.0 is above high = 1.0'
        >>> space_violation(Discrete(3), 2) is None
        True
    """
    if _is_tensor(value):
        return (
            f"it is a torch tensor (device {value.device}); environments take numpy or Python "
            "values: convert with response.numpy() first"
        )
    if contains(space, value):
        return None
    if isinstance(space, spaces.Box):
        return _box_reason(space, value)
    if isinstance(space, spaces.Discrete):
        return _discrete_reason(space, value)
    if isinstance(space, spaces.MultiDiscrete):
        return _multi_discrete_reason(space, value)
    if isinstance(space, spaces.MultiBinary):
        return _multi_binary_reason(space, value)
    if isinstance(space, spaces.Dict):
        if not isinstance(value, dict):
            return f"it is a {type(value).__name__}, not a dict"
        missing = [k for k in space.spaces if k not in value]
        extra = [k for k in value if k not in space.spaces]
        if missing or extra:
            return f"its keys differ from the space's: missing {missing}, unexpected {extra}"
        for key, sub in space.spaces.items():
            reason = space_violation(sub, value[key])
            if reason is not None:
                return f"[{key!r}] is not in {sub}: {reason}"
    if isinstance(space, spaces.Tuple):
        if isinstance(value, np.ndarray) and value.ndim == 0:
            return "it is a 0-d array, not a tuple"
        if isinstance(value, (list, np.ndarray)):
            value = tuple(value)
        if not isinstance(value, tuple):
            return f"it is a {type(value).__name__}, not a tuple"
        if len(value) != len(space.spaces):
            return f"it has {len(value)} items, the space has {len(space.spaces)}"
        for i, sub in enumerate(space.spaces):
            reason = space_violation(sub, value[i])
            if reason is not None:
                return f"[{i}] is not in {sub}: {reason}"
    return f"gymnasium's {type(space).__name__}.contains rejects it"
