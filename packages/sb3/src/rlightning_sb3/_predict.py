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
from stable_baselines3.common.base_class import BaseAlgorithm

from rlightning_sb3._recurrent import predict_state, split_numpy_states

if TYPE_CHECKING:
    from rlightning_sb3.adapter import SB3PolicyAdapter

__all__ = ["check_no_state", "predict_actions"]


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
