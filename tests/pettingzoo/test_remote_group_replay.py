"""GroupReplayRecorder and fill_recorded_group_replay in one process: the group replay split.

A recorder over replicas (models of their own, given the learners' acting states each rollout)
and the learners adding the recorded rows fill every group's buffer and counters exactly as
``GroupReplayCollector.collect`` over the same copies (two DQN groups on ``ScheduleEnv``:
joins, deaths, waits; each group's warm-up ending mid-rollout, its epsilon decaying, its own
``train_freq``). Recordings that are not one per group, bad ``row_widths`` or states, and models
sharing one action space object are refused, named.
"""

from __future__ import annotations

import copy
from functools import partial
from typing import Any

import numpy as np
import pytest
from rlightning_test_support import sibling
from stable_baselines3 import DQN
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import (
    GroupReplayCollector,
    GroupReplayRecorder,
    check_group_replay_models,
    fill_recorded_group_replay,
    group_action_seed,
    set_group_acting_seed,
)
from rlightning_sb3 import acting_state, start_training

ENVS = sibling(__file__, "collector_envs.py")
SCHEDULE = [(0, 6, "truncated"), (1, 3, "terminated"), (2, 5, "truncated")]
WAITS = frozenset({(1, 2), (2, 3)})
FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
ODD_EVEN = {"a0": "even", "a1": "odd", "a2": "even"}


def _fns() -> list[Any]:
    return [partial(ENVS.ScheduleEnv, SCHEDULE, copy, WAITS) for copy in range(2)]


def _slot(space: Any) -> Any:
    """``AgentSlot`` over an action space object of its own."""

    class Own(ENVS.AgentSlot):  # type: ignore[misc, name-defined]
        action_space = space

    return Own


def _models() -> dict[str, Any]:
    """even: 2 columns, warm-up 6, train_freq 2; odd: 1 column, warm-up 3, train_freq 3."""
    out = {}
    for k, (group, n_envs, learning_starts, train_freq) in enumerate(
        [("even", 2, 6, 2), ("odd", 1, 3, 3)]
    ):
        space = copy.deepcopy(ENVS.ACT)  # a space object per model (set_group_acting_seed)
        out[group] = DQN(
            "MlpPolicy",
            DummyVecEnv([_slot(space)] * n_envs),
            learning_starts=learning_starts,
            train_freq=train_freq,
            exploration_fraction=0.5,
            buffer_size=200,
            seed=k,
            device="cpu",
            policy_kwargs={"net_arch": [8]},
        )
    return out


def test_recorder_and_fill_equal_the_in_process_collector() -> None:
    refs = _models()
    inproc = GroupReplayCollector(refs, _fns(), group_of=ODD_EVEN, seeds=[1, 2])
    for ref in refs.values():
        start_training(ref, 40)
    set_group_acting_seed(refs, 5)
    want = []
    for _ in range(4):
        stored = inproc.collect()
        want.append({g: (stored[g], m.num_timesteps, m.exploration_rate) for g, m in refs.items()})

    learners, replicas = _models(), _models()
    recorder = GroupReplayRecorder(replicas, _fns(), group_of=ODD_EVEN, seeds=[1, 2])
    for learner, replica in zip(learners.values(), replicas.values(), strict=True):
        start_training(learner, 40)
        start_training(replica, 1)  # collect() runs on started models; the budget is the learner's
    set_group_acting_seed(replicas, 5)
    got = []
    for _ in range(4):
        recordings = recorder.record({g: acting_state(m) for g, m in learners.items()})
        assert list(recordings) == ["even", "odd"]
        stored = fill_recorded_group_replay(learners, [recordings])
        got.append(
            {g: (stored[g], m.num_timesteps, m.exploration_rate) for g, m in learners.items()}
        )
        for group, replica in replicas.items():  # advanced as its learner, row by row
            assert (replica.num_timesteps, replica.exploration_rate) == got[-1][group][1:]
            assert recordings[group].stored == len(recordings[group].rows) * replica.n_envs
    assert got == want
    assert {a for r in recordings.values() for a in r.agent_returns} <= set(ODD_EVEN)
    assert set(recordings["odd"].agent_returns) <= {"a1"}
    for group, learner in learners.items():
        ref = refs[group]
        assert replicas[group].replay_buffer.pos == 0  # never written
        assert learner.replay_buffer.pos == ref.replay_buffer.pos > 0
        assert learner.exploration_rate < 1.0  # epsilon decayed
        assert learner._episode_num == ref._episode_num
        for name in FIELDS:
            np.testing.assert_array_equal(
                getattr(learner.replay_buffer, name),
                getattr(ref.replay_buffer, name),
                err_msg=f"{group} {name}",
            )


def test_bad_recordings_widths_states_and_shared_spaces_are_refused() -> None:
    learners, replicas = _models(), _models()
    with pytest.raises(ValueError, match=r"row_widths must map each group of models"):
        GroupReplayRecorder(replicas, _fns(), group_of=ODD_EVEN, row_widths={"even": 2})
    with pytest.raises(TypeError, match=r"row_widths\['odd'\] must be an int count"):
        GroupReplayRecorder(
            replicas,
            _fns(),
            group_of=ODD_EVEN,
            row_widths={"even": 2, "odd": 1.0},  # type: ignore[dict-item]
        )
    recorder = GroupReplayRecorder(replicas, _fns(), group_of=ODD_EVEN, seeds=[1, 2])
    for replica in replicas.values():
        start_training(replica, 1)
    with pytest.raises(ValueError, match=r"one acting state per group \['even', 'odd'\]"):
        recorder.record({"even": acting_state(learners["even"])})
    with pytest.raises(ValueError, match=r"\(the model of group 'even'\).*start_training"):
        fill_recorded_group_replay(learners, [], caller="caller")
    for learner in learners.values():
        start_training(learner, 40)
    recordings = recorder.record({g: acting_state(m) for g, m in learners.items()})
    with pytest.raises(ValueError, match=r"rollout 1 holds the groups \['odd'\]"):
        fill_recorded_group_replay(learners, [recordings, {"odd": recordings["odd"]}])
    with pytest.raises(ValueError, match=r"caller \(group 'even'\): the recordings have \[2, 2\]"):
        fill_recorded_group_replay(learners, [recordings, recordings], caller="caller")
    assert all(m.replay_buffer.pos == 0 for m in learners.values())  # nothing added
    shared = _models()
    shared["odd"].action_space = shared["even"].action_space
    with pytest.raises(ValueError, match="groups 'even' and 'odd' share one action space"):
        set_group_acting_seed(shared, 0)
    episodic = _models()
    episodic["odd"] = DQN(
        "MlpPolicy", DummyVecEnv([ENVS.AgentSlot]), train_freq=(1, "episode"), device="cpu"
    )
    with pytest.raises(ValueError, match=r"\(group 'odd'\) cannot split train_freq"):
        check_group_replay_models(episodic, "caller", n_runners=2)
    seeds = {group_action_seed(s, k) for s in range(3) for k in range(3)}
    assert len(seeds) == 9 and all(0 <= s < 2**32 for s in seeds)  # no overlap between runners
