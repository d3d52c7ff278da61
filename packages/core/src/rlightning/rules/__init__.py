"""The rules every rlightning path applies, each written once, and the one error they raise.

:mod:`rlightning.testing`, the response classes and the adapters (``rlightning_sb3``,
``rlightning_pettingzoo``) call these functions; none keeps its own copy of a rule. Each rule has
an id (the keys of :data:`RULES`); a broken rule raises the error built by :func:`rule_error`::

    response.action_mask allows no action of Discrete(3); got array([0, 0, 0], dtype=int8);
    fix: an agent that cannot act must not be asked to act (...) [rule no-legal-action]

================================  ==========================================================
rule                              owner
================================  ==========================================================
``response-type``                 :func:`check_response_type`, :func:`response_type_error`
``env-id``                        :func:`check_env_id`, :func:`check_env_ids`,
                                  :func:`check_env_id_matches`
``has-action``                    :func:`check_has_action`
``action-in-space``               :func:`contains`, :func:`space_violation`,
                                  :func:`check_action`
``action-mask``                   :func:`takes_action_mask`, :func:`mask_size`,
                                  :func:`check_action_mask`, :func:`flat_mask`,
                                  :func:`action_allowed`, :func:`mask_violation`,
                                  :func:`check_action_allowed`
``no-legal-action``               :func:`check_action_mask` (and all that call it)
``scalar-field``                  :func:`check_scalar_field`, :data:`SCALAR_FIELDS`
``buffer-action``                 :func:`check_buffer_action`
``timestamp``                     :data:`STAMP_FIELDS`, :data:`STAMP_ORDER`,
                                  :func:`check_stamp`, :class:`StampWarning`,
                                  :data:`STAMP_FUTURE_TOLERANCE_NS`,
                                  :data:`STAMP_EPOCH_FLOOR_NS`; :data:`SHARED_FIELDS`
                                  (with :data:`POLICY_VERSION_FIELD`)
``boolean``                       :func:`as_bools`
``flag``                          :func:`check_flag`
``count``                         :func:`check_count`, :func:`check_seeds`
``known-agent``                   :func:`check_known_agents`
``live-agents``                   :func:`check_live_agents`
``no-inactive-action``            :func:`check_live_agents`
``per-agent-keys``                :func:`check_per_agent_field`,
                                  :func:`check_per_agent_keys`
``framework-version``             :func:`check_framework_version`,
                                  :func:`framework_version_verdict`,
                                  :func:`framework_tested_range`,
                                  :class:`UntestedVersionWarning`
(every message)                   :func:`rule_error`, :func:`rule_message`, :func:`describe`
================================  ==========================================================

Callers outside this package raise a rule's error through these functions only; none builds the
``[rule <id>]`` suffix by hand.

:class:`TypeError` means the wrong kind of value (a stamp that is not an int, a mask of strings);
:class:`ValueError` a bad value or shape. Nothing here modifies its inputs, and nothing imports
torch: a tensor is recognised only when torch is already imported (no tensor can exist
otherwise), and is read with ``detach().cpu().numpy()``.
"""

from __future__ import annotations

from rlightning.rules._agents import (
    check_known_agents,
    check_live_agents,
    check_per_agent_field,
    check_per_agent_keys,
)
from rlightning.rules._counts import check_count, check_seeds
from rlightning.rules._errors import RULES, describe, rule_error, rule_message
from rlightning.rules._flags import check_flag
from rlightning.rules._mask_actions import action_allowed, mask_violation
from rlightning.rules._masks import (
    MaskLayout,
    check_action_mask,
    flat_mask,
    mask_size,
    takes_action_mask,
)
from rlightning.rules._responses import (
    SCALAR_FIELDS,
    check_action,
    check_action_allowed,
    check_buffer_action,
    check_env_id,
    check_env_id_matches,
    check_env_ids,
    check_has_action,
    check_response_type,
    check_scalar_field,
    response_type_error,
)
from rlightning.rules._space import contains, space_violation
from rlightning.rules._values import (
    POLICY_VERSION_FIELD,
    SHARED_FIELDS,
    STAMP_EPOCH_FLOOR_NS,
    STAMP_FIELDS,
    STAMP_FUTURE_TOLERANCE_NS,
    STAMP_ORDER,
    StampWarning,
    as_bools,
    check_stamp,
)
from rlightning.rules._versions import (
    UntestedVersionWarning,
    VersionVerdict,
    check_framework_version,
    framework_tested_range,
    framework_version_verdict,
)

__all__ = [
    "POLICY_VERSION_FIELD",
    "RULES",
    "SCALAR_FIELDS",
    "SHARED_FIELDS",
    "STAMP_EPOCH_FLOOR_NS",
    "STAMP_FIELDS",
    "STAMP_FUTURE_TOLERANCE_NS",
    "STAMP_ORDER",
    "MaskLayout",
    "StampWarning",
    "UntestedVersionWarning",
    "VersionVerdict",
    "action_allowed",
    "as_bools",
    "check_action",
    "check_action_allowed",
    "check_action_mask",
    "check_buffer_action",
    "check_count",
    "check_env_id",
    "check_env_id_matches",
    "check_env_ids",
    "check_flag",
    "check_framework_version",
    "check_has_action",
    "check_known_agents",
    "check_live_agents",
    "check_per_agent_field",
    "check_per_agent_keys",
    "check_response_type",
    "check_scalar_field",
    "check_seeds",
    "check_stamp",
    "contains",
    "describe",
    "flat_mask",
    "framework_tested_range",
    "framework_version_verdict",
    "mask_size",
    "mask_violation",
    "response_type_error",
    "rule_error",
    "rule_message",
    "space_violation",
    "takes_action_mask",
]

# The functions are defined in private modules (one concept each) and presented here, where they
# are documented and imported from: their __module__ says so, for the API page, doctest and reprs.
for _function in (
    action_allowed,
    as_bools,
    check_action,
    check_action_allowed,
    check_action_mask,
    check_buffer_action,
    check_count,
    check_env_id,
    check_env_id_matches,
    check_env_ids,
    check_flag,
    check_framework_version,
    check_has_action,
    check_known_agents,
    check_live_agents,
    check_per_agent_field,
    check_per_agent_keys,
    check_response_type,
    check_scalar_field,
    check_seeds,
    check_stamp,
    contains,
    describe,
    flat_mask,
    framework_tested_range,
    framework_version_verdict,
    mask_size,
    mask_violation,
    response_type_error,
    rule_error,
    rule_message,
    space_violation,
    takes_action_mask,
):
    _function.__module__ = __name__
del _function
StampWarning.__module__ = __name__
UntestedVersionWarning.__module__ = __name__
