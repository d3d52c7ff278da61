"""The Stable-Baselines3 (and sb3-contrib) versions this adapter supports, checked at import.

The range is the one declared in ``packages/sb3/pyproject.toml``. Its lowest version, 2.4.0, is
the first Stable-Baselines3 release that accepts gymnasium 1.x (which rlightning-core needs); the
highest tested is 2.9.2. tox runs the test suite at both ends (``sb3-lowest``, ``torch-cpu``).

Below the lowest version the import fails with an :class:`ImportError` naming the range. A
release newer than the highest tested one (a later 2.x, or a 3.x forced in with ``--no-deps``)
imports, with an :class:`UntestedVersionWarning` naming the tested range: a new SB3 release must
never break ``import rlightning_sb3`` for everyone the day it comes out.
"""

from __future__ import annotations

import warnings
from importlib.metadata import PackageNotFoundError, version

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = [
    "HIGHEST_TESTED",
    "SB3_CONTRIB_SUPPORTED",
    "SB3_HIGHEST_TESTED",
    "SB3_SUPPORTED",
    "UntestedVersionWarning",
    "check_version",
]

#: Supported stable-baselines3 versions (PEP 440 specifier), as declared in the package metadata.
SB3_SUPPORTED = ">=2.4.0,<3.0"

#: Supported sb3-contrib versions (the ``contrib`` extra); contrib releases follow SB3's.
SB3_CONTRIB_SUPPORTED = ">=2.4.0,<3.0"

#: The newest stable-baselines3 the test suite runs on (tox.ini pins it; a test checks they agree).
SB3_HIGHEST_TESTED = "2.9.2"

#: The newest tested release of each distribution :func:`check_version` is asked about.
HIGHEST_TESTED = {"stable-baselines3": SB3_HIGHEST_TESTED, "sb3-contrib": SB3_HIGHEST_TESTED}


class UntestedVersionWarning(UserWarning):
    """A framework release newer than any this adapter was tested with is installed.

    The import goes on; filter it with
    ``warnings.filterwarnings("ignore", category=UntestedVersionWarning)`` once you have checked
    the new release yourself.
    """


def _lowest(supported: SpecifierSet) -> SpecifierSet:
    """The lower-bound clauses (``>=``, ``>``, ``==``, ``~=``) of ``supported``."""
    return SpecifierSet(
        ",".join(str(s) for s in supported if s.operator in (">=", ">", "==", "~="))
    )


def check_version(
    distribution: str, installed: str, supported: str, *, highest_tested: str | None = None
) -> None:
    """Refuse a release older than ``supported``; warn about one newer than ``highest_tested``.

    Pre-releases and local builds of a supported release are accepted (``2.5.0a1`` and
    ``2.9.2+cu121`` count as inside ``>=2.4.0,<3.0``): what is compared is the release number.

    Args:
        distribution: The distribution name, used in the message (e.g. ``"stable-baselines3"``).
        installed: The installed version string (e.g. ``"2.9.2"``).
        supported: A PEP 440 specifier set (e.g. ``">=2.4.0,<3.0"``).
        highest_tested: The newest tested release; ``None`` takes it from
            :data:`HIGHEST_TESTED` (no warning for a distribution that is not there).

    Warns:
        UntestedVersionWarning: ``installed`` is newer than ``highest_tested`` (also when it is
            above ``supported``'s upper bound); the message names the distribution, the
            installed version and the tested range. The import goes on.

    Raises:
        ImportError: ``installed`` is older than ``supported``'s lowest version (the message
            names the distribution, both versions and the ``pip install`` that fixes it), or is
            not a PEP 440 version (the message names it and the supported range).
        packaging.specifiers.InvalidSpecifier: ``supported`` is not a PEP 440 specifier set.
    """
    try:
        parsed = Version(installed)
    except InvalidVersion as exc:
        raise ImportError(
            f"rlightning-sb3 cannot read the installed {distribution} version {installed!r} "
            f"(not a PEP 440 version); it supports {distribution}{supported}"
        ) from exc
    specifiers = SpecifierSet(supported)
    if not _lowest(specifiers).contains(parsed.base_version, prereleases=True):
        raise ImportError(
            f"rlightning-sb3 supports {distribution}{supported}, but {distribution} {installed} "
            f"is installed; install a supported version: pip install '{distribution}{supported}'"
        )
    newest = HIGHEST_TESTED.get(distribution) if highest_tested is None else highest_tested
    if newest is not None and Version(parsed.base_version) > Version(newest):
        lowest = ",".join(str(s) for s in _lowest(specifiers))
        warnings.warn(
            f"rlightning-sb3 is tested with {distribution}{lowest},<={newest}, but "
            f"{distribution} {installed} is installed; it may work, but nothing has checked "
            f"that it does. If it misbehaves, install a tested version: pip install "
            f"'{distribution}{lowest},<={newest}'",
            UntestedVersionWarning,
            stacklevel=2,
        )


def installed_version(distribution: str, module_version: str | None = None) -> str:
    """Return the installed version of ``distribution``.

    Args:
        distribution: Distribution name, e.g. ``"stable-baselines3"``.
        module_version: The module's ``__version__``, used when the distribution metadata is
            missing (a source checkout on ``sys.path``).

    Returns:
        The version string.

    Raises:
        ImportError: neither the metadata nor ``module_version`` gives a version.
    """
    try:
        return version(distribution)
    except PackageNotFoundError:
        if module_version is None:
            raise ImportError(
                f"rlightning-sb3 cannot find the installed {distribution} version"
            ) from None
        return module_version
