"""Shared test configuration: the ``cuda`` and ``torch`` markers and a ``device`` fixture.

* ``@pytest.mark.cuda`` tests skip with a stated reason when no CUDA GPU is visible; with
  ``RLIGHTNING_REQUIRE_CUDA=1`` (set on GPU machines) a missing GPU fails them instead, so a
  green CUDA run means the GPU tests really ran.
* ``@pytest.mark.torch`` tests skip when torch is not installed (the ``core-notorch`` env).
* ``version_row`` parametrizes a test over :data:`VERSION_TABLE`, the framework-version verdicts
  every adapter's ``test_versions.py`` checks (fixtures ``version_of_row``, ``judge_version``).
* Every test starts with no stamp warned about: ``rlightning.StampWarning`` warns once per process
  per field and reason, so without the reset a test's ``pytest.warns`` would depend on the order.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import rlightning.rules
import rlightning.rules._values

HAS_TORCH = importlib.util.find_spec("torch") is not None


def _register_support() -> None:
    """``tests/_support.py`` as the module ``rlightning_test_support`` (importlib mode: the
    test modules import it by that name)."""
    spec = importlib.util.spec_from_file_location(
        "rlightning_test_support", Path(__file__).with_name("_support.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)


_register_support()


def _cuda_visible() -> bool:
    if not HAS_TORCH:
        return False
    import torch

    return bool(torch.cuda.is_available())


REQUIRE_CUDA = os.environ.get("RLIGHTNING_REQUIRE_CUDA", "") == "1"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    has_cuda = _cuda_visible()
    for item in items:
        if item.get_closest_marker("torch") and not HAS_TORCH:
            item.add_marker(pytest.mark.skip(reason="torch is not installed (core-notorch env)"))
        if item.get_closest_marker("cuda") and not has_cuda and not REQUIRE_CUDA:
            item.add_marker(
                pytest.mark.skip(reason="no CUDA GPU visible (torch.cuda.is_available() is False)")
            )


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("cuda") and REQUIRE_CUDA and not _cuda_visible():
        pytest.fail("RLIGHTNING_REQUIRE_CUDA=1 but no CUDA GPU is visible to torch")


@pytest.fixture(
    params=[
        pytest.param("cpu", marks=pytest.mark.torch),
        pytest.param("cuda", marks=[pytest.mark.torch, pytest.mark.cuda]),
    ]
)
def device(request: pytest.FixtureRequest) -> str:
    """A torch device name: ``"cpu"``, and ``"cuda"`` where a GPU is visible."""
    return str(request.param)


@pytest.fixture(autouse=True)
def _fresh_stamp_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget which (field, reason) pairs ``StampWarning`` has warned about, for this test."""
    monkeypatch.setattr(rlightning.rules._values, "_warned_stamps", set())


# ----------------------------------------------------- the framework-version verdict table
#: One row per kind of installed version, the same for every adapter's ``test_versions.py``
#: (rule ``framework-version``: one verdict for SB3, PettingZoo and Ray). A row is (id, the
#: version built from the adapter's lowest supported and highest tested releases, verdict).
VERSION_TABLE: list[tuple[str, str, str]] = [
    ("lowest", "{low}", "tested"),
    ("lowest-local-build", "{low}+local", "tested"),
    ("lowest-pre-release", "{low}rc1", "unsupported"),
    ("lowest-dev-release", "{low}.dev0", "unsupported"),
    ("older-minor", "{older}", "unsupported"),
    ("highest-tested", "{high}", "tested"),
    ("highest-local-build", "{high}+cu121", "tested"),
    ("highest-post-release", "{high}.post1", "untested"),
    ("newer-patch-pre-release", "{next_patch}rc1", "untested"),
    ("newer-patch", "{next_patch}", "untested"),
    ("newer-minor", "{next_minor}", "untested"),
    ("next-major-pre-release", "{next_major}a1", "untested"),
    ("next-major", "{next_major}", "untested"),
    ("garbage", "not.a.version!", "invalid"),
]


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrize every test taking ``version_row`` over :data:`VERSION_TABLE`."""
    if "version_row" in metafunc.fixturenames:
        metafunc.parametrize("version_row", VERSION_TABLE, ids=[row[0] for row in VERSION_TABLE])


def _version_of_row(template: str, lowest: str, highest: str) -> str:
    """The version a :data:`VERSION_TABLE` row's template names for one adapter's range."""
    from packaging.version import Version

    low, high = Version(lowest), Version(highest)
    major, minor, patch = [*high.release, 0, 0][:3]
    return template.format(
        low=lowest,
        high=highest,
        older=f"{low.major}.{low.minor - 1}.0" if low.minor else f"{low.major - 1}.99.0",
        next_patch=f"{major}.{minor}.{patch + 1}",
        next_minor=f"{major}.{minor + 1}.0",
        next_major=f"{major + 1}.0.0",
    )


def _judge_version(check: Any, version: str) -> str:
    """What an adapter's version check does with ``version``: the verdict it acts out.

    ``"tested"`` (no warning), ``"untested"`` (one ``rlightning.UntestedVersionWarning``, the
    import goes on), ``"invalid"`` or ``"unsupported"`` (``ImportError``).
    """
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            check(version)
        except ImportError as error:
            message = str(error)
        else:
            message = None
    if message is not None:
        assert not caught, caught
        assert message.endswith("[rule framework-version]"), message
        return "invalid" if "not a PEP 440 version" in message else "unsupported"
    if not caught:
        return "tested"
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert caught[0].category is rlightning.rules.UntestedVersionWarning
    return "untested"


@pytest.fixture
def version_of_row() -> Any:
    """``version_of_row(template, lowest, highest)``: a :data:`VERSION_TABLE` row's version."""
    return _version_of_row


@pytest.fixture
def judge_version() -> Any:
    """``judge_version(check, version)``: the verdict a version check acts out for ``version``."""
    return _judge_version
