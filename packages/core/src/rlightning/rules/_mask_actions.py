"""Whether a mask allows an action (private).

Import these names from :mod:`rlightning.rules`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

from rlightning.rules._masks import MaskLayout, check_action_mask
from rlightning.rules._space import space_violation


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
