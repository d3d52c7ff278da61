"""``model.predict`` for :meth:`SB3PolicyAdapter.predict <rlightning_sb3.SB3PolicyAdapter.predict>`.

``predict`` (whose docstring states what it computes and raises) reads its input with
:func:`~rlightning_sb3._calls.read_call` and calls SB3's ``BaseAlgorithm.predict`` itself in
the common case; :func:`predict_actions` calls it with the rest (sb3-contrib's RecurrentPPO
with the envs' LSTM states, MaskablePPO with their action masks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch as th
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.utils import obs_as_tensor

from rlightning_sb3._grad import grad_enabled, set_grad_enabled
from rlightning_sb3._recurrent import predict_state, split_numpy_states

if TYPE_CHECKING:
    from rlightning_sb3._facts import ModelFacts

__all__ = ["box_env_actions", "check_no_state", "direct_predict", "predict_actions"]


def predict_actions(
    facts: ModelFacts,
    observation: Any,
    state: Any,
    starts: Any,
    deterministic: bool,
    extra: dict[str, Any],
    ids: list[str],
) -> tuple[np.ndarray, list[tuple[np.ndarray, ...]] | None]:
    """``model.predict`` for ``SB3PolicyAdapter.predict``'s calls with a state or masks.

    Args:
        facts: The adapter's model facts (the model, whether it is RecurrentPPO).
        observation: The observation, as ``model.predict`` takes it.
        state: ``predict``'s ``state`` argument (see :func:`predict_state`).
        starts: ``(n_envs,)`` episode starts, or None.
        deterministic: As ``model.predict``'s.
        extra: More keyword arguments for ``model.predict`` (``action_masks``).
        ids: The env ids of the batch, for messages.

    Returns:
        The actions and, for RecurrentPPO, each env's next ``(h, c)`` (else None).
    """
    model = facts.model
    next_states: list[tuple[np.ndarray, ...]] | None = None
    if facts.recurrent:
        sb3_state = predict_state(model.policy, state, ids)
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
            check_no_state(model, state, ids)
        actions, _ = model.predict(observation, deterministic=deterministic, **extra)
    return actions, next_states


def direct_predict(policy: Any, batch: np.ndarray, device: th.device, deterministic: bool) -> Any:
    """``policy.predict(batch, deterministic=deterministic)[0]``, computed directly.

    For a policy ``AdapterState.direct_predict`` accepted (its ``predict`` and
    ``obs_to_tensor`` are SB3's ``BasePolicy`` ones, a non-image Box observation space; it
    was put in eval mode and gave ``device``) and a batch ``AdapterState.read`` found ready
    (a native numpy array ``(n_envs, *space.shape)``, ``n_envs >= 1``, no negative stride).
    The steps of ``BasePolicy.predict`` (SB3 2.4 to 2.9) and ``obs_to_tensor`` for such a
    batch, in order: ``np.array(batch)`` (the copy ``obs_to_tensor`` makes: the same memory
    layout as SB3's, so the same numbers to the last bit); the tensor on ``device`` (on the
    CPU ``th.from_numpy``, the tensor ``obs_as_tensor`` returns there); ``policy._predict``
    with autograd off (as under ``torch.no_grad()``, see :mod:`rlightning_sb3._grad`); the
    actions to numpy, reshaped to ``(-1, *action_space.shape)`` (the policy's action space);
    then for a Box space unscaled (a squashing policy) or clipped to the space; a batch is
    never squeezed. What is left out changes no number: ``set_training_mode(False)`` on
    every call and the ``policy.device`` walk (see ``AdapterState.direct_predict``), and the
    checks of observations that are not such a batch.

    Returns:
        numpy actions ``(n_envs, *action_shape)``, equal to ``model.predict``'s.
    """
    observation = np.array(batch)
    on_cpu = device.type == "cpu"
    obs = th.from_numpy(observation) if on_cpu else obs_as_tensor(observation, device)
    grad = grad_enabled()
    set_grad_enabled(False)  # SB3's ``with th.no_grad():``, cheaper (rlightning_sb3._grad)
    try:
        out = policy._predict(obs, deterministic=deterministic)
    finally:
        set_grad_enabled(grad)
    actions = out.numpy() if on_cpu else out.cpu().numpy()
    action_space = policy.action_space
    actions = actions.reshape((-1, *action_space.shape))
    if isinstance(action_space, spaces.Box):
        return box_env_actions(policy, action_space, actions, True)
    return actions


def box_env_actions(
    policy: Any, action_space: spaces.Box, actions: np.ndarray, unscale: bool
) -> np.ndarray:
    """Box actions as SB3 hands them to the env: unscaled, or clipped to the space.

    As ``BasePolicy.predict`` and ``OnPolicyAlgorithm.collect_rollouts``: a squashing
    policy's output (``policy.squash_output``, in [-1, 1]) is unscaled to ``[low, high]`` with
    ``policy.unscale_action``; any other output is clipped to ``[low, high]`` (a Gaussian is
    unbounded). sb3-contrib's ``RecurrentPPO.collect_rollouts`` always clips
    (``unscale=False``).

    Args:
        policy: The SB3 policy.
        action_space: The Box space (the policy's for ``predict``, the model's for rollouts).
        actions: ``(n_envs, *action_shape)`` numpy actions (not modified).
        unscale: Whether a squashing policy's actions are unscaled (False: always clip).

    Returns:
        A new numpy array of the same shape.
    """
    if unscale and policy.squash_output:
        return np.asarray(policy.unscale_action(actions))
    return np.asarray(np.clip(actions, action_space.low, action_space.high))


def check_no_state(model: BaseAlgorithm, state: Any, ids: list[str]) -> None:
    """Check ``predict``'s ``state`` for a policy without one: one None per env is accepted.

    SB3's ``BasePolicy.predict`` ignores ``state`` for a feed-forward policy; the adapter
    accepts only what a generic loop passes back (``[r.state ...]``-style, all None, one per
    env) and refuses anything else, which would otherwise be dropped silently.

    Raises:
        ValueError: ``state`` holds a value, or has another length than the envs.
    """
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
