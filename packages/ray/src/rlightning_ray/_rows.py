"""Row ranges of a stacked response and batches of observations (private helpers)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import numpy as np

from rlightning import PerEnv, PolicyResponse


def _slice_value(value: Any, start: int, stop: int) -> Any:
    if isinstance(value, PerEnv):
        return PerEnv(list(value)[start:stop])
    if isinstance(value, np.ndarray):
        return value[start:stop] if value.ndim else value
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        return value[start:stop] if value.dim() else value
    if isinstance(value, dict):
        return type(value)((k, _slice_value(v, start, stop)) for k, v in value.items())
    if isinstance(value, tuple) and hasattr(value, "_fields"):  # namedtuple (LSTM states)
        return type(value)(*(_slice_value(v, start, stop) for v in value))
    if isinstance(value, list | tuple):
        return type(value)(_slice_value(v, start, stop) for v in value)
    return value  # shared by every row


def slice_rows(stacked: PolicyResponse, start: int, stop: int) -> PolicyResponse:
    """Rows ``start:stop`` of a stacked response: views of its arrays and tensors, no copy."""
    fields = {
        name: _slice_value(value, start, stop)
        for name, value in vars(stacked).items()
        if name not in ("env_id", "env_ids")
    }
    ids = list(stacked.env_ids)[start:stop]
    return type(stacked)(None, env_ids=ids, **fields)


def concat_observations(batches: Sequence[Any]) -> Any:
    """Concatenate ``(k_i, *shape)`` observation batches (dicts key by key) along rows.

    Lists (one entry per env, e.g. PettingZoo's ``{agent: observation}`` dicts) are joined.
    """
    if isinstance(batches[0], list):
        return [entry for batch in batches for entry in batch]
    if isinstance(batches[0], dict):
        return {key: concat_observations([b[key] for b in batches]) for key in batches[0]}
    if len(batches) == 1:
        return batches[0]
    return np.concatenate(batches)
