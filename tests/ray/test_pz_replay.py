"""RaySharedReplayCollector: the in-process shared replay collector's buffers, from Ray runners.

The oracle is ``rlightning_pettingzoo.SharedReplayCollector`` (itself checked cell by cell
against env logs and SB3's ``learn()`` in tests/pettingzoo). One runner: over the same copies,
reset seeds and acting seed, with ``model.train()`` between rollouts as ``learn()`` does, every
replay-buffer array, the counters (``num_timesteps``, DQN's ``exploration_rate``) and the
trained weights equal the in-process collector's, exactly, over rollouts whose exploration
crosses ``learning_starts`` mid-rollout (DQN's epsilon decaying; SAC's warm-up then its actor).
Two runners: runner ``r``'s columns equal the in-process collector over runner ``r``'s copies
with runner ``r``'s acting seed and the learner's weights, for a model of half the
``learning_starts`` and step budget: the runners explore on the learner's clock (``n_envs`` per
row), which a model of half the columns reaches at half the steps.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from rlightning_ray_test_pz_checks import (
    ENVS,
    REPLAY_FIELDS,
    BoxScheduleEnv,
    BoxSlot,
    replay_arrays,
    replay_counters,
    restore_rng,
    rng_state,
    train_off_policy,
)
from stable_baselines3 import DQN, PPO, SAC, TD3
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import SharedReplayCollector
from rlightning_ray.pettingzoo import RaySharedReplayCollector
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")


# a0 lives the episode (truncated at 6); a1 joins at 1, terminated at 3; a2 joins at 2,
# truncated at 5; a1 waits at step 2, a2 at step 3 (their masks allow nothing)
SCHEDULE = [(0, 6, "truncated"), (1, 3, "terminated"), (2, 5, "truncated")]
WAITS = frozenset({(1, 2), (2, 3)})
FIELDS = REPLAY_FIELDS


def _envs(kind: str, copies: range) -> list[Any]:
    if kind == "box":
        return [BoxScheduleEnv(SCHEDULE, copy) for copy in copies]
    return [ENVS.ScheduleEnv(SCHEDULE, copy, WAITS) for copy in copies]


def _env_fns(kind: str, copies: range) -> list[Any]:
    if kind == "box":
        return [partial(BoxScheduleEnv, SCHEDULE, copy) for copy in copies]
    return [partial(ENVS.ScheduleEnv, SCHEDULE, copy, WAITS) for copy in copies]


def _model(algo: Any, n_envs: int, learning_starts: int, **extra: Any) -> Any:
    slot = BoxSlot if algo in (SAC, TD3) else ENVS.AgentSlot
    kwargs: dict[str, Any] = {
        "learning_starts": learning_starts,
        "train_freq": 4,
        "batch_size": 8,
        "buffer_size": 100 * n_envs,
        "seed": 0,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [8]},
    }
    if algo is DQN:
        kwargs |= {"exploration_fraction": 0.5, "target_update_interval": 8}
    return algo("MlpPolicy", DummyVecEnv([slot] * n_envs), **(kwargs | extra))


_rng, _restore = rng_state, restore_rng
_train, _buffer, _counters = train_off_policy, replay_arrays, replay_counters


CASES = {
    "DQN": (DQN, "discrete", {}),
    "SAC": (SAC, "box", {}),
    "DQN-episodic": (DQN, "discrete", {"train_freq": (2, "episode")}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_one_runner_fills_the_in_process_collectors_buffer(local_ray: None, case: str) -> None:
    """1 runner == SharedReplayCollector over the same copies, 4 rollouts, trained between."""
    algo, kind, extra = CASES[case]
    n_copies = 1 if extra else 2
    n_envs, seeds, acting_seed, rollouts = n_copies, [7, 8][:n_copies], 11, 4
    # the warm-up ends after 12 agent-steps: mid-rollout (4 rows of 2 cells a rollout)
    learning_starts, total = 12, 48
    ref = _model(algo, n_envs, learning_starts, **extra)
    envs = _envs(kind, range(n_copies))
    inproc = SharedReplayCollector(ref, [lambda e=e: e for e in envs], seeds=seeds)
    start_training(ref, total)
    ref.set_random_seed(acting_seed)  # what the runner does to its replica
    want, want_counters, want_stored = [], [], []
    for _ in range(rollouts):
        want_stored.append(inproc.collect())
        want.append(_buffer(ref))
        want_counters.append(_counters(ref))
        acting = _rng()  # in process, training draws from the acting generators: kept apart
        _train(ref)
        _restore(acting)

    model = _model(algo, n_envs, learning_starts, **extra)
    collector = RaySharedReplayCollector(
        model,
        _env_fns(kind, range(n_copies)),
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
            got.append(_buffer(model))
            got_counters.append(_counters(model))
            assert collector.runner_counters() == [got_counters[-1][:2]]
            _train(model)
    finally:
        collector.close()
    assert got_stored == want_stored
    for k in range(rollouts):
        assert got_counters[k] == want_counters[k], k
        assert got[k].keys() == want[k].keys()
        for name in FIELDS:
            np.testing.assert_array_equal(got[k][name], want[k][name], err_msg=f"{k} {name}")
    assert model._n_updates == ref._n_updates > 0
    for (key, mine), (_, theirs) in zip(
        model.policy.state_dict().items(), ref.policy.state_dict().items(), strict=True
    ):
        assert th.equal(mine, theirs), key
    assert [(e["r"], e["l"]) for e in model.ep_info_buffer] == [
        (e["r"], e["l"]) for e in ref.ep_info_buffer
    ]
    assert {a: list(r) for a, r in collector.agent_returns.items()} == {
        a: list(r) for a, r in inproc.agent_returns.items()
    }
    dones, timeouts = got[-1]["dones"].astype(bool), got[-1]["timeouts"].astype(bool)
    assert (dones & timeouts).any() and (dones & ~timeouts).any()  # truncated and terminated
    if algo is DQN:
        assert ref.exploration_rate < 1.0  # epsilon decayed over the rollouts
        waited = any(e[1] is None for env in envs for s in env.log.values() for e in s.values())
        assert waited
    if algo is SAC:  # the warm-up's uniform actions, then the actor's
        assert got[-1]["actions"].min() >= -1 and got[-1]["actions"].max() <= 1


def test_two_runners_fill_their_columns_on_the_learners_clock(local_ray: None) -> None:
    """2 runners x 2 copies: runner r's columns == in process over its copies, half the clock."""
    n_envs, seeds, acting_seeds, rollouts = 4, [3, 4, 5, 6], [21, 22], 3
    # the warm-up ends after 8 agent-steps: the 2nd row of the 1st rollout
    learning_starts, total = 8, 96
    model = _model(DQN, n_envs, learning_starts)
    collector = RaySharedReplayCollector(
        model,
        _env_fns("discrete", range(4)),
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
            counters.append(_counters(model)[:2])
            # each runner advanced its counters as the learner did, row by row
            assert collector.runner_counters() == [counters[-1]] * 2
            _train(model)
    finally:
        collector.close()
    assert model._n_updates > 0 and model.num_timesteps == rollouts * 4 * n_envs
    for r in range(2):
        copies = range(2 * r, 2 * r + 2)
        ref = _model(DQN, 2, learning_starts // 2)
        inproc = SharedReplayCollector(
            ref, _env_fns("discrete", copies), seeds=seeds[2 * r : 2 * r + 2]
        )
        start_training(ref, total // 2)
        ref.set_random_seed(acting_seeds[r])
        for k in range(rollouts):
            ref.policy.load_state_dict(weights[k])
            inproc.collect()
            # half the columns, half the steps: the same progress, the same epsilon
            assert 2 * ref.num_timesteps == counters[k][0]
            assert ref.exploration_rate == counters[k][1]
        block = _buffer(model, slice(2 * r, 2 * r + 2))
        for name in FIELDS:
            np.testing.assert_array_equal(block[name], _buffer(ref)[name], err_msg=f"{r} {name}")


def test_refusals_come_before_any_runner_starts(local_ray: None) -> None:
    fns = _env_fns("discrete", range(2))
    dqn = _model(DQN, 2, 0)
    name = "RaySharedReplayCollector"
    with pytest.raises(TypeError, match=f"{name} needs an off-policy SB3 model.*got PPO"):
        RaySharedReplayCollector(
            PPO("MlpPolicy", DummyVecEnv([ENVS.AgentSlot]), n_steps=8, batch_size=8), fns
        )
    with pytest.raises(TypeError, match="needs an off-policy SB3 model"):
        RaySharedReplayCollector(object(), fns)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="optimize_memory_usage=True"):
        RaySharedReplayCollector(
            _model(
                DQN,
                2,
                0,
                optimize_memory_usage=True,
                replay_buffer_kwargs={"handle_timeout_termination": False},
            ),
            fns,
        )
    with pytest.raises(ValueError, match=r"does not support gSDE \(use_sde=True\)"):
        RaySharedReplayCollector(_model(SAC, 2, 0, use_sde=True), _env_fns("box", range(2)))
    episodic = _model(DQN, 2, 0, train_freq=(1, "episode"))
    with pytest.raises(ValueError, match=r"cannot split train_freq=\(1, 'episode'\).* over 2"):
        RaySharedReplayCollector(episodic, fns, n_runners=2)
    with pytest.raises(ValueError, match="n_envs=2 buffer columns cannot be split into 3"):
        RaySharedReplayCollector(dqn, env_fn=fns[0], n_runners=3)
    with pytest.raises(ValueError, match=r"seeds must hold one seed per env copy \(2\), got 1"):
        RaySharedReplayCollector(dqn, fns, seeds=[0])
    with pytest.raises(ValueError, match=r"acting_seeds must hold one seed per runner \(1\)"):
        RaySharedReplayCollector(dqn, fns, acting_seeds=[0, 1])
    with pytest.raises(ValueError, match="exactly one of env_fns"):
        RaySharedReplayCollector(dqn)
    with pytest.raises(TypeError, match="env function of copy 1 must be callable"):
        RaySharedReplayCollector(dqn, [fns[0], "env"])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"timeout_s must be None .* > 0, got 0"):
        RaySharedReplayCollector(dqn, fns, timeout_s=0)


def test_channel_last_images_are_stored_as_in_process(local_ray: None) -> None:
    """A CnnPolicy DQN over channel-last images (SB3's ``VecTransposeImage``): the replica's
    slots are the raw spaces, which SB3's ``load`` wraps as it wrapped the learner's."""

    def dqn() -> Any:
        class ImageSlot(gym.Env[Any, Any]):
            observation_space = ENVS.IMAGE
            action_space = ENVS.ACT

            def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
                return np.zeros((36, 36, 3), np.uint8), {}

        return DQN(
            "CnnPolicy",
            DummyVecEnv([ImageSlot] * 2),
            learning_starts=2,
            train_freq=3,
            buffer_size=20,
            seed=0,
            device="cpu",
        )

    model = dqn()
    start_training(model, 40)
    collector = RaySharedReplayCollector(
        model, [ENVS.ImageParallel], seeds=[0], acting_seeds=[5], num_cpus=0.5
    )
    try:
        stored = [collector.collect() for _ in range(2)]
    finally:
        collector.close()
    ref = dqn()
    inproc = SharedReplayCollector(ref, [ENVS.ImageParallel], seeds=[0])
    start_training(ref, 40)
    ref.set_random_seed(5)
    assert stored == [inproc.collect() for _ in range(2)] == [6, 6]
    for name in FIELDS:
        np.testing.assert_array_equal(_buffer(model)[name], _buffer(ref)[name], err_msg=name)
    assert _buffer(model)["observations"].shape == (6, 2, 3, 36, 36)  # channel-first, as stored


def test_pool_rules_hold_for_the_replay_collector(local_ray: None) -> None:
    """The rules the review added to the other Ray collectors (``PooledCollector``,
    ``plan_runners``) hold here too: ``collect()`` after ``close()`` says the collector is
    closed (was Python's ``zip()`` error), a ``timeout_s`` set later is checked and used (was
    ignored), an acting seed of ``2**32`` is refused before any runner is built (was numpy's
    bare error in the runner)."""
    slots = DummyVecEnv([ENVS.AgentSlot] * 2)
    model = DQN("MlpPolicy", slots, learning_starts=0, train_freq=1, device="cpu")
    fns = [partial(ENVS.ScheduleEnv, SCHEDULE, 0)]
    with pytest.raises(ValueError, match=r"acting_seeds\[0\]"):
        RaySharedReplayCollector(model, fns, acting_seeds=[2**32])
    collector = RaySharedReplayCollector(model, fns, acting_seeds=[1], num_cpus=0)
    with pytest.raises(ValueError, match="timeout_s must be None"):
        collector.timeout_s = -1
    collector.timeout_s = 30
    assert collector.timeout_s == 30.0
    collector.close()
    start_training(model, 1_000)
    with pytest.raises(RuntimeError, match="is closed"):
        collector.collect()
