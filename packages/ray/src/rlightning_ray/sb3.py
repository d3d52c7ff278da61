"""Stable-Baselines3 on Ray: a batch policy for the server and a rollout filled from fragments.

Needs the ``[sb3]`` extra (``pip install "rlightning-ray[sb3]"``). SB3's semantics stay in
``rlightning_sb3`` (this module imports no ``stable_baselines3``): the server acts through
:class:`rlightning_sb3.ActingReplica` (the acting side of ``collect_rollouts``:
:meth:`~rlightning_sb3.SB3PolicyAdapter.act`, noise resets, counters) and the driver fills the
model's ``RolloutBuffer`` with :func:`rlightning_sb3.add_rollout_step` and
:func:`rlightning_sb3.finish_rollout`, as SB3's ``OnPolicyAlgorithm.collect_rollouts`` does, or an
off-policy model's ``ReplayBuffer`` with :func:`rlightning_sb3.add_replay_step`, as
``OffPolicyAlgorithm.collect_rollouts`` does. :class:`ActingState`, :func:`acting_state` and
:func:`policy_weights` are ``rlightning_sb3``'s, re-exported here. Image envs: the runners send
raw ``HxWxC`` observations; where SB3 wrapped the model's env in ``VecTransposeImage``, the
server and the driver transpose them as that wrapper does (:mod:`rlightning_sb3.vec_env`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from rlightning import PolicyResponse, ResponseBatch
from rlightning.rules import check_flag
from rlightning_ray._rows import concat_observations
from rlightning_ray.collector import Collector
from rlightning_ray.runner import Fragment

try:
    import torch

    from rlightning_sb3 import (
        ActingReplica,
        ActingState,
        acting_state,
        add_replay_step,
        add_rollout_step,
        finish_rollout,
        policy_weights,
        rollout_steps,
        training_reset_run_id,
    )
    from rlightning_sb3.vec_env import ImageTranspose, image_transpose, unapplied_wrappers
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        f'rlightning_ray.sb3 needs the [sb3] extra: pip install "rlightning-ray[sb3]" ({exc})'
    ) from exc

if TYPE_CHECKING:
    from stable_baselines3.common.base_class import BaseAlgorithm
    from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

__all__ = [
    "ActingState",
    "SB3BatchPolicy",
    "acting_state",
    "collect_replay",
    "collect_rollout",
    "policy_weights",
]


class SB3BatchPolicy:
    """A :class:`~rlightning_ray.BatchPolicy` acting for an SB3 model as ``collect_rollouts`` acts.

    Built in the server's process by a factory, e.g.
    ``partial(SB3BatchPolicy, lambda: PPO("MlpPolicy", env, device="cpu"))``. Each batch is one
    :meth:`rlightning_sb3.ActingReplica.act` call (SB3's acting side, owned by
    ``rlightning_sb3``): off-policy and exploring, the action noise of each env starting an
    episode is reset first, and ``num_timesteps`` and DQN's ``exploration_rate`` are advanced
    by the batch's rows afterwards; MaskablePPO acts with the masks the runners sent (their
    envs' ``action_masks()``) and refuses a batch without them. With a fixed batch composition
    (the server's ``order=``, all envs in every batch) these equal SB3's ``collect_rollouts``
    step for step. Publishes (``set_weights``) go to :meth:`rlightning_sb3.ActingReplica.load`.

    Args:
        make_model: Builds the SB3 model (its spaces must be the runners' envs' spaces; its
            weights are replaced by each publish).
        seed: When given, :func:`rlightning_sb3.set_acting_seed` (SB3's ``set_random_seed``)
            runs after the model is built, so the server's random draws (torch's global RNG,
            which ``collect_rollouts`` samples from, and numpy's, which the action noise draws
            from) start from a known state.
        explore: ``act``'s ``explore`` (False: deterministic actions).
        use_masking: :class:`rlightning_sb3.ActingReplica`'s ``use_masking`` (MaskablePPO).

    Attributes:
        replica: The :class:`rlightning_sb3.ActingReplica` that acts.

    Raises:
        TypeError: ``explore`` or ``use_masking`` is not a bool (``numpy.bool_`` accepted;
            rule ``flag``), checked before ``make_model`` is called.
        ValueError: the model's env has VecEnv wrappers the runners do not apply
            (``VecNormalize``, ``VecFrameStack``, ...: :func:`rlightning_sb3.vec_env
            .unapplied_wrappers`); wrap each env inside the runners' ``env_fn`` instead.
    """

    def __init__(
        self,
        make_model: Callable[[], BaseAlgorithm],
        *,
        seed: int | None = None,
        explore: bool = True,
        use_masking: bool = True,
    ) -> None:
        explore = check_flag(explore, "explore", "SB3BatchPolicy")  # before the model is built
        use_masking = check_flag(use_masking, "use_masking", "SB3BatchPolicy")
        model = make_model()
        _refuse_unapplied_wrappers(model, "the SB3BatchPolicy factory's model")
        self.replica = ActingReplica(model, explore=explore, use_masking=use_masking, seed=seed)
        #: SB3's VecTransposeImage of the model's env (image envs), or None.
        self._transpose = image_transpose(model)
        #: Whether a publish was loaded (before one, the factory's weights are not the learner's).
        self.published = False

    @property
    def model(self) -> BaseAlgorithm:
        """The served model (the replica's)."""
        return self.replica.model

    @property
    def adapter(self) -> Any:
        """The replica's :class:`rlightning_sb3.SB3PolicyAdapter`."""
        return self.replica.adapter

    @property
    def explore(self) -> bool:
        """Whether the server explores."""
        return self.replica.explore

    def __call__(
        self,
        observation: Any,
        env_ids: list[str],
        episode_start: Any,
        ts_env_sent_ns: list[int],
        *,
        action_masks: Any = None,
    ) -> ResponseBatch[PolicyResponse]:
        """One :meth:`rlightning_sb3.ActingReplica.act` call for the whole batch (its docstring).

        Image envs: the runners' raw ``HxWxC`` observations are first transposed as SB3's
        ``VecTransposeImage`` transposes them for the model (:func:`rlightning_sb3.vec_env
        .image_transpose`). Mutates the model (counters, noise) and the adapter, as that method
        documents.

        Raises:
            RuntimeError: no weights were published yet (the factory model's own weights are
                not the learner's: acting on them would fill the buffer with another policy's
                values and log-probs, stamped version 0).
        """
        if not self.published:
            raise RuntimeError(
                "no weights published yet: call publish_weights(server, registry, version, "
                "acting_state(model)) / Collector.publish(...) first (SB3BatchPolicy does not "
                "act on its factory model's own weights)"
            )
        return self.replica.act(
            _transposed(self._transpose, observation),
            env_ids,
            episode_start=episode_start,
            action_masks=action_masks,
            ts_env_sent_ns=ts_env_sent_ns,
        )

    def set_weights(self, weights: Mapping[str, torch.Tensor] | ActingState) -> None:
        """Load a publish: :meth:`rlightning_sb3.ActingReplica.load` (its docstring, errors)."""
        self.replica.load(weights)
        self.published = True


def collect_rollout(
    model: OnPolicyAlgorithm,
    collector: Collector,
    *,
    current_version: int | None = None,
    timeout_s: float | None = None,
) -> list[Fragment]:
    """Fill ``model.rollout_buffer`` with one rollout from the runners, as ``collect_rollouts``.

    Asks every runner for ``model.n_steps`` steps, then adds step ``t`` of all runners (columns
    in runner order: :attr:`Collector.env_ids`) with :func:`rlightning_sb3.add_rollout_step`
    (truncation bootstrap, ``num_timesteps``, episode infos, the callback of
    :func:`rlightning_sb3.start_training` with ``new_obs``: the next step's observation, as
    ``env.step`` returned it) and finishes with
    :func:`rlightning_sb3.finish_rollout` (returns and advantages; given the last step's
    answers, whose ``state`` RecurrentPPO's last values are computed from, as sb3-contrib's
    ``collect_rollouts`` computes them from its ``lstm_states``). The model must have been
    prepared with :func:`rlightning_sb3.start_training` and built with a VecEnv of
    ``len(collector.env_ids)`` envs (its spaces and ``n_envs`` size the buffer; it is never
    stepped here). The runners are sent :func:`rlightning_sb3.training_reset_run_id` of the
    model: at the first call of a new run that reset the model's env (``start_training(...,
    reset_num_timesteps=True)``) they reset theirs before the first step, as ``_setup_learn``
    resets SB3's VecEnv, so the buffer's first row starts every episode
    (:meth:`EnvRunner.sample <rlightning_ray.EnvRunner.sample>`).
    Image envs: where SB3 wrapped the model's env in ``VecTransposeImage``, the runners' raw
    ``HxWxC`` observations (and terminal observations) are transposed as that wrapper
    transposes them (:func:`rlightning_sb3.vec_env.image_transpose`), so that the buffer holds
    what ``learn()`` stores.

    Args:
        model: An on-policy SB3 model (PPO, A2C, sb3-contrib's RecurrentPPO, MaskablePPO).
        collector: The runners' collector.
        current_version: The policy version published for this rollout (answers older than
            ``current_version - collector.max_staleness`` are refused).
        timeout_s: Seconds to wait for the fragments (None: the collector's ``timeout_s``).

    Returns:
        The fragments, in runner order (``collector.latency()`` has their hops). Mutates the
        model's buffer and bookkeeping as the helpers document. MaskablePPO: the buffer's
        ``action_masks`` are the masks each step was answered with (the envs'
        ``action_masks()``, carried by the answers).

    Raises:
        ValueError: the model's env has VecEnv wrappers the runners do not apply
            (``VecNormalize``, ``VecFrameStack``, ...: :func:`rlightning_sb3.vec_env
            .unapplied_wrappers`), the model's ``n_envs`` is not the runners' env count, or a
            helper refuses a step (its message names the env).
        RuntimeError, TimeoutError: what :meth:`Collector.sample` raises (the buffer is then
            not changed).
    """
    _refuse_unapplied_wrappers(model, "collect_rollout's model")
    env_ids = collector.env_ids
    if model.n_envs != len(env_ids):
        raise ValueError(
            f"the model has n_envs={model.n_envs} but the runners host {len(env_ids)} envs "
            f"{env_ids}: build the model with a VecEnv of {len(env_ids)} envs"
        )
    fragments = collector.sample(
        model.n_steps,
        current_version,
        timeout_s=timeout_s,
        reset_run_id=training_reset_run_id(model),  # a new resetting run resets the envs
    )
    transpose = image_transpose(model)
    responses: list[PolicyResponse] = []
    for t in range(model.n_steps):
        responses = [r for f in fragments for r in ResponseBatch(f.answers[t])]
        after = [  # what env.step returned (reset where done): the callback's new_obs
            f.observations[t + 1] if t + 1 < model.n_steps else f.last_observation
            for f in fragments
        ]
        dones = np.concatenate([f.dones[t] for f in fragments])
        add_rollout_step(
            model,
            _transposed(transpose, concat_observations([f.observations[t] for f in fragments])),
            responses,
            np.concatenate([f.rewards[t] for f in fragments]),
            dones,
            _step_infos(transpose, dones, [info for f in fragments for info in f.infos[t]]),
            env_ids=env_ids,
            new_observation=_transposed(transpose, concat_observations(after)),
        )
    finish_rollout(
        model,
        _transposed(transpose, concat_observations([f.last_observation for f in fragments])),
        np.concatenate([f.last_dones for f in fragments]),
        responses=responses,  # the last step's: RecurrentPPO's last values read their state
        env_ids=env_ids,
    )
    return fragments


def collect_replay(
    model: OffPolicyAlgorithm,
    collector: Collector,
    *,
    n_steps: int | None = None,
    current_version: int | None = None,
    timeout_s: float | None = None,
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
    ``num_timesteps``, ``exploration_rate`` and ``total_timesteps`` are the learner's (and
    its ``run_id``: a new :func:`rlightning_sb3.start_training` resets the server's action
    noise, as ``_setup_learn`` resets the learner's). Between
    publishes the server advances ``num_timesteps`` and DQN's ``exploration_rate`` itself and
    resets the action noise of each env whose episode ended, as ``collect_rollouts`` does
    after each step (:class:`SB3BatchPolicy`): with the server's ``order=`` the buffer equals
    SB3's, array for array. Under dynamic batching (no ``order=``) a batch holds whichever
    runners asked: each env still draws from its own noise process (bound to the env id the
    first time a batch holds it), reset when its episode ends, so every env's noise evolves as
    SB3's process of that env; but which batch an env joins, and so the order of the draws
    from numpy's global RNG, depends on timing, so the buffer is not SB3's array for array
    (docs/ray.md, "Action noise under dynamic batching").
    Image envs: observations, next observations and terminal observations are transposed as
    the model's ``VecTransposeImage`` transposes them (as :func:`collect_rollout`).
    The runners reset their envs at a new resetting run, as in :func:`collect_rollout`.

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
        timeout_s: Seconds to wait for the fragments (None: the collector's ``timeout_s``).

    Returns:
        ``(rollout_done, fragments)``: whether the last step ended a rollout of
        ``model.train_freq`` (:func:`~rlightning_sb3.add_replay_step`'s return), and the
        fragments in runner order. Mutates the model's buffer and bookkeeping as the helper
        documents.

    Raises:
        ValueError: the model's env has VecEnv wrappers the runners do not apply (as
            :func:`collect_rollout`), the model's ``n_envs`` is not the runners' env count,
            ``n_steps`` is None
            and ``model.train_freq`` counts episodes, or a helper refuses a step (its message
            names the env; e.g. the server's noise has no process left for an env: build the
            server's model with a VecEnv of every env, or give it a ``VectorizedActionNoise``
            of that many processes).
        RuntimeError, TimeoutError: what :meth:`Collector.sample` raises (the buffer is then
            not changed).
    """
    _refuse_unapplied_wrappers(model, "collect_replay's model")
    env_ids = collector.env_ids
    if model.n_envs != len(env_ids):
        raise ValueError(
            f"the model has n_envs={model.n_envs} but the runners host {len(env_ids)} envs "
            f"{env_ids}: build the model with a VecEnv of {len(env_ids)} envs"
        )
    if n_steps is None:
        try:
            n_steps = rollout_steps(model)
        except ValueError as exc:
            raise ValueError(f"{exc} (n_steps of collect_replay: steps per env per call)") from exc
    fragments = collector.sample(
        n_steps,
        current_version,
        timeout_s=timeout_s,
        reset_run_id=training_reset_run_id(model),  # a new resetting run resets the envs
    )
    transpose = image_transpose(model)
    done = False
    for t in range(n_steps):
        responses = [r for f in fragments for r in ResponseBatch(f.answers[t])]
        after = [
            f.observations[t + 1] if t + 1 < n_steps else f.last_observation for f in fragments
        ]
        dones = np.concatenate([f.dones[t] for f in fragments])
        done = add_replay_step(
            model,
            _transposed(transpose, concat_observations([f.observations[t] for f in fragments])),
            responses,
            _transposed(transpose, concat_observations(after)),
            np.concatenate([f.rewards[t] for f in fragments]),
            dones,
            _step_infos(transpose, dones, [info for f in fragments for info in f.infos[t]]),
            env_ids=env_ids,
        )
    return done, fragments


def _refuse_unapplied_wrappers(model: BaseAlgorithm, which: str) -> None:
    """Raise when ``model``'s env has VecEnv wrappers the runners do not apply.

    Raises:
        ValueError: :func:`rlightning_sb3.vec_env.unapplied_wrappers` lists any (e.g.
            ``VecNormalize``, ``VecFrameStack``): the buffers would hold raw values.
    """
    wrappers = unapplied_wrappers(model)
    if wrappers:
        raise ValueError(
            f"{which} has its env wrapped in {', '.join(wrappers)}: SB3's learn() acts on and "
            "stores what that wrapper returns, but Ray runners step raw envs (only "
            "VecTransposeImage is applied to their outputs), so the buffer would hold raw "
            "observations/rewards. Wrap each env inside env_fn instead (e.g. gymnasium's "
            "FrameStackObservation, NormalizeObservation, NormalizeReward) and build the model "
            "with a VecEnv of such envs, without the VecEnv wrapper"
        )


def _transposed(transpose: ImageTranspose | None, observation: Any) -> Any:
    """``observation`` as the model's VecEnv returns it (image envs: ``VecTransposeImage``)."""
    return observation if transpose is None else transpose.observations(observation)


def _step_infos(
    transpose: ImageTranspose | None, dones: np.ndarray, infos: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """A step's infos as the model's VecEnv returns them (transposed terminal observations)."""
    return infos if transpose is None else transpose.infos(dones, infos)
