"""Timestamps and 0/1 booleans (private).

Import these names from :mod:`rlightning.rules`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from rlightning._space_reasons import _first_index, _is_tensor
from rlightning.rules._errors import rule_error

# ---------------------------------------------------------------------------- timestamps
#: The timing stamps, in nanoseconds since the epoch: left out by ``PolicyResponse.to_dict`` (with
#: ``env_id``), shared (never per-agent) in ``MultiAgentPolicyResponse.from_agents``, and checked
#: by :func:`check_stamp`.
STAMP_FIELDS: frozenset[str] = frozenset({"ts_env_sent_ns", "ts_policy_sent_ns"})

_STAMP_MAX = 2**64 - 1  # an unsigned 64-bit int; time.time_ns() fits a signed one until 2262


def _stamp_problem(value: object) -> str | None:
    """Why ``value`` is not a valid stamp, or None (the one test of the ``timestamp`` rule)."""
    if type(value) is int:  # the common case: time.time_ns()
        number = value
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        number = int(value)
    else:
        return "must be an int of nanoseconds since the epoch (time.time_ns())"
    if number < 0:
        return "must not be negative"
    if number > _STAMP_MAX:
        return "must fit in 64 bits (at most 2**64 - 1 nanoseconds)"
    return None


def check_stamp(name: str, value: object, subject: str = "") -> int:
    """Check one timing stamp and return it as a Python int.

    A stamp is an int or numpy integer (not a bool) of nanoseconds since the epoch, as
    ``time.time_ns()`` gives, not negative and at most ``2**64 - 1``, the range the latency
    methods read (``compute_sent_latency`` treats any other value as no stamp and returns 0.0).

    Args:
        name: The stamp's field name, one of :data:`STAMP_FIELDS` for a response's stamps.
        value: The stamp; None is not a stamp (callers skip None, "not stamped").
        subject: Prefix naming the owner in messages (``"response."``, ``"agent 'a' "``).

    Returns:
        ``value`` as an ``int``.

    Raises:
        TypeError: ``value`` is not an integer, or is a bool (rule ``timestamp``).
        ValueError: ``value`` is negative or does not fit in 64 bits (rule ``timestamp``).

    Examples:
        >>> import numpy as np
        >>> check_stamp("ts_env_sent_ns", np.int64(1_700_000_000_000_000_000))
        1700000000000000000
        >>> check_stamp("ts_env_sent_ns", 1.5, "response.")
        Traceback (most recent call last):
        ...
        TypeError: response.ts_env_sent_ns must be an int of nanoseconds since the epoch (time.time_ns()); got 1.5 [rule timestamp]
    """  # noqa: E501  (doctest output is one line)
    problem = _stamp_problem(value)
    if problem is None:
        return int(cast("int", value))  # an int or np.integer, checked above
    error = TypeError if problem.startswith("must be an int") else ValueError
    raise rule_error(error, "timestamp", f"{subject}{name}", problem, value)


# ---------------------------------------------------------------------------- 0/1 booleans
_BOOL = np.dtype(np.bool_)
_UNSIGNED: dict[np.dtype[Any], np.dtype[Any]] = {}


def _as_array(value: Any, subject: str, rule: str) -> np.ndarray[Any, Any]:
    """``value`` as a numpy array (a tensor read with ``detach().cpu().numpy()``)."""
    if type(value) is np.ndarray:
        return value
    try:
        if _is_tensor(value):
            return np.asarray(value.detach().cpu().numpy())
        return np.asarray(value)
    except (TypeError, ValueError, RuntimeError) as exc:  # ragged lists, odd objects
        raise rule_error(
            TypeError, rule, subject, f"cannot be read as a numpy array ({exc})", value
        ) from exc


def _not_zero_one(array: np.ndarray[Any, Any], subject: str, rule: str, value: Any) -> Any:
    """A bool array marking entries that are not exactly 0 or 1 (None when the dtype is bool).

    Raises the rule's ``TypeError`` for a dtype that is not bool, integer or float.
    """
    kind = array.dtype.kind
    if kind == "b":
        return None
    if kind == "u":
        return array > 1
    if kind == "i":  # negatives read as huge unsigned numbers: one comparison finds both
        unsigned = _UNSIGNED.get(array.dtype)
        if unsigned is None:
            unsigned = _UNSIGNED[array.dtype] = np.dtype(array.dtype.str.replace("i", "u"))
        return array.view(unsigned) > 1
    if kind == "f":
        return (array != 0) & (array != 1)  # NaN is neither
    raise rule_error(
        TypeError,
        rule,
        subject,
        f"must hold booleans or the numbers 0 and 1, not dtype {array.dtype}",
        value,
    )


def _refuse_not_zero_one(
    array: np.ndarray[Any, Any],
    bad: Any,
    subject: str,
    rule: str,
    value: Any,
    labels: Sequence[Any] | None = None,
) -> None:
    if not np.count_nonzero(bad):  # count_nonzero: no ufunc machinery, faster than any()
        return
    index = _first_index(bad)
    where = f" ({labels[index[0]]!r})" if labels is not None and index else ""
    raise rule_error(
        ValueError,
        rule,
        subject,
        f"must hold only booleans or exactly 0 and 1: element {list(index)}{where} = "
        f"{array[index].item()!r} is neither",
        value,
    )


def as_bools(
    value: Any,
    name: str,
    *,
    shape: tuple[int, ...] | None = None,
    labels: Sequence[Any] | None = None,
) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Return ``value`` as a bool array, refusing anything that is not a boolean or exactly 0/1.

    Bools pass; integers and floats pass when every one is exactly 0 or 1 (SB3's ``VecEnv``
    dones are bools, but 0/1 floats from hand-built envs mean the same). Anything else (0.5, 2,
    -1, NaN, strings, objects, None) is refused with the first offending position and value,
    never read by truthiness: SB3's buffers store ``float(done)``, so a 2 would be a silent
    wrong value. A tensor is read with ``detach().cpu().numpy()``.

    Fast path: an ``np.ndarray`` of dtype bool (and the right shape) costs one dtype test and is
    returned as is (not copied).

    Args:
        value: A bool, a number, a sequence or an array (e.g. ``dones``, ``episode_start``).
        name: The field or argument name, for messages.
        shape: The shape required, e.g. ``(n_envs,)``; None accepts any shape.
        labels: Names for the positions along the first axis (env ids), shown with the first
            offending value.

    Returns:
        ``value`` itself when it already is a bool ``np.ndarray``; otherwise a new bool array of
        ``value``'s shape.

    Raises:
        TypeError: ``value`` cannot be read as an array, or its dtype is not bool, integer or
            float (rule ``boolean``).
        ValueError: the shape is not ``shape``, or a value is not exactly 0 or 1 (rule
            ``boolean``).

    Examples:
        >>> as_bools([0.0, 1.0], "dones")
        array([False,  True])
        >>> as_bools([0, 2], "dones", labels=["env-0", "env-1"])
        Traceback (most recent call last):
        ...
        ValueError: dones must hold only booleans or exactly 0 and 1: element [1] ('env-1') = 2 is neither; got [0, 2] [rule boolean]
    """  # noqa: E501  (doctest output is one line)
    if (
        type(value) is np.ndarray
        and value.dtype is _BOOL
        and (shape is None or value.shape == shape)
    ):
        return value
    array = _as_array(value, name, "boolean")
    if shape is not None and array.shape != shape:
        raise rule_error(
            ValueError, "boolean", name, f"must have shape {shape}, not {array.shape}", value
        )
    bad = _not_zero_one(array, name, "boolean", value)
    if bad is None:
        return array
    _refuse_not_zero_one(array, bad, name, "boolean", value, labels)
    return array.astype(np.bool_)
