"""The public surface: __all__ is complete, importable and documented."""

from __future__ import annotations

import inspect

import rlightning_pettingzoo
from rlightning_pettingzoo import (
    aec,
    aec_collector,
    aec_groups,
    collector,
    env_group,
    groups,
    masks,
    parallel,
    policies,
    remote,
    remote_aec,
    remote_aec_groups,
    remote_aec_replay,
    remote_group_replay,
    remote_groups,
    remote_replay,
    replay,
)

MODULES = [
    aec,
    aec_collector,
    aec_groups,
    collector,
    env_group,
    groups,
    masks,
    parallel,
    policies,
    remote,
    remote_aec,
    remote_aec_replay,
    remote_aec_groups,
    remote_group_replay,
    remote_groups,
    remote_replay,
    replay,
]


def test_all_lists_every_public_name_of_the_modules() -> None:
    exported = set(rlightning_pettingzoo.__all__)
    for module in MODULES:
        assert set(module.__all__) <= exported, module.__name__
        public = {
            name
            for name, obj in vars(module).items()
            if not name.startswith("_")
            and (inspect.isfunction(obj) or inspect.isclass(obj))
            and obj.__module__ == module.__name__
        }
        assert public <= set(module.__all__), module.__name__


def test_every_export_is_importable_and_documented() -> None:
    for name in rlightning_pettingzoo.__all__:
        obj = getattr(rlightning_pettingzoo, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            doc = inspect.getdoc(obj) or ""
            assert len(doc) > 80, name
        if inspect.isfunction(obj):
            doc = inspect.getdoc(obj) or ""
            assert "Returns:" in doc
            assert "Raises:" in doc or name == "find_action_mask"
