"""Observations in: the batch SB3 is given, checked and converted as SB3 converts it.

Nothing here runs a policy: :func:`batch_observation` decides whether an observation is a batch
by SB3's rule and checks it against the model's space, :func:`as_arrays` and :func:`obs_tensor`
convert it as SB3's ``predict`` / ``collect_rollouts`` do, and :func:`refuse_nan` names the envs
whose rows hold NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["as_arrays", "batch_observation", "native_arrays", "obs_tensor", "refuse_nan"]


def obs_tensor(policy: Any, observation: Any, device: Any) -> Any:
    """Convert a batch of observations to a tensor (or dict of tensors) as SB3's collection does.

    A batch that is already numpy arrays of shape ``(n_envs, *space.shape)`` goes through
    ``obs_as_tensor`` unchanged, as ``OnPolicyAlgorithm.collect_rollouts`` converts
    ``_last_obs`` (keeping the array's memory layout, e.g. ``VecTransposeImage``'s transposed
    view, which the convolution results depend on in the last bits). Anything else (channel-last
    images, lists, one unbatched observation) goes through ``policy.obs_to_tensor``, as
    ``predict`` does.

    Args:
        policy: The SB3 policy.
        observation: The observation batch.
        device: The torch device.

    Returns:
        The tensor, or dict of tensors, batched.
    """
    from stable_baselines3.common.utils import obs_as_tensor

    space = policy.observation_space
    if isinstance(observation, dict):
        ready = all(
            isinstance(v, np.ndarray) and v.shape[1:] == space.spaces[k].shape and v.ndim >= 1
            for k, v in observation.items()
        )
    else:
        ready = (
            isinstance(observation, np.ndarray)
            and observation.ndim >= 1
            and observation.shape[1:] == space.shape
        )
    if ready:
        return obs_as_tensor(observation, device)
    return policy.obs_to_tensor(observation)[0]


def as_arrays(observation: Any) -> Any:
    """Convert a list (or other array-like) observation to numpy, as SB3's ``obs_to_tensor`` does.

    ``BasePolicy.obs_to_tensor`` calls ``np.array`` on a non-dict observation (per key for a
    dict) before deciding whether it is a batch; SB3's ``is_vectorized_observation`` reads
    ``.shape`` and so needs arrays. numpy arrays (and dicts of them) are returned as they are;
    a dict with an array-like value gets a new dict (the caller's is not modified).

    Args:
        observation: What the caller passed.

    Returns:
        The observation with every array-like converted by ``np.array``.

    Raises:
        ValueError: ``observation`` is gymnasium's ``(obs, info)`` reset tuple, or cannot be
            converted to a numeric array (e.g. rows of different lengths; the key is named).
    """
    if type(observation) is np.ndarray:
        return observation
    if (
        isinstance(observation, tuple)
        and len(observation) == 2
        and isinstance(observation[1], dict)
    ):
        raise ValueError(
            "observation is an (obs, info) tuple, as gymnasium's reset() returns; pass the "
            "observation alone (a VecEnv's reset() returns only the observation)"
        )
    if isinstance(observation, dict):
        if all(isinstance(v, np.ndarray) for v in observation.values()):
            return observation
        return {k: _to_array(v, f"observation[{k!r}]") for k, v in observation.items()}
    return _to_array(observation, "observation")


def _to_array(value: Any, name: str) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value
    try:
        array = np.array(value)
    except ValueError as error:
        raise ValueError(
            f"{name} of type {type(value).__name__} cannot be converted to an array as SB3's "
            f"obs_to_tensor converts it (np.array): {error}"
        ) from None
    if array.dtype.kind not in "biuf":
        hint = (
            " (env ids where the observation belongs? the observation comes first, env ids by "
            "keyword: act(obs, env_ids=ids))"
            if array.dtype.kind in "US"
            else ""
        )
        raise ValueError(
            f"{name} must convert to a numeric array as SB3's obs_to_tensor converts it "
            f"(np.array), got dtype {array.dtype} from {type(value).__name__} {value!r}{hint}"
        )
    return array


def batch_observation(policy: Any, observation: Any) -> tuple[Any, int, bool]:
    """Return ``(batched observation, n_envs, vectorized)`` by SB3's ``predict`` rule.

    Array-likes (lists) are converted with :func:`as_arrays`, as ``obs_to_tensor`` converts them.
    Whether ``observation`` is a batch is decided by ``BasePolicy.is_vectorized_observation``
    (as ``predict`` decides); one unbatched observation is given a leading axis of 1 (arrays of a
    dict each get one). A batch of numpy arrays is returned as is (not copied).

    Args:
        policy: The SB3 policy (its ``observation_space`` is the model's).
        observation: What the caller passed.

    Returns:
        The batch, its number of rows, and whether the caller passed a batch.

    Raises:
        ValueError: ``observation`` is gymnasium's ``(obs, info)`` reset tuple, is not numeric,
            has the wrong keys for a Dict space, has a shape that fits the space neither as one
            observation nor as a batch (SB3's message), is an empty batch (0 rows), or is a dict
            whose keys have different batch sizes (the keys and sizes named).
        TypeError: a dict for a non-Dict space or the reverse.
    """
    space = policy.observation_space
    observation = as_arrays(observation)
    if isinstance(space, spaces.Dict) != isinstance(observation, dict):
        raise TypeError(
            f"the model's observation space is {space}, so the observation must be "
            f"{'a dict of arrays' if isinstance(space, spaces.Dict) else 'an array'}, got "
            f"{type(observation).__name__}"
        )
    if (
        isinstance(observation, dict)
        and isinstance(space, spaces.Dict)
        and set(observation) != set(space.spaces)
    ):
        raise ValueError(
            f"observation has keys {sorted(observation)}, the model's Dict observation space "
            f"has keys {sorted(space.spaces)}"
        )
    vectorized = bool(policy.is_vectorized_observation(observation))
    if isinstance(observation, dict):
        if not vectorized:
            return {k: v[None] for k, v in observation.items()}, 1, False
        sizes = {k: len(v) for k, v in observation.items()}
        if len(set(sizes.values())) > 1:
            raise ValueError(
                "observation is a batch whose keys have different batch sizes (leading "
                f"dimensions): {', '.join(f'{k!r}: {n}' for k, n in sizes.items())}; every key "
                "needs one row per env"
            )
        n_envs = next(iter(sizes.values()))
    else:
        if not vectorized:
            return observation[None], 1, False
        n_envs = len(observation)
    if n_envs == 0:
        raise ValueError(
            "observation is an empty batch (0 rows): pass at least one env's observation"
        )
    return observation, n_envs, True


def refuse_nan(batch: Any, ids: Sequence[str]) -> None:
    """Refuse a float observation batch that holds NaN, naming the envs whose rows do.

    SB3 does not check observations (its ``VecCheckNan`` wrapper is the opt-in check): a NaN
    gives DQN's greedy action 0 silently (``argmax`` of NaN Q-values) and fails inside
    ``torch.distributions`` for on-policy models without naming the env. Infinite values are
    kept (a Box space may be unbounded). Cost: one ``np.sum`` per float array (a NaN, or
    ``inf - inf``, makes it NaN; only then are the rows searched); non-float arrays are skipped.

    Args:
        batch: ``(n_envs, *obs_shape)`` numpy array, or a dict of them.
        ids: The env ids of the rows.

    Raises:
        ValueError: a row holds NaN (the env ids, and the key for a dict, named).
    """
    items = batch.items() if isinstance(batch, dict) else ((None, batch),)
    for key, array in items:
        if array.dtype.kind not in "fc" or not np.isnan(np.sum(array)):
            continue
        rows = np.isnan(array.reshape(len(ids), -1)).any(axis=1)
        if rows.any():
            where = "observation" if key is None else f"observation[{key!r}]"
            bad = [ids[i] for i in np.flatnonzero(rows).tolist()]
            raise ValueError(
                f"{where} holds NaN for env(s) {bad}; SB3's policies give meaningless actions "
                f"for NaN inputs (check the env, or wrap it in SB3's VecCheckNan)"
            )


def native_arrays(observation: Any) -> Any:
    """Return ``observation`` with every array torch cannot read replaced by a native copy.

    ``torch.as_tensor`` (which SB3's ``obs_as_tensor`` calls) refuses numpy arrays with a
    negative stride (``arr[::-1]``) or a non-native byte order (``'>f4'`` on x86); those are
    copied (C order, native byte order: the same values). Every other
    array is returned as it is, so an observation the VecEnv returned keeps its memory layout
    (SB3 computes its values from that layout; a CNN's result depends on it in the last bits).

    Args:
        observation: An array, or a dict of arrays (anything else is returned as it is).

    Returns:
        The observation (a new dict when a value was copied; the caller's is not modified).
    """
    if isinstance(observation, dict):
        converted = {key: native_arrays(value) for key, value in observation.items()}
        same = all(converted[key] is value for key, value in observation.items())
        return observation if same else converted
    if not isinstance(observation, np.ndarray):
        return observation
    if observation.dtype.isnative and all(stride >= 0 for stride in observation.strides):
        return observation
    # a real copy: numpy calls an array with one row C-contiguous whatever that row's stride
    return np.array(observation, dtype=observation.dtype.newbyteorder("="), order="C", copy=True)
