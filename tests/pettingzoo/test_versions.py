"""The supported PettingZoo range: declared in pyproject, checked at import."""

from __future__ import annotations

import configparser
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import pettingzoo
import rlightning
import rlightning_pettingzoo
from rlightning.rules import framework_version_verdict
from rlightning_pettingzoo._versions import (
    PETTINGZOO_HIGHEST_TESTED,
    PETTINGZOO_SUPPORTED,
    PETTINGZOO_TESTED,
    UntestedVersionWarning,
    check_pettingzoo_version,
    installed_pettingzoo_version,
)

ROOT = Path(__file__).parents[2]
PYPROJECT = ROOT / "packages" / "pettingzoo" / "pyproject.toml"
TESTED_MESSAGE = (
    "the installed pettingzoo is newer than any release rlightning-pettingzoo is tested with; it "
    "may work, but nothing has checked that it does; got '{}'; expected pettingzoo>=1.24.4,"
    '<=1.27.0; fix: if it misbehaves, `pip install "pettingzoo>=1.24.4,<=1.27.0"`; once you have '
    'checked it, silence this with warnings.filterwarnings("ignore", '
    "category=rlightning.UntestedVersionWarning) [rule framework-version]"
)


def _tox_pins(section: str, key: str) -> list[str]:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    return re.findall(r"^\s*pettingzoo==(\S+)$", tox[section][key], re.M)


def test_range_matches_pyproject() -> None:
    # The one dependency line on PettingZoo itself (not on rlightning-pettingzoo).
    declared = re.findall(r'^\s*"pettingzoo([<>=!~][^"\[]*)",', PYPROJECT.read_text(), re.M)
    assert declared == [PETTINGZOO_SUPPORTED]
    assert rlightning_pettingzoo.PETTINGZOO_SUPPORTED == PETTINGZOO_SUPPORTED


def test_tox_tests_both_ends_of_the_tested_range() -> None:
    """pz-lowest runs the lowest supported release; the main environments the highest tested."""
    assert _tox_pins("testenv:pz-lowest", "deps") == ["1.24.4"]
    assert _tox_pins("base", "test_deps") == [PETTINGZOO_HIGHEST_TESTED]
    assert PETTINGZOO_SUPPORTED.startswith(">=1.24.4,")
    assert f">=1.24.4,<={PETTINGZOO_HIGHEST_TESTED}" == PETTINGZOO_TESTED
    assert rlightning_pettingzoo.PETTINGZOO_TESTED == PETTINGZOO_TESTED


def test_installed_version_is_supported() -> None:
    assert installed_pettingzoo_version() == pettingzoo.__version__
    check_pettingzoo_version(pettingzoo.__version__)


def test_the_verdict_table_is_every_adapters(
    version_row: tuple[str, str, str], version_of_row: Any, judge_version: Any
) -> None:
    """The same verdict as rlightning_sb3's and rlightning_ray's (tests/conftest.py)."""
    _, template, verdict = version_row
    version = version_of_row(template, "1.24.4", PETTINGZOO_HIGHEST_TESTED)
    assert judge_version(check_pettingzoo_version, version) == verdict
    assert framework_version_verdict(version, PETTINGZOO_SUPPORTED, "1.27.0") == verdict


@pytest.mark.parametrize("found", ["1.24.4", "1.25.0", "1.26.1", "1.27.0", "1.27.0+local"])
def test_tested_versions_pass_without_a_warning(found: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_pettingzoo_version(found)


@pytest.mark.parametrize("found", ["1.27.1rc1", "1.27.1", "1.28.0a1", "1.28.0", "2.0.0"])
def test_newer_than_tested_warns_naming_the_tested_range(found: str) -> None:
    with pytest.warns(UntestedVersionWarning, match=re.escape(TESTED_MESSAGE.format(found))):
        check_pettingzoo_version(found)
    assert UntestedVersionWarning is rlightning.UntestedVersionWarning
    assert rlightning_pettingzoo.UntestedVersionWarning is rlightning.UntestedVersionWarning


@pytest.mark.parametrize("found", ["1.24.3", "1.24.4rc1", "1.22.3", "1.0.0"])
def test_older_than_supported_names_the_range(found: str) -> None:
    msg = (
        "the installed pettingzoo is older than the lowest release rlightning-pettingzoo "
        f"supports; got {found!r}; expected pettingzoo>=1.24.4,<2; fix: `pip install "
        '"pettingzoo>=1.24.4,<2"` [rule framework-version]'
    )
    with pytest.raises(ImportError, match=re.escape(msg)):
        check_pettingzoo_version(found)


def test_invalid_version() -> None:
    with pytest.raises(ImportError, match=re.escape("not a PEP 440 version; got 'banana'")):
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
        "ImportError: the installed pettingzoo is older than the lowest release "
        "rlightning-pettingzoo supports; got '1.22.3'"
    ) in proc.stderr


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
    assert "needs PettingZoo >=1.24.4,<2, which is not installed" in proc.stderr


def test_import_with_a_newer_untested_pettingzoo_warns_and_works() -> None:
    """The real PettingZoo, reporting a release newer than the tested ones, in a fresh process."""
    code = (
        "import pettingzoo; pettingzoo.__version__ = '1.28.0'; import rlightning_pettingzoo; "
        "print('imported', rlightning_pettingzoo.to_parallel_actions.__name__)"
    )
    proc = subprocess.run(
        [sys.executable, "-W", "always", "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "imported to_parallel_actions\n"
    assert "UntestedVersionWarning: " + TESTED_MESSAGE.format("1.28.0") in proc.stderr
