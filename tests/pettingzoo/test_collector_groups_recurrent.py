"""GroupRolloutCollector with sb3-contrib's RecurrentPPO groups: one LSTM state per (copy, agent).

One group of every agent (``ScheduleEnv``: agents that join, die, wait and are truncated; a
buffer that ends mid-episode, so steps are dropped and agents change columns): the group's
RecurrentPPO buffer must equal, array for array and exactly (the same batches through the same
code), what :class:`SharedRolloutCollector` fills with the same model, seeds and torch seed,
the four LSTM state arrays included, over several collects with ``train()`` in between; and so
must the weights after each ``train()``, the segments, ``num_timesteps`` and the episodes.

On mpe2's simple_adversary (a RecurrentPPO adversary group, a PPO good group; every agent lives
until all are truncated) the RecurrentPPO group's buffer equals ``RecurrentPPO.learn()``'s over a
VecEnv of the adversaries only, the good agents acted by their own PPO inside it in the
collector's order (test_collector_groups' ``GroupVecEnv``), over two rollouts with ``train()``
between, the LSTM state arrays included (``allclose`` for the floats: learn()'s forward is
sb3-contrib's own, the collector's the adapter's), and so are the trained weights.

Two groups (a RecurrentPPO and a PPO, or two RecurrentPPOs of different LSTM sizes), each
against a reference of its own agents alone: every row of a group's buffer is a logged acting
step of one of its agents; a recurrent group's stored LSTM state at each row is the state its
LSTM reaches run along that agent's own logged trajectory alone (reset where the buffer's run
starts, and at each dropped step where the agent's trajectory starts), and sb3-contrib's own
training sequences (``RecurrentRolloutBuffer.get``) reproduce every stored log-prob and value;
a PPO group's advantages and returns are SB3's GAE on each agent's logged trajectory. And
mutations (states not reset where a trajectory starts) fail both proofs.
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
from stable_baselines3 import PPO
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import GroupRolloutCollector, SharedRolloutCollector
from rlightning_pettingzoo import groups as groups_module
from rlightning_sb3 import finish_training, start_training

ENVS = sibling(__file__, "collector_envs.py")
PARITY = sibling(__file__, "test_collector_parity.py")
SCHEDULES = sibling(__file__, "test_collector_schedules.py")
RECURRENT = sibling(__file__, "test_collector_recurrent.py")
GROUPED = sibling(__file__, "test_collector_groups.py")
FIELDS, STATES, lstm_step = PARITY.FIELDS, RECURRENT.STATES, RECURRENT._lstm_step
ScheduleEnv, span, schedules, waits = ENVS.ScheduleEnv, ENVS.span, ENVS.schedules, ENVS.waits
reference_gae = SCHEDULES.reference_gae
_odd_even, _two_groups = GROUPED._odd_even, GROUPED._two_groups
ALL = (*FIELDS, *STATES)

#: A schedule with every case: a0 lives 7 steps (truncated), a1 joins at 1 and is terminated at
#: 3, a2 joins at 2 and is truncated at 5; a1 waits at its episode step 2, a2 at 3 and 4.
SCHEDULE = [(0, 7, "truncated"), (1, 3, "terminated"), (2, 5, "truncated")]
WAITING = frozenset({(1, 2), (2, 3), (2, 4)})


def _recurrent(n_columns: int, n_steps: int, seed: int = 0, hidden: int = 4) -> Any:
    return RecurrentPPO(
        "MlpLstmPolicy",
        DummyVecEnv([ENVS.AgentSlot] * n_columns),
        n_steps=n_steps,
        batch_size=n_steps * n_columns,
        n_epochs=1,
        seed=seed,
        device="cpu",
        policy_kwargs={"net_arch": [8], "lstm_hidden_size": hidden},
    )


def _ppo(n_columns: int, n_steps: int, seed: int = 0) -> Any:
    return PPO(
        "MlpPolicy",
        DummyVecEnv([ENVS.AgentSlot] * n_columns),
        n_steps=n_steps,
        batch_size=n_steps * n_columns,
        n_epochs=1,
        seed=seed,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )


def _run(
    grouped: bool,
    schedule: list[tuple[int, int, str]],
    waiting: frozenset[tuple[int, int]],
    n_copies: int,
    n_columns: int,
    n_steps: int,
    rollouts: int,
) -> dict[str, Any]:
    """Train a RecurrentPPO over ``rollouts`` collects, by one group of every agent or shared."""
    model = _recurrent(n_columns, n_steps)
    start_training(model, rollouts * n_steps * n_columns)
    envs = [ScheduleEnv(schedule, c, waiting) for c in range(n_copies)]
    fns = [lambda e=env: e for env in envs]
    collector: Any = (
        GroupRolloutCollector({"all": model}, fns, group_of=lambda agent: "all")
        if grouped
        else SharedRolloutCollector(model, fns)
    )
    set_random_seed(1)  # the actions' draws, from here on the same in both runs
    buffers, segments, weights, dropped = [], [], [], []
    for k in range(rollouts):
        found = collector.collect()
        segments.append(found["all"] if grouped else found)
        dropped.append(collector.dropped)
        buffers.append({name: getattr(model.rollout_buffer, name).copy() for name in ALL})
        np.random.seed(k)  # the train()'s minibatches
        model.train()
        weights.append({n: t.clone() for n, t in model.policy.state_dict().items()})
    finish_training(model)
    return {
        "buffers": buffers,
        "segments": segments,
        "weights": weights,
        "dropped": dropped,
        "num_timesteps": model.num_timesteps,
        "episodes": [(e["r"], e["l"]) for e in model.ep_info_buffer],
        "log": [env.log for env in envs],
    }


def _check_one_group_equals_shared(
    schedule: list[tuple[int, int, str]],
    waiting: frozenset[tuple[int, int]],
    n_copies: int,
    n_columns: int,
    n_steps: int,
    rollouts: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    args = (schedule, waiting, n_copies, n_columns, n_steps, rollouts)
    group, shared = _run(True, *args), _run(False, *args)
    for k in range(rollouts):
        for name in ALL:
            np.testing.assert_array_equal(
                group["buffers"][k][name], shared["buffers"][k][name], err_msg=f"{k} {name}"
            )
        for key, value in shared["weights"][k].items():
            assert th.equal(group["weights"][k][key], value), (k, key)
    for key in ("segments", "dropped", "num_timesteps", "episodes"):
        assert group[key] == shared[key], key
    for mine, theirs in zip(group["log"], shared["log"], strict=True):  # the same actions
        assert mine.keys() == theirs.keys()
        for u, entry in theirs.items():
            assert {a: e[1] for a, e in mine[u].items()} == {a: e[1] for a, e in entry.items()}
    return group, shared


def test_one_group_of_every_agent_equals_the_shared_collector() -> None:
    # 3 columns of 7 rows over 2 copies: runs begin below row 0, agents change columns, the
    # rollouts end mid-episode (steps dropped) and the next carries the LSTM states on
    group, _ = _check_one_group_equals_shared(SCHEDULE, WAITING, 2, 3, 7, 3)
    assert sum(group["dropped"]) > 0
    starts = [b["episode_starts"] for b in group["buffers"]]
    assert any(s[1:].any() for s in starts)  # a run begins below row 0
    assert any(not s[0].all() for s in starts[1:])  # an agent continues at a rollout's row 0
    assert any(np.abs(b["hidden_states_pi"][0]).sum() > 0 for b in group["buffers"][1:])
    assert {s.end for seg in group["segments"] for s in seg} == {"terminated", "truncated", "cut"}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schedule=schedules(),
    waiting=waits(),
    n_copies=st.integers(1, 2),
    n_columns=st.integers(1, 3),
    n_steps=st.integers(2, 5),
    rollouts=st.integers(2, 3),
)
def test_one_group_equals_the_shared_collector_on_drawn_schedules(
    schedule: list[tuple[int, int, str]],
    waiting: frozenset[tuple[int, int]],
    n_copies: int,
    n_columns: int,
    n_steps: int,
    rollouts: int,
) -> None:
    group, _ = _check_one_group_equals_shared(
        schedule, waiting, n_copies, n_columns, n_steps, rollouts
    )
    event(f"dropped: {sum(group['dropped']) > 0}")


class _RecurrentReference(GROUPED.Reference):  # type: ignore[misc,name-defined]
    """test_collector_groups' ``Reference``, copying the LSTM state arrays too."""

    def _on_rollout_end(self) -> None:
        buf = self.model.rollout_buffer
        self.rollouts.append({name: getattr(buf, name).copy() for name in ALL})
        np.random.seed(len(self.rollouts))  # the next train()'s minibatches


