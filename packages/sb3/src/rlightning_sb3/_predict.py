"""One ``predict`` call: ``model.predict`` for a batch, answered with one response per env.

:func:`predict_step` is the body of
:meth:`SB3PolicyAdapter.predict <rlightning_sb3.SB3PolicyAdapter.predict>` (whose docstring
states what it computes and raises): the input checks shared with ``act``, then SB3's
``BaseAlgorithm.predict`` (sb3-contrib's RecurrentPPO with the envs' LSTM states, MaskablePPO
with their action masks).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm

from rlightning import PolicyResponse, ResponseBatch
from rlightning_sb3._answer import answer
from rlightning_sb3._batch import per_env_bools
from rlightning_sb3._calls import read_call
from rlightning_sb3._observations import as_arrays, native_arrays, refuse_nan
from rlightning_sb3._recurrent import predict_state, split_numpy_states

if TYPE_CHECKING:
    from rlightning_sb3.adapter import SB3PolicyAdapter

__all__ = ["check_no_state", "predict_actions", "predict_step"]


def predict_step(
    adapter: SB3PolicyAdapter,
    observation: Any,
    env_ids: Any,
    state: Any,
    episode_start: Any,
    deterministic: bool,
    action_masks: Any,
    ts_env_sent_ns: Any,
) -> PolicyResponse | ResponseBatch[PolicyResponse]:
    """Run :meth:`SB3PolicyAdapter.predict <rlightning_sb3.SB3PolicyAdapter.predict>`.

    Takes ``predict``'s arguments, in its order.

    Returns:
        What ``predict`` returns; see its docstring for the fields and the errors raised.
    """
    observation = as_arrays(observation)  # lists, as SB3's obs_to_tensor converts them
    call = read_call(adapter, observation, env_ids, ts_env_sent_ns, action_masks)
    if not call.ready:  # (the fast path's batch is the observation, already native)
        observation = native_arrays(observation)  # what torch cannot view, as a native copy
    ids = call.ids
    masks = call.masks
    starts = (
        None if episode_start is None else per_env_bools(episode_start, "episode_start", ids, None)
    )
    next_states: list[tuple[np.ndarray, ...]] | None = None
    try:
        if masks is None and state is None and not adapter._recurrent:
            # predict_actions' common case, without its call
            actions, _ = adapter._model.predict(observation, deterministic=deterministic)
        else:
            extra: dict[str, Any] = {}
            if masks is not None:
                extra["action_masks"] = masks if call.vectorized else masks[0]
            actions, next_states = predict_actions(
                adapter, observation, state, starts, deterministic, extra, ids
            )
    except (ValueError, RuntimeError):
        if call.checked_by_torch:
            refuse_nan(call.batch, ids)  # names the envs when a NaN made torch raise
        raise
    adapter._state.register(ids, call.vectorized, call.seen)
    return answer(
        ids,
        call.vectorized,
        {"action": actions},
        (("state", next_states), ("action_mask", masks), ("ts_env_sent_ns", call.stamps)),
    )


def predict_actions(
    adapter: SB3PolicyAdapter,
    observation: Any,
    state: Any,
    starts: Any,
    deterministic: bool,
    extra: dict[str, Any],
    ids: list[str],
) -> tuple[np.ndarray, list[tuple[np.ndarray, ...]] | None]:
    """``model.predict`` for :func:`predict_step`; returns the actions and the next states."""
    model = adapter._model
    next_states: list[tuple[np.ndarray, ...]] | None = None
    if adapter._recurrent:
        sb3_state = predict_state(adapter._model.policy, state, ids)
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
