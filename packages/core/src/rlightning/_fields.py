"""Checks and helpers behind the response classes' fields (private).

``env_id`` checks, the latency arithmetic of ``compute_*_latency``, the names a field may not take,
the gymnasium-space check of ``make_example`` and the adapters' builder
(:func:`rlightning.types.response_from_checked`). The timing-stamp names and the stamp rule are
:mod:`rlightning.rules`' (``STAMP_FIELDS``, ``check_stamp``). Moved out of
:mod:`rlightning.types.policy_response` unchanged (same names), so the classes there keep only
their methods; nothing here imports torch.
"""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, TypeVar, cast

import gymnasium as gym
import numpy as np

from rlightning.rules._responses import check_env_id
from rlightning.rules._values import (
    STAMP_EPOCH_FLOOR_NS,
    _stamp_problem,
    _unusable_stamp_latency,
)

if TYPE_CHECKING:
    from rlightning.types.policy_response import PolicyResponse

_R = TypeVar("_R", bound="PolicyResponse")


def _check_env_id(env_id: object) -> None:
    """The constructors' slow path for an ``env_id`` that is not an exact str or None.

    Rule ``env-id`` (:func:`rlightning.rules.check_env_id`): a str subclass passes, anything
    else (an object faking ``__class__``, a ``Mock(spec=str)``, a number) raises ``TypeError``.
    """
    check_env_id(env_id)


_INT64_MIN, _INT64_MAX = -(2**63), 2**64 - 1  # signed or unsigned 64-bit


def _latency_s(stamp: object, now_ns: int | None, stamp_name: str, method: str) -> float:
    wall_clock = now_ns is None
    if wall_clock:
        now_ns = time.time_ns()
    elif isinstance(now_ns, bool) or not isinstance(now_ns, (int, np.integer)):
        raise TypeError(
            f"now_ns must be an int of nanoseconds since the epoch, got "
            f"{type(now_ns).__name__} {now_ns!r} (while reading {stamp_name})"
        )
    elif not _INT64_MIN <= now_ns <= _INT64_MAX:
        raise ValueError(
            f"now_ns must fit in a 64-bit int of nanoseconds, got {now_ns!r} "
            f"(while reading {stamp_name})"
        )
    if type(stamp) is int and 0 <= stamp <= _INT64_MAX:  # the common case: time.time_ns()
        elapsed_ns = int(now_ns) - stamp
    elif _stamp_problem(stamp) is None:  # the timestamp rule (a numpy integer)
        elapsed_ns = int(now_ns) - int(cast("int", stamp))
    else:
        elapsed_ns = 0
    if elapsed_ns > 0:
        if wall_clock and elapsed_ns > now_ns - STAMP_EPOCH_FLOOR_NS:
            # Read against time.time_ns(), a stamp before 2001 came from another clock
            # (time.monotonic_ns(), perf_counter_ns()) or unit (us, ms): 0.0, warned once.
            return _unusable_stamp_latency(stamp_name, stamp, int(now_ns), method, other_clock=True)
        return elapsed_ns / 1e9
    # No stamp, an invalid one or one not before now: 0.0, warned once when it is a bug.
    return _unusable_stamp_latency(stamp_name, stamp, int(now_ns), method)


# Names that protocols (copy, pickle, numpy, torch, DLPack) look up on the *instance*: a field
# with one of these names would hijack them, so they are reserved like the class's members.
_PROTOCOL_NAMES: frozenset[str] = frozenset(
    {
        "__copy__", "__deepcopy__", "__reduce__", "__reduce_ex__", "__getstate__",
        "__setstate__", "__getnewargs__", "__getnewargs_ex__", "__array__",
        "__array_interface__", "__array_struct__", "__array_priority__", "__array_ufunc__",
        "__array_function__", "__array_wrap__", "__cuda_array_interface__", "__dlpack__",
        "__dlpack_device__", "__torch_function__", "__torch_dispatch__", "__fspath__",
        "__index__", "__len__", "__iter__", "__getitem__", "__call__", "__slots__",
    }
)  # fmt: skip


