"""One shared DQN on turn-based (AEC) PettingZoo envs, its env copies on Ray runners.

:class:`RayAECReplayCollector` is :class:`rlightning_pettingzoo.AECReplayCollector` with its
env copies spread over Ray actors, built from the two Ray collectors it combines; nothing of
PettingZoo's or SB3's rules is written here again:

* the learner's side is :class:`rlightning_ray.pettingzoo.RaySharedReplayCollector`'s
  (``pz_replay._ReplayRecordingCollector``): each :meth:`collect
  <RayAECReplayCollector.collect>` publishes the learner's :func:`rlightning_sb3.acting_state`
  (weights, ``num_timesteps``, DQN's ``exploration_rate``, the budget), every runner records one
  rollout of ``train_freq`` rows, and the learner adds row ``k`` of every runner side by side as
  its row ``k`` (:func:`rlightning_pettingzoo.fill_recorded_replay`: the in-process collector's
  own hand-over, ``rlightning_sb3.add_replay_step``), so callbacks, the logger,
  ``num_timesteps``, DQN's target updates and ``ep_info_buffer`` are the learner's;
* each runner is ``RaySharedReplayCollector``'s (an off-policy replica of the learner's model
  with the runner's share of its columns, SB3's own ``save``/``load``), recording with an
  :class:`rlightning_pettingzoo.AECReplayRecorder` (the in-process AEC replay collector, its
  hand-over of a complete row replaced by keeping it, the replica's counters advanced on the
  learner's clock) instead of a ``ReplayRecorder``;
* the opponents travel and are loaded as :class:`rlightning_ray.pettingzoo.
  RayAECRolloutCollector`'s (``pz_aec``): ``"random"`` as is, a frozen SB3 model as its save
  bytes, class and action space, loaded once in each runner before the acting seed is set.

With one runner its buffer and counters equal the in-process collector's over the same copies,
seeds, opponents and acting seed, array for array; with several, runner ``r``'s columns equal
the in-process collector's over runner ``r``'s copies exploring on the learner's clock
(tests/ray/test_pz_aec_replay.py; ``docs/ray.md``, "PettingZoo").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlightning.rules import check_count

# pz_replay first: without the [pettingzoo] extra it raises the ImportError that names it
from rlightning_ray.pz_replay import SharedReplayRunner, _ReplayRecordingCollector  # isort: skip
from rlightning_ray.pz_aec import _OpponentLoading, _travelling  # isort: skip
from rlightning_pettingzoo.remote_aec_replay import (  # isort: skip
    AECReplayRecorder,
    check_aec_replay_model,
)

if TYPE_CHECKING:
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

__all__ = ["AECReplayRunner", "RayAECReplayCollector"]


class AECReplayRunner(_OpponentLoading, SharedReplayRunner):
    """A Ray actor's state: an off-policy replica of the learner's model, an AECReplayRecorder.

    Built in the actor's process by :class:`RayAECReplayCollector` (not meant to be built by
    hand), with the arguments of :class:`~rlightning_ray.pz_replay.SharedReplayRunner` (its
    ``noise`` always None: the AEC replay collector refuses ``action_noise``); ``options`` is
    ``{agent_id: "random" | (model_class, saved, action_space)}``: the opponents, each frozen
    model as SB3's ``model.save`` wrote it (bytes), its class and its action space as the
    learner's process holds it, loaded in this process before the acting seed is set
    (``pz_aec._OpponentLoading.recorder_options``, as the on-policy AEC runner loads them).

    Raises:
        What ``SharedReplayRunner`` raises, what the opponents' ``model_class.load`` raises,
        and what :class:`rlightning_pettingzoo.AECReplayRecorder` raises (agents, spaces,
        envs).
    """

    recorder_class: Any = AECReplayRecorder


class RayAECReplayCollector(_ReplayRecordingCollector):
    """Fill one shared off-policy model's replay buffer from turn-based env copies on Ray runners.

    :class:`rlightning_pettingzoo.AECReplayCollector` over each runner's copies and columns:
    the copies (``env_fns``, or ``env_fn`` called once per copy) are split into ``n_runners``
    blocks of ``copies_per_runner``; runner ``r`` fills cells ``r * m ... (r + 1) * m - 1`` of
    each row the learner adds (its buffer columns), with ``m = model.n_envs // n_runners``,
    exactly as :class:`rlightning_ray.pettingzoo.RaySharedReplayCollector` splits a parallel
    env's copies. Each :meth:`collect` is one rollout of ``model.train_freq``: every runner
    records ``train_freq`` rows (its copies' trained agents' transitions, each closed at the
    agent's next selection or dead step, in rows of ``m`` cells), the learner adds row ``k`` of
    every runner as its row ``k``. Exploration follows the learner's clock: each runner starts
    a rollout from the learner's ``num_timesteps`` and ``exploration_rate`` and advances them by
    the learner's ``n_envs`` per row it completes (with one runner: exactly the in-process
    collector's). Transitions still open, or too few to fill a row, wait in their runner for
    the next :meth:`collect`, as in process. Call :func:`rlightning_sb3.start_training`
    before, train after each :meth:`collect` as ``learn()`` does (``if model.num_timesteps >
    model.learning_starts: model.train(...)``), and :meth:`close` at the end. Needs
    ``ray.init`` first; builds the runners at once and waits until they are built.

    Args:
        model: The learner's DQN (or other discrete-action ``OffPolicyAlgorithm`` without
            ``action_noise``), built over a VecEnv of ``n_envs`` slots of one agent's spaces
            (it sizes the buffer; never stepped); ``n_envs`` a multiple of ``n_runners``.
        env_fns: One function per copy, each returning a PettingZoo ``AECEnv`` (called in the
            runners' processes).
        env_fn: Instead of ``env_fns``: one function for every copy.
        opponents: ``{agent_id: "random" | frozen SB3 model}`` for the agents that are not
            trained (None: self-play, every agent trained), as in ``AECReplayCollector``. A
            model is saved here and loaded in each runner once (never updated: pass a frozen
            copy, not ``model``); not modified.
        n_runners, copies_per_runner, seeds, acting_seeds, num_cpus, device, timeout_s: As in
            :class:`rlightning_ray.pettingzoo.RaySharedReplayCollector` (``seeds`` also seed
            each copy's random opponents, as in process; ``acting_seeds`` are SB3's
            ``replica.set_random_seed``: the global generators and the replica's action space,
            which DQN's warm-up and epsilon moves sample).

    Raises:
        TypeError: ``model`` is not an off-policy SB3 model; ``opponents`` is not a mapping,
            or an entry is neither ``"random"`` nor an SB3 model, or is a recurrent model
            (named by agent); and the argument errors of ``RaySharedReplayCollector``.
        ValueError: what :func:`rlightning_pettingzoo.check_aec_replay_model` raises
            (``optimize_memory_usage``, gSDE, ``action_noise``, ``train_freq`` counted in
            episodes over several runners, unapplied VecEnv wrappers, an opponent that is
            ``model`` itself); and the argument errors of ``RaySharedReplayCollector``.
        RuntimeError: Ray is not initialised, or a runner failed to build (named, the cause
            chained: e.g. an env that is no ``AECEnv``, an opponent's agent the env does not
            have, an opponent whose spaces do not fit its agent's), before any runner steps.
    """

    def __init__(
        self,
        model: OffPolicyAlgorithm,
        env_fns: Sequence[Callable[[], Any]] | None = None,
        *,
        env_fn: Callable[[], Any] | None = None,
        opponents: Mapping[Any, Any] | None = None,
        n_runners: int = 1,
        copies_per_runner: int | None = None,
        seeds: Sequence[int | None] | None = None,
        acting_seeds: Sequence[int | None] | None = None,
        num_cpus: float = 1,
        device: str = "cpu",
        timeout_s: float | None = None,
    ) -> None:
        name = "RayAECReplayCollector"
        check_count(n_runners, f"{name} n_runners", minimum=1)
        check_aec_replay_model(model, opponents, name, n_runners)
        self._start(
            name,
            AECReplayRunner,
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
            _travelling(opponents),
        )
