"""Smoke runs of the SB3 examples (the full runs, with their return thresholds, are the `demo`
and `train` tox environments)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

pytestmark = pytest.mark.torch

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:  # the examples import their shared _cartpole_ppo module
    sys.path.insert(0, str(EXAMPLES))


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cartpole_demo_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    demo = _load("cartpole_demo")
    assert demo.main(["--smoke"]) == 0
    out = capsys.readouterr().out
    assert "mean return over 2 episodes:" in out
    assert "env->policy latency over" in out
    assert "p50" in out
    assert "p99" in out


def test_custom_loop_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loop = _load("sb3_custom_loop")
    assert loop.main(["--smoke", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["trained_timesteps"] == 512
    png = (tmp_path / "learning_curve.png").read_bytes()
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(png) > 1000
    rows = (tmp_path / "learning_curve.csv").read_text().splitlines()
    assert rows[0] == "timesteps,train_return_mean100,eval_return"
    assert len(rows) == 3
    assert "learning curve:" in capsys.readouterr().out


def test_custom_loop_trains_exactly_what_learn_trains() -> None:
    """The example's adapter loop and model.learn() end with bit-identical parameters."""
    import torch as th

    loop = _load("sb3_custom_loop")
    reference = loop.make_model(0)
    reference.learn(768)
    trained, _ = loop.train(0, 768, eval_every=2, eval_episodes=1)
    expected, got = reference.policy.state_dict(), trained.policy.state_dict()
    assert expected.keys() == got.keys()
    assert all(th.equal(expected[k], got[k]) for k in expected)
    assert trained.num_timesteps == reference.num_timesteps == 768
