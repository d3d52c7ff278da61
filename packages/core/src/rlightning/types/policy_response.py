"""Policy response data structures.

This module provides classes for representing policy action responses, supporting both
single-agent and multi-agent scenarios. It follows the original API page
(reproduced in ``docs/original_api.md``) member for member and documents what that page left
open: which fields ``to_dict`` leaves out, how latencies treat bad stamps and clock skew, how
conversions treat nested containers and dtypes numpy lacks, and which names a field may not take.

Timing stamps are integers in nanoseconds since the Unix epoch (``time.time_ns()``), in the order
a step travels (``rlightning.rules.STAMP_ORDER``):

* ``ts_env_sent_ns`` -- set by whoever sends the observation (the env worker);
* ``ts_policy_recv_ns`` and ``ts_infer_start_ns`` -- set by ``rlightning_ray``'s policy server
  (the request arrived; its batch's forward pass began);
* ``ts_policy_sent_ns`` -- set by :meth:`PolicyResponse.mark_policy_sent`.

:class:`MultiAgentPolicyResponse` is defined in ``rlightning.types._multi_agent`` and re-exported
here, where its ``__module__`` says it lives (pickles and the wire format record that path). The
field checks and latency arithmetic are in ``rlightning._fields``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any, ClassVar, TypeVar

import gymnasium as gym

from rlightning import _convert
from rlightning._convert import ATOMIC_TYPES, fields_to_cpu, fields_to_device, fields_to_numpy
from rlightning._fields import _check_env_id, _check_space, _latency_s, _reserved_names
from rlightning._pickle import reduce_response
from rlightning._stack import stack_responses, unbind_response
from rlightning._torch import cuda_device, require_torch, torch_if_imported
from rlightning._tree import tree_equal, tree_repr

__all__ = ["MultiAgentPolicyResponse", "PolicyResponse"]


_Self = TypeVar("_Self", bound="PolicyResponse")


class PolicyResponse(SimpleNamespace):
    """Policy response container for single-agent interactions.

    Holds the action and any additional data produced by a policy for a single environment step.
    Data fields are plain attributes: ``response.action``, ``response.log_prob``, ... Values can be
    anything; numpy arrays and torch tensors (nested in dicts, lists, tuples and namedtuples too)
    are what the conversion methods act on. torch is optional: without it every method except
    :meth:`cuda` works on numpy and Python data.

    Conventional fields (names follow Stable-Baselines3 and PettingZoo): ``action`` (what the env's
    ``step`` takes), ``buffer_action`` (what a buffer stores), ``value``, ``log_prob``, ``state``
    (recurrent state), ``episode_start``, ``action_mask``, ``policy_version``, and the stamps
    ``ts_env_sent_ns``, ``ts_policy_recv_ns``, ``ts_infer_start_ns`` and ``ts_policy_sent_ns``
    (nanoseconds since the epoch).

    Attributes:
        env_id: Environment identifier this response is for (a str, or None when not routed).

    Args:
        env_id: Environment identifier, a str or None.
        **data: Response fields. A name that would shadow a member of the class (``to_dict``,
            ``cpu``, ``numpy``, ``__class__``, ...; the members the class has when it is
            created) is refused. ``self`` is an ordinary field name. Values are stored as
            given, not copied.

    Raises:
        TypeError: ``env_id`` is neither a str nor None; also at class creation, for a subclass
            whose class (or a mixin's) defines a member named ``env_id``.
        ValueError: a field name would shadow a member of the class.

    Examples:
        >>> import numpy as np
        >>> r = PolicyResponse("env-0", action=np.array([1]), value=0.5)
        >>> r.action
        array([1])
        >>> r.to_dict()
        {'action': array([1]), 'value': 0.5}
        >>> r
        PolicyResponse(env_id='env-0', action=array([1], dtype=int64), value=0.5)
    """

    env_id: str | None

    #: Names a field may not take: every member of the class, computed once per class, plus
    #: the protocol names that copy, pickle, numpy and torch look up on the instance.
    _reserved_fields: ClassVar[frozenset[str]] = frozenset()
    #: Fields that ``del`` refuses.
    _undeletable_fields: ClassVar[frozenset[str]] = frozenset({"env_id"})

    __hash__ = None  # mutable container, like SimpleNamespace

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        shadowing = [k.__qualname__ for k in cls.__mro__ if "env_id" in vars(k)]
        if shadowing:
            raise TypeError(
                f"{cls.__name__}: {shadowing[0]} defines a member named 'env_id', which would "
                "shadow the env_id every response stores; rename it"
            )
        # Computed once, here: members added to the class later are not reserved.
        cls._reserved_fields = _reserved_names(cls)

    def __init__(self, /, env_id: str | None, **data: Any) -> None:
        # The hot path of every step: checks inline, one set operation for the reserved names
        # (computed once per class), and the fields written straight into the instance dict.
        # ``self`` is positional-only: CPython then matches each keyword against ``env_id``
        # alone (not ``self`` too), and a field may be named ``self``. The exact class reads its
        # reserved names from a module global, cheaper than a class attribute read through the
        # instance; a subclass reads its own (its members are reserved too).
        if type(env_id) is not str and env_id is not None:
            _check_env_id(env_id)  # raises unless a str subclass
        if type(self) is PolicyResponse:
            if not _RESERVED.isdisjoint(data):
                self._refuse_reserved(data)
        elif not type(self)._reserved_fields.isdisjoint(data):
            self._refuse_reserved(data)
        fields = self.__dict__
        fields["env_id"] = env_id
        fields |= data  # in place; cheaper than the .update() method call

    @classmethod
    def _refuse_reserved(cls, names: Mapping[str, Any]) -> None:
        clashes = sorted(cls._reserved_fields.intersection(names))
        raise ValueError(
            f"field name(s) {', '.join(map(repr, clashes))} would shadow "
            f"{cls.__name__}.{clashes[0]}; rename the field (reserved: every member of the class)"
        )

    def __setattr__(self, name: str, value: Any) -> None:
        if name in type(self)._reserved_fields:
            type(self)._refuse_reserved({name: value})
        if name == "env_id" and type(value) is not str and value is not None:
            _check_env_id(value)
        self.__dict__[name] = value

    def __delattr__(self, name: str) -> None:
        if name in type(self)._undeletable_fields:
            raise AttributeError(
                f"cannot delete {name!r}: every {type(self).__name__} has one "
                f"(set it to a new value instead)"
            )
        super().__delattr__(name)

    # ------------------------------------------------------------------ dunder protocol
    def __eq__(self, other: object) -> bool:
        # Never NotImplemented: Python would then fall back to SimpleNamespace.__eq__, which
        # ignores the class and raises on arrays.
        if type(self) is not type(other):
            return False
        return tree_equal(self.__dict__, other.__dict__)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __repr__(self) -> str:
        parts = [f"{key}={tree_repr(value)}" for key, value in self.__dict__.items()]
        return f"{type(self).__name__}({', '.join(parts)})"

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        return reduce_response(self, protocol)

    def __copy__(self: _Self) -> _Self:
        new = type(self).__new__(type(self))
        new.__dict__.update(self.__dict__)
        return new

    # ------------------------------------------------------------------ data access
    def to_dict(self) -> dict[str, Any]:
        """Convert to dictionary excluding env_id.

        The timing stamps (``rlightning.rules.STAMP_FIELDS``: ``ts_env_sent_ns``,
        ``ts_policy_recv_ns``, ``ts_infer_start_ns``, ``ts_policy_sent_ns``) are left out too:
        they describe the transport, not the step's data. Every other field is kept
        (``policy_version`` included: which weights produced the step is data). Values are the
        stored objects themselves (a shallow copy of the field mapping; arrays and tensors are
        not copied).

        Returns:
            Dictionary of response fields, in the order they were set.
        """
        # One constant-key lookup per stamp (rlightning.rules.STAMP_FIELDS, spelled out): a
        # set operation over the fields costs more than the four lookups (callgrind).
        fields = self.__dict__.copy()
        del fields["env_id"]
        if "ts_env_sent_ns" in fields:
            del fields["ts_env_sent_ns"]
        if "ts_policy_sent_ns" in fields:
            del fields["ts_policy_sent_ns"]
        if "ts_policy_recv_ns" in fields:
            del fields["ts_policy_recv_ns"]
        if "ts_infer_start_ns" in fields:
            del fields["ts_infer_start_ns"]
        return fields

    # ------------------------------------------------------------------ conversions
    def to(self: _Self, device: Any, non_blocking: bool = False) -> _Self:
        """Move every torch tensor attribute to ``device``, in place.

        Tensors nested in dicts, lists, tuples and namedtuples move too; those containers are
        rebuilt (same types) only when a tensor in them moved, and the containers passed in are
        never mutated. numpy arrays and other values are left alone. A tensor already on
        ``device`` is kept as the same object. Without torch no tensor can exist, so moving to
        ``"cpu"`` is a no-op and any other device needs torch.

        Args:
            device: A ``torch.device``, a string such as ``"cpu"``, ``"cuda"`` or ``"cuda:1"``, or a
                CUDA device index.
            non_blocking: Passed to ``Tensor.to``. A copy from pinned CPU memory to CUDA, or from
                CUDA to CPU, may then return before it finishes: synchronise
                (``torch.cuda.synchronize()`` or the stream) before reading the result on the CPU.

        Returns:
            Self, with the tensors moved.

        Raises:
            ImportError: ``device`` is not the CPU and torch is not installed.
            RuntimeError: torch cannot move a tensor there (e.g. CUDA is not available); the
                message names the field and torch's error. Nothing is changed then: the
                response is only written once every field moved.
            ValueError: a field contains itself (a reference cycle).
        """
        fields = self.__dict__
        if device == "cpu":
            fields_to_cpu(fields, non_blocking)
            return self
        torch = torch_if_imported() or require_torch(f"{type(self).__name__}.to({device!r})")
        target = torch.device(device)
        if target.type == "cpu":
            fields_to_cpu(fields, non_blocking)
        else:
            fields_to_device(fields, target, non_blocking)
        return self

    def cpu(self: _Self) -> _Self:
        """Move all tensor attributes to CPU, in place (``to("cpu")``).

        When every field is already a CPU ``torch.Tensor`` or a plain value (a number, str,
        bytes, None, numpy array) there is nothing to move and ``self`` is returned at once,
        without the walk; anything else goes through :meth:`to`.

        Returns:
            Self with tensors moved to CPU.

        Raises:
            RuntimeError: torch cannot copy a tensor to the CPU (e.g. a meta tensor); the
                message names the field.
            ValueError: a field contains itself (a reference cycle).
        """
        # The common case inline (cpu() of a CPU policy's output): one type check and one
        # ``is_cpu`` per field, no call. The cached type is ``torch.Tensor`` once a conversion
        # has seen torch; before that it is None, no tensor matches it and to() does the work.
        tensor = _convert._tensor
        for value in self.__dict__.values():
            kind = type(value)
            if kind is tensor:
                if not value.is_cpu:
                    break
            elif kind not in ATOMIC_TYPES:
                break
        else:
            return self
        return self.to("cpu")

    def cuda(self: _Self, device: str | int | None = None) -> _Self:
        """Move all tensor attributes to CUDA, in place (``to(device)``).

        Args:
            device: CUDA device index or string. Defaults to ``'cuda'`` (the current device).

        Returns:
            Self with tensors moved to CUDA.

        Raises:
            ImportError: torch is not installed (torch with CUDA support is needed).
            RuntimeError: torch has no usable CUDA device.
            ValueError: ``device`` names a device that is not CUDA.
        """
        return self.to(cuda_device(type(self).__name__, device))

    def numpy(self: _Self) -> _Self:
        """Convert all tensor attributes to NumPy arrays, in place.

        Each tensor (nested ones too) is detached, moved to the CPU and converted; a CPU tensor
        that needs no such work becomes an array sharing its memory. Dtypes numpy lacks are
        widened: bfloat16 and the float8 family to float32, complex32 to complex64. Values that are
        not tensors, numpy arrays included, are left alone.

        Returns:
            Self with tensors converted to NumPy arrays.

        Raises:
            TypeError: a tensor cannot be converted (e.g. a sparse, nested, quantized or meta
                tensor); the message names the field and torch's error. Nothing is changed
                then: the response is only written once every field converted.
            ValueError: a field contains itself (a reference cycle).
        """
        fields_to_numpy(self.__dict__)
        return self

    # ------------------------------------------------------------------ timing
    def mark_policy_sent(self: _Self) -> _Self:
        """Record the timestamp when the policy response is sent.

        Sets ``ts_policy_sent_ns`` to ``time.time_ns()`` (nanoseconds since the epoch), in place.

        Returns:
            Self for method chaining.
        """
        self.__dict__["ts_policy_sent_ns"] = time.time_ns()
        return self

    def compute_sent_latency(self, now_ns: int | None = None) -> float:
        """Compute latency in seconds from env-sent timestamp to now.

        Use for env->policy or env->buffer transfer time (e.g. in a policy's rollout hook or in a
        buffer's ``add_transition``).

        Args:
            now_ns: Current time in nanoseconds since the epoch. If None, uses ``time.time_ns()``.

        Returns:
            Latency in seconds, or 0.0 if ``ts_env_sent_ns`` is missing, None, not an integer or
            outside the 64-bit range. Never negative: when the sender's clock is ahead
            (another machine), 0.0.

        Warns:
            rlightning.StampWarning: once per reason, when the 0.0 hides a bug: the stamp is not
                an int (e.g. float seconds from ``time.time()``), is negative or beyond 64 bits,
                or is more than a minute ahead of ``now_ns``
                (``rlightning.rules.STAMP_FUTURE_TOLERANCE_NS``). A missing or None stamp, or
                clock skew under a minute, returns 0.0 silently.

        Raises:
            TypeError: ``now_ns`` is given and is not an integer.
            ValueError: ``now_ns`` does not fit in a 64-bit integer.
        """
        return _latency_s(
            self.__dict__.get("ts_env_sent_ns"), now_ns, "ts_env_sent_ns", "compute_sent_latency"
        )

    def compute_policy_latency(self, now_ns: int | None = None) -> float:
        """Compute latency in seconds from the policy-sent timestamp to now.

        Use for policy->env or policy->buffer transfer time, after :meth:`mark_policy_sent`.

        Args:
            now_ns: Current time in nanoseconds since the epoch. If None, uses ``time.time_ns()``.

        Returns:
            Latency in seconds, or 0.0 if ``ts_policy_sent_ns`` is missing, None, not an
            integer or outside the 64-bit range. Never negative.

        Warns:
            rlightning.StampWarning: once per reason, as :meth:`compute_sent_latency` does.

        Raises:
            TypeError: ``now_ns`` is given and is not an integer.
            ValueError: ``now_ns`` does not fit in a 64-bit integer.
        """
        return _latency_s(
            self.__dict__.get("ts_policy_sent_ns"),
            now_ns,
            "ts_policy_sent_ns",
            "compute_policy_latency",
        )

    # ------------------------------------------------------------------ construction
    @staticmethod
    def make_example(
        action_space: gym.Space[Any], env_id: str | None = None, **data: Any
    ) -> PolicyResponse:
        """Create an example PolicyResponse.

        Args:
            action_space: Gymnasium action space for sampling (any space that can ``sample()``:
                Box, Discrete, MultiDiscrete, MultiBinary, Text, Dict, Tuple, nested ones, ...).
                Seed the space (``action_space.seed(0)``) for a reproducible action.
            env_id: Optional environment identifier.
            **data: Additional response data.

        Returns:
            PolicyResponse with sampled action (``action_space.sample()``).

        Raises:
            TypeError: ``action_space`` is not a ``gymnasium.Space``, or ``action`` is passed in
                ``data`` (the action is what is sampled).
        """
        _check_space(action_space, "action_space")
        if "action" in data:
            raise TypeError("make_example() samples the action; do not pass action=")
        return PolicyResponse(env_id, action=action_space.sample(), **data)

    # ------------------------------------------------------------------ batching and transport
    @classmethod
    def stack(cls: type[_Self], responses: Sequence[_Self]) -> _Self:
        """Stack per-env responses into one response with a leading batch dimension.

        numpy arrays and torch tensors (nested in dicts, lists, tuples and namedtuples too) of
        shape ``S`` become one array/tensor of shape ``(n_envs, *S)`` (``np.stack`` /
        ``torch.stack``, on the tensors' device), numpy scalars one array of shape ``(n_envs,)``;
        other leaves (Python scalars, str, None, ...) are kept as a :class:`~rlightning.PerEnv`
        list. The result has ``env_id=None`` and a field ``env_ids`` listing the ``n_envs`` env
        ids in order. :meth:`unbind` is the inverse (see ``rlightning._stack`` for the rules).
        ``MultiAgentPolicyResponse.stack`` stacks each agent's entries (the agents must match).

        Args:
            responses: Responses of one class (``cls`` or a subclass), one per env, in row order.

        Returns:
            A new response of that class; the inputs are not mutated.

        Raises:
            TypeError: ``responses`` is not a sequence (a str or bytes counts as not one), item 0
                is not a ``cls``, the items are of mixed classes, a field holds values of
                different types, or ``torch.stack`` refuses a tensor field (e.g. sparse or
                quantized layouts).
            ValueError: empty input; responses whose fields, keys, lengths, shapes, dtypes or
                devices differ (the message names the field and the env ids); a response that
                already has a field named ``env_ids``; or a field that contains itself (a
                reference cycle).
        """
        return stack_responses(cls, responses)

    def unbind(self: _Self) -> list[_Self]:
        """Split a stacked response into one response per env (the inverse of :meth:`stack`).

        Row ``i`` of every tensor and of every array with two or more dimensions (a view: no
        copy, writes reach the stacked data), item ``i`` of every :class:`~rlightning.PerEnv`,
        and every other value shared as is. Row ``i`` of a 1-D array is a numpy scalar (a copy,
        as numpy indexing gives), except where ``stack`` built the array from 0-d arrays: then
        it is a 0-d view. Env ids come from the ``env_ids`` field (left out of the results;
        ``self`` is not mutated); without it they are None and ``n_envs`` is the leading size of
        the first array, tensor or ``PerEnv`` found.

        Returns:
            ``n_envs`` new responses of this class, in row order.

        Raises:
            TypeError: ``env_ids`` is not a list of str/None.
            ValueError: a batched value does not have ``len(env_ids)`` rows (the message names
                the field); there is no ``env_ids`` and no batched value to count rows from;
                ``self`` has an ``env_id`` but no ``env_ids`` (it was not stacked); a field
                contains itself (a reference cycle); or the split would write more than 16
                values per item ``self`` holds (shared values are written into every row: see
                ``docs/transport.md``), checked before anything is built.
        """
        return unbind_response(self)

    def to_bytes(self, *, checksum: bool = True) -> bytes:
        """Encode as a safe, versioned byte message (see :mod:`rlightning.wire`).

        msgpack for the structure, raw little-endian buffers for arrays and tensors; decoding
        with :meth:`from_bytes` never runs code. Tensors are copied to the CPU for the message.

        Args:
            checksum: Store a CRC-32 that :meth:`from_bytes` verifies.

        Returns:
            The message.

        Raises:
            TypeError: a value or dict key has a type the format does not carry, or an int dict
                key does not fit in 64 bits (the message names the field), or ``self`` is a user
                subclass.
            ValueError: whatever ``from_bytes`` would refuse, naming the field: nesting deeper
                than ``rlightning.wire.MAX_DEPTH``, an int of more than 4,300 decimal digits, a
                dict with more than ``rlightning.wire.MAX_KEYS_PER_HASH`` keys sharing one hash
                value, a NaN dict key, ... (the full list: ``rlightning.wire.encode``).
        """
        from rlightning import wire

        return wire.encode(self, checksum=checksum)

    @classmethod
    def from_bytes(
        cls: type[_Self],
        data: Any,
        *,
        max_bytes: int | None = None,
        copy: bool = False,
        max_header_bytes: int | None = None,
    ) -> _Self:
        """Decode a message made by :meth:`to_bytes`; never runs code.

        Args:
            data: ``bytes``, ``bytearray``, ``memoryview`` or any C-contiguous buffer (read as
                its bytes).
            max_bytes: Largest message accepted (default ``rlightning.wire.MAX_BYTES_DEFAULT``,
                1 GiB), checked before anything is allocated.
            copy: False: arrays are views into ``data`` (read-only for ``bytes``); True: copies.
            max_header_bytes: Largest msgpack header (structure without buffers) accepted
                (default ``rlightning.wire.MAX_HEADER_BYTES_DEFAULT``, 4 MiB), checked before it
                is unpacked; it bounds the Python objects a hostile message can make.

        Returns:
            The response, of the class stored in the message (this class or a subclass); tensors
            are CPU tensors with their dtype kept.

        Raises:
            rlightning.wire.WireFormatError: truncated, corrupted, oversized or hostile bytes, or
                a message of another class.
            rlightning.wire.TorchUnavailableError: the message holds a tensor and torch is not
                installed.
            TypeError: ``data`` is not a C-contiguous bytes-like object, or a limit is not an
                int.
            ValueError: a limit is negative.
        """
        from rlightning import wire

        return wire.decode(
            data, cls, max_bytes=max_bytes, copy=copy, max_header_bytes=max_header_bytes
        )


PolicyResponse._reserved_fields = _RESERVED = _reserved_names(PolicyResponse)

# Imported last: the class subclasses PolicyResponse (defined above) and is re-exported here.
from rlightning.types._multi_agent import MultiAgentPolicyResponse  # noqa: E402
