"""The answer ``predict`` and ``act`` return: one response, or a ResponseBatch kept stacked."""

from __future__ import annotations

from typing import Any

import numpy as np

from rlightning import PerEnv, PolicyResponse, ResponseBatch
from rlightning.types import response_from_fields

__all__ = ["answer"]


def answer(
    vectorized: bool,
    fields: dict[str, Any],
    columns: tuple[tuple[str, list[Any] | np.ndarray | None], ...],
) -> PolicyResponse | ResponseBatch[PolicyResponse]:
    """Build the answer: a ResponseBatch for a batch, one PolicyResponse for an unbatched call.

    Args:
        vectorized: Whether the call was batched.
        fields: The response's fields: ``env_id`` first (None for a batch, followed by its
            ``env_ids``, the ids in row order as a new list), then the fields every env has,
            batched (leading dimension ``n_envs``) for a batch, the one env's values for an
            unbatched call. Mutated (the columns are added) and copied into the response.
        columns: ``(name, column)`` pairs of optional fields given as one entry per env (a list,
            stored as a :class:`~rlightning.PerEnv` in a batch, or an array with ``n_envs``
            rows; an unbatched call gets entry 0); None ones are left out. Set after
            ``fields``, in order, so every response has the same field order.

    Returns:
        A trusted :class:`~rlightning.ResponseBatch` (stacked: ``env_ids`` plus the fields) or
        a :class:`~rlightning.PolicyResponse`.
    """
    if vectorized and not columns:  # the common step: nothing to add
        return ResponseBatch.trusted_from_fields(PolicyResponse, fields)
    for name, column in columns:
        if column is not None:
            if not vectorized:
                fields[name] = column[0]
            else:
                fields[name] = PerEnv(column) if type(column) is list else column
    # The field names are the adapter's own (none is reserved), env_id is None or a str
    # (resolve_env_ids), so the response skips the constructor's checks
    # (tests/sb3/test_batch.py pins that the result equals the constructor's).
    response = response_from_fields(PolicyResponse, fields)
    return ResponseBatch.trusted(response) if vectorized else response
