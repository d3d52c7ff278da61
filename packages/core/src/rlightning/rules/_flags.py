"""Boolean flags given as arguments (private).

Import these names from :mod:`rlightning.rules`.
"""

from __future__ import annotations

import numpy as np

from rlightning.rules._errors import rule_error

_EXPECTED = (
    "a bool (True or False; a numpy.bool_ is one too); an int 0/1, a str such as 'False', None "
    "or any other object is never read by its truthiness"
)


def check_flag(value: object, name: str, caller: str) -> bool:
    """Return the boolean argument ``value`` as a Python ``bool``, refusing any other kind.

    The owner of rule ``flag``: an argument that picks a branch (``update_model``,
    ``deterministic``, ``explore``, ``use_masking``, ``pipeline``) is a ``bool``. A Python
    ``bool`` passes, and so does a ``numpy.bool_`` (what a numpy comparison such as
    ``step < n`` or ``np.all(...)`` returns, and what SB3's own code hands around); it is
    returned as ``bool(value)``. Everything else is refused, never read by truthiness: an int
    (``0``/``1``: a count passed where a flag belongs, or a flag built by arithmetic), a
    ``str`` (``"False"`` and ``"no"`` are truthy: the branch the caller meant to skip would
    run), ``None`` (a forgotten default: it would silently pick the False branch), a 1-element
    array and any other object. SB3 reads its own ``deterministic`` by truthiness; rlightning
    branches on these flags where SB3 has no such argument (``update_model`` advances the
    model's counters, callback and logger), so a wrong kind is a silent wrong value.

    Args:
        value: The argument given.
        name: The argument, as the caller names it (``"update_model"``).
        caller: Who was given it (``"SharedRolloutCollector.collect"``, ``"fill_recorded"``).

    Returns:
        ``bool(value)``: a Python bool. Nothing is mutated.

    Raises:
        TypeError: ``value`` is not a ``bool`` or ``numpy.bool_`` (the caller, the argument, the
            type and the value given named; rule ``flag``).

    Examples:
        >>> import numpy as np
        >>> check_flag(np.bool_(True), "update_model", "fill_recorded")
        True
        >>> check_flag("False", "update_model", "fill_recorded")
        Traceback (most recent call last):
        ...
        TypeError: fill_recorded: update_model must be a bool, not str; got 'False'; expected a bool (True or False; a numpy.bool_ is one too); an int 0/1, a str such as 'False', None or any other object is never read by its truthiness [rule flag]
    """  # noqa: E501  (doctest output is one line)
    if isinstance(value, bool):  # bool has no subclasses: exactly True or False
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    raise rule_error(
        TypeError,
        "flag",
        f"{caller}: {name}",
        f"must be a bool, not {type(value).__name__}",
        value,
        expected=_EXPECTED,
    )
