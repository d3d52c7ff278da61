"""``python -m rlightning``: the versions to paste into a bug report.

Prints rlightning's distributions, Python, the platform, numpy, torch, gymnasium,
Stable-Baselines3, sb3-contrib, PettingZoo and Ray (each "not installed" when absent), whether
torch sees a GPU, and the dependency ranges each installed rlightning distribution declares
(read from its installed metadata), as SB3's ``get_system_info`` and pandas' ``show_versions``
do. Nothing is imported but torch (to ask about the GPU, only when it is installed).
"""

from __future__ import annotations

import platform
import sys
from importlib import metadata
from importlib.util import find_spec

__all__ = ["main", "system_info"]

#: rlightning's own distributions, in the order printed.
DISTRIBUTIONS = ("rlightning-core", "rlightning-sb3", "rlightning-pettingzoo", "rlightning-ray")
#: Third-party distributions whose versions matter in a bug report, in the order printed.
THIRD_PARTY = (
    "numpy",
    "torch",
    "gymnasium",
    "stable-baselines3",
    "sb3-contrib",
    "pettingzoo",
    "msgpack",
    "ray",
)


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "not installed"


def _gpu() -> str:
    if find_spec("torch") is None:
        return "unknown (torch not installed)"
    import torch

    if not torch.cuda.is_available():
        cuda = torch.version.cuda
        build = f"CUDA {cuda} build" if cuda else "CPU-only build"
        return f"none visible (torch {build})"
    names = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    return f"{len(names)} visible: {', '.join(names)}"


def _declared_ranges(distribution: str) -> list[str]:
    try:
        requires = metadata.requires(distribution) or []
    except metadata.PackageNotFoundError:
        return []
    return sorted(requires)


def system_info() -> dict[str, str]:
    """What ``python -m rlightning`` prints, as ``{name: value}`` in print order.

    Returns:
        Keys: each rlightning distribution, ``python``, ``platform``, each third-party
        distribution of :data:`THIRD_PARTY`, ``gpu``, and ``<distribution> requires`` for each
        installed rlightning distribution (its declared dependencies, ``; ``-separated). Values
        are version strings, ``"not installed"``, or text.
    """
    info = {name: _version(name) for name in DISTRIBUTIONS}
    info["python"] = sys.version.split()[0]
    info["platform"] = platform.platform()
    info.update({name: _version(name) for name in THIRD_PARTY})
    info["gpu"] = _gpu()
    for name in DISTRIBUTIONS:
        ranges = _declared_ranges(name)
        if ranges:
            info[f"{name} requires"] = "; ".join(ranges)
    return info


def main() -> None:
    """Print :func:`system_info`, one ``name: value`` line each."""
    info = system_info()
    width = max(len(name) for name in info)
    for name, value in info.items():
        print(f"{name:<{width}}  {value}")


if __name__ == "__main__":
    main()
