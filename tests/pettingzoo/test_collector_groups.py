"""GroupRolloutCollector and GroupReplayCollector: one SB3 model per group of agents.

Differential (simple_adversary: the adversary observes 8 numbers, the good agents 10; every agent
lives until all are truncated): each group's buffer must equal, array for array, what SB3's own
``PPO.learn()`` collects over a VecEnv with one slot per agent *of that group only*
(``GroupVecEnv``: the parity test's ``AgentsVecEnv`` restricted to the group's agents). The
other group's agents are acted by their own model inside that VecEnv, in the order the collector
acts (one batched forward per group, groups in ``models`` order), with the weights it had in the
collector at that rollout; the env is stepped with every agent's action, in ``possible_agents``
order. Two rollouts with a ``train()`` in between (each ``train()``'s minibatch order fixed by
seeding numpy first, in both runs). Also a PPO per agent on simple_spread, and a good group whose
buffer is full first (its later steps dropped; the adversary's buffers are still ``learn()``'s).

Schedules (``collector_envs.ScheduleEnv``, agents that join, die, wait and are truncated) with
two groups: every row of a group's buffer is a logged acting step of one of its agents, no row
of another group's or of an absent agent; advantages and returns equal SB3's GAE on each
agent's logged trajectory (the schedule test's ``reference_gae``).
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
from stable_baselines3 import A2C, DQN, PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.utils import obs_as_tensor
from stable_baselines3.common.vec_env import DummyVecEnv, VecEnv

from rlightning_pettingzoo import GroupReplayCollector, GroupRolloutCollector
from rlightning_sb3 import finish_training, start_training

ENVS = sibling(__file__, "collector_envs.py")
PARITY = sibling(__file__, "test_collector_parity.py")
SCHEDULES = sibling(__file__, "test_collector_schedules.py")
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
            if isinstance(model, OffPolicyAlgorithm):  # _sample_action before learning_starts
                actions = np.array([model.action_space.sample() for _ in range(len(batch))])
            else:
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


SPREAD_PER_AGENT = {a: [a] for a in ("agent_0", "agent_1", "agent_2")}


@pytest.mark.parametrize(
    ("env_name", "groups", "algorithm", "short"),
    [
        ("simple_adversary", GROUPS, PPO, None),
        ("simple_adversary", GROUPS, A2C, None),
        ("simple_spread", SPREAD_PER_AGENT, PPO, None),  # a policy per agent
        # the good agents' buffer (4 rows) is full after 4 of the adversary's 8 rounds
        ("simple_adversary", GROUPS, PPO, "good"),
    ],
    ids=["adversary-good-PPO", "adversary-good-A2C", "spread-per-agent-PPO", "good-fills-first"],
)
def test_each_group_buffer_equals_learn_over_a_vec_env_of_its_agents(
    request: pytest.FixtureRequest,
    env_name: str,
    groups: dict[str, list[str]],
    algorithm: type[Any],
    short: str | None,
) -> None:
    module = request.getfixturevalue(env_name)
    group_of = {agent: group for group, agents in groups.items() for agent in agents}

    def make() -> Any:
        return module.parallel_env(max_cycles=5, continuous_actions=False)

    n_copies, rollouts = 2, 2
    n_steps = {g: 4 if g == short else 8 for g in groups}
    kwargs: dict[str, Any] = {
        "device": "cpu",
        "policy_kwargs": {"net_arch": [16]},
    }
    if algorithm is PPO:
        kwargs.update(n_epochs=1)
    order = list(groups)  # the collector's group order
    seeds = {g: k for k, g in enumerate(order)}
    columns = {g: n_copies * len(groups[g]) for g in order}
    spaces = make()

    def build(group: str, env: Any) -> Any:
        extra = {"batch_size": n_steps[group] * columns[group]} if algorithm is PPO else {}
        return algorithm(
            "MlpPolicy", env, seed=seeds[group], n_steps=n_steps[group], **kwargs, **extra
        )

    # the collector, both groups trained
    models = {g: build(g, _slots(spaces, groups[g][0], columns[g])) for g in order}
    for g, model in models.items():
        start_training(model, rollouts * n_steps[g] * columns[g])
    collector = GroupRolloutCollector(
        models, [make] * n_copies, group_of=group_of, seeds=list(range(n_copies))
    )
    ours: dict[str, list[dict[str, np.ndarray]]] = {g: [] for g in order}
    weights: dict[str, list[dict[str, Any]]] = {g: [] for g in order}
    for k in range(rollouts):
        for g, model in models.items():
            weights[g].append({n: t.clone() for n, t in model.policy.state_dict().items()})
        segments = collector.collect()
        # a full group's agents act on, unstored, until the other group is full
        dropped = {g: (8 - n_steps[g]) * columns[g] for g in order}
        assert collector.group_dropped == dropped
        assert collector.dropped == sum(dropped.values())
        for g, model in models.items():
            buf = model.rollout_buffer
            ours[g].append({name: getattr(buf, name).copy() for name in FIELDS})
            # one agent per column, a truncation inside each column
            assert {s.agent_id for s in segments[g]} == set(groups[g])
            ends = {s.end for s in segments[g]}
            assert ends == {"truncated", "cut"} if short is None else ends <= {"truncated", "cut"}
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
                others = [(None, groups[o], order.index(o) < at) for o in order if o != learner]
                venv = GroupVecEnv(make, n_copies, groups[g], others, n_steps[g])
                built[g] = build(g, venv)
            else:
                built[g] = build(g, _slots(spaces, groups[g][0], columns[g]))
        assert venv is not None
        venv.others = [(built[o], groups[o], order.index(o) < at) for o in order if o != learner]
        venv.weights = [[weights[o][k] for o in order if o != learner] for k in range(rollouts)]
        reference = Reference(venv)
        built[learner].learn(
            total_timesteps=rollouts * n_steps[learner] * columns[learner], callback=reference
        )
        assert built[learner].num_timesteps == models[learner].num_timesteps
        assert len(reference.rollouts) == rollouts
        # a group that dropped steps starts its next rollout later than learn() would: only
        # its first rollout is learn()'s
        compared = 1 if learner == short else rollouts
        for k in range(compared):
            for name in FIELDS:
                np.testing.assert_array_equal(
                    ours[learner][k][name],
                    reference.rollouts[k][name],
                    err_msg=f"group {learner} rollout {k} {name}",
                )
        if learner == short:
            continue
        for (key, mine), (_, ref) in zip(
            models[learner].policy.state_dict().items(),
            built[learner].policy.state_dict().items(),
            strict=True,
        ):
            assert th.equal(mine, ref), (learner, key)
    if env_name == "simple_adversary":  # each group's own observations (8 numbers vs 10)
        assert ours["adversary"][0]["observations"].shape == (8, 2, 8)
        assert ours["good"][0]["observations"].shape == (n_steps["good"], 4, 10)


def _two_groups(
    schedule: list[tuple[int, int, str]], waiting: frozenset[tuple[int, int]]
) -> tuple[list[tuple[int, int, str]], frozenset[tuple[int, int]]]:
    """Agent 1 lives as agent 0 does (so group "odd" always has an agent) and acts at its
    episode's first step; the others as drawn."""
    return [schedule[0], schedule[0], *schedule[1:]], waiting - {(1, 0)}


