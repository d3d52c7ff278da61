"""The single-agent rules of ``rlightning.testing`` (see :data:`rlightning.rules.RULES`).

Each check takes a response's field mapping and raises the rule's error (built by
:func:`rlightning.rules.rule_error`, its message ending with ``[rule <id>]``); ``subject``
prefixes the names in messages (``"response."`` or ``"agent 'a' "``). The rules that are not
specific to a response (stamps, masks) are :mod:`rlightning.rules`' functions, called here; the
``action-in-space`` rule is applied in :mod:`rlightning.testing`. Private: use the checkers of
:mod:`rlightning.testing`. Nothing here imports torch.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from gymnasium import spaces

from rlightning._space_reasons import _is_tensor
from rlightning.rules import STAMP_FIELDS, check_stamp, mask_violation, rule_error
from rlightning.types.policy_response import PolicyResponse

_SCALAR_FIELDS = ("value", "log_prob")
_STAMPS_IN_ORDER = tuple(sorted(STAMP_FIELDS))  # checked in a fixed order: ts_env_, ts_policy_


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
            raise rule_error(
                ValueError,
                "scalar-field",
                f"{subject}{name}",
                "must hold one real number (an int or float, or an array/tensor of one element)",
                value,
            )
        if name == "value" and not math.isfinite(number):
            raise rule_error(
                ValueError, "scalar-field", f"{subject}{name}", "must be finite", value
            )
        if name == "log_prob" and math.isnan(number):
            raise rule_error(
                ValueError, "scalar-field", f"{subject}{name}", "must not be NaN", value
            )


def _check_stamps(fields: Mapping[str, Any], subject: str) -> None:
    for name in _STAMPS_IN_ORDER:
        stamp = fields.get(name)
        if stamp is not None:
            check_stamp(name, stamp, subject)


def _check_buffer_action(fields: Mapping[str, Any], space: spaces.Space[Any], subject: str) -> None:
    buffer_action = fields.get("buffer_action")
    if buffer_action is None or not isinstance(space, spaces.Box):
        return
    shape = (
        tuple(buffer_action.shape) if hasattr(buffer_action, "shape") else np.shape(buffer_action)
    )
    if shape != space.shape:
        raise rule_error(
            ValueError,
            "buffer-action",
            f"{subject}buffer_action",
            f"must have the action space's shape {space.shape}, not {shape}",
            buffer_action,
        )


def _check_action_mask(fields: Mapping[str, Any], space: spaces.Space[Any], subject: str) -> None:
    mask = fields.get("action_mask")
    if mask is None or not isinstance(
        space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
    ):
        return
    action = fields["action"]
    reason = mask_violation(
        space,
        mask,
        action,
        layout="gymnasium" if isinstance(mask, tuple) else "flat",
        subject=f"{subject}action_mask",
    )
    if reason is not None:
        raise rule_error(ValueError, "action-mask", f"{subject}action", reason, action)


def _check_env_id(response: PolicyResponse) -> None:
    env_id = response.__dict__.get("env_id")
    if env_id is not None and not isinstance(env_id, str):
        raise rule_error(TypeError, "env-id", "response.env_id", "must be a str or None", env_id)
