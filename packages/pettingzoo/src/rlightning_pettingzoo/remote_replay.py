"""The shared off-policy collector split in two: record the rows in one process, add in another.

:meth:`SharedReplayCollector.collect <rlightning_pettingzoo.SharedReplayCollector.collect>`
acts, steps the copies, completes each agent's transitions, lays them into rows of the buffer's
``n_envs`` cells and adds each row with :func:`rlightning_sb3.add_replay_step`, which also
advances the model's counters its next rounds explore by (``num_timesteps`` for the
``learning_starts`` warm-up, DQN's ``exploration_rate``) and says where a rollout of
``train_freq`` ends. For acting away from the learner (a Ray runner holding a replica of the
model, ``rlightning_ray.pettingzoo.RaySharedReplayCollector``) the two halves run in two
processes, with the very same code:

* :class:`ReplayRecorder` is a :class:`~rlightning_pettingzoo.SharedReplayCollector` whose
  hand-over of a complete row is replaced: the row is kept, and the replica's counters advance
  as the learner's will when it adds that row (:meth:`rlightning_sb3.ActingReplica.advance`:
  ``num_timesteps += row_width``, DQN's schedule, SB3's own functions), and the rollout ends
  where SB3's ``should_collect_more_steps`` says (the rule ``add_replay_step`` ends it by).
  :meth:`ReplayRecorder.record` takes the learner's :class:`rlightning_sb3.ActingState` (its
  weights, counters and run: a new run resets the recorder's per-slot action-noise processes,
  which it keeps from one record to the next), runs ``collect`` unchanged (acting, stepping,
  the transition rules, the row layout) and returns the rows as a :class:`RecordedReplay`
  (picklable).
* :func:`fill_recorded_replay` lays the recordings side by side (recording ``r``'s cells after
  recording ``r - 1``'s in each row) and adds each row to the learner's buffer with the
  function ``collect`` adds with (``replay._add_replay_row``: ``add_replay_step``), so the
  callback, the logger, ``num_timesteps``, DQN's target updates and ``ep_info_buffer`` are the
  learner's.

The row keeping and :meth:`ReplayRecorder.record` are one private mixin (``_KeptRows``), which
:class:`~rlightning_pettingzoo.AECReplayRecorder` (``remote_aec_replay``) records with too.

So one recording fills the learner's buffer exactly as ``SharedReplayCollector.collect`` over
the recorder's copies fills it, with the same counters; several recordings' columns each as
the in-process collector over that recorder's copies, exploring on the learner's clock
(``row_width``; tests/ray/test_pz_replay.py), action noise included
(tests/ray/test_pz_replay_noise.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from stable_baselines3.common.noise import ActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.type_aliases import TrainFrequencyUnit
from stable_baselines3.common.utils import should_collect_more_steps

from rlightning.rules import check_count
from rlightning_pettingzoo._columns import OnePickle, Transition
from rlightning_pettingzoo._noise import base_noise
from rlightning_pettingzoo._sb3 import (
    adapter_for,
    refuse_episodic_columns,
    refuse_sequence_buffer,
    refuse_unapplied_wrappers,
)
from rlightning_pettingzoo.replay import SharedReplayCollector, _add_replay_row
from rlightning_sb3 import ActingReplica, ActingState

__all__ = [
    "RecordedReplay",
    "ReplayRecorder",
    "check_replay_model",
    "fill_recorded_replay",
    "replica_noise",
]


@dataclass(frozen=True)
class RecordedReplay(OnePickle):
    """One rollout of a :class:`ReplayRecorder`: its complete rows, in the order added.

    Attributes:
        rows: ``rows[k][c]``: the complete transition of the recorder's cell ``c`` in row
            ``k`` (``n_columns`` per row): the observation acted on, the policy's row
            (``action``, ``buffer_action``: numpy arrays as the adapter answered them), the
            reward summed up to the agent's next action, ``end`` (``"terminated"``,
            ``"truncated"`` or None), the next (or final) observation and the episode's
            ``{"r", "l", "t"}`` where it ended. Observations are numpy arrays (dicts of them
            for a Dict space), transposed where the model's env is a ``VecTransposeImage``.
        n_columns: The recorder's row width (its model's ``n_envs``).
        n_copies: The recorder's env copies.
        stored: Agent-steps recorded (``len(rows) * n_columns``).
        agent_returns: Per agent id, the returns of its last 100 finished episodes (all the
            recorder's copies, oldest first), after this rollout.
    """

    rows: list[list[Transition]]
    n_columns: int
    n_copies: int
    stored: int
    agent_returns: dict[Any, list[float]]


def check_replay_model(model: Any, caller: str, n_runners: int = 1) -> None:
    """Refuse a model a :class:`ReplayRecorder` and :func:`fill_recorded_replay` cannot serve.

    Checked before anything starts (no runner is built, no env stepped).

    Args:
        model: The learner's model.
        caller: Named in the messages.
        n_runners: The recorders whose rows are laid side by side.

    Returns:
        None; nothing is mutated.

    Raises:
        TypeError: ``model`` is not an off-policy SB3 model.
        ValueError: the buffer has ``optimize_memory_usage`` or is an ``NStepReplayBuffer`` /
            ``HerReplayBuffer`` (as ``SharedReplayCollector``);
            the model explores with gSDE (``use_sde=True``: the
            replica's noise matrix is not the learner's, which ``train`` resamples);
            ``train_freq`` counts episodes and ``n_runners > 1`` (a rollout ends at the row
            where the learner's buffer, all runners' cells together, completes the episodes:
            no runner can tell that row; SB3 allows episodic training with one env only), or
            counts episodes with ``n_envs > 1`` (one runner: SB3's one-env rule); or
            the model's env has VecEnv wrappers the collector does not apply.
    """
    if not isinstance(model, OffPolicyAlgorithm):
        raise TypeError(
            f"{caller} needs an off-policy SB3 model (DQN, SAC, TD3), got {type(model).__name__}"
        )
    refuse_sequence_buffer(model, caller)
    if getattr(model, "use_sde", False):
        raise ValueError(
            f"{caller} does not support gSDE (use_sde=True): the runners' replicas would "
            "explore with noise matrices of their own, never resampled where the learner "
            "resamples its own; build the model with use_sde=False"
        )
    train_freq: Any = model.train_freq  # a TrainFreq since _setup_model
    if train_freq.unit != TrainFrequencyUnit.STEP and n_runners > 1:
        raise ValueError(
            f"{caller} cannot split train_freq=({train_freq.frequency}, "
            f"{train_freq.unit.value!r}) (counted in episodes) over "
            f"{n_runners} runners: the rollout ends at the row where the learner's buffer, all "
            "runners' cells together, completes that many episodes, which no runner can tell "
            "(and SB3 trains per episode with one env only); use one runner, or a train_freq "
            "counted in steps"
        )
    refuse_episodic_columns(model, caller)
    refuse_unapplied_wrappers(model, caller)
    adapter_for(model)


def replica_noise(model: Any) -> ActionNoise | None:
    """The learner's base action noise, for a :class:`ReplayRecorder`'s replica to carry.

    ``model.action_noise`` unwrapped from the ``VectorizedActionNoise`` SB3's ``_setup_learn``
    wraps it in (``base_noise``), or itself; None without noise. Send it (a copy: pickled) and
    set it as the replica's ``action_noise`` before its :func:`rlightning_sb3.start_training`:
    the recorder's per-slot processes deep-copy it. SB3's ``save`` pickles the noise too, but
    its ``load`` drops, with only a warning, an object it cannot unpickle (the replica would
    explore without noise); sent apart, such a noise fails loudly where it is unpickled.

    Args:
        model: The learner's off-policy model.

    Returns:
        The base noise (the learner's own object: not copied; nothing is mutated), or None.

    Raises:
        Nothing: a model without an ``action_noise`` attribute gives None.
    """
    return base_noise(getattr(model, "action_noise", None))


class _ReplicaRollout:
    """A replica's rollout being recorded: its kept rows, its counters on the learner's clock.

    What a recorder's hand-over of a complete row does instead of adding it (shared by
    :class:`ReplayRecorder` and, once per group, ``GroupReplayRecorder``): the row is kept, the
    replica's counters advance as the learner's will when it adds the row
    (:meth:`rlightning_sb3.ActingReplica.advance` of ``row_width``: ``num_timesteps`` for the
    ``learning_starts`` warm-up, DQN's ``exploration_rate`` from SB3's schedule), and the
    rollout ends at the row where SB3's ``should_collect_more_steps(model.train_freq, rows,
    episodes)`` says stop (the rule :func:`rlightning_sb3.add_replay_step` ends one by; an
    episode ends at each cell whose agent ended).

    Args:
        model: The replica acting (an off-policy model; its weights and counters are replaced
            by :meth:`start` and advanced by :meth:`keep`; its buffer is never written).
        row_width: Agent-steps each kept row advances the counters by (the learner's
            ``n_envs``; checked by the caller as an int >= 1 before any env is built).

    Raises:
        What :class:`rlightning_sb3.ActingReplica` raises (gSDE).
    """

    def __init__(self, model: OffPolicyAlgorithm, row_width: int) -> None:
        self.model = model
        self.row_width = int(row_width)
        # the acting half of collect_rollouts' bookkeeping (rlightning_sb3): load and advance
        self._acting = ActingReplica(model)
        self._rows: list[list[Transition]] = []
        self._episodes = 0
        #: The learner's run of the last :meth:`start` (``ActingState.run_id``; None before one
        #: with a run id): the run the replica's action-noise processes reset on.
        self.learner_run: int | None = None
        #: The learner's latest resetting run of the last :meth:`start` (``ActingState
        #: .reset_run_id``; None before one with it): the run the recorder's copies reset on.
        self.learner_reset_run: int | None = None

    def start(self, state: ActingState) -> None:
        """Load the learner's ``state`` (weights, counters, run) and start an empty rollout.

        Raises:
            What :meth:`rlightning_sb3.ActingReplica.load` raises.
        """
        self._acting.load(state)
        if state.run_id is not None:
            self.learner_run = state.run_id
        if state.reset_run_id is not None:
            self.learner_reset_run = state.reset_run_id
        self._rows, self._episodes = [], 0

    def keep(self, row: list[Transition]) -> bool:
        """Keep one complete row, advance the counters by ``row_width``; True: the rollout ended.

        Mutates the model's ``num_timesteps`` (and DQN's ``exploration_rate``).
        """
        self._rows.append(row)
        self._acting.advance(self.row_width)
        self._episodes += sum(t.end is not None for t in row)
        train_freq: Any = self.model.train_freq
        return not should_collect_more_steps(train_freq, len(self._rows), self._episodes)

    def take(
        self, n_copies: int, stored: int, agent_returns: Mapping[Any, Iterable[float]]
    ) -> RecordedReplay:
        """The rows kept since :meth:`start`, as a :class:`RecordedReplay` (and forget them).

        Args:
            n_copies: The recorder's env copies.
            stored: The agent-steps recorded (the collector's ``collect()`` answer).
            agent_returns: Per agent id, its last finished episodes' returns (copied).
        """
        rows, self._rows = self._rows, []
        return RecordedReplay(
            rows=rows,
            n_columns=int(self.model.n_envs),
            n_copies=n_copies,
            stored=stored,
            agent_returns={agent: list(r) for agent, r in agent_returns.items()},
        )


class _KeptRows:
    """A replay collector whose hand-over of a complete row keeps it (mixed in first).

    Mixed into an in-process replay collector whose ``collect`` hands each complete row to
    ``_add`` (:class:`ReplayRecorder`, ``remote_aec_replay.AECReplayRecorder``): the row is
    kept by the recorder's :class:`_ReplicaRollout` (``_rollout``, built by the recorder's
    constructor), whose counters advance on the learner's clock, and :meth:`record` returns the
    rollout's rows.
    """

    _rollout: _ReplicaRollout

    def _add(self, row: list[Transition]) -> bool:
        return self._rollout.keep(row)  # kept for record(): the learner adds it

    def _reset_run_of(self, model: Any) -> int | None:
        """The learner's latest resetting run (the last record's ``ActingState.reset_run_id``).

        So the recorder's copies reset where the learner's ``start_training`` reset its env
        (``CopyBookkeeping._start_run``), as the in-process collector's do.

        Returns:
            The run id; before any :meth:`record` that carried one, the replica's own
            :func:`rlightning_sb3.training_reset_run_id`.
        """
        run = self._rollout.learner_reset_run
        return super()._reset_run_of(model) if run is None else run  # type: ignore[misc]

    def record(self, state: ActingState) -> RecordedReplay:
        """Load the learner's state, act and step one rollout as ``collect`` does; add nothing.

        Args:
            state: The learner's :func:`rlightning_sb3.acting_state` now: its weights,
                ``num_timesteps``, DQN's ``exploration_rate`` and ``total_timesteps``
                (:meth:`rlightning_sb3.ActingReplica.load`), and its ``run_id`` (with action
                noise, a new one resets every per-slot noise process before the rollout's
                first draw).

        Returns:
            The complete rows of the rollout (:class:`RecordedReplay`). The envs are stepped,
            the model's random draws made (torch's and numpy's global generators, the action
            space's; any action noise from numpy's) and its weights and counters replaced and
            advanced, any noise processes drawn and reset; its buffer is untouched.

        Raises:
            What :meth:`rlightning_sb3.ActingReplica.load` and the collector's ``collect``
            raise.
        """
        collector: Any = self
        self._rollout.start(state)  # collect() resets the noise processes on a new run
        stored = collector.collect()
        return self._rollout.take(len(collector._envs), stored, collector.agent_returns)


class ReplayRecorder(_KeptRows, SharedReplayCollector):
    """A :class:`~rlightning_pettingzoo.SharedReplayCollector` that keeps its rows unadded.

    Acting, stepping, the transition rules and the rows are ``SharedReplayCollector``'s; only
    the hand-over of a complete row differs: the row is kept for :meth:`record`, and the
    replica's counters are advanced as the learner's will be when it adds the row
    (:meth:`rlightning_sb3.ActingReplica.advance` of ``row_width``: ``num_timesteps`` for the
    ``learning_starts`` warm-up, DQN's ``exploration_rate`` from SB3's schedule), so that the
    rounds after it explore as the in-process collector's rounds after that row. The rollout
    ends at the row where SB3's ``should_collect_more_steps(model.train_freq, rows,
    episodes)`` says stop (the rule :func:`rlightning_sb3.add_replay_step` ends one by; an
    episode ends at each cell whose agent ended). Rows that do not fill before the rollout
    ends wait for the next :meth:`record`, as in process.

    With the replica's ``action_noise`` (TD3, DDPG, SAC: the learner's base noise, which SB3's
    ``save`` pickles with the model), the recorder owns ``SharedReplayCollector``'s per-slot
    processes from one :meth:`record` to the next (drawn from the process's numpy global
    generator, reset where an agent's episode ends), and resets them all when a record brings
    a new ``ActingState.run_id`` (the learner began a new ``learn()`` /
    :func:`rlightning_sb3.start_training`: ``_setup_learn``'s ``action_noise.reset()``), as the
    in-process collector resets them on its model's new run.

    Args:
        model: The replica acting (the learner's class, hyper-parameters and spaces, its
            ``n_envs`` the recorder's row width), given
            :func:`rlightning_sb3.start_training` (``collect`` refuses a model without one;
            its step budget is not read: :meth:`record` loads the learner's). Its buffer is
            never written.
        env_fns: One function per env copy, each returning a PettingZoo ``ParallelEnv``.
        seeds: The seed of each copy's first reset (None: no seed).
        row_width: Agent-steps each complete row advances the counters by: the learner's
            ``n_envs`` (all recorders' cells of a row together; None: ``model.n_envs``, one
            recorder).

    Raises:
        What ``SharedReplayCollector`` raises; TypeError or ValueError for a ``row_width``
        that is not an int >= 1; ValueError for a gSDE model (``ActingReplica``).
    """

    def __init__(
        self,
        model: OffPolicyAlgorithm,
        env_fns: Sequence[Callable[[], Any]],
        *,
        seeds: Sequence[int | None] | None = None,
        row_width: int | None = None,
    ) -> None:
        if row_width is not None:  # before any env is built
            check_count(row_width, "ReplayRecorder row_width", minimum=1)
        super().__init__(model, env_fns, seeds=seeds)
        self._rollout = _ReplicaRollout(
            model, int(model.n_envs) if row_width is None else row_width
        )

    def _noise_run(self, model: Any) -> int | None:
        """The learner's run (the last record's ``ActingState.run_id``), not the replica's.

        Returns:
            The run id; before any :meth:`record` (``collect`` called directly), the replica's
            own :func:`rlightning_sb3.training_run_id`.
        """
        run = self._rollout.learner_run
        return super()._noise_run(model) if run is None else run


def fill_recorded_replay(model: OffPolicyAlgorithm, recordings: Sequence[RecordedReplay]) -> int:
    """Add recorded rows, laid side by side, to ``model.replay_buffer`` as ``collect`` adds them.

    Row ``k`` of the learner is row ``k`` of every recording, recording ``r``'s cells after
    recording ``r - 1``'s (so recording ``r`` owns the buffer columns ``sum(n_columns before)
    ... + n_columns - 1``); each goes to :func:`rlightning_sb3.add_replay_step` by the function
    ``SharedReplayCollector.collect`` adds with (the terminal observation of an ended agent as
    its next observation, ``TimeLimit.truncated`` for a truncated one, the episode's info).

    Args:
        model: The learner's off-policy model, given :func:`rlightning_sb3.start_training`
            (``n_envs`` the recordings' columns together).
        recordings: The recordings, in column order, each of the same number of rows.

    Returns:
        The agent-steps stored (``n_envs`` per row), as ``SharedReplayCollector.collect``
        returns. The buffer and the model's counters (``num_timesteps``, DQN's exploration
        rate and target network, episode counts, ``ep_info_buffer``) are mutated; the callback
        and logger are called where ``collect_rollouts`` calls them.

    Raises:
        ValueError: no recordings, recordings of different row counts, or columns that are
            not the model's ``n_envs`` (each named; nothing added); what
            :func:`rlightning_sb3.add_replay_step` raises.
        RuntimeError: the learner's rollout of ``train_freq`` did not end exactly at the last
            row (its run was not at a rollout's start: steps were added to it by another loop
            since its last rollout ended); the rows up to there are added.
        rlightning_sb3.StopTraining: a callback stopped training (the rows before are added).
    """
    if not recordings:
        raise ValueError("fill_recorded_replay needs at least one recording")
    n_rows = len(recordings[0].rows)
    for r, recording in enumerate(recordings):
        if len(recording.rows) != n_rows:
            raise ValueError(
                f"recording {r} has {len(recording.rows)} rows, recording 0 has {n_rows}: the "
                "recorders' rollouts do not line up (each must end after train_freq rows)"
            )
        for k, row in enumerate(recording.rows):
            if len(row) != recording.n_columns:
                raise ValueError(
                    f"recording {r} row {k} has {len(row)} cells, its n_columns="
                    f"{recording.n_columns}"
                )
    buffer: Any = model.replay_buffer
    n_columns = int(buffer.n_envs)
    total = sum(recording.n_columns for recording in recordings)
    if total != n_columns:
        raise ValueError(
            f"the recordings have {[r.n_columns for r in recordings]} columns ({total} in all), "
            f"the model's buffer n_envs={n_columns}"
        )
    train_freq: Any = model.train_freq  # a TrainFreq since _setup_model
    stored = 0
    for k in range(n_rows):
        row = [t for recording in recordings for t in recording.rows[k]]
        ended = _add_replay_row(model, row)
        stored += n_columns
        if ended != (k == n_rows - 1):
            where = f"at row {k}" if ended else "not at the last row"
            raise RuntimeError(
                f"the learner's rollout of train_freq={train_freq.frequency} "
                f"{train_freq.unit.value}s ended {where} "
                f"of the {n_rows} recorded: its run was not at a rollout's start (another loop "
                "added steps to it since its last rollout ended)"
            )
    return stored
