"""Batched responses: ``PolicyResponse.stack`` and ``PolicyResponse.unbind``.

A *stacked* response is an ordinary response of the same class whose fields carry a leading batch
dimension of size ``n`` (one row per env), plus a field ``env_ids`` listing the env ids in order:

* numpy arrays of shape ``S`` become one array of shape ``(n, *S)`` (``np.stack``), and numpy
  scalars (``np.int64(3)``, what gymnasium's ``Discrete.sample()`` returns) one array of shape
  ``(n,)`` of their dtype;
* torch tensors of shape ``S`` become one tensor of shape ``(n, *S)`` (``torch.stack``), on the
  tensors' device;
* dicts, lists, tuples and namedtuples are walked: the stacked value has the same container types
  and keys, holding the stacked leaves;
* every other leaf (Python scalars, str, bytes, None, other objects) has no dtype to stack
  with: the ``n`` values are kept, in order, in a :class:`PerEnv` list (Python scalars are not
  turned into numpy scalars, so the round trip stays exact).

``unbind`` is the inverse: row ``i`` of every array and tensor (``a[i]``, ``t[i]``: views, not
copies), item ``i`` of every :class:`PerEnv`, and any other value shared as is by all rows. Row
``i`` of a 1-D array is a numpy scalar, as numpy indexing gives; where ``stack`` stacked 0-d
arrays, ``env_ids`` (an :class:`EnvIds` list) records the field so that rows come back as 0-d
arrays. ``unbind(stack(rs)) == rs`` holds for every list ``rs`` that ``stack`` accepts. The layout
follows ``torch.stack`` / ``torch.unbind`` (dimension 0) and TensorDict's
``torch.stack(list_of_tds)``.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from rlightning._torch import tensor_type, torch_if_imported
from rlightning._tree import rebuild_sequence as _rebuild_sequence

__all__ = ["ENV_IDS_FIELD", "EnvIds", "PerEnv", "stack_responses", "unbind_response"]

#: Field of a stacked response that lists the env ids, in row order.
ENV_IDS_FIELD = "env_ids"

if TYPE_CHECKING:
    from rlightning.types.policy_response import PolicyResponse

_R = TypeVar("_R", bound="PolicyResponse")


class PerEnv(list[Any]):
    """One value per env, in a stacked response, for a leaf that has no batch dimension.

    :meth:`PolicyResponse.stack` stores Python scalars, numpy scalars, strings, bytes, None and
    other non-array leaves as a ``PerEnv`` list (item ``i`` belongs to env ``env_ids[i]``), so that
    :meth:`PolicyResponse.unbind` gives each env its own value back. When you build a stacked
    response by hand, wrap per-env scalars in ``PerEnv`` (e.g. the ``ts_env_sent_ns`` stamps of the
    observations in a batch); a plain value is shared by every row instead.

    It is a ``list`` subclass: everything that works on a list works on it, and
    ``np.asarray(per_env)`` gives an array when the values are numbers.

    Examples:
        >>> PerEnv([1, 2, 3])
        PerEnv([1, 2, 3])
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return f"PerEnv({list.__repr__(self)})"


class EnvIds(list[Any]):
    """The ``env_ids`` of a stacked response: the env ids (str or None) in row order.

    A plain list of ids, plus one record :meth:`PolicyResponse.unbind` needs: ``array_rows``, the
    paths (``(field, key, ...)`` tuples) of the 1-D arrays that ``stack`` built from 0-d arrays,
    whose rows are 0-d arrays again rather than numpy scalars. A hand-built stacked response may
    use a plain list instead.

    Args:
        ids: The env ids.
        array_rows: Paths whose rows are 0-d arrays.
    """

    #: Paths whose rows are 0-d arrays (a class default: an instance stores its own only when it
    #: has some, so that an EnvIds costs what a list does).
    array_rows: tuple[tuple[Any, ...], ...] = ()

    def __init__(self, ids: Any = (), array_rows: Any = ()) -> None:
        super().__init__(ids)
        if array_rows:
            self.array_rows = tuple(tuple(p) for p in array_rows)

    def __repr__(self) -> str:
        return list.__repr__(self)


