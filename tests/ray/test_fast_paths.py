"""The runner's per-step fast paths admit only what the full checks admit (benchmarks: issue 20).

``GymEnvGroup.step``'s env-contract check, ``EnvRunner._hops``'s stamp checks and
``check_answer``'s routing rules each pass the common value at once and send anything else to
the full check. Each test here feeds both kinds and compares with the full rule's verdict; no
Ray cluster is needed (the checks run in the runner's process). The last one runs
``benchmarks.ray_runner_cost`` natively: its worker checks that the local-mode runner and the
floor loop stepped their envs to the same observations.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import pytest

from rlightning import PolicyResponse
from rlightning_ray import GymEnvGroup, check_answer
from rlightning_ray.groups import EnvContractError
from rlightning_ray.runner import EnvRunner

ROOT = Path(__file__).resolve().parents[2]


def _stacked(sent: int, **stamps: Any) -> PolicyResponse:
    response = PolicyResponse(None, env_ids=["e0", "e1"], action=np.zeros(2, np.int64))
    response.ts_env_sent_ns = sent
    response.ts_policy_recv_ns = sent + 1
    response.ts_infer_start_ns = sent + 2
    response.ts_policy_sent_ns = sent + 3
    for name, value in stamps.items():
        setattr(response, name, value)
    return response


def _runner() -> EnvRunner:
    runner = EnvRunner.__new__(EnvRunner)
    runner.runner_id, runner.env_ids = "r", ["e0", "e1"]
    return runner


def test_the_stamp_fast_path_gives_the_full_checks_hops() -> None:
    runner, sent = _runner(), time.time_ns()
    assert runner._hops(_stacked(sent), sent, sent + 5) == (1, 1, 1, 2)
    # numpy ints and a per-row echo take the full check, which accepts them alike
    numpy_stamps = _stacked(sent, ts_policy_recv_ns=np.int64(sent + 1))
    assert runner._hops(numpy_stamps, sent, sent + 5) == (1, 1, 1, 2)
    assert runner._hops(_stacked(sent, ts_env_sent_ns=[sent, sent]), sent, sent + 5) == (
        1,
        1,
        1,
        2,
    )


@pytest.mark.parametrize(
    ("stamps", "error", "match"),
    [
        (lambda sent: {"ts_env_sent_ns": sent - 1}, ValueError, "did not cross intact"),
        (lambda sent: {"ts_env_sent_ns": [sent, 0]}, ValueError, "did not cross intact"),
        (lambda sent: {"ts_policy_recv_ns": True}, TypeError, "ts_policy_recv_ns"),
        (lambda sent: {"ts_infer_start_ns": -3}, ValueError, "ts_infer_start_ns"),
        (lambda sent: {"ts_policy_sent_ns": 2**64}, ValueError, "ts_policy_sent_ns"),
        (lambda sent: {"ts_policy_sent_ns": 1.5}, TypeError, "ts_policy_sent_ns"),
    ],
)
def test_the_stamp_fast_path_refuses_what_the_full_check_refuses(
    stamps: Any, error: type[Exception], match: str
) -> None:
    runner, sent = _runner(), time.time_ns()
    with pytest.raises(error, match=match):
        runner._hops(_stacked(sent, **stamps(sent)), sent, sent + 5)


def test_the_routing_fast_path_refuses_what_the_full_rules_refuse() -> None:
    answer = PolicyResponse(None, env_ids=["e0", "e1"], action=[0, 1], policy_version=3)
    assert check_answer(answer, ["e0", "e1"], runner_id="r", current_version=4, max_staleness=1)
    assert check_answer(answer, ("e0", "e1"), runner_id="r") == 3  # a tuple: the full rules
    with pytest.raises(ValueError, match="in the row of its env 'e1'"):
        check_answer(answer, ["e1", "e0"], runner_id="r")
    with pytest.raises(ValueError, match="answers for 2 envs"):
        check_answer(answer, ["e0", "e1", "e2"], runner_id="r")
    with pytest.raises(ValueError, match="the oldest accepted is 4"):
        check_answer(answer, ["e0", "e1"], runner_id="r", current_version=5, max_staleness=1)
    for version in (True, 3.0, None, np.int64(3)):  # a numpy int is no int, as before
        answer.policy_version = version
        with pytest.raises(ValueError, match="without an int policy_version"):
            check_answer(answer, ["e0", "e1"], runner_id="r")


class _Returns(gym.Env[Any, Any]):
    """CartPole's spaces; ``step`` returns ``observation`` (and ends the episode with ``done``)."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, observation: Any, done: bool = False, reset_obs: Any = None) -> None:
        self.observation, self.done, self.reset_obs = observation, done, reset_obs

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        obs = np.zeros(4, np.float32) if self.reset_obs is None else self.reset_obs
        return obs, {}

    def step(self, action: Any) -> Any:
        return self.observation, 0.0, self.done, False, {}


def _step(env: gym.Env[Any, Any]) -> Any:
    group = GymEnvGroup([lambda: env])
    group.reset([0])
    return group.step(PolicyResponse(None, env_ids=["e0"], action=np.zeros(1, np.int64)))


def test_the_contract_fast_path_admits_and_refuses_as_the_full_check() -> None:
    _step(_Returns(np.ones(4, np.float32)))  # the fast path
    _step(_Returns([0.0, 0.0, 0.0, 0.0]))  # a list of the space's shape: the full check admits
    _step(_Returns(np.ones(4, np.float32), done=True))  # a reset: the fast path
    for bad in (np.ones(1, np.float32), np.ones((4, 1), np.float32), 0.5):
        with pytest.raises(EnvContractError, match="not in the observation space"):
            _step(_Returns(bad))
    with pytest.raises(EnvContractError, match="not in the observation space"):
        _step(_Returns(np.ones(4, np.float32), done=True, reset_obs=np.ones(2, np.float32)))


def test_the_runner_cost_driver_runs_the_same_work(tmp_path: Path) -> None:
    # benchmarks.ray_runner_cost's worker checks that the local-mode runner and the floor loop
    # stand at the same observations before it counts anything; natively here (no valgrind)
    out = tmp_path / "ray_runner_cost.json"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "benchmarks.ray_runner_cost", "--smoke", "--native"]
    proc = subprocess.run(
        [*command, "--out", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    section = json.loads(out.read_text())
    rows = section["rows"]
    assert [(r["case"], r["impl"]) for r in rows] == [
        ("20.ray_runner_local", "floor"),
        ("20.ray_runner_local", "runner"),
    ]
    assert all(r["status"] == "skipped" and "without valgrind" in r["reason"] for r in rows)
    assert section["meta"]["k"] == 4 and section["meta"]["n_steps"] == 8
