"""ReplayRecorder and fill_recorded_replay in one process: the replay collector split in two.

A recorder over a replica (its own model, given the learner's acting state each rollout) and the
learner adding the recorded rows fill the learner's buffer and counters exactly as
``SharedReplayCollector.collect`` over the same copies (DQN, epsilon decaying, the warm-up ending
mid-rollout); recordings that do not line up with the learner's buffer or rollout are refused,
named.
"""

from __future__ import annotations

import dataclasses
from functools import partial
from typing import Any

import numpy as np
import pytest
from rlightning_test_support import sibling
from stable_baselines3 import DQN
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import ReplayRecorder, SharedReplayCollector, fill_recorded_replay
from rlightning_sb3 import acting_state, start_training

ENVS = sibling(__file__, "collector_envs.py")
SCHEDULE = [(0, 6, "truncated"), (1, 3, "terminated"), (2, 5, "truncated")]
WAITS = frozenset({(1, 2), (2, 3)})
FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


def _fns() -> list[Any]:
    return [partial(ENVS.ScheduleEnv, SCHEDULE, copy, WAITS) for copy in range(2)]


def _dqn(train_freq: int = 4) -> Any:
    return DQN(
        "MlpPolicy",
        DummyVecEnv([ENVS.AgentSlot] * 2),
        learning_starts=12,
        train_freq=train_freq,
        exploration_fraction=0.5,
        buffer_size=200,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )


def test_recorder_and_fill_equal_the_in_process_collector() -> None:
    ref = _dqn()
    inproc = SharedReplayCollector(ref, _fns(), seeds=[1, 2])
    start_training(ref, 48)
    ref.set_random_seed(5)
    want = [(inproc.collect(), ref.num_timesteps, ref.exploration_rate) for _ in range(4)]

    learner, replica = _dqn(), _dqn()
    recorder = ReplayRecorder(replica, _fns(), seeds=[1, 2])
    start_training(learner, 48)
    start_training(replica, 1)  # collect() runs on a started model; the budget is the learner's
    replica.set_random_seed(5)
    got = []
    for _ in range(4):
        recording = recorder.record(acting_state(learner))
        assert recording.stored == len(recording.rows) * 2
        stored = fill_recorded_replay(learner, [recording])
        got.append((stored, learner.num_timesteps, learner.exploration_rate))
        assert (replica.num_timesteps, replica.exploration_rate) == got[-1][1:]
    assert got == want
    assert replica.replay_buffer.pos == 0 and not replica.replay_buffer.full  # never written
    assert learner.replay_buffer.pos == ref.replay_buffer.pos == 16
    for name in FIELDS:
        np.testing.assert_array_equal(
            getattr(learner.replay_buffer, name), getattr(ref.replay_buffer, name), err_msg=name
        )


def test_recordings_that_do_not_line_up_are_refused() -> None:
    learner, replica = _dqn(), _dqn(train_freq=2)
    recorder = ReplayRecorder(replica, _fns(), seeds=[1, 2])
    start_training(learner, 48)
    start_training(replica, 1)
    recording = recorder.record(acting_state(learner))
    assert len(recording.rows) == 2
    with pytest.raises(ValueError, match="at least one recording"):
        fill_recorded_replay(learner, [])
    shorter = dataclasses.replace(recording, rows=recording.rows[:1])
    with pytest.raises(ValueError, match="recording 1 has 1 rows, recording 0 has 2"):
        fill_recorded_replay(learner, [recording, shorter])
    with pytest.raises(ValueError, match=r"columns \(4 in all\), the model's buffer n_envs=2"):
        fill_recorded_replay(learner, [recording, recording])
    assert learner.replay_buffer.pos == 0 and learner.num_timesteps == 0  # nothing added
    # the learner's rollout is 4 rows: 2 recorded rows end none
    with pytest.raises(RuntimeError, match="train_freq=4 steps ended not at the last row"):
        fill_recorded_replay(learner, [recording])
    with pytest.raises(TypeError, match="row_width must be an int count"):
        ReplayRecorder(replica, _fns(), row_width=2.0)  # type: ignore[arg-type]
