"""The acting side of SB3's ``collect_rollouts``, for a model that acts away from its learner.

SB3's ``collect_rollouts`` does two things at every step: it *acts* (draws the actions, with the
model's exploration: warm-up sampling before ``learning_starts``, DQN's epsilon, action noise)
and it *keeps the books* (fills the buffer, advances ``num_timesteps``, calls ``_on_step`` and
the callbacks). In one process both sides read and write one model. When the acting runs
elsewhere -- a policy server, an env runner with its own replica of the model -- the replica
must do to its own counters what ``collect_rollouts`` does to the learner's, or its exploration
drifts from SB3's. This module is that acting half; its learner-side twin is
:func:`rlightning_sb3.add_replay_step` / :func:`rlightning_sb3.add_rollout_step`, which keep
the learner's books.

* :class:`ActingReplica` -- a model acting as ``collect_rollouts`` acts, step after step: it
  resets the action noise of the envs whose episode just ended, calls
  :meth:`SB3PolicyAdapter.act <rlightning_sb3.SB3PolicyAdapter.act>` (warm-up sampling, epsilon,
  noise, masks), then advances ``num_timesteps`` and DQN's ``exploration_rate`` by the rows it
  answered; :meth:`ActingReplica.load` takes what the learner publishes.
* :class:`ActingState`, :func:`acting_state`, :func:`policy_weights` -- what the learner
  publishes to its replicas: the policy's weights and the counters exploration reads;
  :func:`training_run_id` -- which run (``learn()`` / :func:`rlightning_sb3.start_training`) a
  model is in, for noise processes kept outside the model that must reset when a run begins.
* :func:`rollout_steps` -- how many steps per env one rollout of the model collects.
* :func:`set_acting_seed` -- seed the random number generators acting draws from.

With every env of the learner's VecEnv in each :meth:`ActingReplica.act` call, in env order, the
replica draws what SB3's ``collect_rollouts`` draws, step for step.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch as th
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.noise import VectorizedActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.type_aliases import TrainFrequencyUnit
from stable_baselines3.common.utils import set_random_seed

from rlightning import PolicyResponse, ResponseBatch
from rlightning.rules import as_bools, check_flag
from rlightning_sb3._noise import bound_env_ids, noise_indices
from rlightning_sb3._training import reset_run_of
from rlightning_sb3.adapter import SB3PolicyAdapter

__all__ = [
    "ActingReplica",
    "ActingState",
    "acting_state",
    "policy_weights",
    "rollout_steps",
    "set_acting_seed",
    "training_reset_run_id",
    "training_run_id",
]


@dataclass(frozen=True)
class ActingState:
    """What a model's exploration reads besides its weights, published by the learner.

    ``OffPolicyAlgorithm._sample_action`` samples the action space while ``num_timesteps <
    learning_starts``, and DQN's ``predict`` acts at random with probability
    ``exploration_rate``: both read the learner's counters, which a replica of the model only
    knows through a publish (:func:`acting_state`). Between publishes an :class:`ActingReplica`
    advances them itself, as ``collect_rollouts`` does after each step, which needs the
    learner's ``total_timesteps`` (DQN's schedule reads the progress remaining).

    Attributes:
        policy: ``policy.state_dict()`` CPU copies (as :func:`policy_weights`).
        num_timesteps: The learner's ``model.num_timesteps`` at the publish.
        exploration_rate: DQN's ``model.exploration_rate`` at the publish (None for models
            without one).
        total_timesteps: The learner's ``model._total_timesteps`` (what ``_setup_learn``, hence
            :func:`rlightning_sb3.start_training`, set; the denominator of SB3's
            ``_current_progress_remaining``), or None (then the replica keeps the published
            ``exploration_rate`` until the next publish).
        run_id: The learner's run (:func:`training_run_id`): ``model.start_time``
            (``time.time_ns()``, which every ``_setup_learn``, hence every ``learn()`` and
            :func:`rlightning_sb3.start_training`, sets), or None before the first run.
            ``_setup_learn`` also resets the action noise (``action_noise.reset()``, every
            process, whatever ``reset_num_timesteps``): a replica that loads a new ``run_id``
            resets its own noise (:meth:`ActingReplica.load`).
        reset_run_id: The learner's latest run that began with an env reset
            (:func:`training_reset_run_id`), or None (none known; also what a state published
            before this field existed unpickles with). Envs stepped away from the learner
            (a Ray runner's PettingZoo copies) reset where it changes, as ``_setup_learn``
            resets the learner's env.
    """

    policy: dict[str, th.Tensor]
    num_timesteps: int
    exploration_rate: float | None = None
    total_timesteps: int | None = None
    run_id: int | None = None
    reset_run_id: int | None = None


def policy_weights(model: BaseAlgorithm) -> dict[str, th.Tensor]:
    """A CPU copy of ``model.policy.state_dict()``, to publish to the model's replicas.

    Returns:
        ``{name: tensor}``, detached CPU copies (the learner may train on while they travel).
    """
    return {k: v.detach().to("cpu", copy=True) for k, v in model.policy.state_dict().items()}


def training_run_id(model: BaseAlgorithm) -> int | None:
    """The model's current training run: ``model.start_time``, or None before the first run.

    SB3's ``_setup_learn`` (every ``learn()`` and :func:`rlightning_sb3.start_training`) sets
    ``start_time = time.time_ns()`` and resets ``model.action_noise`` (every process, whatever
    ``reset_num_timesteps``; stable_baselines3 2.x ``common/base_class.py``). A noise process
    kept outside ``model.action_noise`` (a replica's, a PettingZoo collector's per-slot
    processes) resets where this changes. :func:`rlightning_sb3.start_training` makes it
    strictly increase from one run to the next of a model, also where the clock's resolution
    is coarser than the time between two runs.

    Args:
        model: An SB3 model.

    Returns:
        ``int(model.start_time)`` (nanoseconds), or None while it is 0 (SB3's initial value:
        the model never began a run). Nothing is mutated.
    """
    start = getattr(model, "start_time", 0)
    return int(start) if start else None


def training_reset_run_id(model: BaseAlgorithm) -> int | None:
    """The model's latest training run that began with an env reset, or None.

    SB3's ``BaseAlgorithm._setup_learn`` (stable_baselines3 2.x ``common/base_class.py``) resets
    the model's env (``_last_obs = env.reset()``, ``_last_episode_starts`` all True) when
    ``reset_num_timesteps`` is True or ``_last_obs`` is None; otherwise ``learn()`` continues the
    episodes where the last run left them. Envs stepped outside ``model.get_env()`` (the
    PettingZoo collectors' env copies, a Ray runner's) reset at the first rollout of a run whose
    id this returns and that they have not acted on yet, so that a new run's buffer holds what
    ``learn()`` would collect.

    :func:`rlightning_sb3.start_training` records the rule's outcome, read before it calls
    ``_setup_learn``. Runs begun by ``model.learn()`` itself are not seen: ``learn()`` steps the
    model's own env and never the collectors' copies, and a run that is over leaves no sure
    sign of whether it reset (``_num_timesteps_at_start == 0`` is also true of a continuing
    run of a model whose steps were collected with ``update_model=False``). Through such runs
    the id stays the latest :func:`~rlightning_sb3.start_training` run's that reset; a
    following ``start_training`` applies SB3's rule to the model as ``learn()`` left it
    (``reset_num_timesteps``, or no ``_last_obs``). The answer depends only on those records,
    never on earlier calls of this function.

    Args:
        model: An SB3 model. Not mutated.

    Returns:
        The ``start_time`` (:func:`training_run_id`) of that run: the current run's own where
        it reset, an earlier one's where it continued (or was begun by ``learn()``); None when
        no :func:`~rlightning_sb3.start_training` run of the model reset its env.
    """
    return reset_run_of(model)


def acting_state(model: BaseAlgorithm) -> ActingState:
    """The weights and exploration counters of ``model`` now, to publish (:class:`ActingState`).

    Returns:
        An :class:`ActingState` (CPU copies of the weights; the learner may train on):
        ``num_timesteps``, DQN's ``exploration_rate`` (None for a model without one) and
        ``_total_timesteps``, the run's ``start_time`` and the latest resetting run's
        (:func:`training_reset_run_id`; all three None before
        :func:`rlightning_sb3.start_training` or ``learn``).
    """
    rate = getattr(model, "exploration_rate", None)
    total = getattr(model, "_total_timesteps", 0)
    return ActingState(
        policy_weights(model),
        int(model.num_timesteps),
        None if rate is None else float(rate),
        int(total) if total else None,
        training_run_id(model),
        training_reset_run_id(model),
    )


def rollout_steps(model: BaseAlgorithm) -> int:
    """Steps per env that one rollout of ``model`` collects, as its ``collect_rollouts`` does.

    On-policy, ``model.n_steps`` (``OnPolicyAlgorithm.learn`` calls ``collect_rollouts(...,
    n_rollout_steps=self.n_steps)``); off-policy, ``model.train_freq.frequency`` when
    ``train_freq`` counts steps (``should_collect_more_steps``).

    Raises:
        ValueError: ``model.train_freq`` counts episodes (a rollout's length is then not a
            number of steps).
        TypeError: ``model`` is neither an on- nor an off-policy algorithm.
    """
    if isinstance(model, OnPolicyAlgorithm):
        return int(model.n_steps)
    if isinstance(model, OffPolicyAlgorithm):
        train_freq: Any = model.train_freq  # a TrainFreq since _setup_model
        if train_freq.unit != TrainFrequencyUnit.STEP:
            raise ValueError(
                f"model.train_freq={train_freq} counts episodes, so a rollout is not a number "
                "of steps: pass the steps per env explicitly"
            )
        return int(train_freq.frequency)
    raise TypeError(
        f"{type(model).__name__} is neither an on-policy nor an off-policy SB3 algorithm"
    )


def set_acting_seed(seed: int) -> None:
    """Seed the random number generators acting draws from, with SB3's ``set_random_seed``.

    Python's ``random``, numpy's global generator (action noise, DQN's epsilon test) and torch's
    (sampling from the policy's distribution), as ``stable_baselines3.common.utils
    .set_random_seed(seed)`` seeds them. The model's action space (warm-up and epsilon
    sampling) is *not* reseeded, unlike ``model.set_random_seed``: a replica built as the
    learner was built already samples it as the learner's would.

    Args:
        seed: The seed.
    """
    set_random_seed(seed)


class ActingReplica:
    """A model acting as SB3's ``collect_rollouts`` acts, with the learner's counters.

    Each :meth:`act` call is one step of ``collect_rollouts`` for the envs it is given:

    1. off-policy and exploring, the action-noise process of each env whose ``episode_start``
       is True is reset (``collect_rollouts`` calls ``action_noise.reset(indices=[idx])`` right
       after the step that ended env ``idx``'s episode, ``action_noise.reset()`` for a single
       env); an env's process is the one :meth:`SB3PolicyAdapter.act` bound it to the first
       time an exploring call held it (a fresh process: an env not bound yet is not reset, as
       SB3's first step resets none), so a call may hold any subset of the envs (a dynamically
       batching server's batch) and each env's process is still reset when its episode ends;
    2. :meth:`SB3PolicyAdapter.act` draws the actions (warm-up sampling while ``num_timesteps <
       learning_starts``, DQN's epsilon-greedy, the action noise, MaskablePPO's masks);
    3. off-policy and exploring, :meth:`advance`: ``num_timesteps`` grows by the rows answered
       (``collect_rollouts``: ``num_timesteps += env.num_envs``), and a model with an
       ``exploration_schedule`` (DQN, QR-DQN) sets ``exploration_rate`` from SB3's own
       ``_update_current_progress_remaining`` and ``exploration_schedule``, as ``DQN._on_step``
       does after each step (once an :class:`ActingState` with ``total_timesteps`` was loaded).

    :meth:`load` takes the learner's publish. With all the learner's envs in every call, in env
    order, and the replica's random generators where the learner's are (:func:`set_acting_seed`
    on both sides), the actions equal SB3's ``collect_rollouts``', step for step.

    Refused: an exploring gSDE model (``use_sde=True``). ``collect_rollouts`` resamples its
    noise matrix at each rollout's start and every ``sde_sample_freq`` steps; a replica does not
    know where the learner's rollouts start (see :meth:`SB3PolicyAdapter.act`'s note), so it
    would explore with another noise than SB3's.

    Args:
        model: The model that acts (built as the learner's model, with the envs' spaces; its
            weights and counters are replaced by each :meth:`load`). Used, not copied.
        explore: :meth:`SB3PolicyAdapter.act`'s ``explore`` (False: deterministic actions, no
            counters advanced, no noise reset).
        use_masking: For MaskablePPO, as ``MaskablePPO.learn(use_masking=...)``: True (the
            default) requires every :meth:`act` call to carry the envs' action masks; False
            acts unmasked. Other models ignore masks, as their ``collect_rollouts`` never
            calls ``action_masks()``.
        seed: When given, :func:`set_acting_seed` runs after the adapter is built.

    Raises:
        TypeError: ``explore`` or ``use_masking`` is not a bool (rule ``flag``, checked by
            :func:`rlightning.rules.check_flag`; a ``numpy.bool_`` is one).
        ValueError: ``model`` uses gSDE (``use_sde=True``) and ``explore`` is True.
        TypeError, ValueError: what :class:`SB3PolicyAdapter` raises for ``model``.
    """

    def __init__(
        self,
        model: BaseAlgorithm,
        *,
        explore: bool = True,
        use_masking: bool = True,
        seed: int | None = None,
    ) -> None:
        explore = check_flag(explore, "explore", "ActingReplica")
        use_masking = check_flag(use_masking, "use_masking", "ActingReplica")
        self._adapter = SB3PolicyAdapter(model)
        if explore and getattr(model, "use_sde", False):
            raise ValueError(
                f"{type(model).__name__} uses gSDE (use_sde=True), whose noise matrix "
                "collect_rollouts resamples at each rollout's start and every sde_sample_freq "
                "steps; an ActingReplica does not know where the learner's rollouts start, so it "
                "would explore with another noise than SB3's: build the model with use_sde=False, "
                "or act with explore=False"
            )
        self._model = model
        self._explore = explore
        self._use_masking = use_masking
        self._off_policy = isinstance(model, OffPolicyAlgorithm)
        self._total_timesteps: int | None = None
        #: Whether an exploring call drew action noise (the first resets none, as SB3's first
        #: step); which env each process is, is ``rlightning_sb3._noise``'s binding.
        self._drew_noise = False
        #: The ``run_id`` of the last publish that carried one (:meth:`load`).
        self._run_id: int | None = None
        if seed is not None:
            set_acting_seed(seed)

    @property
    def model(self) -> BaseAlgorithm:
        """The acting model."""
        return self._model

    @property
    def adapter(self) -> SB3PolicyAdapter:
        """The :class:`SB3PolicyAdapter` that acts for :attr:`model`."""
        return self._adapter

    @property
    def explore(self) -> bool:
        """Whether :meth:`act` explores (see the constructor)."""
        return self._explore

    @property
    def total_timesteps(self) -> int | None:
        """The learner's ``total_timesteps`` from the last :meth:`load` that carried one."""
        return self._total_timesteps

    def act(
        self,
        observation: Any,
        env_ids: Sequence[str],
        *,
        episode_start: Any,
        action_masks: Any = None,
        ts_env_sent_ns: Any = None,
    ) -> ResponseBatch[PolicyResponse]:
        """One step of ``collect_rollouts``' acting for the envs ``env_ids`` (class docstring).

        Args:
            observation: ``(n, *obs_shape)`` (a dict of such arrays for a Dict space), row ``i``
                env ``env_ids[i]``'s, as the VecEnv returned it.
            env_ids: One str id per row.
            episode_start: ``(n,)`` booleans (0/1 accepted, as :func:`rlightning.rules.as_bools`
                reads them): whether each row's observation starts an episode (the previous
                step's dones; True at the first step).
            action_masks: ``(n, mask_dims)`` masks as sb3-contrib's ``get_action_masks`` stacks
                the envs' ``action_masks()`` (see :meth:`SB3PolicyAdapter.act`), or None.
                Used by MaskablePPO with ``use_masking`` only (other models: ignored, as their
                ``collect_rollouts`` never reads masks).
            ts_env_sent_ns: :meth:`SB3PolicyAdapter.act`'s stamp argument.

        Returns:
            :meth:`SB3PolicyAdapter.act`'s :class:`~rlightning.ResponseBatch` (with
            ``action_mask`` rows when masks were used). Mutates the model's counters and action
            noise, and the adapter, as the class docstring says.

        Raises:
            ValueError: ``episode_start`` is not ``(n,)`` booleans or 0/1 (nothing changed);
                the model is a MaskablePPO with ``use_masking`` and ``action_masks`` is None
                (its envs have no ``action_masks()``: sb3-contrib's ``collect_rollouts``
                refuses them too); or what :meth:`SB3PolicyAdapter.act` raises.
            TypeError: what :meth:`SB3PolicyAdapter.act` raises.
        """
        ids = list(env_ids)
        starts = as_bools(episode_start, "episode_start", shape=(len(ids),), labels=ids)
        masks = None
        if self._adapter.is_maskable and self._use_masking:
            if action_masks is None:
                raise ValueError(
                    f"{type(self._model).__name__} acts with action masks but the envs {ids} "
                    "sent none: their envs have no action_masks() method (sb3-contrib's "
                    "MaskablePPO.collect_rollouts refuses them: 'Environment does not support "
                    "action masking'); wrap each env in sb3_contrib's ActionMasker, or build "
                    "the replica with use_masking=False"
                )
            masks = action_masks
        acting = self._off_policy and self._explore
        noisy = (
            acting
            and getattr(self._model, "action_noise", None) is not None
            and isinstance(self._model.action_space, spaces.Box)
        )
        if noisy and self._drew_noise:
            self.reset_noise(ids, starts)
        answer = self._adapter.act(
            observation,
            ids,
            episode_start=starts,
            action_masks=masks,
            explore=self._explore,
            ts_env_sent_ns=ts_env_sent_ns,
        )
        if noisy:
            self._drew_noise = True
        if acting:
            self.advance(len(ids))
        return answer

    def reset_noise(self, env_ids: Sequence[str], episode_start: Any) -> list[str]:
        """Reset the action noise of each env of ``env_ids`` whose ``episode_start`` is True.

        As ``OffPolicyAlgorithm.collect_rollouts`` after a step: ``action_noise.reset(indices=
        [idx])`` for a ``VectorizedActionNoise`` (env ``idx``'s process, the index
        :meth:`SB3PolicyAdapter.act` bound the env id to; an env id not bound yet has a fresh
        process and is not reset),
        ``action_noise.reset()`` for a single env's noise. :meth:`act` calls it; call it
        yourself only for a loop that does not.

        Args:
            env_ids: One str id per row.
            episode_start: ``(n,)`` booleans (0/1 accepted).

        Returns:
            The env ids whose noise was reset (none before the first exploring call, or for a
            model without action noise).

        Raises:
            ValueError: ``episode_start`` is not ``(n,)`` booleans or 0/1 (nothing reset).
        """
        ids = list(env_ids)
        starts = as_bools(episode_start, "episode_start", shape=(len(ids),), labels=ids)
        noise = getattr(self._model, "action_noise", None)
        ending = [e for e, s in zip(ids, starts.tolist(), strict=True) if s]
        if noise is None or not self._drew_noise or not ending:
            return []
        if isinstance(noise, VectorizedActionNoise):
            # an id the noise has no process for is left to act(), which names it
            bound = bound_env_ids(noise) or []
            known = [e for e in ending if e in bound]
            noise.reset(indices=noise_indices(noise, known))
            return known
        noise.reset()  # one env: SB3 resets the noise itself
        return ending

    def advance(self, n_rows: int) -> None:
        """After a step of ``n_rows`` envs: the learner-side counters acting reads.

        ``num_timesteps += n_rows`` (``collect_rollouts``: ``num_timesteps += env.num_envs``);
        then, for a model with an ``exploration_schedule`` (DQN, QR-DQN) once
        :attr:`total_timesteps` is known, SB3's own
        ``model._update_current_progress_remaining(num_timesteps, total_timesteps)`` and
        ``model.exploration_rate = model.exploration_schedule(model._current_progress_remaining)``,
        as ``collect_rollouts`` and ``DQN._on_step`` do. :meth:`act` calls it (off-policy and
        exploring).

        Args:
            n_rows: The envs of the step, >= 0.

        Raises:
            ValueError: ``n_rows`` is not a non-negative int.
        """
        if isinstance(n_rows, bool) or not isinstance(n_rows, int) or n_rows < 0:
            raise ValueError(f"n_rows must be an int >= 0, got {n_rows!r}")
        model: Any = self._model
        model.num_timesteps += n_rows
        schedule: Callable[[float], float] | None = getattr(model, "exploration_schedule", None)
        if self._total_timesteps is not None and schedule is not None:
            model._update_current_progress_remaining(model.num_timesteps, self._total_timesteps)
            model.exploration_rate = float(schedule(model._current_progress_remaining))

    def load(self, state: ActingState | Mapping[str, th.Tensor]) -> None:
        """Take what the learner published: its weights, and its counters when given.

        Args:
            state: An :class:`ActingState` (:func:`acting_state`), whose ``num_timesteps``,
                ``exploration_rate`` (when not None) and ``total_timesteps`` (when not None;
                :meth:`advance` then follows DQN's schedule until the next load) are also taken,
                and whose ``run_id``, when not None and not the last one loaded (the learner
                began a new ``learn()``/:func:`rlightning_sb3.start_training`), resets the
                model's action noise (``action_noise.reset()``: every env's process), as
                ``_setup_learn`` resets the learner's; or a ``policy.state_dict()``
                (:func:`policy_weights`).

        Raises:
            TypeError: plain weights for an exploring off-policy model whose exploration reads
                the learner's counters (``learning_starts`` > 0, or DQN's ``exploration_rate``):
                without an :class:`ActingState` the replica would explore with its own stale
                counters (e.g. DQN's epsilon of a fresh model), silently.
            RuntimeError: ``load_state_dict`` refused the weights (missing or unexpected keys,
                shapes of another architecture); the model keeps its previous weights and
                counters (torch copies the matching tensors before raising: they are put back).
        """
        model: Any = self._model
        if isinstance(state, ActingState):
            self._load_weights(state.policy)
            model.num_timesteps = state.num_timesteps
            if state.exploration_rate is not None:
                model.exploration_rate = state.exploration_rate
            if state.total_timesteps is not None:
                self._total_timesteps = state.total_timesteps
            if state.run_id is not None and state.run_id != self._run_id:
                # a new learn()/start_training: _setup_learn reset the learner's noise
                self._run_id = state.run_id
                noise = getattr(model, "action_noise", None)
                if noise is not None:
                    noise.reset()
            return
        schedule = getattr(model, "exploration_schedule", None)
        if self._off_policy and self._explore and (schedule is not None or model.learning_starts):
            raise TypeError(
                f"{type(model).__name__} explores from the learner's state (learning_starts="
                f"{model.learning_starts}"
                + (", DQN's exploration_rate" if schedule is not None else "")
                + f") but the publish carried only the weights ({type(state).__name__} of "
                f"{len(state)} tensors): publish acting_state(model) (rlightning_sb3."
                "acting_state, also rlightning_ray.sb3.acting_state), not policy_weights(model), "
                "or act with explore=False"
            )
        self._load_weights(state)

    def _load_weights(self, state: Mapping[str, th.Tensor]) -> None:
        """``policy.load_state_dict(state)``, all or nothing (see :meth:`load`)."""
        policy = self._model.policy
        saved = {k: v.detach().clone() for k, v in policy.state_dict().items()}
        try:
            policy.load_state_dict(state)
        except Exception:
            policy.load_state_dict(saved)
            raise
