"""The shared on-policy collector split in two: record a rollout in one process, fill in another.

:class:`SharedRolloutCollector.collect <rlightning_pettingzoo.SharedRolloutCollector.collect>`
steps the copies, records each agent's own trajectory, lays the trajectories into the buffer's
columns (``_columns.pack``) and fills the model's buffer. For acting away from the learner (a
Ray runner holding a replica of the model, ``rlightning_ray.pettingzoo.RaySharedRolloutCollector``)
the two halves run in two processes, with the very same code:

* :class:`RolloutRecorder` is a :class:`~rlightning_pettingzoo.SharedRolloutCollector` whose
  fill is replaced by keeping the packed rows: :meth:`RolloutRecorder.record` runs ``collect``
  unchanged (acting, stepping, the transition rules, the column layout) over the replica's
  buffer shape (its ``n_steps`` rows and ``n_envs`` columns: the runner's share of the learner's
  columns) and returns them as a :class:`RecordedRollout` (picklable).
* :func:`fill_recorded` lays the recorded rollouts side by side (rollout ``r``'s columns after
  rollout ``r - 1``'s) and fills the learner's buffer with the function ``collect`` fills with
  (``rlightning_sb3.add_rollout_step`` row by row, then ``finish_rollout``): callbacks, the
  logger, ``num_timesteps`` and ``ep_info_buffer`` are the learner's.

A RecurrentPPO records as it collects in process: the replica's adapter carries each agent's
LSTM state from one rollout to the next in the recorder's process (the learner's weights are
loaded before each rollout, as the in-process model's are its own), and the rows carry the
states the learner's fill stores (``buffer_state``) and bootstraps from (``state``).

So one runner's rollout fills the learner's buffer exactly as ``SharedRolloutCollector.collect``
over the runner's copies fills it, and several runners' columns each exactly as the in-process
collector over that runner's copies (tests/ray/test_pz_collector.py).
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning.rules import check_flag
from rlightning_pettingzoo._columns import OnePickle, Placed
from rlightning_pettingzoo._sb3 import refuse_unapplied_wrappers
from rlightning_pettingzoo._stepper_base import CopyBookkeeping
from rlightning_pettingzoo.collector import (
    Segment,
    SharedRolloutCollector,
    _fill_rollout,
    _segments,
)

__all__ = [
    "RecordedRollout",
    "RolloutRecorder",
    "check_rollout_model",
    "fill_recorded",
    "replica_slots",
]


@dataclass(frozen=True)
class RecordedRollout(OnePickle):
    """One rollout of a :class:`RolloutRecorder`: its packed rows and its episodes.

    Attributes:
        rows: ``rows[r][c]``: the packed transition of the recorder's column ``c``, row ``r``
            (``n_rows`` lists of ``n_columns``), with what ``add_rollout_step`` is given for it
            (``episode_start``, ``done``, the info: ``terminal_observation``,
            ``TimeLimit.truncated``, ``episode``). Observations are numpy arrays (dicts of them
            for a Dict space); ``value`` and ``log_prob`` as the adapter answered them; for a
            RecurrentPPO ``state`` and ``buffer_state`` (sb3-contrib ``RNNStates`` of torch
            tensors, ``(n_lstm_layers, 1, lstm_hidden_size)`` each: the agent's LSTM state
            after and before acting), which the fill stores and bootstraps from.
        n_rows: The recorder's buffer rows (``n_steps``).
        n_columns: The recorder's buffer columns (its model's ``n_envs``).
        n_copies: The recorder's env copies.
        dropped: Agent-steps taken but not stored (see ``SharedRolloutCollector``).
        agent_returns: Per agent id, the returns of its last 100 finished episodes (all the
            recorder's copies, oldest first), after this rollout.
    """

    rows: list[list[Placed]]
    n_rows: int
    n_columns: int
    n_copies: int
    dropped: int
    agent_returns: dict[Any, list[float]]


def check_rollout_model(model: Any, caller: str) -> None:
    """Refuse a model :func:`fill_recorded` cannot fill (checked before anything starts).

    Args:
        model: The learner's model.
        caller: Named in the messages.

    Returns:
        None; nothing is mutated.

    Raises:
        TypeError: ``model`` is not an on-policy SB3 model.
        ValueError: ``model``'s env has VecEnv wrappers the collector does not apply, or the
            model explores with gSDE (``use_sde=True``: the replica's noise matrix is not the
            learner's and is never resampled where ``collect_rollouts`` resamples it).
    """
    if not isinstance(model, OnPolicyAlgorithm):
        raise TypeError(
            f"{caller} needs an on-policy SB3 model (PPO, A2C, MaskablePPO), got "
            f"{type(model).__name__}"
        )
    if getattr(model, "use_sde", False):
        raise ValueError(
            f"{caller} does not support gSDE (use_sde=True): the runners' replicas would "
            "explore with noise matrices of their own, never resampled where SB3's "
            "collect_rollouts resamples them; build the model with use_sde=False"
        )
    refuse_unapplied_wrappers(model, caller)


class _LearnerResetRuns(CopyBookkeeping):
    """A recorder whose copies reset on its learner's resetting runs (mixed in first).

    The learner's side knows :func:`rlightning_sb3.training_reset_run_id` of each model (its
    ``start_training(..., reset_num_timesteps=...)``); a runner's replica does not (it never
    begins the learner's runs). Each ``record`` is given them (:meth:`_take_reset_runs`) and
    ``CopyBookkeeping._start_run`` reads them through :meth:`_reset_run_of`, so the recorder's
    copies are reset where the in-process collector's are, by the very same rule (a group
    recorder's: once every group's model began a resetting run). Mixed into the on-policy
    recorders (:class:`RolloutRecorder`, ``remote_aec.AECRolloutRecorder``,
    ``remote_groups.GroupRolloutRecorder``, ``remote_aec_groups``' engine).
    """

    #: The learner's latest resetting run of each model of :meth:`_run_models` (in its order),
    #: as the last ``record`` gave them; None: none given (the replicas' own are read).
    _learner_reset_runs: list[int | None] | None = None

    def _take_reset_runs(self, reset_runs: Sequence[int | None] | None, caller: str) -> None:
        """Keep the learner's resetting runs for this ``record`` (mutates the recorder only).

        Args:
            reset_runs: One :func:`rlightning_sb3.training_reset_run_id` of the learner's model
                per model of :meth:`_run_models` (one; one per group in ``models`` order), each
                an int or None (that model never began a run that reset its env); None: read
                the replicas' own (a recorder used by hand, in one process).
            caller: Named in the messages.

        Raises:
            ValueError: ``reset_runs`` is not one per model.
            TypeError: an entry is neither None nor an int (a bool), named by index.
        """
        if reset_runs is None:
            self._learner_reset_runs = None
            return
        runs = list(reset_runs)
        n = len(self._run_models())
        if len(runs) != n:
            raise ValueError(
                f"{caller}.record: reset_runs must hold one learner reset run id per model "
                f"({n}), got {len(runs)}: {runs!r}"
            )
        for k, run in enumerate(runs):
            if run is not None and (isinstance(run, bool) or not isinstance(run, int)):
                raise TypeError(
                    f"{caller}.record: reset_runs[{k}] must be None or an int (a "
                    f"training_reset_run_id), got {type(run).__name__} {run!r}"
                )
        self._learner_reset_runs = runs

    def _reset_run_of(self, model: Any) -> int | None:
        """The learner's latest resetting run of ``model`` (as the last ``record`` was given).

        Returns:
            The run id given for ``model`` (None included: the learner's model began no
            resetting run, so the copies are not reset, as in process); without any given,
            the replica's own :func:`rlightning_sb3.training_reset_run_id`.
        """
        runs = self._learner_reset_runs
        if runs is not None:
            for replica, run in zip(self._run_models(), runs, strict=True):
                if replica is model:
                    return run
        return super()._reset_run_of(model)


class _Recording(_LearnerResetRuns):
    """A collector whose fill keeps the packed rows for :meth:`record` (mixed in first).

    Mixed into an in-process collector (:class:`RolloutRecorder`, ``remote_aec.
    AECRolloutRecorder``) whose ``collect`` packs once and hands the rows to ``_fill``.
    """

    _kept: list[list[list[Placed]]]  # emptied by record() before each collect()

    def _fill(self, placed: list[list[Placed]], update_model: bool) -> None:
        if not hasattr(self, "_kept"):  # a bare collect(): nothing filled either
            self._kept = []
        self._kept.append(placed)  # kept for record(): the learner fills

    def record(self, reset_runs: Sequence[int | None] | None = None) -> RecordedRollout:
        """Act and step one rollout as the collector's ``collect`` does; fill nothing.

        Args:
            reset_runs: ``[training_reset_run_id(learner)]``: the learner's latest run that
                reset its env (:func:`rlightning_sb3.training_reset_run_id`), so the copies
                reset at a new one as the in-process collector's do (``collect``'s
                ``CopyBookkeeping._start_run``); None: the replica's own (used by hand).

        Returns:
            The packed rows and the episodes (:class:`RecordedRollout`). The envs are stepped
            and the model's random draws made (torch's global generator); the model's buffer,
            ``num_timesteps`` and logger are untouched.

        Raises:
            ValueError, TypeError: ``reset_runs`` is not one int or None
                (:meth:`_take_reset_runs`).
            What the collector's ``collect`` raises.
        """
        collector: Any = self
        self._take_reset_runs(reset_runs, type(self).__name__)
        self._kept = []
        collector.collect(update_model=False)
        assert len(self._kept) == 1, "internal: collect() did not pack once"
        buf: Any = collector.model.rollout_buffer
        return RecordedRollout(
            rows=self._kept.pop(),
            n_rows=int(buf.buffer_size),
            n_columns=int(buf.n_envs),
            n_copies=len(collector._envs),
            dropped=collector.dropped,
            agent_returns={agent: list(r) for agent, r in collector.agent_returns.items()},
        )


class RolloutRecorder(_Recording, SharedRolloutCollector):
    """A :class:`~rlightning_pettingzoo.SharedRolloutCollector` that keeps its rows unfilled.

    :meth:`record` runs ``collect`` and returns the rows it packed (a :class:`RecordedRollout`).

    Args:
        model: The replica acting (its ``n_steps`` and ``n_envs`` shape the rollout; its
            buffer is never written).
        env_fns: One function per env copy, each returning a PettingZoo ``ParallelEnv``.
        seeds: The seed of each copy's first reset (None: no seed).

    Raises:
        What ``SharedRolloutCollector`` raises.
    """


def fill_recorded(
    model: OnPolicyAlgorithm,
    rollouts: Sequence[RecordedRollout],
    *,
    update_model: bool = True,
    agent_returns: dict[Any, deque[float]] | None = None,
) -> list[Segment]:
    """Fill ``model.rollout_buffer`` from recorded rollouts laid side by side, as ``collect``.

    Rollout ``r``'s columns follow rollout ``r - 1``'s (its column ``c`` is the buffer's
    ``sum(n_columns of the rollouts before) + c``); the rows go to
    :func:`rlightning_sb3.add_rollout_step` row by row and :func:`rlightning_sb3.finish_rollout`
    ends the rollout, by the function ``SharedRolloutCollector.collect`` fills with.

    The learner's policy never acted here: ``add_rollout_step`` puts it in eval mode at the
    rollout's first step (``collect_rollouts``' ``set_training_mode(False)``), so its truncation
    bootstraps and last values are the in-process collector's.

    Args:
        model: The learner's on-policy model (``n_steps`` rows; ``n_envs`` the rollouts'
            columns together).
        rollouts: The rollouts, in column order.
        update_model: As in ``SharedRolloutCollector.collect`` (``num_timesteps``, episodes for
            ``rollout/ep_rew_mean``, the callback, the logger; needs
            :func:`rlightning_sb3.start_training`).
        agent_returns: Per agent id, the returns recorded as ``rollout/ep_rew_mean/<agent_id>``
            before the logger's dump (None: each rollout's :attr:`RecordedRollout.agent_returns`
            together).

    Returns:
        The buffer's segments, column by column (``env_index`` counts the copies of the
        rollouts before: rollout ``r``'s copy ``i`` is ``sum(n_copies before) + i``).

    Raises:
        TypeError: ``update_model`` is not a bool (:func:`rlightning.rules.check_flag`; a
            ``numpy.bool_`` is one), before the buffer or the model is touched.
        ValueError: no rollouts, a rollout's rows are not the model's ``n_steps``, or the
            rollouts' columns are not the model's ``n_envs`` (each named).
        What ``add_rollout_step`` and ``finish_rollout`` raise.
    """
    update_model = check_flag(update_model, "update_model", "fill_recorded")  # before any fill
    if not rollouts:
        raise ValueError("fill_recorded needs at least one recorded rollout")
    buf: Any = model.rollout_buffer
    n_rows, n_columns = int(buf.buffer_size), int(buf.n_envs)
    for r, rollout in enumerate(rollouts):
        if rollout.n_rows != n_rows or len(rollout.rows) != n_rows:
            raise ValueError(
                f"rollout {r} has {len(rollout.rows)} rows, the model's buffer n_steps={n_rows}"
            )
    total = sum(rollout.n_columns for rollout in rollouts)
    if total != n_columns:
        raise ValueError(
            f"the rollouts have {[r.n_columns for r in rollouts]} columns ({total} in all), the "
            f"model's buffer n_envs={n_columns}"
        )
    rows: list[list[Placed]] = [[] for _ in range(n_rows)]
    column_offset, copy_offset = 0, 0
    for rollout in rollouts:
        for r, row in enumerate(rollout.rows):
            for p in row:
                t = p.transition
                moved = dataclasses.replace(t, env_index=t.env_index + copy_offset)
                rows[r].append(
                    dataclasses.replace(p, transition=moved, column=p.column + column_offset)
                )
        column_offset += rollout.n_columns
        copy_offset += rollout.n_copies
    if agent_returns is None:
        merged: dict[Any, list[float]] = {}
        for rollout in rollouts:
            for agent, returns in rollout.agent_returns.items():
                merged.setdefault(agent, []).extend(returns)
        returns_of: Any = merged
    else:
        returns_of = agent_returns
    _fill_rollout(model, rows, update_model, returns_of)
    return _segments(rows, n_rows, n_columns)


def replica_slots(observation_space: Any, action_space: Any, n: int) -> Any:
    """A ``DummyVecEnv`` of ``n`` never-stepped slots of the spaces (for SB3's ``load``).

    A replica of a learner whose env SB3 wrapped in ``VecTransposeImage`` (channel-last images)
    is loaded over it (``type(model).load(..., env=replica_slots(raw_space, action_space, n))``):
    SB3's ``load`` wraps it as it wrapped the learner's (``BaseAlgorithm._wrap_env``), so that
    :func:`rlightning_sb3.image_transpose` of the replica, and so a :class:`RolloutRecorder`
    over it, transposes as the learner's collector does.

    Args:
        observation_space: The raw (pre-``VecTransposeImage``) observation space.
        action_space: The model's action space.
        n: The slots (the replica's ``n_envs``).

    Returns:
        The VecEnv; its slots refuse ``step`` (the recorder steps the PettingZoo copies).

    Raises:
        Nothing itself; what ``DummyVecEnv`` raises for spaces it cannot hold (its buffers are
        built from ``observation_space``).
    """

    class _Slot(gym.Env):
        def __init__(self) -> None:
            self.observation_space = observation_space
            self.action_space = action_space

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            super().reset(seed=seed)
            return observation_space.sample(), {}

        def step(self, action: Any) -> Any:
            raise RuntimeError("a replica's slot is never stepped")

    return DummyVecEnv([_Slot] * n)