# ---------------------------------------------------------------------------------------- stack
def _label(env_ids: Sequence[str | None], index: int) -> str:
    env_id = env_ids[index]
    return repr(env_id) if env_id is not None else f"#{index} (env_id=None)"


def _labels(env_ids: Sequence[str | None], indices: list[int]) -> str:
    return "[" + ", ".join(_label(env_ids, i) for i in indices) + "]"


def _path_str(path: tuple[Any, ...]) -> str:
    return repr(path[0]) + "".join(f"[{key!r}]" for key in path[1:])


def _mismatch(
    path: tuple[Any, ...],
    what: str,
    env_ids: Sequence[str | None],
    values: Sequence[Any],
    prop: Any,
) -> ValueError | TypeError:
    """Build the error for values whose ``prop`` differs from the first env's."""
    first = prop(values[0])
    odd = [i for i, value in enumerate(values) if prop(value) != first]
    shown = [prop(values[i]) for i in odd[:3]]
    error = TypeError if what == "type" else ValueError
    return error(
        f"stack(): field {_path_str(path)} has {what} {first} for env {_label(env_ids, 0)} but "
        f"{', '.join(map(str, shown))}{', ...' if len(odd) > 3 else ''} for env(s) "
        f"{_labels(env_ids, odd)}; every response must have the same structure, keys, shapes "
        "and dtypes"
    )


def _type_name(value: Any) -> str:
    return type(value).__name__


def _stack_node(
    values: list[Any], path: tuple[Any, ...], env_ids: Sequence[str | None], rows_0d: list[Any]
) -> Any:
    first = values[0]
    kind = type(first)
    for value in values:
        if type(value) is not kind:
            raise _mismatch(path, "type", env_ids, values, _type_name)
    if kind is np.ndarray:
        shape, dtype = first.shape, first.dtype
        for value in values:
            if value.shape != shape:
                raise _mismatch(path, "shape", env_ids, values, lambda v: v.shape)
            if value.dtype != dtype:
                raise _mismatch(path, "dtype", env_ids, values, lambda v: v.dtype)
        if not shape:
            rows_0d.append(path)
        return np.stack(values, dtype=dtype)  # keeps byte order and string widths
    if isinstance(first, np.generic):
        dtype = first.dtype
        for value in values:
            if value.dtype != dtype:
                raise _mismatch(path, "dtype", env_ids, values, lambda v: v.dtype)
        return np.array(values, dtype=dtype)
    tensor = tensor_type()
    if tensor is not None and isinstance(first, tensor):
        return _stack_tensors(values, path, env_ids)
    if kind is PerEnv:  # a leaf here, so that unbind() gives each env its own PerEnv back
        return PerEnv(values)
    if isinstance(first, dict):
        keys = first.keys()
        for value in values:
            if value.keys() != keys:
                raise _mismatch(path, "keys", env_ids, values, lambda v: list(v.keys()))
        stacked = {
            key: _stack_node([v[key] for v in values], (*path, key), env_ids, rows_0d)
            for key in keys
        }
        if kind is dict:
            return stacked
        out = copy.copy(first)  # OrderedDict, defaultdict, ...: keep type and extra state
        out.update(stacked)
        return out
    if isinstance(first, (list, tuple)):
        length = len(first)
        for value in values:
            if len(value) != length:
                raise _mismatch(path, "length", env_ids, values, len)
        items = [
            _stack_node([v[i] for v in values], (*path, i), env_ids, rows_0d) for i in range(length)
        ]
        return _rebuild_sequence(first, items)
    return PerEnv(values)


def _stack_tensors(values: list[Any], path: tuple[Any, ...], env_ids: Sequence[str | None]) -> Any:
    first = values[0]
    shape, dtype, device = first.shape, first.dtype, first.device
    for value in values:
        if value.shape != shape:
            raise _mismatch(path, "shape", env_ids, values, lambda v: tuple(v.shape))
        if value.dtype != dtype:
            raise _mismatch(path, "dtype", env_ids, values, lambda v: v.dtype)
        if value.device != device:
            raise _mismatch(path, "device", env_ids, values, lambda v: v.device)
    torch = torch_if_imported()
    assert torch is not None  # a tensor exists, so torch is imported
    try:
        return torch.stack(values)
    except (RuntimeError, TypeError) as exc:  # e.g. sparse or quantized layouts
        raise TypeError(f"stack(): torch.stack failed for field {_path_str(path)}: {exc}") from exc


