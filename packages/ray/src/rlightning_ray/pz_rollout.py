"""The shared on-policy PettingZoo collector on Ray runners (agents that die, join and wait).

:class:`RaySharedRolloutCollector` is :class:`rlightning_pettingzoo.SharedRolloutCollector` with
its env copies spread over Ray actors (local mode: each runner acts with a replica of the
model in its own process). Nothing of PettingZoo's or SB3's rules is written here again:

* each runner holds a :class:`rlightning_pettingzoo.RolloutRecorder` (the in-process collector,
  its fill replaced by keeping the packed rows) over its copies and a replica of the model
  with the runner's share of the learner's buffer columns (SB3's own ``save``/``load`` of the
  learner's model, ``n_envs`` set to the share: the same class, hyper-parameters, spaces and
  weights);
* each :meth:`RaySharedRolloutCollector.collect` publishes the learner's policy weights
  (``rlightning_sb3.policy_weights``, one ``ray.put``) and its latest run that reset its env
  (``rlightning_sb3.training_reset_run_id``) to every runner, which loads them and records one
  rollout (``SharedRolloutCollector.collect``'s acting, stepping, transition rules, column
  layout and copy resets at a new resetting run, unchanged) and returns it
  (:class:`rlightning_pettingzoo.RecordedRollout`);
* the learner fills its buffer from the runners' rollouts side by side
  (:func:`rlightning_pettingzoo.fill_recorded`: ``SharedRolloutCollector``'s own fill, through
  ``rlightning_sb3.add_rollout_step`` and ``finish_rollout``), so callbacks, the logger,
  ``num_timesteps`` and ``ep_info_buffer`` are the learner's.

A RecurrentPPO's replica carries each agent's LSTM state from one rollout to the next in its
runner's process, and the recorded rows carry the states the learner stores and bootstraps
from. The learner's side (:class:`_RecordingCollector`) is shared with
:class:`rlightning_ray.pz_aec.RayAECRolloutCollector`, whose runner records with the AEC
collector instead.

With one runner its buffer equals the in-process collector's over the same copies, seeds and
torch seed, array for array; with several, runner ``r``'s columns equal the in-process
collector's over runner ``r``'s copies (tests/ray/test_pz_collector.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from rlightning.rules import check_flag
from rlightning_ray._pz_runners import (
    PooledCollector,
    RunnerPool,
    load_replica,
    merge_returns,
    plan_runners,
    replica_spec,
    runner_columns,
)

try:
    from rlightning_pettingzoo.collector import Segment
    from rlightning_pettingzoo.remote import (
        RecordedRollout,
        RolloutRecorder,
        check_rollout_model,
        fill_recorded,
    )
    from rlightning_sb3 import (
        check_training,
        policy_weights,
        set_acting_seed,
        training_reset_run_id,
    )
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "rlightning_ray.pettingzoo needs the [pettingzoo] extra: "
        f'pip install "rlightning-ray[pettingzoo]" ({exc})'
    ) from exc

if TYPE_CHECKING:
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

__all__ = ["RaySharedRolloutCollector", "SharedRolloutRunner"]


class SharedRolloutRunner:
    """A Ray actor's state: a replica of the learner's model and a :class:`RolloutRecorder`.

    Built in the actor's process by :class:`RaySharedRolloutCollector` (not meant to be built by
    hand).

    Args:
        model_class: The learner's model class (``PPO``, ``A2C``, ``MaskablePPO``,
            ``RecurrentPPO``).
        saved: The learner's model as SB3's ``model.save`` wrote it (bytes).
        n_columns: The runner's share of the learner's buffer columns (the replica's
            ``n_envs``).
        env_fns: One function per env copy of this runner.
        seeds: Each copy's first-reset seed (None: no seed).
        acting_seed: When given, :func:`rlightning_sb3.set_acting_seed` after the replica is
            built (torch's, numpy's and Python's global generators: the replica samples its
            actions from torch's).
        device: The replica's torch device.
        runner_id: For messages.
        image_spaces: When the learner's env is wrapped in ``VecTransposeImage`` (SB3 wraps an
            env of channel-last images), the raw observation space it wraps and the action
            space: the replica is then loaded over a never-stepped ``DummyVecEnv`` of
            ``n_columns`` slots of those spaces, which SB3's ``load`` wraps in
            ``VecTransposeImage`` as it wrapped the learner's, so that the recorder transposes
            the agents' images as the in-process collector does
            (:func:`rlightning_sb3.image_transpose`). None: no env.

        options: What the runner's kind builds its recorder with (:meth:`recorder_options`;
            None here).

    Raises:
        What ``model_class.load`` and :class:`RolloutRecorder` raise.
    """

    #: The in-process recorder the runner records with (a subclass's own: an AEC recorder).
    recorder_class: Any = RolloutRecorder

    def __init__(
        self,
        model_class: Any,
        saved: bytes,
        n_columns: int,
        env_fns: Sequence[Callable[[], Any]],
        seeds: Sequence[int | None],
        acting_seed: int | None,
        device: str,
        runner_id: str,
        image_spaces: tuple[Any, Any] | None = None,
        options: Any = None,
    ) -> None:
        self.model = load_replica(model_class, saved, n_columns, image_spaces, device)
        # before the acting seed: SB3's load seeds the global generators (set_random_seed)
        kwargs = self.recorder_options(options, device)
        if acting_seed is not None:
            set_acting_seed(acting_seed)
        self.recorder = self.recorder_class(self.model, env_fns, seeds=seeds, **kwargs)
        self.runner_id = runner_id

    def recorder_options(self, options: Any, device: str) -> dict[str, Any]:
        """The recorder's keyword arguments beyond ``seeds``, built from ``options``.

        Called once in the runner's process, after the replica is loaded and before the acting
        seed is set. Here: none (a subclass builds its own, e.g. loaded opponents).

        Args:
            options: The runner's ``options`` (None here).
            device: The replica's torch device.

        Returns:
            ``{}``.

        Raises:
            Nothing here.
        """
        return {}

    def ready(self) -> str:
        """The runner's id, once built (surfaces a failed construction to the caller)."""
        return self.runner_id

    def record(self, weights: Any, reset_run: int | None) -> RecordedRollout:
        """Load ``weights`` (a ``policy.state_dict()``) and record one rollout.

        Args:
            weights: The learner's ``policy.state_dict()``.
            reset_run: The learner's :func:`rlightning_sb3.training_reset_run_id`: the
                recorder's copies reset at its first rollout of a new resetting run, as the
                in-process collector's (``CopyBookkeeping._start_run``).

        Returns:
            The rollout (:meth:`RolloutRecorder.record`).

        Raises:
            What ``load_state_dict`` and :meth:`RolloutRecorder.record` raise.
        """
        self.model.policy.load_state_dict(weights)
        rollout: RecordedRollout = self.recorder.record([reset_run])
        return rollout


