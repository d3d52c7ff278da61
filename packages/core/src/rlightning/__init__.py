"""rlightning: one fast, safe container for what a policy answers on each environment step.

Public names:

* :class:`PolicyResponse` -- a single-agent response (``action`` plus any extra fields);
* :class:`MultiAgentPolicyResponse` -- per-agent actions keyed by agent id;
* :class:`PerEnv` -- per-env values of a stacked response (``PolicyResponse.stack``);
* :class:`EnvIds` -- the ``env_ids`` of a stacked response;
* :class:`ResponseBatch` -- the per-env responses of one batched call, split only when read;
* :class:`StampWarning` -- a latency method read an unusable stamp and returned 0.0;
* :class:`UntestedVersionWarning` -- an adapter was imported with a framework release newer than
  any it was tested with (the one class every adapter warns with);
* :class:`WireFormatError` -- raised by ``from_bytes`` for bad bytes (see :mod:`rlightning.wire`).

torch is optional (``pip install rlightning-core[torch]``); without it everything but ``cuda()``
works on numpy and Python data.
"""

from importlib.metadata import PackageNotFoundError, version

from rlightning._stack import EnvIds, PerEnv
from rlightning.batch import ResponseBatch
from rlightning.rules import StampWarning, UntestedVersionWarning
from rlightning.types.policy_response import MultiAgentPolicyResponse, PolicyResponse
from rlightning.wire import WireFormatError

try:
    __version__ = version("rlightning-core")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "EnvIds",
    "MultiAgentPolicyResponse",
    "PerEnv",
    "PolicyResponse",
    "ResponseBatch",
    "StampWarning",
    "UntestedVersionWarning",
    "WireFormatError",
    "__version__",
]
