"""One version for the four distributions: VERSION, each pyproject and the adapters' core range."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "set_version.py"
NAMES = {
    "core": "rlightning-core",
    "sb3": "rlightning-sb3",
    "pettingzoo": "rlightning-pettingzoo",
    "ray": "rlightning-ray",
}
ADAPTERS = ("sb3", "pettingzoo", "ray")


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("set_version", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _project(root: Path, name: str) -> dict[str, object]:
    meta = tomllib.loads((root / "packages" / name / "pyproject.toml").read_text())["project"]
    assert isinstance(meta, dict)
    return meta


def _core_requirements(meta: dict[str, object]) -> list[Requirement]:
    deps = meta["dependencies"]
    assert isinstance(deps, list)
    return [r for r in map(Requirement, deps) if r.name == "rlightning-core"]


def _sibling_requirements(meta: dict[str, object]) -> list[Requirement]:
    """Every requirement on one of the distributions, in dependencies and extras."""
    deps = meta["dependencies"]
    extras = meta.get("optional-dependencies", {})
    assert isinstance(deps, list)
    assert isinstance(extras, dict)
    specs = [*deps, *(spec for group in extras.values() for spec in group)]
    return [r for r in map(Requirement, specs) if r.name in NAMES.values()]


def test_every_distribution_has_the_version_of_the_version_file() -> None:
    version = (ROOT / "VERSION").read_text().strip()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), version
    for folder, name in NAMES.items():
        meta = _project(ROOT, folder)
        assert meta["name"] == name
        assert meta["version"] == version, folder


def test_adapters_require_the_core_of_their_own_minor_series() -> None:
    major, minor, _ = (ROOT / "VERSION").read_text().strip().split(".")
    for folder in ADAPTERS:
        meta = _project(ROOT, folder)
        assert len(_core_requirements(meta)) == 1, folder
        for requirement in _sibling_requirements(meta):  # the core, and adapters in extras
            assert str(requirement.specifier) == f"<{major}.{int(minor) + 1},>={major}.{minor}.0"
            assert requirement.specifier.contains((ROOT / "VERSION").read_text().strip())


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    for folder in NAMES:
        target = tmp_path / "packages" / folder
        target.mkdir(parents=True)
        shutil.copy(ROOT / "packages" / folder / "pyproject.toml", target / "pyproject.toml")
    shutil.copy(ROOT / "VERSION", tmp_path / "VERSION")
    return tmp_path


def test_set_version_rewrites_all_of_them(repo_copy: Path) -> None:
    written = _load_script().set_version("1.4.2", repo_copy)
    assert len(written) == 1 + len(NAMES)
    assert (repo_copy / "VERSION").read_text() == "1.4.2\n"
    for folder in NAMES:
        meta = _project(repo_copy, folder)
        assert meta["version"] == "1.4.2"
    for folder in ADAPTERS:
        (requirement,) = _core_requirements(_project(repo_copy, folder))
        assert str(requirement.specifier) == "<1.5,>=1.4.0"
        for sibling in _sibling_requirements(_project(repo_copy, folder)):
            assert str(sibling.specifier) == "<1.5,>=1.4.0"
    # Nothing else in the files changed.
    before = (ROOT / "packages" / "sb3" / "pyproject.toml").read_text().splitlines()
    after = (repo_copy / "packages" / "sb3" / "pyproject.toml").read_text().splitlines()
    changed = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert [b for _, b in changed] == ['version = "1.4.2"', '    "rlightning-core>=1.4.0,<1.5",']


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ("banana", "version must be a PEP 440 version like 0.2.0; got 'banana'"),
        ("1", "version must have a major and a minor number (0.2.0); got '1'"),
    ],
)
def test_set_version_refuses_a_bad_version(repo_copy: Path, version: str, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        _load_script().set_version(version, repo_copy)
    assert (repo_copy / "VERSION").read_text() == (ROOT / "VERSION").read_text()


def test_set_version_command_line_reports_a_bad_version() -> None:
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "x.y"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == "set_version: version must be a PEP 440 version like 0.2.0; got 'x.y'\n"
