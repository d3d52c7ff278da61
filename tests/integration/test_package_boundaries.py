"""Package boundaries: no distribution reaches into another's private modules.

Walks the import statements of every installed module of each distribution (parsed with
``ast``, not imported) and fails on an import of another distribution's ``_``-prefixed module,
and on core importing an adapter, SB3 or PettingZoo.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGES = ("rlightning", "rlightning_sb3", "rlightning_pettingzoo", "rlightning_ray")


def _sources(package: str) -> list[Path]:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip(f"{package} is not installed in this environment")
    return sorted(
        path for root in spec.submodule_search_locations for path in Path(root).rglob("*.py")
    )


def _imported_modules(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, dotted module name)`` of each import in ``path``, names of ``from`` included."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            for alias in node.names:
                yield node.lineno, f"{node.module}.{alias.name}"


def _private_part(module: str, owner: str) -> bool:
    """Whether ``module`` (a dotted name of ``owner``'s) passes through a ``_``-prefixed part."""
    parts = module.split(".")
    return parts[0] == owner and any(p.startswith("_") and p != "__version__" for p in parts[1:])


@pytest.mark.parametrize("package", PACKAGES)
def test_no_private_import_of_another_distribution(package: str) -> None:
    offences = []
    for path in _sources(package):
        for line, module in _imported_modules(path):
            for owner in PACKAGES:
                if owner != package and _private_part(module, owner):
                    offences.append(f"{path.name}:{line} imports {module}")
    assert not offences, f"{package} reaches into private modules: {offences}"


def test_core_imports_no_adapter_or_framework() -> None:
    banned = ("rlightning_sb3", "rlightning_pettingzoo", "stable_baselines3", "sb3_contrib")
    banned += ("pettingzoo", "rlightning_ray")
    offences = [
        f"{path.name}:{line} imports {module}"
        for path in _sources("rlightning")
        for line, module in _imported_modules(path)
        if module.split(".")[0] in banned
    ]
    assert not offences, offences


def test_no_adapter_imports_the_ray_package() -> None:
    """rlightning_ray builds on the adapters, never the other way round."""
    offences = [
        f"{path.name}:{line} imports {module}"
        for package in ("rlightning_sb3", "rlightning_pettingzoo")
        for path in _sources(package)
        for line, module in _imported_modules(path)
        if module.split(".")[0] == "rlightning_ray"
    ]
    assert not offences, offences


def test_the_walk_sees_private_imports() -> None:
    """The checker itself: a private import is recognised, a public one is not."""
    assert _private_part("rlightning._fields.response_from_checked", "rlightning")
    assert _private_part("rlightning.types._multi_agent", "rlightning")
    assert not _private_part("rlightning.rules.check_stamp", "rlightning")
    assert not _private_part("rlightning_sb3.SB3PolicyAdapter", "rlightning")
    assert _private_part("rlightning_sb3._columns.StepColumns", "rlightning_sb3")