def _odd_even(agent: str) -> str:
    return "odd" if int(agent[1:]) % 2 else "even"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schedule=schedules(),
    waiting=waits(),
    n_copies=st.integers(1, 2),
    n_steps=st.integers(2, 4),
    n_columns=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    rollouts=st.integers(1, 2),
    kind=st.sampled_from(["PPO", "MaskablePPO", "mixed"]),
)
def test_each_group_buffer_holds_its_agents_own_trajectories_and_gae(
    schedule: list[tuple[int, int, str]],
    waiting: frozenset[tuple[int, int]],
    n_copies: int,
    n_steps: int,
    n_columns: tuple[int, int],
    rollouts: int,
    kind: str,
) -> None:
    from sb3_contrib import MaskablePPO

    schedule, waiting = _two_groups(schedule, waiting)
    th.manual_seed(0)
    algorithms = {
        "even": PPO if kind == "PPO" else MaskablePPO,
        "odd": MaskablePPO if kind == "MaskablePPO" else PPO,
    }
    models = {
        g: algorithms[g](
            "MlpPolicy",
            DummyVecEnv([ENVS.AgentSlot] * columns),
            n_steps=n_steps,
            batch_size=n_steps * columns,
            seed=k,
            device="cpu",
            policy_kwargs={"net_arch": [8]},
        )
        for k, (g, columns) in enumerate(zip(["even", "odd"], n_columns, strict=True))
    }
    partial = kind == "MaskablePPO"  # a PPO would draw actions the mask forbids
    envs = [ScheduleEnv(schedule, c, waiting, partial=partial) for c in range(n_copies)]
    collector = GroupRolloutCollector(models, [lambda e=env: e for env in envs], group_of=_odd_even)
    seen: set[tuple[int, str, int]] = set()
    for _ in range(rollouts):
        logged_before = [env.count for env in envs]
        segments = collector.collect(update_model=False)
        for group, model in models.items():
            buf = model.rollout_buffer
            rows = 0
            for seg in segments[group]:
                assert _odd_even(seg.agent_id) == group  # no other group's agent
                env = envs[seg.env_index]
                obs, rews, actions, masks = [], [], [], []
                for t in seg.env_steps:
                    assert t >= logged_before[seg.env_index]
                    entry = env.log[t][seg.agent_id]  # live at that step ...
                    assert entry[1] is not None  # ... and acted
                    key = (seg.env_index, seg.agent_id, t)
                    assert key not in seen
                    seen.add(key)
                    reward, last = span(env, seg.agent_id, t, env.count)
                    obs.append(entry[0])
                    actions.append(entry[1])
                    masks.append(entry[5].astype(bool))
                    rews.append(reward)
                rows += seg.stop_row - seg.start_row
                cells, col = slice(seg.start_row, seg.stop_row), seg.column
                np.testing.assert_array_equal(buf.observations[cells, col], np.stack(obs))
                np.testing.assert_array_equal(buf.actions[cells, col, 0], actions)
                if algorithms[group] is MaskablePPO:
                    np.testing.assert_array_equal(buf.action_masks[cells, col], np.stack(masks))
                assert seg.end == (last[3] or "cut")
                values = buf.values[cells, col].astype(np.float64)
                adv, ret = reference_gae(model, rews, values, seg.end, last[4])
                np.testing.assert_allclose(buf.advantages[cells, col], adv, rtol=1e-5, atol=1e-5)
                np.testing.assert_allclose(buf.returns[cells, col], ret, rtol=1e-5, atol=1e-5)
                if seg.start_row > 0:
                    assert buf.episode_starts[seg.start_row, col] == 1.0
                assert not buf.episode_starts[seg.start_row + 1 : seg.stop_row, col].any()
            assert rows == n_steps * n_columns[group == "odd"]
            # every step a group's agent acted in this rollout is in its buffer, or dropped
            acted = sum(
                e[1] is not None and _odd_even(agent) == group
                for c, env in enumerate(envs)
                for t in range(logged_before[c], env.count)
                for agent, e in env.log[t].items()
            )
            assert acted == rows + collector.group_dropped[group]
        assert collector.dropped == sum(collector.group_dropped.values())
        event(f"dropped: {sorted(g for g, n in collector.group_dropped.items() if n)}")
        event(f"kind: {kind}")


