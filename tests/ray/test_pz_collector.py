"""RaySharedRolloutCollector: the in-process shared collector's buffers, from Ray runners.

The oracle is ``rlightning_pettingzoo.SharedRolloutCollector`` (itself checked cell by cell
against env logs and SB3 in tests/pettingzoo): over the same copies, reset seeds, weights and
torch seed, the learner's buffer (one runner), or each runner's block of columns (two runners),
equals the in-process collector's, array for array, over two rollouts with ``model.train()``
between (the weights republished), on an env whose agents join, die (terminated and
truncated) and wait (masks allowing nothing).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from rlightning_ray_test_pz_checks import (
    CLOSE,
    ENVS,
    assert_segments_moved,
    episodes,
    not_parallel,
    restore_rng,
    rng_state,
)
from rlightning_ray_test_pz_checks import assert_arrays as _assert_equal
from rlightning_ray_test_pz_checks import buffer_arrays as _buffer
from sb3_contrib import MaskablePPO
from stable_baselines3 import A2C, PPO
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import SharedRolloutCollector
from rlightning_ray.pettingzoo import RaySharedRolloutCollector
from rlightning_sb3 import set_acting_seed, start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")


# a0 lives the episode (truncated at 6); a1 joins at 1, terminated at 3; a2 joins at 2,
# truncated at 5; a1 waits at step 2, a2 at step 3 (their masks allow nothing)
SCHEDULE = [(0, 6, "truncated"), (1, 3, "terminated"), (2, 5, "truncated")]
WAITS = frozenset({(1, 2), (2, 3)})


def _env_fns(copies: range, partial_masks: bool) -> list[Any]:
    return [partial(ENVS.ScheduleEnv, SCHEDULE, copy, WAITS, partial_masks) for copy in copies]


def _model(algo: Any, n_envs: int) -> Any:
    env = DummyVecEnv([ENVS.AgentSlot] * n_envs)
    extra = {"batch_size": 4 * n_envs, "n_epochs": 2} if algo is not A2C else {}
    model = algo("MlpPolicy", env, n_steps=8, seed=0, device="cpu", **extra)
    start_training(model, total_timesteps=10_000)
    return model


# PPO and MaskablePPO here, A2C in the two-runner test: every algorithm exact, one runner
# process (seconds: torch and SB3 are imported) fewer
@pytest.mark.parametrize("algo", [PPO, MaskablePPO], ids=lambda a: a.__name__)
def test_one_runner_fills_the_in_process_collectors_buffer(local_ray: None, algo: Any) -> None:
    """1 runner of 2 copies == SharedRolloutCollector over the same 2 copies, two rollouts."""
    masked = algo is MaskablePPO
    n_envs, seeds, acting_seed = 3, [7, 8], 11
    # in process: acting and training share the global generators; the runner's acting
    # stream runs on undisturbed by the learner's training (saved and restored here)
    ref = _model(algo, n_envs)
    inproc = SharedRolloutCollector(ref, _env_fns(range(2), masked), seeds=seeds)
    set_acting_seed(acting_seed)
    ref_segments = [inproc.collect()]
    ref_buffers = [_buffer(ref)]
    acting = rng_state()
    set_random_seed(99)
    ref.train()
    restore_rng(acting)
    ref_segments.append(inproc.collect())
    ref_buffers.append(_buffer(ref))

    model = _model(algo, n_envs)
    collector = RaySharedRolloutCollector(
        model,
        _env_fns(range(2), masked),
        n_runners=1,
        seeds=seeds,
        acting_seeds=[acting_seed],
        num_cpus=0.5,
    )
    try:
        segments = [collector.collect()]
        buffers = [_buffer(model)]
        set_random_seed(99)
        model.train()  # the second rollout acts with these weights (republished)
        segments.append(collector.collect())
        buffers.append(_buffer(model))
    finally:
        collector.close()
    for k in range(2):
        _assert_equal(buffers[k], ref_buffers[k], f"rollout {k}")
        assert segments[k] == ref_segments[k]
    assert {s.end for s in segments[0] + segments[1]} >= {"terminated", "truncated", "cut"}
    assert model.num_timesteps == ref.num_timesteps == 2 * 8 * n_envs
    assert episodes(model) == episodes(ref) and episodes(model)
    assert collector.dropped == inproc.dropped
    assert {a: list(r) for a, r in collector.agent_returns.items()} == {
        a: list(r) for a, r in inproc.agent_returns.items()
    }
    # the second rollout acted with the trained weights: its values differ from untrained ones
    assert not np.array_equal(buffers[1]["values"], ref_buffers[0]["values"])


def test_two_runners_fill_their_columns_as_in_process(local_ray: None) -> None:
    """2 runners x 2 copies: runner r's columns == the in-process collector over its copies."""
    n_envs, seeds, acting_seeds = 4, [3, 4, 5, 6], [21, 22]
    model = _model(A2C, n_envs)
    collector = RaySharedRolloutCollector(
        model,
        _env_fns(range(4), False),
        n_runners=2,
        copies_per_runner=2,
        seeds=seeds,
        acting_seeds=acting_seeds,
        num_cpus=0.5,
    )
    try:
        segments = [collector.collect()]
        buffers = [_buffer(model)]
        weights = [{k: v.clone() for k, v in model.policy.state_dict().items()}]
        set_random_seed(99)
        model.train()
        weights.append({k: v.clone() for k, v in model.policy.state_dict().items()})
        segments.append(collector.collect())
        buffers.append(_buffer(model))
    finally:
        collector.close()
    assert model.num_timesteps == 2 * 8 * n_envs
    for r in range(2):
        ref = _model(A2C, 2)
        copies = range(2 * r, 2 * r + 2)
        inproc = SharedRolloutCollector(
            ref, _env_fns(copies, False), seeds=seeds[2 * r : 2 * r + 2]
        )
        set_acting_seed(acting_seeds[r])
        for k in range(2):
            ref.policy.load_state_dict(weights[k])
            ref_segments = inproc.collect()
            cols = slice(2 * r, 2 * r + 2)
            block = {name: array[:, cols] for name, array in buffers[k].items()}
            # returns and advantages hold the learner's bootstraps (the critic over all 4
            # columns' observations in one batch, the reference's over 2: not bitwise alike)
            _assert_equal(block, _buffer(ref), f"runner {r}, rollout {k}", CLOSE)
            mine = [s for s in segments[k] if 2 * r <= s.column < 2 * r + 2]
            assert_segments_moved(mine, ref_segments, 2 * r, 2 * r, f"runner {r}, rollout {k}")


