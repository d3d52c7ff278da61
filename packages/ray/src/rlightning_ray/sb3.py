"""Stable-Baselines3 on Ray: a batch policy for the server and a rollout filled from fragments.

Needs the ``[sb3]`` extra (``pip install "rlightning-ray[sb3]"``). SB3's semantics stay in
``rlightning_sb3``: the server answers through :meth:`rlightning_sb3.SB3PolicyAdapter.act` and the
driver fills the model's ``RolloutBuffer`` with :func:`rlightning_sb3.add_rollout_step` and
:func:`rlightning_sb3.finish_rollout`, as SB3's ``OnPolicyAlgorithm.collect_rollouts`` does, or an
off-policy model's ``ReplayBuffer`` with :func:`rlightning_sb3.add_replay_step`, as
``OffPolicyAlgorithm.collect_rollouts`` does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlightning import PolicyResponse, ResponseBatch
from rlightning_ray._rows import concat_observations
from rlightning_ray.collector import Collector
from rlightning_ray.runner import Fragment

try:
    import torch
    from gymnasium import spaces
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.noise import ActionNoise, VectorizedActionNoise
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
    from stable_baselines3.common.type_aliases import TrainFrequencyUnit
    from stable_baselines3.common.utils import set_random_seed

    from rlightning_sb3 import SB3PolicyAdapter, add_replay_step, add_rollout_step, finish_rollout
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f'rlightning_ray.sb3 needs the [sb3] extra: pip install "rlightning-ray[sb3]" ({exc})'
    ) from exc

__all__ = [
    "ActingState",
    "SB3BatchPolicy",
    "acting_state",
    "collect_replay",
    "collect_rollout",
    "policy_weights",
]


@dataclass(frozen=True)
class ActingState:
    """What an off-policy model's exploration reads besides its weights, from the learner.

    ``OffPolicyAlgorithm._sample_action`` samples the action space while ``num_timesteps <
    learning_starts``, and DQN's ``predict`` acts at random with probability
    ``exploration_rate``: both are the learner's counters, which a server's copy of the model
    only knows through a publish (:func:`acting_state`). Between publishes the server advances
    them itself, as ``collect_rollouts`` does after each step (:class:`SB3BatchPolicy`), which
    needs the learner's ``total_timesteps`` (DQN's schedule reads the progress remaining).

    Attributes:
        policy: ``policy.state_dict()`` CPU copies (as :func:`policy_weights`).
        num_timesteps: The learner's ``model.num_timesteps`` at the publish.
        exploration_rate: DQN's ``model.exploration_rate`` at the publish (None for models
            without one).
        total_timesteps: The learner's ``model._total_timesteps`` (what ``_setup_learn``, hence
            :func:`rlightning_sb3.start_training`, set; the denominator of SB3's
            ``_current_progress_remaining``), or None (then the server keeps the published
            ``exploration_rate`` until the next publish).
    """

    policy: dict[str, torch.Tensor]
    num_timesteps: int
    exploration_rate: float | None = None
    total_timesteps: int | None = None


def acting_state(model: BaseAlgorithm) -> ActingState:
    """Weights and exploration counters of an off-policy model to publish (:class:`ActingState`).

    Returns:
        An :class:`ActingState` of ``model`` now (CPU copies; the learner may train on).
    """
    rate = getattr(model, "exploration_rate", None)
    total = getattr(model, "_total_timesteps", 0)
    return ActingState(
        policy_weights(model),
        int(model.num_timesteps),
        None if rate is None else float(rate),
        int(total) if total else None,
    )


class SB3BatchPolicy:
    """A :class:`~rlightning_ray.BatchPolicy` running an SB3 model through ``SB3PolicyAdapter``.

    Built in the server's process by a factory, e.g.
    ``lambda: SB3BatchPolicy(lambda: PPO("MlpPolicy", env, device="cpu"))``.

    An off-policy model that explores also gets, between publishes, what
    ``OffPolicyAlgorithm.collect_rollouts`` does to the acting side around each step:

    * the action-noise process of each env whose ``episode_start`` is True is reset before its
      next action is drawn (``collect_rollouts`` calls ``action_noise.reset(indices=[idx])``
      after the step that ended env ``idx``'s episode). The env's index is the one
      ``SB3PolicyAdapter.act`` gave it: its row in the first exploring call (as ``act``
      documents); on that first call every process is fresh and none is reset, as SB3's first
      step resets none;
    * after each batch ``num_timesteps`` grows by the batch's rows (the learner's grows by
      ``n_envs`` per step), so that the ``learning_starts`` warm-up ends at the same step on
      both sides; and, for a model with an ``exploration_schedule`` (DQN, QR-DQN) once an
      :class:`ActingState` with ``total_timesteps`` was published, ``exploration_rate`` becomes
      ``exploration_schedule`` of the new progress remaining, computed by SB3's own
      ``_update_current_progress_remaining``, as ``DQN._on_step`` sets it after each step.

    With a fixed batch composition (the server's ``order=``, all envs in every batch) these
    equal SB3's ``collect_rollouts`` step for step.

    Args:
        make_model: Builds the SB3 model (its spaces must be the runners' envs' spaces; its
            weights are replaced by each publish).
        seed: When given, ``stable_baselines3.common.utils.set_random_seed(seed)`` runs after the
            model is built, so the server's random draws (torch's global RNG, which
            ``collect_rollouts`` samples from, and numpy's, which the action noise draws from)
            start from a known state.
        explore: ``act``'s ``explore`` (False: deterministic actions).
    """

    def __init__(
        self,
        make_model: Callable[[], BaseAlgorithm],
        *,
        seed: int | None = None,
        explore: bool = True,
    ) -> None:
        self.model = make_model()
        self.adapter = SB3PolicyAdapter(self.model)
        self.explore = explore
        if seed is not None:
            set_random_seed(seed)
        self._off_policy = isinstance(self.model, OffPolicyAlgorithm)
        self._total_timesteps: int | None = None
        # The env ids of the first exploring call that drew action noise: env id -> the index
        # of its process in ``model.action_noise`` (SB3PolicyAdapter.act's documented rule).
        self._noise_index: dict[str, int] | None = None

    def __call__(
        self,
        observation: Any,
        env_ids: list[str],
        episode_start: np.ndarray,
        ts_env_sent_ns: list[int],
    ) -> ResponseBatch[PolicyResponse]:
        """One ``SB3PolicyAdapter.act`` call for the whole batch (see its docstring).

        Off-policy and exploring, first resets the action noise of the envs starting an
        episode, and afterwards advances ``num_timesteps`` and DQN's ``exploration_rate`` (see
        the class docstring). Mutates the model (those counters, the noise) and the adapter.
        """
        acting = self._off_policy and self.explore
        noisy = (
            acting
            and self.model.action_noise is not None
            and isinstance(self.model.action_space, spaces.Box)
        )
        noise, index = self.model.action_noise, self._noise_index
        if noisy and noise is not None and index is not None:
            _reset_noise(noise, index, env_ids, episode_start)
        answer = self.adapter.act(
            observation,
            env_ids,
            episode_start=episode_start,
            explore=self.explore,
            ts_env_sent_ns=ts_env_sent_ns,
        )
        if noisy and self._noise_index is None:
            self._noise_index = {env_id: i for i, env_id in enumerate(env_ids)}
        if acting:
            self._advance(len(env_ids))
        return answer

    def _advance(self, rows: int) -> None:
        """After a batch of ``rows`` rows: ``collect_rollouts``' step counters (class docstring)."""
        model: Any = self.model
        model.num_timesteps += rows
        schedule = getattr(model, "exploration_schedule", None)
        if self._total_timesteps is not None and schedule is not None:
            model._update_current_progress_remaining(model.num_timesteps, self._total_timesteps)
            model.exploration_rate = float(schedule(model._current_progress_remaining))

    def set_weights(self, weights: dict[str, torch.Tensor] | ActingState) -> None:
        """Load published weights into the model's policy.

        Args:
            weights: A ``policy.state_dict()`` (:func:`policy_weights`), or an
                :class:`ActingState` (:func:`acting_state`), whose ``num_timesteps``,
                ``exploration_rate`` (when not None) and ``total_timesteps`` (when not None;
                the server then advances ``exploration_rate`` itself until the next publish)
                are also taken.

        Raises:
            TypeError: plain weights for an exploring off-policy model whose exploration reads
                the learner's counters (``learning_starts`` > 0, or DQN's ``exploration_rate``):
                without an :class:`ActingState` the server would explore with its own stale
                counters (e.g. DQN's epsilon of a fresh model), silently.
            RuntimeError: ``load_state_dict`` refused the weights (missing or unexpected keys,
                shapes of another architecture); the model keeps its previous weights and
                counters (torch copies the matching tensors before raising: they are put back).
        """
        if isinstance(weights, ActingState):
            self._load(weights.policy)
            self.model.num_timesteps = weights.num_timesteps
            if weights.exploration_rate is not None:
                # DQN's attribute; mypy sees BaseAlgorithm.
                self.model.exploration_rate = weights.exploration_rate  # type: ignore[attr-defined]
            if weights.total_timesteps is not None:
                self._total_timesteps = weights.total_timesteps
            return
        model: Any = self.model
        schedule = getattr(model, "exploration_schedule", None)
        if self._off_policy and self.explore and (schedule is not None or model.learning_starts):
            raise TypeError(
                f"{type(model).__name__} explores from the learner's state (learning_starts="
                f"{model.learning_starts}"
                + (", DQN's exploration_rate" if schedule is not None else "")
                + f") but the publish carried only the weights ({type(weights).__name__} of "
                f"{len(weights)} tensors): publish rlightning_ray.sb3.acting_state(model), not "
                "policy_weights(model), or serve it with explore=False"
            )
        self._load(weights)

    def _load(self, state: dict[str, torch.Tensor]) -> None:
        """``policy.load_state_dict(state)``, all or nothing (see :meth:`set_weights`)."""
        policy = self.model.policy
        saved = {k: v.detach().clone() for k, v in policy.state_dict().items()}
        try:
            policy.load_state_dict(state)
        except Exception:
            policy.load_state_dict(saved)
            raise