def test_refuses_bad_groups_and_models(simple_adversary: ModuleType) -> None:
    def make() -> Any:
        return simple_adversary.parallel_env(max_cycles=5, continuous_actions=False)

    spaces = make()

    def ppo(agent: str, n: int = 1) -> Any:
        return PPO("MlpPolicy", _slots(spaces, agent, n), n_steps=4, batch_size=4, device="cpu")

    models = {"adversary": ppo("adversary_0"), "good": ppo("agent_0", 2)}
    # an agent without a group
    with pytest.raises(ValueError, match=r"agent 'agent_1' of simple_adversary_v3 .* no group"):
        GroupRolloutCollector(
            models, [make], group_of={"adversary_0": "adversary", "agent_0": "good"}
        )
    with pytest.raises(ValueError, match=r"the group 'bad', which is not a group of models"):
        GroupRolloutCollector(models, [make], group_of=lambda a: "bad")
    with pytest.raises(ValueError, match=r"group\(s\) \['spare'\] of models have no agent"):
        GroupRolloutCollector({**models, "spare": ppo("agent_0")}, [make], group_of=GROUP_OF)
    # a group whose agents do not share spaces (the adversary observes 8 numbers, agents 10)
    collector = GroupRolloutCollector({"all": ppo("agent_0", 3)}, [make], group_of=lambda a: "all")
    with pytest.raises(
        ValueError,
        match=r"agent 'agent_0' of simple_adversary_v3 \(copy 0\) is in group 'all', whose "
        r"agents observe Box\(.*\(8,\).* \(as agent 'adversary_0'\), but it observes "
        r"Box\(.*\(10,\)",
    ):
        collector.collect(update_model=False)
    # a group's model that does not fit its agents
    wrong = {"adversary": ppo("agent_0"), "good": ppo("agent_0", 2)}
    collector = GroupRolloutCollector(wrong, [make], group_of=GROUP_OF)
    with pytest.raises(ValueError, match=r"group 'adversary': .*adversary_0"):
        collector.collect(update_model=False)
    # models that are not the right kind
    dqn = DQN("MlpPolicy", _slots(spaces, "agent_0", 2), device="cpu")
    with pytest.raises(TypeError, match=r"on-policy SB3 model .* got DQN for group 'good'"):
        GroupRolloutCollector({**models, "good": dqn}, [make], group_of=GROUP_OF)
    with pytest.raises(TypeError, match=r"off-policy SB3 model .* got PPO for group 'adversary'"):
        GroupReplayCollector({**models, "good": dqn}, [make], group_of=GROUP_OF)
    with pytest.raises(ValueError, match="at least one group"):
        GroupRolloutCollector({}, [make], group_of=GROUP_OF)