def test_recurrent_group_equals_recurrent_ppo_learn_over_a_vec_env_of_its_agents(
    simple_adversary: ModuleType,
) -> None:
    def make() -> Any:
        return simple_adversary.parallel_env(max_cycles=5, continuous_actions=False)

    groups, order = GROUPED.GROUPS, ["adversary", "good"]  # the adversary acts first
    n_copies, n_steps, rollouts = 2, 8, 2
    columns = {g: n_copies * len(groups[g]) for g in order}
    spaces = make()
    kwargs: dict[str, Any] = {"n_steps": n_steps, "n_epochs": 1, "device": "cpu"}

    def build(group: str, env: Any) -> Any:
        extra = {"batch_size": n_steps * columns[group], "seed": order.index(group)}
        if group == "adversary":
            policy = {"net_arch": [16], "lstm_hidden_size": 8}
            return RecurrentPPO("MlpLstmPolicy", env, policy_kwargs=policy, **kwargs, **extra)
        return PPO("MlpPolicy", env, policy_kwargs={"net_arch": [16]}, **kwargs, **extra)

    models = {g: build(g, GROUPED._slots(spaces, groups[g][0], columns[g])) for g in order}
    for g, model in models.items():
        start_training(model, rollouts * n_steps * columns[g])
    collector = GroupRolloutCollector(
        models, [make] * n_copies, group_of=GROUPED.GROUP_OF, seeds=list(range(n_copies))
    )
    ours, good_weights = [], []
    for k in range(rollouts):
        good_weights.append({n: t.clone() for n, t in models["good"].policy.state_dict().items()})
        collector.collect()
        assert collector.dropped == 0
        ours.append(
            {name: getattr(models["adversary"].rollout_buffer, name).copy() for name in ALL}
        )
        for model in models.values():
            np.random.seed(k + 1)
            model.train()
    for model in models.values():
        finish_training(model)

    # the reference: RecurrentPPO.learn() for the adversaries, the good agents acted after them
    venv = GROUPED.GroupVecEnv(make, n_copies, groups["adversary"], [], n_steps)
    learner = build("adversary", venv)
    good = build("good", GROUPED._slots(spaces, groups["good"][0], columns["good"]))
    venv.others = [(good, groups["good"], False)]
    venv.weights = [[good_weights[k]] for k in range(rollouts)]
    reference = _RecurrentReference(venv)
    learner.learn(total_timesteps=rollouts * n_steps * columns["adversary"], callback=reference)
    assert learner.num_timesteps == models["adversary"].num_timesteps
    assert len(reference.rollouts) == rollouts
    for k in range(rollouts):
        RECURRENT._compare(ours[k], reference.rollouts[k], f"adversary rollout {k}")
    # rollout 1 goes on from rollout 0's states (the episode does not start at its row 0)
    assert not ours[1]["episode_starts"][0].any()
    assert np.abs(ours[1]["hidden_states_pi"][0]).sum() > 0
    for (key, mine), (_, ref) in zip(
        models["adversary"].policy.state_dict().items(),
        learner.policy.state_dict().items(),
        strict=True,
    ):
        th.testing.assert_close(mine, ref, rtol=1e-4, atol=1e-5, msg=key)


