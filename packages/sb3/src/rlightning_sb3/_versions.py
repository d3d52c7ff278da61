"""The Stable-Baselines3 (and sb3-contrib) versions this adapter supports, checked at import.

The range is the one declared in ``packages/sb3/pyproject.toml``. Its lowest version, 2.4.0, is
the first Stable-Baselines3 release that accepts gymnasium 1.x (which rlightning-core needs); the
highest tested is 2.9.2. tox runs the test suite at both ends.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = ["SB3_CONTRIB_SUPPORTED", "SB3_SUPPORTED", "check_version"]

#: Supported stable-baselines3 versions (PEP 440 specifier), as declared in the package metadata.
SB3_SUPPORTED = ">=2.4.0,<3.0"

#: Supported sb3-contrib versions (the ``contrib`` extra); contrib releases follow SB3's.
SB3_CONTRIB_SUPPORTED = ">=2.4.0,<3.0"


def check_version(distribution: str, installed: str, supported: str) -> None:
    """Raise ImportError unless ``installed`` lies in the ``supported`` range.

    Pre-releases and local builds of a supported release are accepted (``2.5.0a1`` and
    ``2.9.2+cu121`` count as inside ``>=2.4.0,<3.0``): what is compared is the release number.

    Args:
        distribution: The distribution name, used in the message (e.g. ``"stable-baselines3"``).
        installed: The installed version string (e.g. ``"2.9.2"``).
        supported: A PEP 440 specifier set (e.g. ``">=2.4.0,<3.0"``).

    Raises:
        ImportError: ``installed`` is outside ``supported`` (the message names the
            distribution, both versions and the ``pip install`` that fixes it), or is not a
            PEP 440 version (the message names it and the supported range).
        packaging.specifiers.InvalidSpecifier: ``supported`` is not a PEP 440 specifier set.
    """
    try:
        parsed = Version(installed)
    except InvalidVersion as exc:
        raise ImportError(
            f"rlightning-sb3 cannot read the installed {distribution} version {installed!r} "
            f"(not a PEP 440 version); it supports {distribution}{supported}"
        ) from exc
    if not SpecifierSet(supported).contains(parsed.base_version, prereleases=True):
        raise ImportError(
            f"rlightning-sb3 supports {distribution}{supported}, but {distribution} {installed} "
            f"is installed; install a supported version: pip install '{distribution}{supported}'"
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