def test_gives_up_when_a_groups_agents_never_act(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlightning_pettingzoo import groups

    monkeypatch.setattr(groups, "_MAX_IDLE_ROUNDS", 50)
    models = {
        g: PPO("MlpPolicy", DummyVecEnv([ENVS.AgentSlot]), n_steps=2, batch_size=2, seed=0)
        for g in ("even", "odd")
    }
    # a1 waits at every step of its 3-step episodes; a0 acts
    env = ScheduleEnv(
        [(0, 3, "truncated"), (0, 3, "truncated")], 0, frozenset({(1, 0), (1, 1), (1, 2)})
    )
    collector = GroupRolloutCollector(models, [lambda: env], group_of=_odd_even)
    with pytest.raises(RuntimeError, match=r"no agent of group\(s\) \['odd'\]"):
        collector.collect(update_model=False)
    assert all(e["a1"][1] is None for e in env.log.values())  # it only ever waited


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schedule=schedules(),
    waiting=waits(),
    n_copies=st.integers(1, 2),
    n_columns=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    train_freq=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    rollouts=st.integers(1, 3),
)
def test_each_dqn_group_replay_buffer_holds_its_agents_complete_transitions(
    schedule: list[tuple[int, int, str]],
    waiting: frozenset[tuple[int, int]],
    n_copies: int,
    n_columns: tuple[int, int],
    train_freq: tuple[int, int],
    rollouts: int,
) -> None:
    schedule, waiting = _two_groups(schedule, waiting)
    models = {
        g: DQN(
            "MlpPolicy",
            DummyVecEnv([ENVS.AgentSlot] * n_columns[k]),
            learning_starts=0,
            train_freq=train_freq[k],
            buffer_size=1000,
            seed=k,
            device="cpu",
            policy_kwargs={"net_arch": [8]},
        )
        for k, g in enumerate(["even", "odd"])
    }
    envs = [ScheduleEnv(schedule, c, waiting) for c in range(n_copies)]
    collector = GroupReplayCollector(models, [lambda e=env: e for env in envs], group_of=_odd_even)
    for model in models.values():
        start_training(model, 10**6)
    stored = dict.fromkeys(models, 0)
    for _ in range(rollouts):
        for g, n in collector.collect().items():
            stored[g] += n
    steps: dict[tuple[int, ...], tuple[Any, str, int]] = {}
    for env in envs:
        for u, entry in env.log.items():
            for agent, e in entry.items():
                if e[1] is not None:
                    steps[(*tuple(e[0][:3]), int(e[0][3]))] = (env, agent, u)
    seen = set()
    for k, (group, model) in enumerate(models.items()):
        finish_training(model)
        buf = model.replay_buffer
        # each rollout is train_freq rows of n_envs agent-steps of the group's agents
        assert stored[group] == buf.pos * n_columns[k] == model.num_timesteps
        assert buf.pos == rollouts * train_freq[k]
        for row in range(buf.pos):
            for col in range(n_columns[k]):
                observation = buf.observations[row, col]
                key = (*tuple(observation[:3]), int(observation[3]))
                assert key in steps and key not in seen  # a logged acting step, stored once
                seen.add(key)
                env, agent, u = steps[key]
                assert _odd_even(agent) == group
                reward, last = span(env, agent, u, env.count)
                assert buf.actions[row, col, 0] == env.log[u][agent][1]
                assert buf.rewards[row, col] == np.float32(reward)
                np.testing.assert_array_equal(buf.next_observations[row, col], last[4])
                assert buf.dones[row, col] == (last[3] is not None)
                assert buf.timeouts[row, col] == (last[3] == "truncated")


