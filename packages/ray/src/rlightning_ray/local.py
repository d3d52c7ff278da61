"""Runner-local inference: a policy replica in the runner's own process (the local mode).

In the server mode every env step crosses a process: the runner sends its observation batch to
the :class:`~rlightning_ray.PolicyServer` and waits. In the local mode each
:class:`~rlightning_ray.EnvRunner` holds a :class:`LocalPolicy`: a
:class:`~rlightning_ray.BatchPolicy` built in the runner's process by a factory (for SB3,
``partial(rlightning_ray.sb3.SB3BatchPolicy, make_model, seed=s)``, which acts through
``rlightning_sb3.ActingReplica``), called with the runner's whole env group at each step.

* **The answers are the server's**: the policy is called as the server calls it for a batch of
  one request (the same arguments; ``action_masks`` only when the envs sent masks), and each
  answer carries ``policy_version`` and the three server stamps (``ts_policy_recv_ns`` and
  ``ts_infer_start_ns`` both when the call began: nothing waits in a queue;
  ``ts_policy_sent_ns`` when it ended) with the runner's ``ts_env_sent_ns`` echoed per row. The
  runner then checks and records them as it checks a server's: the same fragments, stamps,
  versions and checks.
* **Weights between fragments, never inside one**: the learner publishes to a
  :class:`~rlightning_ray.WeightsRegistry` (:meth:`Collector.publish
  <rlightning_ray.Collector.publish>`); the runner calls :meth:`LocalPolicy.refresh` at the
  start of each ``sample`` and loads the newest version there, so one fragment is acted by one
  version. The Collector claims the registry (only it publishes there from then on) and hands
  each runner the newest ``(version, [ObjectRef])`` with each ``sample``: no registry read per
  fragment.
* **Exactness**: with all of a runner's envs in every call, in env order, an ``ActingReplica``
  draws what SB3's ``collect_rollouts`` draws over those envs (``make_vec_env(k, seed=s)``), so a
  runner's buffer columns equal SB3's, array for array (tests/ray/test_local.py). A seeded
  factory seeds each runner's replica alike: give one factory per runner
  (``start_runners(..., policy=[...])``) for distinct random streams.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rlightning import PolicyResponse
from rlightning.rules import as_bools
from rlightning_ray._rows import concat_observations
from rlightning_ray.checks import POLICY_VERSION_FIELD
from rlightning_ray.server import BatchPolicy, _stacked

__all__ = ["LocalPolicy"]

_READ: Any = object()  # refresh()'s default: read the registry

# The names LocalPolicy.act writes straight into a PolicyResponse's fields (as its __setattr__
# would): none may be a reserved member of the class (nor env_id, which __setattr__ checks).
assert PolicyResponse._reserved_fields.isdisjoint(
    {"env_id", "ts_env_sent_ns", "ts_policy_recv_ns", "ts_infer_start_ns", POLICY_VERSION_FIELD}
)


class LocalPolicy:
    """A :class:`~rlightning_ray.BatchPolicy` acting in the runner's process (module docstring).

    Args:
        factory: Builds the policy (called once, here: in the runner's process).
        registry: A :class:`~rlightning_ray.WeightsRegistry` handle the learner publishes to
            (None: the factory's weights, version 0, forever).
        runner_id: The runner holding it (for messages).

    Attributes:
        version: The version of the weights in use (0: the factory's).
        policy: The policy the factory built.
        reset_run_id: The ``reset_run_id`` of the publish loaded last (an
            :class:`rlightning_sb3.ActingState`'s: the learner's latest training run that reset
            its env), or None (nothing loaded, or a publish without one, e.g.
            ``policy_weights``). The runner resets its envs at a new one
            (:meth:`EnvRunner.sample <rlightning_ray.EnvRunner.sample>`).
    """

    def __init__(
        self,
        factory: Callable[[], BatchPolicy],
        *,
        registry: Any = None,
        runner_id: str = "runner",
    ) -> None:
        if not callable(factory):
            raise TypeError(
                f"runner {runner_id!r}: policy must be a callable building a BatchPolicy (e.g. "
                f"partial(SB3BatchPolicy, make_model)), got {type(factory).__name__}"
            )
        self.policy: Any = factory()
        self.version = 0
        self._loaded = False  # whether a publish was loaded (version 0 may be published too)
        self.reset_run_id: int | None = None
        self._registry = registry
        self._runner_id = runner_id

    def refresh(self, latest: Any = _READ) -> int:
        """Load the newest published weights if they are newer than :attr:`version`.

        The first publish is loaded whatever its version (also 0: the factory's weights are
        not the learner's).

        The runner calls it before each fragment (never inside one). Without ``latest`` it
        reads the registry (one actor call); a local-mode :class:`~rlightning_ray.Collector`,
        the registry's only publisher once it claimed it, hands the newest weights with each
        ``sample`` instead, which saves that call. When they are newer, the weights' object is
        fetched (``ray.get``) and passed to the policy's ``set_weights``.

        Args:
            latest: The newest ``(version, [ObjectRef])`` published, or None when nothing was
                published yet (then the factory's weights stay); not given: read the registry.

        Returns:
            The version in use afterwards. Mutates :attr:`version` and :attr:`reset_run_id`
            (the loaded publish's ``reset_run_id`` attribute, None without one) on a load.

        Raises:
            TypeError: a newer version is published but the policy has no ``set_weights``.
            RuntimeError: the policy's ``set_weights`` raised (the runner and both versions
                named; the cause chained); the policy keeps its version.
        """
        if latest is _READ:
            if self._registry is None:
                return self.version
            import ray

            latest = ray.get(self._registry.latest.remote())
        if latest is None or (self._loaded and latest[0] <= self.version):
            return self.version
        import ray

        version, refs = latest
        set_weights = getattr(self.policy, "set_weights", None)
        if set_weights is None:
            raise TypeError(
                f"runner {self._runner_id!r}: {type(self.policy).__name__} has no "
                f"set_weights(); the published weights version {version} cannot be used"
            )
        weights = ray.get(refs[0])
        try:
            set_weights(weights)
        except Exception as exc:
            raise RuntimeError(
                f"runner {self._runner_id!r} could not load the published weights version "
                f"{version} into {type(self.policy).__name__}: {type(exc).__name__}: {exc}; it "
                f"keeps version {self.version} (publish weights of the acting model's "
                "architecture under a newer version)"
            ) from exc
        self.version = int(version)
        self._loaded = True
        run = getattr(weights, "reset_run_id", None)
        self.reset_run_id = run if isinstance(run, int) and not isinstance(run, bool) else None
        return self.version

    def act(
        self,
        observation: Any,
        env_ids: list[str],
        episode_start: Any,
        ts_env_sent_ns: int,
        *,
        action_masks: Any = None,
    ) -> Any:
        """Answer the runner's rows as a :class:`~rlightning_ray.PolicyServer` answers them.

        Args:
            observation: ``(k, *obs_shape)`` (a dict of such arrays; a list of per-env dicts
                for PettingZoo).
            env_ids: The runner's ``k`` env ids, in row order.
            episode_start: ``(k,)`` booleans, the previous step's dones.
            ts_env_sent_ns: The runner's stamp (``time.time_ns()``), echoed on every row.
            action_masks: The rows' masks, or None (then not passed to the policy).

        Returns:
            A stacked :class:`~rlightning.PolicyResponse` of the ``k`` rows (a list of
            :class:`~rlightning.MultiAgentPolicyResponse`, one per env, for a multi-agent
            policy), each part stamped (module docstring) and carrying ``policy_version``.
            Mutates the policy (counters, noise) as its call does.

        Raises:
            TypeError: the policy answered something that is no response (named).
            Exception: what the policy raised.
        """
        recv = time.time_ns()
        ids = list(env_ids)
        starts = as_bools(episode_start, "episode_start", shape=(len(ids),), labels=ids)
        extra: dict[str, Any] = {} if action_masks is None else {"action_masks": action_masks}
        stacked = _stacked(
            self.policy(
                concat_observations([observation]),
                ids,
                starts,
                [ts_env_sent_ns] * len(ids),
                **extra,
            )
        )
        done = time.time_ns()
        stamps = {
            "ts_env_sent_ns": ts_env_sent_ns,
            "ts_policy_recv_ns": recv,
            "ts_infer_start_ns": recv,
            "ts_policy_sent_ns": done,
            POLICY_VERSION_FIELD: self.version,
        }
        for part in stacked if isinstance(stacked, list) else [stacked]:
            if type(part) is PolicyResponse:  # what setattr does: none of the names is reserved
                part.__dict__.update(stamps)
            else:  # a subclass may reserve more names: its own __setattr__ judges
                for name, value in stamps.items():
                    setattr(part, name, value)
        return stacked
