"""The PettingZoo versions this adapter supports, checked when it is imported.

The range is declared twice, here and in ``packages/pettingzoo/pyproject.toml`` (a test keeps the
two equal): the package metadata lets pip refuse an unsupported PettingZoo at install time, and the
check here catches one that got in anyway (a source checkout, ``--no-deps``, a later upgrade of
PettingZoo alone) with an :class:`ImportError` that names the range, instead of a confusing error
deep inside an environment later on.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as dist_version

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = ["PETTINGZOO_SUPPORTED", "check_pettingzoo_version", "installed_pettingzoo_version"]

#: Supported PettingZoo versions (a PEP 440 specifier). Lowest: 1.24.4, the first release that
#: declares gymnasium>=1.0; highest tested: 1.27.0.
PETTINGZOO_SUPPORTED = ">=1.24.4,<1.28"

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
    """Check that PettingZoo version ``found`` is in :data:`PETTINGZOO_SUPPORTED`.

    Pre-releases of a version inside the range count as inside it (``1.27.1rc1`` passes).

    Args:
        found: A PettingZoo version string, e.g. ``"1.27.0"``.

    Raises:
        ImportError: ``found`` is outside the supported range or is not a valid version; the
            message names the range, the version found and how to install a supported one.
    """
    try:
        parsed = Version(found)
    except InvalidVersion as exc:
        raise ImportError(
            f"rlightning-pettingzoo supports PettingZoo {PETTINGZOO_SUPPORTED}, but the installed "
            f"PettingZoo reports the invalid version {found!r}; {_INSTALL_HINT}"
        ) from exc
    if not SpecifierSet(PETTINGZOO_SUPPORTED).contains(parsed, prereleases=True):
        raise ImportError(
            f"rlightning-pettingzoo supports PettingZoo {PETTINGZOO_SUPPORTED}, but PettingZoo "
            f"{found} is installed; {_INSTALL_HINT}"
        )
