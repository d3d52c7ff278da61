"""The rules every rlightning path applies, each written once, and the one error they raise.

:mod:`rlightning.testing`, the response classes and the adapters (``rlightning_sb3``,
``rlightning_pettingzoo``) call these functions; none keeps its own copy of a rule. Each rule has
an id (the keys of :data:`RULES`); a broken rule raises the error built by :func:`rule_error`::

    response.action_mask allows no action of Discrete(3); got array([0, 0, 0], dtype=int8);
    fix: an agent that cannot act must not be asked to act (...) [rule no-legal-action]

================================  ==========================================================
rule                              owner
================================  ==========================================================
``action-in-space``               :func:`contains`, :func:`space_violation`
``action-mask``                   :func:`mask_size`, :func:`check_action_mask`,
                                  :func:`flat_mask`, :func:`action_allowed`,
                                  :func:`mask_violation`
``no-legal-action``               :func:`check_action_mask` (and all that call it)
``timestamp``                     :data:`STAMP_FIELDS`, :func:`check_stamp`,
                                  :class:`StampWarning`, :data:`STAMP_FUTURE_TOLERANCE_NS`,
                                  :data:`STAMP_EPOCH_FLOOR_NS`
``boolean``                       :func:`as_bools`
(every message)                   :func:`rule_error`, :func:`rule_message`, :func:`describe`
================================  ==========================================================

:class:`TypeError` means the wrong kind of value (a stamp that is not an int, a mask of strings);
:class:`ValueError` a bad value or shape. Nothing here modifies its inputs, and nothing imports
torch: a tensor is recognised only when torch is already imported (no tensor can exist
otherwise), and is read with ``detach().cpu().numpy()``.
"""

from __future__ import annotations

from rlightning.rules._errors import RULES, describe, rule_error, rule_message
from rlightning.rules._mask_actions import action_allowed, mask_violation
from rlightning.rules._masks import MaskLayout, check_action_mask, flat_mask, mask_size
from rlightning.rules._space import contains, space_violation
from rlightning.rules._values import (
    STAMP_EPOCH_FLOOR_NS,
    STAMP_FIELDS,
    STAMP_FUTURE_TOLERANCE_NS,
    StampWarning,
    as_bools,
    check_stamp,
)

__all__ = [
    "RULES",
    "STAMP_EPOCH_FLOOR_NS",
    "STAMP_FIELDS",
    "STAMP_FUTURE_TOLERANCE_NS",
    "MaskLayout",
    "StampWarning",
    "action_allowed",
    "as_bools",
    "check_action_mask",
    "check_stamp",
    "contains",
    "describe",
    "flat_mask",
    "mask_size",
    "mask_violation",
    "rule_error",
    "rule_message",
    "space_violation",
]

# The functions are defined in private modules (one concept each) and presented here, where they
# are documented and imported from: their __module__ says so, for the API page, doctest and reprs.
for _function in (
    action_allowed,
    as_bools,
    check_action_mask,
    check_stamp,
    contains,
    describe,
    flat_mask,
    mask_size,
    mask_violation,
    rule_error,
    rule_message,
    space_violation,
):
    _function.__module__ = __name__
del _function
StampWarning.__module__ = __name__
