"""The single-agent rules of ``rlightning.testing`` (see :data:`rlightning.testing.RULES`).

Each check takes a response's field mapping and raises the rule's error, its message ending with
``[rule <id>]``; ``subject`` prefixes the names in messages (``"response."`` or
``"agent 'a' "``). The ``action-in-space`` rule, which needs
:func:`rlightning.testing.space_violation`, is applied there. Private: use the checkers of
:mod:`rlightning.testing`. Nothing here imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from rlightning._space_reasons import _is_tensor
from rlightning._tree import tree_repr
from rlightning.types.policy_response import PolicyResponse

_SCALAR_FIELDS = ("value", "log_prob")
_STAMP_FIELDS = ("ts_env_sent_ns", "ts_policy_sent_ns")


def _fail(error: type[Exception], rule: str, subject: str, problem: str, value: Any) -> Exception:
    return error(f"{subject} {problem}; got {tree_repr(value)} [rule {rule}]")


def _as_real(value: Any) -> float | None:
    """One real number held by ``value``, or None if it holds none or several."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float, np.integer, np.floating)):
        return float(value)
    if isinstance(value, np.ndarray):
        if value.size == 1 and value.dtype.kind in "iuf":
            return float(value.reshape(-1)[0])
        return None
    if _is_tensor(value):
        dtype = value.dtype
        real = dtype.is_floating_point or not (dtype.is_complex or str(dtype) == "torch.bool")
        if value.numel() == 1 and real:
            return float(value.detach().reshape(-1)[0].item())
    return None


def _check_scalar_fields(fields: Mapping[str, Any], subject: str) -> None:
    for name in _SCALAR_FIELDS:
        if name not in fields or fields[name] is None:
            continue
        value = fields[name]
        number = _as_real(value)
        if number is None:
            raise _fail(
                ValueError,
                "scalar-field",
                f"{subject}{name}",
                "must hold one real number (an int or float, or an array/tensor of one element)",
                value,
            )
        if name == "value" and not math.isfinite(number):
            raise _fail(ValueError, "scalar-field", f"{subject}{name}", "must be finite", value)
        if name == "log_prob" and math.isnan(number):
            raise _fail(ValueError, "scalar-field", f"{subject}{name}", "must not be NaN", value)


def _check_stamps(fields: Mapping[str, Any], subject: str) -> None:
    for name in _STAMP_FIELDS:
        stamp = fields.get(name)
        if stamp is None:
            continue
        if isinstance(stamp, bool) or not isinstance(stamp, (int, np.integer)):
            raise _fail(
                ValueError,
                "timestamp",
                f"{subject}{name}",
                "must be an int of nanoseconds since the epoch (time.time_ns())",
                stamp,
            )
        if stamp < 0:
            raise _fail(ValueError, "timestamp", f"{subject}{name}", "must not be negative", stamp)


def _check_buffer_action(fields: Mapping[str, Any], space: spaces.Space[Any], subject: str) -> None:
    buffer_action = fields.get("buffer_action")
    if buffer_action is None or not isinstance(space, spaces.Box):
        return
    shape = (
        tuple(buffer_action.shape) if hasattr(buffer_action, "shape") else np.shape(buffer_action)
    )
    if shape != space.shape:
        raise _fail(
            ValueError,
            "buffer-action",
            f"{subject}buffer_action",
            f"must have the action space's shape {space.shape}, not {shape}",
            buffer_action,
        )


def _mask_array(mask: Any, n: int, where: str) -> np.ndarray[Any, Any]:
    if _is_tensor(mask):
        mask = mask.detach().cpu().numpy()
    array = np.asarray(mask)
    if array.shape != (n,):
        raise _fail(
            ValueError, "action-mask", where, f"must have shape ({n},), not {array.shape}", mask
        )
    if array.dtype.kind not in "biu" or not np.isin(array, (0, 1)).all():
        raise _fail(ValueError, "action-mask", where, "must hold only 0 and 1 (or bools)", mask)
    return array


def _check_action_mask(fields: Mapping[str, Any], space: spaces.Space[Any], subject: str) -> None:
    mask = fields.get("action_mask")
    if mask is None:
        return
    where = f"{subject}action_mask"
    action = fields["action"]
    if isinstance(space, spaces.Discrete):
        array = _mask_array(mask, int(space.n), where)
        index = int(action) - int(space.start)
        if array.any() and not array[index]:
            raise _fail(
                ValueError,
                "action-mask",
                f"{subject}action",
                f"{int(action)} is masked out by action_mask (legal: "
                f"{[int(i) + int(space.start) for i in np.flatnonzero(array)]})",
                action,
            )
    elif isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim == 1:
        if not isinstance(mask, tuple) or len(mask) != len(space.nvec):
            raise _fail(
                ValueError,
                "action-mask",
                where,
                f"must be a tuple of {len(space.nvec)} per-dimension masks",
                mask,
            )
        for dim, (n, sub) in enumerate(zip(space.nvec, mask, strict=True)):
            array = _mask_array(sub, int(n), f"{where}[{dim}]")
            index = int(action[dim]) - int(space.start[dim])
            if array.any() and not array[index]:
                raise _fail(
                    ValueError,
                    "action-mask",
                    f"{subject}action[{dim}]",
                    f"{int(action[dim])} is masked out by action_mask[{dim}]",
                    action,
                )


def _check_env_id(response: PolicyResponse) -> None:
    env_id = response.__dict__.get("env_id")
    if env_id is not None and not isinstance(env_id, str):
        raise _fail(TypeError, "env-id", "response.env_id", "must be a str or None", env_id)
