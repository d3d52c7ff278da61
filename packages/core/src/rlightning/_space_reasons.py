"""Why a value is not in a gymnasium space, per space type (private).

The helpers behind :func:`rlightning.rules.space_violation`: the verdict is always
:func:`rlightning.rules.contains` (gymnasium's own ``space.contains``); these functions only
explain a rejection. Use ``space_violation``, not these. Nothing here imports torch.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
from gymnasium import spaces

from rlightning._torch import tensor_type


def _is_tensor(value: object) -> bool:
    tensor = tensor_type()
    return tensor is not None and isinstance(value, tensor)


def as_box_array(value: Any, dtype: np.dtype[Any]) -> np.ndarray[Any, Any]:
    """``np.asarray(value, dtype=dtype)``, refusing an out-of-range Python int on numpy 1.x too.

    numpy 2 raises OverflowError for ``np.asarray(-1, dtype=np.uint8)``; numpy 1.24 to 1.26 only
    warn (DeprecationWarning) and wrap it to 255, which would let -1 pass as a legal uint8
    action. That warning is raised here, so both numpy lines refuse the value; numpy's other
    cast warnings (NaN to int) are silenced, as gymnasium's own cast is.

    Raises:
        TypeError, ValueError, OverflowError: the value cannot be cast.
        DeprecationWarning: numpy 1.x would wrap an out-of-range int.
    """
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("error", DeprecationWarning)
        return np.asarray(value, dtype=dtype)


def _first_index(mask: np.ndarray[Any, Any]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def _box_reason(space: spaces.Box, value: Any) -> str:
    if not isinstance(value, np.ndarray):
        try:
            value = as_box_array(value, space.dtype)  # as rlightning.rules.contains casts
        except (TypeError, ValueError, OverflowError, DeprecationWarning):
            return f"it cannot be converted to a {space.dtype} array"
    if not np.can_cast(value.dtype, space.dtype):
        return (
            f"dtype {value.dtype} cannot be cast safely to the space's {space.dtype} "
            f"(cast it with .astype(np.{space.dtype}))"
        )
    if value.shape != space.shape:
        return f"shape {value.shape} is not the space's shape {space.shape}"
    with np.errstate(invalid="ignore"):
        nan = np.isnan(value) if value.dtype.kind in "fc" else np.zeros(value.shape, bool)
        below = value < space.low
        above = value > space.high
    if nan.any():
        return f"element {list(_first_index(nan))} is NaN"
    if below.any():
        idx = _first_index(below)
        return f"element {list(idx)} = {value[idx]!s} is below low = {space.low[idx]!s}"
    if above.any():
        idx = _first_index(above)
        return f"element {list(idx)} = {value[idx]!s} is above high = {space.high[idx]!s}"
    return "gymnasium's Box.contains rejects it"


def _discrete_reason(space: spaces.Discrete, value: Any) -> str:
    is_int = isinstance(value, int) and not isinstance(value, bool)
    is_np_int = isinstance(value, (np.generic, np.ndarray)) and (
        np.issubdtype(value.dtype, np.integer) and value.shape == ()
    )
    if not (is_int or is_np_int):
        return (
            "it is not an integer (a Python int or a 0-d numpy integer), "
            f"it is a {type(value).__name__}"
            + (f" of shape {value.shape}" if isinstance(value, np.ndarray) else "")
        )
    low, high = int(space.start), int(space.start) + int(space.n) - 1
    if not low <= int(value) <= high:
        return f"{int(value)} is outside [{low}, {high}]"
    return f"its dtype cannot be cast safely to the space's {space.dtype}"


def _multi_discrete_reason(space: spaces.MultiDiscrete, value: Any) -> str:
    if isinstance(value, (list, tuple)):
        value = np.array(value)
    if not isinstance(value, np.ndarray):
        return f"it is a {type(value).__name__}, not an integer numpy array"
    if value.shape != space.shape:
        return f"shape {value.shape} is not the space's shape {space.shape}"
    if not np.can_cast(value.dtype, space.dtype):
        return f"dtype {value.dtype} cannot be cast safely to the space's {space.dtype}"
    top = space.start + space.nvec - 1
    bad = (value < space.start) | (value > top)
    idx = _first_index(bad)
    return f"element {list(idx)} = {value[idx]!s} is outside [{space.start[idx]!s}, {top[idx]!s}]"


def _multi_binary_reason(space: spaces.MultiBinary, value: Any) -> str:
    if isinstance(value, (list, tuple)):
        value = np.array(value)
    if not isinstance(value, np.ndarray):
        return f"it is a {type(value).__name__}, not a numpy array of 0s and 1s"
    if value.shape != space.shape:
        return f"shape {value.shape} is not the space's shape {space.shape}"
    idx = _first_index(~np.logical_or(value == 0, value == 1))
    return f"element {list(idx)} = {value[idx]!s} is neither 0 nor 1"
