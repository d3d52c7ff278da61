"""Running a Stable-Baselines3 model on a batch of agents' observations.

Stable-Baselines3 is never imported here: a model is recognised by its public policy API
(``model.policy.obs_to_tensor``), and torch is imported only when a model is run (it is installed
then, since SB3 needs it). Each path reproduces the SB3 function named in its docstring.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = [
    "is_sb3_model",
    "observation_shape_mismatch",
    "observation_space_mismatch",
    "sb3_forward",
    "stack_observations",
]


def is_sb3_model(obj: object) -> bool:
    """True for an SB3 algorithm (``PPO``, ``A2C``, ``DQN``, ``SAC``, ..., sb3-contrib's too)."""
    policy = getattr(obj, "policy", None)
    return (
        policy is not None
        and callable(getattr(policy, "obs_to_tensor", None))
        and isinstance(getattr(obj, "action_space", None), spaces.Space)
    )


def _forward_parameters(policy: Any) -> frozenset[str]:
    try:
        return frozenset(inspect.signature(policy.forward).parameters)
    except (TypeError, ValueError):  # a forward without a signature (C extension)
        return frozenset()


def is_actor_critic(policy: Any) -> bool:
    """True for an on-policy actor-critic policy (SB3's ``ActorCriticPolicy`` and subclasses)."""
    return callable(getattr(policy, "evaluate_actions", None)) and callable(
        getattr(policy, "predict_values", None)
    )


def observation_space_mismatch(env_space: spaces.Space[Any], model_space: Any) -> str | None:
    """Why observations from ``env_space`` cannot go to a model of ``model_space``, or None.

    Follows what SB3's ``BasePolicy.obs_to_tensor`` accepts (``is_vectorized_observation`` and
    ``maybe_transpose`` in ``stable_baselines3.common``): a Box observation of the model space's
    shape, or the channel-last ``(H, W, C)`` form of a channel-first ``(C, H, W)`` image space
    (SB3 trains image policies behind ``VecTransposeImage`` and transposes at prediction time);
    Discrete/MultiDiscrete/MultiBinary of the same size; a Dict with the same keys, each fitting.
    Box bounds and dtypes are not compared (SB3's ``predict`` does not either).

    Args:
        env_space: ``env.observation_space(agent)``.
        model_space: ``model.observation_space``.

    Returns:
        None when they fit, else a short reason such as ``"shape (18,) is not the model's (10,)"``.
    """
    if env_space == model_space:
        return None
    if isinstance(env_space, spaces.Box) and isinstance(model_space, spaces.Box):
        shape, want = env_space.shape, model_space.shape
        if shape == want or (len(shape) == 3 and (shape[2], shape[0], shape[1]) == want):
            return None
        return f"shape {shape} is not the model's {want}"
    if isinstance(env_space, spaces.Dict) and isinstance(model_space, spaces.Dict):
        keys, want_keys = sorted(env_space.spaces), sorted(model_space.spaces)
        if keys != want_keys:
            return f"keys {keys} are not the model's {want_keys}"
        for key, sub in env_space.spaces.items():
            reason = observation_space_mismatch(sub, model_space.spaces[key])
            if reason is not None:
                return f"key {key!r}: {reason}"
        return None
    sized = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)
    if isinstance(env_space, sized) and type(env_space) is type(model_space):
        size = getattr(env_space, "n", getattr(env_space, "nvec", None))
        want_size = getattr(model_space, "n", getattr(model_space, "nvec", None))
        if np.array_equal(np.asarray(size), np.asarray(want_size)):
            return None
        return f"size {size} is not the model's {want_size}"
    return f"a {type(env_space).__name__} space is not the model's {model_space}"


def observation_shape_mismatch(space: spaces.Space[Any], observation: Any) -> str | None:
    """Why ``observation`` has not the shape (or Dict keys) of ``space``, or None.

    Only shapes and keys are compared: enough to name the agent whose observation breaks a
    batch (``np.stack`` needs one shape), cheap enough for the error path.
    """
    if isinstance(space, spaces.Dict):
        if not isinstance(observation, dict):
            return f"it is a {type(observation).__name__}, not a dict"
        if observation.keys() != space.spaces.keys():
            return f"its keys {sorted(observation)} are not {sorted(space.spaces)}"
        for key, sub in space.spaces.items():
            reason = observation_shape_mismatch(sub, observation[key])
            if reason is not None:
                return f"[{key!r}]: {reason}"
        return None
    shape = space.shape
    if shape is not None and np.shape(observation) != shape:
        return f"its shape is {np.shape(observation)}, not {shape}"
    return None


