"""docs/compatibility.md is what scripts/compat_table.py makes of tox.ini and the pyprojects."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]


def _load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "compat_table", ROOT / "scripts" / "compat_table.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["compat_table"] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


compat_table = _load_script()


def test_committed_page_is_up_to_date() -> None:
    committed = (ROOT / "docs" / "compatibility.md").read_text()
    assert committed == compat_table.render(), (
        "docs/compatibility.md is stale: run python scripts/compat_table.py"
    )


def test_page_is_in_the_docs_toctree() -> None:
    index = (ROOT / "docs" / "index.md").read_text()
    toctree = index.split("```{toctree}")[1].split("```")[0]
    assert "\ncompatibility\n" in toctree


def test_classifiers_name_exactly_the_pythons_tested() -> None:
    tox = compat_table.ToxIni(ROOT / "tox.ini")
    envs = [tox.env(name) for name in tox.tested_envs()]
    for folder in compat_table.DISTRIBUTIONS:
        meta = tomllib.loads((ROOT / "packages" / folder / "pyproject.toml").read_text())["project"]
        classified = {
            c.rsplit(" :: ", 1)[1]
            for c in meta["classifiers"]
            if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
        }
        tested = {e.python for e in envs if folder in e.packages}
        assert classified == tested, folder
        lowest = min(tested, key=lambda v: tuple(map(int, v.split("."))))
        assert meta["requires-python"] == f">={lowest}", folder


def test_default_python_is_the_one_running_the_tests_here() -> None:
    """Environments without base_python run on the Python that runs tox (CI's python3)."""
    running = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert running == compat_table.DEFAULT_PYTHON


def test_every_versions_environment_pins_what_it_claims() -> None:
    tox = compat_table.ToxIni(ROOT / "tox.ini")
    low = tox.env("core-py310-lowest")
    assert low.python == "3.10"
    assert low.pins == {"numpy": "1.24.4", "gymnasium": "1.0.0", "msgpack": "1.0.3"}
    core = tomllib.loads((ROOT / "packages" / "core" / "pyproject.toml").read_text())["project"]
    assert core["dependencies"][:3] == ["numpy>=1.24", "gymnasium>=1.0,<2", "msgpack>=1.0.3"]
    assert tox.env("core-py313").python == "3.13"


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("    {env:NUMPY}", "cannot read the deps line '{env:NUMPY}'"),
        ("    numpy{[nowhere]x}", "No section: 'nowhere'"),
    ],
)
def test_unknown_tox_syntax_is_refused(tmp_path: Path, line: str, message: str) -> None:
    ini = (
        (ROOT / "tox.ini")
        .read_text()
        .replace("    numpy==1.24.4\n", f"    numpy==1.24.4\n{line}\n", 1)
    )
    (tmp_path / "tox.ini").write_text(ini)
    shutil.copytree(ROOT / "packages", tmp_path / "packages", ignore=shutil.ignore_patterns("src"))
    (tmp_path / "examples").mkdir()  # the `examples` environment installs -r this file
    shutil.copy(ROOT / "examples" / "requirements.txt", tmp_path / "examples")
    with pytest.raises(Exception, match=re.escape(message)):
        compat_table.render(tmp_path)
