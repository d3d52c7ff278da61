"""The AEC group collector split in two: record every group's rollout here, fill there.

As :mod:`rlightning_pettingzoo.remote_groups` splits the parallel group collector, this splits
:class:`~rlightning_pettingzoo.AECGroupRolloutCollector` (a model per group of agents in a
turn-based env) for acting away from the learner (a Ray runner holding a replica of every
group's model and the opponents, ``rlightning_ray.pettingzoo.RayAECGroupRolloutCollector``),
with the very same code:

* :class:`AECGroupRolloutRecorder` is an ``AECGroupRolloutCollector`` whose per-group fill
  (the engine's ``_fill_group``) is replaced by keeping the group's packed rows:
  :meth:`AECGroupRolloutRecorder.record` runs ``collect`` unchanged (the turns and PettingZoo's
  dead steps as ``AECRolloutCollector`` takes them, the opponents, the per-group forward passes
  in ``models`` order, the plan that fills every group's buffer and acts a full group's turns
  unstored, the rollout's end, the column layout) over the replicas' buffer shapes and returns
  one :class:`~rlightning_pettingzoo.RecordedRollout` per group;
* :func:`~rlightning_pettingzoo.fill_recorded_groups` fills each group's learner model from the
  runners' rollouts of the group (the in-process collectors' own fill, ``_fill_rollout``), in
  ``models`` order, as ``AECGroupRolloutCollector.collect`` fills them.

:func:`check_aec_group_models` is what the learner checks of the models and the opponents
before any runner is built.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlightning_pettingzoo._columns import Placed
from rlightning_pettingzoo.aec_groups import (
    AECGroupRolloutCollector,
    _check_group_opponents,
    _GroupTurns,
)
from rlightning_pettingzoo.groups import GroupOf
from rlightning_pettingzoo.remote import RecordedRollout, _LearnerResetRuns
from rlightning_pettingzoo.remote_aec import check_aec_model
from rlightning_pettingzoo.remote_groups import _per_model, _recorded_groups, check_group_models

__all__ = ["AECGroupRolloutRecorder", "check_aec_group_models"]


class _KeptTurns(_LearnerResetRuns, _GroupTurns):
    """The AEC group engine whose per-group fill keeps the packed rows (for ``record``).

    Its copies reset on the learner's resetting runs given to ``record``
    (``remote._LearnerResetRuns``: once every group's model began one, as in process).
    """

    _kept: dict[str, list[list[Placed]]]

    def _fill_group(
        self,
        group: str,
        placed: list[list[Placed]],
        update_model: bool,
        returns: Mapping[Any, Sequence[float]],
    ) -> None:
        if not hasattr(self, "_kept"):  # a bare collect(): nothing filled either
            self._kept = {}
        self._kept[group] = placed  # kept for record(): the learner fills


class AECGroupRolloutRecorder(AECGroupRolloutCollector):
    """An :class:`~rlightning_pettingzoo.AECGroupRolloutCollector` that keeps each group's rows.

    Built with ``AECGroupRolloutCollector``'s arguments (``models``: group name -> the replica
    acting for the group, whose ``n_steps`` and ``n_envs`` shape the group's rollout and whose
    buffer is never written; ``env_fns``; ``group_of``; ``opponents``, ``"random"`` or frozen
    SB3 models built in this process; ``seeds``) and raising what it raises (its messages name
    ``AECGroupRolloutCollector``). Its ``collect`` fills no buffer (each group's rows are kept
    for :meth:`record`).
    """

    _turns_class = _KeptTurns

    def record(
        self, reset_runs: Mapping[str, int | None] | None = None
    ) -> dict[str, RecordedRollout]:
        """Act and step one rollout as ``AECGroupRolloutCollector.collect`` does; fill nothing.

        Args:
            reset_runs: Group -> its learner's latest run that reset its env
                (:func:`rlightning_sb3.training_reset_run_id`), every group of ``models``: the
                copies reset as the in-process collector's do (``CopyBookkeeping._start_run``:
                once every group's model began a resetting run, after the dead steps due);
                None: the replicas' own (used by hand).

        Returns:
            Group -> its rollout (:class:`~rlightning_pettingzoo.RecordedRollout`: the group's
            packed rows, ``n_steps`` by the replica's ``n_envs``; ``dropped`` the group's turns
            acted and not stored; ``agent_returns`` its agents' last 100 game returns), in
            ``models`` order. The envs are stepped and the replicas' and opponents' random
            draws made (torch's global generator, the random opponents' own); the replicas'
            buffers, ``num_timesteps`` and loggers are untouched.

        Raises:
            ValueError: ``reset_runs`` does not name every group of ``models``; what
                ``AECGroupRolloutCollector.collect`` raises (with ``update_model=False``).
            TypeError: a run id is neither None nor an int.
        """
        turns: Any = self._turns
        name = "AECGroupRolloutRecorder"
        turns._take_reset_runs(_per_model(reset_runs, turns.models, name), name)
        turns._kept = {}
        self.collect(update_model=False)
        return _recorded_groups(
            turns.models,
            turns._kept,
            len(turns._envs),
            turns.group_dropped,
            turns.agent_returns,
            turns._groups,
        )


def check_aec_group_models(
    models: Mapping[str, Any], opponents: Any, group_of: GroupOf, caller: str
) -> None:
    """Refuse models or opponents an :class:`AECGroupRolloutRecorder` could not record with.

    What can be checked without an env, before anything starts: the group models as
    :func:`~rlightning_pettingzoo.check_group_models` checks them; ``opponents`` a mapping
    whose entries are ``"random"`` or frozen feed-forward SB3 models, none of them a group's
    model (a runner receives each opponent as its save: a group's model would act there as a
    frozen copy), and none of their agents named by ``group_of`` (a mapping), as
    ``AECGroupRolloutCollector`` checks them. The agents, spaces and groups are checked against
    the envs where the recorder is built.

    Args:
        models: Group name -> the learner's model of the group.
        opponents: ``{agent_id: opponent}`` or None.
        group_of: Agent id -> group name (a mapping or a function; a function is not called).
        caller: Named in the messages.

    Returns:
        None; nothing is mutated.

    Raises:
        ValueError: what ``check_group_models`` raises; an opponent is a group's model (named
            by agent and group); ``group_of`` names an agent of ``opponents``.
        TypeError: what ``check_group_models`` raises; ``opponents`` is not a mapping; what
            :func:`~rlightning_pettingzoo.check_aec_model` refuses of an entry (a string other
            than ``"random"``, not an SB3 model: named by agent).
    """
    check_group_models(models, caller)
    if isinstance(opponents, Mapping) and (isinstance(group_of, Mapping) or callable(group_of)):
        _check_group_opponents(opponents, models, group_of)
    # the mapping and each entry's kind (an opponent that is a group's model is refused above)
    check_aec_model(next(iter(models.values())), opponents, caller)