def test_each_model_has_its_own_callback_logger_and_agents_episodes() -> None:
    from stable_baselines3.common.logger import Logger

    # a0 ("even") acts 3 steps an episode (truncated); a1 ("odd") joins at 1, acts 2 steps and
    # terminates at 3: two episodes fill both buffers (6 and 4 cells), nothing dropped
    env = ScheduleEnv([(0, 3, "truncated"), (1, 3, "terminated")], 0)
    n_steps = {"even": 6, "odd": 4}
    models = {
        g: PPO("MlpPolicy", DummyVecEnv([ENVS.AgentSlot]), n_steps=n, batch_size=n, seed=0)
        for g, n in n_steps.items()
    }
    captures = {g: SCHEDULES.Capture() for g in models}
    callbacks = {g: SCHEDULES.Counting() for g in models}
    for g, model in models.items():
        model.set_logger(Logger(None, [captures[g]]))
        start_training(model, 2 * n_steps[g], callback=callbacks[g])
    collector = GroupRolloutCollector(models, [lambda: env], group_of=_odd_even)
    for _ in range(2):
        collector.collect()
        assert collector.group_dropped == {"even": 0, "odd": 0}
        for model in models.values():
            model.train()
    for model in models.values():
        finish_training(model)
    returns: dict[str, list[float]] = {"a0": [], "a1": []}
    totals: dict[str, float] = {}
    for t in sorted(env.log):
        for agent, entry in env.log[t].items():
            totals[agent] = totals.get(agent, 0.0) + entry[2]
            if entry[3] is not None:
                returns[agent].append(totals.pop(agent))
    for g, agent, other in (("even", "a0", "a1"), ("odd", "a1", "a0")):
        model = models[g]
        assert model.num_timesteps == 2 * n_steps[g]  # its own agents' steps only
        steps = [f"step {k}" for k in range(1, n_steps[g] + 1)]
        later = [f"step {n_steps[g] + k}" for k in range(1, n_steps[g] + 1)]
        expected = ["rollout_start", *steps, "rollout_end", "rollout_start", *later]
        assert callbacks[g].calls == [*expected, "rollout_end"]
        dump = captures[g].dumps[-1]
        assert dump["rollout/ep_rew_mean"] == pytest.approx(np.mean(returns[agent]))
        assert dump[f"rollout/ep_rew_mean/{agent}"] == pytest.approx(np.mean(returns[agent]))
        assert f"rollout/ep_rew_mean/{other}" not in dump
        assert dump["time/iterations"] == 2