class _RecordingCollector(PooledCollector):
    """What the collectors on Ray runners that record in-process rollouts share (private).

    Splits the copies, checks the seeds and the timeout, saves the learner's model, builds one
    ``runner_class`` actor per block of copies (:class:`RunnerPool`), and at each
    :meth:`collect` publishes the weights, gathers the runners' :class:`RecordedRollout` and
    fills the learner's buffer with :func:`fill_recorded`. The public subclasses check their
    model (and their own arguments) and call :meth:`_start`.
    """

    def _start(
        self,
        name: str,
        runner_class: type,
        model: OnPolicyAlgorithm,
        env_fns: Sequence[Callable[[], Any]] | None,
        env_fn: Callable[[], Any] | None,
        n_runners: int,
        copies_per_runner: int | None,
        seeds: Sequence[int | None] | None,
        acting_seeds: Sequence[int | None] | None,
        num_cpus: float,
        device: str,
        timeout_s: float | None,
        options: Any = None,
    ) -> None:
        """Check the arguments and build the runners (see the subclasses' docstrings).

        ``options`` goes to every runner (:meth:`SharedRolloutRunner.recorder_options`).
        """
        import ray

        plan = plan_runners(
            name,
            env_fns=env_fns,
            env_fn=env_fn,
            n_runners=n_runners,
            copies_per_runner=copies_per_runner,
            seeds=seeds,
            acting_seeds=acting_seeds,
            seed_model=model,
            num_cpus=num_cpus,
            timeout_s=timeout_s,
        )
        columns = runner_columns(name, model, n_runners)
        if not ray.is_initialized():
            raise RuntimeError(f"{name} needs Ray: call ray.init(...) first")
        self.model = model
        self.n_runners = n_runners
        self.copies_per_runner = plan.copies_per_runner
        #: Agent-steps of the last :meth:`collect` taken but not stored (all runners).
        self.dropped = 0
        #: Per agent id, the returns of its last 100 finished episodes, per runner (see
        #: :meth:`collect`).
        self.agent_returns: dict[Any, deque[float]] = {}
        model_class, saved, image_spaces = replica_spec(model)
        blob = ray.put(saved)
        self._pool = RunnerPool(
            name,
            runner_class,
            [
                (
                    model_class,
                    blob,
                    columns,
                    *plan.block(r),
                    plan.runner_seeds[r],
                    device,
                    f"pz-runner-{r}",
                    image_spaces,
                    options,
                )
                for r in range(n_runners)
            ],
            num_cpus=num_cpus,
            timeout_s=plan.timeout_s,
        )

    def collect(self, *, update_model: bool = True) -> list[Segment]:
        """Publish the weights, record one rollout on every runner, fill the learner's buffer.

        Args:
            update_model: As in the in-process collector's ``collect``
                (:meth:`rlightning_pettingzoo.SharedRolloutCollector.collect`,
                :meth:`rlightning_pettingzoo.AECRolloutCollector.collect`): ``num_timesteps``,
                episodes, the callback and the logger, on the learner.

        Returns:
            The buffer's segments, column by column (:func:`rlightning_pettingzoo
            .fill_recorded`: ``env_index`` is the global copy index). ``model.rollout_buffer``
            is filled (``reset`` first when full) with its ``returns`` and ``advantages``;
            the runners' envs are stepped. ``rollout/ep_rew_mean/<agent_id>`` is the mean of
            each runner's last 100 episodes of the agent together (with one runner: its last
            100, as in-process).

        Raises:
            TypeError: ``update_model`` is not a bool (rule ``flag``; a ``numpy.bool_`` is
                one), before any runner steps.
            ValueError: ``update_model`` and the model was not given
                :func:`rlightning_sb3.start_training` (before any runner steps).
            rlightning_sb3.StopTraining: ``update_model`` and a callback stopped the run
                (before any runner steps), or stops it while the rows are added.
            RuntimeError: a runner failed (named; its error in the message) or timed out.
            rlightning_sb3.StopTraining: a callback stopped the loop (and whatever else
                :func:`rlightning_pettingzoo.fill_recorded` raises).
        """
        import ray

        # before any runner steps (fill_recorded would refuse only after the rollout)
        update_model = check_flag(update_model, "update_model", f"{self._pool.name}.collect")
        if update_model:
            check_training(self.model)
        weights = ray.put(policy_weights(self.model))
        reset_run = training_reset_run_id(self.model)  # the runners reset as in process
        rollouts: list[RecordedRollout] = self._pool.call(
            "record", weights, reset_run, what="record a rollout"
        )
        self.dropped = sum(rollout.dropped for rollout in rollouts)
        merged = merge_returns(rollout.agent_returns for rollout in rollouts)
        self.agent_returns = merged
        return fill_recorded(self.model, rollouts, update_model=update_model, agent_returns=merged)