def stack_observations(observations: Sequence[Any]) -> Any:
    """Stack per-agent observations into one batch: ``(n_agents, *obs_shape)``.

    Dict observations (``{"observation": ..., "action_mask": ...}``) are stacked key by key into a
    dict of batches, the layout SB3's ``MultiInputPolicy`` takes.
    """
    first = observations[0]
    if isinstance(first, dict):
        return {key: np.stack([np.asarray(o[key]) for o in observations]) for key in first}
    return np.stack([np.asarray(o) for o in observations])


def _stack_masks(masks: Sequence[Any | None]) -> Any | None:
    """Masks for sb3-contrib's ``action_masks=`` argument, or None when no agent has one.

    Each mask is flattened (a MultiDiscrete mask tuple is concatenated, the layout sb3-contrib's
    ``MaskableMultiCategoricalDistribution`` takes); an agent without a mask allows every action.
    """
    if all(mask is None for mask in masks):
        return None
    rows: list[np.ndarray[Any, Any] | None] = []
    for mask in masks:
        if mask is None:
            rows.append(None)
        elif isinstance(mask, tuple):
            rows.append(np.concatenate([np.asarray(m, dtype=bool).reshape(-1) for m in mask]))
        else:
            rows.append(np.asarray(mask, dtype=bool).reshape(-1))
    size = next(row.shape[0] for row in rows if row is not None)
    return np.stack([np.ones(size, dtype=bool) if row is None else row for row in rows])


def sb3_forward(
    model: Any,
    observations: Sequence[Any],
    *,
    deterministic: bool,
    masks: Sequence[Any | None] | None = None,
) -> dict[str, Any]:
    """Run ``model`` once on a batch of observations; return per-row results.

    Actor-critic policies (PPO, A2C, sb3-contrib's MaskablePPO) follow SB3's
    ``OnPolicyAlgorithm.collect_rollouts``: one ``policy(obs)`` forward pass under
    ``torch.no_grad()`` gives the raw actions (``buffer_action``, what the rollout buffer stores),
    values and log-probabilities; the env action is the raw action unscaled
    (``policy.unscale_action``) when the policy squashes its output, else clipped to the Box
    bounds. MaskablePPO gets the agents' masks through its ``action_masks`` argument.

    Other policies (DQN, SAC, TD3, ...) follow SB3's ``BasePolicy.predict`` for the env action,
    and ``OffPolicyAlgorithm._sample_action`` for ``buffer_action`` (Box actions rescaled to
    ``[-1, 1]`` with ``policy.scale_action``; other spaces: the action itself).

    The policy is put in evaluation mode (``set_training_mode(False)``), as SB3's ``predict``
    does.

    Args:
        model: An SB3 algorithm.
        observations: One observation per agent, each in the model's observation space.
        deterministic: Use the policy's deterministic action.
        masks: One action mask (or None) per agent; used by policies with ``action_masks``.

    Returns:
        ``{"action": array (n, *action_shape), "buffer_action": array (n, *action_shape)}`` plus
        ``"value"`` and ``"log_prob"`` (float32 arrays of shape ``(n,)``) for actor-critic
        policies. All numpy, on the CPU.

    Raises:
        TypeError: the policy is recurrent (it needs a hidden state per agent, not supported).
    """
    import torch

    policy = model.policy
    action_space: spaces.Space[Any] = model.action_space
    params = _forward_parameters(policy)
    if "lstm_states" in params:
        raise TypeError(
            f"{type(model).__name__} has a recurrent policy ({type(policy).__name__}), which needs "
            "a hidden state per agent; rlightning_pettingzoo drives feed-forward SB3 policies only"
        )
    batch = stack_observations(observations)
    policy.set_training_mode(False)
    if not is_actor_critic(policy):
        actions, _ = policy.predict(batch, deterministic=deterministic)
        buffer_actions = (
            policy.scale_action(actions) if isinstance(action_space, spaces.Box) else actions
        )
        return {"action": actions, "buffer_action": buffer_actions}
    obs_tensor, _ = policy.obs_to_tensor(batch)
    kwargs: dict[str, Any] = {}
    if "action_masks" in params and masks is not None:
        stacked = _stack_masks(masks)
        if stacked is not None:
            kwargs["action_masks"] = stacked
    with torch.no_grad():
        raw, values, log_probs = policy(obs_tensor, deterministic=deterministic, **kwargs)
    raw_actions = raw.cpu().numpy().reshape((-1, *(action_space.shape or ())))
    env_actions = raw_actions
    if isinstance(action_space, spaces.Box):
        if policy.squash_output:
            env_actions = policy.unscale_action(raw_actions)
        else:
            env_actions = np.clip(raw_actions, action_space.low, action_space.high)
    return {
        "action": env_actions,
        "buffer_action": raw_actions,
        "value": values.cpu().numpy().reshape(-1).astype(np.float32, copy=False),
        "log_prob": log_probs.cpu().numpy().reshape(-1).astype(np.float32, copy=False),
    }
