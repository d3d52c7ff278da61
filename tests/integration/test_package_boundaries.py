"""Package boundaries: no distribution reaches into another's private modules.

Walks the import statements of every installed module of each distribution (parsed with
``ast``, not imported) and fails on an import of another distribution's ``_``-prefixed module,
on core importing an adapter, SB3 or PettingZoo, and on rlightning_ray importing SB3 or
sb3-contrib at run time (SB3's semantics are rlightning_sb3's; type-only imports under
``if TYPE_CHECKING:`` are allowed).
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


def _runtime_imports(path: Path) -> Iterator[tuple[int, str]]:
    """``(line, module)`` of each import that runs: those under ``if TYPE_CHECKING:`` left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    yield from _walk_runtime(tree)


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _walk_runtime(node: ast.AST) -> Iterator[tuple[int, str]]:
    if isinstance(node, ast.If) and _is_type_checking(node.test):
        for child in node.orelse:  # the else branch runs
            yield from _walk_runtime(child)
        return
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield node.lineno, alias.name
    elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        yield node.lineno, node.module
    elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
        if node.args and isinstance(node.args[0], ast.Constant):
            yield node.lineno, str(node.args[0].value)
    elif (
        isinstance(node, ast.Call)
        and getattr(node.func, "attr", None) == "import_module"
        and node.args
        and isinstance(node.args[0], ast.Constant)
    ):
        yield node.lineno, str(node.args[0].value)
    for child in ast.iter_child_nodes(node):
        yield from _walk_runtime(child)


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


RAY_BANNED = ("stable_baselines3", "sb3_contrib")


def test_the_ray_package_imports_no_sb3() -> None:
    """rlightning_ray reaches SB3 through rlightning_sb3's public API only (type hints aside)."""
    offences = [
        f"{path.name}:{line} imports {module}"
        for path in _sources("rlightning_ray")
        for line, module in _runtime_imports(path)
        if module.split(".")[0] in RAY_BANNED
    ]
    assert not offences, f"rlightning_ray imports SB3 itself: {offences}"


def test_the_runtime_walk_skips_only_type_checking_imports(tmp_path: Path) -> None:
    """The checker itself: run-time imports are seen, ``if TYPE_CHECKING:`` ones are not."""
    source = tmp_path / "module.py"
    source.write_text(
        "import typing\n"
        "from typing import TYPE_CHECKING\n"
        "import stable_baselines3\n"
        "def f():\n"
        "    from sb3_contrib import MaskablePPO\n"
        "    importlib.import_module('stable_baselines3.common')\n"
        "if TYPE_CHECKING:\n"
        "    from stable_baselines3.common.base_class import BaseAlgorithm\n"
        "if typing.TYPE_CHECKING:\n"
        "    import sb3_contrib\n"
        "else:\n"
        "    import stable_baselines3.common.utils\n",
        encoding="utf-8",
    )
    found = [
        (line, module)
        for line, module in _runtime_imports(source)
        if module.split(".")[0] in RAY_BANNED
    ]
    assert found == [
        (3, "stable_baselines3"),
        (5, "sb3_contrib"),
        (6, "stable_baselines3.common"),
        (12, "stable_baselines3.common.utils"),
    ]


def test_the_walk_sees_private_imports() -> None:
    """The checker itself: a private import is recognised, a public one is not."""
    assert _private_part("rlightning._fields.response_from_checked", "rlightning")
    assert _private_part("rlightning.types._multi_agent", "rlightning")
    assert not _private_part("rlightning.rules.check_stamp", "rlightning")
    assert not _private_part("rlightning_sb3.SB3PolicyAdapter", "rlightning")
    assert _private_part("rlightning_sb3._columns.StepColumns", "rlightning_sb3")
