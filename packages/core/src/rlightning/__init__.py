"""rlightning: one fast, safe container for what a policy answers on each environment step.

Public names:

* :class:`PolicyResponse` -- a single-agent response (``action`` plus any extra fields);
* :class:`MultiAgentPolicyResponse` -- per-agent actions keyed by agent id.

torch is optional (``pip install rlightning-core[torch]``); without it everything but ``cuda()``
works on numpy and Python data.
"""

from importlib.metadata import PackageNotFoundError, version

from rlightning.types.policy_response import MultiAgentPolicyResponse, PolicyResponse

try:
    __version__ = version("rlightning-core")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = ["MultiAgentPolicyResponse", "PolicyResponse", "__version__"]
