"""The supported PettingZoo range: declared in pyproject, checked at import."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

import pettingzoo
import rlightning
import rlightning_pettingzoo
from rlightning_pettingzoo._versions import (
    PETTINGZOO_SUPPORTED,
    check_pettingzoo_version,
    installed_pettingzoo_version,
)

PYPROJECT = Path(__file__).parents[2] / "packages" / "pettingzoo" / "pyproject.toml"


def test_range_matches_pyproject() -> None:
    # The one dependency line on PettingZoo itself (not on rlightning-pettingzoo).
    declared = re.findall(r'^\s*"pettingzoo([<>=!~][^"\[]*)",', PYPROJECT.read_text(), re.M)
    assert declared == [PETTINGZOO_SUPPORTED]
    assert rlightning_pettingzoo.PETTINGZOO_SUPPORTED == PETTINGZOO_SUPPORTED


def test_installed_version_is_supported() -> None:
    assert installed_pettingzoo_version() == pettingzoo.__version__
    check_pettingzoo_version(pettingzoo.__version__)


@pytest.mark.parametrize("found", ["1.24.4", "1.25.0", "1.26.1", "1.27.0", "1.27.1rc1"])
def test_in_range(found: str) -> None:
    check_pettingzoo_version(found)


@pytest.mark.parametrize("found", ["1.24.3", "1.22.3", "1.28.0", "2.0.0", "1.28.0a1"])
def test_out_of_range_names_the_range(found: str) -> None:
    msg = (
        f"rlightning-pettingzoo supports PettingZoo >=1.24.4,<1.28, but PettingZoo {found} is "
        'installed; install a supported one with `pip install "pettingzoo>=1.24.4,<1.28"`'
    )
    with pytest.raises(ImportError, match=re.escape(msg)):
        check_pettingzoo_version(found)


def test_invalid_version() -> None:
    with pytest.raises(ImportError, match=re.escape("reports the invalid version 'banana'")):
        check_pettingzoo_version("banana")


def test_import_fails_with_out_of_range_pettingzoo(tmp_path: Path) -> None:
    """A real interpreter importing the package next to an old PettingZoo refuses it."""
    fake = tmp_path / "pettingzoo"
    fake.mkdir()
    (fake / "__init__.py").write_text('__version__ = "1.22.3"\n')
    src_dirs = {
        str(Path(rlightning_pettingzoo.__file__).parents[1]),
        str(Path(rlightning.__file__).parents[1]),
    }
    path = os.pathsep.join([str(tmp_path), *sorted(src_dirs), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", "import rlightning_pettingzoo"],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert (
        "ImportError: rlightning-pettingzoo supports PettingZoo >=1.24.4,<1.28, but PettingZoo "
        "1.22.3 is installed" in proc.stderr
    )


def test_missing_pettingzoo(tmp_path: Path) -> None:
    """With PettingZoo hidden, the ImportError names the range and how to install it."""
    (tmp_path / "pettingzoo.py").write_text("raise ImportError('hidden for this test')\n")
    src_dirs = {
        str(Path(rlightning_pettingzoo.__file__).parents[1]),
        str(Path(rlightning.__file__).parents[1]),
    }
    path = os.pathsep.join([str(tmp_path), *sorted(src_dirs), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", "import rlightning_pettingzoo"],
        env={**os.environ, "PYTHONPATH": path},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 1
    assert "needs PettingZoo >=1.24.4,<1.28, which is not installed" in proc.stderr
