"""SharedRolloutCollector with sb3-contrib's RecurrentPPO: one LSTM state per (copy, agent).

Where every agent stays (simple_spread, one column per agent) the buffer, hidden states
included, must equal what ``RecurrentPPO.learn()`` collects over the tests' VecEnv of the
agents, over two rollouts with a ``train()`` in between. Where agents die, join and wait
(``ScheduleEnv``), each row's stored LSTM state must be the state the LSTM reaches when run
along that agent's own logged trajectory alone, reset where the buffer says its run starts.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch as th
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from rlightning_test_support import sibling
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import SharedRolloutCollector
from rlightning_sb3 import finish_training, start_training

PARITY = sibling(__file__, "test_collector_parity.py")
ENVS = sibling(__file__, "collector_envs.py")
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


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_buffer_equals_recurrent_ppo_learn_over_a_vec_env_of_the_agents(
    simple_spread: ModuleType, continuous: bool
) -> None:
    def make() -> Any:
        return simple_spread.parallel_env(max_cycles=5, continuous_actions=continuous)

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


def _lstm_step(policy: Any, observation: np.ndarray, state: Any, start: bool) -> Any:
    """One agent's LSTM step alone (actor and critic), reset first where ``start``."""
    obs = th.as_tensor(observation[None], dtype=th.float32)
    features = policy.extract_features(obs)
    pi_features, vf_features = features if isinstance(features, tuple) else (features, features)
    out = []
    for lstm, feats, (h, c) in zip(
        (policy.lstm_actor, policy.lstm_critic), (pi_features, vf_features), state, strict=True
    ):
        keep = 0.0 if start else 1.0
        _, (h2, c2) = lstm(feats[None], (keep * h, keep * c))
        out.append((h2, c2))
    return tuple(out)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schedule=ENVS.schedules(),
    waiting=ENVS.waits(),
    n_copies=st.integers(1, 2),
    n_columns=st.integers(1, 4),
    n_steps=st.integers(2, 6),
    rollouts=st.integers(1, 3),
    batch=st.integers(1, 24),
)
def test_each_rows_lstm_state_is_its_agents_own(
    schedule: list[tuple[int, int, str]],
    waiting: frozenset[tuple[int, int]],
    n_copies: int,
    n_columns: int,
    n_steps: int,
    rollouts: int,
    batch: int,
) -> None:
    model = RecurrentPPO(
        "MlpLstmPolicy",
        DummyVecEnv([ENVS.AgentSlot] * n_columns),
        n_steps=n_steps,
        batch_size=n_steps * n_columns,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8], "lstm_hidden_size": 4},
    )
    envs = [ENVS.ScheduleEnv(schedule, c, waiting) for c in range(n_copies)]
    collector = SharedRolloutCollector(model, [lambda e=env: e for env in envs])
    stored: dict[tuple[int, str, int], tuple[bool, list[np.ndarray]]] = {}
    for _ in range(rollouts):  # the policy is not trained: one LSTM along each trajectory
        segments = collector.collect(update_model=False)
        buf = model.rollout_buffer
        for seg in segments:
            for row, u in zip(range(seg.start_row, seg.stop_row), seg.env_steps, strict=True):
                key = (seg.env_index, seg.agent_id, u)
                assert key not in stored  # each agent-step stored once
                start = bool(buf.episode_starts[row, seg.column])
                if row > seg.start_row:  # inside a run: the same agent's next step
                    assert not start
                stored[key] = (start, [getattr(buf, n)[row, :, seg.column].copy() for n in STATES])
                obs = envs[seg.env_index].log[u][seg.agent_id][0]
                np.testing.assert_array_equal(buf.observations[row, seg.column], obs)
        forced = any(
            s.start_row > 0
            and s.env_steps[0] - 1 in envs[s.env_index].log
            and s.agent_id in envs[s.env_index].log[s.env_steps[0] - 1]
            and envs[s.env_index].log[s.env_steps[0] - 1][s.agent_id][3] is None
            for s in segments
        )
        event(f"a run began below row 0 inside an episode: {forced}")
        # sb3-contrib's own sequences (RecurrentRolloutBuffer.get, create_sequencers, the
        # stored state at each sequence start, reset where episode_starts) reproduce every
        # stored log-prob and value: each run is a sequence of its own agent
        with th.no_grad():
            for data in buf.get(min(batch, n_steps * n_columns)):
                values, log_prob, _ = model.policy.evaluate_actions(
                    data.observations,
                    data.actions.long().flatten(),
                    data.lstm_states,
                    data.episode_starts,
                )
                mask = data.mask > 1e-8
                th.testing.assert_close(log_prob[mask], data.old_log_prob[mask])
                th.testing.assert_close(values.flatten()[mask], data.old_values[mask])
    policy = model.policy
    zero = th.zeros((1, 1, 4))
    checked = 0
    with th.no_grad():
        for c, env in enumerate(envs):
            for agent in env.possible_agents:
                state: Any = ((zero, zero), (zero, zero))
                episode, kept_in_episode = -1, False
                for u in sorted(env.log):
                    entry = env.log[u].get(agent)
                    if entry is None or entry[1] is None:
                        continue  # absent or waiting: no step, the state is kept
                    observation = entry[0]
                    if int(observation[1]) != episode:
                        episode, kept_in_episode = int(observation[1]), False
                    if (c, agent, u) in stored:
                        start, states = stored[(c, agent, u)]
                        # a new episode of this agent always starts a run
                        assert start or kept_in_episode
                        (h_pi, c_pi), (h_vf, c_vf) = state
                        for got, want in zip(states, (h_pi, c_pi, h_vf, c_vf), strict=True):
                            np.testing.assert_allclose(got, want[:, 0].numpy(), atol=1e-6)
                        kept_in_episode = True
                        checked += 1
                    else:  # dropped at a rollout's end: reset as its episode's first step
                        start = not kept_in_episode
                    state = _lstm_step(policy, observation, state, start)
    assert checked == len(stored) == rollouts * n_steps * n_columns
