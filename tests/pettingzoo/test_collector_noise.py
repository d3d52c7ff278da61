"""The replay collectors with action noise (TD3, DDPG, SAC) against SB3's own learn().

SB3 (``OffPolicyAlgorithm._setup_learn``, ``_sample_action``, ``collect_rollouts``) keeps one
``VectorizedActionNoise`` process per VecEnv column, draws every column's at every step (the
warm-up included) and resets column ``idx``'s right after the step that ended its episode. The
collectors keep one process per (copy, agent) slot (``rlightning_pettingzoo._noise``): on
simple_spread (every agent stays; truncated every ``max_cycles`` steps), over the tests' VecEnv
of one column per agent, every replay-buffer array and the networks must equal ``learn()``'s.
With agents that join and leave (a Box-action schedule env), each agent's process must be drawn
when it acts and reset exactly when its episode ends: checked against a reference replayed from
the env's log with copies of the noise class.
"""

from __future__ import annotations

import copy as copy_module
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from rlightning_test_support import sibling
from stable_baselines3 import DDPG, SAC, TD3
from stable_baselines3.common.noise import (
    ActionNoise,
    NormalActionNoise,
    OrnsteinUhlenbeckActionNoise,
)
from stable_baselines3.common.vec_env import DummyVecEnv

from pettingzoo import ParallelEnv
from rlightning_pettingzoo import GroupReplayCollector, SharedReplayCollector
from rlightning_sb3 import finish_training, start_training

PARITY = sibling(__file__, "test_collector_parity.py")
AgentsVecEnv, AgentSlot = PARITY.AgentsVecEnv, PARITY.AgentSlot

NOISES: dict[str, Any] = {
    "normal": lambda dim: NormalActionNoise(np.zeros(dim), 0.3 * np.ones(dim)),
    "ou": lambda dim: OrnsteinUhlenbeckActionNoise(np.zeros(dim), 0.3 * np.ones(dim), dt=0.5),
}


def _collector(kind: str, model: Any, make: Any, n_copies: int) -> Any:
    seeds = list(range(n_copies))
    if kind == "shared":
        return SharedReplayCollector(model, [make] * n_copies, seeds=seeds)
    return GroupReplayCollector(
        {"all": model}, [make] * n_copies, group_of=lambda agent: "all", seeds=seeds
    )


@pytest.mark.parametrize("kind", ["shared", "group"])
@pytest.mark.parametrize(
    ("algorithm", "noise"),
    [(TD3, "normal"), (TD3, "ou"), (DDPG, "ou"), (SAC, "normal")],
    ids=["TD3-normal", "TD3-ou", "DDPG-ou", "SAC-normal"],
)
def test_replay_buffer_with_noise_equals_learn(
    simple_spread: ModuleType, algorithm: type[Any], noise: str, kind: str
) -> None:
    def make() -> Any:
        return simple_spread.parallel_env(max_cycles=5, continuous_actions=True)

    n_copies, total = 2, 6 * 24  # 24 steps of 6 columns: 4 truncations per copy, 6 rollouts
    kwargs: dict[str, Any] = {
        "learning_starts": 30,  # the warm-up draws noise too (_sample_action)
        "train_freq": 4,
        "batch_size": 16,
        "buffer_size": 1000,
        "seed": 0,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [16]},
    }
    venv = AgentsVecEnv(make, n_copies)
    reference = algorithm("MlpPolicy", venv, action_noise=NOISES[noise](5), **kwargs)
    reference.learn(total_timesteps=total)

    spaces_ = make()
    obs_space, act_space = spaces_.observation_space("agent_0"), spaces_.action_space("agent_0")
    slots = DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * venv.num_envs)
    model = algorithm("MlpPolicy", slots, action_noise=NOISES[noise](5), **kwargs)
    collector = _collector(kind, model, make, n_copies)
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
    assert theirs.timeouts[: theirs.pos].sum() == 4 * venv.num_envs  # episode ends inside
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name), err_msg=name)
    for (key, mine), (_, ref) in zip(
        model.policy.state_dict().items(), reference.policy.state_dict().items(), strict=True
    ):
        assert th.equal(mine, ref), key
    # the model keeps its own noise (learn() resumes with it); the collector's processes are
    # SB3's, state for state
    theirs_noise: Any = reference.action_noise
    mine_noise: Any = (collector._noise if kind == "shared" else collector._noises["all"]).noise
    for a, b in zip(mine_noise.noises, theirs_noise.noises, strict=True):
        if isinstance(b, OrnsteinUhlenbeckActionNoise):
            np.testing.assert_array_equal(a.noise_prev, b.noise_prev)


