"""Response types: :class:`PolicyResponse` and :class:`MultiAgentPolicyResponse`.

:func:`response_from_checked` and :func:`response_from_fields` build a response without its
constructor's checks, for adapters' checked per-step paths.
"""

from rlightning._fields import response_from_checked, response_from_fields
from rlightning.types.policy_response import MultiAgentPolicyResponse, PolicyResponse

__all__ = [
    "MultiAgentPolicyResponse",
    "PolicyResponse",
    "response_from_checked",
    "response_from_fields",
]
