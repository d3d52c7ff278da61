"""The group on-policy PettingZoo collector on Ray runners (a model per group of agents).

:class:`RayGroupRolloutCollector` is :class:`rlightning_pettingzoo.GroupRolloutCollector` with
its env copies spread over Ray actors, built as
:class:`~rlightning_ray.pettingzoo.RaySharedRolloutCollector` is. Nothing of PettingZoo's or
SB3's rules is written here again:

* each runner holds a :class:`rlightning_pettingzoo.GroupRolloutRecorder` (the in-process group
  collector, its per-group fill replaced by keeping each group's packed rows) over its copies
  and one replica per group model, each with the runner's share of that group's buffer columns
  (SB3's own ``save``/``load`` of the group's learner model, ``n_envs`` set to the share);
* each :meth:`RayGroupRolloutCollector.collect` publishes every group's policy weights
  (``rlightning_sb3.policy_weights``, one ``ray.put`` of them all) and each group's latest run
  that reset its env (``rlightning_sb3.training_reset_run_id``) to every runner, which loads
  them and records one rollout of every group (``GroupRolloutCollector.collect``'s acting,
  stepping, per-group plan, column layout and copy resets at a new run, unchanged);
* the learner fills each group's buffer from the runners' rollouts of the group side by side
  (:func:`rlightning_pettingzoo.fill_recorded_groups`: the in-process collectors' own fill), so
  each group's callback, logger, ``num_timesteps`` and ``ep_info_buffer`` are its learner's.

A RecurrentPPO group's replica carries each of its agents' LSTM states from one rollout to the
next in its runner's process (the in-process collector's adapter, under the recorder's row ids;
loading the published weights keeps them), and the recorded rows carry the states the learner
stores (``buffer_state``) and bootstraps from (``state``), as
:class:`~rlightning_ray.pettingzoo.RaySharedRolloutCollector` carries a shared RecurrentPPO's.

With one runner every group's buffer equals the in-process collector's over the same copies,
seeds and torch seed, array for array (a RecurrentPPO's four LSTM state arrays included); with
several, runner ``r``'s columns of each group's buffer equal the in-process collector's over
runner ``r``'s copies (tests/ray/test_pz_groups.py, tests/ray/test_pz_groups_recurrent.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlightning.rules import check_flag
from rlightning_ray._pz_runners import (
    PooledCollector,
    group_runner_pool,
    load_replica,
    merge_returns,
    replica_spec,
)

# first: pz_rollout refuses a missing [pettingzoo] extra with the message that names it
from rlightning_ray.pz_rollout import RaySharedRolloutCollector  # noqa: F401  isort: skip
from rlightning_pettingzoo.collector import Segment
from rlightning_pettingzoo.groups import GroupOf
from rlightning_pettingzoo.remote import RecordedRollout
from rlightning_pettingzoo.remote_groups import (
    GroupRolloutRecorder,
    check_group_models,
    check_group_training,
    fill_recorded_groups,
    refuse_group_kind,
)
from rlightning_sb3 import policy_weights, set_acting_seed, training_reset_run_id

if TYPE_CHECKING:
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

__all__ = ["GroupRolloutRunner", "RayGroupRolloutCollector"]


class GroupRolloutRunner:
    """A Ray actor's state: a replica of every group's model and a group recorder over them.

    Built in the actor's process by :class:`RayGroupRolloutCollector` (not meant to be built by
    hand).

    Args:
        replicas: Group name -> ``(model_class, saved, n_columns, image_spaces)``: the group
            model's class, SB3's ``model.save`` of it (bytes), the runner's share of its buffer
            columns (the replica's ``n_envs``), and its raw image and action spaces where SB3
            wrapped its env in ``VecTransposeImage`` (else None), as
            :class:`~rlightning_ray.pettingzoo.SharedRolloutRunner` takes them; in ``models``
            order.
        group_of: Agent id -> group name (a mapping or a function).
        env_fns: One function per env copy of this runner.
        seeds: Each copy's first-reset seed (None: no seed).
        acting_seed: When given, :func:`rlightning_sb3.set_acting_seed` after the replicas are
            built (the replicas sample their actions from torch's global generator).
        device: The replicas' torch device.
        runner_id: For messages.
        options: What the runner's kind builds its recorder with (:meth:`recorder_options`;
            None here).

    Raises:
        What ``model_class.load`` and :class:`rlightning_pettingzoo.GroupRolloutRecorder`
        raise.
    """

    #: The in-process recorder the runner records with (a subclass's own: an AEC recorder).
    recorder_class: Any = GroupRolloutRecorder

    def __init__(
        self,
        replicas: Mapping[str, tuple[Any, bytes, int, tuple[Any, Any] | None]],
        group_of: GroupOf,
        env_fns: Sequence[Callable[[], Any]],
        seeds: Sequence[int | None],
        acting_seed: int | None,
        device: str,
        runner_id: str,
        options: Any = None,
    ) -> None:
        self.models = {
            group: load_replica(model_class, saved, n_columns, image_spaces, device)
            for group, (model_class, saved, n_columns, image_spaces) in replicas.items()
        }
        # before the acting seed: SB3's load seeds the global generators (set_random_seed)
        kwargs = self.recorder_options(options, device)
        if acting_seed is not None:
            set_acting_seed(acting_seed)
        self.recorder = self.recorder_class(
            self.models, env_fns, group_of=group_of, seeds=seeds, **kwargs
        )
        self.runner_id = runner_id

    def recorder_options(self, options: Any, device: str) -> dict[str, Any]:
        """The recorder's keyword arguments beyond ``group_of`` and ``seeds``, from ``options``.

        Called once in the runner's process, after the replicas are loaded and before the
        acting seed is set. Here: none (a subclass builds its own, e.g. loaded opponents).

        Args:
            options: The runner's ``options`` (None here).
            device: The replicas' torch device.

        Returns:
            ``{}``.

        Raises:
            Nothing here.
        """
        return {}

    def ready(self) -> str:
        """The runner's id, once built (surfaces a failed construction to the caller)."""
        return self.runner_id

    def record(
        self, weights: Mapping[str, Any], reset_runs: Mapping[str, int | None]
    ) -> dict[str, RecordedRollout]:
        """Load each group's ``weights`` (its ``policy.state_dict()``) and record one rollout.

        Args:
            weights: Group -> its learner's ``policy.state_dict()``.
            reset_runs: Group -> its learner's :func:`rlightning_sb3.training_reset_run_id`:
                the recorder's copies reset once every group's model began a new resetting
                run, as the in-process collector's (``CopyBookkeeping._start_run``).

        Returns:
            Group -> its rollout (:meth:`rlightning_pettingzoo.GroupRolloutRecorder.record`).

        Raises:
            What ``load_state_dict`` and ``GroupRolloutRecorder.record`` raise.
        """
        for group, model in self.models.items():
            model.policy.load_state_dict(weights[group])
        recorded: dict[str, RecordedRollout] = self.recorder.record(reset_runs)
        return recorded


class _GroupRecordingCollector(PooledCollector):
    """What the on-policy group collectors on Ray runners share (private): the pool, collect.

    :meth:`_start` checks the runner arguments and builds one ``runner_class`` actor per block
    of copies (``group_runner_pool``); :meth:`collect` publishes every group's weights, gathers
    the runners' rollouts and fills every group's buffer with
    :func:`rlightning_pettingzoo.fill_recorded_groups`. The public subclasses check their
    models (and their own arguments) and call :meth:`_start`.
    """

    def _start(
        self,
        name: str,
        runner_class: type,
        models: Mapping[str, OnPolicyAlgorithm],
        group_of: GroupOf,
        options: Any = None,
        **runner_args: Any,
    ) -> None:
        """Build the runners (``group_runner_pool``'s checks and errors) and the counters."""

        def replica(model: Any, n_columns: int) -> tuple[Any, bytes, int, Any]:
            model_class, saved, image_spaces = replica_spec(model)
            return model_class, saved, n_columns, image_spaces

        self._pool, plan = group_runner_pool(
            name, models, group_of, runner_class, replica, options=options, **runner_args
        )
        self.models: dict[str, OnPolicyAlgorithm] = dict(models)
        self.n_runners = int(runner_args["n_runners"])
        self.copies_per_runner = plan.copies_per_runner
        #: Per group, the agent-steps of the last :meth:`collect` acted, not stored (all runners).
        self.group_dropped: dict[str, int] = dict.fromkeys(self.models, 0)
        #: The agent-steps of the last :meth:`collect` acted, not stored (all groups).
        self.dropped = 0
        #: Per agent id, the returns of its last 100 finished episodes, per runner together.
        self.agent_returns: dict[Any, deque[float]] = {}

    def collect(self, *, update_model: bool = True) -> dict[str, list[Segment]]:
        """Publish the weights, record one rollout on every runner, fill every group's buffer.

        Args:
            update_model: As in the in-process group collector's ``collect``
                (:meth:`rlightning_pettingzoo.GroupRolloutCollector.collect`,
                :meth:`rlightning_pettingzoo.AECGroupRolloutCollector.collect`), per group
                model, on the learner.

        Returns:
            Group -> its buffer's segments, column by column (``env_index`` is the global copy
            index). Every group's ``model.rollout_buffer`` is filled (``reset`` first when
            full) with its ``returns`` and ``advantages``, group by group in ``models`` order;
            the runners' envs are stepped; :attr:`group_dropped`, :attr:`dropped` and
            :attr:`agent_returns` are set. ``rollout/ep_rew_mean/<agent_id>`` is the mean of
            each runner's last 100 episodes of the agent together.

        Raises:
            TypeError: ``update_model`` is not a bool (rule ``flag``; a ``numpy.bool_`` is
                one), before any runner steps.
            ValueError: ``update_model`` and a model was not given
                :func:`rlightning_sb3.start_training` (named by group, before any runner
                steps).
            rlightning_sb3.StopTraining: ``update_model`` and a model's run was stopped (before
                any runner steps), or a callback stops it while the rows are added (the groups
                before it are filled).
            RuntimeError: a runner failed (named; its error in the message) or timed out; the
                collector was closed.
        """
        import ray

        name = self._pool.name
        update_model = check_flag(update_model, "update_model", f"{name}.collect")
        if update_model:  # before any runner steps (and the same check again before the fill)
            check_group_training(self.models, name)
        weights = ray.put({group: policy_weights(m) for group, m in self.models.items()})
        # each group's latest resetting run: the runners' copies reset as in process
        reset_runs = {group: training_reset_run_id(m) for group, m in self.models.items()}
        rollouts: list[dict[str, RecordedRollout]] = self._pool.call(
            "record", weights, reset_runs, what="record a rollout"
        )
        self.group_dropped = {
            group: sum(recorded[group].dropped for recorded in rollouts) for group in self.models
        }
        self.dropped = sum(self.group_dropped.values())
        merged = {
            group: merge_returns(recorded[group].agent_returns for recorded in rollouts)
            for group in self.models
        }
        self.agent_returns = {a: r for returns in merged.values() for a, r in returns.items()}
        return fill_recorded_groups(
            self.models, rollouts, update_model=update_model, agent_returns=merged, caller=name
        )


class RayGroupRolloutCollector(_GroupRecordingCollector):
    """Fill one on-policy model's buffer per group of agents from env copies on Ray runners.

    The copies (``env_fns``, or ``env_fn`` called once per copy) are split into ``n_runners``
    consecutive blocks of ``copies_per_runner``; runner ``r`` holds copies ``r *
    copies_per_runner ...`` and fills columns ``r * m_g ... (r + 1) * m_g - 1`` of group
    ``g``'s buffer, with ``m_g = models[g].n_envs // n_runners`` (the runner's replica of
    ``g``'s ``n_envs``). Each :meth:`collect` is one rollout of every group, as
    :meth:`rlightning_pettingzoo.GroupRolloutCollector.collect` over each runner's copies and
    columns (see the module docstring and ``docs/ray.md``, "PettingZoo"). Call
    :func:`rlightning_sb3.start_training` for each model before, each model's ``train()`` after
    each :meth:`collect`, and :meth:`close` at the end.

    Needs ``ray.init`` first. Builds the runners at once (each imports torch and SB3: seconds)
    and waits until they are built. A RecurrentPPO group's LSTM states stay in its runners'
    replicas from one :meth:`collect` to the next (see the module docstring). Off-policy
    (replay) models per group are :class:`~rlightning_ray.pettingzoo.RayGroupReplayCollector`'s.

    Args:
        models: Group name -> a PPO, A2C, MaskablePPO or RecurrentPPO (no gSDE), each built over
            a VecEnv of ``n_envs`` slots of its group's spaces (never stepped); every
            ``n_envs`` a multiple of ``n_runners``.
        env_fns: One function per copy (``n_runners * copies_per_runner``), each returning a
            PettingZoo ``ParallelEnv`` (called in the runners' processes).
        env_fn: Instead of ``env_fns``: one function for every copy.
        group_of: Agent id -> group name, a mapping or a function, as
            :class:`rlightning_pettingzoo.GroupRolloutCollector` takes it. It must be picklable
            by Ray's cloudpickle (it is sent to and called in the runners): a dict, or a
            module-level function of an importable module.
        n_runners: The Ray actors.
        copies_per_runner: Copies per runner (with ``env_fns`` it defaults to
            ``len(env_fns) // n_runners``; with ``env_fn`` to 1).
        seeds: Each copy's first-reset seed, in copy order (None: no seeds).
        acting_seeds: Each runner's acting seed (:func:`rlightning_sb3.set_acting_seed` in the
            runner after its replicas are built). None: the first group's ``model.seed + r``
            for runner ``r`` where that model has a seed, else no seeding.
        num_cpus: CPUs each runner reserves.
        device: The replicas' torch device.
        timeout_s: Seconds to wait for all the runners' rollouts of one call together (None:
            no limit).

    Raises:
        TypeError: a model is not an on-policy SB3 model (an off-policy one: the message names
            ``RayGroupReplayCollector``), named by group;
            ``group_of`` is not a mapping or a callable, or is not picklable; an env function is
            not callable; bad seeds or ``timeout_s`` (as ``RaySharedRolloutCollector``).
        ValueError: ``models`` is empty or two groups share a model; a model uses gSDE or has
            VecEnv wrappers the collector does not apply; a group model's ``n_envs`` is not a
            multiple of ``n_runners`` (named by group); neither or both of ``env_fns`` and
            ``env_fn``; the copies are not ``n_runners * copies_per_runner``; bad seed lengths,
            ``timeout_s`` or counts.
        RuntimeError: Ray is not initialised, or a runner failed to build (named, the cause
            chained: a group of ``group_of`` not in ``models``, a group without agents, ...).
    """

    def __init__(
        self,
        models: Mapping[str, OnPolicyAlgorithm],
        env_fns: Sequence[Callable[[], Any]] | None = None,
        *,
        env_fn: Callable[[], Any] | None = None,
        group_of: GroupOf,
        n_runners: int = 1,
        copies_per_runner: int | None = None,
        seeds: Sequence[int | None] | None = None,
        acting_seeds: Sequence[int | None] | None = None,
        num_cpus: float = 1,
        device: str = "cpu",
        timeout_s: float | None = None,
    ) -> None:
        name = "RayGroupRolloutCollector"
        refuse_group_kind(models, name, False, "RayGroupReplayCollector")
        check_group_models(models, name)
        self._start(
            name,
            GroupRolloutRunner,
            models,
            group_of,
            env_fns=env_fns,
            env_fn=env_fn,
            n_runners=n_runners,
            copies_per_runner=copies_per_runner,
            seeds=seeds,
            acting_seeds=acting_seeds,
            num_cpus=num_cpus,
            device=device,
            timeout_s=timeout_s,
        )
