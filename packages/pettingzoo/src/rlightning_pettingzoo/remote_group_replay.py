"""The group off-policy collector split in two: record every group's rows here, add them there.

:meth:`GroupReplayCollector.collect <rlightning_pettingzoo.GroupReplayCollector.collect>` steps
the copies with one off-policy model per group of agents, completes each agent's transitions,
lays each group's into rows of its model's ``n_envs`` cells and adds each row with
:func:`rlightning_sb3.add_replay_step` through the group's model, which advances that model's
counters (``num_timesteps`` for the ``learning_starts`` warm-up, DQN's ``exploration_rate``)
and says where the group's rollout of its ``train_freq`` ends; ``collect`` returns once every
group's rollout ended (a group done first keeps its further complete transitions for its next
rollout). For acting away from the learner (a Ray runner holding a replica of every group's
model, ``rlightning_ray.pettingzoo.RayGroupReplayCollector``) the two halves run in two
processes, with the very same code, as :mod:`rlightning_pettingzoo.remote_replay` splits the
shared off-policy collector and :mod:`rlightning_pettingzoo.remote_groups` the on-policy group
one:

* :class:`GroupReplayRecorder` is a :class:`~rlightning_pettingzoo.GroupReplayCollector` whose
  hand-over of a group's complete row is replaced by the shared recorder's
  (``remote_replay._ReplicaRollout``, one per group): the row is kept, the group replica's
  counters advance as the group's learner model's will when it adds the row
  (:meth:`rlightning_sb3.ActingReplica.advance` of the group's ``row_width``) and the group's
  rollout ends where SB3's ``should_collect_more_steps`` says, for that group's ``train_freq``.
  :meth:`GroupReplayRecorder.record` takes every group's learner
  :class:`rlightning_sb3.ActingState`, runs ``collect`` unchanged (acting, one forward pass per
  group, stepping, the transition rules, each group's rows and its end) and returns one
  :class:`~rlightning_pettingzoo.RecordedReplay` per group;
* :func:`fill_recorded_group_replay` adds each group's recorded rows, the recorders' cells side
  by side, to the group's learner model with
  :func:`~rlightning_pettingzoo.fill_recorded_replay` (the shared collector's own fill, through
  ``add_replay_step``), group by group in ``models`` order.

So one recorder fills every group's learner buffer exactly as ``GroupReplayCollector.collect``
over the recorder's copies fills it, with the same counters per group; several recorders'
columns of each group's buffer each as the in-process collector over that recorder's copies,
each group exploring on its own learner's clock (tests/ray/test_pz_group_replay.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

from rlightning.rules import check_count
from rlightning_pettingzoo._columns import Transition
from rlightning_pettingzoo.groups import GroupOf, GroupReplayCollector
from rlightning_pettingzoo.remote_groups import _check_groups, _fill_groups
from rlightning_pettingzoo.remote_replay import (
    RecordedReplay,
    _ReplicaRollout,
    check_replay_model,
    fill_recorded_replay,
)
from rlightning_sb3 import ActingState, set_acting_seed

__all__ = [
    "GroupReplayRecorder",
    "check_group_replay_models",
    "fill_recorded_group_replay",
    "group_action_seed",
    "set_group_acting_seed",
]


def check_group_replay_models(models: Mapping[str, Any], caller: str, n_runners: int = 1) -> None:
    """Refuse group models a :class:`GroupReplayRecorder` and the fill cannot serve.

    Checked before anything starts (no runner is built, no env stepped).

    Args:
        models: Group name -> the learner's off-policy model of the group.
        caller: Named in the messages.
        n_runners: The recorders whose rows are laid side by side.

    Returns:
        None; nothing is mutated.

    Raises:
        ValueError: ``models`` is empty or not a mapping of group names; two groups share one
            model object; what :func:`~rlightning_pettingzoo.check_replay_model` raises
            (``optimize_memory_usage``, gSDE, ``train_freq`` counted in episodes over several
            runners, unapplied VecEnv wrappers, ...), named ``"<caller> (group '<g>')"``.
        TypeError: a model is not an off-policy SB3 model (named likewise).
    """

    def check(model: Any, named: str) -> None:
        check_replay_model(model, named, n_runners)

    _check_groups(models, caller, "off-policy", check)


def group_action_seed(seed: int, index: int) -> int:
    """The seed of the action space of the ``index``-th group's replica under acting ``seed``.

    ``numpy.random.SeedSequence((seed, index))``'s first 32-bit word: distinct per group (two
    groups of one action space do not draw the same warm-up and epsilon actions) and per
    runner seed, with no overlap between runners whose seeds are consecutive.

    Args:
        seed: The runner's acting seed (an int >= 0).
        index: The group's position in ``models`` (from 0).

    Returns:
        An int in ``[0, 2**32 - 1]``.

    Raises:
        ValueError, TypeError: what ``SeedSequence`` raises for a negative or non-int seed.
    """
    return int(np.random.SeedSequence((seed, index)).generate_state(1)[0])


def set_group_acting_seed(models: Mapping[str, Any], seed: int) -> None:
    """Seed what a group recorder's replicas draw from: the global generators, each action space.

    :func:`rlightning_sb3.set_acting_seed` (Python's, numpy's and torch's global generators:
    DQN's epsilon test, SAC/TD3's sampling), then group ``k``'s (``models`` order)
    ``model.action_space.seed(group_action_seed(seed, k))`` (the ``learning_starts`` warm-up
    and DQN's epsilon actions sample it; SB3's ``model.set_random_seed`` seeds it with the
    global seed, which would give every group, and every runner's replicas loaded from one
    learner, the same random actions). A runner of
    ``rlightning_ray.pettingzoo.RayGroupReplayCollector`` calls it on its replicas; call it
    on in-process models to act as that runner.

    Args:
        models: Group name -> model, in acting order.
        seed: The acting seed (an int in ``[0, 2**32 - 1]``).

    Returns:
        None; the global generators and each model's action space are reseeded.

    Raises:
        ValueError: two models share one action space object (both groups named; in process
            they would sample one generator, unlike a runner's replicas, each loaded with a
            space of its own); what SB3's ``set_random_seed`` and ``SeedSequence`` raise for a
            bad seed (also TypeError).
    """
    owner: dict[int, str] = {}
    for group, model in models.items():
        other = owner.setdefault(id(model.action_space), group)
        if other != group:
            raise ValueError(
                f"set_group_acting_seed: the models of groups {other!r} and {group!r} share one "
                f"action space object ({model.action_space}), so they sample one generator "
                "(the warm-up and epsilon actions), which no seed per group can set; a runner's "
                "replicas each have their own: build each group's model over a space of its "
                "own (copy.deepcopy of the agent's action space)"
            )
    set_acting_seed(seed)
    for k, model in enumerate(models.values()):
        model.action_space.seed(group_action_seed(seed, k))


class GroupReplayRecorder(GroupReplayCollector):
    """A :class:`~rlightning_pettingzoo.GroupReplayCollector` that keeps each group's rows.

    Acting, stepping, the transition rules, each group's rows and the rule that ends each
    group's rollout are ``GroupReplayCollector``'s; only the hand-over of a group's complete
    row differs: the row is kept for :meth:`record`, the group replica's counters advance by
    the group's ``row_width`` (so that the rounds after it explore as the in-process
    collector's rounds after that row) and the group's rollout ends at the row where SB3's
    ``should_collect_more_steps(model.train_freq, rows, episodes)`` says stop, as
    :class:`~rlightning_pettingzoo.ReplayRecorder` does for one model. A group's complete
    transitions after its rollout ended wait for the next :meth:`record`, as in process.

    Args:
        models: Group name -> the replica acting for the group (the learner's class,
            hyper-parameters and spaces, its ``n_envs`` the recorder's row width of the
            group), each given :func:`rlightning_sb3.start_training` (``collect`` refuses a
            model without one; its budget is not read: :meth:`record` loads the learner's).
            Their buffers are never written.
        env_fns: One function per env copy, each returning a PettingZoo ``ParallelEnv``.
        group_of: Agent id -> group name: a mapping or a function.
        seeds: The seed of each copy's first reset (None: no seed).
        row_widths: Group -> agent-steps each of its complete rows advances its counters by:
            the group's learner ``n_envs`` (all recorders' cells of a row together). None:
            each replica's ``n_envs`` (one recorder).

    Raises:
        TypeError, ValueError: ``row_widths`` is not a mapping with one int >= 1 per group of
            ``models`` (named; before any env is built); what ``GroupReplayCollector`` raises;
            ValueError for a gSDE model (``ActingReplica``).
    """

    def __init__(
        self,
        models: Mapping[str, OffPolicyAlgorithm],
        env_fns: Sequence[Callable[[], Any]],
        *,
        group_of: GroupOf,
        seeds: Sequence[int | None] | None = None,
        row_widths: Mapping[str, int] | None = None,
    ) -> None:
        if row_widths is None:
            widths = {group: int(model.n_envs) for group, model in models.items()}
        else:  # before any env is built
            if not isinstance(row_widths, Mapping) or list(row_widths) != list(models):
                raise ValueError(
                    "GroupReplayRecorder row_widths must map each group of models "
                    f"({list(models)}), in its order, to its learner's n_envs; got {row_widths!r}"
                )
            for group, width in row_widths.items():
                check_count(width, f"GroupReplayRecorder row_widths[{group!r}]", minimum=1)
            widths = {group: int(width) for group, width in row_widths.items()}
        super().__init__(models, env_fns, group_of=group_of, seeds=seeds)
        self._rollouts = {
            group: _ReplicaRollout(model, widths[group]) for group, model in self.models.items()
        }

    def _add(self, group: str, row: list[Transition]) -> bool:
        return self._rollouts[group].keep(row)  # kept for record(): the learner adds it

    def _noise_run(self, model: Any) -> int | None:
        """A group's learner's run (its last record's ``ActingState.run_id``), not the replica's.

        So a group's per-slot action-noise processes reset where its learner's
        ``start_training`` began a new run, as ``_setup_learn`` resets SB3's.

        Returns:
            The run id; before any :meth:`record` of that group, the replica's own
            :func:`rlightning_sb3.training_run_id`.
        """
        for group, replica in self.models.items():
            if replica is model:
                run = self._rollouts[group].learner_run
                if run is not None:
                    return run
        return super()._noise_run(model)

    def _reset_run_of(self, model: Any) -> int | None:
        """A group's learner's latest resetting run (its last record's ``reset_run_id``).

        So the copies reset where every group's learner reset its env
        (``CopyBookkeeping._start_run``), as the in-process collector's do.

        Returns:
            The run id; before any :meth:`record` of that group that carried one, the
            replica's own :func:`rlightning_sb3.training_reset_run_id`.
        """
        for group, replica in self.models.items():
            if replica is model:
                run = self._rollouts[group].learner_reset_run
                if run is not None:
                    return run
        return super()._reset_run_of(model)

    def record(self, states: Mapping[str, ActingState]) -> dict[str, RecordedReplay]:
        """Load every group's learner state, act and step one rollout of every group; add nothing.

        Args:
            states: Group -> its learner model's :func:`rlightning_sb3.acting_state` now (its
                weights, ``num_timesteps``, DQN's ``exploration_rate``, ``total_timesteps``;
                :meth:`rlightning_sb3.ActingReplica.load`), one per group of ``models``.

        Returns:
            Group -> its rollout's complete rows (:class:`RecordedReplay`: ``n_columns`` the
            replica's ``n_envs``, ``agent_returns`` the group's agents' last 100 episode
            returns), in ``models`` order. The envs are stepped, the replicas' random draws
            made (the global generators, the action spaces) and their weights and counters
            replaced and advanced; their buffers are untouched.

        Raises:
            ValueError: ``states`` is not one per group (named; before any load).
            What :meth:`rlightning_sb3.ActingReplica.load` and
            ``GroupReplayCollector.collect`` raise.
        """
        if not isinstance(states, Mapping) or sorted(states) != sorted(self.models):
            given = list(states) if isinstance(states, Mapping) else type(states).__name__
            raise ValueError(
                f"GroupReplayRecorder.record needs one acting state per group {list(self.models)}"
                f", got {given}"
            )
        for group, rollout in self._rollouts.items():
            rollout.start(states[group])
        stored = self.collect()
        return {
            group: rollout.take(
                len(self._envs),
                stored[group],
                {a: r for a, r in self.agent_returns.items() if self._groups[a] == group},
            )
            for group, rollout in self._rollouts.items()
        }


def fill_recorded_group_replay(
    models: Mapping[str, OffPolicyAlgorithm],
    recordings: Sequence[Mapping[str, RecordedReplay]],
    *,
    caller: str = "fill_recorded_group_replay",
) -> dict[str, int]:
    """Add every group's recorded rows to its ``model.replay_buffer``, as ``collect`` adds them.

    For each group, in ``models`` order, :func:`~rlightning_pettingzoo.fill_recorded_replay`
    with the recordings' entries of that group, in column order (recording ``r``'s cells of
    each row after recording ``r - 1``'s). Every model must be started
    (:func:`rlightning_sb3.start_training`): checked for every group before any is filled.

    Args:
        models: Group name -> the learner's off-policy model of the group (``n_envs`` the
            recordings' columns of the group together).
        recordings: Per recorder (runner), group -> its recording
            (:meth:`GroupReplayRecorder.record`), in column order.
        caller: Named in the messages.

    Returns:
        Group -> the agent-steps stored in its buffer (``n_envs`` per row), as
        ``GroupReplayCollector.collect`` returns. Each buffer and its model's counters
        (``num_timesteps``, DQN's exploration rate and target network, episode counts,
        ``ep_info_buffer``) are mutated; each model's callback and logger are called where
        ``collect_rollouts`` calls them.

    Raises:
        ValueError: a recorder's recordings are not one per group of ``models`` (named); a
            model was not started (named by group); what :func:`fill_recorded_replay`
            raises, named by group.
        RuntimeError: what :func:`fill_recorded_replay` raises (a group's learner rollout did
            not end at its last recorded row), named by group.
        rlightning_sb3.StopTraining: a group's callback stopped training (the groups before it
            in ``models`` are filled; in process the groups' rows interleave, so there the
            other groups' rows of the rollout may be added too).
    """

    def fill(group: str, model: Any, recorded: list[RecordedReplay]) -> int:
        return fill_recorded_replay(model, recorded)

    return _fill_groups(models, recordings, caller, fill, check_started=True)
