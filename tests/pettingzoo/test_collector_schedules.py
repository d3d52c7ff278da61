"""SharedRolloutCollector where agents die, join and are truncated, on hypothesis' schedules.

``ScheduleEnv`` is a small parallel env whose agents join and leave (terminated or truncated) on
a given schedule, and which logs every step of every agent. The reference takes each agent's
trajectory from that log alone and computes SB3's GAE on it (``RolloutBuffer.
compute_returns_and_advantage``'s formula, with the time-limit bootstrap of ``collect_rollouts``);
the buffer's advantages and returns must equal it (allclose: the critic's values of single
observations and of batches come from different float kernels). Every buffer row must be a
logged step of a live agent, and every logged step must be in the buffer once (or counted as
dropped): no row exists for an absent agent.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch as th
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from rlightning_test_support import sibling
from sb3_contrib import MaskablePPO
from stable_baselines3 import PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import KVWriter, Logger
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import SharedRolloutCollector
from rlightning_pettingzoo import collector as collector_module
from rlightning_sb3 import finish_training, start_training

ENVS = sibling(__file__, "collector_envs.py")
ScheduleEnv, MaskInObservation = ENVS.ScheduleEnv, ENVS.MaskInObservation
AgentSlot, DictSlot, span = ENVS.AgentSlot, ENVS.DictSlot, ENVS.span
schedules, waits = ENVS.schedules, ENVS.waits


def reference_gae(
    model: Any, rewards: list[float], values: np.ndarray, end: str, next_obs: Any
) -> tuple[np.ndarray, np.ndarray]:
    """SB3's GAE on one agent's segment alone (RolloutBuffer.compute_returns_and_advantage)."""
    gamma, lam = model.gamma, model.gae_lambda
    with th.no_grad():
        boot = float(model.policy.predict_values(model.policy.obs_to_tensor(next_obs)[0])[0])
    r = np.asarray(rewards, np.float64)
    next_value = 0.0
    if end == "truncated":
        r[-1] += gamma * boot  # collect_rollouts' time-limit bootstrap
    elif end == "cut":
        next_value = boot
    adv = np.zeros(len(r))
    last = 0.0
    for k in reversed(range(len(r))):
        nv = next_value if k == len(r) - 1 else values[k + 1]
        delta = r[k] + gamma * nv - values[k]
        last = delta + gamma * lam * last
        adv[k] = last
    return adv, adv + values


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schedule=schedules(),
    waiting=waits(),
    n_copies=st.integers(1, 2),
    n_steps=st.integers(2, 5),
    n_columns=st.integers(1, 4),
    rollouts=st.integers(1, 2),
    maskable=st.booleans(),
)
def test_buffer_holds_each_agents_own_trajectory_and_gae(
    schedule: list[tuple[int, int, str]],
    waiting: frozenset[tuple[int, int]],
    n_copies: int,
    n_steps: int,
    n_columns: int,
    rollouts: int,
    maskable: bool,
) -> None:
    th.manual_seed(0)
    algorithm = MaskablePPO if maskable else PPO
    model = algorithm(
        "MlpPolicy",
        DummyVecEnv([AgentSlot] * n_columns),
        n_steps=n_steps,
        batch_size=n_steps * n_columns,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )
    envs: list[ScheduleEnv] = []

    def factory(c: int) -> Any:
        def make() -> ScheduleEnv:
            envs.append(ScheduleEnv(schedule, c, waiting, partial=maskable))
            return envs[-1]

        return make

    collector = SharedRolloutCollector(model, [factory(c) for c in range(n_copies)])
    seen: set[tuple[int, str, int]] = set()
    for _ in range(rollouts):
        logged_before = [env.count for env in envs]
        segments = collector.collect(update_model=False)
        buf = model.rollout_buffer
        rows = 0
        for seg in segments:
            env = envs[seg.env_index]
            obs, rews, actions, masks = [], [], [], []
            for t in seg.env_steps:
                assert t >= logged_before[seg.env_index]  # acted in this rollout
                entry = env.log[t]
                assert seg.agent_id in entry  # the agent was live at that step ...
                assert entry[seg.agent_id][1] is not None  # ... and acted (did not wait)
                key = (seg.env_index, seg.agent_id, t)
                assert key not in seen  # stored once
                seen.add(key)
                reward, last = span(env, seg.agent_id, t, env.count)
                obs.append(entry[seg.agent_id][0])
                actions.append(entry[seg.agent_id][1])
                masks.append(entry[seg.agent_id][5].astype(bool))
                rews.append(reward)
            rows += seg.stop_row - seg.start_row
            cells = slice(seg.start_row, seg.stop_row)
            col = seg.column
            np.testing.assert_array_equal(buf.observations[cells, col], np.stack(obs))
            np.testing.assert_array_equal(buf.actions[cells, col, 0], actions)
            if maskable:  # the mask each action was drawn under, as sb3-contrib stores it
                np.testing.assert_array_equal(buf.action_masks[cells, col], np.stack(masks))
            assert seg.end == (last[3] or "cut")
            values = buf.values[cells, col].astype(np.float64)
            adv, ret = reference_gae(model, rews, values, seg.end, last[4])
            np.testing.assert_allclose(buf.advantages[cells, col], adv, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(buf.returns[cells, col], ret, rtol=1e-5, atol=1e-5)
            # the stored reward is the env's (summed over waits), plus the bootstrap only at a
            # truncation or a cut that does not fall on the column's last row
            plain = slice(seg.start_row, seg.stop_row - 1)
            np.testing.assert_allclose(buf.rewards[plain, col], rews[:-1], rtol=1e-6, atol=1e-6)
            boundary = seg.end == "terminated" or (seg.end == "cut" and seg.stop_row == n_steps)
            if boundary:
                assert buf.rewards[seg.stop_row - 1, col] == np.float32(rews[-1])
            # a segment inside a column begins an episode, or a new piece of a trajectory
            if seg.start_row > 0:
                assert buf.episode_starts[seg.start_row, col] == 1.0
            assert not buf.episode_starts[seg.start_row + 1 : seg.stop_row, col].any()
        assert rows == n_steps * n_columns  # every cell is one logged agent-step
        # each row's value and log_prob are the policy's for that row's observation and action
        obs_t = th.as_tensor(buf.observations.reshape(-1, 4))
        act_t = th.as_tensor(buf.actions.reshape(-1))
        extra = {"action_masks": buf.action_masks.reshape(-1, 3)} if maskable else {}
        with th.no_grad():
            values_t, log_prob_t, _ = model.policy.evaluate_actions(obs_t, act_t, **extra)
        np.testing.assert_allclose(buf.values.reshape(-1), values_t.numpy().ravel(), atol=1e-5)
        np.testing.assert_allclose(buf.log_probs.reshape(-1), log_prob_t.numpy(), atol=1e-5)
        # every agent-step acted in this rollout is in the buffer, or was dropped
        acted = sum(
            entry[1] is not None
            for c, env in enumerate(envs)
            for t in range(logged_before[c], env.count)
            for entry in env.log[t].values()
        )
        assert acted == rows + collector.dropped
        event(f"dropped agent-steps: {collector.dropped > 0}")
        event(f"ends: {sorted({s.end for s in segments})}")
        inside = any(s.end == "cut" and s.stop_row < n_steps for s in segments)
        event(f"a cut inside a column: {inside}")
        waited = any(
            e[1] is None for env in envs for step in env.log.values() for e in step.values()
        )
        event(f"an agent waited: {waited}")
        event(f"maskable: {maskable}")
        assert collector.dropped < len(schedule)  # only where no copy's agents fit at the end


def test_gives_up_when_no_agent_can_ever_act(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector_module, "_MAX_IDLE_ROUNDS", 50)  # 10,000 by default
    model = PPO("MlpPolicy", DummyVecEnv([AgentSlot] * 2), n_steps=2, batch_size=4, seed=0)
    env = ScheduleEnv([(0, 1, "terminated")], 0, frozenset({(0, 0)}))
    collector = SharedRolloutCollector(model, [lambda: env])
    with pytest.raises(RuntimeError, match="no agent of any env copy could act"):
        collector.collect(update_model=False)
    assert all(e["a0"][1] is None for e in env.log.values())  # it only ever waited


def test_refuses_an_agent_that_leaves_without_ending() -> None:
    class Leaky(ScheduleEnv):
        def step(self, actions: dict[str, Any]) -> Any:
            out = super().step(actions)
            self.agents = self.agents[:-1] if len(self.agents) > 1 else self.agents
            return out

    model = PPO("MlpPolicy", DummyVecEnv([AgentSlot] * 2), n_steps=4, batch_size=8, seed=0)
    collector = SharedRolloutCollector(
        model, [lambda: Leaky([(0, 5, "terminated"), (0, 5, "terminated")], 0)]
    )
    with pytest.raises(ValueError, match=r"left .* without being terminated or truncated"):
        collector.collect(update_model=False)


class Capture(KVWriter):
    """The logger's dumps, as dicts."""

    def __init__(self) -> None:
        self.dumps: list[dict[str, Any]] = []

    def write(self, key_values: dict[str, Any], key_excluded: Any, step: int = 0) -> None:
        self.dumps.append(dict(key_values))

    def close(self) -> None:
        pass


