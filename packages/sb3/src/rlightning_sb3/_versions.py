"""The Stable-Baselines3 (and sb3-contrib) versions this adapter supports, checked at import.

The range is the one declared in ``packages/sb3/pyproject.toml``. Its lowest version, 2.4.0, is
the first Stable-Baselines3 release that accepts gymnasium 1.x (which rlightning-core needs); the
highest tested is 2.9.2. tox runs the test suite at both ends (``sb3-lowest``, ``torch-cpu``).

The verdict is the core's, the one every rlightning adapter applies
(:func:`rlightning.rules.check_framework_version`, rule ``framework-version``): below the lowest
version, or a pre-release of it (``2.4.0rc1``), the import fails with an :class:`ImportError`
naming the range; a local build counts as its release (``2.9.2+cu121`` is tested); a release
newer than the highest tested one (a later 2.x, or a 3.x forced in with ``--no-deps``) imports,
with an :class:`UntestedVersionWarning` naming the tested range: a new SB3 release must never
break ``import rlightning_sb3`` for everyone the day it comes out. ``UntestedVersionWarning`` is
:class:`rlightning.UntestedVersionWarning` itself, so one filter catches every adapter's.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

from rlightning.rules import UntestedVersionWarning, check_framework_version

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


def check_version(
    distribution: str, installed: str, supported: str, *, highest_tested: str | None = None
) -> None:
    """Refuse a release ``supported`` does not admit; warn about one newer than ``highest_tested``.

    :func:`rlightning.rules.check_framework_version` for ``rlightning-sb3``: the verdict of
    every rlightning adapter. ``2.5.0a1`` and ``2.9.2+cu121`` are inside ``>=2.4.0,<3.0`` and
    tested; ``2.4.0rc1`` is older than 2.4.0 and refused; ``2.10.0`` and ``3.0.0`` warn.

    Args:
        distribution: The distribution name, used in the message (e.g. ``"stable-baselines3"``).
        installed: The installed version string (e.g. ``"2.9.2"``).
        supported: A PEP 440 specifier set (e.g. ``">=2.4.0,<3.0"``).
        highest_tested: The newest tested release; ``None`` takes it from
            :data:`HIGHEST_TESTED` (for a distribution that is not there, all of ``supported``
            counts as tested: only a release above its cap warns).

    Warns:
        UntestedVersionWarning: ``installed`` is newer than ``highest_tested`` (also when it is
            above ``supported``'s upper bound); the message names the distribution, the
            installed version and the tested range. The import goes on.

    Raises:
        ImportError: ``supported`` refuses ``installed`` (older than its lowest version, or a
            pre-release of it; the message names the distribution, both versions and the
            ``pip install`` that fixes it), or ``installed`` is not a PEP 440 version.
        packaging.specifiers.InvalidSpecifier: ``supported`` is not a PEP 440 specifier set.
    """
    newest = HIGHEST_TESTED.get(distribution) if highest_tested is None else highest_tested
    check_framework_version(
        "rlightning-sb3", distribution, installed, supported, newest, stacklevel=2
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
