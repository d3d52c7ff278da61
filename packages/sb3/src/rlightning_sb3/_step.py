"""One ``act`` step: SB3's rollout collection for one batch of observations.

:func:`act_step` is the body of :meth:`SB3PolicyAdapter.act <rlightning_sb3.SB3PolicyAdapter.act>`
(whose docstring states what it computes and raises): the input checks shared with ``predict``,
then the off-policy step (:func:`~rlightning_sb3._actions.off_policy_actions`, as
``OffPolicyAlgorithm._sample_action``) or the on-policy one (:func:`act_on_policy`, as
``OnPolicyAlgorithm.collect_rollouts`` and sb3-contrib's RecurrentPPO and MaskablePPO versions).
It reads and updates the adapter's state: the env ids seen, RecurrentPPO's carried LSTM states,
the cached policy modules for the eval-mode check.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch as th
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.utils import obs_as_tensor

from rlightning import PolicyResponse, ResponseBatch
from rlightning_sb3._actions import (
    off_policy_actions,
    on_policy_buffer_actions,
    on_policy_env_actions,
)
from rlightning_sb3._answer import answer
from rlightning_sb3._batch import per_env_bools
from rlightning_sb3._calls import (
    default_starts,
    read_call,
    register_ids,
)
from rlightning_sb3._observations import obs_tensor, refuse_nan
from rlightning_sb3._recurrent import split_rnn_states, stack_rnn_states, zero_rnn_state

if TYPE_CHECKING:
    from rlightning_sb3.adapter import SB3PolicyAdapter

__all__ = ["act_on_policy", "act_step", "eval_mode"]


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
    batch, n_envs, vectorized, ready, ids, seen, checked_by_torch, stamps, masks = read_call(
        adapter, observation, env_ids, ts_env_sent_ns, action_masks
    )
    starts = (
        default_starts(adapter, ids, seen)
        if episode_start is None
        else per_env_bools(episode_start, "episode_start", ids, None).tolist()
    )
    if adapter._off_policy:
        env_acts, buffer_acts = off_policy_actions(
            cast(OffPolicyAlgorithm, model), batch, n_envs, explore
        )
        if vectorized:
            fields = {"action": env_acts, "buffer_action": buffer_acts}
        else:
            fields = {"action": np.asarray(env_acts[0]), "buffer_action": buffer_acts[0]}
        columns: tuple[tuple[str, Any], ...] = ()
    elif adapter._on_policy:
        try:
            fields, columns = act_on_policy(
                adapter, batch, ready, ids, starts, masks, explore, vectorized
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
    register_ids(adapter, ids, vectorized, seen)
    return answer(ids, vectorized, fields, (*columns, ("ts_env_sent_ns", stamps)))


def act_on_policy(
    adapter: SB3PolicyAdapter,
    batch: Any,
    ready: bool,
    ids: list[str],
    starts: list[bool],
    masks: np.ndarray | None,
    explore: bool,
    vectorized: bool,
) -> tuple[dict[str, Any], tuple[tuple[str, Any], ...]]:
    """On-policy step for :meth:`~rlightning_sb3.SB3PolicyAdapter.act`.

    Returns:
        ``(fields, columns)`` for :func:`~rlightning_sb3._answer.answer` (without the stamps).
    """
    model = adapter._model
    policy: Any = model.policy
    eval_mode(adapter, policy)
    obs = obs_as_tensor(batch, model.device) if ready else obs_tensor(policy, batch, model.device)
    states_in: list[Any] | None = None
    states_out: list[Any] | None = None
    with th.no_grad():
        if adapter._recurrent:
            zero = zero_rnn_state(policy)
            states_in = [adapter._carried.get(env_id) or zero for env_id in ids]
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
        adapter._carried.update(zip(ids, states_out, strict=True))
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


def eval_mode(adapter: SB3PolicyAdapter, policy: Any) -> None:
    """Put ``policy`` in eval mode as ``collect_rollouts`` does, only when it is not already.

    SB3 calls ``policy.set_training_mode(False)`` once at the start of each rollout (and
    ``train()`` switches back with ``set_training_mode(True)``); calling it every step costs
    more than a small MLP's forward pass. Every module of the policy is checked (a
    ``train()`` on the policy or on any of its submodules is seen), and the call is made
    when one of them is in training mode. The modules are listed once per policy object: a
    submodule assigned into the policy after the first ``act`` is not checked, so call
    ``model.policy.set_training_mode(False)`` after such surgery, as SB3's next rollout would.
    """
    cached = adapter._policy_modules
    if cached is None or cached[0] is not policy:
        cached = adapter._policy_modules = (policy, tuple(policy.modules()))
    for module in cached[1]:
        if module.training:
            policy.set_training_mode(False)
            return
