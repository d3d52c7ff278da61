"""rlightning-pettingzoo: drive PettingZoo environments with ``MultiAgentPolicyResponse``.

Importing this package checks the installed PettingZoo against :data:`PETTINGZOO_SUPPORTED` and
raises an :class:`ImportError` naming the range when it is outside it.
"""

from importlib.metadata import PackageNotFoundError, version

from rlightning_pettingzoo._versions import (
    PETTINGZOO_SUPPORTED,
    check_pettingzoo_version,
    installed_pettingzoo_version,
)

check_pettingzoo_version(installed_pettingzoo_version())

try:
    __version__ = version("rlightning-pettingzoo")
except PackageNotFoundError:  # running from a source tree that was not installed
    __version__ = "0.0.0+unknown"

__all__ = ["PETTINGZOO_SUPPORTED", "__version__"]
