"""Shared test configuration: the ``cuda`` and ``torch`` markers and a ``device`` fixture.

* ``@pytest.mark.cuda`` tests skip with a stated reason when no CUDA GPU is visible; with
  ``RLIGHTNING_REQUIRE_CUDA=1`` (set on GPU machines) a missing GPU fails them instead, so a
  green CUDA run means the GPU tests really ran.
* ``@pytest.mark.torch`` tests skip when torch is not installed (the ``core-notorch`` env).
* Every test starts with no stamp warned about: ``rlightning.StampWarning`` warns once per process
  per field and reason, so without the reset a test's ``pytest.warns`` would depend on the order.
"""

from __future__ import annotations

import importlib.util
import os

import pytest

import rlightning.rules._values

HAS_TORCH = importlib.util.find_spec("torch") is not None


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