def stack_responses(cls: type[_R], responses: Sequence[_R]) -> _R:
    """Stack responses into one response with a leading batch dimension (see module docstring).

    Args:
        cls: The class ``stack`` was called on; every response must be an instance of the same
            class, ``cls`` or a subclass of it.
        responses: The responses, one per env, in row order.

    Returns:
        A new response of the responses' class with ``env_id=None``, ``env_ids`` (list of the
        ``n`` env ids) and every field stacked; arrays and tensors are new (``np.stack`` /
        ``torch.stack`` copy), the inputs are not mutated.

    Raises:
        TypeError: ``responses`` is not a sequence of responses of one class, or a field holds
            values of different types (the message names the field and the env ids).
        ValueError: ``responses`` is empty, the responses have different fields, keys, lengths,
            shapes, dtypes or devices (the message names the field and the env ids), a response
            already has a field named ``env_ids``, or a field contains itself.
    """
    given: object = responses  # checked at run time: callers may pass anything
    if isinstance(given, (str, bytes)) or not isinstance(given, Sequence):
        raise TypeError(
            f"stack() takes a list of {cls.__name__} objects, got {type(responses).__name__}"
        )
    if len(responses) == 0:
        raise ValueError("stack() needs at least one response, got an empty sequence")
    first = responses[0]
    kind = type(first)
    if not isinstance(first, cls):
        raise TypeError(
            f"stack(): item 0 is a {kind.__name__}, expected a {cls.__name__} (or subclass)"
        )
    for index, response in enumerate(responses):
        if type(response) is not kind:
            raise TypeError(
                f"stack(): item {index} is a {type(response).__name__} but item 0 is a "
                f"{kind.__name__}; stack responses of one class"
            )
    dicts = [response.__dict__ for response in responses]
    env_ids: list[str | None] = [d["env_id"] for d in dicts]
    names = list(dicts[0])
    name_set = dicts[0].keys()
    for index, d in enumerate(dicts):
        if d.keys() != name_set:
            _raise_field_mismatch(dicts, env_ids, index)
        if ENV_IDS_FIELD in d:
            raise ValueError(
                f"stack(): the response for env {_label(env_ids, index)} already has a field "
                f"{ENV_IDS_FIELD!r}, where stack() puts the env ids (is it a stacked response? "
                "unbind() it first, or rename the field)"
            )
    ids = EnvIds(env_ids)
    data: dict[str, Any] = {ENV_IDS_FIELD: ids}
    rows_0d: list[tuple[Any, ...]] = []
    for name in names:
        if name == "env_id":
            continue
        try:
            data[name] = _stack_node([d[name] for d in dicts], (name,), env_ids, rows_0d)
        except RecursionError:
            raise _cycle_error("stack", name) from None
    ids.array_rows = tuple(rows_0d)
    return kind(None, **data)


def _raise_field_mismatch(
    dicts: list[dict[str, Any]], env_ids: list[str | None], index: int
) -> None:
    first, other = dicts[0].keys(), dicts[index].keys()
    missing = [name for name in first if name not in other]
    extra = [name for name in other if name not in first]
    parts = []
    if missing:
        parts.append(f"lacks field(s) {missing}")
    if extra:
        parts.append(f"has extra field(s) {extra}")
    raise ValueError(
        f"stack(): the response for env {_label(env_ids, index)} {' and '.join(parts)} compared "
        f"with env {_label(env_ids, 0)}; every response must have the same fields"
    )


