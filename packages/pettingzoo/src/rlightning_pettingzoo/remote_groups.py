"""The group on-policy collector split in two: record every group's rollout here, fill there.

:class:`~rlightning_pettingzoo.GroupRolloutCollector` steps the copies with one model per group
of agents, lays each group's agents' trajectories into that group's buffer columns
(``_columns.pack``) and fills each group's buffer. For acting away from the learner (a Ray
runner holding a replica of every group's model,
``rlightning_ray.pettingzoo.RayGroupRolloutCollector``) the two halves run in two processes,
with the very same code, as :mod:`rlightning_pettingzoo.remote` splits the shared collector:

* :class:`GroupRolloutRecorder` is a :class:`~rlightning_pettingzoo.GroupRolloutCollector`
  whose per-group fill (``_fill``) is replaced by keeping the group's packed rows:
  :meth:`GroupRolloutRecorder.record` runs ``collect`` unchanged (the per-group forward passes
  in ``models`` order, the stepping, the transition rules, the plan that fills every group's
  buffer and drops the steps of a full group, the column layout) over the replicas' buffer
  shapes (each its ``n_steps`` rows and ``n_envs`` columns: the runner's share of that group's
  learner columns) and returns one :class:`~rlightning_pettingzoo.RecordedRollout` per group;
* :func:`fill_recorded_groups` fills each group's learner model from the runners' rollouts of
  that group side by side with :func:`~rlightning_pettingzoo.fill_recorded` (the shared
  collector's own fill, ``add_rollout_step`` row by row, then ``finish_rollout``), group by
  group in ``models`` order as ``GroupRolloutCollector.collect`` fills them.

A RecurrentPPO group records as it collects in process (``remote``'s rule): the replica's
adapter carries each of its agents' LSTM states from one rollout to the next in the
recorder's process, and the rows carry the states the learner's fill stores and bootstraps
from.

So one runner's rollout fills every group's learner buffer exactly as
``GroupRolloutCollector.collect`` over the runner's copies fills it, and several runners' columns
of each group's buffer each as the in-process collector over that runner's copies
(tests/ray/test_pz_groups.py).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

from rlightning.rules import check_flag
from rlightning_pettingzoo._columns import Placed
from rlightning_pettingzoo._sb3 import refuse_unstarted
from rlightning_pettingzoo.collector import Segment
from rlightning_pettingzoo.groups import (
    GroupRolloutCollector,
    _refuse_shared_models,
    _refuse_unfit_rollout_models,
)
from rlightning_pettingzoo.remote import (
    RecordedRollout,
    _LearnerResetRuns,
    check_rollout_model,
    fill_recorded,
)

__all__ = [
    "GroupRolloutRecorder",
    "check_group_models",
    "check_group_training",
    "fill_recorded_groups",
    "refuse_group_kind",
]


def check_group_models(models: Mapping[str, Any], caller: str) -> None:
    """Refuse group models :func:`fill_recorded_groups` cannot fill (before anything starts).

    Args:
        models: Group name -> the learner's model of the group.
        caller: Named in the messages.

    Returns:
        None; nothing is mutated.

    Raises:
        ValueError: ``models`` is empty or not a mapping of group names; two groups share one
            model object; what :func:`~rlightning_pettingzoo.check_rollout_model` raises,
            named ``"<caller> (group '<g>')"``.
        TypeError: a model is not an on-policy SB3 model, named by group.
    """
    _check_groups(models, caller, "on-policy", check_rollout_model)
    _refuse_unfit_rollout_models(models)  # the in-process collector's refusals, before any runner


def _check_groups(
    models: Mapping[str, Any], caller: str, kind: str, check_model: Callable[[Any, str], None]
) -> None:
    """The group collectors' model checks: a non-empty mapping, a model per group, each fit.

    Shared by :func:`check_group_models` and ``remote_group_replay.check_group_replay_models``.

    Args:
        models: Group name -> the learner's model of the group.
        caller: Named in the messages.
        kind: The models' kind, for the message (``"on-policy"``, ``"off-policy"``).
        check_model: The one-model check (:func:`check_rollout_model`, ...), called as
            ``check_model(model, "<caller> (group '<g>')")`` in ``models`` order.

    Raises:
        ValueError: ``models`` is empty or not a mapping; two groups share one model object;
            what ``check_model`` raises.
        TypeError: what ``check_model`` raises.
    """
    if not isinstance(models, Mapping) or not models:
        raise ValueError(
            f"{caller} needs models: a non-empty mapping group name -> {kind} SB3 model, "
            f"got {type(models).__name__} {models!r}"
        )
    _refuse_shared_models(models, caller)
    for group, model in models.items():
        check_model(model, f"{caller} (group {group!r})")


def refuse_group_kind(models: Any, caller: str, off_policy: bool, instead: str) -> None:
    """Refuse a group model of the other kind, naming the group and the collector that takes it.

    The Ray group collectors' first check (``RayGroupRolloutCollector`` takes on-policy group
    models, ``RayGroupReplayCollector`` off-policy ones), before their own model checks.

    Args:
        models: Group name -> model (anything else is left to the caller's own checks).
        caller: The collector, named in the message.
        off_policy: Whether the caller takes off-policy models (it refuses on-policy ones).
        instead: The collector of the other kind, named in the message.

    Returns:
        None; nothing is mutated.

    Raises:
        TypeError: a model is an SB3 ``OnPolicyAlgorithm`` (with ``off_policy``) or an
            ``OffPolicyAlgorithm`` (without), named by group.
    """
    wrong = OnPolicyAlgorithm if off_policy else OffPolicyAlgorithm
    if off_policy:
        need, kind = "an off-policy SB3 model (DQN, SAC, TD3)", "on-policy"
    else:
        need, kind = "an on-policy SB3 model (PPO, A2C, MaskablePPO)", "off-policy"
    if isinstance(models, Mapping):
        for group, model in models.items():
            if isinstance(model, wrong):
                raise TypeError(
                    f"{caller} (group {group!r}) needs {need}, got {type(model).__name__}, an "
                    f"{kind} model: {instead} collects {kind} group models"
                )


def check_group_training(models: Mapping[str, Any], caller: str) -> None:
    """Refuse, before any env is stepped, group models a fill with ``update_model`` refuses.

    ``GroupRolloutCollector.collect``'s check before its first step (each model started by
    :func:`rlightning_sb3.start_training`, its run not stopped by a callback), for a caller
    whose envs are stepped elsewhere.

    Args:
        models: Group name -> the learner's model of the group.
        caller: Named in the messages.

    Returns:
        None; nothing is mutated.

    Raises:
        ValueError: a model has no step budget (named with the caller and the group).
        rlightning_sb3.StopTraining: a callback stopped a model's run (named likewise).
    """
    for group, model in models.items():
        refuse_unstarted(model, caller, group)


class GroupRolloutRecorder(_LearnerResetRuns, GroupRolloutCollector):
    """A :class:`~rlightning_pettingzoo.GroupRolloutCollector` that keeps each group's rows.

    Built with ``GroupRolloutCollector``'s arguments (``models``: group name -> the replica
    acting for the group, whose ``n_steps`` and ``n_envs`` shape the group's rollout and whose
    buffer is never written; ``env_fns``; ``group_of``; ``seeds``) and raising what it raises.
    """

    _kept: dict[str, list[list[Placed]]]

    def _fill(
        self,
        group: str,
        placed: list[list[Placed]],
        update_model: bool,
        returns: Mapping[Any, Sequence[float]],
    ) -> None:
        self._kept[group] = placed  # kept for record(): the learner fills

    def record(
        self, reset_runs: Mapping[str, int | None] | None = None
    ) -> dict[str, RecordedRollout]:
        """Act and step one rollout as ``GroupRolloutCollector.collect`` does; fill nothing.

        Args:
            reset_runs: Group -> its learner's latest run that reset its env
                (:func:`rlightning_sb3.training_reset_run_id`), every group of ``models``: the
                copies reset as the in-process collector's do (``CopyBookkeeping._start_run``:
                once every group's model began a resetting run); None: the replicas' own
                (used by hand).

        Returns:
            Group -> its rollout (:class:`~rlightning_pettingzoo.RecordedRollout`: the group's
            packed rows, ``n_steps`` by the replica's ``n_envs``; ``dropped`` the group's
            agent-steps acted and not stored; ``agent_returns`` its agents' last 100 episode
            returns), in ``models`` order. The envs are stepped and the replicas' random
            draws made (torch's global generator); their buffers, ``num_timesteps`` and
            loggers are untouched.

        Raises:
            ValueError: ``reset_runs`` does not name every group of ``models``; what
                ``GroupRolloutCollector.collect`` raises.
            TypeError: a run id is neither None nor an int.
        """
        name = "GroupRolloutRecorder"
        self._take_reset_runs(_per_model(reset_runs, self.models, name), name)
        self._kept = {}
        self.collect(update_model=False)
        return _recorded_groups(
            self.models,
            self._kept,
            len(self._envs),
            self.group_dropped,
            self.agent_returns,
            self._groups,
        )


def _per_model(
    reset_runs: Mapping[str, int | None] | None, models: Mapping[str, Any], caller: str
) -> list[int | None] | None:
    """``reset_runs`` in ``models`` order (``_LearnerResetRuns._take_reset_runs``'s list).

    Shared by :meth:`GroupRolloutRecorder.record` and
    ``remote_aec_groups.AECGroupRolloutRecorder.record``.

    Raises:
        ValueError: ``reset_runs`` is not a mapping holding exactly the groups of ``models``.
        TypeError: a group's run id is neither None nor an int (named by group).
    """
    if reset_runs is None:
        return None
    if not isinstance(reset_runs, Mapping) or set(reset_runs) != set(models):
        given = list(reset_runs) if isinstance(reset_runs, Mapping) else reset_runs
        raise ValueError(
            f"{caller}.record: reset_runs must map every group {list(models)} to its learner's "
            f"training_reset_run_id, got {given!r}"
        )
    for group, run in reset_runs.items():
        if run is not None and (isinstance(run, bool) or not isinstance(run, int)):
            raise TypeError(
                f"{caller}.record: reset_runs[{group!r}] must be None or an int (the group "
                f"learner's training_reset_run_id), got {type(run).__name__} {run!r}"
            )
    return [reset_runs[group] for group in models]


def _recorded_groups(
    models: Mapping[str, Any],
    kept: dict[str, list[list[Placed]]],
    n_copies: int,
    group_dropped: Mapping[str, int],
    agent_returns: Mapping[Any, Sequence[float]],
    groups: Mapping[Any, str],
) -> dict[str, RecordedRollout]:
    """Each group's :class:`RecordedRollout` after a group recorder's unfilled ``collect``.

    Shared by :meth:`GroupRolloutRecorder.record` and
    ``remote_aec_groups.AECGroupRolloutRecorder.record``.

    Args:
        models: Group name -> the replica (its buffer's ``buffer_size`` and ``n_envs`` are the
            rollout's rows and columns), in ``models`` order.
        kept: Group name -> its packed rows, as the fill hook kept them; emptied here.
        n_copies: The recorder's env copies.
        group_dropped: Per group, its agents' steps acted and not stored.
        agent_returns: Per trained agent id, its last 100 episode returns.
        groups: Trained agent id -> its group.

    Returns:
        Group -> its rollout, in ``models`` order.
    """
    assert kept.keys() == models.keys(), "internal: a group was not packed"
    out: dict[str, RecordedRollout] = {}
    for group, model in models.items():
        buf: Any = model.rollout_buffer
        out[group] = RecordedRollout(
            rows=kept.pop(group),
            n_rows=int(buf.buffer_size),
            n_columns=int(buf.n_envs),
            n_copies=n_copies,
            dropped=group_dropped[group],
            agent_returns={
                agent: list(r) for agent, r in agent_returns.items() if groups[agent] == group
            },
        )
    return out


def fill_recorded_groups(
    models: Mapping[str, OnPolicyAlgorithm],
    rollouts: Sequence[Mapping[str, RecordedRollout]],
    *,
    update_model: bool = True,
    agent_returns: Mapping[str, dict[Any, deque[float]]] | None = None,
    caller: str = "fill_recorded_groups",
) -> dict[str, list[Segment]]:
    """Fill every group's ``model.rollout_buffer`` from recorded rollouts, as ``collect``.

    For each group, in ``models`` order (as ``GroupRolloutCollector.collect`` fills them),
    :func:`~rlightning_pettingzoo.fill_recorded` with the rollouts' entries of that group, in
    column order (rollout ``r``'s columns of the group after rollout ``r - 1``'s).

    Args:
        models: Group name -> the learner's on-policy model of the group (``n_steps`` rows;
            ``n_envs`` the rollouts' columns of the group together).
        rollouts: Per recorder (runner), group -> its rollout (:meth:`GroupRolloutRecorder
            .record`), in column order.
        update_model: As in ``GroupRolloutCollector.collect``, per group model (its
            ``num_timesteps``, episodes, callback and logger; needs
            :func:`rlightning_sb3.start_training` for each model: checked for every group
            before any is filled).
        agent_returns: Group -> per agent id of the group, the returns recorded as
            ``rollout/ep_rew_mean/<agent_id>`` (None: as :func:`fill_recorded`).
        caller: Named in the messages.

    Returns:
        Group -> the group buffer's segments, column by column (``env_index`` the copy index
        over the recorders: recorder ``r``'s copy ``i`` is ``sum(n_copies before) + i``).

    Raises:
        TypeError: ``update_model`` is not a bool (:func:`rlightning.rules.check_flag`, named
            with ``caller``), before any group is filled.
        ValueError: a recorder's rollouts are not one per group of ``models`` (named), a model
            was not started (with ``update_model``, named by group), or what
            :func:`fill_recorded` raises, named by group.
        rlightning_sb3.StopTraining: a group's callback stopped training (the groups before it
            in ``models`` are filled, as in-process).
    """
    flag = check_flag(update_model, "update_model", caller)  # before any group is filled

    def fill(group: str, model: Any, recorded: list[RecordedRollout]) -> list[Segment]:
        returns = None if agent_returns is None else agent_returns[group]
        return fill_recorded(model, recorded, update_model=flag, agent_returns=returns)

    return _fill_groups(models, rollouts, caller, fill, check_started=flag)


_Out = TypeVar("_Out")


def _fill_groups(
    models: Mapping[str, Any],
    recorded: Sequence[Mapping[str, Any]],
    caller: str,
    fill: Callable[[str, Any, list[Any]], _Out],
    *,
    check_started: bool,
) -> dict[str, _Out]:
    """Fill every group's learner model from the recorders' recordings of it, group by group.

    Shared by :func:`fill_recorded_groups` and
    ``remote_group_replay.fill_recorded_group_replay``: every recorder's recordings must be one
    per group of ``models``, in its order; with ``check_started`` every model must be started
    (:func:`check_group_training`) before any is filled; then ``fill(group, model, [recording
    of the group, per recorder])`` in ``models`` order (as the in-process group collectors fill
    them).

    Returns:
        Group -> what ``fill`` answered for it.

    Raises:
        ValueError: a recorder's recordings are not one per group (named); what
            :func:`check_group_training` raises.
        ValueError, RuntimeError: what ``fill`` raises as those very types, named by group
            (``"<caller> (group '<g>'): ..."``, the cause chained); other errors (``StopTraining``)
            as raised (the groups before it are filled).
    """
    for r, recordings in enumerate(recorded):
        if list(recordings) != list(models):
            raise ValueError(
                f"{caller}: rollout {r} holds the groups {list(recordings)}, the models "
                f"{list(models)}"
            )
    if check_started:
        check_group_training(models, caller)
    out: dict[str, _Out] = {}
    for group, model in models.items():
        try:
            out[group] = fill(group, model, [recordings[group] for recordings in recorded])
        except (ValueError, RuntimeError) as error:
            if type(error) not in (ValueError, RuntimeError):
                raise
            raise type(error)(f"{caller} (group {group!r}): {error}") from error
    return out
