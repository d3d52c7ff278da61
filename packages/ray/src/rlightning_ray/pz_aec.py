"""The turn-based (AEC) PettingZoo collector on Ray runners: self-play, frozen or random opponents.

:class:`RayAECRolloutCollector` is :class:`rlightning_pettingzoo.AECRolloutCollector` with its
env copies spread over Ray actors, built as :class:`rlightning_ray.pettingzoo.
RaySharedRolloutCollector` is (the learner's side is the same code, ``pz_rollout.
_RecordingCollector``): each runner holds a replica of the learner's model (SB3's own
``save``/``load``, ``n_envs`` set to the runner's share of the buffer columns) and an
:class:`rlightning_pettingzoo.AECRolloutRecorder` (the in-process AEC collector, its fill
replaced by keeping the packed rows) over its copies; each :meth:`collect
<RayAECRolloutCollector.collect>` publishes the learner's weights and its latest resetting run
(``rlightning_sb3.training_reset_run_id``), every runner records one rollout (the turns,
PettingZoo's dead steps, the opponents, the rollout's end and the copies' reset at a new
resetting run as ``AECRolloutCollector.collect`` takes them) and the learner fills its buffer
from them with :func:`rlightning_pettingzoo.fill_recorded` (``AECRolloutCollector``'s own fill).

Opponents travel as what builds them in the runner: ``"random"`` as is (drawn from a generator
per copy seeded with the copy's seed, as in process), a frozen SB3 model as its ``save`` bytes
and class, loaded once in each runner (before the acting seed is set: SB3's ``load`` seeds the
global generators) and never updated, its action space then the learner-side model's (``load``
reseeds the space with ``model.seed``; an off-policy opponent's warm-up and epsilon moves sample
it, in process from wherever the user's model left its generator). How the opponents travel and
load (``_travelling``, ``_OpponentLoading``) is shared with
:class:`rlightning_ray.pz_aec_replay.RayAECReplayCollector`.

With one runner its buffer equals the in-process collector's over the same copies, seeds,
opponents and torch seed, array for array; with several, runner ``r``'s columns equal the
in-process collector's over runner ``r``'s copies (tests/ray/test_pz_aec.py). A RecurrentPPO
records as it collects in process (``pz_rollout``): each runner's replica carries its trained
agents' LSTM states from one rollout to the next (tests/ray/test_pz_aec_recurrent.py), and so
does a RecurrentPPO opponent's loaded copy, for the seats it plays.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from rlightning_ray._pz_runners import saved_model

# pz_rollout first: without the [pettingzoo] extra it raises the ImportError that names it
from rlightning_ray.pz_rollout import SharedRolloutRunner, _RecordingCollector  # isort: skip
from rlightning_pettingzoo.remote_aec import AECRolloutRecorder, check_aec_model  # isort: skip

if TYPE_CHECKING:
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

__all__ = ["AECRolloutRunner", "RayAECRolloutCollector"]


def _travelling(opponents: Mapping[Any, Any] | None) -> dict[Any, Any]:
    """The opponents as they travel to the runners (what :class:`_OpponentLoading` loads).

    Args:
        opponents: ``{agent_id: "random" | frozen SB3 model}`` (already checked), or None.

    Returns:
        ``{agent_id: "random" | (model_class, saved, action_space)}``: each frozen model as
        its class, SB3's ``model.save`` bytes (:func:`rlightning_ray._pz_runners.saved_model`)
        and its action space (the object itself: Ray pickles it with its generator's state).
        Nothing is mutated.

    Raises:
        What ``model.save`` raises.
    """
    return {
        agent: opponent
        if isinstance(opponent, str)
        else (type(opponent), saved_model(opponent), opponent.action_space)
        for agent, opponent in (opponents or {}).items()
    }


class _OpponentLoading:
    """A runner whose recorder is given opponents, loaded in its process (mixed in first).

    Mixed into a runner class whose constructor builds its recorder with the keyword arguments
    of ``recorder_options`` (:class:`AECRolloutRunner`, ``pz_aec_replay.AECReplayRunner``);
    ``options`` is what :func:`_travelling` made of the learner's opponents.
    """

    def recorder_options(self, options: Any, device: str) -> dict[str, Any]:
        """The opponents, loaded in this process: ``{"opponents": {agent_id: opponent}}``.

        Args:
            options: ``{agent_id: "random" | (model_class, saved, action_space)}``.
            device: The opponents' torch device (the replica's).

        Returns:
            ``{"opponents": ...}``: ``"random"`` as is, each frozen model loaded with
            ``model_class.load(saved, device=device)`` (no env: it only acts), its
            ``action_space`` then the one sent: SB3's ``load`` reseeds the loaded space with
            ``model.seed`` (``_setup_model``'s ``set_random_seed``), where the opponent in the
            learner's process samples on from wherever its generator is (an off-policy model's
            warm-up and epsilon actions are ``action_space.sample()``).

        Raises:
            What ``model_class.load`` raises.
        """
        opponents: dict[Any, Any] = {}
        for agent, opponent in options.items():
            if isinstance(opponent, str):
                opponents[agent] = opponent
            else:
                model_class, saved, action_space = opponent
                loaded = model_class.load(io.BytesIO(saved), device=device)
                loaded.action_space = action_space  # its generator where the learner's is
                opponents[agent] = loaded
        return {"opponents": opponents}


class AECRolloutRunner(_OpponentLoading, SharedRolloutRunner):
    """A Ray actor's state: a replica of the learner's model and an :class:`AECRolloutRecorder`.

    Built in the actor's process by :class:`RayAECRolloutCollector` (not meant to be built by
    hand), with the arguments of :class:`~rlightning_ray.pz_rollout.SharedRolloutRunner`;
    ``options`` is ``{agent_id: "random" | (model_class, saved, action_space)}``: the
    opponents, each frozen model as SB3's ``model.save`` wrote it (bytes), its class and its
    action space as the learner's process holds it (its random generator's state included),
    loaded by :meth:`recorder_options <_OpponentLoading.recorder_options>`.

    Raises:
        What ``SharedRolloutRunner`` raises, what the opponents' ``model_class.load`` raises,
        and what :class:`AECRolloutRecorder` raises (agents, spaces, envs).
    """

    recorder_class: Any = AECRolloutRecorder


class RayAECRolloutCollector(_RecordingCollector):
    """Fill one shared on-policy model's buffer from turn-based env copies on Ray runners.

    :class:`rlightning_pettingzoo.AECRolloutCollector` over each runner's copies and columns:
    the copies (``env_fns``, or ``env_fn`` called once per copy) are split into ``n_runners``
    blocks of ``copies_per_runner``, runner ``r`` fills the learner's buffer columns ``r * m
    ... (r + 1) * m - 1`` with ``m = model.n_envs // n_runners``, exactly as
    :class:`rlightning_ray.pettingzoo.RaySharedRolloutCollector` splits a parallel env's copies
    (see the module docstring and ``docs/ray.md``, "PettingZoo"). Call
    :func:`rlightning_sb3.start_training` before, ``model.train()`` after each :meth:`collect`,
    and :meth:`close` at the end. Needs ``ray.init`` first; builds the runners at once and waits
    until they are built.

    Args:
        model: The learner's PPO, A2C, MaskablePPO or RecurrentPPO (each runner's replica
            carries its trained agents' LSTM states from one rollout to the next, stepped on
            each agent's own turns), built over a VecEnv of ``n_envs`` slots of one agent's
            spaces (it sizes the buffer; never stepped); ``n_envs`` a multiple of
            ``n_runners``.
        env_fns: One function per copy, each returning a PettingZoo ``AECEnv`` (called in the
            runners' processes).
        env_fn: Instead of ``env_fns``: one function for every copy.
        opponents: ``{agent_id: "random" | frozen SB3 model}`` for the agents that are not
            trained (None: self-play, every agent trained), as in ``AECRolloutCollector``. A
            model is saved here and loaded in each runner once (never updated: pass a frozen
            copy, not ``model``); not modified. A RecurrentPPO opponent keeps its LSTM state
            per (copy, agent) in its runner, across rollouts, as in process.
        n_runners, copies_per_runner, seeds, acting_seeds, num_cpus, device, timeout_s: As in
            :class:`rlightning_ray.pettingzoo.RaySharedRolloutCollector` (``seeds`` also seed
            each copy's random opponents, as in process).

    Raises:
        TypeError: ``model`` is not an on-policy SB3 model; ``opponents`` is not a mapping,
            or an entry is neither ``"random"`` nor an SB3 model (named by agent); and the
            argument errors of ``RaySharedRolloutCollector``.
        ValueError: an opponent is ``model`` itself; the model explores with gSDE or its env
            has wrappers the collector does not apply; and the argument errors of
            ``RaySharedRolloutCollector``.
        RuntimeError: Ray is not initialised, or a runner failed to build (named, the cause
            chained: e.g. an env that is no ``AECEnv``, an opponent's agent the env does not
            have, an opponent whose spaces do not fit its agent's), before any runner steps.
    """

    def __init__(
        self,
        model: OnPolicyAlgorithm,
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
        name = "RayAECRolloutCollector"
        check_aec_model(model, opponents, name)
        self._start(
            name,
            AECRolloutRunner,
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