# --------------------------------------------------------------------------------------- unbind
def _split(value: Any, n: int, path: tuple[Any, ...], rows_0d: frozenset[Any]) -> list[Any]:
    kind = type(value)
    if kind is np.ndarray:
        if value.ndim == 0 or value.shape[0] != n:
            raise ValueError(
                f"unbind(): field {_path_str(path)} is an array of shape {value.shape}, expected a "
                f"leading dimension of {n} (one row per env id)"
            )
        if value.ndim == 1 and path in rows_0d:
            return [value[i, ...] for i in range(n)]
        return list(value) if value.ndim == 1 else [value[i] for i in range(n)]
    if kind is PerEnv:
        if len(value) != n:
            raise ValueError(
                f"unbind(): field {_path_str(path)} is a PerEnv of length {len(value)}, "
                f"expected {n} (one value per env id)"
            )
        return list(value)
    tensor = tensor_type()
    if tensor is not None and isinstance(value, tensor):
        if value.dim() == 0 or value.shape[0] != n:
            raise ValueError(
                f"unbind(): field {_path_str(path)} is a tensor of shape {tuple(value.shape)}, "
                f"expected a leading dimension of {n} (one row per env id)"
            )
        return list(value.unbind(0))
    if isinstance(value, dict):
        columns = {key: _split(item, n, (*path, key), rows_0d) for key, item in value.items()}
        rows: list[Any] = []
        for i in range(n):
            row = {key: column[i] for key, column in columns.items()}
            if kind is not dict:
                new = copy.copy(value)
                new.update(row)
                row = new
            rows.append(row)
        return rows
    if isinstance(value, (list, tuple)):
        splits = [_split(item, n, (*path, j), rows_0d) for j, item in enumerate(value)]
        return [_rebuild_sequence(value, [column[i] for column in splits]) for i in range(n)]
    return [value] * n


def _leading_size(value: Any) -> int | None:
    """Return the batch size of the first batched leaf in ``value`` (depth first), or None."""
    if isinstance(value, np.ndarray):
        return int(value.shape[0]) if value.ndim else None
    if type(value) is PerEnv:
        return len(value)
    tensor = tensor_type()
    if tensor is not None and isinstance(value, tensor):
        return int(value.shape[0]) if value.dim() else None
    items: Any = value.values() if isinstance(value, dict) else value
    if isinstance(value, (dict, list, tuple)):
        for item in items:
            size = _leading_size(item)
            if size is not None:
                return size
    return None


#: unbind() writes ``n`` rows of every value it walks (a shared value into each row, a container
#: rebuilt for each row), so its work is ``n`` times the values of one row, while what it splits
#: may be small: a 1 KB message decodes to a ``(65536, 0)`` array beside a list of 1,000 values
#: (65 million values to write). It refuses a split of more than this many values per item of its
#: input (array and tensor bytes, PerEnv items, env ids and other values), or per
#: :data:`UNBIND_FLOOR` items for a small input: a stacked response as ``stack`` builds it
#: (every leaf a batched array, tensor or PerEnv) never comes near it.
UNBIND_WORK_FACTOR = 16
#: The input size below which :data:`UNBIND_WORK_FACTOR` counts as this many items (the rows a
#: zero-size array may bring for free in a message: ``rlightning.wire.MAX_EMPTY_ROWS``).
UNBIND_FLOOR = 1 << 16


def _split_cost(value: Any) -> tuple[int, int]:
    """``(values, items)`` of one field: what each row writes for it, and what it holds.

    ``values`` is the field's slot plus, for a container ``_split`` rebuilds in every row, all
    it holds; ``items`` counts the field's input: an array's or tensor's bytes, a PerEnv's
    items, one per other leaf, container and key. Walks the containers once (as ``_split``).
    """
    kind = type(value)
    if kind is np.ndarray:
        return 1, 1 + value.nbytes
    if kind is PerEnv:
        return 1, 1 + len(value)
    if isinstance(value, (dict, list, tuple)):
        values = items = 1
        for item in value.values() if isinstance(value, dict) else value:
            more_values, more_items = _split_cost(item)
            values += more_values
            items += more_items
        return values, items
    tensor = tensor_type()
    if tensor is not None and isinstance(value, tensor):
        return 1, 1 + value.numel() * value.element_size()
    return 1, 1


