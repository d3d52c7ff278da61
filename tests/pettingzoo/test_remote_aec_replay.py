"""AECReplayRecorder and fill_recorded_replay in one process: the AEC replay collector split in two.

A recorder over a replica (its own DQN, given the learner's acting state each rollout) and the
learner adding the recorded rows fill the learner's buffer and counters exactly as
``AECReplayCollector.collect`` over the same copies of PettingZoo's real ``tictactoe_v3``
(self-play and against ``"random"``; epsilon decaying, the warm-up ending mid-rollout). The
mutation check: a recorder whose counters advance on its own clock (``row_width`` 1, not the
learner's ``n_envs``) explores differently, which the same comparison catches.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3
from stable_baselines3 import DQN, SAC
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import (
    AECReplayCollector,
    AECReplayRecorder,
    check_aec_replay_model,
    fill_recorded_replay,
)
from rlightning_sb3 import acting_state, start_training

FIELDS = ("actions", "rewards", "dones", "timeouts")


class Seat(gym.Env[Any, Any]):
    """One tictactoe seat's spaces, for the model's VecEnv (sizes the buffer; never stepped)."""

    def __init__(self) -> None:
        env = tictactoe_v3.env()
        self.observation_space = env.observation_space("player_1")
        self.action_space = env.action_space("player_1")

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}


def _dqn() -> DQN:
    return DQN(
        "MultiInputPolicy",
        DummyVecEnv([Seat] * 2),
        learning_starts=12,
        train_freq=4,
        exploration_fraction=0.5,
        buffer_size=200,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )


def _arrays(model: Any) -> dict[str, np.ndarray]:
    buf = model.replay_buffer
    out = {name: np.array(getattr(buf, name)[: buf.pos]) for name in FIELDS}
    for key in buf.observations:
        out[f"observations/{key}"] = np.array(buf.observations[key][: buf.pos])
        out[f"next_observations/{key}"] = np.array(buf.next_observations[key][: buf.pos])
    return out


def _recorded(opponents: Any, row_width: int | None) -> tuple[Any, list[Any]]:
    learner, replica = _dqn(), _dqn()
    recorder = AECReplayRecorder(
        replica, [tictactoe_v3.env] * 2, opponents=opponents, seeds=[1, 2], row_width=row_width
    )
    start_training(learner, 48)
    start_training(replica, 1)  # collect() runs on a started model; the budget is the learner's
    replica.set_random_seed(5)
    got = []
    for _ in range(4):
        recording = recorder.record(acting_state(learner))
        stored = fill_recorded_replay(learner, [recording])
        got.append((stored, learner.num_timesteps, learner.exploration_rate))
        if row_width is None:  # the replica's counters are the learner's
            assert (replica.num_timesteps, replica.exploration_rate) == got[-1][1:]
    assert replica.replay_buffer.pos == 0 and not replica.replay_buffer.full  # never written
    return learner, got


@pytest.mark.parametrize("opponents", [None, {"player_2": "random"}], ids=["self-play", "random"])
def test_recorder_and_fill_equal_the_in_process_collector(opponents: Any) -> None:
    ref = _dqn()
    inproc = AECReplayCollector(ref, [tictactoe_v3.env] * 2, opponents=opponents, seeds=[1, 2])
    start_training(ref, 48)
    ref.set_random_seed(5)
    want = [(inproc.collect(), ref.num_timesteps, ref.exploration_rate) for _ in range(4)]
    learner, got = _recorded(opponents, None)
    assert got == want
    assert learner.replay_buffer.pos == ref.replay_buffer.pos == 16
    mine, theirs = _arrays(learner), _arrays(ref)
    for name in theirs:
        np.testing.assert_array_equal(mine[name], theirs[name], err_msg=name)
    assert [(e["r"], e["l"]) for e in learner.ep_info_buffer] == [
        (e["r"], e["l"]) for e in ref.ep_info_buffer
    ]
    assert learner._episode_num == ref._episode_num > 0
    assert ref.exploration_rate < 1.0 and learner.replay_buffer.dones[:16].any()

    # mutation: counters advanced by 1 per row, not the learner's 2: the warm-up ends late
    wrong, _ = _recorded(opponents, 1)
    mutated = _arrays(wrong)
    assert any(not np.array_equal(mutated[name], theirs[name]) for name in theirs)


def test_refusals_are_named() -> None:
    dqn = _dqn()
    with pytest.raises(TypeError, match="AECReplayRecorder row_width must be an int count"):
        AECReplayRecorder(dqn, [tictactoe_v3.env], row_width=2.0)  # type: ignore[arg-type]
    box = Seat()
    box.action_space = gym.spaces.Box(-1, 1, (2,))
    sac = SAC(
        "MultiInputPolicy",
        DummyVecEnv([lambda: box]),
        action_noise=NormalActionNoise(np.zeros(2), np.ones(2)),
        device="cpu",
    )
    with pytest.raises(ValueError, match="caller does not support action_noise"):
        check_aec_replay_model(sac, None, "caller")
    with pytest.raises(TypeError, match="caller needs an off-policy SB3 model"):
        check_aec_replay_model(object(), None, "caller")
    with pytest.raises(TypeError, match="caller: opponents must be a mapping"):
        check_aec_replay_model(dqn, ["random"], "caller")
    with pytest.raises(ValueError, match=r"opponents\['player_2'\] is the trained model itself"):
        check_aec_replay_model(dqn, {"player_2": dqn}, "caller")
    episodic = DQN("MultiInputPolicy", DummyVecEnv([Seat] * 2), train_freq=(1, "episode"))
    with pytest.raises(ValueError, match=r"cannot split train_freq=\(1, 'episode'\)"):
        check_aec_replay_model(episodic, None, "caller", n_runners=2)
    # one runner: SB3 trains per episode with one env only (one buffer column)
    with pytest.raises(ValueError, match=r"caller: train_freq=\(1, 'episode'\) .* n_envs=2"):
        check_aec_replay_model(episodic, None, "caller")
    one = DQN("MultiInputPolicy", DummyVecEnv([Seat]), train_freq=(1, "episode"))
    check_aec_replay_model(one, None, "caller")  # SB3's episodic training
