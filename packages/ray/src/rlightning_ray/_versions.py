"""The Ray versions this package supports, checked when it is imported.

The range is declared twice, here and in ``packages/ray/pyproject.toml`` (a test keeps the two
equal): the metadata lets pip refuse an unsupported Ray at install time, the check here catches
one that got in anyway (a source checkout, ``--no-deps``, a later upgrade of Ray alone).

* Older than the lowest supported release: an :class:`ImportError` naming the range.
* Newer than the highest tested release (:data:`RAY_HIGHEST_TESTED`): the import works and an
  :class:`UntestedVersionWarning` names the tested range, as the other rlightning adapters do.
"""

from __future__ import annotations

import warnings

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = ["RAY_HIGHEST_TESTED", "RAY_SUPPORTED", "UntestedVersionWarning", "check_ray_version"]

#: Supported Ray versions (a PEP 440 specifier), capped at the next major release.
RAY_SUPPORTED = ">=2.60.0,<3"

#: The newest Ray the test suite runs on (the ``ray`` tox environment pins it).
RAY_HIGHEST_TESTED = "2.60.0"


class UntestedVersionWarning(UserWarning):
    """A Ray release newer than any this package was tested with is installed."""


def check_ray_version(installed: str) -> None:
    """Refuse a Ray older than :data:`RAY_SUPPORTED`; warn for one newer than tested.

    Args:
        installed: The installed Ray version, e.g. ``ray.__version__``.

    Raises:
        ImportError: ``installed`` is not a version, or is outside :data:`RAY_SUPPORTED`.

    Examples:
        >>> check_ray_version("2.60.0")
        >>> check_ray_version("2.9.0")
        Traceback (most recent call last):
        ...
        ImportError: rlightning-ray needs ray>=2.60.0,<3; ray 2.9.0 is installed: install a supported one with `pip install "ray>=2.60.0,<3"`
    """  # noqa: E501  (doctest output is one line)
    hint = f'install a supported one with `pip install "ray{RAY_SUPPORTED}"`'
    try:
        parsed = Version(installed)
    except InvalidVersion as exc:
        raise ImportError(f"cannot read the installed ray version {installed!r}: {hint}") from exc
    if parsed not in SpecifierSet(RAY_SUPPORTED, prereleases=True):
        raise ImportError(
            f"rlightning-ray needs ray{RAY_SUPPORTED}; ray {installed} is installed: {hint}"
        )
    if parsed > Version(RAY_HIGHEST_TESTED):
        warnings.warn(
            f"ray {installed} is newer than the tested range >=2.60.0,<={RAY_HIGHEST_TESTED}; "
            f'if something breaks, `pip install "ray=={RAY_HIGHEST_TESTED}"`',
            UntestedVersionWarning,
            stacklevel=3,
        )
