"""The two kinds of ``act`` step: SB3's rollout collection for one batch of observations.

:meth:`SB3PolicyAdapter.act <rlightning_sb3.SB3PolicyAdapter.act>` (whose docstring states what
it computes and raises) reads its input with :func:`~rlightning_sb3._calls.read_call` and runs
the off-policy step (:func:`act_off_policy`, as ``OffPolicyAlgorithm._sample_action``) or the
on-policy one (:func:`act_on_policy`, as ``OnPolicyAlgorithm.collect_rollouts`` and
sb3-contrib's RecurrentPPO and MaskablePPO versions). Both are given the adapter's
:class:`~rlightning_sb3._facts.ModelFacts` (the model and its kind) and its
:class:`~rlightning_sb3._state.AdapterState`, never the adapter, and change the state only
through its methods: the noise envs, RecurrentPPO's carried LSTM states, the cached policy
modules for the eval-mode check.

On the CPU, the on-policy step makes SB3's tensors at less cost than SB3's own calls: a ready
batch (a native numpy array of the space's shape, :meth:`AdapterState.read
<rlightning_sb3._state.AdapterState.read>`) becomes ``th.from_numpy(batch)``, the tensor
``obs_as_tensor``'s ``th.as_tensor(batch, device=cpu)`` returns (the same memory, dtype, shape
and strides; ~6k CPU instructions where ``as_tensor`` parses its arguments for ~18k), and the
sampled actions become ``actions.numpy()``, where ``actions.cpu()`` would return ``actions``
itself. On any other device both are SB3's calls. The forward runs with autograd off, as under
SB3's ``with th.no_grad():``, switched by :mod:`rlightning_sb3._grad` at a sixth of the cost.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.utils import obs_as_tensor

from rlightning import PerEnv
from rlightning_sb3._actions import (
    exploration_noise,
    off_policy_actions,
    on_policy_actions,
)
from rlightning_sb3._calls import CallInput
from rlightning_sb3._grad import grad_enabled, set_grad_enabled
from rlightning_sb3._observations import obs_tensor
from rlightning_sb3._recurrent import split_rnn_states, stack_rnn_states, zero_rnn_state

if TYPE_CHECKING:
    from rlightning_sb3._facts import ModelFacts
    from rlightning_sb3._state import AdapterState

__all__ = ["act_off_policy", "act_on_policy", "action_fields"]


def action_fields(
    ids: list[str], vectorized: bool, env_acts: np.ndarray, buffer_acts: np.ndarray
) -> dict[str, Any]:
    """The first fields of every ``act`` answer, for :func:`~rlightning_sb3._answer.answer`.

    Args:
        ids: The env ids, in row order.
        vectorized: Whether the call was batched.
        env_acts: ``(n_envs, *action_shape)`` actions for ``env.step``.
        buffer_acts: ``(n_envs, ...)`` actions as SB3 stores them.

    Returns:
        For a batch ``{"env_id": None, "env_ids": [...], "action": env_acts, "buffer_action":
        buffer_acts}`` (a new ids list); for an unbatched call ``{"env_id": ids[0], "action":
        <row 0 as an array>, "buffer_action": <row 0>}``. The caller adds its own fields.
    """
    if vectorized:
        return {
            "env_id": None,
            "env_ids": list(ids),
            "action": env_acts,
            "buffer_action": buffer_acts,
        }
    return {
        "env_id": ids[0],
        "action": np.asarray(env_acts[0]),
        "buffer_action": buffer_acts[0],
    }


def act_off_policy(
    facts: ModelFacts, state: AdapterState, call: CallInput, explore: bool
) -> tuple[dict[str, Any], tuple[tuple[str, Any], ...]]:
    """Off-policy step for :meth:`~rlightning_sb3.SB3PolicyAdapter.act`.

    As ``OffPolicyAlgorithm._sample_action`` (:func:`~rlightning_sb3._actions.off_policy_actions`),
    with the exploration noise of :func:`~rlightning_sb3._actions.exploration_noise` given to
    each env's own process (``AdapterState.noise_rows``); its ``model.predict`` is computed
    directly where :meth:`~rlightning_sb3.SB3PolicyAdapter.predict` computes it directly (a
    ready batch, a policy ``AdapterState.direct_predict`` accepts: SAC, TD3, DDPG with their
    own policies; DQN's epsilon-greedy ``predict`` is always called).

    Returns:
        ``(fields, columns)`` for :func:`~rlightning_sb3._answer.answer`.
    """
    off = cast(OffPolicyAlgorithm, facts.model)
    ids = call.ids
    noise = (
        exploration_noise(off, call.n_envs)
        if explore and isinstance(off.action_space, spaces.Box)
        else None
    )
    rows = state.noise_rows(noise, ids)  # (its errors come before any random draw)
    # ``model.predict`` run directly where ``predict`` would run it (the same draws)
    direct = state.direct_predict(off) if call.ready and facts.direct else None
    env_acts, buffer_acts = off_policy_actions(
        off, call.batch, call.n_envs, explore, noise, rows, direct
    )
    fields = action_fields(ids, call.vectorized, env_acts, buffer_acts)
    return fields, (("ts_env_sent_ns", call.stamps),)


def act_on_policy(
    facts: ModelFacts, state: AdapterState, call: CallInput, starts: list[bool], explore: bool
) -> tuple[dict[str, Any], tuple[tuple[str, Any], ...]]:
    """On-policy step for :meth:`~rlightning_sb3.SB3PolicyAdapter.act`.

    Carries RecurrentPPO's LSTM states in the adapter's state (``AdapterState.carry``).

    Returns:
        ``(fields, columns)`` for :func:`~rlightning_sb3._answer.answer`.
    """
    model = facts.model
    policy: Any = model.policy
    ids = call.ids
    masks = call.masks
    state.eval_mode(policy)
    device = model.device
    on_cpu = device.type == "cpu"
    if not call.ready:
        obs = obs_tensor(policy, call.batch, device)
    elif on_cpu:  # obs_as_tensor's tensor, one third of its cost (see the module docstring)
        obs = th.from_numpy(call.batch)
    else:
        obs = obs_as_tensor(call.batch, device)
    states_in: list[Any] | None = None
    states_out: list[Any] | None = None
    grad = grad_enabled()
    set_grad_enabled(False)  # SB3's ``with th.no_grad():``, cheaper (rlightning_sb3._grad)
    try:
        if facts.recurrent:
            states_in = state.states_in(ids, zero_rnn_state(policy))
            episode_starts = th.tensor(starts, dtype=th.float32, device=model.device)
            actions, values, log_probs, lstm_out = policy(
                obs, stack_rnn_states(states_in), episode_starts, not explore
            )
            states_out = split_rnn_states(lstm_out)
        elif facts.maskable:
            actions, values, log_probs = policy(obs, deterministic=not explore, action_masks=masks)
        elif explore:  # as collect_rollouts calls it (deterministic=False is forward's default)
            actions, values, log_probs = policy(obs)
        else:
            actions, values, log_probs = policy(obs, deterministic=True)
    finally:
        set_grad_enabled(grad)
    # ``.cpu()`` of a CPU tensor is the tensor itself; ``.numpy()`` raises TypeError for a tensor
    # on another device, so a policy that answered off the CPU fails loudly, never wrongly.
    sampled = actions.numpy() if on_cpu else actions.cpu().numpy()
    # RecurrentPPO's collect_rollouts clips even a squashed output; its predict unscales it
    env_acts, buffer_acts = on_policy_actions(  # unscale: False for RecurrentPPO exploring
        policy, model.action_space, sampled, not (facts.recurrent and explore)
    )
    if states_out is not None:
        state.carry(ids, states_out)
    # A batch stays batched (a ResponseBatch splits it only when an env's response is read):
    # ``values.ravel()`` (``values.flatten()``'s view of the ``(n_envs, 1)`` output, one torch
    # call cheaper) and ``log_probs`` are ``(n_envs,)``, whose rows are 0-d views.
    fields = action_fields(ids, call.vectorized, env_acts, buffer_acts)
    if call.vectorized:
        fields["value"] = values.ravel()
        fields["log_prob"] = log_probs
        fields["episode_start"] = PerEnv(starts)
    else:
        fields["value"] = values.reshape(())
        fields["log_prob"] = log_probs.reshape(())
        fields["episode_start"] = starts[0]
    columns = (
        ()  # the common step: none of the optional fields
        if states_out is None and masks is None and call.stamps is None
        else (
            ("state", states_out),
            ("buffer_state", states_in),
            ("action_mask", masks),
            ("ts_env_sent_ns", call.stamps),
        )
    )
    return fields, columns
