"""The supported Stable-Baselines3 range: declared once, checked at import."""

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
import tomllib

import rlightning
import rlightning_sb3
from rlightning.rules import framework_version_verdict
from rlightning_sb3 import (
    SB3_CONTRIB_SUPPORTED,
    SB3_HIGHEST_TESTED,
    SB3_SUPPORTED,
    UntestedVersionWarning,
    check_version,
)

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = ROOT / "packages" / "sb3" / "pyproject.toml"


def _tox_pins(section: str, key: str, distribution: str) -> list[str]:
    tox = configparser.ConfigParser(interpolation=None)
    tox.read(ROOT / "tox.ini")
    return re.findall(rf"^\s*{re.escape(distribution)}==(\S+)$", tox[section][key], re.M)


def test_declared_range_matches_the_checked_range() -> None:
    meta = tomllib.loads(PYPROJECT.read_text())["project"]
    assert f"stable-baselines3{SB3_SUPPORTED}" in meta["dependencies"]
    assert meta["optional-dependencies"]["contrib"] == [f"sb3-contrib{SB3_CONTRIB_SUPPORTED}"]


def test_tox_tests_both_ends_of_the_range() -> None:
    """sb3-lowest runs the lowest supported release; the main environments the highest tested."""
    assert _tox_pins("testenv:sb3-lowest", "deps", "stable-baselines3") == ["2.4.0"]
    assert _tox_pins("testenv:sb3-lowest", "deps", "sb3-contrib") == ["2.4.0"]
    assert SB3_SUPPORTED.startswith(">=2.4.0,")
    assert _tox_pins("base", "test_deps", "stable-baselines3") == [SB3_HIGHEST_TESTED]
    assert _tox_pins("base", "test_deps", "sb3-contrib") == [SB3_HIGHEST_TESTED]


@pytest.mark.parametrize("distribution", ["stable-baselines3", "sb3-contrib"])
def test_the_verdict_table_is_every_adapters(
    distribution: str, version_row: tuple[str, str, str], version_of_row: Any, judge_version: Any
) -> None:
    """The same verdict as rlightning_pettingzoo's and rlightning_ray's (tests/conftest.py)."""
    _, template, verdict = version_row
    version = version_of_row(template, "2.4.0", SB3_HIGHEST_TESTED)
    supported = SB3_SUPPORTED if distribution == "stable-baselines3" else SB3_CONTRIB_SUPPORTED
    assert judge_version(lambda v: check_version(distribution, v, supported), version) == verdict
    assert framework_version_verdict(version, supported, SB3_HIGHEST_TESTED) == verdict


@pytest.mark.parametrize("version", ["2.4.0", "2.4.1", "2.9.2", "2.5.0a1", "2.9.2+cu121"])
def test_tested_versions_pass_without_a_warning(version: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_version("stable-baselines3", version, SB3_SUPPORTED)


def _untested(distribution: str, version: str) -> str:
    return (
        f"the installed {distribution} is newer than any release rlightning-sb3 is tested with; "
        f"it may work, but nothing has checked that it does; got {version!r}; expected "
        f'{distribution}>=2.4.0,<=2.9.2; fix: if it misbehaves, `pip install "{distribution}'
        '>=2.4.0,<=2.9.2"`; once you have checked it, silence this with '
        'warnings.filterwarnings("ignore", category=rlightning.UntestedVersionWarning) '
        "[rule framework-version]"
    )


@pytest.mark.parametrize("version", ["2.9.3", "2.10.0", "2.10.0a1", "3.0.0", "3.0.0a1", "3.1"])
def test_versions_newer_than_tested_warn_naming_the_tested_range(version: str) -> None:
    with pytest.warns(
        UntestedVersionWarning, match=re.escape(_untested("stable-baselines3", version))
    ):
        check_version("stable-baselines3", version, SB3_SUPPORTED)
    assert UntestedVersionWarning is rlightning.UntestedVersionWarning
    assert issubclass(UntestedVersionWarning, UserWarning)


def test_sb3_contrib_newer_than_tested_warns() -> None:
    with pytest.warns(UntestedVersionWarning, match=re.escape(_untested("sb3-contrib", "2.10.0"))):
        check_version("sb3-contrib", "2.10.0", SB3_CONTRIB_SUPPORTED)


def test_explicit_highest_tested_overrides_the_table() -> None:
    with pytest.warns(UntestedVersionWarning, match=re.escape("expected gymnasium>=1.0,<=1.1")):
        check_version("gymnasium", "1.2.0", ">=1.0,<2", highest_tested="1.1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_version("gymnasium", "1.9.0", ">=1.0,<2")  # not in HIGHEST_TESTED: no warning
    with pytest.warns(UntestedVersionWarning, match=re.escape("expected gymnasium>=1.0,<2")):
        check_version("gymnasium", "2.0.0", ">=1.0,<2")  # above the cap: untested


@pytest.mark.parametrize("version", ["2.3.2", "2.3.9", "2.0.0", "1.8.0", "2.4.0rc1", "2.4.0.dev1"])
def test_versions_below_the_range_raise_import_error_naming_it(version: str) -> None:
    expected = (
        "the installed stable-baselines3 is older than the lowest release rlightning-sb3 "
        f"supports; got {version!r}; expected stable-baselines3>=2.4.0,<3.0; fix: `pip install "
        '"stable-baselines3>=2.4.0,<3.0"` [rule framework-version]'
    )
    with pytest.raises(ImportError, match=re.escape(expected)):
        check_version("stable-baselines3", version, SB3_SUPPORTED)


def test_unparseable_version_raises_import_error() -> None:
    expected = (
        "the installed sb3-contrib reports a version that is not a PEP 440 version; got "
        "'not.a.version!'; expected sb3-contrib>=2.4.0,<3.0"
    )
    with pytest.raises(ImportError, match=re.escape(expected)):
        check_version("sb3-contrib", "not.a.version!", SB3_CONTRIB_SUPPORTED)


def _import_with_sb3_metadata(tmp_path: Path, version: str) -> subprocess.CompletedProcess[str]:
    """Import rlightning_sb3 in a fresh interpreter that sees SB3 ``version``'s metadata first."""
    dist_info = tmp_path / f"stable_baselines3-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: stable-baselines3\nVersion: {version}\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *sys.path])
    code = "import rlightning_sb3; print('imported', rlightning_sb3.SB3PolicyAdapter.__name__)"
    return subprocess.run(
        [sys.executable, "-W", "always", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_import_with_a_newer_untested_sb3_warns_and_works(tmp_path: Path) -> None:
    result = _import_with_sb3_metadata(tmp_path, "3.0.0")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "imported SB3PolicyAdapter\n"
    assert "UntestedVersionWarning: " + _untested("stable-baselines3", "3.0.0") in result.stderr


def test_import_with_an_out_of_range_sb3_fails(tmp_path: Path) -> None:
    """A real import in a fresh interpreter that sees stable-baselines3 2.3.2's metadata first."""
    result = _import_with_sb3_metadata(tmp_path, "2.3.2")
    assert result.returncode != 0
    assert (
        "ImportError: the installed stable-baselines3 is older than the lowest release "
        "rlightning-sb3 supports; got '2.3.2'; expected stable-baselines3>=2.4.0,<3.0"
    ) in result.stderr


def test_installed_sb3_is_in_range() -> None:
    import stable_baselines3

    check_version("stable-baselines3", stable_baselines3.__version__, SB3_SUPPORTED)
    assert rlightning_sb3.SB3PolicyAdapter.__module__ == "rlightning_sb3.adapter"
