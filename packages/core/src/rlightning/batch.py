"""``ResponseBatch``: the responses of one batched policy call, built only when read.

A policy usually answers many envs at once (SB3 runs ``policy(obs)`` on an ``(n_envs, ...)``
batch). Splitting that answer into ``n_envs`` :class:`~rlightning.PolicyResponse` objects costs
about 2 us per env (a row view per tensor, a response per env) -- at 64 envs about as much as a
small MLP's forward pass -- and a training
loop that hands the batch straight back (to ``VecEnv.step``, to a rollout buffer) never needs
them. A :class:`ResponseBatch` holds the answer as one *stacked* response (the layout of
:meth:`PolicyResponse.stack <rlightning.PolicyResponse.stack>`: fields with a leading dimension of
``n_envs``, plus ``env_ids``) and builds the per-env responses
(:meth:`PolicyResponse.unbind <rlightning.PolicyResponse.unbind>`) the first time one is read.

It is a read-only ``Sequence``: ``len``, indexing, slicing (a slice is a plain ``list``),
iteration, ``in``, ``==`` with a list, ``reversed``, ``index``, ``count`` and ``+`` (a new
``list``) all behave as on the list of per-env responses; ``isinstance(batch, list)`` is False,
``list(batch)`` gives one. Code that works on the whole batch reads
:attr:`ResponseBatch.stacked` and skips the split.

:func:`pack_responses` and :func:`pack_steps` are the same idea for a list of such answers sent
to another process (``rlightning_ray``'s fragments): stand-ins that pickle ``n_steps`` responses,
or arrays, as one stacked array per field and load them as the per-step pickling loads them;
:func:`reduce_in_band` pickles such a holder's whole state with the standard pickler, as one
bytes object beside its large buffers (Ray's cloudpickle is slower on many small objects).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, Generic, TypeVar, overload

from rlightning._fields import _new_namespace
from rlightning._pickle import IN_BAND_MAX_BYTES, pack_responses, pack_steps, reduce_in_band
from rlightning._stack import ENV_IDS_FIELD
from rlightning.types.policy_response import PolicyResponse

__all__ = [
    "IN_BAND_MAX_BYTES",
    "ResponseBatch",
    "pack_responses",
    "pack_steps",
    "reduce_in_band",
]

_R = TypeVar("_R", bound=PolicyResponse)

#: Responses a split batch's repr shows (as many as a PolicyResponse's repr shows of a container).
_REPR_ITEMS = 8

#: Taken by the first split of any batch (never on reads after it), so that two threads reading
#: an unsplit batch at once get the same responses.
_SPLIT_LOCK = threading.Lock()
#: ``object.__new__``: an empty batch for :meth:`ResponseBatch.trusted`, no attribute look-up.
_new_object = object.__new__


class ResponseBatch(Sequence[_R], Generic[_R]):
    """One response per env, held stacked until an env's response is read.

    Reading an element (``batch[i]``, a slice, iteration, ``==``, ``in``, ``+``) splits the
    stacked response once, with :meth:`PolicyResponse.unbind <rlightning.PolicyResponse.unbind>`,
    and keeps the per-env responses: ``batch[0] is batch[0]``. From then on those responses are
    the data -- change one and later reads see the change -- and :attr:`stacked` is None, since it
    could be out of date. ``len(batch)``, :attr:`env_ids` and ``repr`` never split (``repr`` shows
    the stacked response, or the first 8 per-env responses once split).

    What the split gives (as ``unbind``): row ``i`` of every tensor and of every array with two or
    more dimensions, as a view of the stacked data (no copy); row ``i`` of a 1-D array as a numpy
    scalar (a copy); item ``i`` of every :class:`~rlightning.PerEnv`; any other value shared.

    Args:
        stacked: A stacked response: ``env_id`` None and a field ``env_ids`` listing the ``n_envs``
            env ids (str or None) in row order, every other batched field with ``n_envs`` rows.
            Held, not copied: do not change it after passing it in.

    Raises:
        TypeError: ``stacked`` is not a PolicyResponse, or its ``env_ids`` is not a list.
        ValueError: ``stacked`` has an ``env_id`` (it is one env's response) or no ``env_ids``
            field, or ``env_ids`` is empty. Rows that do not match ``env_ids`` are found when the
            batch is split (``unbind`` raises ValueError naming the field).

    Examples:
        >>> import numpy as np
        >>> from rlightning import PolicyResponse
        >>> stacked = PolicyResponse(None, env_ids=["a", "b"], action=np.array([[1], [0]]))
        >>> batch = ResponseBatch(stacked)
        >>> len(batch), batch.env_ids
        (2, ['a', 'b'])
        >>> batch.stacked is stacked
        True
        >>> batch[1]
        PolicyResponse(env_id='b', action=array([0], dtype=int64))
        >>> batch.stacked is None
        True
    """

    __slots__ = ("_responses", "_stacked", "_trusted")

    _stacked: _R | None
    _responses: list[_R] | None
    #: Built by its producer with :meth:`trusted`: ids unique, rows matching (see
    #: :attr:`is_trusted`).
    _trusted: bool

    def __init__(self, stacked: _R) -> None:
        if not isinstance(stacked, PolicyResponse):
            raise TypeError(
                f"ResponseBatch takes a stacked PolicyResponse (PolicyResponse.stack's layout), "
                f"got {type(stacked).__name__}"
            )
        fields = stacked.__dict__
        if fields["env_id"] is not None:
            raise ValueError(
                f"ResponseBatch takes a stacked response (env_id None, an {ENV_IDS_FIELD!r} "
                f"field), got the response of env {fields['env_id']!r}"
            )
        env_ids = fields.get(ENV_IDS_FIELD)
        if env_ids is None:
            raise ValueError(
                f"ResponseBatch takes a stacked response with an {ENV_IDS_FIELD!r} field (the env "
                f"ids in row order); the {type(stacked).__name__} given has none"
            )
        if not isinstance(env_ids, list):
            raise TypeError(
                f"the stacked response's {ENV_IDS_FIELD!r} must be a list of env ids, got "
                f"{type(env_ids).__name__} {env_ids!r}"
            )
        if not env_ids:
            raise ValueError(f"the stacked response's {ENV_IDS_FIELD!r} is empty: no env to answer")
        self._stacked = stacked
        self._responses = None
        self._trusted = False

    @classmethod
    def trusted(cls, stacked: _R) -> ResponseBatch[_R]:
        """Wrap a stacked response that the caller built and checked, skipping the checks.

        For adapters on their per-step path, which build ``stacked`` themselves: ``env_id`` None,
        a non-empty ``env_ids`` list of unique ids, ``n_envs`` rows in every batched field. Such
        a batch reports :attr:`is_trusted`, and code that reads :attr:`stacked` directly may rely
        on those facts without splitting. Anything else should use the constructor.

        Args:
            stacked: As the constructor's, with the guarantees above.

        Returns:
            The batch.
        """
        batch: ResponseBatch[_R] = _new_object(cls)  # (an adapter's per-step path)
        batch._stacked = stacked
        batch._responses = None
        batch._trusted = True
        return batch

    @classmethod
    def trusted_from_fields(
        cls, response_cls: type[_R], fields: dict[str, Any]
    ) -> ResponseBatch[_R]:
        """``trusted(response_from_fields(response_cls, fields))`` in one call.

        For adapters' per-step paths (the SB3 adapter's ``predict`` and ``act`` answer with
        it): the stacked response is built as
        :func:`rlightning.types.response_from_fields` builds it, and wrapped as
        :meth:`trusted` wraps it, without the two calls. Nothing is checked: the guarantees of
        both are the caller's (``fields`` starts with ``env_id`` None and ``env_ids``, a
        non-empty list of unique ids, in the order :meth:`PolicyResponse.stack` stores them:
        for a ``MultiAgentPolicyResponse`` ``env_id``, ``action``, then ``env_ids``; no field
        name is reserved; ``n_envs`` rows in every batched field).

        Args:
            response_cls: ``PolicyResponse`` or a subclass, the stacked response's class.
            fields: ``{"env_id": None, "env_ids": [...], **batched_fields}`` (a plain dict);
                copied into the stacked response (values not copied, ``fields`` not kept).

        Returns:
            The trusted batch, equal to ``ResponseBatch(response_cls(None, **rest))``.

        Examples:
            >>> from rlightning import PerEnv, PolicyResponse, ResponseBatch
            >>> batch = ResponseBatch.trusted_from_fields(
            ...     PolicyResponse,
            ...     {"env_id": None, "env_ids": ["a", "b"], "action": PerEnv([0, 1])},
            ... )
            >>> batch[1]
            PolicyResponse(env_id='b', action=1)
        """
        stacked = _new_namespace(response_cls)
        data = stacked.__dict__
        data |= fields  # in place; the operator costs less than the .update() method call
        batch: ResponseBatch[_R] = _new_object(cls)
        batch._stacked = stacked
        batch._responses = None
        batch._trusted = True
        return batch

    # ------------------------------------------------------------------ the batch as a whole
    @property
    def stacked(self) -> _R | None:
        """The stacked response, or None once the batch was split into per-env responses.

        Read it to work on the whole batch without the split (the SB3 adapter's
        ``env_actions`` and buffer helpers do). Do not change it: the per-env responses are
        built from it when first read.
        """
        return self._stacked

    @property
    def is_trusted(self) -> bool:
        """Whether the producer vouched for the stacked form (:meth:`trusted`).

        True for batches an adapter made with :meth:`trusted`: unique env ids and ``n_envs``
        rows in every batched field. False for batches built with the constructor (from a
        stacked response of unknown origin, e.g. after a transport) and for unpickled ones; code
        that reads :attr:`stacked` directly (the SB3 helpers' fast path) uses only trusted
        batches and splits the others, which checks every row.
        """
        return self._trusted

    @property
    def env_ids(self) -> list[str | None]:
        """The env ids in row order (a new list; reading it does not split the batch)."""
        responses, stacked = self._responses, self._stacked
        if responses is not None:
            return [response.env_id for response in responses]
        assert stacked is not None
        return list(stacked.__dict__[ENV_IDS_FIELD])

    def responses(self) -> list[_R]:
        """Return the per-env responses, splitting the batch if it was not split yet.

        Returns:
            A new list holding the batch's responses, in row order (the responses themselves
            are shared with the batch: changing one changes what the batch holds).

        Raises:
            ValueError: the stacked response does not split (see the constructor).
        """
        return list(self._split())

    def _split(self) -> list[_R]:
        responses = self._responses
        if responses is None:
            with _SPLIT_LOCK:  # double-checked: another thread may have split it meanwhile
                responses = self._responses
                if responses is None:
                    assert self._stacked is not None
                    responses = self._responses = self._stacked.unbind()
                    self._stacked = None
        return responses

    # ------------------------------------------------------------------ Sequence protocol
    def __len__(self) -> int:
        responses, stacked = self._responses, self._stacked
        if responses is not None:
            return len(responses)
        assert stacked is not None
        return len(stacked.__dict__[ENV_IDS_FIELD])

    @overload
    def __getitem__(self, index: int) -> _R: ...

    @overload
    def __getitem__(self, index: slice) -> list[_R]: ...

    def __getitem__(self, index: int | slice) -> _R | list[_R]:
        return self._split()[index]

    def index(self, value: Any, start: int = 0, stop: int = sys.maxsize) -> int:
        """Return the position of the first response equal to ``value`` (as ``list.index``).

        Args:
            value: The response to look for.
            start: First position searched.
            stop: Position where the search stops.

        Returns:
            The position.

        Raises:
            ValueError: no response in ``[start, stop)`` equals ``value``.
        """
        return self._split().index(value, start, stop)

    def count(self, value: Any) -> int:
        """Return how many responses equal ``value`` (as ``list.count``).

        Args:
            value: The response to count.

        Returns:
            The count.
        """
        return self._split().count(value)

    def __add__(self, other: Iterable[Any]) -> list[Any]:
        """``batch + other``: a new list of this batch's responses, then ``other``'s items."""
        if not isinstance(other, (list, tuple, ResponseBatch)):
            return NotImplemented
        return [*self._split(), *other]

    def __radd__(self, other: Iterable[Any]) -> list[Any]:
        """``other + batch``: a new list of ``other``'s items, then this batch's responses."""
        if not isinstance(other, (list, tuple)):
            return NotImplemented
        return [*other, *self._split()]

    def __iter__(self) -> Iterator[_R]:
        return iter(self._split())

    def __reversed__(self) -> Iterator[_R]:
        return reversed(self._split())

    def __eq__(self, other: object) -> bool:
        """Equal to a list, tuple or ResponseBatch holding equal responses in the same order."""
        if isinstance(other, ResponseBatch):
            return self._split() == other._split()
        if isinstance(other, (list, tuple)):
            return self._split() == list(other)
        return NotImplemented

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = None  # type: ignore[assignment]  # mutable, like the list it stands for

    def __repr__(self) -> str:
        # Never splits (a debugger printing the batch must not change it) and stays bounded, as
        # a PolicyResponse's repr does: the stacked response, or the first 8 responses.
        responses, stacked = self._responses, self._stacked
        if responses is None:
            return f"{type(self).__name__}(stacked={stacked!r})"
        shown = ", ".join(repr(r) for r in responses[:_REPR_ITEMS])
        more = len(responses) - _REPR_ITEMS
        return f"{type(self).__name__}([{shown}{f', ... ({more} more)' if more > 0 else ''}])"

    def __reduce__(self) -> tuple[Any, ...]:
        # Travels as it stands: stacked (one response: fewer, larger buffers) or split; the
        # copy is not trusted (see is_trusted).
        responses, stacked = self._responses, self._stacked
        if responses is None:
            return (_restore, (type(self), stacked, None))
        return (_restore, (type(self), None, responses))


def _restore(
    cls: type[ResponseBatch[Any]], stacked: Any, responses: Sequence[Any] | None
) -> ResponseBatch[Any]:
    batch: ResponseBatch[Any] = cls.__new__(cls)
    batch._stacked = stacked
    batch._responses = None if responses is None else list(responses)
    batch._trusted = False
    return batch
