"""Action masks in gymnasium's and sb3-contrib's layouts (private).

Import these names from :mod:`rlightning.rules`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from itertools import accumulate
from typing import Any, Literal, cast

import numpy as np
from gymnasium import spaces

from rlightning._space_reasons import _first_index
from rlightning.rules._errors import _NO_LEGAL_FIX, rule_error
from rlightning.rules._values import _BOOL, _as_array, _not_zero_one, _refuse_not_zero_one

#: Where a mask's entries are: ``"gymnasium"`` is ``Space.sample(mask=...)``'s layout (a tuple of
#: per-dimension masks for MultiDiscrete), ``"flat"`` sb3-contrib's (one concatenated row).
MaskLayout = Literal["gymnasium", "flat"]


# ---------------------------------------------------------------------------- action masks
_MASK_KINDS = (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)


def takes_action_mask(space: spaces.Space[Any]) -> bool:
    """Return whether a mask given for an action of ``space`` is an action mask (``action-mask``).

    The one predicate every path asks before it reads a mask (``rlightning.testing``, the
    PettingZoo adapter's ``sample_response``, ``respond``, ``aec_action`` and
    ``SharedPolicyAdapter``): True for ``Discrete``, ``MultiDiscrete`` and ``MultiBinary``
    spaces (subclasses included), whose masks :func:`check_action_mask` then judges. It defines
    masks for ``Discrete``, a 1-D ``MultiDiscrete`` and a 1-D ``MultiBinary`` (the spaces
    sb3-contrib's ``MaskableRolloutBuffer`` and distributions take) and refuses a mask of a
    multi-dimensional ``MultiDiscrete`` or ``MultiBinary``, which no path could honour. False for
    every other space (``Box``, ``Dict``, ``Tuple``, ...): there is no legal-action mask of a
    continuous or composite action, so such a "mask" is not read.

    Args:
        space: The action space.

    Returns:
        Whether masks of ``space`` are checked.

    Examples:
        >>> from gymnasium.spaces import Box, Discrete, MultiBinary
        >>> takes_action_mask(Discrete(3)), takes_action_mask(MultiBinary(4))
        (True, True)
        >>> takes_action_mask(Box(-1, 1, (2,)))
        False
    """
    return type(space) is spaces.Discrete or isinstance(space, _MASK_KINDS)


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
    mask: Any,
    shape: tuple[int, ...],
    subject: str,
    expected: Callable[[], str],
    labels: Sequence[Any] | None = None,
) -> np.ndarray[Any, np.dtype[np.bool_]]:
    """``mask`` as a new bool array of ``shape``, refusing a wrong shape, dtype or value.

    ``expected`` builds the "expected ..." text, only on error (a space's repr is slow);
    ``labels`` name the rows of a batch (env ids), shown with the first offending value.
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
        _refuse_not_zero_one(array, bad, subject, "action-mask", mask, labels)
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
) -> Exception | None:
    """The error for a flat mask (or a row of a ``(n_rows, size)`` batch) with an empty block.

    None when every block allows something. ``mask`` is the value the caller gave, shown in the
    message for one mask (a batch shows the offending row, as bools).
    """
    if len(blocks) == 1:
        if flat.ndim == 1:
            if np.count_nonzero(flat):
                return None
            return _no_legal_action(space, 0, blocks, subject, mask)
        legal = np.count_nonzero(flat, axis=-1).reshape(-1, 1) > 0
    else:
        legal = np.logical_or.reduceat(flat, list(accumulate(blocks[:-1], initial=0)), axis=-1)
    if np.count_nonzero(legal) == legal.size:
        return None
    where = _first_index(np.logical_not(legal))
    if rows is None:
        return _no_legal_action(space, where[-1], blocks, subject, mask)
    row = where[0]
    return _no_legal_action(space, where[-1], blocks, f"{subject}[{rows[row]!r}]", flat[row])


def check_action_mask(
    space: spaces.Space[Any],
    mask: Any,
    *,
    subject: str = "action_mask",
    layout: MaskLayout = "gymnasium",
    rows: Sequence[Any] | None = None,
    allow_empty: bool = False,
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
        allow_empty: For one mask (``rows`` None) of an agent that may be waiting: return None
            for a mask that allows no action instead of raising ``no-legal-action``. PettingZoo
            gives the waiting player of a turn-based game (``turn_based_aec_to_parallel``) an
            all-zero mask: such an agent cannot act now, and the PettingZoo adapter gives it
            the action None (no policy is asked) instead of a made-up action.

    Returns:
        A new bool array: ``(n,)`` for Discrete, ``(2 * n,)`` for MultiBinary, ``(sum(nvec),)``
        for a flat MultiDiscrete mask, ``(len(rows), mask_size(space))`` for a batch; for a
        gymnasium-layout MultiDiscrete mask a tuple of ``(nvec[i],)`` bool arrays. (gymnasium's
        ``Space.sample(mask=...)`` wants ``int8``: ``.view(np.int8)`` gives it without a copy.)
        None for a mask that allows no action, with ``allow_empty``.

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
            if allow_empty:
                return None
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
        parts, error = _check_tuple_mask(cast("spaces.MultiDiscrete", space), mask, blocks, subject)
        if error is None:
            return parts
        if allow_empty:
            return None
        raise error
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
            rows,
        )
    error = _check_some_legal(space, flat, blocks, subject, rows, mask)
    if error is None:
        return flat
    if allow_empty and rows is None:
        return None
    raise error


def _check_tuple_mask(
    space: spaces.MultiDiscrete, mask: Any, blocks: list[int], subject: str
) -> tuple[tuple[np.ndarray[Any, np.dtype[np.bool_]], ...], Exception | None]:
    """A gymnasium-layout MultiDiscrete mask: a tuple of per-dimension 0/1 masks.

    Returns the checked parts, and the ``no-legal-action`` error when a dimension allows nothing.
    """
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
            return parts, _no_legal_action(space, dim, blocks, subject, mask)
    return parts, None


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
