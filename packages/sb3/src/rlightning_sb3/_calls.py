"""What every ``predict`` and ``act`` call does around the model, with the adapter's fast paths.

Each function reads or updates the per-call state of the
:class:`~rlightning_sb3.SB3PolicyAdapter` it is given (its Box-shape cache, the env ids it has
seen, the last call's ids); :mod:`rlightning_sb3._step` and :mod:`rlightning_sb3._predict` call
each at most once per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import torch as th
from gymnasium import spaces

from rlightning_sb3._actions import check_action_masks
from rlightning_sb3._batch import per_env_stamps, resolve_env_ids
from rlightning_sb3._observations import batch_observation, refuse_nan

if TYPE_CHECKING:
    from rlightning_sb3.adapter import SB3PolicyAdapter

__all__ = [
    "default_starts",
    "nan_checked_by_torch",
    "read_batch",
    "read_call",
    "register_ids",
    "resolve_ids",
]


def read_batch(
    adapter: SB3PolicyAdapter, policy: Any, observation: Any
) -> tuple[Any, int, bool, bool]:
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
    cached = adapter._box_shape
    if cached is None or cached[0] is not space:  # a space's shape never changes
        cached = adapter._box_shape = (space, space.shape if type(space) is spaces.Box else None)
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


def resolve_ids(
    adapter: SB3PolicyAdapter, env_ids: object, n_envs: int, vectorized: bool
) -> tuple[list[str], bool]:
    """Check ``env_ids`` (:func:`resolve_env_ids`); return them and whether all were seen.

    A loop passes the same ids every step: a list equal to the last successful call's ids
    was checked then, and every one of its ids is known to ``adapter._carried``, so the checks and
    the per-env look-ups are skipped.
    """
    last = adapter._last_ids
    if (
        last is not None
        and vectorized
        and type(env_ids) is list
        and len(last) == n_envs
        and env_ids == last
    ):
        return last, True
    return resolve_env_ids(env_ids, n_envs, vectorized), False


def register_ids(adapter: SB3PolicyAdapter, ids: list[str], vectorized: bool, seen: bool) -> None:
    """Mark ``ids`` as seen (after a successful call) and remember them for the next call."""
    if not seen:
        carried = adapter._carried
        for env_id in ids:
            carried.setdefault(env_id, None)
    if vectorized:
        adapter._last_ids = ids


def default_starts(adapter: SB3PolicyAdapter, ids: Sequence[str], seen: bool) -> list[bool]:
    """``act``'s default ``episode_start``: True for the ids the adapter has not seen yet."""
    if seen:
        return [False] * len(ids)
    carried = adapter._carried
    return [env_id not in carried for env_id in ids]


def nan_checked_by_torch() -> bool:
    """Whether torch.distributions validates its arguments by default (torch's own default).

    SB3's on-policy policies sample from ``torch.distributions`` objects built with the default
    validation, which refuses NaN parameters; a NaN in an observation reaches them (a NaN row
    stays NaN through SB3's networks). With validation on, the adapter need not scan every
    observation for NaN: it does so only when the forward pass raises, to name the envs.
    ``torch.distributions.Distribution.set_default_validate_args(False)`` turns it off, and
    the adapter then scans every batch.
    """
    return bool(getattr(th.distributions.Distribution, "_validate_args", False))


def read_call(
    adapter: SB3PolicyAdapter,
    observation: Any,
    env_ids: object,
    ts_env_sent_ns: Any,
    action_masks: Any,
) -> tuple[Any, int, bool, bool, list[str], bool, bool, list[int] | None, np.ndarray | None]:
    """The checks ``predict`` and ``act`` both start with, in the order their errors come.

    :func:`read_batch`, :func:`resolve_ids`, the NaN scan unless torch's distribution
    validation will catch a NaN (:func:`nan_checked_by_torch`: on-policy models), the stamps
    (``per_env_stamps``) and the action masks (``check_action_masks``).

    Returns:
        ``(batch, n_envs, vectorized, ready, ids, seen, checked_by_torch, stamps, masks)``;
        ``checked_by_torch`` True means the caller scans for NaN only if the forward pass
        raises (to name the envs).
    """
    batch, n_envs, vectorized, ready = read_batch(adapter, adapter._model.policy, observation)
    ids, seen = resolve_ids(adapter, env_ids, n_envs, vectorized)
    checked_by_torch = adapter._on_policy and nan_checked_by_torch()
    if not checked_by_torch:
        refuse_nan(batch, ids)
    stamps = per_env_stamps(ts_env_sent_ns, ids)
    masks = (
        None
        if action_masks is None
        else check_action_masks(adapter._model, adapter._maskable, action_masks, ids)
    )
    return batch, n_envs, vectorized, ready, ids, seen, checked_by_torch, stamps, masks
