"""GroupRolloutCollector and GroupReplayCollector: one SB3 model per group of agents.

Differential (simple_adversary: the adversary observes 8 numbers, the good agents 10; every agent
lives until all are truncated): each group's buffer must equal, array for array, what SB3's own
``PPO.learn()`` collects over a VecEnv with one slot per agent *of that group only*
(``GroupVecEnv``: the parity test's ``AgentsVecEnv`` restricted to the group's agents). The
other group's agents are acted by their own model inside that VecEnv, in the order the collector
acts (one batched forward per group, groups in ``models`` order), with the weights it had in the
collector at that rollout; the env is stepped with every agent's action, in ``possible_agents``
order. Two rollouts with a ``train()`` in between (each ``train()``'s minibatch order fixed by
seeding numpy first, in both runs).

Schedules (``collector_envs.ScheduleEnv``, agents that join, die, wait and are truncated) with
two groups: every row of a group's buffer is a logged acting step of one of its agents, no row
of another group's or of an absent agent; advantages and returns equal SB3's GAE on each
agent's logged trajectory (the schedule test's ``reference_gae``).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch as th
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from stable_baselines3 import A2C, DQN, PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from rlightning_pettingzoo import GroupReplayCollector, GroupRolloutCollector
from rlightning_sb3 import finish_training, start_training


def _load(name: str, filename: str) -> ModuleType:
    """A module beside this file (the suite runs in importlib mode)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(filename))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


ENVS = _load("rlightning_pettingzoo_collector_envs", "collector_envs.py")
PARITY = _load("rlightning_pettingzoo_collector_parity", "test_collector_parity.py")
SCHEDULES = _load("rlightning_pettingzoo_collector_schedules", "test_collector_schedules.py")
AgentsVecEnv, AgentSlot, FIELDS = PARITY.AgentsVecEnv, PARITY.AgentSlot, PARITY.FIELDS
ScheduleEnv, span, schedules, waits = ENVS.ScheduleEnv, ENVS.span, ENVS.schedules, ENVS.waits
reference_gae = SCHEDULES.reference_gae

ADVERSARY = ["adversary_0"]
GOOD = ["agent_0", "agent_1"]
GROUPS = {"adversary": ADVERSARY, "good": GOOD}
GROUP_OF = {agent: group for group, agents in GROUPS.items() for agent in agents}


class _Merged:
    """A parallel env whose ``step`` adds the other groups' actions (``pending``), all in
    ``possible_agents`` order, and which remembers its last observations; ``agents`` are the
    live agents of the learner's group."""

    def __init__(self, env: Any, group: list[str]) -> None:
        self.env = env
        self.group = group
        self.possible_agents = list(env.possible_agents)
        self.pending: dict[str, Any] = {}
        self.last: dict[str, Any] = {}

    @property
    def agents(self) -> list[str]:
        return [a for a in self.env.agents if a in self.group]

    def observation_space(self, agent: str) -> Any:
        return self.env.observation_space(agent)

    def action_space(self, agent: str) -> Any:
        return self.env.action_space(agent)

    def reset(self, seed: int | None = None) -> Any:
        observations, infos = self.env.reset(seed=seed)
        self.last = observations
        return observations, infos

    def step(self, actions: dict[str, Any]) -> Any:
        merged = {**actions, **self.pending}
        out = self.env.step({a: merged[a] for a in self.possible_agents if a in merged})
        self.last = out[0]
        return out

    def close(self) -> None:
        self.env.close()


class GroupVecEnv(AgentsVecEnv):  # type: ignore[misc,valid-type]
    """``AgentsVecEnv`` over one group's agents; the other groups are acted by their models.

    ``others`` are ``(model, agents, before)`` in the collector's group order: a group
    ``before`` the learner acts (one batched forward over every copy) on each round's
    observations before the learner's forward (at each rollout's start, through
    ``begin_rollout``, and after each step but a rollout's last); one after it acts in
    ``step_async``, after the learner's forward.
    """

    def __init__(
        self, make_env: Any, n_copies: int, agents: list[str], others: list[Any], n_steps: int
    ) -> None:
        super().__init__(make_env, n_copies)
        self.envs = [_Merged(env, agents) for env in self.envs]
        self.agents = list(agents)
        first = self.envs[0]
        VecEnv.__init__(
            self,
            n_copies * len(agents),
            first.observation_space(agents[0]),
            first.action_space(agents[0]),
        )
        self.others = others
        self.n_steps = n_steps
        self.steps = 0
        self.weights: list[list[dict[str, Any]]] = []  # per rollout, per other: state_dict

    def _act_others(self, before: bool) -> None:
        for model, agents, is_before in self.others:
            if is_before != before:
                continue
            batch = np.stack([env.last[a] for env in self.envs for a in agents])
            with th.no_grad():
                actions, _, _ = model.policy(obs_as_tensor(batch, model.device))
            actions = actions.cpu().numpy()
            for c, env in enumerate(self.envs):
                for j, a in enumerate(agents):
                    env.pending[a] = actions[c * len(agents) + j]

    def begin_rollout(self, k: int) -> None:
        for (model, _, _), state in zip(self.others, self.weights[k], strict=True):
            model.policy.load_state_dict(state)
        self._act_others(before=True)

    def step_async(self, actions: np.ndarray) -> None:
        super().step_async(actions)
        self._act_others(before=False)

    def step_wait(self) -> Any:
        out = super().step_wait()
        self.steps += 1
        if self.steps % self.n_steps:
            self._act_others(before=True)
        return out