class _ActFirst(BaseCallback):
    """The groups acting before the learner act on the first observations (off-policy: one
    rollout of ``learn()`` is not one of the VecEnv's ``n_steps``)."""

    def __init__(self, venv: GroupVecEnv) -> None:
        super().__init__()
        self.venv = venv

    def _on_training_start(self) -> None:
        self.venv._act_others(before=True)

    def _on_step(self) -> bool:
        return True


def test_each_dqn_group_replay_buffer_equals_learn_over_a_vec_env_of_its_agents(
    simple_adversary: ModuleType,
) -> None:
    # before learning_starts every action is the model's own action_space.sample() (SB3's
    # _sample_action), so each group's draws are its own: the cells, their order and the
    # counters must be DQN.learn()'s over a VecEnv of the group's agents
    def make() -> Any:
        return simple_adversary.parallel_env(max_cycles=5, continuous_actions=False)

    n_copies, rollouts, train_freq = 2, 6, 4
    order = list(GROUPS)
    columns = {g: n_copies * len(GROUPS[g]) for g in order}
    total = {g: rollouts * train_freq * columns[g] for g in order}
    spaces = make()

    def build(group: str, env: Any) -> Any:
        return DQN(
            "MlpPolicy",
            env,
            learning_starts=10**6,
            train_freq=train_freq,
            buffer_size=1000,
            seed=order.index(group),
            device="cpu",
            policy_kwargs={"net_arch": [16]},
        )

    models = {g: build(g, _slots(spaces, GROUPS[g][0], columns[g])) for g in order}
    collector = GroupReplayCollector(
        models, [make] * n_copies, group_of=GROUP_OF, seeds=list(range(n_copies))
    )
    for g, model in models.items():
        start_training(model, total[g])
    for _ in range(rollouts):
        assert collector.collect() == {g: train_freq * columns[g] for g in order}
    for model in models.values():
        finish_training(model)
    for learner in order:
        at = order.index(learner)
        others = [(None, GROUPS[o], order.index(o) < at) for o in order if o != learner]
        venv = GroupVecEnv(make, n_copies, GROUPS[learner], others, rollouts * train_freq)
        built = {
            g: build(g, venv if g == learner else _slots(spaces, GROUPS[g][0], columns[g]))
            for g in order
        }
        venv.others = [(built[o], GROUPS[o], order.index(o) < at) for o in order if o != learner]
        built[learner].learn(total_timesteps=total[learner], callback=_ActFirst(venv))
        ours, theirs = models[learner], built[learner]
        assert ours.num_timesteps == theirs.num_timesteps == total[learner]
        assert ours.exploration_rate == theirs.exploration_rate
        assert ours.replay_buffer.pos == theirs.replay_buffer.pos == rollouts * train_freq
        for name in ("observations", "next_observations", "actions", "rewards", "dones"):
            np.testing.assert_array_equal(
                getattr(ours.replay_buffer, name),
                getattr(theirs.replay_buffer, name),
                err_msg=f"group {learner} {name}",
            )
        np.testing.assert_array_equal(ours.replay_buffer.timeouts, theirs.replay_buffer.timeouts)
