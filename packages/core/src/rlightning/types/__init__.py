"""Response types: :class:`PolicyResponse` and :class:`MultiAgentPolicyResponse`."""

from rlightning.types.policy_response import MultiAgentPolicyResponse, PolicyResponse

__all__ = ["MultiAgentPolicyResponse", "PolicyResponse"]
