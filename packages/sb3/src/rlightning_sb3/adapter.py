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
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Sequence
from typing import Any, cast, overload

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm
from stable_baselines3.common.utils import obs_as_tensor

from rlightning import PerEnv, PolicyResponse, ResponseBatch
from rlightning_sb3._actions import (
    check_action_masks,
    off_policy_actions,
    on_policy_buffer_actions,
    on_policy_env_actions,
)
from rlightning_sb3._batch import (
    as_arrays,
    batch_observation,
    obs_tensor,
    order_responses,
    per_env_bools,
    per_env_stamps,
    refuse_nan,
    resolve_env_ids,
    stacked_in_order,
)
from rlightning_sb3._recurrent import (
    predict_state,
    split_numpy_states,
    split_rnn_states,
    stack_rnn_states,
    zero_rnn_state,
)
from rlightning_sb3._versions import SB3_CONTRIB_SUPPORTED, check_version, installed_version

__all__ = ["SB3PolicyAdapter"]

#: numpy dtype kinds an env action may have, per action space: Discrete and MultiDiscrete take
#: integers (gymnasium's ``contains`` needs an integer dtype; SB3's categorical distributions
#: sample int64); other spaces take numbers (SB3's ``BernoulliDistribution`` samples MultiBinary
#: actions as floats).
_ACTION_KINDS: dict[type[spaces.Space[Any]], str] = {
    spaces.Discrete: "iu",
    spaces.MultiDiscrete: "iu",
}


@functools.cache
def _check_contrib_version(module_version: str | None) -> None:
    """Check the imported sb3-contrib against the supported range (once per process)."""
    check_version(
        "sb3-contrib", installed_version("sb3-contrib", module_version), SB3_CONTRIB_SUPPORTED
    )


def _contrib_kind(model: BaseAlgorithm) -> str | None:
    """Return ``"recurrent"``/``"maskable"`` for sb3-contrib's RecurrentPPO/MaskablePPO, else None.

    sb3-contrib is never imported here: a model of its classes can only exist once it is.
    """
    contrib = sys.modules.get("sb3_contrib")
    if contrib is None:
        return None
    _check_contrib_version(getattr(contrib, "__version__", None))
    if isinstance(model, contrib.RecurrentPPO):
        return "recurrent"
    if isinstance(model, contrib.MaskablePPO):
        return "maskable"
    return None


def _answer(
    ids: list[str],
    vectorized: bool,
    fields: dict[str, Any],
    columns: tuple[tuple[str, list[Any] | np.ndarray | None], ...],
) -> PolicyResponse | ResponseBatch[PolicyResponse]:
    """Build the answer: a ResponseBatch for a batch, one PolicyResponse for an unbatched call.

    Args:
        ids: The env ids, in row order (unique: checked by the caller).
        vectorized: Whether the call was batched.
        fields: The fields every env has, batched (leading dimension ``n_envs``) for a batch, or
            the one env's values for an unbatched call. Mutated (the columns are added).
        columns: ``(name, column)`` pairs of optional fields given as one entry per env (a list,
            stored as a :class:`~rlightning.PerEnv`, or an array with ``n_envs`` rows); None
            ones are left out. Set after ``fields``, in order, so every response has the same
            field order.

    Returns:
        A trusted :class:`~rlightning.ResponseBatch` (stacked: ``env_ids`` plus ``fields``) or a
        :class:`~rlightning.PolicyResponse`.
    """
    for name, column in columns:
        if column is not None:
            if not vectorized:
                fields[name] = column[0]
            else:
                fields[name] = PerEnv(column) if type(column) is list else column
    if not vectorized:
        return PolicyResponse(ids[0], **fields)
    # The field names are this module's own (none is reserved), so the stacked response is
    # filled directly rather than through the constructor's keyword checks.
    stacked = PolicyResponse(None)
    data = stacked.__dict__
    data["env_ids"] = list(ids)
    data.update(fields)
    return ResponseBatch.trusted(stacked)


def _nan_checked_by_torch() -> bool:
    """Whether torch.distributions validates its arguments by default (torch's own default).

    SB3's on-policy policies sample from ``torch.distributions`` objects built with the default
    validation, which refuses NaN parameters; a NaN in an observation reaches them (a NaN row
    stays NaN through SB3's networks). With validation on, the adapter need not scan every
    observation for NaN: it does so only when the forward pass raises, to name the envs.
    ``torch.distributions.Distribution.set_default_validate_args(False)`` turns it off, and
    the adapter then scans every batch.
    """
    return bool(getattr(th.distributions.Distribution, "_validate_args", False))


