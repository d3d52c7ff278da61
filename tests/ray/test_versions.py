"""rlightning_ray's declared Ray range, its import-time check and its public names."""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import tomllib
from packaging.requirements import Requirement

import rlightning
import rlightning_ray
from rlightning.rules import framework_version_verdict
from rlightning_ray import RAY_HIGHEST_TESTED, RAY_SUPPORTED, UntestedVersionWarning

ROOT = Path(__file__).resolve().parents[2]


def test_the_declared_range_is_the_checked_one() -> None:
    meta = tomllib.loads((ROOT / "packages" / "ray" / "pyproject.toml").read_text())["project"]
    (ray_req,) = [r for r in map(Requirement, meta["dependencies"]) if r.name == "ray"]
    assert str(ray_req.specifier) == str(Requirement(f"ray{RAY_SUPPORTED}").specifier)
    assert f"ray=={RAY_HIGHEST_TESTED}" in (ROOT / "tox.ini").read_text()


def test_an_older_ray_is_refused_and_a_newer_one_warns() -> None:
    message = (
        "the installed ray is older than the lowest release rlightning-ray supports; got "
        "'2.59.1'; expected ray>=2.60.0,<3; fix: `pip install \"ray>=2.60.0,<3\"` "
        "[rule framework-version]"
    )
    with pytest.raises(ImportError, match=re.escape(message)):
        rlightning_ray.check_ray_version("2.59.1")
    untested = (
        "the installed ray is newer than any release rlightning-ray is tested with; it may "
        "work, but nothing has checked that it does; got '{}'; expected ray>=2.60.0,<=2.60.0"
    )
    with pytest.warns(UntestedVersionWarning, match=re.escape(untested.format("2.61.0"))):
        rlightning_ray.check_ray_version("2.61.0")
    # A new major release imports with the warning, as docs/compatibility.md says (it was
    # refused with an ImportError, unlike every other adapter).
    with pytest.warns(UntestedVersionWarning, match=re.escape(untested.format("3.0.0"))):
        rlightning_ray.check_ray_version("3.0.0")
    assert UntestedVersionWarning is rlightning.UntestedVersionWarning


def test_the_verdict_table_is_every_adapters(
    version_row: tuple[str, str, str], version_of_row: Any, judge_version: Any
) -> None:
    """The same verdict as rlightning_sb3's and rlightning_pettingzoo's (tests/conftest.py)."""
    _, template, verdict = version_row
    version = version_of_row(template, "2.60.0", RAY_HIGHEST_TESTED)
    assert judge_version(rlightning_ray.check_ray_version, version) == verdict
    assert framework_version_verdict(version, RAY_SUPPORTED, RAY_HIGHEST_TESTED) == verdict


def test_one_filter_silences_every_adapters_untested_warning() -> None:
    """One ``warnings.filterwarnings(category=...)`` catches the three adapters' warnings."""
    import rlightning_pettingzoo
    import rlightning_sb3

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=rlightning.UntestedVersionWarning)
        rlightning_ray.check_ray_version("3.0.0")
        rlightning_sb3.check_version("stable-baselines3", "3.0.0", rlightning_sb3.SB3_SUPPORTED)
        rlightning_pettingzoo._versions.check_pettingzoo_version("2.0.0")
    assert caught == []
    assert (
        rlightning_ray.UntestedVersionWarning
        is rlightning_sb3.UntestedVersionWarning
        is rlightning_pettingzoo.UntestedVersionWarning
        is rlightning.UntestedVersionWarning
    )


def test_all_is_complete() -> None:
    public = {n for n in dir(rlightning_ray) if not n.startswith("_")}
    modules = {
        "actors",
        "checks",
        "collector",
        "groups",
        "latency",
        "local",
        "runner",
        "server",
        "weights",
        "sb3",
        "pettingzoo",
        "pz_groups",
        "pz_group_replay",
        "pz_replay",
        "pz_rollout",
        "pz_aec",
        "pz_aec_replay",
        "pz_aec_groups",
    }
    imports = {"annotations", "PackageNotFoundError", "version"}
    assert public - modules - imports == set(rlightning_ray.__all__) - {"__version__"}
