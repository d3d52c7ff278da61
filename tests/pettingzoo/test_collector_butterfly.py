"""SharedRolloutCollector on a butterfly env against SB3's own learn(): knights_archers_zombies
with vector observations, knights and archers unkillable (every agent stays until the episode
ends for all), one column per agent. The buffer must equal, array for array, what PPO's
``learn()`` collects over the tests' VecEnv of the agents (``AgentsVecEnv`` of
``test_collector_parity``), over two rollouts with a ``train()`` in between.

KAZ is ``_v10`` up to PettingZoo 1.25 (``vector_state=True``, ``spawn_rate``) and ``_v11``
after (``obs_method="vector"``, ``spawn_delay``); ``killable_knights`` and ``killable_archers``
are in both.
"""

from __future__ import annotations

import inspect
from types import ModuleType
from typing import Any

import numpy as np
from rlightning_test_support import sibling
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import SharedRolloutCollector
from rlightning_sb3 import finish_training, start_training

PARITY = sibling(__file__, "test_collector_parity.py")
AgentsVecEnv, AgentSlot, Snapshot, FIELDS = (
    PARITY.AgentsVecEnv,
    PARITY.AgentSlot,
    PARITY.Snapshot,
    PARITY.FIELDS,
)


def kaz_kwargs(kaz: ModuleType) -> dict[str, Any]:
    """Vector observations, nobody killable, a zombie every 2 cycles, 12-cycle episodes."""
    params = inspect.signature(kaz.raw_env.__init__).parameters
    kwargs: dict[str, Any] = {
        "killable_knights": False,
        "killable_archers": False,
        "max_cycles": 12,
        "spawn_delay" if "spawn_delay" in params else "spawn_rate": 2,
    }
    if "obs_method" in params:
        kwargs["obs_method"] = "vector"
    else:
        kwargs["vector_state"] = True
    assert {"killable_knights", "killable_archers"} <= set(params)
    return kwargs


def test_kaz_buffer_equals_ppo_learn_over_a_vec_env_of_the_agents(kaz: ModuleType) -> None:
    kwargs = kaz_kwargs(kaz)

    def make() -> Any:
        return kaz.parallel_env(**kwargs)

    n_copies, n_steps = 2, 16
    ppo: dict[str, Any] = {
        "n_steps": n_steps,
        "batch_size": 32,
        "n_epochs": 1,
        "seed": 0,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [16]},
    }
    venv = AgentsVecEnv(make, n_copies)
    n_columns = venv.num_envs
    assert n_columns == 2 * len(make().possible_agents) == 8
    reference = PPO("MlpPolicy", venv, **ppo)
    snapshots = Snapshot()
    reference.learn(total_timesteps=2 * n_steps * n_columns, callback=snapshots)
    assert len(snapshots.rollouts) == 2

    spaces = make()
    agent = spaces.possible_agents[0]
    obs_space, act_space = spaces.observation_space(agent), spaces.action_space(agent)
    assert len(obs_space.shape) == 2  # KAZ's vector state: one row per entity
    slots = DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * n_columns)
    model = PPO("MlpPolicy", slots, **ppo)
    start_training(model, 2 * n_steps * n_columns)
    collector = SharedRolloutCollector(model, [make] * n_copies, seeds=[0, 1])
    ours = []
    for _ in range(2):
        segments = collector.collect()
        ours.append({name: getattr(model.rollout_buffer, name).copy() for name in FIELDS})
        model.train()
        assert collector.dropped == 0
        assert all(s.env_index == s.column // 4 for s in segments)
    finish_training(model)
    assert model.num_timesteps == reference.num_timesteps == 2 * n_steps * n_columns
    for t, (theirs, mine) in enumerate(zip(snapshots.rollouts, ours, strict=True)):
        for name in FIELDS:
            np.testing.assert_array_equal(mine[name], theirs[name], err_msg=f"rollout {t} {name}")
    # every agent starts at row 0, then its copy's next 12-cycle episode at row 12 (the
    # truncation bootstrap is in the rewards above, as SB3's), and that one runs on into the
    # second rollout, whose row 0 starts nothing
    starts = ours[0]["episode_starts"]
    assert starts[0].all() and starts[12].all() and starts.sum() == 2 * n_columns
    assert not ours[1]["episode_starts"][0].any()
