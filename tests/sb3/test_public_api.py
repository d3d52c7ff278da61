"""The public surface of rlightning_sb3: everything public is in __all__ and documented."""

from __future__ import annotations

import inspect

import rlightning_sb3


def test_all_lists_exactly_the_public_names() -> None:
    public = {
        name
        for name, value in vars(rlightning_sb3).items()
        if not name.startswith("_")
        and not inspect.ismodule(value)
        and name not in {"annotations", "version", "PackageNotFoundError", "installed_version"}
    }
    assert public == set(rlightning_sb3.__all__) - {"__version__"}
    for name in rlightning_sb3.__all__:
        assert hasattr(rlightning_sb3, name), name


def test_every_public_callable_has_a_docstring() -> None:
    for name in rlightning_sb3.__all__:
        value = getattr(rlightning_sb3, name)
        if callable(value):
            assert inspect.getdoc(value), name
    for name, member in inspect.getmembers(rlightning_sb3.SB3PolicyAdapter):
        if not name.startswith("_"):
            assert inspect.getdoc(member), f"SB3PolicyAdapter.{name}"


def test_the_vec_env_helpers_are_exported_and_documented() -> None:
    from rlightning_sb3 import vec_env

    for name in vec_env.__all__:
        assert getattr(rlightning_sb3, name) is getattr(vec_env, name), name
        assert name in rlightning_sb3.__all__, name
    for name, member in inspect.getmembers(rlightning_sb3.ImageTranspose):
        if not name.startswith("_"):
            assert inspect.getdoc(member), f"ImageTranspose.{name}"
