"""The Ray on-policy rollout runners reset their copies at a new resetting run, as in process.

SB3's ``BaseAlgorithm._setup_learn`` resets the model's VecEnv when a run begins with
``reset_num_timesteps=True`` and continues its episodes with ``False``; the in-process PettingZoo
collectors do the same with their copies (``CopyBookkeeping._start_run``, checked against two
``learn()`` calls in tests/pettingzoo/test_run_reset.py). A runner's replica never begins the
learner's runs: each rollout request carries the learner's
``rlightning_sb3.training_reset_run_id`` (one per group model), and the runner's recorder
applies the very same rule. The oracle is the in-process collector over the same copies, seeds,
torch seed and weights: over runs ``start_training(..., reset_num_timesteps=True)``, ``False``,
``True`` (one rollout each, every run ending mid-episode, ``model.train()`` after each), one
runner's buffers, segments, ``num_timesteps`` and episodes equal it array for array; a group
collector's copies reset only once every group's model began a resetting run (two more runs
where one group resets alone, then the other).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from mpe2 import simple_spread_v3
from pettingzoo.classic import tictactoe_v3
from rlightning_ray_test_pz_checks import buffer_arrays, episodes, restore_rng, rng_state
from sb3_contrib import MaskablePPO
from stable_baselines3 import PPO
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import (
    AECGroupRolloutCollector,
    AECRolloutCollector,
    GroupRolloutCollector,
    SharedRolloutCollector,
)
from rlightning_ray.pettingzoo import (
    RayAECGroupRolloutCollector,
    RayAECRolloutCollector,
    RayGroupRolloutCollector,
    RaySharedRolloutCollector,
)
from rlightning_sb3 import finish_training, set_acting_seed, start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

#: One simple_spread copy: 3 agents of one spaces, truncated every 5 steps (rollouts of 4 rows:
#: each run ends mid-episode).
MAKE = partial(simple_spread_v3.parallel_env, max_cycles=5)
N_STEPS = 4
#: Each run's ``reset_num_timesteps``, per model.
SHARED_RUNS: list[dict[str, bool]] = [{"shared": r} for r in (True, False, True)]
GROUP_OF = {"agent_0": "a", "agent_1": "b", "agent_2": "b"}
#: Runs 4 and 5: one group resets alone (the copies continue), then the other (they reset).
GROUP_RUNS: list[dict[str, bool]] = [
    {"a": True, "b": True},
    {"a": False, "b": False},
    {"a": True, "b": True},
    {"a": True, "b": False},
    {"a": False, "b": True},
]
#: Whether each run's copies were reset (row 0 starts every stream's episode).
SHARED_RESETS = [True, False, True]
GROUP_RESETS = [True, False, True, False, True]


class _Slot(gym.Env[Any, Any]):
    """One agent's spaces (sizes the model's buffer; never stepped)."""

    def __init__(self, make: Callable[[], Any] = MAKE, agent: str = "agent_0") -> None:
        env = make()
        self.observation_space = env.observation_space(agent)
        self.action_space = env.action_space(agent)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("never stepped")


def _ppo(n_envs: int, seed: int = 0) -> PPO:
    return PPO(
        "MlpPolicy",
        DummyVecEnv([_Slot] * n_envs),
        n_steps=N_STEPS,
        batch_size=N_STEPS * n_envs,
        n_epochs=1,
        seed=seed,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )


def _seat_model(n_envs: int, seed: int = 0) -> MaskablePPO:
    seat = partial(_Slot, tictactoe_v3.env, "player_1")
    return MaskablePPO(
        "MultiInputPolicy",
        DummyVecEnv([seat] * n_envs),
        n_steps=3,
        batch_size=3 * n_envs,
        n_epochs=1,
        seed=seed,
        device="cpu",
        policy_kwargs={"net_arch": [8]},
    )


Snapshot = tuple[Any, dict[str, dict[str, np.ndarray]], dict[str, int], dict[str, Any]]


def _arrays(model: Any) -> dict[str, np.ndarray]:
    buf = model.rollout_buffer
    if not isinstance(buf.observations, dict):
        return buffer_arrays(model)
    out = {n: np.array(getattr(buf, n)) for n in ("actions", "rewards", "episode_starts")}
    out |= {n: np.array(getattr(buf, n)) for n in ("values", "log_probs", "returns")}
    out |= {f"observations/{k}": np.array(a) for k, a in buf.observations.items()}
    out["action_masks"] = np.array(buf.action_masks)
    return out


def _runs(
    collector: Any,
    models: Mapping[str, Any],
    runs: list[dict[str, bool]],
    acting_seed: int | None,
) -> list[Snapshot]:
    """One rollout per run (``start_training`` of every model first, ``train()`` after).

    In process (``acting_seed`` an int) the acting stream is seeded once and kept apart from
    ``start_training`` and ``train`` (a runner's acting stream runs on undisturbed by the
    learner); on Ray (``acting_seed`` None) the runner was given it. A Ray collector is closed.
    """
    out: list[Snapshot] = []
    try:
        if acting_seed is not None:
            set_acting_seed(acting_seed)
        for run in runs:
            acting = rng_state()
            for group, model in models.items():
                start_training(model, N_STEPS * model.n_envs, reset_num_timesteps=run[group])
            if acting_seed is not None:
                restore_rng(acting)
            segments = collector.collect()
            out.append(
                (
                    segments,
                    {g: _arrays(m) for g, m in models.items()},
                    {g: m.num_timesteps for g, m in models.items()},
                    {g: episodes(m) for g, m in models.items()},
                )
            )
            acting = rng_state()
            set_random_seed(99)
            for model in models.values():
                model.train()
                finish_training(model)
            if acting_seed is not None:
                restore_rng(acting)
    finally:
        if acting_seed is None:
            collector.close()
    return out


def _assert_same(got: list[Snapshot], want: list[Snapshot], resets: list[bool]) -> None:
    assert len(got) == len(want) == len(resets)
    for k, ((segs, arrays, steps, eps), (ref_segs, ref_arrays, ref_steps, ref_eps)) in enumerate(
        zip(got, want, strict=True)
    ):
        assert segs == ref_segs, k
        assert steps == ref_steps and eps == ref_eps, k
        for group, mine in arrays.items():
            theirs = ref_arrays[group]
            assert mine.keys() == theirs.keys()
            for name, array in mine.items():
                np.testing.assert_array_equal(array, theirs[name], err_msg=f"{k} {group} {name}")
    # the runs reset (or continued) the copies where SB3 would: row 0 starts every episode
    for k, reset in enumerate(resets):
        starts = np.concatenate([a["episode_starts"][0] for a in want[k][1].values()])
        assert bool(starts.all()) == reset, (k, starts)
        assert not starts.any() or reset, k  # a continuing run ends mid-episode everywhere


def test_one_shared_runner_resets_as_the_in_process_collector(local_ray: None) -> None:
    """1 runner x 2 copies == SharedRolloutCollector over them, runs True, False, True."""
    seeds, acting_seed, n_envs = [7, 8], 11, 6
    ref = _ppo(n_envs)
    inproc = SharedRolloutCollector(ref, [MAKE] * 2, seeds=seeds)
    want = _runs(inproc, {"shared": ref}, SHARED_RUNS, acting_seed)
    model = _ppo(n_envs)
    collector = RaySharedRolloutCollector(
        model, [MAKE] * 2, seeds=seeds, acting_seeds=[acting_seed], num_cpus=0.5
    )
    got = _runs(collector, {"shared": model}, SHARED_RUNS, None)
    _assert_same(got, want, SHARED_RESETS)


def test_one_group_runner_resets_once_every_group_asked(local_ray: None) -> None:
    """1 runner x 2 copies == GroupRolloutCollector: runs (T, T), (F, F), (T, T), (T, F), (F, T)."""
    seeds, acting_seed = [3, 4], 5

    def models() -> dict[str, Any]:
        return {"a": _ppo(2, seed=0), "b": _ppo(4, seed=1)}

    refs = models()
    inproc = GroupRolloutCollector(refs, [MAKE] * 2, group_of=GROUP_OF, seeds=seeds)
    want = _runs(inproc, refs, GROUP_RUNS, acting_seed)
    learners = models()
    collector = RayGroupRolloutCollector(
        learners,
        [MAKE] * 2,
        group_of=GROUP_OF,
        seeds=seeds,
        acting_seeds=[acting_seed],
        num_cpus=0.5,
    )
    got = _runs(collector, learners, GROUP_RUNS, None)
    _assert_same(got, want, GROUP_RESETS)


def test_one_aec_runner_resets_as_the_in_process_collector(local_ray: None) -> None:
    """1 runner x 1 tictactoe copy (self-play) == AECRolloutCollector, runs True, False, True."""
    seeds, acting_seed = [7], 11
    ref = _seat_model(2)
    inproc = AECRolloutCollector(ref, [tictactoe_v3.env], seeds=seeds)
    want = _runs(inproc, {"shared": ref}, SHARED_RUNS, acting_seed)
    model = _seat_model(2)
    collector = RayAECRolloutCollector(
        model, [tictactoe_v3.env], seeds=seeds, acting_seeds=[acting_seed], num_cpus=0.5
    )
    got = _runs(collector, {"shared": model}, SHARED_RUNS, None)
    _assert_same(got, want, SHARED_RESETS)


def test_one_aec_group_runner_resets_once_every_group_asked(local_ray: None) -> None:
    """1 runner x 1 tictactoe copy, a group per player == AECGroupRolloutCollector, the group
    runs (T, T), (F, F), (T, T), (T, F), (F, T)."""
    seeds, acting_seed, seats = [7], 11, {"player_1": "x", "player_2": "o"}

    def models() -> dict[str, Any]:
        return {"x": _seat_model(1, seed=0), "o": _seat_model(1, seed=1)}

    runs = [{"x": run["a"], "o": run["b"]} for run in GROUP_RUNS]
    refs = models()
    inproc = AECGroupRolloutCollector(refs, [tictactoe_v3.env], group_of=seats, seeds=seeds)
    want = _runs(inproc, refs, runs, acting_seed)
    learners = models()
    collector = RayAECGroupRolloutCollector(
        learners,
        [tictactoe_v3.env],
        group_of=seats,
        seeds=seeds,
        acting_seeds=[acting_seed],
        num_cpus=0.5,
    )
    got = _runs(collector, learners, runs, None)
    _assert_same(got, want, GROUP_RESETS)
