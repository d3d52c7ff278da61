"""RayAECReplayCollector: the in-process AEC replay collector's buffers, from Ray runners.

The oracle is ``rlightning_pettingzoo.AECReplayCollector`` (itself checked cell by cell against
env logs in tests/pettingzoo/test_aec_replay.py). One runner of two copies of PettingZoo's real
``tictactoe_v3``, in self-play, against ``"random"`` and against a frozen DQN (sent as its SB3
save bytes, loaded in the runner; it explores with its own epsilon): over the same copies, reset
seeds, opponents and acting seed, with ``model.train()`` between rollouts as ``learn()`` does,
the replay buffer's six arrays, ``num_timesteps``, ``exploration_rate``, the episodes counted,
``ep_info_buffer`` and the trained weights equal the in-process collector's, exactly, over
rollouts whose warm-up ends mid-rollout and whose epsilon decays. Two runners of two copies:
runner ``r``'s columns equal the in-process collector over runner ``r``'s copies with its acting
seed and the learner's weights, for a model of half the columns, ``learning_starts`` and budget
(the runners explore on the learner's clock).
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from pettingzoo.classic import tictactoe_v3
from rlightning_ray_test_pz_checks import (
    Slot,
    episodes,
    replay_counters,
    restore_rng,
    rng_state,
    train_off_policy,
)
from stable_baselines3 import DQN, PPO, SAC
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import AECReplayCollector
from rlightning_ray.pettingzoo import RayAECReplayCollector
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

FIELDS = ("actions", "rewards", "dones", "timeouts")
_SEAT = tictactoe_v3.env()
SPACES = (_SEAT.observation_space("player_1"), _SEAT.action_space("player_1"))


def _slots(n: int) -> DummyVecEnv:
    """A never-stepped VecEnv of ``n`` seats, its spaces the model's own (copies of ``SPACES``:
    a space shared by two models would share its generator, here and not in the runners)."""
    return DummyVecEnv([lambda: Slot(*copy.deepcopy(SPACES))] * n)


def _box_slots() -> DummyVecEnv:
    """One slot of Box(4) observations (a DictReplayBuffer has no optimize_memory_usage)."""
    box = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    return DummyVecEnv([lambda: Slot(box, copy.deepcopy(SPACES[1]))])


def _dqn(n_envs: int, learning_starts: int, **extra: Any) -> DQN:
    kwargs: dict[str, Any] = {
        "learning_starts": learning_starts,
        "train_freq": 4,
        "batch_size": 8,
        "buffer_size": 100 * n_envs,
        "exploration_fraction": 0.5,
        "target_update_interval": 8,
        "seed": 0,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [16]},
    }
    return DQN("MultiInputPolicy", _slots(n_envs), **(kwargs | extra))


def _opponents(kind: str) -> dict[str, Any] | None:
    if kind == "self-play":
        return None
    if kind == "random":
        return {"player_2": "random"}
    frozen = _dqn(1, 0, seed=5)  # never trained here; acts greedily but for its epsilon
    frozen.exploration_rate = 0.3  # its own epsilon moves: action_space.sample()
    # its generator not where SB3's load reseeds it (model.seed): the runner must get this one
    frozen.action_space.seed(77)
    return {"player_2": frozen}


def _arrays(model: Any, columns: slice = slice(None)) -> dict[str, np.ndarray]:
    """The replay buffer's six arrays' filled rows (the observations key by key)."""
    buf = model.replay_buffer
    out = {name: np.array(getattr(buf, name)[: buf.pos, columns]) for name in FIELDS}
    for key in buf.observations:
        out[f"observations/{key}"] = np.array(buf.observations[key][: buf.pos, columns])
        out[f"next_observations/{key}"] = np.array(buf.next_observations[key][: buf.pos, columns])
    return out


def _assert_equal(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str) -> None:
    assert got.keys() == want.keys(), what
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"{what} {name}")


#: kind -> (opponents' kind, the DQN's extra arguments): "episodic" is one copy, one column,
#: rollouts of 2 finished episodes (SB3 trains per episode with one env only).
CASES: dict[str, tuple[str, dict[str, Any]]] = {
    "self-play": ("self-play", {}),
    "random": ("random", {}),
    "frozen": ("frozen", {}),
    "episodic": ("self-play", {"train_freq": (2, "episode")}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_runner_fills_the_in_process_collectors_buffer(local_ray: None, case: str) -> None:
    """1 runner x 2 copies == AECReplayCollector over the same copies, 4 rollouts, trained."""
    kind, extra = CASES[case]
    n_copies = 1 if extra else 2
    n_envs, seeds, acting_seed, rollouts = n_copies, [7, 8][:n_copies], 11, 4
    # the warm-up ends after 12 agent-steps: mid-rollout (4 rows of 2 cells a rollout)
    learning_starts, total = 12, 48
    ref = _dqn(n_envs, learning_starts, **extra)
    inproc = AECReplayCollector(
        ref, [tictactoe_v3.env] * n_copies, opponents=_opponents(kind), seeds=seeds
    )
    start_training(ref, total)
    ref.set_random_seed(acting_seed)  # what the runner does to its replica
    want, want_counters, want_stored, waiting = [], [], [], []
    for _ in range(rollouts):
        want_stored.append(inproc.collect())
        waiting.append(len(inproc._ready))  # closed transitions left for the next rollout's row
        want.append(_arrays(ref))
        want_counters.append(replay_counters(ref))
        acting = rng_state()  # in process, training draws from the acting generators
        train_off_policy(ref)
        restore_rng(acting)

    model = _dqn(n_envs, learning_starts, **extra)
    collector = RayAECReplayCollector(
        model,
        env_fn=tictactoe_v3.env,
        opponents=_opponents(kind),
        copies_per_runner=n_copies,
        seeds=seeds,
        acting_seeds=[acting_seed],
        num_cpus=0.5,
    )
    got, got_counters, got_stored = [], [], []
    try:
        # refused before the runner steps: the rollouts below are the in-process ones
        with pytest.raises(ValueError, match="start_training"):
            collector.collect()
        start_training(model, total)
        for _ in range(rollouts):
            got_stored.append(collector.collect())
            got.append(_arrays(model))
            got_counters.append(replay_counters(model))
            assert collector.runner_counters() == [got_counters[-1][:2]]
            train_off_policy(model)
    finally:
        collector.close()
    with pytest.raises(RuntimeError, match="RayAECReplayCollector is closed"):
        collector.collect()  # named (the runners are gone)
    assert got_stored == want_stored
    if not extra:
        assert got_stored == [4 * n_envs] * rollouts  # train_freq=4 rows
    for k in range(rollouts):
        assert got_counters[k] == want_counters[k], k
        _assert_equal(got[k], want[k], f"rollout {k}")
    assert model._n_updates == ref._n_updates > 0
    for (key, mine), (_, theirs) in zip(
        model.policy.state_dict().items(), ref.policy.state_dict().items(), strict=True
    ):
        assert th.equal(mine, theirs), key
    assert episodes(model) == episodes(ref) != []
    assert {a: list(r) for a, r in collector.agent_returns.items()} == {
        a: list(r) for a, r in inproc.agent_returns.items()
    }
    trained = {"player_1", "player_2"} if kind == "self-play" else {"player_1"}
    assert set(collector.agent_returns) == trained
    assert ref.exploration_rate < 1.0  # epsilon decayed over the rollouts
    if case == "self-play":  # the runner carried them over, as in process
        assert any(waiting), waiting
    assert got[-1]["dones"].any() and (got[-1]["rewards"] != 0).any()  # games ended, scored


def test_two_runners_fill_their_columns_on_the_learners_clock(local_ray: None) -> None:
    """2 runners x 2 copies: runner r's columns == in process over its copies, half the clock."""
    n_envs, seeds, acting_seeds, rollouts = 4, [3, 4, 5, 6], [21, 22], 3
    # the warm-up ends after 8 agent-steps: the 2nd row of the 1st rollout
    learning_starts, total = 8, 96
    opponents = {"player_1": "random"}  # the trained seat moves second
    model = _dqn(n_envs, learning_starts)
    collector = RayAECReplayCollector(
        model,
        [tictactoe_v3.env] * 4,
        opponents=opponents,
        n_runners=2,
        seeds=seeds,
        acting_seeds=acting_seeds,
        num_cpus=0.5,
    )
    weights, counters = [], []
    try:
        start_training(model, total)
        for _ in range(rollouts):
            weights.append({k: v.clone() for k, v in model.policy.state_dict().items()})
            assert collector.collect() == 4 * n_envs
            counters.append(replay_counters(model)[:2])
            # each runner advanced its counters as the learner did, row by row
            assert collector.runner_counters() == [counters[-1]] * 2
            train_off_policy(model)
    finally:
        collector.close()
    assert model._n_updates > 0 and model.num_timesteps == rollouts * 4 * n_envs

    def reference(r: int, clock: int) -> DQN:
        """In process over runner r's copies, ``clock`` times fewer steps than the learner's."""
        ref = _dqn(2, learning_starts // clock)
        inproc = AECReplayCollector(
            ref, [tictactoe_v3.env] * 2, opponents=opponents, seeds=seeds[2 * r : 2 * r + 2]
        )
        start_training(ref, total // clock)
        ref.set_random_seed(acting_seeds[r])
        for k in range(rollouts):
            ref.policy.load_state_dict(weights[k])
            inproc.collect()
            if clock == 2:  # half the columns, half the steps: the same progress, epsilon
                assert 2 * ref.num_timesteps == counters[k][0]
                assert ref.exploration_rate == counters[k][1]
        return ref

    for r in range(2):
        mine = _arrays(model, slice(2 * r, 2 * r + 2))
        _assert_equal(mine, _arrays(reference(r, 2)), f"runner {r}")
    # mutation: runners exploring on their own clock (2 agent-steps a row, the learner's whole
    # learning_starts and budget) would have stored other actions; the check above tells
    wrong = _arrays(reference(0, 1))
    assert not np.array_equal(_arrays(model, slice(0, 2))["actions"], wrong["actions"])


def test_refusals_come_before_any_runner_starts(local_ray: None) -> None:
    fns = [tictactoe_v3.env] * 2
    dqn = _dqn(2, 0)
    name = "RayAECReplayCollector"
    ppo = PPO("MultiInputPolicy", _slots(1), n_steps=8, batch_size=8, device="cpu")
    with pytest.raises(TypeError, match=f"{name} needs an off-policy SB3 model.*got PPO"):
        RayAECReplayCollector(ppo, fns)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="optimize_memory_usage=True"):
        RayAECReplayCollector(
            DQN(
                "MlpPolicy",
                _box_slots(),
                optimize_memory_usage=True,
                replay_buffer_kwargs={"handle_timeout_termination": False},
            ),
            fns,
        )
    box = Slot(SPACES[0], gym.spaces.Box(-1.0, 1.0, (2,), np.float32))
    sac = SAC(
        "MultiInputPolicy",
        DummyVecEnv([lambda: box]),
        action_noise=NormalActionNoise(np.zeros(2), np.ones(2)),
        device="cpu",
    )
    with pytest.raises(ValueError, match=f"{name} does not support action_noise"):
        RayAECReplayCollector(sac, fns)
    episodic = _dqn(2, 0, train_freq=(1, "episode"))
    with pytest.raises(ValueError, match=r"cannot split train_freq=\(1, 'episode'\).* over 2"):
        RayAECReplayCollector(episodic, fns, n_runners=2)
    with pytest.raises(TypeError, match="opponents must be a mapping"):
        RayAECReplayCollector(dqn, fns, opponents=["random"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"opponents\['player_2'\] must be .* got the string"):
        RayAECReplayCollector(dqn, fns, opponents={"player_2": "greedy"})
    with pytest.raises(ValueError, match=r"opponents\['player_2'\] is the trained model itself"):
        RayAECReplayCollector(dqn, fns, opponents={"player_2": dqn})
    with pytest.raises(ValueError, match="n_envs=2 buffer columns cannot be split into 3"):
        RayAECReplayCollector(dqn, env_fn=fns[0], n_runners=3)
    with pytest.raises(ValueError, match=r"seeds must hold one seed per env copy \(2\), got 1"):
        RayAECReplayCollector(dqn, fns, seeds=[0])
    with pytest.raises(ValueError, match="exactly one of env_fns"):
        RayAECReplayCollector(dqn)
    with pytest.raises(ValueError, match=r"timeout_s must be None .* > 0, got 0"):
        RayAECReplayCollector(dqn, fns, timeout_s=0)
    with pytest.raises(TypeError, match="n_runners must be an int count"):
        RayAECReplayCollector(dqn, fns, n_runners=1.5)  # type: ignore[arg-type]


def test_an_opponent_whose_spaces_misfit_fails_the_runners_build(local_ray: None) -> None:
    """What only the envs can tell (an opponent's spaces) fails the runner's build, named."""
    misfit = DQN("MlpPolicy", _box_slots(), device="cpu")  # not the seat's Dict observations
    with pytest.raises(
        RuntimeError,
        match=r"(?s)runner 'pz-runner-0' failed to build.*"
        r"opponents\['player_2'\]: agent 'player_2'.*but the model \(DQN\)",
    ):
        RayAECReplayCollector(
            _dqn(2, 0), [tictactoe_v3.env], opponents={"player_2": misfit}, num_cpus=0.5
        )
