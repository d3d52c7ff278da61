"""The group off-policy PettingZoo collector on Ray runners (an off-policy model per group).

:class:`RayGroupReplayCollector` is :class:`rlightning_pettingzoo.GroupReplayCollector` with its
env copies spread over Ray actors, built from the shared off-policy collector on runners
(:class:`~rlightning_ray.pettingzoo.RaySharedReplayCollector`: the replicas, the acting state,
the learner's clock) and the on-policy group one
(:class:`~rlightning_ray.pettingzoo.RayGroupRolloutCollector`: a replica per group, one
``group_of``). Nothing of PettingZoo's or SB3's rules is written here again:

* each runner holds a :class:`rlightning_pettingzoo.GroupReplayRecorder` (the in-process group
  collector, its hand-over of a group's complete row replaced by keeping it) over its copies and
  one replica per group model, each with the runner's share of that group's buffer columns
  (SB3's own ``save``/``load`` of the group's learner model, ``n_envs`` set to the share, its
  own buffer one row), seeded by :func:`rlightning_pettingzoo.set_group_acting_seed`;
* each :meth:`RayGroupReplayCollector.collect` publishes every group's
  :func:`rlightning_sb3.acting_state` (its weights and the counters exploration reads:
  ``num_timesteps``, DQN's ``exploration_rate``, ``total_timesteps``; one ``ray.put`` of them
  all) to every runner, which records one rollout of every group (``GroupReplayCollector
  .collect``'s acting, stepping, transition rules, rows and per-group rollout ends, unchanged;
  each group replica's counters advanced by its learner's ``n_envs`` per row of the group, as
  that learner's will be);
* the learner adds each group's rows from the runners side by side
  (:func:`rlightning_pettingzoo.fill_recorded_group_replay`: the shared fill,
  ``add_replay_step``), so each group's callback, logger, ``num_timesteps``, DQN's target
  updates and ``ep_info_buffer`` are its learner's.

With one runner every group's buffer and counters equal the in-process collector's over the
same copies, seeds and acting seed, array for array; with several, runner ``r``'s columns of
each group's buffer equal the in-process collector's over runner ``r``'s copies, each group
exploring on its learner's clock (tests/ray/test_pz_group_replay.py; docs/ray.md,
"PettingZoo").
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlightning.rules import check_count
from rlightning_ray._pz_runners import (
    PooledCollector,
    group_runner_pool,
    load_replay_replica,
    merge_returns,
    replay_replica_spec,
    replica_counters,
)

# first: pz_rollout refuses a missing [pettingzoo] extra with the message that names it
from rlightning_ray.pz_rollout import RaySharedRolloutCollector  # noqa: F401  isort: skip
from rlightning_pettingzoo.groups import GroupOf
from rlightning_pettingzoo.remote_group_replay import (
    GroupReplayRecorder,
    check_group_replay_models,
    fill_recorded_group_replay,
    set_group_acting_seed,
)
from rlightning_pettingzoo.remote_groups import check_group_training, refuse_group_kind
from rlightning_pettingzoo.remote_replay import RecordedReplay
from rlightning_sb3 import ActingState, acting_state

if TYPE_CHECKING:
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

__all__ = ["GroupReplayRunner", "RayGroupReplayCollector"]


class GroupReplayRunner:
    """A Ray actor's state: an off-policy replica of every group's model, a group recorder.

    Built in the actor's process by :class:`RayGroupReplayCollector` (not meant to be built by
    hand). Each replica is the group learner's saved model loaded over a never-stepped
    ``DummyVecEnv`` of its share of the columns, with a buffer of one row, and started, as
    :class:`~rlightning_ray.pettingzoo.SharedReplayRunner` loads its one replica.

    Args:
        replicas: Group name -> ``(model_class, saved, n_columns, row_width, spaces, noise)``:
            the group model's class, SB3's ``model.save`` of it (bytes), the runner's share of
            its buffer columns (the replica's ``n_envs``), the group learner's ``n_envs`` (the
            recorder's ``row_widths`` entry), its raw observation and action spaces and its
            base action noise (None without one); in ``models`` order.
        group_of: Agent id -> group name (a mapping or a function).
        env_fns: One function per env copy of this runner.
        seeds: Each copy's first-reset seed (None: no seed).
        acting_seed: When given, :func:`rlightning_pettingzoo.set_group_acting_seed` on the
            replicas after they are built (the global generators and each group's action
            space: every replica was loaded with its learner's seed, so without this every
            runner would draw the same random actions).
        device: The replicas' torch device.
        runner_id: For messages.

    Raises:
        What ``model_class.load``, ``start_training`` and
        :class:`rlightning_pettingzoo.GroupReplayRecorder` raise.
    """

    def __init__(
        self,
        replicas: Mapping[str, tuple[Any, bytes, int, int, tuple[Any, Any], Any]],
        group_of: GroupOf,
        env_fns: Sequence[Callable[[], Any]],
        seeds: Sequence[int | None],
        acting_seed: int | None,
        device: str,
        runner_id: str,
    ) -> None:
        self.models = {
            group: load_replay_replica(model_class, saved, n_columns, spaces, device, noise)
            for group, (model_class, saved, n_columns, _, spaces, noise) in replicas.items()
        }
        if acting_seed is not None:
            set_group_acting_seed(self.models, acting_seed)
        self.recorder = GroupReplayRecorder(
            self.models,
            env_fns,
            group_of=group_of,
            seeds=seeds,
            row_widths={group: spec[3] for group, spec in replicas.items()},
        )
        self.runner_id = runner_id

    def ready(self) -> str:
        """The runner's id, once built (surfaces a failed construction to the caller)."""
        return self.runner_id

    def record(self, states: Mapping[str, ActingState]) -> dict[str, RecordedReplay]:
        """Load every group's learner state and record one rollout of every group.

        Returns:
            Group -> its recording (:meth:`rlightning_pettingzoo.GroupReplayRecorder.record`).

        Raises:
            What :meth:`rlightning_pettingzoo.GroupReplayRecorder.record` raises.
        """
        return self.recorder.record(states)

    def counters(self) -> dict[str, tuple[int, float | None]]:
        """Group -> its replica's ``num_timesteps`` and ``exploration_rate`` (None without one)."""
        return {group: replica_counters(model) for group, model in self.models.items()}


class RayGroupReplayCollector(PooledCollector):
    """Fill one off-policy model's replay buffer per group of agents from copies on Ray runners.

    The copies (``env_fns``, or ``env_fn`` called once per copy) are split into ``n_runners``
    consecutive blocks of ``copies_per_runner``; runner ``r`` holds copies ``r *
    copies_per_runner ...`` and fills cells ``r * m_g ... (r + 1) * m_g - 1`` of each row of
    group ``g``'s buffer, with ``m_g = models[g].n_envs // n_runners`` (the runner's replica of
    ``g``'s ``n_envs``). Each :meth:`collect` is one rollout of every group's ``train_freq``,
    as :meth:`rlightning_pettingzoo.GroupReplayCollector.collect` over each runner's copies and
    columns (see the module docstring and ``docs/ray.md``, "PettingZoo"): every runner records
    each group's ``train_freq`` rows, the learner adds row ``k`` of every runner as the group's
    row ``k``. Each group explores on its own learner's clock: each runner starts a rollout from
    every group learner's ``num_timesteps`` and ``exploration_rate`` and advances the group's by
    its learner's ``n_envs`` per row of the group it completes (with one runner: exactly the
    in-process collector's). Call :func:`rlightning_sb3.start_training` for each model before,
    train each after each :meth:`collect` as ``learn()`` does (``if model.num_timesteps >
    model.learning_starts: model.train(...)``), and :meth:`close` at the end.

    Needs ``ray.init`` first. Builds the runners at once (each imports torch and SB3: seconds)
    and waits until they are built.

    Args:
        models: Group name -> a DQN, SAC, TD3 or other ``OffPolicyAlgorithm``, each built over
            a VecEnv of ``n_envs`` slots of its group's spaces (it sizes the buffer; never
            stepped); every ``n_envs`` a multiple of ``n_runners``.
        env_fns: One function per copy (``n_runners * copies_per_runner``), each returning a
            PettingZoo ``ParallelEnv`` (called in the runners' processes).
        env_fn: Instead of ``env_fns``: one function for every copy.
        group_of: Agent id -> group name, a mapping or a function, as
            :class:`rlightning_pettingzoo.GroupReplayCollector` takes it; picklable by Ray's
            cloudpickle (a dict, or a module-level function of an importable module).
        n_runners: The Ray actors.
        copies_per_runner: Copies per runner (with ``env_fns`` it defaults to
            ``len(env_fns) // n_runners``; with ``env_fn`` to 1).
        seeds: Each copy's first-reset seed, in copy order (None: no seeds).
        acting_seeds: Each runner's acting seed
            (:func:`rlightning_pettingzoo.set_group_acting_seed` on its replicas). None: the
            first group's ``model.seed + r`` for runner ``r`` where that model has a seed, else
            no seeding (every replica then starts from its load's ``set_random_seed(model
            .seed)``, the same on every runner: give seeds).
        num_cpus: CPUs each runner reserves.
        device: The replicas' torch device.
        timeout_s: Seconds to wait for all the runners' rollouts of one call together (None:
            no limit).

    Raises:
        TypeError: a model is not an off-policy SB3 model (named by group; an on-policy one:
            the message names ``RayGroupRolloutCollector``); ``group_of`` is not
            a mapping or a callable, or is not picklable; an env function is not callable; bad
            seeds or ``timeout_s`` (as ``RaySharedReplayCollector``).
        ValueError: ``models`` is empty or two groups share a model; what
            :func:`rlightning_pettingzoo.check_replay_model` raises for a group's model
            (``optimize_memory_usage``, gSDE, ``train_freq`` counted in episodes over several
            runners, unapplied VecEnv wrappers), named by group; a group model's ``n_envs`` is
            not a multiple of ``n_runners`` (named by group); neither or both of ``env_fns``
            and ``env_fn``; the copies are not ``n_runners * copies_per_runner``; bad seed
            lengths, ``timeout_s`` or counts.
        RuntimeError: Ray is not initialised, or a runner failed to build (named, the cause
            chained: a group of ``group_of`` not in ``models``, a group without agents, ...).
    """

    def __init__(
        self,
        models: Mapping[str, OffPolicyAlgorithm],
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
        name = "RayGroupReplayCollector"
        check_count(n_runners, f"{name} n_runners", minimum=1)
        refuse_group_kind(models, name, True, "RayGroupRolloutCollector")
        check_group_replay_models(models, name, n_runners)

        def replica(model: Any, n_columns: int) -> tuple[Any, bytes, int, int, Any, Any]:
            model_class, saved, spaces, noise = replay_replica_spec(model)
            return model_class, saved, n_columns, int(model.n_envs), spaces, noise

        self._pool, plan = group_runner_pool(
            name,
            models,
            group_of,
            GroupReplayRunner,
            replica,
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
        self.models: dict[str, OffPolicyAlgorithm] = dict(models)
        self.n_runners = n_runners
        self.copies_per_runner = plan.copies_per_runner
        #: Per agent id, the returns of its last 100 finished episodes, per runner together.
        self.agent_returns: dict[Any, deque[float]] = {}

    def collect(self) -> dict[str, int]:
        """Publish every group's acting state, record one rollout per runner, add the rows.

        Returns:
            Group -> the agent-steps stored in its buffer (``n_envs`` per row), as
            :meth:`rlightning_pettingzoo.GroupReplayCollector.collect` returns. Every group's
            ``model.replay_buffer`` and counters are mutated as that method says (through
            :func:`rlightning_pettingzoo.fill_recorded_group_replay`, group by group in
            ``models`` order); the runners' envs are stepped. :attr:`agent_returns`: each
            runner's last 100 episodes of each agent together (with one runner: its last 100,
            as in process).

        Raises:
            ValueError: a model was not given :func:`rlightning_sb3.start_training` (named by
                group, before any runner steps).
            rlightning_sb3.StopTraining: a model's run was stopped (before any runner steps),
                or a callback stops it while the rows are added (the groups before it are
                filled).
            RuntimeError: a runner failed (named; its error in the message) or timed out; or
                what :func:`rlightning_pettingzoo.fill_recorded_group_replay` raises.
        """
        import ray

        name = "RayGroupReplayCollector"
        check_group_training(self.models, name)  # before any runner steps (as in process)
        states = ray.put({group: acting_state(model) for group, model in self.models.items()})
        recordings: list[dict[str, RecordedReplay]] = self._pool.call(
            "record", states, what="record a rollout"
        )
        self.agent_returns = {
            agent: returns
            for group in self.models
            for agent, returns in merge_returns(r[group].agent_returns for r in recordings).items()
        }
        return fill_recorded_group_replay(self.models, recordings, caller=name)

    def runner_counters(self) -> list[dict[str, tuple[int, float | None]]]:
        """Per runner (in order), group -> its replica's ``num_timesteps`` and exploration rate.

        After a :meth:`collect` each is its group learner's (the runners advance them as the
        learners do; a diagnostic, and what tests/ray/test_pz_group_replay.py checks).

        Raises:
            RuntimeError: a runner failed or timed out (named).
        """
        return self._pool.call("counters", what="report its counters")
