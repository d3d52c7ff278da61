"""The supported Stable-Baselines3 range: declared once, checked at import."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

import rlightning_sb3
from rlightning_sb3 import SB3_CONTRIB_SUPPORTED, SB3_SUPPORTED, check_version

PYPROJECT = Path(__file__).resolve().parents[2] / "packages" / "sb3" / "pyproject.toml"


def test_declared_range_matches_the_checked_range() -> None:
    meta = tomllib.loads(PYPROJECT.read_text())["project"]
    assert f"stable-baselines3{SB3_SUPPORTED}" in meta["dependencies"]
    assert meta["optional-dependencies"]["contrib"] == [f"sb3-contrib{SB3_CONTRIB_SUPPORTED}"]


@pytest.mark.parametrize("version", ["2.4.0", "2.4.1", "2.9.2", "2.10.0", "2.5.0a1", "2.9.2+cu121"])
def test_versions_inside_the_range_pass(version: str) -> None:
    check_version("stable-baselines3", version, SB3_SUPPORTED)


@pytest.mark.parametrize("version", ["2.3.2", "2.0.0", "1.8.0", "3.0.0", "3.0.0a1", "3.1"])
def test_versions_outside_the_range_raise_import_error_naming_it(version: str) -> None:
    expected = (
        f"rlightning-sb3 supports stable-baselines3>=2.4.0,<3.0, but stable-baselines3 {version} "
        "is installed; install a supported version: pip install 'stable-baselines3>=2.4.0,<3.0'"
    )
    with pytest.raises(ImportError, match=re.escape(expected)):
        check_version("stable-baselines3", version, SB3_SUPPORTED)


def test_unparseable_version_raises_import_error() -> None:
    with pytest.raises(ImportError, match=re.escape("cannot read the installed sb3-contrib")):
        check_version("sb3-contrib", "not.a.version!", SB3_CONTRIB_SUPPORTED)


def test_import_with_an_out_of_range_sb3_fails(tmp_path: Path) -> None:
    """A real import in a fresh interpreter that sees stable-baselines3 2.3.2's metadata first."""
    dist_info = tmp_path / "stable_baselines3-2.3.2.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: stable-baselines3\nVersion: 2.3.2\n"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), *sys.path])
    result = subprocess.run(
        [sys.executable, "-c", "import rlightning_sb3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode != 0
    assert "ImportError: rlightning-sb3 supports stable-baselines3>=2.4.0,<3.0" in result.stderr
    assert "stable-baselines3 2.3.2 is installed" in result.stderr


def test_installed_sb3_is_in_range() -> None:
    import stable_baselines3

    check_version("stable-baselines3", stable_baselines3.__version__, SB3_SUPPORTED)
    assert rlightning_sb3.SB3PolicyAdapter.__module__ == "rlightning_sb3.adapter"