def _reset_noise(
    noise: ActionNoise, index: dict[str, int], env_ids: list[str], episode_start: np.ndarray
) -> None:
    """Reset the noise process of each env of ``env_ids`` whose ``episode_start`` is True."""
    starts = [e for e, s in zip(env_ids, np.asarray(episode_start, bool), strict=True) if s]
    if not starts:
        return
    if isinstance(noise, VectorizedActionNoise):
        # an id the noise has no process for is left to act(), which names it
        noise.reset(indices=[index[e] for e in starts if e in index])
    else:  # one env: SB3 resets the noise itself
        noise.reset()


def policy_weights(model: BaseAlgorithm) -> dict[str, torch.Tensor]:
    """A CPU copy of ``model.policy.state_dict()`` for :func:`~rlightning_ray.publish_weights`.

    Returns:
        ``{name: tensor}``, detached CPU copies (the learner may train on while they travel).
    """
    return {k: v.detach().to("cpu", copy=True) for k, v in model.policy.state_dict().items()}


def collect_rollout(
    model: OnPolicyAlgorithm, collector: Collector, *, current_version: int | None = None
) -> list[Fragment]:
    """Fill ``model.rollout_buffer`` with one rollout from the runners, as ``collect_rollouts``.

    Asks every runner for ``model.n_steps`` steps, then adds step ``t`` of all runners (columns
    in runner order: :attr:`Collector.env_ids`) with :func:`rlightning_sb3.add_rollout_step`
    (truncation bootstrap, ``num_timesteps``, episode infos, the callback of
    :func:`rlightning_sb3.start_training` with ``new_obs``: the next step's observation, as
    ``env.step`` returned it) and finishes with
    :func:`rlightning_sb3.finish_rollout` (returns and advantages). The model must have been
    prepared with :func:`rlightning_sb3.start_training` and built with a VecEnv of
    ``len(collector.env_ids)`` envs (its spaces and ``n_envs`` size the buffer; it is never
    stepped here).

    Args:
        model: An on-policy SB3 model (PPO, A2C).
        collector: The runners' collector.
        current_version: The policy version published for this rollout (answers older than
            ``current_version - collector.max_staleness`` are refused).

    Returns:
        The fragments, in runner order (``collector.latency()`` has their hops). Mutates the
        model's buffer and bookkeeping as the helpers document.

    Raises:
        ValueError: the model's ``n_envs`` is not the runners' env count, or a helper refuses a
            step (its message names the env).
    """
    env_ids = collector.env_ids
    if model.n_envs != len(env_ids):
        raise ValueError(
            f"the model has n_envs={model.n_envs} but the runners host {len(env_ids)} envs "
            f"{env_ids}: build the model with a VecEnv of {len(env_ids)} envs"
        )
    fragments = collector.sample(model.n_steps, current_version)
    for t in range(model.n_steps):
        responses = [r for f in fragments for r in ResponseBatch(f.answers[t])]
        after = [  # what env.step returned (reset where done): the callback's new_obs
            f.observations[t + 1] if t + 1 < model.n_steps else f.last_observation
            for f in fragments
        ]
        add_rollout_step(
            model,
            concat_observations([f.observations[t] for f in fragments]),
            responses,
            np.concatenate([f.rewards[t] for f in fragments]),
            np.concatenate([f.dones[t] for f in fragments]),
            [info for f in fragments for info in f.infos[t]],
            env_ids=env_ids,
            new_observation=concat_observations(after),
        )
    finish_rollout(
        model,
        concat_observations([f.last_observation for f in fragments]),
        np.concatenate([f.last_dones for f in fragments]),
        env_ids=env_ids,
    )
    return fragments