def _check_split_cost(fields: dict[str, Any], n: int, env_ids: Sequence[Any]) -> None:
    """Refuse a split whose work would be out of proportion to what it splits (see above)."""
    per_row = 1  # the row's response
    items = len(env_ids)
    worst, worst_values = "", 0
    for name, value in fields.items():
        try:
            values, more = _split_cost(value)
        except RecursionError:
            raise _cycle_error("unbind", name) from None
        per_row += values
        items += more
        if values > worst_values:
            worst, worst_values = name, values
    work = n * per_row
    budget = UNBIND_WORK_FACTOR * max(items, UNBIND_FLOOR)
    if work > budget:
        raise ValueError(
            f"unbind(): {n} rows of {per_row} values each ({work} values to write, field "
            f"{worst!r} {worst_values} of them per row) from a response holding {items} items "
            f"(array bytes, PerEnv items, env ids and other values): more than "
            f"UNBIND_WORK_FACTOR={UNBIND_WORK_FACTOR} values per item (or per {UNBIND_FLOOR} "
            "items for a small response). A value that is not batched (an array, tensor or "
            "PerEnv with a row per env) is written into every row, and a container rebuilt for "
            "each: keep large shared values out of a stacked response"
        )


def _cycle_error(what: str, name: str) -> ValueError:
    return ValueError(
        f"{what}(): field {name!r} contains itself (a reference cycle); stack() and unbind() "
        "walk nested dicts, lists and tuples, which must not contain themselves"
    )


def unbind_response(response: _R) -> list[_R]:
    """Split a stacked response into one response per env (see module docstring).

    Args:
        response: A stacked response: fields with a leading batch dimension of size ``n`` and,
            normally, a field ``env_ids`` (list of ``n`` str or None). Without ``env_ids`` every
            result gets ``env_id=None`` and ``n`` is the leading size of the first array, tensor
            or :class:`PerEnv` found.

    Returns:
        ``n`` new responses of the same class, in row order, with ``env_id=env_ids[i]``. Tensors
        and arrays of two or more dimensions give views of row ``i`` (``a[i]``,
        ``t.unbind(0)[i]``): no data is copied and writing into them writes into the stacked
        response. A 1-D array gives numpy scalars (copies), except for the paths in
        ``env_ids.array_rows``, which give 0-d views (``a[i, ...]``). Values that are neither
        batched nor containers are shared, as is, by every result.

    Raises:
        TypeError: ``env_ids`` is not a list of str/None.
        ValueError: an array, tensor or PerEnv does not have ``n`` rows (the message names the
            field), ``n`` cannot be found, the response has an ``env_id`` but no ``env_ids`` (it
            was not stacked), a field contains itself, or the split would write more than
            :data:`UNBIND_WORK_FACTOR` values per item the response holds (see there: shared
            values are written into every row), checked before anything is built.
    """
    fields = dict(response.__dict__)
    cls = type(response)
    own_id = fields.pop("env_id")
    env_ids = fields.pop(ENV_IDS_FIELD, None)
    if env_ids is None and own_id is not None:
        raise ValueError(
            f"unbind(): the {cls.__name__} for env {own_id!r} is not a stacked response (it has "
            f"an env_id and no {ENV_IDS_FIELD!r} field); unbind() splits what stack() made"
        )
    if env_ids is None:
        n = None
        for value in fields.values():
            n = _leading_size(value)
            if n is not None:
                break
        if n is None:
            raise ValueError(
                f"unbind(): the {cls.__name__} has no {ENV_IDS_FIELD!r} field and no array, tensor "
                "or PerEnv with a batch dimension, so the number of rows is unknown"
            )
        env_ids = [None] * n
    elif not isinstance(env_ids, list) or not all(  # EnvIds is a list
        e is None or isinstance(e, str) for e in env_ids
    ):
        raise TypeError(
            f"unbind(): field {ENV_IDS_FIELD!r} must be a list of env ids (str or None), "
            f"got {type(env_ids).__name__} {env_ids!r}"
        )
    n = len(env_ids)
    _check_split_cost(fields, n, env_ids)
    rows_0d = frozenset(getattr(env_ids, "array_rows", ()))
    columns: dict[str, list[Any]] = {}
    for name, value in fields.items():
        try:
            columns[name] = _split(value, n, (name,), rows_0d)
        except RecursionError:
            raise _cycle_error("unbind", name) from None
    return [
        cls(env_id, **{name: column[i] for name, column in columns.items()})
        for i, env_id in enumerate(env_ids)
    ]