def _two_runs(
    kind: str, make: Any, n_copies: int, kwargs: dict[str, Any], runs: list[tuple[int, bool]]
) -> tuple[Any, Any]:
    """A TD3 (OU noise) filled by ``kind``'s collector over ``runs`` of ``(total_timesteps,
    reset_num_timesteps)``: ``start_training``, ``learn()``'s loop, ``finish_training`` each."""
    spaces_ = make()
    obs_space, act_space = spaces_.observation_space("agent_0"), spaces_.action_space("agent_0")
    n_columns = n_copies * len(spaces_.possible_agents)
    slots = DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * n_columns)
    model = TD3("MlpPolicy", slots, action_noise=NOISES["ou"](5), **kwargs)
    collector = _collector(kind, model, make, n_copies)
    for total, reset in runs:
        start_training(model, total, reset_num_timesteps=reset)
        while model.num_timesteps < model._total_timesteps:  # learn()'s loop
            collector.collect()
            if model.num_timesteps > model.learning_starts:
                model.train(gradient_steps=model.gradient_steps, batch_size=model.batch_size)
        finish_training(model)
    return model, collector


@pytest.mark.parametrize("kind", ["shared", "group"])
@pytest.mark.parametrize("reset_num_timesteps", [True, False], ids=["reset", "continue"])
def test_a_new_start_training_resets_the_noise_as_a_new_learn_does(
    simple_spread: ModuleType, kind: str, reset_num_timesteps: bool, monkeypatch: Any
) -> None:
    """Two ``learn()`` calls (``_setup_learn`` resets every noise process at the second, also
    with ``reset_num_timesteps=False``) == two ``start_training`` + ``collect()`` runs: every
    replay-buffer array, the counters, the networks and the OU states. The first run ends
    mid-episode (copy step 12, episodes of 5), so the processes are far from their initial
    noise there; skipping the collectors' reset (``SlotNoise.start_run``) changes the buffer."""
    from rlightning_pettingzoo._noise import SlotNoise

    def make() -> Any:
        return simple_spread.parallel_env(max_cycles=5, continuous_actions=True)

    n_copies, first, second = 2, 6 * 12, 6 * 8  # 3 rollouts, then 2 (6 columns, train_freq 4)
    kwargs: dict[str, Any] = {
        "learning_starts": 30,  # with reset_num_timesteps: a second warm-up
        "train_freq": 4,
        "batch_size": 16,
        "buffer_size": 1000,
        "seed": 0,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [16]},
    }
    # SB3's own VecEnv of the agents: the second learn(reset_num_timesteps=True) resets it
    # (unseeded), as the collectors reset their copies at a resetting run (test_run_reset.py)
    venv = AgentsVecEnv(make, n_copies)
    reference = TD3("MlpPolicy", venv, action_noise=NOISES["ou"](5), **kwargs)
    reference.learn(total_timesteps=first)
    theirs_noise: Any = reference.action_noise
    assert all(abs(p.noise_prev).max() > 0.05 for p in theirs_noise.noises)  # state to reset
    reference.learn(total_timesteps=second, reset_num_timesteps=reset_num_timesteps)

    runs = [(first, True), (second, reset_num_timesteps)]
    model, collector = _two_runs(kind, make, n_copies, kwargs, runs)
    assert model.num_timesteps == reference.num_timesteps
    assert model.num_timesteps == second + (0 if reset_num_timesteps else first)
    assert model._n_updates == reference._n_updates > 0
    ours, theirs = model.replay_buffer, reference.replay_buffer
    assert ours.pos == theirs.pos == (first + second) // venv.num_envs
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name), err_msg=name)
    for (key, mine), (_, ref) in zip(
        model.policy.state_dict().items(), reference.policy.state_dict().items(), strict=True
    ):
        assert th.equal(mine, ref), key
    processes = collector.noise_processes if kind == "shared" else collector.noise_processes("all")
    for a, b in zip(processes.noises, theirs_noise.noises, strict=True):
        np.testing.assert_array_equal(a.noise_prev, b.noise_prev)
    if kind == "group":
        with pytest.raises(KeyError, match=r"no group 'nope': the groups are \['all'\]"):
            collector.noise_processes("nope")

    # the mutation: without the reset at the second run, the second run's actions differ
    monkeypatch.setattr(SlotNoise, "start_run", lambda self, run_id: False)
    unreset, _ = _two_runs(kind, make, n_copies, kwargs, runs)
    rows = slice(first // venv.num_envs, theirs.pos)
    np.testing.assert_array_equal(
        unreset.replay_buffer.actions[: rows.start], theirs.actions[: rows.start]
    )
    assert not np.array_equal(unreset.replay_buffer.actions[rows], theirs.actions[rows])


BOX = spaces.Box(-2.0, 2.0, (2,), np.float32)
OBS = spaces.Box(-100.0, 100.0, (4,), np.float32)


class BoxScheduleEnv(ParallelEnv[str, np.ndarray, np.ndarray]):
    """Agent ``a{k}`` joins at step ``join[k]`` and ends at ``leave[k]`` (``kind[k]``) every
    episode; Box actions. ``log[t]`` is ``{agent: (observation, end)}`` of the env's step
    ``t`` (since creation); an observation is ``[copy, episode, t, k]`` (unique)."""

    metadata: ClassVar[dict[str, Any]] = {"name": "box_schedule_v0"}

    def __init__(self, schedule: list[tuple[int, int, str]], copy: int) -> None:
        self.schedule = schedule
        self.possible_agents = [f"a{k}" for k in range(len(schedule))]
        self.copy, self.episode, self.count = copy, -1, 0
        self.log: dict[int, dict[str, tuple[Any, str | None]]] = {}

    def observation_space(self, agent: str) -> spaces.Space[Any]:
        return OBS

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return BOX

    def _obs(self, agent: str) -> np.ndarray:
        k = self.possible_agents.index(agent)
        return np.array([self.copy, self.episode, self.t, k], np.float32)

    def _joining(self) -> list[str]:
        pairs = zip(self.possible_agents, self.schedule, strict=True)
        return [a for a, (join, _, _) in pairs if join == self.t]

    def reset(self, seed: int | None = None, options: Any = None) -> Any:
        self.episode += 1
        self.t = 0
        self.agents = self._joining()
        self._last = {a: self._obs(a) for a in self.agents}
        return dict(self._last), {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> Any:
        assert set(actions) == set(self.agents)
        self.t += 1
        rewards, terms, truncs, obs, entry, staying = {}, {}, {}, {}, {}, []
        for a in self.agents:
            k = self.possible_agents.index(a)
            _, leave, kind = self.schedule[k]
            rewards[a] = float(np.sum(actions[a])) + 0.1 * k
            terms[a] = leave == self.t and kind == "terminated"
            truncs[a] = leave == self.t and kind == "truncated"
            obs[a] = self._obs(a)
            end = "terminated" if terms[a] else "truncated" if truncs[a] else None
            entry[a] = (self._last[a], end)
            if end is None:
                staying.append(a)
        self.log[self.count] = entry
        self.count += 1
        joining = self._joining()
        for a in joining:
            obs[a] = self._obs(a)
        self.agents = staying + joining
        self._last = obs
        return obs, rewards, terms, truncs, {a: {} for a in self.agents}


class BoxSlot(gym.Env[Any, Any]):
    """One agent's spaces (sizes the buffer; never stepped)."""

    observation_space = OBS
    action_space = BOX

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return np.zeros(4, np.float32), {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("never stepped")


SCHEDULES = [
    [(0, 6, "truncated"), (1, 3, "terminated"), (2, 5, "truncated")],
    [(0, 4, "terminated"), (0, 2, "truncated"), (3, 4, "truncated")],
]


def _reference_noise(
    groups: list[tuple[list[tuple[int, BoxScheduleEnv]], ActionNoise]],
    rounds: int,
    seed_state: Any,
) -> dict[tuple[int, int, str], np.ndarray]:
    """The noise each agent drew at each env step, ``(copy, step, agent) -> sample``.

    Per round, per group (``models`` order), each acting slot (copy, then possible_agents
    order) draws from its own reset deep copy of the base noise (numpy's global RNG, restored
    to ``seed_state``: SB3's draws); a slot's copy is reset after the step that ended its
    agent's episode.
    """
    np.random.set_state(seed_state)
    processes: dict[tuple[int, str], ActionNoise] = {}
    drawn: dict[tuple[int, int, str], np.ndarray] = {}
    for t in range(rounds):
        for members, base in groups:
            for c, env in members:
                for agent in env.possible_agents:
                    if agent in env.log[t]:
                        process = processes.get((c, agent))
                        if process is None:
                            process = processes[(c, agent)] = copy_module.deepcopy(base)
                            process.reset()
                        drawn[(c, t, agent)] = process()
        for members, _ in groups:
            for c, env in members:
                for agent, (_, end) in env.log[t].items():
                    if end is not None and (c, agent) in processes:
                        processes[(c, agent)].reset()
    return drawn


@pytest.mark.parametrize("kind", ["shared", "group"])
@pytest.mark.parametrize("noise", ["normal", "ou"])
def test_each_agents_process_is_drawn_when_it_acts_and_reset_when_its_episode_ends(
    noise: str, kind: str
) -> None:
    envs = [BoxScheduleEnv(SCHEDULES[c], c) for c in range(2)]
    makers = [lambda env=env: env for env in envs]
    kwargs: dict[str, Any] = {
        "learning_starts": 0,
        "train_freq": 2,
        "buffer_size": 500,
        "seed": 0,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [8]},
    }

    def build(n: int) -> Any:
        return TD3("MlpPolicy", DummyVecEnv([BoxSlot] * n), action_noise=NOISES[noise](2), **kwargs)

    if kind == "shared":
        models = {"all": build(2)}
        collector: Any = SharedReplayCollector(models["all"], makers)
        member = {"all": ["a0", "a1", "a2"]}
    else:
        models = {"even": build(2), "odd": build(1)}
        member = {"even": ["a0", "a2"], "odd": ["a1"]}
        group_of = {a: g for g, agents in member.items() for a in agents}
        collector = GroupReplayCollector(models, makers, group_of=group_of)
    for model in models.values():
        start_training(model, 10_000)
    state = np.random.get_state()
    for _ in range(24):  # several rollouts, several episodes of each copy
        collector.collect()
    rounds = envs[0].count
    assert rounds == envs[1].count and min(env.episode for env in envs) >= 3

    groups = []
    for group, agents in member.items():
        views = []
        for c, env in enumerate(envs):
            view = copy_module.copy(env)
            view.possible_agents = [a for a in env.possible_agents if a in agents]
            views.append((c, view))
        base: Any = models[group].action_noise
        groups.append((views, copy_module.deepcopy(getattr(base, "base_noise", base))))
    drawn = _reference_noise(groups, rounds, state)
    where = {
        envs[c].log[t][agent][0].tobytes(): (c, t, agent)
        for c in range(2)
        for t in range(rounds)
        for agent in envs[c].log[t]
    }
    checked = 0
    for group, model in models.items():
        buffer = model.replay_buffer
        observations = buffer.observations[: buffer.pos].reshape(-1, 4)
        actions = buffer.actions[: buffer.pos].reshape(-1, 2)
        unscaled, _ = model.predict(observations, deterministic=True)
        for obs, action, policy in zip(observations, actions, unscaled, strict=True):
            c, t, agent = where[obs.tobytes()]
            assert agent in member[group]
            expected = np.clip(model.policy.scale_action(policy) + drawn[(c, t, agent)], -1, 1)
            np.testing.assert_allclose(action, expected, rtol=0, atol=1e-5, err_msg=str((c, t)))
            checked += 1
    assert checked >= 30
    assert any(abs(v).max() > 0.2 for v in drawn.values())


def test_a_model_used_by_a_collector_is_freed_once_dropped(tmp_path: Path) -> None:
    """The adapter cache (``_sb3.adapter_for``) must not keep a model alive (self-play runs make
    many frozen opponent copies): a weakref to a model built, used by a collector with its
    noise, and dropped dies at ``gc.collect()``. The cached adapter does not get in the way of
    SB3's ``save``/``load`` (the loaded model gets an adapter of its own)."""
    import gc
    import weakref

    envs = [BoxScheduleEnv(SCHEDULES[0], 0)]
    model = TD3(
        "MlpPolicy",
        DummyVecEnv([BoxSlot] * 2),
        action_noise=NOISES["ou"](2),
        learning_starts=0,
        train_freq=2,
        buffer_size=100,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )
    collector = SharedReplayCollector(model, [lambda: envs[0]])
    start_training(model, 1000)
    collector.collect()
    finish_training(model)
    model.save(tmp_path / "td3")
    loaded = TD3.load(tmp_path / "td3", device="cpu")
    from rlightning_pettingzoo._sb3 import adapter_for

    assert adapter_for(loaded) is adapter_for(loaded) is not adapter_for(model)
    assert adapter_for(copy_module.deepcopy(loaded)) is not adapter_for(loaded)
    ref = weakref.ref(model)
    del model, collector
    gc.collect()
    assert ref() is None


def test_an_agent_outside_possible_agents_has_no_noise_process_and_is_named() -> None:
    class Stray(BoxScheduleEnv):
        def _obs(self, agent: str) -> np.ndarray:
            k = self.possible_agents.index(agent) if agent in self.possible_agents else 9
            return np.array([self.copy, self.episode, self.t, k], np.float32)

        def _joining(self) -> list[str]:
            return ["stray", *super()._joining()] if self.t == 0 else super()._joining()

    env = Stray([(0, 3, "truncated")], 0)
    model = TD3(
        "MlpPolicy",
        DummyVecEnv([BoxSlot] * 2),
        action_noise=NOISES["normal"](2),
        learning_starts=0,
        train_freq=2,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )
    collector = SharedReplayCollector(model, [lambda: env])
    start_training(model, 1000)
    own = model.action_noise
    with pytest.raises(
        ValueError, match=r"agent 'stray' of .* \(copy 0\) is not in possible_agents"
    ):
        collector.collect()
    assert model.action_noise is own  # restored