def _check_lstm_states(
    model: Any,
    envs: list[Any],
    group: str,
    stored: dict[tuple[int, str, int], tuple[bool, list[np.ndarray]]],
    hidden: int,
) -> int:
    """Each stored row's LSTM state against the group's LSTM run along its agent's own log."""
    zero = th.zeros((1, 1, hidden))
    checked = 0
    with th.no_grad():
        for c, env in enumerate(envs):
            for agent in env.possible_agents:
                if _odd_even(agent) != group:
                    continue
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
                        assert start or kept_in_episode  # an episode's first row starts a run
                        (h_pi, c_pi), (h_vf, c_vf) = state
                        for got, want in zip(states, (h_pi, c_pi, h_vf, c_vf), strict=True):
                            np.testing.assert_allclose(got, want[:, 0].numpy(), atol=1e-6)
                        kept_in_episode = True
                        checked += 1
                    else:  # dropped (its group full): reset as its trajectory's first step
                        start = not kept_in_episode
                    state = lstm_step(model.policy, observation, state, start)
    return checked


def _check_groups(
    kinds: dict[str, str],
    schedule: list[tuple[int, int, str]],
    waiting: frozenset[tuple[int, int]],
    n_copies: int,
    n_steps: dict[str, int],
    n_columns: dict[str, int],
    rollouts: int,
) -> dict[str, int]:
    """Two groups, each buffer against its own agents' logs.

    Returns the rows checked per recurrent group, and the last collect's drops (``dropped``).
    """
    hidden = {"even": 4, "odd": 6}  # two RecurrentPPOs: LSTMs of different sizes
    models = {
        g: _recurrent(n_columns[g], n_steps[g], k, hidden[g])
        if kind == "recurrent"
        else _ppo(n_columns[g], n_steps[g], k)
        for k, (g, kind) in enumerate(kinds.items())
    }
    envs = [ScheduleEnv(schedule, c, waiting) for c in range(n_copies)]
    collector = GroupRolloutCollector(models, [lambda e=env: e for env in envs], group_of=_odd_even)
    seen: set[tuple[int, str, int]] = set()
    stored: dict[str, dict[tuple[int, str, int], tuple[bool, list[np.ndarray]]]] = {
        g: {} for g in models
    }
    for _ in range(rollouts):  # the policies are not trained: one LSTM along each trajectory
        logged_before = [env.count for env in envs]
        segments = collector.collect(update_model=False)
        for group, model in models.items():
            buf = model.rollout_buffer
            recurrent = kinds[group] == "recurrent"
            rows = 0
            for seg in segments[group]:
                assert _odd_even(seg.agent_id) == group  # no other group's agent
                env = envs[seg.env_index]
                obs, rews, actions = [], [], []
                for row, t in zip(range(seg.start_row, seg.stop_row), seg.env_steps, strict=True):
                    assert t >= logged_before[seg.env_index]
                    entry = env.log[t][seg.agent_id]  # live at that step ...
                    assert entry[1] is not None  # ... and acted
                    key = (seg.env_index, seg.agent_id, t)
                    assert key not in seen
                    seen.add(key)
                    reward, last = span(env, seg.agent_id, t, env.count)
                    obs.append(entry[0])
                    actions.append(entry[1])
                    rews.append(reward)
                    if recurrent:
                        start = bool(buf.episode_starts[row, seg.column])
                        states = [getattr(buf, n)[row, :, seg.column].copy() for n in STATES]
                        stored[group][key] = (start, states)
                rows += seg.stop_row - seg.start_row
                cells, col = slice(seg.start_row, seg.stop_row), seg.column
                np.testing.assert_array_equal(buf.observations[cells, col], np.stack(obs))
                np.testing.assert_array_equal(buf.actions[cells, col, 0], actions)
                assert seg.end == (last[3] or "cut")
                if seg.start_row > 0:
                    assert buf.episode_starts[seg.start_row, col] == 1.0
                assert not buf.episode_starts[seg.start_row + 1 : seg.stop_row, col].any()
                if not recurrent:  # SB3's GAE on the agent's segment alone
                    values = buf.values[cells, col].astype(np.float64)
                    adv, ret = reference_gae(model, rews, values, seg.end, last[4])
                    np.testing.assert_allclose(
                        buf.advantages[cells, col], adv, rtol=1e-5, atol=1e-5
                    )
                    np.testing.assert_allclose(buf.returns[cells, col], ret, rtol=1e-5, atol=1e-5)
            assert rows == n_steps[group] * n_columns[group]
            if recurrent:
                # sb3-contrib's own sequences (RecurrentRolloutBuffer.get: the stored state at
                # each sequence start, reset where episode_starts) reproduce every stored
                # log-prob and value: each run is a sequence of its own agent
                with th.no_grad():
                    for data in buf.get(n_steps[group] * n_columns[group]):
                        values, log_prob, _ = model.policy.evaluate_actions(
                            data.observations,
                            data.actions.long().flatten(),
                            data.lstm_states,
                            data.episode_starts,
                        )
                        mask = data.mask > 1e-8
                        th.testing.assert_close(log_prob[mask], data.old_log_prob[mask])
                        th.testing.assert_close(values.flatten()[mask], data.old_values[mask])
            acted = sum(
                e[1] is not None and _odd_even(agent) == group
                for c, env in enumerate(envs)
                for t in range(logged_before[c], env.count)
                for agent, e in env.log[t].items()
            )
            assert acted == rows + collector.group_dropped[group]
    checked = {}
    for group, model in models.items():
        if kinds[group] == "recurrent":
            checked[group] = _check_lstm_states(model, envs, group, stored[group], hidden[group])
            assert (
                checked[group] == len(stored[group]) == rollouts * n_steps[group] * n_columns[group]
            )
    checked["dropped"] = sum(collector.group_dropped.values())
    return checked


