"""The PettingZoo examples run end to end (smoke modes; the full training run is marked slow)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

EXAMPLES = Path(__file__).parents[2] / "examples"


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_demo_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    results = _load("pettingzoo_demo").main(["--smoke"])
    assert set(results) == {
        "simple_spread_v3/scripted",
        "simple_spread_v3/random",
        "pistonball_v6/random",
    }
    assert list(results["simple_spread_v3/random"]["returns"]) == ["agent_0", "agent_1", "agent_2"]
    assert len(results["pistonball_v6/random"]["returns"]) == 20
    for result in results.values():
        assert result["steps"] > 0
        assert result["steps_per_s"] > 0
        assert result["latency_p50_us"] >= 0
    out = capsys.readouterr().out
    assert "simple_spread_v3/scripted: 1 episode(s), 10 steps" in out
    assert "agent_0: mean return" in out
    assert "steps/s:" in out
    assert "... 14 more agents" in out


@pytest.mark.torch
def test_shared_policy_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("matplotlib")
    plot = tmp_path / "curve.png"
    results = _load("pettingzoo_shared_policy").main(["--smoke", "--plot", str(plot)])
    assert set(results) == {"random", "trained", "train_s"}
    assert results["random"] < 0
    assert results["trained"] < 0  # simple_spread returns are negative distances
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "mean per-agent episode return over 2 episodes" in out
    assert f"plot saved to {plot}" in out


@pytest.mark.slow
@pytest.mark.torch
def test_shared_policy_beats_random(tmp_path: Path) -> None:
    """The full example (about a minute on 2 cores): trained PPO beats random play."""
    pytest.importorskip("stable_baselines3")
    results = _load("pettingzoo_shared_policy").main(["--plot", str(tmp_path / "curve.png")])
    assert results["trained"] > results["random"] + 3.0


@pytest.mark.torch
def test_connect_four_smoke(capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("sb3_contrib")
    results = _load("pettingzoo_connect_four").main(["--smoke", "--no-progress"])
    assert results["games"] == 10
    assert results["wins"] + results["draws"] + results["losses"] == 10
    assert results["illegal"] == 0  # masked actions: never an illegal move
    assert results["timesteps"] >= 256
    out = capsys.readouterr().out
    assert "vs random over 10 games:" in out
    assert "0 illegal moves" in out


@pytest.mark.torch
def test_kaz_smoke(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """KAZ's agents die mid-episode: the collector trains through it; the plot is written."""
    pytest.importorskip("stable_baselines3")
    pytest.importorskip("matplotlib")
    plot = tmp_path / "kaz.png"
    results = _load("pettingzoo_kaz").main(["--smoke", "--plot", str(plot)])
    assert set(results) == {"random", "trained", "target", "train_s", "steps"}
    assert results["steps"] >= 512
    assert results["random"] >= 0 and results["trained"] >= 0  # kills: +1 each, never negative
    assert results["target"] == max(2.0 * results["random"], results["random"] + 1.0)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    out = capsys.readouterr().out
    assert "mean team episode return (zombies killed) over 2 episodes" in out
    assert f"plot saved to {plot}" in out