class RaySharedRolloutCollector(_RecordingCollector):
    """Fill one shared on-policy model's buffer from env copies stepped on Ray runners.

    The copies (``env_fns``, or ``env_fn`` called once per copy) are split into ``n_runners``
    consecutive blocks of ``copies_per_runner``; runner ``r`` holds copies ``r *
    copies_per_runner ...`` and fills the learner's buffer columns ``r * m ... (r + 1) * m - 1``
    with ``m = model.n_envs // n_runners`` (its replica's ``n_envs``). Each :meth:`collect` is
    one rollout, as :meth:`rlightning_pettingzoo.SharedRolloutCollector.collect` over each
    runner's copies and columns (see the module docstring and ``docs/ray.md``, "PettingZoo").
    Call :func:`rlightning_sb3.start_training` before, ``model.train()`` after each
    :meth:`collect`, and :meth:`close` at the end.

    Needs ``ray.init`` first. Builds the runners at once (each imports torch and SB3: seconds)
    and waits until they are built.

    Args:
        model: The learner's PPO, A2C, MaskablePPO or RecurrentPPO (each runner's replica
            carries its agents' LSTM states from one rollout to the next), built over a VecEnv
            of ``n_envs`` slots of one agent's spaces (it sizes the buffer; never stepped);
            ``n_envs`` a multiple of ``n_runners``.
        env_fns: One function per copy (``n_runners * copies_per_runner``), each returning a
            PettingZoo ``ParallelEnv`` (called in the runners' processes).
        env_fn: Instead of ``env_fns``: one function for every copy.
        n_runners: The Ray actors.
        copies_per_runner: Copies per runner (with ``env_fns`` it defaults to
            ``len(env_fns) // n_runners``; with ``env_fn`` to 1).
        seeds: Each copy's first-reset seed, in copy order (None: no seeds).
        acting_seeds: Each runner's acting seed (:func:`rlightning_sb3.set_acting_seed` in the
            runner after its replica is built). None: ``model.seed + r`` for runner ``r`` where
            the model has a seed, else no seeding (SB3's ``load`` seeds nothing for a model
            without a seed: each runner draws from its process's own unseeded generators, a
            run that cannot be repeated; give seeds to repeat it).
        num_cpus: CPUs each runner reserves.
        device: The replicas' torch device.
        timeout_s: Seconds to wait for all the runners' rollouts of one call together (one
            deadline, not one per runner; None: no limit).

    Raises:
        TypeError: ``model`` is not an on-policy SB3 model; an ``env_fns``
            entry or ``env_fn`` is not callable; ``seeds`` or ``acting_seeds`` is not a
            sequence, or one of its seeds is not None or an int (a bool, float, str; named
            by index); ``timeout_s`` is not None or a number.
        ValueError: neither or both of ``env_fns`` and ``env_fn``; the copies are not
            ``n_runners * copies_per_runner``; ``model.n_envs`` is not a multiple of
            ``n_runners``; ``seeds`` or ``acting_seeds`` has the wrong length or a negative
            seed; an acting seed (given, or the default ``model.seed + r``) is ``>= 2**32``;
            ``timeout_s`` is not > 0; bad counts.
        RuntimeError: Ray is not initialised, or a runner failed to build (named, the cause
            chained).
    """

    def __init__(
        self,
        model: OnPolicyAlgorithm,
        env_fns: Sequence[Callable[[], Any]] | None = None,
        *,
        env_fn: Callable[[], Any] | None = None,
        n_runners: int = 1,
        copies_per_runner: int | None = None,
        seeds: Sequence[int | None] | None = None,
        acting_seeds: Sequence[int | None] | None = None,
        num_cpus: float = 1,
        device: str = "cpu",
        timeout_s: float | None = None,
    ) -> None:
        name = "RaySharedRolloutCollector"
        check_rollout_model(model, name)
        self._start(
            name,
            SharedRolloutRunner,
            model,
            env_fns,
            env_fn,
            n_runners,
            copies_per_runner,
            seeds,
            acting_seeds,
            num_cpus,
            device,
            timeout_s,
        )
