"""The Ray versions this package supports, checked when it is imported.

The range is declared twice, here and in ``packages/ray/pyproject.toml`` (a test keeps the two
equal): the metadata lets pip refuse an unsupported Ray at install time, the check here catches
one that got in anyway (a source checkout, ``--no-deps``, a later upgrade of Ray alone).

The verdict is the core's, the one every rlightning adapter applies
(:func:`rlightning.rules.check_framework_version`, rule ``framework-version``):

* Older than the lowest supported release, or a pre-release of it (``2.60.0rc1``): an
  :class:`ImportError` naming the range.
* Newer than the highest tested release (:data:`RAY_HIGHEST_TESTED`), a Ray 3 beyond the
  declared cap included: the import works and an :class:`UntestedVersionWarning` names the
  tested range, as the other rlightning adapters do (``docs/compatibility.md``). A local build
  counts as its release (``2.60.0+local`` is tested).

``UntestedVersionWarning`` is :class:`rlightning.UntestedVersionWarning` itself, so one filter
catches every adapter's.
"""

from __future__ import annotations

from rlightning.rules import UntestedVersionWarning, check_framework_version

__all__ = ["RAY_HIGHEST_TESTED", "RAY_SUPPORTED", "UntestedVersionWarning", "check_ray_version"]

#: Supported Ray versions (a PEP 440 specifier), capped at the next major release.
RAY_SUPPORTED = ">=2.60.0,<3"

#: The newest Ray the test suite runs on (the ``ray`` tox environment pins it).
RAY_HIGHEST_TESTED = "2.60.0"


def check_ray_version(installed: str) -> None:
    """Refuse a Ray :data:`RAY_SUPPORTED` does not admit; warn for one newer than tested.

    :func:`rlightning.rules.check_framework_version` for ``rlightning-ray``: the verdict of
    every rlightning adapter.

    Args:
        installed: The installed Ray version, e.g. ``ray.__version__``.

    Warns:
        UntestedVersionWarning: ``installed`` is newer than :data:`RAY_HIGHEST_TESTED` (a Ray 3
            included); the import goes on.

    Raises:
        ImportError: ``installed`` is not a version, or is older than the lowest supported
            release (or a pre-release of it).

    Examples:
        >>> check_ray_version("2.60.0")
        >>> check_ray_version("2.9.0")
        Traceback (most recent call last):
        ...
        ImportError: the installed ray is older than the lowest release rlightning-ray supports; got '2.9.0'; expected ray>=2.60.0,<3; fix: `pip install "ray>=2.60.0,<3"` [rule framework-version]
    """  # noqa: E501  (doctest output is one line)
    check_framework_version(
        "rlightning-ray", "ray", installed, RAY_SUPPORTED, RAY_HIGHEST_TESTED, stacklevel=2
    )
