"""Responses on a real local Ray cluster: rollout latencies and zero-copy transfer.

Needs the ``ray`` extra (``pip install rlightning-core[ray]``) and torch; skipped otherwise.
One cluster (``ray.init(address="local", num_cpus=2)``: its own, never a running one) serves the
whole module; it takes about 10 s to start.
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ray = pytest.importorskip("ray")
torch = pytest.importorskip("torch")

from rlightning import MultiAgentPolicyResponse, PolicyResponse  # noqa: E402

pytestmark = [
    pytest.mark.torch,
    pytest.mark.filterwarnings("ignore:The given NumPy array is not writable"),
]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def _load_example() -> Any:
    spec = importlib.util.spec_from_file_location("ray_rollout", EXAMPLES / "ray_rollout.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ray_rollout"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cluster() -> Iterator[None]:
    """A local Ray cluster; workers find rlightning and the example through PYTHONPATH."""
    saved = {
        key: os.environ.get(key) for key in ("PYTHONPATH", "RAY_ENABLE_ZERO_COPY_TORCH_TENSORS")
    }
    os.environ.pop("RAY_ENABLE_ZERO_COPY_TORCH_TENSORS", None)  # prove zero copy without it
    paths = [str(ROOT / "packages" / "core" / "src"), str(EXAMPLES)]
    if saved["PYTHONPATH"]:
        paths.append(saved["PYTHONPATH"])
    os.environ["PYTHONPATH"] = os.pathsep.join(paths)
    ray.init(
        address="local",  # a cluster of its own: a bare ray.init() joins any running one
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=200 * 1024 * 1024,
        log_to_driver=False,
    )
    try:
        yield
    finally:
        ray.shutdown()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _object_store_root(array: np.ndarray) -> Any:
    base: Any = array
    while isinstance(base, np.ndarray) and base.base is not None:
        base = base.base
    return base


def test_rollout_reports_latencies_and_zero_copy(cluster: None) -> None:
    example = _load_example()
    reports = example.rollout(n_envs=2, n_steps=30)
    assert [r["env_id"] for r in reports] == ["env-0", "env-1"]
    for report in reports:
        assert report["steps"] == 30
        for key in ("env_to_policy_ms", "policy_to_env_ms"):
            assert math.isfinite(report[key])
            assert 0.0 < report[key] < 5_000.0
        assert report["zero_copy"] == {
            "features_read_only": True,
            "features_same_memory": True,
            "hidden_same_memory": True,
            "hidden_dtype": "torch.bfloat16",
        }


def test_large_fields_cross_the_object_store_without_copies(cluster: None) -> None:
    features = np.arange(1 << 18, dtype=np.float32)  # 1 MiB
    hidden = torch.randn(1 << 18, dtype=torch.bfloat16)
    response = PolicyResponse(
        "env-3", features=features, hidden=hidden, nested={"t": [torch.arange(1 << 16)]}
    ).mark_policy_sent()
    ref = ray.put(response)
    first, second = ray.get(ref), ray.get(ref)
    assert first == response  # class, env_id, every field, dtypes and values
    assert type(first) is PolicyResponse
    assert first.ts_policy_sent_ns == response.ts_policy_sent_ns
    # numpy: a read-only view whose root buffer is Ray's object-store buffer
    assert not first.features.flags.writeable
    assert type(_object_store_root(first.features)).__module__.startswith("ray")
    assert first.features.ctypes.data == second.features.ctypes.data
    # tensors: rebuilt on the object-store memory too (two reads, one address)
    assert first.hidden.dtype == torch.bfloat16
    assert first.hidden.data_ptr() == second.hidden.data_ptr()
    assert first.nested["t"][0].data_ptr() == second.nested["t"][0].data_ptr()
    assert torch.equal(first.hidden, hidden)


@ray.remote(num_cpus=0.5)
def _echo_stacked(responses: list[MultiAgentPolicyResponse]) -> MultiAgentPolicyResponse:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MultiAgentPolicyResponse.stack(responses)


def test_multi_agent_and_stacked_responses_through_a_task(cluster: None) -> None:
    responses = [
        MultiAgentPolicyResponse(
            f"env-{i}",
            action={"a": torch.tensor(i), "b": np.int64(i)},
            log_prob={"a": torch.tensor(-0.5, dtype=torch.bfloat16), "b": np.float32(-1)},
            ts_env_sent_ns=i,
        )
        for i in range(3)
    ]
    stacked = ray.get(_echo_stacked.remote(responses))
    assert type(stacked) is MultiAgentPolicyResponse
    assert stacked.env_ids == ["env-0", "env-1", "env-2"]
    assert stacked.action["a"].shape == (3,)
    assert stacked.unbind() == responses