class SB3PolicyAdapter:
    """Answer for a Stable-Baselines3 model with one :class:`~rlightning.PolicyResponse` per env.

    Works with every SB3 algorithm for :meth:`predict`; :meth:`act` supports on-policy
    algorithms (PPO, A2C, and sb3-contrib's RecurrentPPO and MaskablePPO, TRPO) and off-policy ones
    (SAC, TD3, DDPG, DQN, and sb3-contrib's TQC, QR-DQN, CrossQ), with every action space SB3
    supports (Discrete, Box, MultiDiscrete, MultiBinary) and flat, Dict (``MultiInputPolicy``) and
    image (``CnnPolicy``) observations.

    The adapter holds one piece of state per env id: for RecurrentPPO, the LSTM state that
    :meth:`act` carries to that env's next call; for every model, whether the env id was seen
    before (the default ``episode_start``). :meth:`reset_state` forgets it.

    Args:
        model: A Stable-Baselines3 (or sb3-contrib) model. It is used, not copied: training it
            changes what the adapter answers.

    Raises:
        TypeError: ``model`` is not an SB3 ``BaseAlgorithm``.
        ImportError: sb3-contrib is imported but outside the supported range.

    Examples:
        >>> from stable_baselines3 import PPO
        >>> model = PPO("MlpPolicy", "CartPole-v1", n_steps=64, seed=0)
        >>> adapter = SB3PolicyAdapter(model)
        >>> env = model.get_env()
        >>> responses = adapter.predict(env.reset(), ["env-0"], deterministic=True)
        >>> responses[0].env_id, responses[0].action.shape
        ('env-0', ())
    """

    def __init__(self, model: BaseAlgorithm) -> None:
        if not isinstance(model, BaseAlgorithm):
            raise TypeError(
                f"model must be a Stable-Baselines3 model (a BaseAlgorithm such as PPO or SAC), "
                f"got {type(model).__name__}"
            )
        self._model = model
        kind = _contrib_kind(model)
        self._recurrent = kind == "recurrent"
        self._maskable = kind == "maskable"
        self._off_policy = isinstance(model, OffPolicyAlgorithm)
        self._on_policy = isinstance(model, OnPolicyAlgorithm)
        #: env id -> carried LSTM state (RecurrentPPO) or None (env seen, nothing carried).
        self._carried: dict[str, Any] = {}
        #: The env ids of the last successful batched call, all of them in ``_carried``: a call
        #: with an equal list skips the id checks and needs no new registration (see
        #: :meth:`_resolve_ids`). Cleared by :meth:`reset_state`.
        self._last_ids: list[str] | None = None
        #: ``(policy, every module of it)`` as of the first :meth:`act`, for the eval-mode check.
        self._policy_modules: tuple[Any, tuple[th.nn.Module, ...]] | None = None
        #: ``(observation space, its shape if a Box else None)`` for :meth:`_batch`'s fast path.
        self._box_shape: tuple[Any, tuple[int, ...] | None] | None = None

    # ------------------------------------------------------------------ properties
    @property
    def model(self) -> BaseAlgorithm:
        """The wrapped SB3 model."""
        return self._model

    @property
    def is_recurrent(self) -> bool:
        """Whether the model is sb3-contrib's RecurrentPPO (responses then carry LSTM states)."""
        return self._recurrent

    @property
    def is_maskable(self) -> bool:
        """Whether the model is sb3-contrib's MaskablePPO (``action_masks`` are then accepted)."""
        return self._maskable

    @property
    def is_off_policy(self) -> bool:
        """Whether the model is an ``OffPolicyAlgorithm`` (SAC, TD3, DDPG, DQN, ...)."""
        return self._off_policy

    def reset_state(self, env_ids: str | Sequence[str] | None = None) -> None:
        """Forget what the adapter carries for some env ids (all when None).

        A forgotten env starts again from a zero LSTM state and a default ``episode_start`` of
        True, as a fresh ``RecurrentPPO``/``_setup_learn`` starts.

        Args:
            env_ids: One id, several, or None for every env. Unknown ids are ignored.
        """
        self._last_ids = None
        if env_ids is None:
            self._carried.clear()
            return
        for env_id in [env_ids] if isinstance(env_ids, str) else env_ids:
            self._carried.pop(env_id, None)

    # ------------------------------------------------------------------ input checks
    def _batch(self, policy: Any, observation: Any) -> tuple[Any, int, bool, bool]:
        """:func:`batch_observation`, plus whether the batch is ready for ``obs_as_tensor``.

        Fast path for the common step: a numpy array of shape ``(n_envs, *space.shape)`` for a
        Box observation space is a batch by SB3's rule (``is_vectorized_box_observation``; no
        ``maybe_transpose`` applies to an array of the space's own shape) and is what
        ``collect_rollouts`` hands to ``obs_as_tensor``, so the general checks are skipped.

        Returns:
            ``(batch, n_envs, vectorized, ready)``; ``ready`` True means the batch goes to
            ``obs_as_tensor`` as it is (False: let :func:`obs_tensor` decide).
        """
        space = policy.observation_space
        cached = self._box_shape
        if cached is None or cached[0] is not space:  # a space's shape never changes
            cached = self._box_shape = (space, space.shape if type(space) is spaces.Box else None)
        shape = cached[1]
        if (
            shape is not None
            and type(observation) is np.ndarray
            and observation.ndim == len(shape) + 1
            and observation.shape[1:] == shape
            and observation.shape[0]
        ):
            return observation, observation.shape[0], True, True
        batch, n_envs, vectorized = batch_observation(policy, observation)
        return batch, n_envs, vectorized, False

    def _resolve_ids(
        self, env_ids: object, n_envs: int, vectorized: bool
    ) -> tuple[list[str], bool]:
        """Check ``env_ids`` (:func:`resolve_env_ids`); return them and whether all were seen.

        A loop passes the same ids every step: a list equal to the last successful call's ids
        was checked then, and every one of its ids is known to ``_carried``, so the checks and
        the per-env look-ups are skipped.
        """
        last = self._last_ids
        if (
            last is not None
            and vectorized
            and type(env_ids) is list
            and len(last) == n_envs
            and env_ids == last
        ):
            return last, True
        return resolve_env_ids(env_ids, n_envs, vectorized), False

    def _register(self, ids: list[str], vectorized: bool, seen: bool) -> None:
        """Mark ``ids`` as seen (after a successful call) and remember them for the next call."""
        if not seen:
            carried = self._carried
            for env_id in ids:
                carried.setdefault(env_id, None)
        if vectorized:
            self._last_ids = ids

    def _default_starts(self, ids: Sequence[str], seen: bool) -> list[bool]:
        if seen:
            return [False] * len(ids)
        carried = self._carried
        return [env_id not in carried for env_id in ids]

    def _eval_mode(self, policy: Any) -> None:
        """Put ``policy`` in eval mode as ``collect_rollouts`` does, only when it is not already.

        SB3 calls ``policy.set_training_mode(False)`` once at the start of each rollout (and
        ``train()`` switches back with ``set_training_mode(True)``); calling it every step costs
        more than a small MLP's forward pass. Every module of the policy is checked (a
        ``train()`` on the policy or on any of its submodules is seen), and the call is made
        when one of them is in training mode. The modules are listed once per policy object: a
        submodule assigned into the policy after the first :meth:`act` is not checked, so call
        ``model.policy.set_training_mode(False)`` after such surgery, as SB3's next rollout would.
        """
        cached = self._policy_modules
        if cached is None or cached[0] is not policy:
            cached = self._policy_modules = (policy, tuple(policy.modules()))
        for module in cached[1]:
            if module.training:
                policy.set_training_mode(False)
                return

    def _check_no_state(self, state: Any, ids: list[str]) -> None:
        """Check ``predict``'s ``state`` for a policy without one: one None per env is accepted.

        SB3's ``BasePolicy.predict`` ignores ``state`` for a feed-forward policy; the adapter
        accepts only what a generic loop passes back (``[r.state ...]``-style, all None, one per
        env) and refuses anything else, which would otherwise be dropped silently.

        Raises:
            ValueError: ``state`` holds a value, or has another length than the envs.
        """
        model = self._model
        if not (isinstance(state, Sequence) and all(s is None for s in state)):
            raise ValueError(
                f"state is only used by recurrent policies (sb3-contrib's RecurrentPPO); "
                f"{type(model).__name__}'s policy has none, pass state=None"
            )
        if len(state) != len(ids):
            raise ValueError(
                f"state must be None or one None per env ({len(ids)} for {ids}) for "
                f"{type(model).__name__}'s policy, which has no state; got a list of length "
                f"{len(state)}"
            )

    # ------------------------------------------------------------------ predict
    @overload
    def predict(
        self,
        observation: Any,
        env_ids: str,
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        *,
        action_masks: Any = None,
        ts_env_sent_ns: Any = None,
    ) -> PolicyResponse: ...

    @overload
    def predict(
        self,
        observation: Any,
        env_ids: Sequence[str],
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        *,
        action_masks: Any = None,
        ts_env_sent_ns: Any = None,
    ) -> ResponseBatch[PolicyResponse]: ...

    def predict(
        self,
        observation: Any,
        env_ids: str | Sequence[str],
        state: Any = None,
        episode_start: Any = None,
        deterministic: bool = False,
        *,
        action_masks: Any = None,
        ts_env_sent_ns: Any = None,
    ) -> PolicyResponse | ResponseBatch[PolicyResponse]:
        """Run ``model.predict`` and return one response per env.

        Follows SB3's ``BaseAlgorithm.predict`` (``BasePolicy.predict``; DQN's epsilon-greedy
        ``DQN.predict`` when not deterministic; sb3-contrib's ``RecurrentActorCriticPolicy.predict``
        and ``MaskablePPO.predict``): Box actions come back clipped to the action space, or
        unscaled for a squashing policy (SAC, TD3).

        Args:
            observation: A batch ``(n_envs, *obs_shape)`` (a dict of such arrays for a Dict
                space), or one unbatched observation ``obs_shape``.
            env_ids: One str id per row of a batch, in row order; one str for an unbatched
                observation.
            state: Recurrent policies only (None otherwise). None starts every env from zeros,
                as SB3 does; else one entry per env (the ``state`` of that env's previous
                response, or None for a fresh env), or SB3's own batched ``(h, c)`` tuple of
                ``(n_layers, n_envs, hidden)`` arrays.
            episode_start: Recurrent policies reset the state where it is True: None (no reset),
                a bool for an unbatched observation, or ``(n_envs,)`` booleans. Ignored by other
                policies, as SB3 ignores it.
            deterministic: Whether to take the mode of the action distribution.
            action_masks: MaskablePPO only: ``(n_envs, mask_dims)`` booleans (``(mask_dims,)`` for
                an unbatched observation). Each response carries its row as ``action_mask``.
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
            TypeError: ``env_ids`` or ``observation`` is of the wrong kind, or a
                ``ts_env_sent_ns`` stamp is not an int (the env named).
            ValueError: ``env_ids`` does not match the batch (lengths named) or repeats an id;
                the observation's shape does not fit the model's space or it holds NaN (the envs
                named); ``state`` is given to a policy without one or does not fit the batch
                (the env named); ``episode_start`` is not ``(n_envs,)`` booleans (0/1
                accepted); ``action_masks`` is malformed (shape, values other than 0/1, an env
                whose mask allows no action) or given to a model other than MaskablePPO; or
                ``ts_env_sent_ns`` has another length than the envs or a negative stamp.
        """
        model = self._model
        observation = as_arrays(observation)  # lists, as SB3's obs_to_tensor converts them
        batch, n_envs, vectorized, _ready = self._batch(model.policy, observation)
        ids, seen = self._resolve_ids(env_ids, n_envs, vectorized)
        checked_by_torch = self._on_policy and _nan_checked_by_torch()
        if not checked_by_torch:
            refuse_nan(batch, ids)
        stamps = per_env_stamps(ts_env_sent_ns, ids)
        masks = (
            None
            if action_masks is None
            else check_action_masks(self._model, self._maskable, action_masks, ids)
        )
        starts = (
            None
            if episode_start is None
            else per_env_bools(episode_start, "episode_start", ids, None)
        )
        extra: dict[str, Any] = {}
        if masks is not None:
            extra["action_masks"] = masks if vectorized else masks[0]
        next_states: list[tuple[np.ndarray, ...]] | None = None
        try:
            actions, next_states = self._predict(
                observation, state, starts, deterministic, extra, ids
            )
        except (ValueError, RuntimeError):
            if checked_by_torch:
                refuse_nan(batch, ids)  # names the envs when a NaN made torch raise
            raise
        self._register(ids, vectorized, seen)
        return _answer(
            ids,
            vectorized,
            {"action": actions},
            (("state", next_states), ("action_mask", masks), ("ts_env_sent_ns", stamps)),
        )

    def _predict(
        self,
        observation: Any,
        state: Any,
        starts: Any,
        deterministic: bool,
        extra: dict[str, Any],
        ids: list[str],
    ) -> tuple[np.ndarray, list[tuple[np.ndarray, ...]] | None]:
        """``model.predict`` for :meth:`predict`; returns the actions and the next states."""
        model = self._model
        next_states: list[tuple[np.ndarray, ...]] | None = None
        if self._recurrent:
            sb3_state = predict_state(self._model.policy, state, ids)
            actions, new_state = model.predict(
                observation,
                state=sb3_state,
                episode_start=starts,
                deterministic=deterministic,
                **extra,
            )
            assert new_state is not None  # a recurrent policy always returns its state
            next_states = split_numpy_states(new_state)
        else:
            if state is not None:
                self._check_no_state(state, ids)
            actions, _ = model.predict(observation, deterministic=deterministic, **extra)
        return actions, next_states

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
        and may switch ``model.policy`` to eval mode (``set_training_mode(False)``).

        * On-policy (PPO, A2C, TRPO; sb3-contrib MaskablePPO), as
          ``OnPolicyAlgorithm.collect_rollouts``: ``actions, values, log_probs =
          policy(obs_tensor)``; Box env actions clipped to the space, or unscaled when the policy
          squashes.
        * RecurrentPPO, as its ``collect_rollouts``: the env's carried LSTM state goes in with
          ``episode_start`` (the policy zeroes it where True); Box actions are clipped.
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
                ``get_action_masks(env)``); None uses no mask (as ``use_masking=False``).
            explore: True as in training (sampling, warm-up, noise, epsilon); False takes the
                deterministic action (off-policy: ``predict(deterministic=True)``, no noise).
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
                ``ts_env_sent_ns`` stamp that is not an int).
            ValueError: ``env_ids``, ``episode_start``, ``action_masks``, ``ts_env_sent_ns`` or
                the observation does not fit the batch or the model (the message names the ids
                and shapes); ``action_masks`` are given to a model other than MaskablePPO, hold
                values other than 0/1, or leave an env no legal action; ``episode_start`` holds
                values other than booleans / 0 / 1; a stamp is negative; or the observation
                holds NaN (the envs named).

        Note:
            gSDE (``use_sde=True``): SB3 resamples the noise matrix at the start of each rollout
            and every ``sde_sample_freq`` steps; ``act`` does not know where a rollout starts, so
            call ``model.policy.reset_noise(n_envs)`` (off-policy: ``model.actor.reset_noise``)
            where ``collect_rollouts`` would.
        """
        model = self._model
        batch, n_envs, vectorized, ready = self._batch(model.policy, observation)
        ids, seen = self._resolve_ids(env_ids, n_envs, vectorized)
        checked_by_torch = self._on_policy and _nan_checked_by_torch()
        if not checked_by_torch:
            refuse_nan(batch, ids)
        stamps = per_env_stamps(ts_env_sent_ns, ids)
        masks = (
            None
            if action_masks is None
            else check_action_masks(self._model, self._maskable, action_masks, ids)
        )
        starts = (
            self._default_starts(ids, seen)
            if episode_start is None
            else per_env_bools(episode_start, "episode_start", ids, None).tolist()
        )
        if self._off_policy:
            env_acts, buffer_acts = off_policy_actions(
                cast(OffPolicyAlgorithm, model), batch, n_envs, explore
            )
            if vectorized:
                fields = {"action": env_acts, "buffer_action": buffer_acts}
            else:
                fields = {"action": np.asarray(env_acts[0]), "buffer_action": buffer_acts[0]}
            columns: tuple[tuple[str, Any], ...] = ()
        elif self._on_policy:
            try:
                fields, columns = self._act_on_policy(
                    batch, ready, ids, starts, masks, explore, vectorized
                )
            except (ValueError, RuntimeError):
                if checked_by_torch:
                    refuse_nan(batch, ids)  # names the envs when a NaN made torch raise
                raise
        else:
            raise TypeError(
                f"act() supports on-policy and off-policy SB3 algorithms; "
                f"{type(model).__name__} is neither (use predict())"
            )
        self._register(ids, vectorized, seen)
        return _answer(ids, vectorized, fields, (*columns, ("ts_env_sent_ns", stamps)))

    def _act_on_policy(
        self,
        batch: Any,
        ready: bool,
        ids: list[str],
        starts: list[bool],
        masks: np.ndarray | None,
        explore: bool,
        vectorized: bool,
    ) -> tuple[dict[str, Any], tuple[tuple[str, Any], ...]]:
        """On-policy step for :meth:`act`.

        Returns:
            ``(fields, columns)`` for :func:`_answer` (without the stamps).
        """
        model = self._model
        policy: Any = model.policy
        self._eval_mode(policy)
        obs = (
            obs_as_tensor(batch, model.device) if ready else obs_tensor(policy, batch, model.device)
        )
        states_in: list[Any] | None = None
        states_out: list[Any] | None = None
        with th.no_grad():
            if self._recurrent:
                zero = zero_rnn_state(policy)
                states_in = [self._carried.get(env_id) or zero for env_id in ids]
                episode_starts = th.tensor(starts, dtype=th.float32, device=model.device)
                actions, values, log_probs, lstm_out = policy(
                    obs, stack_rnn_states(states_in), episode_starts, not explore
                )
                states_out = split_rnn_states(lstm_out)
            elif self._maskable:
                actions, values, log_probs = policy(
                    obs, deterministic=not explore, action_masks=masks
                )
            else:
                actions, values, log_probs = policy(obs, deterministic=not explore)
        sampled = actions.cpu().numpy()
        env_acts = on_policy_env_actions(
            policy, model.action_space, sampled, unscale=not self._recurrent
        )
        buffer_acts = on_policy_buffer_actions(model.action_space, sampled)
        if states_out is not None:
            self._carried.update(zip(ids, states_out, strict=True))
        # A batch stays batched (a ResponseBatch splits it only when an env's response is read):
        # ``values.flatten()`` and ``log_probs`` are ``(n_envs,)``, whose rows are 0-d views.
        if vectorized:
            fields = {
                "action": env_acts,
                "buffer_action": buffer_acts,
                "value": values.flatten(),
                "log_prob": log_probs,
            }
        else:
            fields = {
                "action": np.asarray(env_acts[0]),
                "buffer_action": buffer_acts[0],
                "value": values.reshape(()),
                "log_prob": log_probs.reshape(()),
            }
        columns = (
            ("episode_start", starts),
            ("state", states_out),
            ("buffer_state", states_in),
            ("action_mask", masks),
        )
        return fields, columns

    # ------------------------------------------------------------------ env_actions
    def _refuse_action_dtypes(
        self, ordered: list[PolicyResponse], actions: list[np.ndarray]
    ) -> None:
        """Raise for actions of a kind the action space does not take, or of mixed dtypes.

        Raises:
            TypeError: an action is not numeric, or not an integer for a Discrete or
                MultiDiscrete space (gymnasium's ``contains`` needs an integer dtype there).
            ValueError: the actions have different dtypes (``np.stack`` would upcast them).
        """
        space = self._model.action_space
        kinds = _ACTION_KINDS.get(type(space), "biuf")
        for response, action in zip(ordered, actions, strict=True):
            if action.dtype.kind not in kinds:
                wanted = "integers" if kinds != "biuf" else "numbers"
                raise TypeError(
                    f"action for env {response.env_id!r} must hold {wanted} for {space} (what "
                    f"VecEnv.step passes to the env), got {type(response.action).__name__} "
                    f"{response.action!r} of dtype {action.dtype}"
                )
        raise ValueError(
            "actions have different dtypes (stacking would convert them silently): "
            + ", ".join(f"{r.env_id!r}: {a.dtype}" for r, a in zip(ordered, actions, strict=True))
        )

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
                and action.dtype.kind in _ACTION_KINDS.get(type(self._model.action_space), "biuf")
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
        if len(dtypes) > 1 or next(iter(dtypes)).kind not in _ACTION_KINDS.get(
            type(self._model.action_space), "biuf"
        ):
            self._refuse_action_dtypes(ordered, actions)
        return np.stack(actions)