class Counting(BaseCallback):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def _on_rollout_start(self) -> None:
        self.calls.append("rollout_start")

    def _on_step(self) -> bool:
        self.calls.append(f"step {self.num_timesteps}")
        return True

    def _on_rollout_end(self) -> None:
        self.calls.append("rollout_end")


def test_callbacks_and_logger_as_learn_with_each_agents_episodes() -> None:
    # a0 lives 3 steps (truncated), a1 joins at 1 and terminates at 3: 5 agent-steps an episode
    schedule = [(0, 3, "truncated"), (1, 3, "terminated")]
    model = PPO("MlpPolicy", DummyVecEnv([AgentSlot] * 2), n_steps=5, batch_size=10, seed=0)
    capture = Capture()
    model.set_logger(Logger(None, [capture]))
    env = ScheduleEnv(schedule, 0)
    collector = SharedRolloutCollector(model, [lambda: env])
    callback = Counting()
    start_training(model, 20, callback=callback)
    for _ in range(2):
        collector.collect()
        model.train()
    finish_training(model)
    assert collector.dropped == 0
    assert model.num_timesteps == 20  # one per stored agent-step
    expected = ["rollout_start", *(f"step {2 * k}" for k in range(1, 6)), "rollout_end"]
    expected += ["rollout_start", *(f"step {10 + 2 * k}" for k in range(1, 6)), "rollout_end"]
    assert callback.calls == expected  # on_step once per buffer row of n_envs agent-steps
    # the episodes, from the env's log: 4 per agent in the two rollouts
    returns: dict[str, list[float]] = {"a0": [], "a1": []}
    lengths: list[int] = []
    totals: dict[str, list[float]] = {}
    for t in sorted(env.log):
        for agent, entry in env.log[t].items():
            total = totals.setdefault(agent, [0.0, 0])
            total[0] += entry[2]
            total[1] += 1
            if entry[3] is not None:
                returns[agent].append(total[0])
                lengths.append(int(total[1]))
                del totals[agent]
    assert [len(r) for r in returns.values()] == [4, 4]
    dump = capture.dumps[-1]
    everything = returns["a0"] + returns["a1"]
    assert dump["rollout/ep_rew_mean"] == pytest.approx(np.mean(everything))
    assert dump["rollout/ep_len_mean"] == pytest.approx(np.mean(lengths))
    for agent in ("a0", "a1"):
        assert dump[f"rollout/ep_rew_mean/{agent}"] == pytest.approx(np.mean(returns[agent]))
    assert dump["time/iterations"] == 2
