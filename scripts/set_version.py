"""Set the one version of the four distributions: ``python scripts/set_version.py 0.2.0``.

The version is defined once, in the root ``VERSION`` file. This script writes ``NEW`` there and
rewrites what must follow it:

* ``version = "..."`` in ``packages/{core,sb3,pettingzoo,ray}/pyproject.toml`` (static, so that the
  sdists and wheels carry it without a build-time plugin);
* the adapters' requirements on the core (and on each other, in extras),
  ``rlightning-core>=X.Y.0,<X.(Y+1)``: an adapter works with every core release of its own minor
  series (and, at 0.x, no other).

``tests/test_versions_lockstep.py`` checks that all of them agree; run it after this script.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version

ROOT = Path(__file__).resolve().parents[1]
VERSION_FILE = ROOT / "VERSION"
PYPROJECTS = {
    name: ROOT / "packages" / name / "pyproject.toml"
    for name in ("core", "sb3", "pettingzoo", "ray")
}
ADAPTERS = ("sb3", "pettingzoo", "ray")

_VERSION_LINE = re.compile(r'^version = "[^"]*"$', re.M)
_SIBLING_REQUIREMENT = re.compile(
    r'"(rlightning-(?:core|sb3|pettingzoo|ray))(\[[^\]]*\])?[<>=!~][^"]*"'
)


def core_requirement(version: str) -> str:
    """The core range an adapter of ``version`` requires: ``>=X.Y.0,<X.(Y+1)``.

    Args:
        version: A PEP 440 release, e.g. ``"0.1.0"``.

    Returns:
        The specifier set, e.g. ``">=0.1.0,<0.2"``.

    Raises:
        ValueError: ``version`` is not a PEP 440 version with at least a major and a minor number.
    """
    try:
        parsed = Version(version)
    except InvalidVersion as exc:
        raise ValueError(f"version must be a PEP 440 version like 0.2.0; got {version!r}") from exc
    if len(parsed.release) < 2:
        raise ValueError(f"version must have a major and a minor number (0.2.0); got {version!r}")
    major, minor = parsed.release[:2]
    return f">={major}.{minor}.0,<{major}.{minor + 1}"


def set_version(version: str, root: Path = ROOT) -> list[Path]:
    """Write ``version`` to ``VERSION`` and every pyproject that must follow it.

    Args:
        version: The new version, e.g. ``"0.2.0"``.
        root: The repository root (a copy of it in the tests).

    Returns:
        The files written.

    Raises:
        ValueError: ``version`` is not a valid release, or a pyproject lacks the ``version`` line
            or (an adapter) any ``rlightning-*`` requirement to rewrite.
    """
    requirement = core_requirement(version)
    written = [root / "VERSION"]
    (root / "VERSION").write_text(f"{version}\n")
    for name in PYPROJECTS:
        path = root / "packages" / name / "pyproject.toml"
        text, count = _VERSION_LINE.subn(f'version = "{version}"', path.read_text())
        if count != 1:
            raise ValueError(f"{path}: expected one 'version = \"...\"' line, found {count}")
        if name in ADAPTERS:
            text, count = _SIBLING_REQUIREMENT.subn(
                lambda m: f'"{m.group(1)}{m.group(2) or ""}{requirement}"', text
            )
            if count == 0:
                raise ValueError(f"{path}: no rlightning-core requirement to rewrite")
        path.write_text(text)
        written.append(path)
    return written


def main(argv: list[str] | None = None) -> int:
    """Command line: ``set_version.py NEW``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="the new version of all four distributions, e.g. 0.2.0")
    args = parser.parse_args(argv)
    try:
        written = set_version(args.version)
    except ValueError as exc:
        print(f"set_version: {exc}", file=sys.stderr)
        return 2
    for path in written:
        print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
