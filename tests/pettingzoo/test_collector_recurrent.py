"""SharedRolloutCollector with sb3-contrib's RecurrentPPO: one LSTM state per (copy, agent).

Where every agent stays (simple_spread, one column per agent) the buffer, hidden states
included, must equal what ``RecurrentPPO.learn()`` collects over the tests' VecEnv of the
agents, over two rollouts with a ``train()`` in between. Where agents die, join and wait
(``ScheduleEnv``), each row's stored LSTM state must be the state the LSTM reaches when run
along that agent's own logged trajectory alone, reset where the buffer says its run starts.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch as th
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import SharedRolloutCollector
from rlightning_sb3 import finish_training, start_training


def _load(file: str) -> ModuleType:
    """A module beside this file (the suite runs in importlib mode)."""
    name = f"rlightning_pettingzoo_{Path(file).stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(file))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


PARITY = _load("test_collector_parity.py")
ENVS = _load("collector_envs.py")
AgentsVecEnv, AgentSlot, Snapshot, FIELDS = (
    PARITY.AgentsVecEnv,
    PARITY.AgentSlot,
    PARITY.Snapshot,
    PARITY.FIELDS,
)
STATES = ("hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf")
EXACT = ("actions", "episode_starts")
KWARGS: dict[str, Any] = {
    "n_steps": 8,
    "batch_size": 16,
    "n_epochs": 1,
    "seed": 0,
    "device": "cpu",
    "policy_kwargs": {"net_arch": [16], "lstm_hidden_size": 8},
}


class RecurrentSnapshot(Snapshot):  # type: ignore[misc, valid-type]
    """Snapshot, with RecurrentRolloutBuffer's stored LSTM states."""

    def _on_rollout_end(self) -> None:
        buf = self.model.rollout_buffer
        self.rollouts.append({n: getattr(buf, n).copy() for n in (*FIELDS, *STATES)})


def _compare(mine: dict[str, np.ndarray], theirs: dict[str, np.ndarray], label: str) -> None:
    for name in (*FIELDS, *STATES):
        if name in EXACT:
            np.testing.assert_array_equal(mine[name], theirs[name], err_msg=f"{label} {name}")
        else:
            np.testing.assert_allclose(
                mine[name], theirs[name], rtol=1e-5, atol=1e-6, err_msg=f"{label} {name}"
            )


def test_buffer_equals_recurrent_ppo_learn_over_a_vec_env_of_the_agents(
    simple_spread: ModuleType,
) -> None:
    def make() -> Any:
        return simple_spread.parallel_env(max_cycles=5, continuous_actions=False)

    n_copies, n_steps = 2, KWARGS["n_steps"]
    venv = AgentsVecEnv(make, n_copies)
    n_columns = venv.num_envs
    reference = RecurrentPPO("MlpLstmPolicy", venv, **KWARGS)
    snapshots = RecurrentSnapshot()
    reference.learn(total_timesteps=2 * n_steps * n_columns, callback=snapshots)
    assert len(snapshots.rollouts) == 2

    spaces = make()
    obs_space, act_space = spaces.observation_space("agent_0"), spaces.action_space("agent_0")
    slots = DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * n_columns)
    model = RecurrentPPO("MlpLstmPolicy", slots, **KWARGS)
    start_training(model, 2 * n_steps * n_columns)
    collector = SharedRolloutCollector(model, [make] * n_copies, seeds=[0, 1])
    ours = []
    for _ in range(2):
        segments = collector.collect()
        buf = model.rollout_buffer
        ours.append({n: getattr(buf, n).copy() for n in (*FIELDS, *STATES)})
        model.train()
        assert collector.dropped == 0
        assert all(s.env_index == s.column // 3 for s in segments)
    finish_training(model)
    assert model.num_timesteps == reference.num_timesteps == 2 * n_steps * n_columns
    for t, (theirs, mine) in enumerate(zip(snapshots.rollouts, ours, strict=True)):
        _compare(mine, theirs, f"rollout {t}")
    # the second rollout carries the first one's LSTM states (mid-episode, no reset at row 0)
    assert not ours[1]["episode_starts"][0].any()
    assert np.abs(ours[1]["hidden_states_pi"][0]).sum() > 0
    for (key, a), (_, b) in zip(
        model.policy.state_dict().items(), reference.policy.state_dict().items(), strict=True
    ):
        th.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=key)
