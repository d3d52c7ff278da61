"""One ``act`` step: SB3's rollout collection for one batch of observations.

:func:`act_step` is the body of :meth:`SB3PolicyAdapter.act <rlightning_sb3.SB3PolicyAdapter.act>`
(whose docstring states what it computes and raises): the input checks shared with ``predict``,
then the off-policy step (:func:`~rlightning_sb3._actions.off_policy_actions`, as
``OffPolicyAlgorithm._sample_action``) or the on-policy one (:func:`act_on_policy`, as
``OnPolicyAlgorithm.collect_rollouts`` and sb3-contrib's RecurrentPPO and MaskablePPO versions).
It changes the adapter's state only through its :class:`~rlightning_sb3._state.AdapterState`
methods: the env ids seen, RecurrentPPO's carried LSTM states, the cached policy modules for the
eval-mode check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.utils import obs_as_tensor

from rlightning import PolicyResponse, ResponseBatch
from rlightning_sb3._actions import (
    exploration_noise,
    off_policy_actions,
    on_policy_buffer_actions,
    on_policy_env_actions,
)
from rlightning_sb3._answer import answer
from rlightning_sb3._batch import per_env_bools
from rlightning_sb3._calls import CallInput, read_call
from rlightning_sb3._observations import obs_tensor, refuse_nan
from rlightning_sb3._recurrent import split_rnn_states, stack_rnn_states, zero_rnn_state

if TYPE_CHECKING:
    from rlightning_sb3.adapter import SB3PolicyAdapter

__all__ = ["act_on_policy", "act_step"]


def act_step(
    adapter: SB3PolicyAdapter,
    observation: Any,
    env_ids: Any,
    episode_start: Any,
    action_masks: Any,
    explore: bool,
    ts_env_sent_ns: Any,
) -> PolicyResponse | ResponseBatch[PolicyResponse]:
    """Run :meth:`SB3PolicyAdapter.act <rlightning_sb3.SB3PolicyAdapter.act>` (same arguments).

    Returns:
        What ``act`` returns; see its docstring for the fields and the errors raised.
    """
    model = adapter._model
    state = adapter._state
    call = read_call(adapter, observation, env_ids, ts_env_sent_ns, action_masks)
    ids = call.ids
    starts = (
        state.default_starts(ids, call.seen)
        if episode_start is None
        else per_env_bools(episode_start, "episode_start", ids, None).tolist()
    )
    if adapter._off_policy:
        off = cast(OffPolicyAlgorithm, model)
        noise = (
            exploration_noise(off, call.n_envs)
            if explore and isinstance(off.action_space, spaces.Box)
            else None
        )
        env_acts, buffer_acts = off_policy_actions(
            off, call.batch, call.n_envs, explore, noise, state.noise_rows(noise, ids)
        )
        if call.vectorized:
            fields = {"action": env_acts, "buffer_action": buffer_acts}
        else:
            fields = {"action": np.asarray(env_acts[0]), "buffer_action": buffer_acts[0]}
        columns: tuple[tuple[str, Any], ...] = ()
    elif adapter._on_policy:
        try:
            fields, columns = act_on_policy(adapter, call, starts, explore)
        except (ValueError, RuntimeError):
            if call.checked_by_torch:
                refuse_nan(call.batch, ids)  # names the envs when a NaN made torch raise
            raise
    else:
        raise TypeError(
            f"act() supports on-policy and off-policy SB3 algorithms; "
            f"{type(model).__name__} is neither (use predict())"
        )
    state.register(ids, call.vectorized, call.seen)
    return answer(ids, call.vectorized, fields, (*columns, ("ts_env_sent_ns", call.stamps)))


def act_on_policy(
    adapter: SB3PolicyAdapter, call: CallInput, starts: list[bool], explore: bool
) -> tuple[dict[str, Any], tuple[tuple[str, Any], ...]]:
    """On-policy step for :meth:`~rlightning_sb3.SB3PolicyAdapter.act`.

    Carries RecurrentPPO's LSTM states in the adapter's state (``AdapterState.carry``).

    Returns:
        ``(fields, columns)`` for :func:`~rlightning_sb3._answer.answer` (without the stamps).
    """
    model = adapter._model
    state = adapter._state
    policy: Any = model.policy
    ids = call.ids
    masks = call.masks
    state.eval_mode(policy)
    obs = (
        obs_as_tensor(call.batch, model.device)
        if call.ready
        else obs_tensor(policy, call.batch, model.device)
    )
    states_in: list[Any] | None = None
    states_out: list[Any] | None = None
    with th.no_grad():
        if adapter._recurrent:
            states_in = state.states_in(ids, zero_rnn_state(policy))
            episode_starts = th.tensor(starts, dtype=th.float32, device=model.device)
            actions, values, log_probs, lstm_out = policy(
                obs, stack_rnn_states(states_in), episode_starts, not explore
            )
            states_out = split_rnn_states(lstm_out)
        elif adapter._maskable:
            actions, values, log_probs = policy(obs, deterministic=not explore, action_masks=masks)
        else:
            actions, values, log_probs = policy(obs, deterministic=not explore)
    sampled = actions.cpu().numpy()
    # RecurrentPPO's collect_rollouts clips even a squashed output; its predict unscales it
    env_acts = on_policy_env_actions(
        policy, model.action_space, sampled, unscale=not (adapter._recurrent and explore)
    )
    buffer_acts = on_policy_buffer_actions(model.action_space, sampled)
    if states_out is not None:
        state.carry(ids, states_out)
    # A batch stays batched (a ResponseBatch splits it only when an env's response is read):
    # ``values.flatten()`` and ``log_probs`` are ``(n_envs,)``, whose rows are 0-d views.
    if call.vectorized:
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
