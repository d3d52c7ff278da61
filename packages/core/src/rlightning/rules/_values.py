"""Timestamps and 0/1 booleans (private).

Import these names from :mod:`rlightning.rules`.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from rlightning._space_reasons import _first_index, _is_tensor
from rlightning.rules._errors import rule_error, rule_message

# ---------------------------------------------------------------------------- timestamps
#: The timing stamps, in nanoseconds since the epoch, in the order a step travels:
#: ``ts_env_sent_ns`` (the env worker sends the observation), ``ts_policy_recv_ns`` (a policy
#: server receives it) and ``ts_infer_start_ns`` (its batch's forward pass starts), both set by
#: ``rlightning_ray``'s ``PolicyServer``, and ``ts_policy_sent_ns``
#: (``PolicyResponse.mark_policy_sent``). Left out by ``PolicyResponse.to_dict`` (with
#: ``env_id``), shared (never per-agent) in ``MultiAgentPolicyResponse.from_agents``, and checked
#: by :func:`check_stamp` in ``rlightning.testing``.
STAMP_ORDER: tuple[str, ...] = (
    "ts_env_sent_ns",
    "ts_policy_recv_ns",
    "ts_infer_start_ns",
    "ts_policy_sent_ns",
)

#: :data:`STAMP_ORDER` as a set, for membership tests.
STAMP_FIELDS: frozenset[str] = frozenset(STAMP_ORDER)

#: The field naming the policy weights that produced a response (``rlightning_ray``'s servers
#: stamp it; an int, one per answer).
POLICY_VERSION_FIELD = "policy_version"

#: The fields one value per response describes, never per agent: the stamps and
#: :data:`POLICY_VERSION_FIELD`. ``MultiAgentPolicyResponse.from_agents`` shares them (equal in
#: every agent's response), and ``rlightning_pettingzoo.from_parallel_actions`` refuses them as
#: per-agent fields.
SHARED_FIELDS: frozenset[str] = STAMP_FIELDS | {POLICY_VERSION_FIELD}

_STAMP_MAX = 2**64 - 1  # an unsigned 64-bit int; time.time_ns() fits a signed one until 2262
_NOT_INT = "must be an int of nanoseconds since the epoch (time.time_ns())"

#: How far ahead of ``now_ns`` a stamp may be before the latency methods warn: clocks of two
#: machines differ (NTP keeps them within milliseconds, an unsynchronised VM within seconds), so a
#: stamp up to a minute ahead is clock skew and reads as 0.0 silently; further ahead it is a bug.
STAMP_FUTURE_TOLERANCE_NS = 60 * 10**9

#: 2001-01-01T00:00:00Z in nanoseconds since the epoch. Read against ``time.time_ns()`` (a latency
#: method called without ``now_ns``), a stamp before it is not a wall-clock stamp in nanoseconds:
#: ``time.monotonic_ns()`` and ``time.perf_counter_ns()`` count from boot (far below it), and
#: epoch stamps in microseconds or milliseconds are 1,000x and 10**6x too small. The latency
#: methods then return 0.0 and warn (reason ``clock``) instead of a latency of decades. With an
#: explicit ``now_ns`` any clock may be used for both, and no floor applies.
STAMP_EPOCH_FLOOR_NS = 978_307_200 * 10**9

_EXPECTED = "an int of nanoseconds since the epoch from time.time_ns(), at most {tolerance} s ahead"


class StampWarning(RuntimeWarning):
    """A latency method read a timing stamp it cannot use and returned 0.0 (rule ``timestamp``).

    ``compute_sent_latency`` and ``compute_policy_latency`` return 0.0 for a stamp that breaks the
    ``timestamp`` rule, as the original API page asks ("0.0 if ts_env_sent_ns is missing or
    invalid"); so that the 0.0 is not silent, they warn with this class, once per field and reason
    (not an int -- e.g. float seconds from ``time.time()`` --, negative, beyond 64 bits, more
    than :data:`STAMP_FUTURE_TOLERANCE_NS` ahead of ``now_ns``, or, read against
    ``time.time_ns()`` because no ``now_ns`` was given, before :data:`STAMP_EPOCH_FLOOR_NS`: a
    stamp from ``time.monotonic_ns()``/``perf_counter_ns()`` or in microseconds/milliseconds).
    The message names the field, the value and what was expected. A missing or None stamp ("not
    stamped") never warns, nor does a stamp less than a minute ahead (clock skew between
    machines).

    Silence it, or turn it into an error, with the ``warnings`` filters::

        warnings.filterwarnings("error", category=rlightning.StampWarning)
    """


#: (field, reason) pairs already warned about: each warns once per process.
_warned_stamps: set[tuple[str, str]] = set()


def _stamp_reason(value: object) -> tuple[str, str] | None:
    """(reason id, problem) when ``value`` is not a valid stamp, else None (the rule's test)."""
    if type(value) is int:  # the common case: time.time_ns()
        number = value
    elif isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        number = int(value)
    else:
        return "type", _NOT_INT
    if number < 0:
        return "negative", "must not be negative"
    if number > _STAMP_MAX:
        return "range", "must fit in 64 bits (at most 2**64 - 1 nanoseconds)"
    return None


def _stamp_problem(value: object) -> str | None:
    """Why ``value`` is not a valid stamp, or None (the one test of the ``timestamp`` rule)."""
    reason = _stamp_reason(value)
    return None if reason is None else reason[1]


def _stamp_fix(value: object, reason: str) -> str:
    if reason == "clock":
        return (
            "stamp with time.time_ns() (int nanoseconds since the epoch), or pass now_ns from "
            "the same clock the stamp came from"
        )
    if reason == "future":
        return (
            "stamp with time.time_ns() when the message is sent, on clocks kept in step (NTP); "
            "pass now_ns in the same clock's nanoseconds"
        )
    if isinstance(value, (float, np.floating)):
        return "time.time() gives float seconds; stamp with time.time_ns() (int nanoseconds)"
    return "stamp with time.time_ns() (int nanoseconds since the epoch)"


def _unusable_stamp_latency(
    name: str, stamp: object, now_ns: int, method: str, *, other_clock: bool = False
) -> float:
    """Return 0.0, the latency of a stamp that is invalid or not before ``now_ns``, warning once.

    The latency methods' slow path (they compute the latency themselves when ``stamp`` is a valid
    stamp before ``now_ns``). Warns :class:`StampWarning` once per (field, reason) per process when
    ``stamp`` breaks the ``timestamp`` rule or is more than :data:`STAMP_FUTURE_TOLERANCE_NS`
    ahead of ``now_ns``; a None stamp, or one at most that far ahead (clock skew), is silent.

    Args:
        name: The stamp's field name (``"ts_env_sent_ns"``).
        stamp: The stamp read, None when missing.
        now_ns: The current time in nanoseconds since the epoch (already checked).
        method: The latency method, named in the warning (``"compute_sent_latency"``).
        other_clock: The stamp is valid and before ``now_ns``, but ``now_ns`` came from
            ``time.time_ns()`` and the stamp is before :data:`STAMP_EPOCH_FLOOR_NS` (another
            clock or unit): warn with reason ``clock``.

    Returns:
        0.0.

    Warns:
        StampWarning: the stamp is not an int, is negative, beyond 64 bits, far in the future, or
            from another clock (``other_clock``).
    """
    if stamp is None:
        return 0.0
    reason = _stamp_reason(stamp)
    if other_clock:
        reason = (
            "clock",
            f"is {int(cast('int', stamp))} ns, before 2001 read against time.time_ns()="
            f"{now_ns}: from another clock (time.monotonic_ns(), perf_counter_ns()) or unit "
            f"(microseconds, milliseconds)",
        )
    elif reason is None:
        ahead_ns = int(cast("int", stamp)) - now_ns  # a valid stamp not before now_ns
        if ahead_ns <= STAMP_FUTURE_TOLERANCE_NS:
            return 0.0
        reason = (
            "future",
            f"is {ahead_ns / 1e9:.6g} s ahead of now_ns={now_ns} (more than the "
            f"{STAMP_FUTURE_TOLERANCE_NS // 10**9} s of clock skew tolerated)",
        )
    key = (name, reason[0])
    if key in _warned_stamps:
        return 0.0
    _warned_stamps.add(key)
    expected = _EXPECTED.format(tolerance=STAMP_FUTURE_TOLERANCE_NS // 10**9)
    fix = _stamp_fix(stamp, reason[0])
    text = rule_message("timestamp", name, reason[1], stamp, expected=expected, fix=fix)
    message = f"{method}() returned 0.0: {text} (warned once per field and reason)"
    # stacklevel 4: this function, _latency_s, the latency method, the caller.
    warnings.warn(message, StampWarning, stacklevel=4)
    return 0.0


def check_stamp(name: str, value: object, subject: str = "") -> int:
    """Check one timing stamp and return it as a Python int.

    A stamp is an int or numpy integer (not a bool) of nanoseconds since the epoch, as
    ``time.time_ns()`` gives, not negative and at most ``2**64 - 1``, the range the latency
    methods read (``compute_sent_latency`` reads any other value as no stamp: it returns 0.0 and
    warns :class:`StampWarning` once per field and reason).

    Args:
        name: The stamp's field name, one of :data:`STAMP_FIELDS` for a response's stamps
            (the adapters also check other stamps they define by this rule).
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
    reason = _stamp_reason(value)
    if reason is None:
        return int(cast("int", value))  # an int or np.integer, checked above
    error = TypeError if reason[0] == "type" else ValueError
    raise rule_error(error, "timestamp", f"{subject}{name}", reason[1], value)


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
