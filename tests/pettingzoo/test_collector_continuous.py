"""SharedReplayCollector with SAC and TD3 (continuous actions) against SB3's own learn().

On simple_spread with ``continuous_actions=True`` (every agent stays), one column per agent,
the replay buffer, the counters and the networks after training must equal what ``learn()``
does over the tests' VecEnv of the agents (``AgentsVecEnv`` of ``test_collector_parity``), as
the DQN test there checks for discrete actions. TD3 runs without action noise
(``action_noise=None``, its default) here; ``test_collector_noise`` covers action noise.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch as th
from rlightning_test_support import sibling
from stable_baselines3 import SAC, TD3
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import SharedReplayCollector
from rlightning_sb3 import finish_training, start_training

PARITY = sibling(__file__, "test_collector_parity.py")
AgentsVecEnv, AgentSlot = PARITY.AgentsVecEnv, PARITY.AgentSlot


@pytest.mark.parametrize("algorithm", [SAC, TD3], ids=["SAC", "TD3"])
def test_replay_buffer_equals_learn_over_a_vec_env_of_the_agents(
    simple_spread: ModuleType, algorithm: type[Any]
) -> None:
    def make() -> Any:
        return simple_spread.parallel_env(max_cycles=5, continuous_actions=True)

    n_copies, total = 2, 6 * 24
    kwargs: dict[str, Any] = {
        "learning_starts": 30,
        "train_freq": 4,
        "batch_size": 16,
        "buffer_size": 1000,
        "seed": 0,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [16]},
    }
    if algorithm is TD3:
        kwargs["policy_delay"] = 2  # the actor and targets update every other gradient step
    venv = AgentsVecEnv(make, n_copies)
    reference = algorithm("MlpPolicy", venv, **kwargs)
    assert reference.action_noise is None
    reference.learn(total_timesteps=total)

    spaces = make()
    obs_space, act_space = spaces.observation_space("agent_0"), spaces.action_space("agent_0")
    slots = DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * venv.num_envs)
    model = algorithm("MlpPolicy", slots, **kwargs)
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
    assert model._n_updates == reference._n_updates > 0
    ours, theirs = model.replay_buffer, reference.replay_buffer
    assert ours.pos == theirs.pos == total // venv.num_envs
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name), err_msg=name)
    # the warm-up's uniform actions, then the actor's: both inside the env's [0, 1] box
    assert ours.actions[: ours.pos].min() >= -1 and ours.actions[: ours.pos].max() <= 1
    for (key, mine), (_, ref) in zip(
        model.policy.state_dict().items(), reference.policy.state_dict().items(), strict=True
    ):
        assert th.equal(mine, ref), key
    if algorithm is SAC:
        assert th.equal(model.log_ent_coef, reference.log_ent_coef)
