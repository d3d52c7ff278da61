"""``SB3PolicyAdapter``: run a Stable-Baselines3 model and answer with one PolicyResponse per env.

A batched call answers with a :class:`~rlightning.ResponseBatch`: a sequence of one response per
env that holds SB3's batched output as one stacked response and splits it only when an env's
response is read. :meth:`SB3PolicyAdapter.env_actions` and the buffer helpers read the stacked
form directly, so a training loop never pays for per-env objects it does not use.

Two ways to ask the model:

* :meth:`SB3PolicyAdapter.predict` wraps ``model.predict`` (evaluation, serving);
* :meth:`SB3PolicyAdapter.act` runs the policy as SB3's own rollout collection does
  (``OnPolicyAlgorithm.collect_rollouts``, sb3-contrib's ``RecurrentPPO.collect_rollouts`` and
  ``MaskablePPO.collect_rollouts``, ``OffPolicyAlgorithm._sample_action``), so a training loop
  built on responses computes exactly what SB3 would.

:meth:`SB3PolicyAdapter.env_actions` stacks responses back into what ``VecEnv.step`` takes.

This module holds the public class and its documentation; ``predict`` and ``act`` run in the
private modules ``_predict`` and ``_step``, with the input checks in ``_calls`` and the state
kept between calls in ``_state``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, overload

import numpy as np
import torch as th
from stable_baselines3.common.base_class import BaseAlgorithm

from rlightning import PolicyResponse, ResponseBatch
from rlightning.rules import check_flag
from rlightning_sb3._actions import ACTION_KINDS, refuse_action_dtypes
from rlightning_sb3._answer import answer
from rlightning_sb3._batch import (
    order_responses,
    per_env_bools,
    resolve_env_ids,
    stacked_in_order,
)
from rlightning_sb3._calls import read_call
from rlightning_sb3._facts import ModelFacts
from rlightning_sb3._observations import as_arrays, batch_observation, native_arrays, refuse_nan
from rlightning_sb3._predict import direct_predict, predict_actions
from rlightning_sb3._recurrent import split_rnn_states
from rlightning_sb3._spaces import unsupported_space
from rlightning_sb3._state import AdapterState
from rlightning_sb3._step import act_off_policy, act_on_policy

__all__ = ["SB3PolicyAdapter"]


class SB3PolicyAdapter:
    """Answer for a Stable-Baselines3 model with one :class:`~rlightning.PolicyResponse` per env.

    Works with every SB3 algorithm for :meth:`predict`; :meth:`act` supports on-policy
    algorithms (PPO, A2C, and sb3-contrib's RecurrentPPO and MaskablePPO, TRPO) and off-policy ones
    (SAC, TD3, DDPG, DQN, and sb3-contrib's TQC, QR-DQN, CrossQ), with every action space SB3
    supports (Discrete, Box, MultiDiscrete, MultiBinary) and flat, Dict (``MultiInputPolicy``) and
    image (``CnnPolicy``) observations.

    The adapter holds one piece of state per env id: for RecurrentPPO, the LSTM state that
    :meth:`act` carries to that env's next call; for every model, whether the env id was seen
    before (the default ``episode_start``); off-policy with a vectorized action noise, which of
    the noise's envs it is. :meth:`reset_state` forgets it; :meth:`load_training_state` loads
    the model's (``learn()``'s) episode starts and LSTM states for a loop that continues.

    Args:
        model: A Stable-Baselines3 (or sb3-contrib) model. It is used, not copied: training it
            changes what the adapter answers.

    Raises:
        TypeError: ``model`` is not an SB3 ``BaseAlgorithm``.
        ValueError: the model's spaces are ones SB3 maps to wrong numbers without an error
            (the space named): a Discrete or MultiDiscrete action or observation space with a
            non-zero ``start``, or a Box action space of a non-float dtype.
        ImportError: sb3-contrib is imported but outside the supported range.

    Examples:
        >>> from stable_baselines3 import PPO
        >>> model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, seed=0)
        >>> adapter = SB3PolicyAdapter(model)
        >>> env = model.get_env()
        >>> responses = adapter.predict(env.reset(), env_ids=["env-0"], deterministic=True)
        >>> responses[0].env_id, responses[0].action.shape
        ('env-0', ())
    """

    def __init__(self, model: BaseAlgorithm) -> None:
        if not isinstance(model, BaseAlgorithm):
            raise TypeError(
                f"model must be a Stable-Baselines3 model (a BaseAlgorithm such as PPO or SAC), "
                f"got {type(model).__name__}"
            )
        reason = unsupported_space(model.action_space, model.observation_space)
        if reason is not None:
            raise ValueError(f"{type(model).__name__} cannot be adapted: {reason}")
        #: The model and which of SB3's collection paths it takes (read-only).
        self._facts = ModelFacts(model)
        #: What the adapter remembers between calls (env ids seen, carried LSTM states, the
        #: fast paths' caches); only its own methods change it.
        self._state = AdapterState()

    # ------------------------------------------------------------------ properties
    @property
    def model(self) -> BaseAlgorithm:
        """The wrapped SB3 model."""
        return self._facts.model

    @property
    def is_recurrent(self) -> bool:
        """Whether the model is sb3-contrib's RecurrentPPO (responses then carry LSTM states)."""
        return self._facts.recurrent

    @property
    def is_maskable(self) -> bool:
        """Whether the model is sb3-contrib's MaskablePPO (``action_masks`` are then accepted)."""
        return self._facts.maskable

    @property
    def is_off_policy(self) -> bool:
        """Whether the model is an ``OffPolicyAlgorithm`` (SAC, TD3, DDPG, DQN, ...)."""
        return self._facts.off_policy

    def reset_state(self, env_ids: str | Sequence[str] | None = None) -> None:
        """Forget what the adapter carries for some env ids (all when None).

        A forgotten env starts again from a zero LSTM state and a default ``episode_start`` of
        True, as a fresh ``RecurrentPPO``/``_setup_learn`` starts. Forgetting every env (None)
        also forgets which env id each env of a ``VectorizedActionNoise`` is (see :meth:`act`);
        the noise itself (``model.action_noise``) is not changed.

        Args:
            env_ids: One id, several, or None for every env. Unknown ids are ignored.
        """
        self._state.forget(env_ids, getattr(self._facts.model, "action_noise", None))

    def load_training_state(self, env_ids: Sequence[str]) -> np.ndarray:
        """Load where the model's training stands, so that a loop continues as ``learn()`` would.

        SB3's ``collect_rollouts`` continues from what the model holds: ``_last_obs`` (what
        :func:`~rlightning_sb3.start_training` returns), ``_last_episode_starts`` and, for
        RecurrentPPO, ``_last_lstm_states``. ``learn()`` and the buffer helpers keep them up
        to date; this reads the last two for the VecEnv's envs, env ``i`` being
        ``env_ids[i]``:

        * RecurrentPPO: env ``i``'s column of ``model._last_lstm_states`` (a copy) becomes the
          LSTM state :meth:`act` carries into ``env_ids[i]``'s next call and answers as its
          ``buffer_state`` (what ``RecurrentRolloutBuffer`` stores for the step, before the
          ``episode_start`` reset): zeros for a new model, else the state where the last
          ``learn()`` or loop stopped, also when ``start_training`` resets the env;
        * every model: returns ``model._last_episode_starts`` (a copy), to pass as
          :meth:`act`'s ``episode_start`` for the first step (all True after a reset).

        Call it after every :func:`~rlightning_sb3.start_training`, before the loop's first
        :meth:`act`. The env ids become seen (:meth:`reset_state` forgets them); what the
        adapter carries for other env ids is not changed.

        Args:
            env_ids: One distinct str id per env of the model's VecEnv (``model.n_envs``), in
                env order: the ids the loop passes to :meth:`act` and the buffer helpers.

        Returns:
            ``(n_envs,)`` bool numpy array: ``model._last_episode_starts``, copied.

        Raises:
            TypeError: ``env_ids`` is not a sequence of str.
            ValueError: ``env_ids`` repeats an id or does not have one id per env of the
                model; or the model has no training state yet (neither
                :func:`~rlightning_sb3.start_training` nor ``learn()`` was called).
        """
        model: Any = self._facts.model
        n_envs = int(model.n_envs)
        if (
            isinstance(env_ids, Sequence)
            and not isinstance(env_ids, str | bytes)
            and len(env_ids) != n_envs
        ):
            raise ValueError(
                f"env_ids has {len(env_ids)} ids but {type(model).__name__}'s env has {n_envs} "
                f"envs: pass one env id per env, in env order"
            )
        ids = resolve_env_ids(env_ids, n_envs, True)
        starts = model._last_episode_starts
        if starts is None or model._last_obs is None:
            raise ValueError(
                f"{type(model).__name__} has no training state to continue from: call "
                f"start_training(model, total_timesteps) first"
            )
        states = None
        if self._facts.recurrent:
            states = split_rnn_states(model._last_lstm_states)
        self._state.load(ids, states)
        return np.array(starts, dtype=bool)

    # ------------------------------------------------------------------ predict
    @overload
    def predict(
        self,
        observation: Any,
        *,
        env_ids: str,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        action_masks: Any = None,
        ts_env_sent_ns: Any = None,
    ) -> PolicyResponse: ...

    @overload
    def predict(
        self,
        observation: Any,
        *,
        env_ids: Sequence[str],
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        action_masks: Any = None,
        ts_env_sent_ns: Any = None,
    ) -> ResponseBatch[PolicyResponse]: ...

    def predict(
        self,
        observation: Any,
        *args: Any,
        env_ids: str | Sequence[str] | None = None,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        action_masks: Any = None,
        ts_env_sent_ns: Any = None,
    ) -> PolicyResponse | ResponseBatch[PolicyResponse]:
        """Run ``model.predict`` and return one response per env.

        Follows SB3's ``BaseAlgorithm.predict`` (``BasePolicy.predict``; DQN's epsilon-greedy
        ``DQN.predict`` when not deterministic; sb3-contrib's ``RecurrentActorCriticPolicy.predict``
        and ``MaskablePPO.predict``): Box actions come back clipped to the action space, or
        unscaled for a squashing policy (SAC, TD3).

        For the common call -- a numpy batch ``(n_envs, *space.shape)`` for a Box observation
        space that is not an image, no ``state`` or ``action_masks``, and a model and policy
        whose ``predict``, ``obs_to_tensor`` and ``set_training_mode`` are SB3's
        ``BaseAlgorithm``/``BasePolicy`` ones, on their classes and not set on the instances
        (PPO, A2C, SAC, TD3, DDPG with their own policies) -- ``BasePolicy.predict``'s steps
        are run directly: the same tensors, random draws and actions, without the two parts
        of it that change no number and cost ~40% of a small MLP policy's call
        (``set_training_mode(False)`` on every call, which walks every module through
        ``nn.Module.__setattr__``; ``policy.device``, which walks them again). Every module's
        train/eval flag is read on every call instead, and ``set_training_mode(False)`` is
        called when one is set, so the policy is left in eval mode as SB3 leaves it (see
        ``AdapterState.direct_predict`` for the one difference: a ``train()`` override with
        side effects). Any other call (DQN, RecurrentPPO, MaskablePPO, a policy with its own
        ``predict``, a ``torch.compile`` wrapper, images, dicts, lists, one unbatched
        observation) calls ``model.predict``.

        Unlike SB3's ``predict``, it answers with responses, not an ``(actions, state)`` tuple,
        and every argument after ``observation`` is keyword-only:
        ``responses = adapter.predict(obs, env_ids=ids)``, then
        ``adapter.env_actions(responses)`` for what ``VecEnv.step`` takes. A second positional
        argument raises ``TypeError``: ``actions, state = adapter.predict(obs, ids)``, typed out
        of SB3 habit, would otherwise unpack a two-env batch into its two responses.

        Args:
            observation: A batch ``(n_envs, *obs_shape)`` (a dict of such arrays for a Dict
                space), or one unbatched observation ``obs_shape``.
            *args: Refused (``TypeError``): only there to say that ``env_ids`` and the other
                arguments are passed by keyword.
            env_ids: Keyword-only and required. One str id per row of a batch, in row order;
                one str for an unbatched observation.
            state: Recurrent policies only (None otherwise). None starts every env from zeros,
                as SB3 does; else one entry per env (the ``state`` of that env's previous
                response, or None for a fresh env), or SB3's own batched ``(h, c)`` tuple of
                ``(n_layers, n_envs, hidden)`` arrays.
            episode_start: Recurrent policies reset the state where it is True: None (no reset),
                a bool for an unbatched observation, or ``(n_envs,)`` booleans. Ignored by other
                policies, as SB3 ignores it.
            deterministic: Whether to take the mode of the action distribution.
            action_masks: MaskablePPO only: ``(n_envs, mask_dims)`` booleans (``(mask_dims,)`` for
                an unbatched observation), or a list of one ``(mask_dims,)`` row or None per env
                (None: every action allowed, an all-True row). Each response carries its row as
                ``action_mask``.
            ts_env_sent_ns: Optional stamp, nanoseconds since the epoch (``time.time_ns()``) when
                the observation was sent: one int for all envs or one per env. Stored on each
                response as ``ts_env_sent_ns``.

        Returns:
            For a batch, a :class:`~rlightning.ResponseBatch` of ``n_envs`` responses in row
            order (a read-only sequence; its ``stacked`` response holds SB3's batched
            ``actions`` until a response is read); for an unbatched observation, one response.
            Fields: ``action`` (that env's row of the actions SB3 returned, numpy:
            ``action_shape``, a numpy scalar for Discrete in a batch), ``state``
            (recurrent only: the next ``(h, c)``, numpy ``(n_layers, hidden)`` each, to pass back
            through ``state``), ``action_mask`` (when given) and ``ts_env_sent_ns`` (when given).

        Raises:
            TypeError: an argument after ``observation`` is passed by position (SB3's
                ``predict(observation, state, episode_start, deterministic)`` order does not
                apply); ``deterministic`` is not a bool (rule ``flag``: a ``numpy.bool_`` is
                one; an int or a str is refused); ``env_ids`` is missing or of the wrong kind,
                ``observation`` is of the wrong kind, or a
                ``ts_env_sent_ns`` stamp is not an int (the env named).
            ValueError: ``env_ids`` does not match the batch (lengths named) or repeats an id;
                the observation's shape does not fit the model's space or it holds NaN (the envs
                named); ``state`` is given to a policy without one or does not fit the batch
                (the env named); ``episode_start`` is not ``(n_envs,)`` booleans (0/1
                accepted); ``action_masks`` is malformed (shape, values other than 0/1, an env
                whose mask allows no action) or given to a model other than MaskablePPO; or
                ``ts_env_sent_ns`` has another length than the envs or a negative stamp.
        """
        if args:
            raise TypeError(_positional_predict_message(len(args)))
        deterministic = check_flag(deterministic, "deterministic", "SB3PolicyAdapter.predict()")
        if env_ids is None:
            raise TypeError(
                "SB3PolicyAdapter.predict() missing env_ids: pass one str id per row of the "
                "batch (one str for an unbatched observation) by keyword, as in "
                "responses = adapter.predict(obs, env_ids=ids)"
            )
        if type(observation) is not np.ndarray:  # (as_arrays keeps an array as it is)
            observation = as_arrays(observation)  # lists, as SB3's obs_to_tensor converts them
        facts = self._facts
        call = read_call(facts, self._state, observation, env_ids, ts_env_sent_ns, action_masks)
        if not call.ready:  # (the fast path's batch is the observation, already native)
            observation = native_arrays(observation)  # what torch cannot view, a native copy
        ids = call.ids
        masks = call.masks
        starts = (
            None
            if episode_start is None
            else per_env_bools(episode_start, "episode_start", ids, None)
        )
        next_states: list[tuple[np.ndarray, ...]] | None = None
        try:
            if masks is None and state is None and not facts.recurrent:
                # predict_actions' common case, without its call; BasePolicy.predict run
                # directly where it can be (a ready batch, a plain policy), else called
                model = facts.model
                device = self._state.direct_predict(model) if call.ready and facts.direct else None
                if device is not None:
                    actions = direct_predict(model.policy, call.batch, device, deterministic)
                else:
                    actions, _ = model.predict(observation, deterministic=deterministic)
            else:
                extra: dict[str, Any] = {}
                if masks is not None:
                    extra["action_masks"] = masks if call.vectorized else masks[0]
                actions, next_states = predict_actions(
                    facts, observation, state, starts, deterministic, extra, ids
                )
        except (ValueError, RuntimeError):
            if call.checked_by_torch:
                refuse_nan(call.batch, ids)  # names the envs when a NaN made torch raise
            raise
        if not call.seen:  # (a call with the last call's ids changes nothing there)
            self._state.register(ids, call.vectorized)
        fields = (
            {"env_id": None, "env_ids": list(ids), "action": actions}
            if call.vectorized
            else {"env_id": ids[0], "action": actions}
        )
        columns = (
            ()  # the common call: none of the optional fields
            if next_states is None and masks is None and call.stamps is None
            else (("state", next_states), ("action_mask", masks), ("ts_env_sent_ns", call.stamps))
        )
        return answer(call.vectorized, fields, columns)

    # ------------------------------------------------------------------ act
    @overload
    def act(
        self,
        observation: Any,
        env_ids: str,
        *,
        episode_start: Any = None,
        action_masks: Any = None,
        explore: bool = True,
        ts_env_sent_ns: Any = None,
    ) -> PolicyResponse: ...

    @overload
    def act(
        self,
        observation: Any,
        env_ids: Sequence[str],
        *,
        episode_start: Any = None,
        action_masks: Any = None,
        explore: bool = True,
        ts_env_sent_ns: Any = None,
    ) -> ResponseBatch[PolicyResponse]: ...

    def act(
        self,
        observation: Any,
        env_ids: str | Sequence[str],
        *,
        episode_start: Any = None,
        action_masks: Any = None,
        explore: bool = True,
        ts_env_sent_ns: Any = None,
    ) -> PolicyResponse | ResponseBatch[PolicyResponse]:
        """Run the policy as SB3's rollout collection does and return one response per env.

        Runs under ``torch.no_grad()`` with the policy in eval mode, converts the observation as
        ``collect_rollouts`` does (``obs_as_tensor`` for a batch already shaped like the space,
        else ``BasePolicy.obs_to_tensor`` as ``predict``), and draws random numbers exactly as
        SB3 does (the global torch RNG for sampling, numpy's global RNG and
        ``model.action_space``'s RNG for warm-up, epsilon-greedy and action noise), so with the
        same seed and model state a loop of ``act`` calls reproduces SB3's ``collect_rollouts``
        bit for bit. Mutates the adapter (the env ids seen, RecurrentPPO's carried LSTM states)
        and may switch ``model.policy`` to eval mode (``set_training_mode(False)``). Off-policy,
        exploring a Box space with several envs, a ``model.action_noise`` that is not a
        ``VectorizedActionNoise`` is replaced by ``VectorizedActionNoise(noise, n)`` (``n`` the
        larger of ``n_envs`` and ``model.n_envs``), as ``OffPolicyAlgorithm._setup_learn``
        replaces it, so that every env draws its own noise; each env id is bound to one of its
        processes the first time an exploring call holds it (the next free one, in row order:
        a first call of every env in env order binds env ``i`` to process ``i``, as SB3), so a
        call may hold any subset of the envs in any order, each row drawing from its own env's
        process (``noise.noises[i]()``); :meth:`reset_state` with no ids forgets the binding.

        * On-policy (PPO, A2C, TRPO; sb3-contrib MaskablePPO), as
          ``OnPolicyAlgorithm.collect_rollouts``: ``actions, values, log_probs =
          policy(obs_tensor)``; Box env actions clipped to the space, or unscaled when the policy
          squashes.
        * RecurrentPPO, as its ``collect_rollouts``: the env's carried LSTM state goes in with
          ``episode_start`` (the policy zeroes it where True); Box actions are clipped, even a
          squashing policy's (as that ``collect_rollouts`` does); with ``explore=False`` a
          squashing policy's actions are unscaled, as its ``predict`` does.
        * Off-policy (SAC, TD3, DDPG, DQN, ...), as ``OffPolicyAlgorithm._sample_action``: see
          ``explore``.

        Per-env response fields (tensors on the model's device):

        * ``action`` -- what ``env.step`` takes, numpy ``action_shape`` (a numpy int64 scalar for
          Discrete in a batch).
        * ``buffer_action`` -- what SB3 stores: on-policy, the sampled action before clipping
          (``(1,)`` for Discrete, as ``collect_rollouts`` reshapes it); off-policy, the action
          scaled to [-1, 1] (with noise) for Box, the action itself otherwise.
        * ``value``, ``log_prob`` -- on-policy only: 0-d float32 tensors, that env's entry of
          ``values.flatten()`` and ``log_probs``, as ``RolloutBuffer.add`` stores them.
        * ``episode_start`` -- on-policy only: the flag used for this step (a Python bool), as
          ``RolloutBuffer.add`` stores ``_last_episode_starts``.
        * ``state`` / ``buffer_state`` -- RecurrentPPO only: sb3-contrib ``RNNStates(pi=(h, c),
          vf=(h, c))`` of ``(n_lstm_layers, hidden_size)`` tensors: ``state`` is the state after
          this step (the adapter carries it to the env's next call; the buffer helpers use its
          ``vf`` part to bootstrap truncated episodes), ``buffer_state`` the state this step
          started from, before the ``episode_start`` reset (what ``RecurrentRolloutBuffer``
          stores).
        * ``action_mask`` -- MaskablePPO, when ``action_masks`` is given: the env's mask row.
        * ``ts_env_sent_ns`` -- when given.

        Args:
            observation: A batch ``(n_envs, *obs_shape)`` (dict of such arrays for a Dict space)
                as the VecEnv returned it, or one unbatched observation.
            env_ids: One str id per row (in row order); one str for an unbatched observation.
            episode_start: Whether each env's observation starts an episode, as SB3's
                ``_last_episode_starts`` (pass the previous step's ``dones``): a bool for an
                unbatched observation or ``(n_envs,)`` booleans. None: True for env ids this
                adapter has not seen since construction or :meth:`reset_state`, False for the
                others -- right for a loop whose episodes never end between calls, wrong for
                training: pass ``dones``. Checked but not used by off-policy models (SB3's
                off-policy collection has no such input).
            action_masks: MaskablePPO only: ``(n_envs, mask_dims)`` booleans (as
                ``get_action_masks(env)``), or a list of one ``(mask_dims,)`` row or None per
                env (None: every action allowed, an all-True row, as ``MaskableRolloutBuffer``
                stores for an unmasked step); None uses no mask (as ``use_masking=False``).
            explore: True as in training (sampling, warm-up, noise, epsilon; for DQN exactly
                ``DQN.predict(deterministic=False)``); False takes the deterministic action,
                equal to ``model.predict(observation, deterministic=True)``'s (off-policy: that
                action itself, no noise; its ``buffer_action`` for a Box space is
                ``policy.scale_action`` of it).
            ts_env_sent_ns: Optional int stamp (nanoseconds since the epoch), one for all envs or
                one per env.

        Returns:
            A :class:`~rlightning.ResponseBatch` of ``n_envs`` responses in row order (a read-only
            sequence that keeps the batched outputs stacked until an env's response is read:
            :meth:`env_actions` and the buffer helpers use them without splitting), or one
            response for an unbatched observation.

        Raises:
            TypeError: the model is neither on- nor off-policy (e.g. sb3-contrib's ARS), or an
                argument is of the wrong kind (``env_ids``, ``observation``, a
                ``ts_env_sent_ns`` stamp that is not an int, an ``explore`` that is not a bool:
                rule ``flag``, a ``numpy.bool_`` is one).
            ValueError: ``env_ids``, ``episode_start``, ``action_masks``, ``ts_env_sent_ns`` or
                the observation does not fit the batch or the model (the message names the ids
                and shapes); ``action_masks`` are given to a model other than MaskablePPO, hold
                values other than 0/1, or leave an env no legal action; ``episode_start`` holds
                values other than booleans / 0 / 1; a stamp is negative; or the observation
                holds NaN (the envs named); or, off-policy exploring a Box space,
                the call holds env ids for which ``model.action_noise``, a
                ``VectorizedActionNoise``, has no process left (those ids, the bound ones and
                the process count named; raised before any random number is drawn or any id
                bound).

        Note:
            gSDE (``use_sde=True``): SB3 resamples the noise matrix at the start of each rollout
            and every ``sde_sample_freq`` steps; ``act`` does not know where a rollout starts, so
            call ``model.policy.reset_noise(n_envs)`` (off-policy: ``model.actor.reset_noise``)
            where ``collect_rollouts`` would.
        """
        explore = check_flag(explore, "explore", "SB3PolicyAdapter.act()")
        facts = self._facts
        state = self._state
        call = read_call(facts, state, observation, env_ids, ts_env_sent_ns, action_masks)
        ids = call.ids
        if episode_start is not None:
            starts = per_env_bools(episode_start, "episode_start", ids, None).tolist()
        elif call.seen:  # every id was seen: default_starts' answer, without its call
            starts = [False] * call.n_envs
        else:
            starts = state.default_starts(ids)
        if facts.on_policy:
            try:
                fields, columns = act_on_policy(facts, state, call, starts, explore)
            except (ValueError, RuntimeError):
                if call.checked_by_torch:
                    refuse_nan(call.batch, ids)  # names the envs when a NaN made torch raise
                raise
        elif facts.off_policy:
            fields, columns = act_off_policy(facts, state, call, explore)
        else:
            raise TypeError(
                f"act() supports on-policy and off-policy SB3 algorithms; "
                f"{type(facts.model).__name__} is neither (use predict())"
            )
        if not call.seen:  # (a call with the last call's ids changes nothing there)
            state.register(ids, call.vectorized)
        return answer(call.vectorized, fields, columns)

    # ------------------------------------------------------------------ predict_values
    def predict_values(self, observation: Any) -> np.ndarray:
        """Return the critic's value of each observation, as SB3's truncation bootstrap.

        Exactly what ``OnPolicyAlgorithm.collect_rollouts`` computes for a truncated episode's
        terminal observation: ``policy.predict_values(policy.obs_to_tensor(observation)[0])``
        under ``torch.no_grad()``, with the policy in eval mode (as during ``collect_rollouts``;
        the call may switch ``model.policy`` to it, as :meth:`act` does).

        Args:
            observation: A batch ``(n, *obs_shape)`` (a dict of such arrays for a Dict space),
                or one unbatched observation (then ``n`` is 1). Channel-last images and lists
                are converted as ``obs_to_tensor`` converts them.

        Returns:
            float32 numpy ``(n,)`` on the CPU, row ``i`` the value of observation ``i``.

        Raises:
            TypeError: the model has no state-value function (off-policy models such as DQN,
                SAC, TD3: their critics are Q-functions), or is sb3-contrib's RecurrentPPO (its
                values need each env's LSTM state: use the ``state`` of the env's last
                :meth:`act` response, as the buffer helpers do); or the observation is of the
                wrong kind (a dict for a non-Dict space or the reverse).
            ValueError: the observation does not fit the model's observation space (SB3's rule,
                see :meth:`predict`), or is an empty batch.
        """
        facts = self._facts
        model = facts.model
        policy: Any = model.policy
        if facts.recurrent:
            raise TypeError(
                f"{type(model).__name__}'s values depend on each env's LSTM state; "
                f"predict_values() takes none (RecurrentPPO's truncation bootstrap uses the "
                f"'state' of the env's last act() response)"
            )
        if not facts.on_policy or not callable(getattr(policy, "predict_values", None)):
            raise TypeError(
                f"{type(model).__name__} has no state-value function (policy "
                f"{type(policy).__name__} has no predict_values); predict_values() needs an "
                f"on-policy actor-critic model such as PPO, A2C or MaskablePPO"
            )
        observation = as_arrays(observation)
        batch_observation(policy, observation)  # SB3's rule, with errors that name the shapes
        self._state.eval_mode(policy)
        with th.no_grad():
            values = policy.predict_values(policy.obs_to_tensor(observation)[0])
        return np.asarray(values.cpu().numpy().reshape(-1), dtype=np.float32)

    # ------------------------------------------------------------------ env_actions
    def env_actions(
        self, responses: Sequence[PolicyResponse], env_ids: Sequence[str] | None = None
    ) -> np.ndarray:
        """Stack the responses' actions into the array ``VecEnv.step`` takes.

        Args:
            responses: One response per env (from :meth:`act` or :meth:`predict`, possibly
                reordered, e.g. after a transport). A :class:`~rlightning.ResponseBatch` that
                was never split, in env order, gives its stacked ``action`` (copied) without
                building per-env responses.
            env_ids: The VecEnv's env ids in env order (``env_ids[i]`` names env ``i``); None
                keeps the order of ``responses``.

        Returns:
            ``(n_envs, *action_shape)`` numpy array, row ``i`` the action for env ``i`` (a new
            array; the responses are not modified).

        Raises:
            TypeError: ``responses`` is not a sequence of PolicyResponse; ``env_ids`` is not a
                sequence of str; or an action is not numeric, or not an integer for a Discrete
                or MultiDiscrete action space (the env id named).
            ValueError: ``responses`` is empty; two responses have the same env id; a response
                is a stacked batch (``PolicyResponse.stack``: pass its ``unbind()``); ``env_ids``
                repeats an id, has a different length than ``responses`` (both lengths named),
                names envs that have no response, or misses env ids that responses carry (both
                named); a response has no ``action``; or actions of different shapes or dtypes
                (each env's named).
        """
        stacked = stacked_in_order(responses, env_ids)
        if stacked is not None:  # a ResponseBatch never split: its actions are stacked already
            action = stacked.__dict__.get("action")
            if (
                type(action) is np.ndarray
                and action.ndim
                and action.shape[0] == len(stacked.__dict__["env_ids"])
                and action.dtype.kind
                in ACTION_KINDS.get(type(self._facts.model.action_space), "biuf")
            ):
                return action.copy()
        ordered = order_responses(responses, env_ids)
        actions = []
        for response in ordered:
            if "action" not in response.__dict__:
                raise ValueError(f"response for env {response.env_id!r} has no action field")
            actions.append(np.asarray(response.action))
        shapes = {a.shape for a in actions}
        if len(shapes) > 1:
            raise ValueError(
                "actions have different shapes: "
                + ", ".join(
                    f"{r.env_id!r}: {a.shape}" for r, a in zip(ordered, actions, strict=True)
                )
            )
        dtypes = {a.dtype for a in actions}
        space = self._facts.model.action_space
        if len(dtypes) > 1 or next(iter(dtypes)).kind not in ACTION_KINDS.get(type(space), "biuf"):
            refuse_action_dtypes(space, ordered, actions)
        return np.stack(actions)


def _positional_predict_message(n_extra: int) -> str:
    """The ``TypeError`` message of :meth:`SB3PolicyAdapter.predict` given positional arguments.

    Args:
        n_extra: How many positional arguments came after ``observation`` (at least 1).

    Returns:
        The message: what ``predict`` answers with, and the keyword call to write instead.
    """
    return (
        f"SB3PolicyAdapter.predict() takes the observation as its only positional argument, "
        f"got {n_extra} more: pass env_ids (and state, episode_start, deterministic) by keyword, "
        f"as in responses = adapter.predict(obs, env_ids=ids). It answers with responses "
        f"(a PolicyResponse for one observation, a ResponseBatch of one response per env for "
        f"a batch), not SB3's (actions, state) tuple: adapter.env_actions(responses) gives the "
        f"actions VecEnv.step takes, and a recurrent env's next state is its response's 'state'"
    )