def collect_replay(
    model: OffPolicyAlgorithm,
    collector: Collector,
    *,
    n_steps: int | None = None,
    current_version: int | None = None,
) -> tuple[bool, list[Fragment]]:
    """Add ``n_steps`` steps of every runner to ``model.replay_buffer``, as ``collect_rollouts``.

    Asks every runner for ``n_steps`` steps, then adds step ``t`` of all runners (columns in
    runner order: :attr:`Collector.env_ids`) with :func:`rlightning_sb3.add_replay_step`: the
    terminal observation of a finished episode as its next observation, ``TimeLimit.truncated``
    as the buffer's timeout, ``num_timesteps``, episode infos, DQN's ``_on_step`` and the
    action-noise resets, as ``OffPolicyAlgorithm.collect_rollouts`` and ``_store_transition``.
    Exploration (warm-up sampling before ``learning_starts``, DQN's epsilon, the action noise,
    one process per env) is drawn on the server by :meth:`rlightning_sb3.SB3PolicyAdapter.act`:
    publish :func:`acting_state` (not only the weights) before each call so that the server's
    ``num_timesteps``, ``exploration_rate`` and ``total_timesteps`` are the learner's. Between
    publishes the server advances ``num_timesteps`` and DQN's ``exploration_rate`` itself and
    resets the action noise of each env whose episode ended, as ``collect_rollouts`` does
    after each step (:class:`SB3BatchPolicy`): with the server's ``order=`` the buffer equals
    SB3's, array for array.

    Train afterwards as ``OffPolicyAlgorithm.learn`` does: ``if model.num_timesteps >
    model.learning_starts: model.train(batch_size=model.batch_size,
    gradient_steps=model.gradient_steps)``.

    Args:
        model: An off-policy SB3 model (SAC, TD3, DDPG, DQN) prepared with
            :func:`rlightning_sb3.start_training` and built with a VecEnv of
            ``len(collector.env_ids)`` envs (its spaces and ``n_envs`` size the buffer).
        collector: The runners' collector.
        n_steps: Steps per env; default ``model.train_freq.frequency`` (its unit must then be
            ``"step"``).
        current_version: The policy version published for these steps.

    Returns:
        ``(rollout_done, fragments)``: whether the last step ended a rollout of
        ``model.train_freq`` (:func:`~rlightning_sb3.add_replay_step`'s return), and the
        fragments in runner order. Mutates the model's buffer and bookkeeping as the helper
        documents.

    Raises:
        ValueError: the model's ``n_envs`` is not the runners' env count, ``n_steps`` is None
            and ``model.train_freq`` counts episodes, the model has action noise and several
            envs but the server batches dynamically (no ``order``: a batch would not hold every
            env's noise process), or a helper refuses a step (its message names the env).
    """
    env_ids = collector.env_ids
    if model.n_envs != len(env_ids):
        raise ValueError(
            f"the model has n_envs={model.n_envs} but the runners host {len(env_ids)} envs "
            f"{env_ids}: build the model with a VecEnv of {len(env_ids)} envs"
        )
    if model.action_noise is not None and len(env_ids) > 1 and not collector.deterministic:
        raise ValueError(
            f"model.action_noise={model.action_noise} keeps one noise process per env, which "
            f"the server's SB3PolicyAdapter.act can only follow when every batch holds all "
            f"{len(env_ids)} envs {env_ids}; under dynamic batching a batch holds whichever "
            "runners asked: start the server in the deterministic mode "
            "(start_server(..., order=[the runner ids])), or build the model without action noise"
        )
    if n_steps is None:
        train_freq: Any = model.train_freq  # a TrainFreq since _setup_model
        if train_freq.unit != TrainFrequencyUnit.STEP:
            raise ValueError(
                f"model.train_freq={train_freq} counts episodes: pass n_steps (steps per env "
                "per call) to collect_replay"
            )
        n_steps = int(train_freq.frequency)
    fragments = collector.sample(n_steps, current_version)
    done = False
    for t in range(n_steps):
        responses = [r for f in fragments for r in ResponseBatch(f.answers[t])]
        after = [
            f.observations[t + 1] if t + 1 < n_steps else f.last_observation for f in fragments
        ]
        done = add_replay_step(
            model,
            concat_observations([f.observations[t] for f in fragments]),
            responses,
            concat_observations(after),
            np.concatenate([f.rewards[t] for f in fragments]),
            np.concatenate([f.dones[t] for f in fragments]),
            [info for f in fragments for info in f.infos[t]],
            env_ids=env_ids,
        )
    return done, fragments
