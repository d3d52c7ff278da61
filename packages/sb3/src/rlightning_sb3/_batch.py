"""Env ids, per-env arguments and response ordering: the checks every adapter entry point shares.

Nothing here runs a policy; every function either validates what the caller passed (raising an
error that names the argument, the env ids and what was expected) or reorders responses.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, cast

import numpy as np

from rlightning import PolicyResponse, ResponseBatch
from rlightning.rules import as_bools, check_env_ids, check_stamp

#: The largest stamp :func:`rlightning.rules.check_stamp` accepts (rule ``timestamp``).
_STAMP_MAX = 2**64 - 1

#: numpy's bool dtype (a singleton): the fast paths of per-step checks test ``dtype is``.
BOOL_DTYPE = np.dtype(np.bool_)

__all__ = [
    "BOOL_DTYPE",
    "order_responses",
    "per_env_bools",
    "per_env_stamps",
    "resolve_env_ids",
    "stacked_in_order",
]


def _duplicates(ids: Sequence[Any]) -> list[Any]:
    return [env_id for env_id, count in Counter(ids).items() if count > 1]


#: What ``env_ids`` may be (SB3's ``predict`` rule), said when it is neither.
_ENV_IDS_KINDS = "a str (one unbatched observation) or a sequence of str (one per row of a batch)"


def resolve_env_ids(env_ids: object, n_envs: int, vectorized: bool) -> list[str]:
    """Check ``env_ids`` against the observation batch and return them as a list.

    Follows SB3's ``predict`` rule for what counts as one observation or a batch
    (``BasePolicy.is_vectorized_observation``): a single unbatched observation takes one ``str``
    env id; a batch of ``n_envs`` observations takes a sequence of ``n_envs`` distinct ``str`` ids,
    one per row, in row order. The ids are judged by rule ``env-id``
    (:func:`rlightning.rules.check_env_ids`): a str or a str subclass by ``type()``, never
    converted.

    Args:
        env_ids: What the caller passed.
        n_envs: Rows in the observation batch (1 for an unbatched observation).
        vectorized: Whether the observation was a batch.

    Returns:
        The ids as a list of length ``n_envs``.

    Raises:
        TypeError: an id is not a str, or ``env_ids`` is neither a str nor a sequence of str
            (rule ``env-id``).
        ValueError: the number of ids differs from the batch size, an id repeats (rule
            ``env-id``), or a single str id comes with a batch (or a sequence of ids with an
            unbatched observation).
    """
    if isinstance(env_ids, str) and issubclass(type(env_ids), str):
        if vectorized:
            raise ValueError(
                f"env_ids is the single str {env_ids!r} but the observation is a batch of "
                f"{n_envs}; pass one env id per row, e.g. a list of {n_envs} str"
            )
        return [env_ids]
    several = (
        isinstance(env_ids, Sequence) and not isinstance(env_ids, (str, bytes, bytearray))
    ) or (isinstance(env_ids, np.ndarray) and env_ids.ndim == 1)
    if not vectorized and several:
        given = list(cast("Sequence[Any]", env_ids))
        raise ValueError(
            f"the observation is a single unbatched observation but env_ids is a sequence "
            f"{given!r}; pass one str env id (SB3's predict rule), or batch the observation as "
            "shape (1, *obs_shape)"
        )
    return check_env_ids(
        env_ids,
        n_envs,
        per="row",
        expected=_ENV_IDS_KINDS,
        count=f"the observation batch has {n_envs} rows",
    )


def per_env_bools(
    value: object, name: str, ids: Sequence[str], default: np.ndarray | None
) -> np.ndarray:
    """Return a per-env boolean argument (``episode_start``) as a ``(n_envs,)`` bool array.

    Args:
        value: None (use ``default``), a bool for one env, or a sequence / array of ``n_envs``
            booleans (0/1 floats, as SB3's ``dones`` may be, are accepted when exactly 0 or 1).
        name: The argument name, for messages.
        ids: The env ids of the batch.
        default: The ``(n_envs,)`` bool array used when ``value`` is None (the caller may pass
            None when it handles ``value is None`` itself).

    Returns:
        ``default`` when ``value`` is None; else a ``(n_envs,)`` array of dtype ``bool`` (``value``
        itself when it already is one, not copied, as ``np.asarray``).

    Raises:
        TypeError: ``value`` is not of a bool, integer or float kind (rule ``boolean`` of
            :func:`rlightning.rules.as_bools`).
        ValueError: the shape is not ``(n_envs,)`` (or ``()`` for one env) or a value is not 0/1
            (the env named), or ``value`` is None and no ``default`` is given.
    """
    if value is None:
        if default is None:
            raise ValueError(f"{name} is None and no default was given")
        return default
    given: Any = value
    if type(given) is np.ndarray:
        if given.dtype is BOOL_DTYPE and given.shape == (len(ids),):
            return given  # as_bools' own fast path, without its call (every step of a loop)
        if given.ndim == 0 and len(ids) == 1:
            given = given.reshape(1)
    elif len(ids) == 1 and type(given) not in (list, tuple) and np.shape(given) == ():
        given = np.reshape(given, (1,))  # a list or tuple is never 0-d: no array built for it
    return as_bools(given, name, shape=(len(ids),), labels=ids)


def per_env_stamps(value: object, ids: Sequence[str]) -> list[int] | None:
    """Return ``ts_env_sent_ns`` as one int per env, or None when not given.

    Args:
        value: None, one int (nanoseconds since the epoch) shared by all envs, or a sequence of
            ``n_envs`` ints.
        ids: The env ids of the batch.

    Returns:
        A list of ``n_envs`` ints, or None.

    Raises:
        TypeError: a stamp is not an int (rule ``timestamp`` of
            :func:`rlightning.rules.check_stamp`; the env named).
        ValueError: a sequence of the wrong length is given, or a stamp is negative or does not
            fit in 64 bits (rule ``timestamp``; the env named).
    """
    if value is None:
        return None
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return [check_stamp("ts_env_sent_ns", value)] * len(ids)
    if not isinstance(value, (Sequence, np.ndarray)) or isinstance(value, str):
        raise TypeError(
            f"ts_env_sent_ns must be an int of nanoseconds since the epoch (time.time_ns()) or "
            f"one int per env, got {type(value).__name__} {value!r}"
        )
    stamps = list(value)
    if len(stamps) != len(ids):
        raise ValueError(
            f"ts_env_sent_ns has {len(stamps)} stamps but there are {len(ids)} envs {list(ids)}"
        )
    if all(type(s) is int and 0 <= s <= _STAMP_MAX for s in stamps):
        return stamps  # the common case (time.time_ns() ints): what check_stamp returns
    return [
        check_stamp("ts_env_sent_ns", stamp, f"env {env_id!r} ")
        for env_id, stamp in zip(ids, stamps, strict=True)
    ]


def stacked_in_order(responses: object, env_ids: object) -> PolicyResponse | None:
    """Return the stacked response of a batch that was never split, when it is in env order.

    The fast path of :meth:`SB3PolicyAdapter.env_actions` and the buffer helpers: a
    :class:`~rlightning.ResponseBatch` from ``act``/``predict`` (``is_trusted``: env ids checked
    unique and every field with one row per id when it was made) that nobody read holds the
    step's outputs already stacked. Its rows are in the VecEnv's env order when ``env_ids`` is
    None or the same ids (a list or tuple). Any other batch (built with
    ``ResponseBatch(stacked)``, unpickled) takes the per-env path, whose split checks every row.

    Args:
        responses: What the caller passed as responses.
        env_ids: What the caller passed as ``env_ids``.

    Returns:
        The stacked response (``env_ids`` plus fields with ``n_envs`` rows), or None: take the
        per-env path (:func:`order_responses`), which checks and reorders.
    """
    if type(responses) is not ResponseBatch or not responses.is_trusted:
        return None  # not vouched for by act()/predict(): split it, which checks every row
    stacked: PolicyResponse | None = responses.stacked
    if stacked is None:
        return None
    if env_ids is not None:
        own = stacked.__dict__["env_ids"]
        if type(env_ids) is tuple:
            env_ids = list(env_ids)
        if type(env_ids) is not list or env_ids != own:
            return None
    return stacked


def order_responses(responses: object, env_ids: Sequence[str] | None) -> list[PolicyResponse]:
    """Put responses in the VecEnv's env order.

    Args:
        responses: A sequence of :class:`~rlightning.PolicyResponse`, one per env.
        env_ids: The VecEnv's env ids in env order (``env_ids[i]`` is env ``i``), or None to keep
            the order of ``responses``.

    Returns:
        The responses as a list, ``result[i]`` being the response for env ``i``.

    Raises:
        TypeError: ``responses`` is not a sequence of PolicyResponse, or ``env_ids`` is not a
            sequence of str (rule ``env-id``).
        ValueError: ``responses`` is empty; a response is a stacked batch (``env_id`` None and
            an ``env_ids`` field, as ``PolicyResponse.stack`` makes); two responses share an env
            id; ``env_ids`` repeats an id, has a different length than ``responses`` (both
            lengths are named), lacks a response's env id (unknown ids are named) or has ids no
            response answers (missing envs are named).
    """
    if isinstance(responses, PolicyResponse) and "env_ids" in responses.__dict__:
        raise TypeError(
            f"responses must be a sequence of PolicyResponse (one per env), got one stacked "
            f"{type(responses).__name__} of envs {responses.__dict__['env_ids']!r}; pass "
            "rlightning.ResponseBatch(stacked) or stacked.unbind()"
        )
    if isinstance(responses, PolicyResponse) or not isinstance(responses, Sequence):
        raise TypeError(
            f"responses must be a sequence of PolicyResponse (one per env), "
            f"got {type(responses).__name__}"
        )
    out = list(responses)
    if not out:
        raise ValueError("responses is empty: pass one PolicyResponse per env")
    for index, response in enumerate(out):
        if not isinstance(response, PolicyResponse):
            raise TypeError(
                f"responses[{index}] must be a PolicyResponse, got {type(response).__name__}"
            )
        if response.env_id is None and "env_ids" in response.__dict__:
            raise ValueError(
                f"responses[{index}] is a stacked batch (PolicyResponse.stack) of envs "
                f"{response.__dict__['env_ids']!r}, not one env's response; pass its unbind()"
            )
    given = [r.env_id for r in out]
    dups = _duplicates(given)
    if dups:
        raise ValueError(f"several responses for env id(s) {dups}: give one response per env")
    if env_ids is None:
        return out
    order = check_env_ids(
        env_ids, per="env of the VecEnv", expected="a sequence of str in the VecEnv's env order"
    )
    by_id = {r.env_id: r for r in out}
    missing = [env_id for env_id in order if env_id not in by_id]
    known = set(order)
    unknown = [env_id for env_id in given if env_id not in known]
    if len(order) != len(out):
        raise ValueError(
            f"env_ids has {len(order)} ids but there are {len(out)} responses; "
            f"envs without a response: {missing}, responses for unknown env ids: {unknown}"
        )
    if missing or unknown:
        raise ValueError(
            f"responses do not match env_ids: envs without a response: {missing}, "
            f"responses for unknown env ids: {unknown}"
        )
    return [by_id[env_id] for env_id in order]