def _reserved_names(cls: type) -> frozenset[str]:
    return (frozenset(dir(cls)) | _PROTOCOL_NAMES) - {"env_id"}


def _check_space(space: object, name: str) -> None:
    if not isinstance(space, gym.Space):
        raise TypeError(f"{name} must be a gymnasium.Space, got {type(space).__name__} {space!r}")


#: ``SimpleNamespace.__new__``: an empty instance of a response class, its ``__init__`` not run.
_new_namespace = SimpleNamespace.__new__


def response_from_checked(cls: type[_R], env_id: str | None, fields: dict[str, Any]) -> _R:
    """Build ``cls(env_id, **fields)`` without running ``__init__``, for inputs already checked.

    Public as :func:`rlightning.types.response_from_checked`. For adapters' checked per-step
    paths (``rlightning_sb3``, ``rlightning_pettingzoo``), where the constructor's Python-level
    call (keyword packing, a frame, the checks) costs as much as the rest of their fixed work.
    Nothing is checked here: the caller guarantees what ``__init__`` would check, or the response
    breaks its class's promises silently:

    * ``env_id`` is None or an exact ``str``;
    * no field name is reserved (a member of ``cls`` such as ``cpu`` or ``to_dict``, or a protocol
      name looked up on instances such as ``__deepcopy__``; ``cls(env_id, **fields)`` raises
      ``ValueError`` for those);
    * any check of the class itself holds (``MultiAgentPolicyResponse``'s ``action`` is a dict
      keyed by agent id);
    * for a ``MultiAgentPolicyResponse``, ``action`` is the first key of ``fields``: its
      constructor stores ``action`` right after ``env_id``, wherever it was given.

    The fields are stored in the instance ``__dict__``: ``env_id`` first, then ``fields`` in
    order, as ``__init__`` stores them when the above holds; so the result equals (``==``),
    pickles and prints as ``cls(env_id, **fields)``.

    Args:
        cls: ``PolicyResponse`` or a subclass.
        env_id: The response's ``env_id``.
        fields: The other fields; copied into the response's ``__dict__`` (values not copied,
            ``fields`` itself not kept).

    Returns:
        The new response.

    Examples:
        >>> from rlightning import PolicyResponse
        >>> from rlightning.types import response_from_checked
        >>> response_from_checked(PolicyResponse, "env-0", {"action": 1}) == PolicyResponse(
        ...     "env-0", action=1
        ... )
        True
    """
    response = _new_namespace(cls)
    data = response.__dict__
    data["env_id"] = env_id
    data |= fields  # in place: the operator costs less than the .update() method call
    return response


def response_from_fields(cls: type[_R], fields: dict[str, Any]) -> _R:
    """Build a response from its whole field mapping, ``env_id`` first, without ``__init__``.

    Public as :func:`rlightning.types.response_from_fields`. As :func:`response_from_checked`
    (the same guarantees are the caller's: nothing is checked), for a caller that builds the
    mapping itself: ``fields`` holds ``env_id`` as its first key, then the other fields in
    order (for a ``MultiAgentPolicyResponse``, ``action`` second, as its constructor stores
    it). Copying a mapping that already starts with ``env_id`` into the new response is one
    copy of the whole table (CPython copies a plain dict into an empty one in bulk), where
    ``response_from_checked`` inserts ``env_id`` and then every field one at a time.

    Args:
        cls: ``PolicyResponse`` or a subclass.
        fields: ``{"env_id": ..., **other_fields}`` (a plain dict); copied into the response's
            ``__dict__`` (values not copied, ``fields`` itself not kept).

    Returns:
        The new response, equal (``==``) to ``cls(fields["env_id"], **other_fields)``.

    Examples:
        >>> from rlightning import PolicyResponse
        >>> from rlightning.types import response_from_fields
        >>> response_from_fields(PolicyResponse, {"env_id": "env-0", "action": 1})
        PolicyResponse(env_id='env-0', action=1)
    """
    response = _new_namespace(cls)
    data = response.__dict__
    data |= fields  # a local: ``response.__dict__ |= ...`` would assign __dict__ back
    return response
