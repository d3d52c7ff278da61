"""The checks every ``predict`` and ``act`` call starts with, read into one :class:`CallInput`.

:func:`read_call` is given the adapter's :class:`~rlightning_sb3._facts.ModelFacts` and its
:class:`~rlightning_sb3._state.AdapterState`, reads the state through its methods (the
observation-form cache, the env ids seen) and changes nothing else; the steps in
:mod:`rlightning_sb3._step` and :mod:`rlightning_sb3._predict` read the fields of the
:class:`CallInput` it returns.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch as th

from rlightning_sb3._actions import check_action_masks
from rlightning_sb3._batch import per_env_stamps
from rlightning_sb3._observations import refuse_nan

if TYPE_CHECKING:
    from rlightning_sb3._facts import ModelFacts
    from rlightning_sb3._state import AdapterState

__all__ = ["CallInput", "read_call"]


class CallInput:
    """One call's checked input, as :func:`read_call` found it (read, never changed).

    Attributes:
        batch: The observation batch, ``(n_envs, *obs_shape)`` numpy (a dict of such arrays
            for a Dict space).
        n_envs: Rows of the batch (1 for an unbatched observation).
        vectorized: Whether the caller passed a batch (False: one unbatched observation).
        ready: Whether ``batch`` goes to ``obs_as_tensor`` as it is (False: ``obs_tensor``).
        ids: The env ids, one per row, in row order.
        seen: Whether every id was seen by the adapter before (the fast path of
            ``AdapterState.read``).
        checked_by_torch: True when the NaN scan was left to torch's distribution validation
            (the caller scans only if the forward pass raises, to name the envs).
        stamps: ``ts_env_sent_ns`` per env, or None.
        masks: MaskablePPO action masks ``(n_envs, mask_dims)``, or None.
    """

    __slots__ = (
        "batch",
        "checked_by_torch",
        "ids",
        "masks",
        "n_envs",
        "ready",
        "seen",
        "stamps",
        "vectorized",
    )

    batch: Any
    n_envs: int
    vectorized: bool
    ready: bool
    ids: list[str]
    seen: bool
    checked_by_torch: bool
    stamps: list[int] | None
    masks: np.ndarray | None


#: Where ``Distribution.set_default_validate_args`` keeps its setting (the class attribute
#: ``_validate_args``, always defined; torch's default is True).
_DISTRIBUTION = th.distributions.Distribution


def read_call(
    facts: ModelFacts,
    state: AdapterState,
    observation: Any,
    env_ids: object,
    ts_env_sent_ns: Any,
    action_masks: Any,
) -> CallInput:
    """The checks ``predict`` and ``act`` both start with, in the order their errors come.

    ``AdapterState.read`` (the observation batch and the env ids), the NaN scan unless torch's
    distribution validation will catch a NaN, the stamps (``per_env_stamps``) and the action
    masks (``check_action_masks``).

    The NaN scan: SB3's on-policy policies sample from ``torch.distributions`` objects built
    with the default validation, which refuses NaN parameters, and a NaN in an observation
    reaches them (a NaN row stays NaN through SB3's networks). With validation on (torch's
    default) an on-policy call is not scanned up front: the caller scans only if the forward
    pass raises, to name the envs. ``Distribution.set_default_validate_args(False)`` turns it
    off, and every batch is then scanned; off-policy batches are always scanned.

    Args:
        facts: The adapter's model facts (its model and kind).
        state: The adapter's state (read; only its observation-form cache may change).
        observation: The call's observation, as given.
        env_ids: The call's ``env_ids``, as given.
        ts_env_sent_ns: The call's stamps, as given (None: no stamps).
        action_masks: The call's ``action_masks``, as given (None: no masks).

    Returns:
        The checked input; the adapter's state is not changed (the caller registers the ids
        with ``AdapterState.register`` once the call succeeded).

    Raises:
        TypeError, ValueError: as ``predict`` and ``act`` document for their arguments.
    """
    batch, n_envs, vectorized, ready, ids, seen = state.read(
        facts.model.policy, observation, env_ids
    )
    checked_by_torch = facts.on_policy and bool(_DISTRIBUTION._validate_args)
    if not checked_by_torch:
        refuse_nan(batch, ids)
    stamps = None if ts_env_sent_ns is None else per_env_stamps(ts_env_sent_ns, ids)
    masks = (
        None
        if action_masks is None
        else check_action_masks(facts.model, facts.maskable, action_masks, ids)
    )
    # The slots set here, without an __init__ frame (this runs on every call).
    call = _new_call(CallInput)
    call.batch = batch
    call.n_envs = n_envs
    call.vectorized = vectorized
    call.ready = ready
    call.ids = ids
    call.seen = seen
    call.checked_by_torch = checked_by_torch
    call.stamps = stamps
    call.masks = masks
    return call


_new_call = object.__new__
