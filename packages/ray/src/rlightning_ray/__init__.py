"""rlightning-ray: Ray env runners and a batching policy server, with SB3's exact rollouts.

Public names:

* :class:`EnvRunner` -- a Ray actor hosting an env group of ``k`` envs that steps them with the
  server's answers and returns their fragments (stamps, answer checks, restarts, ``describe``,
  ``ping``);
* :class:`EnvGroup`, :class:`GroupObservation` -- the env-group protocol (``reset``,
  ``observe``, ``step``, ``fragment``); :class:`GymEnvGroup` -- gymnasium envs exactly as SB3's
  ``make_vec_env`` + ``DummyVecEnv`` (the runner's default), whose fragments are
  :class:`Fragment` s; :class:`EnvStepError`, :class:`EnvContractError`;
* :class:`PolicyServer` -- a Ray actor batching every runner's requests (``max_batch`` rows or
  ``max_wait_us``; a fixed ``order`` in the deterministic mode) into one forward pass of a
  :class:`BatchPolicy`, answering each runner with its own rows, stamped and versioned;
* :class:`LocalPolicy` -- the local mode: a runner's own policy replica, called with its whole
  env group at each step, answers stamped and versioned as the server's, newer weights loaded
  between fragments (``start_runners(..., policy=factory)``, :meth:`Collector.publish`);
* :class:`WeightsRegistry`, :func:`publish_weights` -- weights through the object store, switched
  between batches, recovered by a restarted server;
* :class:`Collector` -- the driver's side: fragments in runner order, checked, with per-hop
  latency (:func:`latency_report`, :data:`HOPS`) and a timeout on every call
  (:data:`DEFAULT_TIMEOUT_S`); :class:`LockstepError` -- the deterministic mode's refusal of a
  call a restarted runner fell out of;
* :func:`start_server`, :func:`start_runners` -- the actors with Ray's restarts and retries
  (:class:`UnschedulableWarning` when the runners cannot all be placed);
* :func:`check_answer` -- the routing rules (env ids, policy staleness);
* :mod:`rlightning_ray.sb3` (``[sb3]`` extra) -- ``SB3BatchPolicy``, ``policy_weights``,
  ``collect_rollout``; :mod:`rlightning_ray.pettingzoo` (``[pettingzoo]`` extra) -- runners of
  PettingZoo parallel envs answered by ``SharedPolicyAdapter``.

Importing this package checks the installed Ray against :data:`RAY_SUPPORTED`.
"""

from importlib.metadata import PackageNotFoundError, version

import ray as _ray

from rlightning_ray._versions import (
    RAY_HIGHEST_TESTED,
    RAY_SUPPORTED,
    UntestedVersionWarning,
    check_ray_version,
)

check_ray_version(_ray.__version__)

from rlightning_ray.actors import UnschedulableWarning, start_runners, start_server  # noqa: E402
from rlightning_ray.checks import POLICY_VERSION_FIELD, check_answer  # noqa: E402
from rlightning_ray.collector import DEFAULT_TIMEOUT_S, Collector  # noqa: E402
from rlightning_ray.groups import (  # noqa: E402
    EnvContractError,
    EnvGroup,
    EnvStepError,
    GroupObservation,
    GymEnvGroup,
)
from rlightning_ray.latency import HOPS, HopStats, LatencyReport, latency_report  # noqa: E402
from rlightning_ray.local import LocalPolicy  # noqa: E402
from rlightning_ray.runner import EnvRunner, Fragment, stack_observations  # noqa: E402
from rlightning_ray.server import BatchPolicy, LockstepError, PolicyServer  # noqa: E402
from rlightning_ray.weights import WeightsRegistry, publish_weights  # noqa: E402

try:
    __version__ = version("rlightning-ray")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "DEFAULT_TIMEOUT_S",
    "HOPS",
    "POLICY_VERSION_FIELD",
    "RAY_HIGHEST_TESTED",
    "RAY_SUPPORTED",
    "BatchPolicy",
    "Collector",
    "EnvContractError",
    "EnvGroup",
    "EnvRunner",
    "EnvStepError",
    "Fragment",
    "GroupObservation",
    "GymEnvGroup",
    "HopStats",
    "LatencyReport",
    "LocalPolicy",
    "LockstepError",
    "PolicyServer",
    "UnschedulableWarning",
    "UntestedVersionWarning",
    "WeightsRegistry",
    "__version__",
    "check_answer",
    "check_ray_version",
    "latency_report",
    "publish_weights",
    "stack_observations",
    "start_runners",
    "start_server",
]
