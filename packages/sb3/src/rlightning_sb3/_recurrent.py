"""Split and stack sb3-contrib recurrent (LSTM) states between batch form and per-env form.

Batch form is what sb3-contrib's ``RecurrentActorCriticPolicy`` takes and returns: for ``act``,
an ``RNNStates(pi=(h, c), vf=(h, c))`` of torch tensors shaped ``(n_lstm_layers, n_envs,
hidden_size)``; for ``predict``, a tuple ``(h, c)`` of numpy arrays of the same shape. Per-env form
drops the env axis: tensors or arrays shaped ``(n_lstm_layers, hidden_size)``. Stacking per-env
states rebuilds the batch bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch as th

__all__ = [
    "predict_state",
    "split_numpy_states",
    "split_rnn_states",
    "stack_numpy_states",
    "stack_rnn_states",
    "zero_rnn_state",
]


def rnn_states_type() -> Any:
    """Return sb3-contrib's ``RNNStates`` namedtuple class (sb3-contrib is imported lazily)."""
    from sb3_contrib.common.recurrent.type_aliases import RNNStates

    return RNNStates


def zero_rnn_state(policy: Any) -> Any:
    """One env's initial LSTM state: zeros, as ``RecurrentPPO._setup_model`` creates them.

    Args:
        policy: A ``RecurrentActorCriticPolicy``.

    Returns:
        ``RNNStates(pi=(h, c), vf=(h, c))`` of float32 zeros ``(n_lstm_layers, hidden_size)`` on
        the policy's device (all four share one zero tensor; they are never written to).
    """
    lstm = policy.lstm_actor
    zeros = th.zeros((lstm.num_layers, lstm.hidden_size), device=policy.device)
    return rnn_states_type()((zeros, zeros), (zeros, zeros))


def stack_rnn_states(states: Sequence[Any]) -> Any:
    """Stack per-env ``RNNStates`` into batch form (env axis 1), in the order given.

    Args:
        states: One ``RNNStates`` of ``(n_lstm_layers, hidden_size)`` tensors per env.

    Returns:
        ``RNNStates`` of ``(n_lstm_layers, n_envs, hidden_size)`` tensors.
    """
    rnn_states = rnn_states_type()
    return rnn_states(
        (th.stack([s.pi[0] for s in states], 1), th.stack([s.pi[1] for s in states], 1)),
        (th.stack([s.vf[0] for s in states], 1), th.stack([s.vf[1] for s in states], 1)),
    )


def split_rnn_states(states: Any) -> list[Any]:
    """Split batch-form ``RNNStates`` into one per env, each tensor a fresh copy.

    Copies (rather than views) keep a response's pickle small: a view would carry the whole
    batch's storage.

    Args:
        states: ``RNNStates`` of ``(n_lstm_layers, n_envs, hidden_size)`` tensors.

    Returns:
        ``n_envs`` ``RNNStates`` of contiguous ``(n_lstm_layers, hidden_size)`` tensors.
    """
    rnn_states = rnn_states_type()
    h_pi, c_pi = states.pi
    h_vf, c_vf = states.vf
    return [
        rnn_states(
            (h_pi[:, i].clone(), c_pi[:, i].clone()), (h_vf[:, i].clone(), c_vf[:, i].clone())
        )
        for i in range(h_pi.shape[1])
    ]


def split_numpy_states(state: tuple[np.ndarray, ...]) -> list[tuple[np.ndarray, ...]]:
    """Split SB3 ``predict``'s ``(h, c)`` arrays ``(n_layers, n_envs, hidden)`` into per-env tuples.

    Args:
        state: The state SB3's recurrent ``predict`` returned.

    Returns:
        One ``(h, c)`` tuple of ``(n_layers, hidden)`` arrays (copies) per env.
    """
    n_envs = state[0].shape[1]
    return [tuple(np.array(part[:, i, :]) for part in state) for i in range(n_envs)]


def stack_numpy_states(
    states: Sequence[tuple[np.ndarray, ...] | None], zero: np.ndarray
) -> tuple[np.ndarray, ...]:
    """Stack per-env ``(h, c)`` states for SB3's recurrent ``predict``; None means a fresh env.

    Args:
        states: One entry per env: a ``(h, c)`` tuple of ``(n_layers, hidden)`` arrays, or None
            for zeros.
        zero: A ``(n_layers, hidden)`` zero array.

    Returns:
        ``(h, c)`` of ``(n_layers, n_envs, hidden)`` arrays.
    """
    hs = [zero if s is None else np.asarray(s[0]) for s in states]
    cs = [zero if s is None else np.asarray(s[1]) for s in states]
    return (np.stack(hs, axis=1), np.stack(cs, axis=1))


def predict_state(policy: Any, state: Any, ids: Sequence[str]) -> tuple[np.ndarray, ...] | None:
    """Turn ``SB3PolicyAdapter.predict``'s ``state`` argument into SB3's batched ``(h, c)`` form.

    Args:
        policy: A ``RecurrentActorCriticPolicy``.
        state: None (SB3 starts from zeros), SB3's batched ``(h, c)`` tuple of
            ``(n_lstm_layers, n_envs, hidden_size)`` arrays (passed through after its shapes are
            checked against the policy's LSTM, which sb3-contrib's
            ``RecurrentActorCriticPolicy.predict`` hands to ``nn.LSTM`` unchecked), or one
            entry per env: an ``(h, c)`` tuple of ``(n_layers, hidden)`` arrays (a previous
            response's ``state``) or None for a fresh env.
        ids: The env ids of the batch, for messages.

    Returns:
        None or the batched ``(h, c)``.

    Raises:
        ValueError: the form or a shape is wrong (the env id is named).
    """
    if state is None:
        return None
    lstm = policy.lstm_actor
    if isinstance(state, tuple) and state and isinstance(state[0], np.ndarray):
        shapes = [np.shape(s) for s in state]
        want = (lstm.num_layers, len(ids), lstm.hidden_size)
        if len(state) != 2 or any(s != want for s in shapes):
            raise ValueError(
                f"state in SB3's batched form must be (h, c), each (n_layers, {len(ids)}, "
                f"hidden) = {want} for the policy's LSTM and envs {list(ids)}, got shapes "
                f"{shapes}"
            )
        return state
    if not isinstance(state, Sequence) or len(state) != len(ids):
        raise ValueError(
            f"state must be None, SB3's (h, c) tuple, or one entry per env ({len(ids)} for "
            f"{list(ids)}: a previous response's state or None), got {type(state).__name__}"
            + (f" of length {len(state)}" if isinstance(state, Sequence) else "")
        )
    zero = np.zeros((lstm.num_layers, lstm.hidden_size), dtype=np.float32)
    for env_id, entry in zip(ids, state, strict=True):
        if entry is not None and (
            not isinstance(entry, tuple)
            or len(entry) != 2
            or any(np.shape(part) != zero.shape for part in entry)
        ):
            raise ValueError(
                f"state for env {env_id!r} must be None or an (h, c) tuple of arrays of "
                f"shape {zero.shape} (n_layers, hidden), got {entry!r}"
            )
    return stack_numpy_states(list(state), zero)
