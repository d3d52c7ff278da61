"""Refuse an answer that does not belong where it arrived: the wrong env ids or a stale policy.

A response crosses Ray between the policy server and an env runner. :func:`check_answer` is the
one owner of the two routing rules every receiver applies (the runner before it steps its envs,
the collector again before a row enters a buffer):

* **env ids**: the answer's rows must be the runner's envs, in the runner's order. An env must
  never step with another env's action, and a buffer row must never hold another env's data.
* **policy version**: the answer must come from weights at most ``max_staleness`` versions older
  than the newest published (``current_version``). With ``max_staleness=0`` (the default, right
  for synchronous PPO) every row of a rollout comes from the weights published before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlightning.rules import POLICY_VERSION_FIELD

__all__ = ["POLICY_VERSION_FIELD", "check_answer"]


def check_answer(
    response: Any,
    env_ids: Sequence[str],
    *,
    runner_id: str,
    current_version: int | None = None,
    max_staleness: int = 0,
) -> int:
    """Check that a stacked answer is for ``env_ids`` (in order) and fresh enough.

    Args:
        response: The stacked :class:`~rlightning.PolicyResponse` the server answered one runner
            with (``env_ids`` of its rows, a ``policy_version`` int), or its list of
            :class:`~rlightning.MultiAgentPolicyResponse` (one per env, each with ``env_id``
            and ``policy_version``).
        env_ids: The runner's env ids, in its row order.
        runner_id: The runner, for the message.
        current_version: The newest published policy version; None skips the staleness rule.
        max_staleness: How many versions older than ``current_version`` an answer may be.

    Returns:
        The answer's policy version.

    Raises:
        ValueError: the answer's env ids are not ``env_ids`` (the first wrong row names the env
            it was for and the env it arrived at), it carries no int ``policy_version``, or its
            version is older than ``current_version - max_staleness`` (both versions named).

    Examples:
        >>> from rlightning import PolicyResponse
        >>> answer = PolicyResponse(None, env_ids=["e0", "e1"], action=[0, 1], policy_version=3)
        >>> check_answer(answer, ["e0", "e1"], runner_id="r0", current_version=3)
        3
        >>> check_answer(answer, ["e1", "e0"], runner_id="r0")
        Traceback (most recent call last):
        ...
        ValueError: runner 'r0' got an answer for env 'e0' in the row of its env 'e1' (row 0); answers: ['e0', 'e1'], envs: ['e1', 'e0']
        >>> check_answer(answer, ["e0", "e1"], runner_id="r0", current_version=5, max_staleness=1)
        Traceback (most recent call last):
        ...
        ValueError: runner 'r0' got an answer from policy version 3 for envs ['e0', 'e1'], but the newest is 5 and at most 1 version(s) of staleness is allowed (the oldest accepted is 4)
    """  # noqa: E501  (doctest output is one line)
    if type(env_ids) is list and type(response) is not list and type(response) is not tuple:
        # the common answer, at once: a stacked response whose env_ids list is env_ids and
        # whose version is a plain int, fresh enough (the rules below, for this case)
        got_ids = getattr(response, "env_ids", None)
        fresh = getattr(response, POLICY_VERSION_FIELD, None)
        if (
            type(got_ids) is list
            and got_ids == env_ids
            and got_ids  # (an empty list reads env_id below)
            and type(fresh) is int
            and (current_version is None or fresh >= current_version - max_staleness)
        ):
            return fresh
    if isinstance(response, list | tuple):  # one multi-agent response per env
        versions = {getattr(r, POLICY_VERSION_FIELD, None) for r in response}
        got = [getattr(r, "env_id", None) for r in response]
        version: Any = versions.pop() if len(versions) == 1 else sorted(map(str, versions))
    else:
        got = list(getattr(response, "env_ids", None) or [getattr(response, "env_id", None)])
        version = getattr(response, POLICY_VERSION_FIELD, None)
    expected = list(env_ids)
    if got != expected:
        for row, (g, e) in enumerate(zip(got, expected, strict=False)):
            if g != e:
                raise ValueError(
                    f"runner {runner_id!r} got an answer for env {g!r} in the row of its env "
                    f"{e!r} (row {row}); answers: {got}, envs: {expected}"
                )
        raise ValueError(
            f"runner {runner_id!r} got answers for {len(got)} envs {got}, but it has "
            f"{len(expected)} envs {expected}"
        )
    if isinstance(version, bool) or not isinstance(version, int):
        raise ValueError(
            f"runner {runner_id!r} got an answer for envs {got} without an int "
            f"{POLICY_VERSION_FIELD} (got {version!r}); every answer of a PolicyServer carries one"
        )
    if current_version is not None and version < current_version - max_staleness:
        raise ValueError(
            f"runner {runner_id!r} got an answer from policy version {version} for envs {got}, "
            f"but the newest is {current_version} and at most {max_staleness} version(s) of "
            f"staleness is allowed (the oldest accepted is {current_version - max_staleness})"
        )
    return version
