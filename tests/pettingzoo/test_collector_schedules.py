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

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sb3_contrib import MaskablePPO
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.logger import KVWriter, Logger
from stable_baselines3.common.vec_env import DummyVecEnv

from pettingzoo import ParallelEnv
from rlightning_pettingzoo import SharedReplayCollector, SharedRolloutCollector
from rlightning_pettingzoo import collector as collector_module
from rlightning_sb3 import finish_training, start_training

OBS = spaces.Box(-100.0, 100.0, (4,), np.float32)
ACT = spaces.Discrete(3)


class ScheduleEnv(ParallelEnv[str, np.ndarray, int]):
    """Agent ``a{k}`` joins at step ``join[k]`` and ends at ``leave[k]`` (``kinds[k]``:
    ``"terminated"`` or ``"truncated"``), every episode; it waits (its mask, in its info,
    allows nothing) at the episode steps ``t`` with ``(k, t)`` in ``waits``. With ``partial``,
    an acting agent's mask forbids action ``(k + t) % 3`` (for a MaskablePPO). ``log`` maps the
    env's step counter (since creation) to ``{agent: (observation, action, reward, end, next
    observation, mask)}``, action None where the agent waited."""

    metadata: ClassVar[dict[str, Any]] = {"name": "schedule_v0"}

    def __init__(
        self,
        schedule: list[tuple[int, int, str]],
        copy: int,
        waits: frozenset[tuple[int, int]] = frozenset(),
        partial: bool = False,
    ) -> None:
        self.schedule = schedule
        self.waits = waits
        self.partial = partial
        self.possible_agents = [f"a{k}" for k in range(len(schedule))]
        self.copy = copy
        self.episode = -1
        self.count = 0
        self.log: dict[int, dict[str, tuple[Any, ...]]] = {}

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return OBS

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return ACT

    def _obs(self, agent: str, last_action: int) -> np.ndarray:
        k = self.possible_agents.index(agent)
        return np.array([self.copy, self.episode, self.t / 3, k + last_action / 4], np.float32)

    def _mask(self, agent: str) -> np.ndarray:
        k = self.possible_agents.index(agent)
        mask = np.ones(3, np.int8)
        if (k, self.t) in self.waits:
            mask[:] = 0
        elif self.partial:
            mask[(k + self.t) % 3] = 0
        return mask

    def _infos(self) -> dict[str, Any]:
        return {a: {"action_mask": self._mask(a)} for a in self.agents}

    def _joining(self) -> list[str]:
        pairs = zip(self.possible_agents, self.schedule, strict=True)
        return [a for a, (join, _, _) in pairs if join == self.t]

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        self.episode += 1
        self.t = 0
        self.agents = self._joining()
        self._last = {a: self._obs(a, 0) for a in self.agents}
        return dict(self._last), self._infos()

    def step(self, actions: dict[str, Any]) -> Any:
        assert set(actions) == set(self.agents), (actions, self.agents)
        masks = {a: self._mask(a) for a in self.agents}
        self.t += 1
        rewards, terms, truncs, obs = {}, {}, {}, {}
        entry = {}
        staying = []
        for a in self.agents:
            k = self.possible_agents.index(a)
            action = actions[a]
            if action is None:
                assert not masks[a].any(), (a, masks[a])
            else:
                action = int(action)
                assert masks[a][action], (a, action, masks[a])
            acted = 1 if action is None else action
            rewards[a] = 0.25 * (acted - 1) + 0.1 * k - 0.05 * self.t
            _, leave, kind = self.schedule[k]
            terms[a] = leave == self.t and kind == "terminated"
            truncs[a] = leave == self.t and kind == "truncated"
            obs[a] = self._obs(a, acted)
            end = "terminated" if terms[a] else "truncated" if truncs[a] else None
            entry[a] = (self._last[a], action, rewards[a], end, obs[a], masks[a])
            if end is None:
                staying.append(a)
        self.log[self.count] = entry
        self.count += 1
        joining = self._joining()
        for a in joining:
            obs[a] = self._obs(a, 0)
        self.agents = staying + joining
        self._last = obs
        return obs, rewards, terms, truncs, self._infos()


class AgentSlot(gym.Env[Any, Any]):
    """One agent's spaces, for the shared model's VecEnv (sizes the buffer; never stepped)."""

    observation_space = OBS
    action_space = ACT

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("AgentSlot is never stepped")


@st.composite
def schedules(draw: Any) -> list[tuple[int, int, str]]:
    """Agent 0 lives the whole episode; the others join late and leave early."""
    kinds = st.sampled_from(["terminated", "truncated"])
    others = []
    for _ in range(draw(st.integers(0, 3))):
        join = draw(st.integers(0, 3))
        others.append((join, join + draw(st.integers(1, 5)), draw(kinds)))
    length = max([leave for _, leave, _ in others] + [draw(st.integers(1, 6))])
    return [(0, length, draw(kinds)), *others]


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


def span(env: ScheduleEnv, agent: str, t: int, stop: int) -> tuple[float, tuple[Any, ...]]:
    """The reward of the agent's transition acted at step ``t`` (summed while it then waits,
    up to its next action, its end or the rollout's end ``stop``) and its last log entry."""
    entry = env.log[t][agent]
    total = entry[2]
    u = t + 1
    while entry[3] is None and u < stop and env.log[u][agent][1] is None:
        entry = env.log[u][agent]
        total += entry[2]
        u += 1
    return total, entry


@st.composite
def waits(draw: Any) -> frozenset[tuple[int, int]]:
    """Steps at which agents wait; agent 0 acts at its episode's first step (else none might)."""
    found = draw(st.sets(st.tuples(st.integers(0, 2), st.integers(0, 4)), max_size=6))
    return frozenset(found - {(0, 0)})


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


DICT_OBS = spaces.Dict({"observation": OBS, "action_mask": spaces.Box(0, 1, (3,), np.int8)})


class MaskInObservation(ScheduleEnv):
    """ScheduleEnv with each mask in the observation, as PettingZoo's classic games give it."""

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return DICT_OBS

    def _wrap(self, observations: dict[str, Any]) -> dict[str, Any]:
        return {
            a: {
                "observation": o,
                "action_mask": self._mask(a) if a in self.agents else np.ones(3, np.int8),
            }
            for a, o in observations.items()
        }

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        observations, _ = super().reset(seed, options)
        return self._wrap(observations), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> Any:
        observations, rewards, terms, truncs, _ = super().step(actions)
        return self._wrap(observations), rewards, terms, truncs, {a: {} for a in observations}


class DictSlot(gym.Env[Any, Any]):
    observation_space = DICT_OBS
    action_space = ACT

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return {"observation": np.zeros(4, np.float32), "action_mask": np.ones(3, np.int8)}, {}


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
