"""The rules every rlightning path applies, each written once, and the one error they raise.

:mod:`rlightning.testing`, the response classes and the adapters (``rlightning_sb3``,
``rlightning_pettingzoo``) call these functions; none keeps its own copy of a rule. Each rule has
an id (the keys of :data:`RULES`); a broken rule raises the error built by :func:`rule_error`::

    response.action_mask allows no action of Discrete(3); got array([0, 0, 0], dtype=int8);
    fix: an agent that cannot act must not be asked to act (...) [rule no-legal-action]

================================  ==========================================================
rule                              owner
================================  ==========================================================
``action-in-space``               :func:`contains`, :func:`space_violation`
``action-mask``                   :func:`mask_size`, :func:`check_action_mask`,
                                  :func:`flat_mask`, :func:`action_allowed`,
                                  :func:`mask_violation`
``no-legal-action``               :func:`check_action_mask` (and all that call it)
``timestamp``                     :data:`STAMP_FIELDS`, :func:`check_stamp`
``boolean``                       :func:`as_bools`
(every message)                   :func:`rule_error`, :func:`describe`
================================  ==========================================================

:class:`TypeError` means the wrong kind of value (a stamp that is not an int, a mask of strings);
:class:`ValueError` a bad value or shape. Nothing here modifies its inputs, and nothing imports
torch: a tensor is recognised only when torch is already imported (no tensor can exist
otherwise), and is read with ``detach().cpu().numpy()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from itertools import accumulate
from typing import Any, Literal, TypeVar, cast

import numpy as np
from gymnasium import spaces

from rlightning._space_reasons import (
    _box_reason,
    _discrete_reason,
    _first_index,
    _is_tensor,
    _multi_binary_reason,
    _multi_discrete_reason,
)
from rlightning._tree import tree_repr

__all__ = [
    "RULES",
    "STAMP_FIELDS",
    "MaskLayout",
    "action_allowed",
    "as_bools",
    "check_action_mask",
    "check_stamp",
    "contains",
    "describe",
    "flat_mask",
    "mask_size",
    "mask_violation",
    "rule_error",
    "space_violation",
]

_E = TypeVar("_E", bound=Exception)

#: Where a mask's entries are: ``"gymnasium"`` is ``Space.sample(mask=...)``'s layout (a tuple of
#: per-dimension masks for MultiDiscrete), ``"flat"`` sb3-contrib's (one concatenated row).
MaskLayout = Literal["gymnasium", "flat"]

_NO_LEGAL_FIX = (
    "an agent that cannot act must not be asked to act (no policy distribution exists over an "
    "empty set of actions, and a made-up action with log_prob 0.0 would poison PPO's ratios); "
    "ask only agents with a legal action (in an AEC env only env.agent_selection acts)"
)

#: Every rule: id -> what it requires and the upstream rule it follows.
RULES: dict[str, str] = {
    "response-type": (
        "check_policy_response takes a PolicyResponse that is not multi-agent; "
        "check_multi_agent_policy_response takes a MultiAgentPolicyResponse"
    ),
    "env-id": "env_id is a str, or None (rlightning API page: PolicyResponse(env_id, **data))",
    "has-action": "the response has an 'action' field, what the env's step() takes",
    "action-in-space": (
        "each action is an element of its action space, exactly as gymnasium's "
        "Space.contains decides (dtype, shape, bounds); PettingZoo's AssertOutOfBoundsWrapper "
        "and api_test apply the same test; a torch tensor is never an element (envs take numpy)"
    ),
    "action-mask": (
        "an action_mask holds only 0 and 1 (1 = legal, as PettingZoo and sb3-contrib read it) "
        "in a bool, integer or float dtype, in one of two layouts: gymnasium's "
        "Space.sample(mask=...) layout, shape (n,) for Discrete(n) and a tuple of (nvec[i],) "
        "masks for a 1-D MultiDiscrete; or sb3-contrib's flat layout (MaskableRolloutBuffer), "
        "(n,) for Discrete(n), (sum(nvec),) for MultiDiscrete and (2 * n,) for MultiBinary(n) "
        "(entries 2i and 2i + 1 allow element i to be 0 and 1; gymnasium has no legal-action "
        "mask for MultiBinary, so both layouts are this one); the action is one the mask allows"
    ),
    "no-legal-action": (
        "a mask that allows no action (for MultiDiscrete, no value in some dimension; for "
        "MultiBinary, neither 0 nor 1 for some element) is refused: " + _NO_LEGAL_FIX
    ),
    "scalar-field": (
        "value and log_prob, when present, each hold one real number (a Python or numpy "
        "number, or an array/tensor of one element, as SB3's collect_rollouts gives per env); "
        "value is finite and log_prob is not NaN"
    ),
    "buffer-action": (
        "buffer_action, when present for a Box action space, has the space's shape, as SB3's "
        "collect_rollouts stores the policy's raw action"
    ),
    "timestamp": (
        "ts_env_sent_ns and ts_policy_sent_ns, when present and not None, are integers (a "
        "Python int or numpy integer, not a bool) of nanoseconds since the epoch "
        "(time.time_ns()), not negative and at most 2**64 - 1 (they fit in 64 bits)"
    ),
    "boolean": (
        "a flag (dones, episode_start, a mask entry) is a bool, or a number that is exactly 0 "
        "or 1 (SB3's dones may be 0/1 floats); 0.5, 2, NaN, strings and objects are refused, "
        "never read by truthiness"
    ),
    "known-agent": "every agent with an action has an action space",
    "live-agents": (
        "every live agent has an action (PettingZoo parallel API: step() takes an action for "
        "each agent in env.agents); an agent whose mask allows no action is not asked to act "
        "(no-legal-action; PettingZoo's turn_based_aec_to_parallel reads only the action of "
        "agent_selection)"
    ),
    "no-inactive-action": (
        "no action for an agent that is not live (PettingZoo parallel API: an agent removed "
        "from env.agents, terminated or truncated, takes no further actions)"
    ),
    "per-agent-keys": (
        "a dict field keyed by agent ids is keyed by exactly the agents of action "
        "(rlightning: a field is per-agent when its keys equal action's keys)"
    ),
}


# ---------------------------------------------------------------------------- errors
def describe(value: object) -> str:
    """Return a bounded one-line repr of ``value``, the ``got ...`` part of every rule's error.

    Arrays and CPU tensors of at most 8 elements show their values; larger ones, and tensors on
    other devices, only shape, dtype and device (a repr never syncs a GPU or prints megabytes).
    Containers show their first 8 items; a container inside itself shows as ``[...]``/``{...}``.

    Args:
        value: Anything: a leaf or nested dicts, lists, tuples and namedtuples.

    Returns:
        The summary, one line.

    Examples:
        >>> import numpy as np
        >>> describe(np.zeros(2, np.int8))
        'array([0, 0], dtype=int8)'
        >>> describe(np.zeros((100, 3)))
        'array(shape=(100, 3), dtype=float64)'
    """
    return tree_repr(value)


def rule_error(
    error_type: type[_E],
    rule: str,
    subject: str,
    problem: str,
    value: object,
    *,
    expected: str | None = None,
    fix: str | None = None,
) -> _E:
    """Build (not raise) the error of a broken rule, in the one message format of rlightning.

    The message is ``"<subject> <problem>; got <describe(value)>[; expected <expected>]
    [; fix: <fix>] [rule <rule>]"``: what is wrong, the value given (bounded), what was
    expected and how to fix it when that is not obvious, and the rule's id.

    Args:
        error_type: ``TypeError`` for the wrong kind of value, ``ValueError`` for a bad value.
        rule: A key of :data:`RULES`.
        subject: What is wrong, named as the caller sees it (``"response.action"``,
            ``"action mask of agent 'a'"``).
        problem: What is wrong with it, without a trailing period.
        value: The value given; shown with :func:`describe`.
        expected: What was expected, when ``problem`` does not say it.
        fix: How to fix it, when that is not obvious.

    Returns:
        The exception, for the caller to ``raise`` (so tracebacks point at the caller).

    Raises:
        ValueError: ``rule`` is not a rule id (a bug in the caller).

    Examples:
        >>> rule_error(ValueError, "timestamp", "ts_env_sent_ns", "must not be negative", -5)
        ValueError('ts_env_sent_ns must not be negative; got -5 [rule timestamp]')
    """
    if rule not in RULES:
        raise ValueError(f"unknown rule id {rule!r}; the ids are {sorted(RULES)}")
    message = f"{subject} {problem}; got {describe(value)}"
    if expected is not None:
        message += f"; expected {expected}"
    if fix is not None:
        message += f"; fix: {fix}"
    return error_type(f"{message} [rule {rule}]")


# ---------------------------------------------------------------------------- space membership
def contains(space: spaces.Space[Any], value: Any) -> bool:
    """Return gymnasium's ``space.contains(value)``, without its cast warning.

    ``Box.contains`` casts a non-array (e.g. the numpy scalar a shape-() Box samples) with
    ``np.asarray(x, dtype=space.dtype)`` and warns "Casting input x to numpy array."; the same
    cast is done here first, so the verdict is gymnasium's without the warning (which a test
    suite run with ``-W error`` would turn into an exception). Dict and Tuple are walked as their
    own ``contains`` walks them (a Tuple also takes a list or array, converted with ``tuple()``;
    a Dict takes a dict with exactly its keys), so nested Box leaves get the same treatment. A
    ``contains`` that raises counts as "not an element". One deviation: a torch tensor is never
    an element (environments take numpy or Python values; gymnasium's Box would cast a CPU one).

    Args:
        space: Any gymnasium space.
        value: The candidate element; not modified.

    Returns:
        Whether ``value`` is an element of ``space``.

    Examples:
        >>> from gymnasium.spaces import Box, Discrete
        >>> contains(Discrete(3, start=1), 3), contains(Box(-1, 1, ()), 0.5)
        (True, True)
    """
    if isinstance(space, spaces.Box):
        if not isinstance(value, np.ndarray):
            if _is_tensor(value):
                return False
            try:
                with np.errstate(all="ignore"):  # gymnasium's cast, without numpy's warnings
                    value = np.asarray(value, dtype=space.dtype)
            except (TypeError, ValueError, OverflowError):
                return False
    elif isinstance(space, spaces.Tuple):
        if isinstance(value, (list, np.ndarray)):
            if isinstance(value, np.ndarray) and value.ndim == 0:
                return False  # gymnasium's tuple(x) raises on it: not an element
            value = tuple(value)
        return (
            isinstance(value, tuple)
            and len(value) == len(space.spaces)
            and all(contains(sub, part) for sub, part in zip(space.spaces, value, strict=True))
        )
    elif isinstance(space, spaces.Dict):
        return (
            isinstance(value, dict)
            and value.keys() == space.spaces.keys()
            and all(contains(sub, value[key]) for key, sub in space.spaces.items())
        )
    elif _is_tensor(value):
        return False
    try:
        return bool(space.contains(value))
    except Exception:  # a contains() that cannot judge the value means "not in the space"
        return False


def space_violation(space: spaces.Space[Any], value: Any) -> str | None:
    """Say why ``value`` is not an element of ``space``, or return None when it is.

    The verdict is :func:`contains` (gymnasium's ``space.contains``); this function only explains
    a rejection: for Box the dtype that cannot be cast safely, the shape, or the first element
    outside ``[low, high]`` (or NaN); for Discrete a value that is not an integer or is out of
    range; for MultiDiscrete and MultiBinary likewise; for Dict and Tuple the path to the part that
    fails. A torch tensor is never in a gymnasium space: the reason says to call ``numpy()``.

    Args:
        space: Any gymnasium space.
        value: The candidate element; not modified.

    Returns:
        None exactly when ``contains(space, value)``; otherwise a short reason in words (no
        trailing period).

    Examples:
        >>> import numpy as np
        >>> from gymnasium.spaces import Box, Discrete
        >>> space_violation(Discrete(3), 5)
        '5 is outside [0, 2]'
        >>> space_violation(Box(-1, 1, (2,)), np.array([0.5, 2.0], dtype=np.float32))
        'element [1] = 2.0 is above high = 1.0'
        >>> space_violation(Discrete(3), 2) is None
        True
    """
    if _is_tensor(value):
        return (
            f"it is a torch tensor (device {value.device}); environments take numpy or Python "
            "values: convert with response.numpy() first"
        )
    if contains(space, value):
        return None
    if isinstance(space, spaces.Box):
        return _box_reason(space, value)
    if isinstance(space, spaces.Discrete):
        return _discrete_reason(space, value)
    if isinstance(space, spaces.MultiDiscrete):
        return _multi_discrete_reason(space, value)
    if isinstance(space, spaces.MultiBinary):
        return _multi_binary_reason(space, value)
    if isinstance(space, spaces.Dict):
        if not isinstance(value, dict):
            return f"it is a {type(value).__name__}, not a dict"
        missing = [k for k in space.spaces if k not in value]
        extra = [k for k in value if k not in space.spaces]
        if missing or extra:
            return f"its keys differ from the space's: missing {missing}, unexpected {extra}"
        for key, sub in space.spaces.items():
            reason = space_violation(sub, value[key])
            if reason is not None:
                return f"[{key!r}] is not in {sub}: {reason}"
    if isinstance(space, spaces.Tuple):
        if isinstance(value, np.ndarray) and value.ndim == 0:
            return "it is a 0-d array, not a tuple"
        if isinstance(value, (list, np.ndarray)):
            value = tuple(value)
        if not isinstance(value, tuple):
            return f"it is a {type(value).__name__}, not a tuple"
        if len(value) != len(space.spaces):
            return f"it has {len(value)} items, the space has {len(space.spaces)}"
        for i, sub in enumerate(space.spaces):
            reason = space_violation(sub, value[i])
            if reason is not None:
                return f"[{i}] is not in {sub}: {reason}"
    return f"gymnasium's {type(space).__name__}.contains rejects it"


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


# ---------------------------------------------------------------------------- action masks
def _mask_blocks(space: spaces.Space[Any], subject: str, mask: Any) -> list[int]:
    """The sizes of the mask's blocks (one per choice the agent makes), as sb3-contrib splits them.

    ``[n]`` for Discrete(n), ``list(nvec)`` for a 1-D MultiDiscrete, ``[2] * n`` for a 1-D
    MultiBinary (sb3-contrib's ``MaskableMultiCategoricalDistribution``/``Bernoulli``).
    """
    if isinstance(space, spaces.Discrete):
        return [int(space.n)]
    if isinstance(space, spaces.MultiDiscrete) and space.nvec.ndim == 1:
        return [int(n) for n in space.nvec]
    if isinstance(space, spaces.MultiBinary) and len(space.shape) == 1:
        return [2] * int(space.shape[0])
    raise rule_error(
        ValueError,
        "action-mask",
        subject,
        f"is not defined for {space}",
        mask,
        expected=(
            "a Discrete, 1-D MultiDiscrete or 1-D MultiBinary action space (sb3-contrib's "
            "MaskableRolloutBuffer and distributions take only these)"
        ),
        fix="flatten a multi-dimensional space" if isinstance(space, spaces.Space) else None,
    )


def mask_size(space: spaces.Space[Any]) -> int:
    """Return how many entries one action mask of ``space`` has (in either layout).

    The size sb3-contrib's ``MaskableRolloutBuffer.reset`` gives a mask row (``mask_dims``):
    ``n`` for ``Discrete(n)``, ``sum(nvec)`` for a 1-D ``MultiDiscrete``, ``2 * n`` for
    ``MultiBinary(n)``. A gymnasium-layout MultiDiscrete mask has as many entries, split into a
    tuple of per-dimension masks.

    Args:
        space: The action space.

    Returns:
        The number of mask entries.

    Raises:
        ValueError: masks are not defined for ``space`` (another kind, or a multi-dimensional
            MultiDiscrete or MultiBinary, which sb3-contrib refuses too; rule ``action-mask``).

    Examples:
        >>> from gymnasium.spaces import Discrete, MultiBinary, MultiDiscrete
        >>> mask_size(Discrete(4)), mask_size(MultiDiscrete([2, 3])), mask_size(MultiBinary(3))
        (4, 5, 6)
    """
    return sum(_mask_blocks(space, "action mask", None))


def _zero_one_array(
    mask: Any, shape: tuple[int, ...], subject: str, expected: Callable[[], str]
) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """``mask`` as a new bool array of ``shape``, refusing a wrong shape, dtype or value.

    ``expected`` builds the "expected ..." text, only on error (a space's repr is slow).
    """
    array = _as_array(mask, subject, "action-mask")
    if array.shape != shape:
        raise rule_error(
            ValueError,
            "action-mask",
            subject,
            f"must have shape {shape}, not {array.shape}",
            mask,
            expected=expected(),
        )
    bad = _not_zero_one(array, subject, "action-mask", mask)
    if bad is not None:
        _refuse_not_zero_one(array, bad, subject, "action-mask", mask)
    return array.astype(np.bool_)  # a copy: a caller refilling its array changes nothing here


def _no_legal_action(
    space: spaces.Space[Any], block: int, blocks: list[int], subject: str, value: Any
) -> Exception:
    if isinstance(space, spaces.Discrete):
        problem = f"allows no action of {space}"
    else:
        start = sum(blocks[:block])
        part = (
            f"no value in dimension {block}"
            if isinstance(space, spaces.MultiDiscrete)
            else f"neither 0 nor 1 for element {block}"
        )
        problem = (
            f"allows {part} of {space} (flat entries [{start}:{start + blocks[block]}]), "
            "so no action"
        )
    return rule_error(ValueError, "no-legal-action", subject, problem, value, fix=_NO_LEGAL_FIX)


def _check_some_legal(
    space: spaces.Space[Any],
    flat: np.ndarray[Any, Any],
    blocks: list[int],
    subject: str,
    rows: Sequence[Any] | None,
    mask: Any,
) -> None:
    """Refuse a flat mask (or a row of a ``(n_rows, size)`` batch) with an empty block.

    ``mask`` is the value the caller gave, shown in the message for one mask (a batch shows the
    offending row, as bools).
    """
    if len(blocks) == 1:
        if flat.ndim == 1:
            if np.count_nonzero(flat):
                return
            raise _no_legal_action(space, 0, blocks, subject, mask)
        legal = np.count_nonzero(flat, axis=-1).reshape(-1, 1) > 0
    else:
        legal = np.logical_or.reduceat(flat, list(accumulate(blocks[:-1], initial=0)), axis=-1)
    if np.count_nonzero(legal) == legal.size:
        return
    where = _first_index(np.logical_not(legal))
    if rows is None:
        raise _no_legal_action(space, where[-1], blocks, subject, mask)
    row = where[0]
    raise _no_legal_action(space, where[-1], blocks, f"{subject}[{rows[row]!r}]", flat[row])


def check_action_mask(
    space: spaces.Space[Any],
    mask: Any,
    *,
    subject: str = "action_mask",
    layout: MaskLayout = "gymnasium",
    rows: Sequence[Any] | None = None,
) -> Any:
    """Check an action mask of ``space`` and return it as bools, in a copy.

    The ``action-mask`` rule: 0/1 entries (1 = legal) of a bool, integer or float dtype, in
    ``layout`` (see :data:`RULES`):

    * ``"gymnasium"`` (``Space.sample(mask=...)``, PettingZoo's masks): shape ``(n,)`` for
      ``Discrete(n)``; a tuple of ``(nvec[i],)`` masks for a 1-D ``MultiDiscrete``;
    * ``"flat"`` (sb3-contrib's ``MaskablePPO``, ``get_action_masks``): one row of
      :func:`mask_size` entries, the MultiDiscrete dimensions concatenated;
    * ``MultiBinary(n)`` has one layout, sb3-contrib's ``(2 * n,)``: entries ``2i`` and
      ``2i + 1`` allow element ``i`` to be 0 and 1 (gymnasium's ``MultiBinary.sample(mask=...)``
      takes 0/1/2 per element, meaning "force 0, force 1, random": not a legal-action mask).

    Then the ``no-legal-action`` rule: a mask that allows no action (a MultiDiscrete dimension
    with no legal value, a MultiBinary element with neither value legal) is refused, because no
    policy distribution exists over an empty set, and a made-up action with ``log_prob`` 0.0
    (probability 1) poisons PPO's ratios; an agent that cannot act must not be asked to act.

    Fast path: a bool ``np.ndarray`` of the right shape costs one dtype test, one copy and one
    reduction for the legal-action test.

    Args:
        space: Discrete, 1-D MultiDiscrete or 1-D MultiBinary action space.
        mask: The mask: an array, sequence or tensor (read with ``detach().cpu().numpy()``), or
            for a gymnasium-layout MultiDiscrete a tuple of those; not modified.
        subject: The mask's name in messages (``"response.action_mask"``,
            ``"action mask of agent 'a'"``).
        layout: ``"gymnasium"`` or ``"flat"``; the same for Discrete and MultiBinary.
        rows: None for one mask; else the names (env ids) of the rows of a batch of flat masks
            of shape ``(len(rows), mask_size(space))`` (a ``(mask_size(space),)`` mask is taken
            as one row when ``len(rows) == 1``, as ``get_action_masks`` of one env gives); an
            empty row is reported with its name, ``subject[name]``.

    Returns:
        A new bool array: ``(n,)`` for Discrete, ``(2 * n,)`` for MultiBinary, ``(sum(nvec),)``
        for a flat MultiDiscrete mask, ``(len(rows), mask_size(space))`` for a batch; for a
        gymnasium-layout MultiDiscrete mask a tuple of ``(nvec[i],)`` bool arrays. (gymnasium's
        ``Space.sample(mask=...)`` wants ``int8``: ``.view(np.int8)`` gives it without a copy.)

    Raises:
        TypeError: the mask cannot be read as an array, its dtype is not bool, integer or
            float, or a gymnasium-layout MultiDiscrete mask is not a tuple (rule ``action-mask``).
        ValueError: ``layout`` is unknown or ``rows`` is used with the gymnasium layout of a
            MultiDiscrete; masks are not defined for ``space``; the shape is wrong; an entry is
            not exactly 0 or 1 (NaN, 0.5, 2, -1) (rule ``action-mask``); or the mask allows no
            action (rule ``no-legal-action``).

    Examples:
        >>> import numpy as np
        >>> from gymnasium.spaces import Discrete, MultiDiscrete
        >>> check_action_mask(Discrete(3), [1, 0, 1])
        array([ True, False,  True])
        >>> check_action_mask(MultiDiscrete([2, 3]), np.array([0, 1, 1, 0, 0.0]), layout="flat")
        array([False,  True,  True, False, False])
        >>> check_action_mask(Discrete(2), np.zeros(2, np.int8), subject="response.action_mask")
        Traceback (most recent call last):
        ...
        ValueError: response.action_mask allows no action of Discrete(2); got array([0, 0], dtype=int8); fix: an agent that cannot act must not be asked to act (no policy distribution exists over an empty set of actions, and a made-up action with log_prob 0.0 would poison PPO's ratios); ask only agents with a legal action (in an AEC env only env.agent_selection acts) [rule no-legal-action]
    """  # noqa: E501  (doctest output is one line)
    if (
        rows is None
        and type(mask) is np.ndarray
        and mask.dtype is _BOOL
        and isinstance(space, spaces.Discrete)
        and mask.ndim == 1
        and mask.shape[0] == space.n
    ):  # fast path: one Discrete mask of bools
        if not np.count_nonzero(mask):
            raise _no_legal_action(space, 0, [int(space.n)], subject, mask)
        return mask.copy()
    blocks = _mask_blocks(space, subject, mask)
    size = sum(blocks)
    if layout not in ("gymnasium", "flat"):
        raise ValueError(f"layout must be 'gymnasium' or 'flat', got {layout!r}")
    gymnasium_tuple = layout == "gymnasium" and isinstance(space, spaces.MultiDiscrete)
    if gymnasium_tuple:
        if rows is not None:
            raise ValueError(
                "rows (a batch of masks) needs layout='flat' for a MultiDiscrete space: "
                "gymnasium's layout is one tuple of per-dimension masks per agent"
            )
        return _check_tuple_mask(cast("spaces.MultiDiscrete", space), mask, blocks, subject)
    if isinstance(mask, tuple) and isinstance(space, spaces.MultiDiscrete):
        raise rule_error(
            TypeError,
            "action-mask",
            subject,
            "is a tuple of per-dimension masks (gymnasium's layout), but layout='flat'",
            mask,
            fix="pass layout='gymnasium', or np.concatenate(mask) for the flat layout",
        )
    other = (
        f" (sb3-contrib's flat layout), or a tuple of {len(blocks)} per-dimension masks "
        "(gymnasium's layout, layout='gymnasium')"
        if isinstance(space, spaces.MultiDiscrete)
        else ""
    )
    if rows is None:
        flat = _zero_one_array(
            mask, (size,), subject, lambda: f"{size} 0/1 entries for {space}{other}"
        )
    else:
        if len(rows) == 1 and np.shape(mask) == (size,):
            mask = np.reshape(mask, (1, size))
        flat = _zero_one_array(
            mask,
            (len(rows), size),
            subject,
            lambda: f"one row of {size} 0/1 entries for {space} per row {list(rows)}{other}",
        )
    _check_some_legal(space, flat, blocks, subject, rows, mask)
    return flat


def _check_tuple_mask(
    space: spaces.MultiDiscrete, mask: Any, blocks: list[int], subject: str
) -> tuple[np.ndarray[Any, np.dtype[np.bool_]], ...]:
    """A gymnasium-layout MultiDiscrete mask: a tuple of per-dimension 0/1 masks."""
    if not isinstance(mask, tuple) or len(mask) != len(blocks):
        hint = f"a tuple of {len(blocks)} per-dimension 0/1 masks of sizes {blocks} for {space}"
        if not isinstance(mask, tuple):
            raise rule_error(
                TypeError,
                "action-mask",
                subject,
                f"must be a tuple (gymnasium's MultiDiscrete.sample(mask=...) layout), "
                f"not a {type(mask).__name__}",
                mask,
                expected=hint,
                fix=f"pass layout='flat' for sb3-contrib's concatenated ({sum(blocks)},) mask",
            )
        raise rule_error(
            ValueError,
            "action-mask",
            subject,
            f"has {len(mask)} per-dimension masks, not {len(blocks)}",
            mask,
            expected=hint,
        )
    parts = tuple(
        _zero_one_array(
            part,
            (n,),
            f"{subject}[{dim}]",
            partial("{} 0/1 entries for dimension {}".format, n, dim),
        )
        for dim, (n, part) in enumerate(zip(blocks, mask, strict=True))
    )
    for dim, part in enumerate(parts):
        if not np.count_nonzero(part):
            raise _no_legal_action(space, dim, blocks, subject, mask)
    return parts


def flat_mask(
    space: spaces.Space[Any], mask: Any, *, subject: str = "action_mask"
) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """Turn a gymnasium-layout mask into sb3-contrib's flat bool row, checking it.

    The row ``MaskablePPO.predict(action_masks=...)`` and ``MaskableRolloutBuffer.add`` take for
    one env: the per-dimension masks of a MultiDiscrete concatenated in order (as
    ``MaskableMultiCategoricalDistribution`` splits them); a Discrete or MultiBinary mask as is.

    Args:
        space: Discrete, 1-D MultiDiscrete or 1-D MultiBinary action space.
        mask: The mask in gymnasium's layout (see :func:`check_action_mask`); not modified.
        subject: The mask's name in messages.

    Returns:
        A new bool array of shape ``(mask_size(space),)``.

    Raises:
        TypeError: as :func:`check_action_mask`.
        ValueError: as :func:`check_action_mask` (including a mask that allows no action).

    Examples:
        >>> import numpy as np
        >>> from gymnasium.spaces import MultiDiscrete
        >>> flat_mask(MultiDiscrete([2, 3]), (np.array([1, 0]), np.array([0, 1, 1])))
        array([ True, False, False,  True,  True])
    """
    checked = check_action_mask(space, mask, subject=subject, layout="gymnasium")
    if isinstance(checked, tuple):
        return np.concatenate(checked)
    return checked  # type: ignore[no-any-return]  # a bool ndarray for the other spaces


def mask_violation(
    space: spaces.Space[Any],
    mask: Any,
    action: Any,
    *,
    layout: MaskLayout = "gymnasium",
    subject: str = "action_mask",
) -> str | None:
    """Say why ``mask`` does not allow ``action``, or return None when it does.

    The mask is checked first (:func:`check_action_mask`: format and ``no-legal-action``). Then
    for Discrete, entry ``action - start``; for MultiDiscrete, entry ``action[i] - start[i]`` of
    dimension ``i``'s mask (gymnasium's ``MultiDiscrete.sample(mask=...)`` reading); for
    MultiBinary, entry ``2i + action[i]`` (sb3-contrib's reading).

    Args:
        space: Discrete, 1-D MultiDiscrete or 1-D MultiBinary action space.
        mask: The mask, in ``layout``; not modified.
        action: The action to judge.
        layout: The mask's layout, ``"gymnasium"`` or ``"flat"``.
        subject: The mask's name in messages about the mask itself.

    Returns:
        None when the mask allows ``action``; otherwise a short reason (no trailing period),
        which also covers an action that is not in ``space`` at all.

    Raises:
        TypeError: as :func:`check_action_mask`.
        ValueError: as :func:`check_action_mask` (a malformed mask, or one allowing no action).

    Examples:
        >>> from gymnasium.spaces import Discrete
        >>> mask_violation(Discrete(3, start=1), [1, 0, 1], 2)
        '2 is masked out by the action mask (legal: [1, 3])'
    """
    checked = check_action_mask(space, mask, subject=subject, layout=layout)
    reason = space_violation(space, action)
    if reason is not None:
        return f"it is not in {space}: {reason}"
    if isinstance(space, spaces.Discrete):
        start = int(space.start)
        if checked[int(action) - start]:
            return None
        legal = (np.flatnonzero(checked) + start).tolist()
        return f"{int(action)} is masked out by the action mask (legal: {legal})"
    values = np.asarray(action).reshape(-1)
    if isinstance(space, spaces.MultiDiscrete):
        parts = (
            checked
            if isinstance(checked, tuple)
            else np.split(checked, np.cumsum(space.nvec)[:-1].tolist())
        )
        for dim, part in enumerate(parts):
            start = int(space.start[dim])
            if not part[int(values[dim]) - start]:
                legal = (np.flatnonzero(part) + start).tolist()
                return (
                    f"element [{dim}] = {int(values[dim])} is masked out by the action mask of "
                    f"dimension {dim} (legal: {legal})"
                )
        return None
    for element, bit in enumerate(values.tolist()):  # MultiBinary
        if not checked[2 * element + int(bit)]:
            legal = [v for v in (0, 1) if checked[2 * element + v]]
            return (
                f"element [{element}] = {int(bit)} is masked out by the action mask (entry "
                f"[{2 * element + int(bit)}] is 0; legal: {legal})"
            )
    return None


def action_allowed(
    space: spaces.Space[Any], mask: Any, action: Any, *, layout: MaskLayout = "gymnasium"
) -> bool:
    """Return whether ``mask`` allows ``action`` (``mask_violation(...) is None``).

    Args:
        space: Discrete, 1-D MultiDiscrete or 1-D MultiBinary action space.
        mask: The mask, in ``layout``; not modified.
        action: The action to judge; an action outside ``space`` is not allowed.
        layout: The mask's layout, ``"gymnasium"`` or ``"flat"``.

    Returns:
        True when the mask allows the action.

    Raises:
        TypeError: as :func:`check_action_mask`.
        ValueError: as :func:`check_action_mask` (a malformed mask, or one allowing no action).

    Examples:
        >>> from gymnasium.spaces import MultiBinary
        >>> action_allowed(MultiBinary(2), [1, 0, 1, 1], [0, 1])
        True
        >>> action_allowed(MultiBinary(2), [1, 0, 1, 1], [1, 1])
        False
    """
    return mask_violation(space, mask, action, layout=layout) is None