KINDS = {
    "recurrent+ppo": {"even": "ppo", "odd": "recurrent"},
    "ppo+recurrent": {"even": "recurrent", "odd": "ppo"},
    "two-recurrent": {"even": "recurrent", "odd": "recurrent"},
}


@pytest.mark.parametrize("kinds", list(KINDS.values()), ids=list(KINDS))
def test_each_group_buffer_holds_its_agents_own_lstm_states(kinds: dict[str, str]) -> None:
    # a0 and a1 live 7 steps, a2 joins at 2 and is terminated at 4, a3 joins at 1, truncated
    # at 6; the even group (3 rows) fills before the odd one (5 rows): its agents act on
    schedule = [(0, 7, "truncated"), (0, 7, "truncated"), (2, 4, "terminated"), (1, 6, "truncated")]
    waiting = frozenset({(2, 3), (3, 2), (0, 4)})
    checked = _check_groups(
        kinds, schedule, waiting, 2, {"even": 3, "odd": 5}, {"even": 2, "odd": 2}, 3
    )
    assert all(checked.values())  # LSTM states checked, and steps of the full group dropped


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    schedule=schedules(),
    waiting=waits(),
    n_copies=st.integers(1, 2),
    n_steps=st.tuples(st.integers(2, 4), st.integers(2, 4)),
    n_columns=st.tuples(st.integers(1, 3), st.integers(1, 3)),
    rollouts=st.integers(1, 3),
    kinds=st.sampled_from(list(KINDS)),
)
def test_each_group_buffer_holds_its_agents_own_lstm_states_on_drawn_schedules(
    schedule: list[tuple[int, int, str]],
    waiting: frozenset[tuple[int, int]],
    n_copies: int,
    n_steps: tuple[int, int],
    n_columns: tuple[int, int],
    rollouts: int,
    kinds: str,
) -> None:
    schedule, waiting = _two_groups(schedule, waiting)
    checked = _check_groups(
        KINDS[kinds],
        schedule,
        waiting,
        n_copies,
        dict(zip(["even", "odd"], n_steps, strict=True)),
        dict(zip(["even", "odd"], n_columns, strict=True)),
        rollouts,
    )
    event(f"kinds: {kinds}")
    event(f"dropped: {checked['dropped'] > 0}")


def test_states_not_reset_where_a_trajectory_starts_fail_both_proofs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    real = groups_module.sb3_rows

    def no_resets(*args: Any, episode_starts: Any = None, **kwargs: Any) -> Any:
        """A mutation: the group collector never resets an LSTM state (the stored flags kept)."""
        if episode_starts is not None:
            episode_starts = [False] * len(episode_starts)
        return real(*args, episode_starts=episode_starts, **kwargs)

    monkeypatch.setattr(groups_module, "sb3_rows", no_resets)  # the group collector only
    with pytest.raises(AssertionError):
        _check_one_group_equals_shared(SCHEDULE, WAITING, 2, 2, 5, 2)
    schedule = [(0, 7, "truncated"), (0, 7, "truncated"), (2, 4, "terminated"), (1, 6, "truncated")]
    with pytest.raises(AssertionError):
        _check_groups(
            KINDS["recurrent+ppo"],
            schedule,
            frozenset(),
            2,
            {"even": 3, "odd": 5},
            {"even": 2, "odd": 2},
            2,
        )
