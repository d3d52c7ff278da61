"""Helpers shared by the test modules: load a sibling test file as a module, once per process.

The suite runs in pytest's importlib mode, so a test module cannot ``import`` another one (or a
helper file beside it) by name. :func:`sibling` loads it by path, registers it in
``sys.modules`` under one name per file (so every test module that needs
``tests/pettingzoo/collector_envs.py`` gets the same module object, its classes identical), and
returns it. ``tests/conftest.py`` registers this module as ``rlightning_test_support``.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

__all__ = ["sibling"]

_TESTS = Path(__file__).resolve().parent


def sibling(anchor: str, filename: str) -> ModuleType:
    """The test helper file ``filename`` beside ``anchor`` (a test module's ``__file__``).

    Args:
        anchor: The calling module's ``__file__``.
        filename: The file's name in the same folder (e.g. ``"collector_envs.py"``).

    Returns:
        The module, loaded once per process and kept in ``sys.modules`` as
        ``rlightning_tests.<folder>.<stem>`` (e.g. ``rlightning_tests.pettingzoo.collector_envs``).

    Raises:
        FileNotFoundError: no such file beside ``anchor``.
    """
    path = Path(anchor).resolve().with_name(filename)
    if not path.is_file():
        raise FileNotFoundError(f"no test helper {filename!r} beside {anchor}")
    parts = path.relative_to(_TESTS).with_suffix("").parts
    name = ".".join(("rlightning_tests", *parts))
    loaded = sys.modules.get(name)
    if loaded is not None:
        return loaded
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