class Reference(BaseCallback):
    """Starts each rollout in the VecEnv, copies the buffer at its end, seeds the train()."""

    def __init__(self, venv: GroupVecEnv) -> None:
        super().__init__()
        self.venv = venv
        self.rollouts: list[dict[str, np.ndarray]] = []

    def _on_rollout_start(self) -> None:
        self.venv.begin_rollout(len(self.rollouts))

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        buf = self.model.rollout_buffer
        self.rollouts.append({name: getattr(buf, name).copy() for name in FIELDS})
        np.random.seed(len(self.rollouts))  # the next train()'s minibatches


def _slots(env: Any, agent: str, n: int) -> DummyVecEnv:
    obs_space, act_space = env.observation_space(agent), env.action_space(agent)
    return DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * n)


@pytest.mark.parametrize("algorithm", [PPO, A2C], ids=["PPO", "A2C"])
def test_each_group_buffer_equals_learn_over_a_vec_env_of_its_agents(
    simple_adversary: ModuleType, algorithm: type[Any]
) -> None:
    def make() -> Any:
        return simple_adversary.parallel_env(max_cycles=5, continuous_actions=False)

    n_copies, n_steps, rollouts = 2, 8, 2
    kwargs: dict[str, Any] = {
        "n_steps": n_steps,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [16]},
    }
    if algorithm is PPO:
        kwargs.update(n_epochs=1)
    order = list(GROUPS)  # the collector's group order
    seeds = {g: k for k, g in enumerate(order)}
    columns = {g: n_copies * len(GROUPS[g]) for g in order}
    spaces = make()

    def build(group: str, env: Any) -> Any:
        extra = {"batch_size": n_steps * columns[group]} if algorithm is PPO else {}
        return algorithm("MlpPolicy", env, seed=seeds[group], **kwargs, **extra)

    # the collector, both groups trained
    models = {g: build(g, _slots(spaces, GROUPS[g][0], columns[g])) for g in order}
    for g, model in models.items():
        start_training(model, rollouts * n_steps * columns[g])
    collector = GroupRolloutCollector(
        models, [make] * n_copies, group_of=GROUP_OF, seeds=list(range(n_copies))
    )
    ours: dict[str, list[dict[str, np.ndarray]]] = {g: [] for g in order}
    weights: dict[str, list[dict[str, Any]]] = {g: [] for g in order}
    for k in range(rollouts):
        for g, model in models.items():
            weights[g].append({n: t.clone() for n, t in model.policy.state_dict().items()})
        segments = collector.collect()
        assert collector.dropped == 0 and set(collector.group_dropped.values()) == {0}
        for g, model in models.items():
            buf = model.rollout_buffer
            ours[g].append({name: getattr(buf, name).copy() for name in FIELDS})
            # one agent per column, a truncation inside each column
            assert {s.agent_id for s in segments[g]} == set(GROUPS[g])
            assert {s.end for s in segments[g]} == {"truncated", "cut"}
            np.random.seed(k + 1)
            model.train()
    for model in models.values():
        finish_training(model)

    # the references: SB3's learn() for one group, the other acted by its own model
    for learner in order:
        at = order.index(learner)
        built: dict[str, Any] = {}
        venv: GroupVecEnv | None = None
        for g in order:  # built in the collector's order: the same seeds and RNG states
            if g == learner:
                others = [
                    (None, GROUPS[o], order.index(o) < at) for o in order if o != learner
                ]
                venv = GroupVecEnv(make, n_copies, GROUPS[g], others, n_steps)
                built[g] = build(g, venv)
            else:
                built[g] = build(g, _slots(spaces, GROUPS[g][0], columns[g]))
        assert venv is not None
        venv.others = [(built[o], GROUPS[o], order.index(o) < at) for o in order if o != learner]
        venv.weights = [
            [weights[o][k] for o in order if o != learner] for k in range(rollouts)
        ]
        reference = Reference(venv)
        built[learner].learn(total_timesteps=rollouts * n_steps * columns[learner],
                             callback=reference)
        assert built[learner].num_timesteps == models[learner].num_timesteps
        assert len(reference.rollouts) == rollouts
        for k in range(rollouts):
            for name in FIELDS:
                np.testing.assert_array_equal(
                    ours[learner][k][name],
                    reference.rollouts[k][name],
                    err_msg=f"group {learner} rollout {k} {name}",
                )
        for (key, mine), (_, ref) in zip(
            models[learner].policy.state_dict().items(),
            built[learner].policy.state_dict().items(),
            strict=True,
        ):
            assert th.equal(mine, ref), (learner, key)
    # each group's buffer holds its own agents' observations (8 numbers vs 10)
    assert ours["adversary"][0]["observations"].shape == (n_steps, 2, 8)
    assert ours["good"][0]["observations"].shape == (n_steps, 4, 10)
