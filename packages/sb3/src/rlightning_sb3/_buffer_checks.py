"""Checks the buffer helpers make before they write: what the env returned against the buffer.

SB3's buffers assign into preallocated ``(n_envs, ...)`` arrays, where numpy would broadcast or
coerce a malformed step silently; each function here refuses one such input with an error that
names the argument, the env ids and what was expected. None of them mutates its inputs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm

from rlightning.rules import as_bools
from rlightning_sb3._batch import BOOL_DTYPE

__all__ = [
    "check_buffer_observation",
    "check_rewards",
    "check_scaled_actions",
    "check_step",
    "check_terminal",
    "require_started",
]


def check_step(
    buffer_n_envs: int,
    ids: list[Any],
    rewards: Any,
    dones: Any,
    infos: Any,
) -> tuple[np.ndarray, np.ndarray]:
    """Check one step's responses, rewards, dones and infos against the buffer's envs.

    As SB3's ``VecEnv.step`` returns them (``VecEnvStepReturn``): ``(n_envs,)`` rewards,
    ``(n_envs,)`` boolean dones and a list of ``n_envs`` info dicts.

    Returns:
        ``(rewards, dones)``: the rewards as a new float array (see :func:`check_rewards`), the
        dones as a ``(n_envs,)`` bool array.

    Raises:
        ValueError: a count or shape does not match the buffer, or ``dones`` holds values other
            than booleans (0/1 accepted).
        TypeError: an info is not a dict (the env id is named), or the rewards are not numbers
            (see :func:`check_rewards`).
    """
    n_envs = len(ids)
    if n_envs != buffer_n_envs:
        raise ValueError(
            f"the buffer holds {buffer_n_envs} envs but there are {n_envs} responses "
            f"(env ids {ids})"
        )
    rewards_arr = check_rewards(rewards, ids)
    dones_arr = (
        dones  # as_bools' own fast path, without its call (a VecEnv's dones, every step)
        if type(dones) is np.ndarray and dones.dtype is BOOL_DTYPE and dones.shape == (n_envs,)
        else as_bools(dones, "dones", shape=(n_envs,), labels=ids)
    )
    if (type(infos) is not list and not isinstance(infos, Sequence)) or len(infos) != n_envs:
        raise ValueError(
            f"infos must be a list of {n_envs} dicts (one per env, as VecEnv.step returns), "
            f"got {type(infos).__name__}"
            + (f" of length {len(infos)}" if isinstance(infos, Sequence) else "")
        )
    for index, info in enumerate(infos):
        if not isinstance(info, dict):
            raise TypeError(
                f"infos[{index}] (env {ids[index]!r}) must be a dict, as VecEnv.step returns "
                f"one info dict per env, got {type(info).__name__} {info!r}"
            )
    return rewards_arr, dones_arr


#: Reward dtypes kept as given: SB3's own VecEnvs return float32 (``DummyVecEnv``'s reward
#: buffer) or float64 (``SubprocVecEnv`` stacks Python floats), and ``collect_rollouts``
#: bootstraps either in place.
_FLOAT_REWARDS = (np.dtype(np.float32), np.dtype(np.float64))


def check_rewards(rewards: Any, ids: Sequence[Any]) -> np.ndarray:
    """Return one step's rewards as a new ``(n_envs,)`` float array, as SB3's buffers read them.

    SB3's ``OnPolicyAlgorithm.collect_rollouts`` adds ``gamma * V(terminal_observation)`` to
    the reward of a truncated episode *in place* (``rewards[idx] += ...``), on the float32 array
    ``DummyVecEnv`` returns; an integer array would truncate that sum (or drop it), and the
    rollout and replay buffers store rewards as float32 anyway. So integer rewards (a Python list
    of ints, an int32 or int64 array, as board games and hand-built envs return them) are
    converted to float32, exactly as ``DummyVecEnv.step_wait`` writes an int reward into its
    float32 buffer; float32 and float64 rewards are copied as they are (float16 is widened to
    float32). Booleans, complex numbers, strings and objects are refused rather than coerced.

    Args:
        rewards: ``(n_envs,)`` rewards as ``VecEnv.step`` returns them, or a list of numbers.
        ids: The env ids in env order, for messages.

    Returns:
        A new ``(n_envs,)`` array, float32 or float64 (the caller's ``rewards`` is not modified).

    Raises:
        TypeError: the rewards are not real numbers (bool, complex, str, object dtype).
        ValueError: the shape is not ``(n_envs,)``.
    """
    arr = np.array(rewards)  # a copy: SB3 adds the bootstrap value in place
    n_envs = len(ids)
    if arr.shape != (n_envs,):
        raise ValueError(
            f"rewards must have shape ({n_envs},), one per env {list(ids)}, got {arr.shape}"
        )
    if arr.dtype in _FLOAT_REWARDS:
        return arr
    if arr.dtype.kind in "iuf":
        return arr.astype(np.float32)
    raise TypeError(
        f"rewards must be real numbers (ints or floats, one per env {list(ids)}), as "
        f"VecEnv.step returns them, got dtype {arr.dtype}: {arr!r}"
    )


def check_buffer_observation(name: str, observation: Any, buf: Any, ids: Sequence[Any]) -> None:
    """Check that ``observation`` has one row per env of ``buf``, in the buffer's obs shape.

    SB3's buffers (``RolloutBuffer.add``, ``ReplayBuffer.add`` and their Dict versions) assign
    the observation into a ``(n_envs, *obs_shape)`` row, so numpy would broadcast one unbatched
    observation into every env's row; SB3 only reshapes Discrete observations (``(n_envs,)`` to
    ``(n_envs, 1)``). This requires shape ``(n_envs, *obs_shape)`` (for a Discrete space, a
    leading ``n_envs`` and ``n_envs * prod(obs_shape)`` values), per key for a Dict space.

    Args:
        name: The argument name, for messages.
        observation: An array (or dict of arrays) as ``VecEnv`` returns it.
        buf: The SB3 buffer (its ``n_envs``, ``obs_shape`` and ``observation_space``).
        ids: The env ids in env order, for messages.

    Raises:
        TypeError: a dict for a buffer of arrays or the reverse.
        ValueError: a shape does not match (the key, expected and given shapes named).
    """
    space = buf.observation_space
    n_envs = buf.n_envs
    if (
        type(observation) is np.ndarray
        and observation.shape[:1] == (n_envs,)
        and observation.shape[1:] == buf.obs_shape
    ):
        return  # the common case (a Dict space's obs_shape is a dict, never a tuple)
    if isinstance(space, spaces.Dict):
        if not isinstance(observation, dict):
            raise TypeError(
                f"{name} must be a dict of arrays for the buffer's Dict observation space, "
                f"got {type(observation).__name__}"
            )
        if set(observation) != set(buf.obs_shape):
            raise ValueError(
                f"{name} has keys {sorted(observation)}, the buffer's Dict observation space has "
                f"keys {sorted(buf.obs_shape)}"
            )
        for key, shape in buf.obs_shape.items():
            _check_obs_shape(
                f"{name}[{key!r}]", observation[key], space.spaces[key], shape, n_envs, ids
            )
        return
    if isinstance(observation, dict):
        raise TypeError(
            f"{name} must be an array for the buffer's observation space {space}, got a dict"
        )
    _check_obs_shape(name, observation, space, buf.obs_shape, n_envs, ids)


def _check_obs_shape(
    name: str,
    value: Any,
    space: spaces.Space[Any],
    obs_shape: tuple[int, ...],
    n_envs: int,
    ids: Sequence[Any],
) -> None:
    shape = np.shape(value)
    want = (n_envs, *obs_shape)
    if shape == want:
        return
    if (
        isinstance(space, spaces.Discrete)
        and shape[:1] == (n_envs,)
        and int(np.prod(shape)) == int(np.prod(want))
    ):
        return
    raise ValueError(
        f"{name} must have shape {want} (n_envs, *obs_shape): one row per env {list(ids)}, as "
        f"the VecEnv returns it, got shape {shape}"
        + ("; one unbatched observation is not spread over the envs" if shape == obs_shape else "")
    )


def check_terminal(terminal: Any, row: np.ndarray, env_id: Any, key: str) -> None:
    """Refuse a ``terminal_observation`` that numpy would broadcast into a row of another shape."""
    shape = np.shape(terminal)
    if shape != row.shape:
        raise ValueError(
            f"infos[...]['terminal_observation']{key} of env {env_id!r} has shape {shape}, "
            f"expected {row.shape} (one observation, as VecEnv.step_wait stores it)"
        )


def check_scaled_actions(actions: np.ndarray, space: spaces.Box, ids: Sequence[Any]) -> None:
    """Refuse Box buffer actions that are not SB3's scaled actions in [-1, 1].

    SB3's ``OffPolicyAlgorithm._sample_action`` stores ``policy.scale_action(action)`` (with the
    action noise added, then clipped to [-1, 1]); the critic and actor losses read the buffer
    in that scale. A response edited or built by hand (e.g. carrying the env action) would be
    stored silently. Values may exceed 1 by float rounding of ``scale_action`` of an unscaled
    action (a few ulps); more than ``1 + 8 * eps`` of the dtype, NaN, or a non-float dtype is
    refused.

    Args:
        actions: ``(n_envs, *action_shape)`` stacked buffer actions.
        space: The model's Box action space.
        ids: The env ids in env order.

    Raises:
        TypeError: the buffer actions are not floats.
        ValueError: the shape is not ``(n_envs, *space.shape)`` or a value is outside [-1, 1]
            (the env ids and their values named).
    """
    want = (len(ids), *space.shape)
    if actions.shape != want:
        raise ValueError(
            f"buffer actions must have shape {want} (one {space.shape} action per env "
            f"{list(ids)}), got {actions.shape}"
        )
    if actions.dtype.kind != "f":
        raise TypeError(
            f"buffer actions for a Box action space must be floats scaled to [-1, 1] "
            f"(SB3's policy.scale_action), got dtype {actions.dtype} for envs {list(ids)}"
        )
    limit = 1 + 8 * float(np.finfo(actions.dtype).eps)
    inside = np.abs(actions) <= limit  # False for NaN too
    if not inside.all():
        rows = inside.reshape(len(ids), -1).all(axis=1)
        bad = {ids[i]: actions[i].tolist() for i in np.flatnonzero(~rows).tolist()}
        raise ValueError(
            f"buffer_action must be the action scaled to [-1, 1], as SB3's "
            f"OffPolicyAlgorithm._sample_action stores it (policy.scale_action); out of range "
            f"for env(s) {bad}"
        )


def require_started(model: BaseAlgorithm) -> None:
    """Refuse to update a model's counters before :func:`start_training` (nothing is changed)."""
    if model._total_timesteps <= 0 or model.ep_info_buffer is None:
        raise ValueError(
            "the model has no step budget yet: call start_training(model, total_timesteps) "
            "before the loop (or pass update_model=False)"
        )
