"""The replay collector on hypothesis' schedules, and a MaskablePPO reading masks from Dict
observations (as PettingZoo's classic games give them): each buffer cell is one logged step of
an acting agent, nothing for absent or waiting agents."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from rlightning_test_support import sibling
from sb3_contrib import MaskablePPO
from stable_baselines3 import DQN
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import SharedReplayCollector, SharedRolloutCollector
from rlightning_sb3 import finish_training, start_training

ENVS = sibling(__file__, "collector_envs.py")
ScheduleEnv, MaskInObservation = ENVS.ScheduleEnv, ENVS.MaskInObservation
AgentSlot, DictSlot, span = ENVS.AgentSlot, ENVS.DictSlot, ENVS.span
schedules, waits = ENVS.schedules, ENVS.waits


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schedule=schedules(),
    waiting=waits(),
    n_copies=st.integers(1, 2),
    n_columns=st.integers(1, 4),
    train_freq=st.integers(1, 3),
    rollouts=st.integers(1, 4),
)
def test_replay_buffer_holds_each_agents_complete_transitions(
    schedule: list[tuple[int, int, str]],
    waiting: frozenset[tuple[int, int]],
    n_copies: int,
    n_columns: int,
    train_freq: int,
    rollouts: int,
) -> None:
    model = DQN(
        "MlpPolicy",
        DummyVecEnv([AgentSlot] * n_columns),
        learning_starts=0,
        train_freq=train_freq,
        buffer_size=1000,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )
    envs = [ScheduleEnv(schedule, c, waiting) for c in range(n_copies)]
    collector = SharedReplayCollector(model, [lambda e=env: e for env in envs])
    start_training(model, 10**6)
    stored = sum(collector.collect() for _ in range(rollouts))
    finish_training(model)
    buf = model.replay_buffer
    assert stored == buf.pos * n_columns == model.num_timesteps
    # which (copy, episode, t, agent) each logged acting step was: the observation says it
    steps: dict[tuple[int, ...], tuple[ScheduleEnv, str, int]] = {}
    for env in envs:
        for u, entry in env.log.items():
            for agent, e in entry.items():
                if e[1] is not None:
                    steps[(*tuple(e[0][:3]), int(e[0][3]))] = (env, agent, u)
    seen = set()
    for row in range(buf.pos):
        for col in range(n_columns):
            observation = buf.observations[row, col]
            key = (*tuple(observation[:3]), int(observation[3]))
            assert key in steps  # a logged step at which this agent acted (not waited)
            assert key not in seen  # stored once
            seen.add(key)
            env, agent, u = steps[key]
            reward, last = span(env, agent, u, env.count)
            np.testing.assert_array_equal(observation, env.log[u][agent][0])
            assert buf.actions[row, col, 0] == env.log[u][agent][1]
            assert buf.rewards[row, col] == np.float32(reward)
            np.testing.assert_array_equal(buf.next_observations[row, col], last[4])
            assert buf.dones[row, col] == (last[3] is not None)
            assert buf.timeouts[row, col] == (last[3] == "truncated")
    # every complete transition is stored, but for those queued for the next rows: fewer than
    # a row's worth plus what one round completes
    acted = sum(
        e[1] is not None for env in envs for entry in env.log.values() for e in entry.values()
    )
    still_open = 0
    for env in envs:
        for agent in env.agents:
            acting = [
                u for u, entry in env.log.items() if entry.get(agent, (0, None))[1] is not None
            ]
            if acting and env._mask(agent).sum() == 0:  # waits now: its transition is open
                _, last = span(env, agent, acting[-1], env.count)
                still_open += last[3] is None and last is env.log[env.count - 1].get(agent)
    assert 0 <= acted - still_open - stored < n_columns + n_copies * len(schedule)
    waited = any(e[1] is None for env in envs for s in env.log.values() for e in s.values())
    event(f"an agent waited: {waited}")


def test_maskable_ppo_reads_masks_from_dict_observations() -> None:
    # a1 joins at 1, waits at 2, terminates at 4; a0 truncated at 5; partial masks otherwise:
    # 7 agent-steps an episode, two episodes fill the 7 x 2 cells
    schedule = [(0, 5, "truncated"), (1, 4, "terminated")]
    model = MaskablePPO(
        "MultiInputPolicy", DummyVecEnv([DictSlot] * 2), n_steps=7, batch_size=14, seed=0
    )
    env = MaskInObservation(schedule, 0, frozenset({(1, 2)}), partial=True)
    collector = SharedRolloutCollector(model, [lambda: env])
    segments = collector.collect(update_model=False)
    buf = model.rollout_buffer
    assert collector.dropped == 0
    for seg in segments:
        for row, t in zip(range(seg.start_row, seg.stop_row), seg.env_steps, strict=True):
            entry = env.log[t][seg.agent_id]
            assert entry[1] is not None  # no row where the agent waited
            np.testing.assert_array_equal(
                buf.observations["observation"][row, seg.column], entry[0]
            )
            np.testing.assert_array_equal(buf.action_masks[row, seg.column], entry[5].astype(bool))
            assert entry[5][int(buf.actions[row, seg.column, 0])]  # a legal action
    waited = [t for t, e in env.log.items() if e.get("a1", (0, 0))[1] is None]
    assert waited  # a1 waited at least once, and has no row there
    assert all(t not in s.env_steps for s in segments if s.agent_id == "a1" for t in waited)