def test_arguments_are_checked_before_any_runner_starts(local_ray: None) -> None:
    model = _model(PPO, 2)
    fns = _env_fns(range(2), False)
    with pytest.raises(ValueError, match="exactly one of env_fns"):
        RaySharedRolloutCollector(model)
    with pytest.raises(ValueError, match="exactly one of env_fns"):
        RaySharedRolloutCollector(model, fns, env_fn=fns[0])
    with pytest.raises(ValueError, match=r"env_fns holds 2 functions.*need 4"):
        RaySharedRolloutCollector(model, fns, n_runners=2, copies_per_runner=2)
    with pytest.raises(ValueError, match="3 env_fns cannot be split into 2 runners"):
        RaySharedRolloutCollector(model, fns + fns[:1], n_runners=2)
    with pytest.raises(ValueError, match="n_envs=2 buffer columns cannot be split into 3"):
        RaySharedRolloutCollector(model, env_fn=fns[0], n_runners=3)
    with pytest.raises(ValueError, match=r"seeds must hold one seed per env copy \(2\), got 1"):
        RaySharedRolloutCollector(model, fns, seeds=[0])
    with pytest.raises(ValueError, match=r"acting_seeds must hold one seed per runner \(1\)"):
        RaySharedRolloutCollector(model, fns, acting_seeds=[0, 1])
    with pytest.raises(TypeError, match="env function of copy 1 must be callable"):
        RaySharedRolloutCollector(model, [fns[0], "env"])  # type: ignore[list-item]
    with pytest.raises(TypeError, match="n_runners must be an int count"):
        RaySharedRolloutCollector(model, fns, n_runners=1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs an on-policy SB3 model"):
        RaySharedRolloutCollector(object(), fns)  # type: ignore[arg-type]


def test_a_recurrent_model_is_refused(local_ray: None) -> None:
    from sb3_contrib import RecurrentPPO

    model = RecurrentPPO("MlpLstmPolicy", DummyVecEnv([ENVS.AgentSlot]), n_steps=8, device="cpu")
    with pytest.raises(TypeError, match="does not support recurrent models"):
        RaySharedRolloutCollector(model, _env_fns(range(1), False))


def test_a_runner_that_fails_to_build_is_named(local_ray: None) -> None:
    model = _model(PPO, 2)
    with pytest.raises(
        RuntimeError,
        match=r"(?s)runner 'pz-runner-0' failed to build.*needs a PettingZoo ParallelEnv",
    ):
        RaySharedRolloutCollector(model, env_fn=not_parallel, num_cpus=0.5)


class _BoxSlot(gym.Env[Any, Any]):
    observation_space = ENVS.OBS
    action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return np.zeros(4, np.float32), {}


def test_gsde_is_refused(local_ray: None) -> None:
    model = PPO(
        "MlpPolicy", DummyVecEnv([_BoxSlot]), n_steps=8, batch_size=8, use_sde=True, device="cpu"
    )
    with pytest.raises(ValueError, match=r"does not support gSDE \(use_sde=True\)"):
        RaySharedRolloutCollector(model, _env_fns(range(1), False))
