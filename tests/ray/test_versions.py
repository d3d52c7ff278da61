"""rlightning_ray's declared Ray range, its import-time check and its public names."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import tomllib
from packaging.requirements import Requirement

import rlightning_ray
from rlightning_ray import RAY_HIGHEST_TESTED, RAY_SUPPORTED, UntestedVersionWarning

ROOT = Path(__file__).resolve().parents[2]


def test_the_declared_range_is_the_checked_one() -> None:
    meta = tomllib.loads((ROOT / "packages" / "ray" / "pyproject.toml").read_text())["project"]
    (ray_req,) = [r for r in map(Requirement, meta["dependencies"]) if r.name == "ray"]
    assert str(ray_req.specifier) == str(Requirement(f"ray{RAY_SUPPORTED}").specifier)
    assert f"ray=={RAY_HIGHEST_TESTED}" in (ROOT / "tox.ini").read_text()


def test_an_older_ray_is_refused_and_a_newer_one_warns() -> None:
    message = 'rlightning-ray needs ray>=2.60.0,<3; ray 2.59.1 is installed: install a supported one with `pip install "ray>=2.60.0,<3"`'  # noqa: E501
    with pytest.raises(ImportError, match=re.escape(message)):
        rlightning_ray.check_ray_version("2.59.1")
    with pytest.raises(
        ImportError, match=re.escape("needs ray>=2.60.0,<3; ray 3.0.0 is installed")
    ):
        rlightning_ray.check_ray_version("3.0.0")
    with pytest.warns(
        UntestedVersionWarning, match=re.escape("ray 2.61.0 is newer than the tested range")
    ):
        rlightning_ray.check_ray_version("2.61.0")


def test_all_is_complete() -> None:
    public = {n for n in dir(rlightning_ray) if not n.startswith("_")}
    modules = {
        "actors",
        "checks",
        "collector",
        "groups",
        "latency",
        "runner",
        "server",
        "weights",
        "sb3",
        "pettingzoo",
    }
    imports = {"annotations", "PackageNotFoundError", "version"}
    assert public - modules - imports == set(rlightning_ray.__all__) - {"__version__"}
