"""The collectors against SB3's own learn() where every agent stays.

For simple_spread (parallel; discrete and continuous actions; every agent lives until all are
truncated at ``max_cycles``), one column per agent, the collector's buffer must equal, array for
array, what ``learn()`` collects over a VecEnv with one slot per agent
(``benchmarks.agents_vec_env.AgentsVecEnv``, which the benchmarks use too: what SuperSuit's
``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1`` do, in one file): PPO and A2C over
two rollouts with a ``train()`` in between (the second starts where the first stopped,
mid-episode), and DQN's replay buffer, counters and weights after training.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from benchmarks.agents_vec_env import AgentsVecEnv
from stable_baselines3 import A2C, DQN, PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import SharedReplayCollector, SharedRolloutCollector
from rlightning_sb3 import finish_training, start_training

FIELDS = (
    "observations",
    "actions",
    "rewards",
    "episode_starts",
    "values",
    "log_probs",
    "advantages",
    "returns",
)


class AgentSlot(gym.Env[Any, Any]):
    """One agent's spaces, for the shared model's VecEnv (sizes the buffer; never stepped)."""

    def __init__(self, observation_space: Any, action_space: Any) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, self.observation_space.dtype), {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("AgentSlot is never stepped")


class Snapshot(BaseCallback):
    """Copies the rollout buffer at each on_rollout_end (returns and advantages are in)."""

    def __init__(self) -> None:
        super().__init__()
        self.rollouts: list[dict[str, np.ndarray]] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        buf = self.model.rollout_buffer
        self.rollouts.append({name: getattr(buf, name).copy() for name in FIELDS})


@pytest.mark.parametrize(
    ("algorithm", "continuous"),
    [(PPO, False), (A2C, False), (PPO, True)],
    ids=["PPO", "A2C", "PPO-continuous"],
)
def test_buffer_equals_learn_over_a_vec_env_of_the_agents(
    simple_spread: ModuleType, algorithm: type[Any], continuous: bool
) -> None:
    def make() -> Any:
        return simple_spread.parallel_env(max_cycles=5, continuous_actions=continuous)

    n_copies, n_steps = 2, 8
    kwargs: dict[str, Any] = {
        "n_steps": n_steps,
        "seed": 0,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [16]},
    }
    if algorithm is PPO:
        kwargs.update(batch_size=16, n_epochs=1)
    venv = AgentsVecEnv(make, n_copies)
    n_columns = venv.num_envs
    reference = algorithm("MlpPolicy", venv, **kwargs)
    snapshots = Snapshot()
    reference.learn(total_timesteps=2 * n_steps * n_columns, callback=snapshots)
    assert len(snapshots.rollouts) == 2

    spaces = make()
    obs_space, act_space = spaces.observation_space("agent_0"), spaces.action_space("agent_0")
    slots = DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * n_columns)
    model = algorithm("MlpPolicy", slots, **kwargs)
    start_training(model, 2 * n_steps * n_columns)
    collector = SharedRolloutCollector(model, [make] * n_copies, seeds=[0, 1])
    ours = []
    for _ in range(2):
        segments = collector.collect()
        buf = model.rollout_buffer
        ours.append({name: getattr(buf, name).copy() for name in FIELDS})
        model.train()
        assert collector.dropped == 0
        # one agent per column, episodes of 5 steps: a truncation boundary inside each column
        assert all(s.env_index == s.column // 3 for s in segments)
        assert {s.end for s in segments} == {"truncated", "cut"}
    finish_training(model)
    assert model.num_timesteps == reference.num_timesteps == 2 * n_steps * n_columns
    for t, (theirs, mine) in enumerate(zip(snapshots.rollouts, ours, strict=True)):
        for name in FIELDS:
            np.testing.assert_array_equal(mine[name], theirs[name], err_msg=f"rollout {t} {name}")
    # the truncation bootstrap was applied (rewards differ from the env's at the episode ends)
    assert ours[0]["episode_starts"][5].all() and not ours[1]["episode_starts"][0].any()


def test_refuses_what_it_cannot_train(simple_spread: ModuleType) -> None:
    def make() -> Any:
        return simple_spread.parallel_env(max_cycles=5, continuous_actions=False)

    spaces = make()
    obs_space, act_space = spaces.observation_space("agent_0"), spaces.action_space("agent_0")
    slots = DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * 3)
    with pytest.raises(TypeError, match=r"on-policy SB3 model .* got DQN"):
        SharedRolloutCollector(DQN("MlpPolicy", slots, device="cpu"), [make])
    model = PPO("MlpPolicy", slots, n_steps=4, batch_size=12, device="cpu")
    with pytest.raises(ValueError, match="one seed per env copy"):
        SharedRolloutCollector(model, [make, make], seeds=[0])
    with pytest.raises(ValueError, match="at least one function"):
        SharedRolloutCollector(model, [])
    aec = simple_spread.env(max_cycles=5, continuous_actions=False)
    with pytest.raises(TypeError):
        SharedRolloutCollector(model, [lambda: aec])


def test_replay_buffer_equals_dqn_learn_over_a_vec_env_of_the_agents(
    simple_spread: ModuleType,
) -> None:
    def make() -> Any:
        return simple_spread.parallel_env(max_cycles=5, continuous_actions=False)

    n_copies, total = 2, 6 * 24
    kwargs: dict[str, Any] = {
        "learning_starts": 30,
        "train_freq": 4,
        "batch_size": 16,
        "buffer_size": 1000,
        "target_update_interval": 10,
        "exploration_fraction": 0.5,
        "seed": 0,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [16]},
    }
    venv = AgentsVecEnv(make, n_copies)
    reference = DQN("MlpPolicy", venv, **kwargs)
    reference.learn(total_timesteps=total)

    spaces = make()
    obs_space, act_space = spaces.observation_space("agent_0"), spaces.action_space("agent_0")
    slots = DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * venv.num_envs)
    model = DQN("MlpPolicy", slots, **kwargs)
    collector = SharedReplayCollector(model, [make] * n_copies, seeds=[0, 1])
    start_training(model, total)
    rollouts = 0
    while model.num_timesteps < total:  # learn()'s loop
        collector.collect()
        rollouts += 1
        if model.num_timesteps > model.learning_starts:
            model.train(gradient_steps=model.gradient_steps, batch_size=model.batch_size)
    finish_training(model)
    assert rollouts == 6
    assert model.num_timesteps == reference.num_timesteps == total
    assert model.exploration_rate == reference.exploration_rate
    assert model._n_updates == reference._n_updates > 0
    ours, theirs = model.replay_buffer, reference.replay_buffer
    assert ours.pos == theirs.pos == total // venv.num_envs
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name), err_msg=name)
    for (key, mine), (_, ref) in zip(
        model.policy.state_dict().items(), reference.policy.state_dict().items(), strict=True
    ):
        assert th.equal(mine, ref), key
