"""The answer ``predict`` and ``act`` return: one response, or a ResponseBatch kept stacked."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlightning import PerEnv, PolicyResponse, ResponseBatch
from rlightning.types import response_from_checked

__all__ = ["answer"]


def answer(
    ids: list[str],
    vectorized: bool,
    fields: dict[str, Any],
    columns: tuple[tuple[str, list[Any] | np.ndarray | None], ...],
) -> PolicyResponse | ResponseBatch[PolicyResponse]:
    """Build the answer: a ResponseBatch for a batch, one PolicyResponse for an unbatched call.

    Args:
        ids: The env ids, in row order (unique: checked by the caller).
        vectorized: Whether the call was batched.
        fields: The fields every env has, batched (leading dimension ``n_envs``) for a batch, or
            the one env's values for an unbatched call. Mutated for an unbatched call (the
            columns are added).
        columns: ``(name, column)`` pairs of optional fields given as one entry per env (a list,
            stored as a :class:`~rlightning.PerEnv`, or an array with ``n_envs`` rows); None
            ones are left out. Set after ``fields``, in order, so every response has the same
            field order.

    Returns:
        A trusted :class:`~rlightning.ResponseBatch` (stacked: ``env_ids`` plus ``fields``) or a
        :class:`~rlightning.PolicyResponse`.
    """
    if not vectorized:
        for name, column in columns:
            if column is not None:
                fields[name] = column[0]
        return PolicyResponse(ids[0], **fields)
    # The field names are the adapter's own (none is reserved) and env_id is None, so the
    # stacked response skips the constructor's checks (tests/sb3/test_batch.py
    # pins that the result equals the constructor's).
    data: dict[str, Any] = {"env_ids": list(ids)}
    data.update(fields)
    for name, column in columns:
        if column is not None:
            data[name] = PerEnv(column) if type(column) is list else column
    return ResponseBatch.trusted(response_from_checked(PolicyResponse, None, data))
