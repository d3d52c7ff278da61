"""The PettingZoo versions this adapter supports, checked when it is imported.

The range is declared twice, here and in ``packages/pettingzoo/pyproject.toml`` (a test keeps the
two equal): the package metadata lets pip refuse an unsupported PettingZoo at install time, and the
check here catches one that got in anyway (a source checkout, ``--no-deps``, a later upgrade of
PettingZoo alone).

The verdict is the core's, the one every rlightning adapter applies
(:func:`rlightning.rules.check_framework_version`, rule ``framework-version``):

* Older than the lowest supported release, or a pre-release of it (``1.24.4rc1``): an
  :class:`ImportError` that names the range, instead of a confusing error deep inside an
  environment later on.
* Newer than the highest tested release (:data:`PETTINGZOO_HIGHEST_TESTED`), a 2.x beyond the
  declared cap included: the import works and an :class:`UntestedVersionWarning` names the tested
  range. A new PettingZoo release must never break ``import rlightning_pettingzoo`` for everyone
  the day it comes out; the declared range is capped only at the next major release. A local
  build counts as its release (``1.27.0+local`` is tested).

``UntestedVersionWarning`` is :class:`rlightning.UntestedVersionWarning` itself, so one filter
catches every adapter's.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version

from rlightning.rules import UntestedVersionWarning, check_framework_version, framework_tested_range

__all__ = [
    "PETTINGZOO_HIGHEST_TESTED",
    "PETTINGZOO_SUPPORTED",
    "PETTINGZOO_TESTED",
    "UntestedVersionWarning",
    "check_pettingzoo_version",
    "installed_pettingzoo_version",
]

#: Supported PettingZoo versions (a PEP 440 specifier). Lowest: 1.24.4, the first release that
#: declares gymnasium>=1.0; capped at the next major release.
PETTINGZOO_SUPPORTED = ">=1.24.4,<2"

#: The newest PettingZoo the test suite runs on (tox.ini pins it; a test checks they agree).
PETTINGZOO_HIGHEST_TESTED = "1.27.0"

#: The tested PettingZoo range (a PEP 440 specifier): ``tox -e pz-lowest`` runs the lowest.
PETTINGZOO_TESTED = framework_tested_range(PETTINGZOO_SUPPORTED, PETTINGZOO_HIGHEST_TESTED)


_INSTALL_HINT = f'install a supported one with `pip install "pettingzoo{PETTINGZOO_SUPPORTED}"`'


def installed_pettingzoo_version() -> str:
    """Return the version of the PettingZoo that ``import pettingzoo`` finds.

    The imported module's ``__version__`` wins over the installed distribution's metadata, so a
    source tree on ``sys.path`` is judged by what it is, not by what pip installed elsewhere.

    Returns:
        The version string, e.g. ``"1.27.0"``.

    Raises:
        ImportError: PettingZoo is not importable (the message says how to install it).
    """
    try:
        import pettingzoo
    except ImportError as exc:
        raise ImportError(
            f"rlightning-pettingzoo needs PettingZoo {PETTINGZOO_SUPPORTED}, which is not "
            f"installed: {_INSTALL_HINT}"
        ) from exc
    found = getattr(pettingzoo, "__version__", None)
    if isinstance(found, str):
        return found
    try:
        return dist_version("pettingzoo")
    except PackageNotFoundError as exc:
        raise ImportError(
            "cannot tell which PettingZoo is installed: the imported module has no __version__ "
            f"and there is no 'pettingzoo' distribution; {_INSTALL_HINT}"
        ) from exc


def check_pettingzoo_version(found: str) -> None:
    """Refuse a PettingZoo :data:`PETTINGZOO_SUPPORTED` does not admit; warn about an untested one.

    :func:`rlightning.rules.check_framework_version` for ``rlightning-pettingzoo``: the verdict
    of every rlightning adapter. A pre-release of the lowest release is older than it
    (``1.24.4rc1`` raises); a local build counts as its release (``1.27.0+local`` is tested);
    newer releases warn (``1.27.1rc1``, ``1.28.0``, ``2.0.0``).

    Args:
        found: A PettingZoo version string, e.g. ``"1.27.0"``.

    Warns:
        UntestedVersionWarning: ``found`` is newer than :data:`PETTINGZOO_HIGHEST_TESTED` (a 2.x
            forced in with ``--no-deps`` included); the message names :data:`PETTINGZOO_TESTED`
            and the version found. The import goes on.

    Raises:
        ImportError: ``found`` is older than the lowest supported release (or a pre-release of
            it), or is not a valid version; the message names the range, the version found and
            how to install a supported one.
    """
    check_framework_version(
        "rlightning-pettingzoo",
        "pettingzoo",
        found,
        PETTINGZOO_SUPPORTED,
        PETTINGZOO_HIGHEST_TESTED,
        stacklevel=2,
    )
