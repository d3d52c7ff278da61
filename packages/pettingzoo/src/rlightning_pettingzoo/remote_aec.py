"""The AEC (turn-based) collector split in two: record a rollout in one process, fill in another.

As :mod:`rlightning_pettingzoo.remote` splits the shared parallel collector, this splits
:class:`~rlightning_pettingzoo.AECRolloutCollector` for acting away from the learner (a Ray
runner holding a replica of the model, ``rlightning_ray.pz_aec.RayAECRolloutCollector``), with
the very same code:

* :class:`AECRolloutRecorder` is an ``AECRolloutCollector`` whose fill is replaced by keeping
  the packed rows: :meth:`AECRolloutRecorder.record` runs ``collect`` unchanged (the turns,
  PettingZoo's dead steps, the opponents, the rollout's end, the column layout) over the
  replica's buffer shape and returns them as a :class:`~rlightning_pettingzoo.RecordedRollout`;
* :func:`~rlightning_pettingzoo.fill_recorded` fills the learner's buffer from them, by the
  function ``AECRolloutCollector.collect`` fills with (``_fill_rollout``).

:func:`check_aec_model` is what the learner checks of the model and the opponents before any
runner is built.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlightning_pettingzoo.aec_collector import AECRolloutCollector, _check_opponent
from rlightning_pettingzoo.remote import _Recording, check_rollout_model

__all__ = ["AECRolloutRecorder", "check_aec_model"]


class AECRolloutRecorder(_Recording, AECRolloutCollector):
    """An :class:`~rlightning_pettingzoo.AECRolloutCollector` that keeps its rows unfilled.

    :meth:`record` runs ``collect`` and returns the rows it packed (a
    :class:`~rlightning_pettingzoo.RecordedRollout`).

    Args:
        model: The replica acting (its ``n_steps`` and ``n_envs`` shape the rollout; its
            buffer is never written).
        env_fns: One function per env copy, each returning a PettingZoo ``AECEnv``.
        opponents: As in ``AECRolloutCollector`` (``"random"`` or frozen SB3 models, a
            RecurrentPPO included, built in this process).
        seeds: The seed of each copy's first reset and of its random opponents (None: no
            seed).

    Raises:
        What ``AECRolloutCollector`` raises.
    """


def check_aec_model(model: Any, opponents: Any, caller: str) -> None:
    """Refuse a model or opponents an :class:`AECRolloutRecorder` could not record with.

    What can be checked without an env, before anything starts: the model as
    :func:`~rlightning_pettingzoo.check_rollout_model` checks it (a RecurrentPPO is
    accepted: the recorder's replica carries each agent's LSTM state from one rollout to the
    next, as :class:`~rlightning_pettingzoo.RolloutRecorder`'s does); ``opponents`` a mapping
    whose entries are ``"random"`` or frozen SB3 models other than ``model`` (each entry as
    ``AECRolloutCollector`` checks it; a RecurrentPPO opponent is accepted: the recorder keeps
    its LSTM state per (copy, agent) in the runner's process, across rollouts). The opponents'
    agents and spaces are checked against the envs where the recorder is built.

    Args:
        model: The learner's model.
        opponents: ``{agent_id: opponent}`` or None.
        caller: Named in the messages.

    Returns:
        None; nothing is mutated.

    Raises:
        TypeError: ``model`` is not an on-policy SB3 model; ``opponents`` is not a mapping;
            an entry is a string other than ``"random"`` or not an SB3 model (each named by
            agent).
        ValueError: what ``check_rollout_model`` raises; an opponent is ``model`` itself.
    """
    check_rollout_model(model, caller)
    _check_opponent_entries(model, opponents, caller)


def _check_opponent_entries(model: Any, opponents: Any, caller: str) -> None:
    """Refuse ``opponents`` that are not a mapping of ``"random"`` or frozen SB3 models.

    What :func:`check_aec_model` (and ``remote_aec_replay.check_aec_replay_model``) checks of
    the opponents before any runner is built: each entry as ``AECRolloutCollector`` checks it
    (``aec_collector._check_opponent``).

    Raises:
        TypeError: ``opponents`` is neither None nor a mapping; what ``_check_opponent``
            raises (named by agent).
        ValueError: what ``_check_opponent`` raises (an opponent is ``model`` itself).
    """
    if opponents is None:
        return
    if not isinstance(opponents, Mapping):
        raise TypeError(
            f"{caller}: opponents must be a mapping of agent id to 'random' or a frozen SB3 "
            f"model, got {type(opponents).__name__}"
        )
    for agent, opponent in opponents.items():
        _check_opponent(agent, opponent, model, caller)
