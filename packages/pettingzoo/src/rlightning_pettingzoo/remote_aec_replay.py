"""The AEC (turn-based) replay collector in two halves: record rows in one process, add in another.

As :mod:`rlightning_pettingzoo.remote_replay` splits
:class:`~rlightning_pettingzoo.SharedReplayCollector`, this splits
:class:`~rlightning_pettingzoo.AECReplayCollector` for acting away from the learner (a Ray
runner holding a replica of the model, ``rlightning_ray.pettingzoo.RayAECReplayCollector``),
with the very same code:

* :class:`AECReplayRecorder` is an ``AECReplayCollector`` whose hand-over of a complete row
  (``_add``) is replaced: the row is kept, and the replica's counters advance as the learner's
  will when it adds that row (``remote_replay._ReplicaRollout``, the one
  :class:`~rlightning_pettingzoo.ReplayRecorder` keeps its rows with:
  :meth:`rlightning_sb3.ActingReplica.advance` of the learner's ``n_envs``, and the rollout's
  end where SB3's ``should_collect_more_steps`` says). :meth:`AECReplayRecorder.record` takes
  the learner's :class:`rlightning_sb3.ActingState` and runs ``collect`` unchanged (the turns,
  PettingZoo's dead steps, the opponents, the transitions closed at each agent's next
  selection, the rows of ``n_envs`` cells, the transitions that wait for the next rollout);
* :func:`~rlightning_pettingzoo.fill_recorded_replay` adds the recorded rows to the learner's
  buffer by the function ``AECReplayCollector.collect`` adds with (``replay._add_replay_row``:
  :func:`rlightning_sb3.add_replay_step`).

:func:`check_aec_replay_model` is what the learner checks of the model and the opponents before
any runner is built.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

from rlightning.rules import check_count
from rlightning_pettingzoo.aec_collector import Opponent
from rlightning_pettingzoo.aec_replay import AECReplayCollector, _refuse_action_noise
from rlightning_pettingzoo.remote_aec import _check_opponent_entries
from rlightning_pettingzoo.remote_replay import _KeptRows, _ReplicaRollout, check_replay_model

__all__ = ["AECReplayRecorder", "check_aec_replay_model"]


class AECReplayRecorder(_KeptRows, AECReplayCollector):
    """An :class:`~rlightning_pettingzoo.AECReplayCollector` that keeps its rows unadded.

    The turns, dead steps, opponents, transition rules and rows are ``AECReplayCollector``'s;
    only the hand-over of a complete row differs: the row is kept for :meth:`record`, and the
    replica's counters are advanced as the learner's will be when it adds the row
    (:meth:`rlightning_sb3.ActingReplica.advance` of ``row_width``: ``num_timesteps`` for the
    ``learning_starts`` warm-up, DQN's ``exploration_rate`` from SB3's schedule), so that the
    rounds after it explore as the in-process collector's rounds after that row. The rollout
    ends at the row where SB3's ``should_collect_more_steps(model.train_freq, rows,
    episodes)`` says stop (the rule :func:`rlightning_sb3.add_replay_step` ends one by).
    Transitions still open, and complete ones that do not fill a row, wait for the next
    :meth:`record`, as in process; the copies pause at their turns.

    Args:
        model: The replica acting (the learner's class, hyper-parameters and spaces, its
            ``n_envs`` the recorder's row width), given
            :func:`rlightning_sb3.start_training` (``collect`` refuses a model without one;
            its step budget is not read: :meth:`record` loads the learner's). Its buffer is
            never written.
        env_fns: One function per env copy, each returning a PettingZoo ``AECEnv``.
        opponents: As in ``AECReplayCollector`` (``"random"`` or frozen feed-forward SB3
            models, built in this process).
        seeds: The seed of each copy's first reset and of its random opponents (None: no
            seed).
        row_width: Agent-steps each complete row advances the counters by: the learner's
            ``n_envs`` (all recorders' cells of a row together; None: ``model.n_envs``, one
            recorder).

    Raises:
        What ``AECReplayCollector`` raises; TypeError or ValueError for a ``row_width`` that
        is not an int >= 1 (before any env is built); ValueError for a gSDE model
        (``ActingReplica``).
    """

    def __init__(
        self,
        model: OffPolicyAlgorithm,
        env_fns: Sequence[Callable[[], Any]],
        *,
        opponents: Mapping[Any, Opponent] | None = None,
        seeds: Sequence[int | None] | None = None,
        row_width: int | None = None,
    ) -> None:
        if row_width is not None:  # before any env is built
            check_count(row_width, "AECReplayRecorder row_width", minimum=1)
        super().__init__(model, env_fns, opponents=opponents, seeds=seeds)
        self._rollout = _ReplicaRollout(
            model, int(model.n_envs) if row_width is None else row_width
        )


def check_aec_replay_model(model: Any, opponents: Any, caller: str, n_runners: int = 1) -> None:
    """Refuse a model or opponents an :class:`AECReplayRecorder` could not record with.

    What can be checked without an env, before anything starts: the model as
    :func:`~rlightning_pettingzoo.check_replay_model` checks it (off-policy, no
    ``optimize_memory_usage``, no gSDE, ``train_freq`` in steps over several runners, no
    unapplied VecEnv wrappers), no ``action_noise`` (as ``AECReplayCollector``); ``opponents``
    a mapping whose entries are ``"random"`` or frozen feed-forward SB3 models other than
    ``model`` (each as ``AECReplayCollector`` checks it, as
    :func:`~rlightning_pettingzoo.check_aec_model` does). The opponents' agents and spaces are
    checked against the envs where the recorder is built.

    Args:
        model: The learner's model.
        opponents: ``{agent_id: opponent}`` or None.
        caller: Named in the messages.
        n_runners: The recorders whose rows are laid side by side.

    Returns:
        None; nothing is mutated.

    Raises:
        TypeError: ``model`` is not an off-policy SB3 model; ``opponents`` is not a mapping;
            an entry is a string other than ``"random"``, not an SB3 model, or a recurrent
            model (each named by agent).
        ValueError: what ``check_replay_model`` raises; the model has an ``action_noise``; an
            opponent is ``model`` itself.
    """
    check_replay_model(model, caller, n_runners)
    _refuse_action_noise(model, caller)
    _check_opponent_entries(model, opponents, caller)
