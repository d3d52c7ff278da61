"""RaySharedRolloutCollector: the in-process shared collector's buffers, from Ray runners.

The oracle is ``rlightning_pettingzoo.SharedRolloutCollector`` (itself checked cell by cell
against env logs and SB3 in tests/pettingzoo): over the same copies, reset seeds, weights and
torch seed, the learner's buffer (one runner), or each runner's block of columns (two runners),
equals the in-process collector's, array for array, over two rollouts with ``model.train()``
between (the weights republished), on an env whose agents join, die (terminated and
truncated) and wait (masks allowing nothing).
"""

from __future__ import annotations

import importlib.util
import sys
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import ray
from rlightning_ray_test_helpers import (  # conftest.py loads it; runners never import this
    # module (what they are sent is importable, or pickled by value)
    assert_buffers_equal,
    assert_same_rollouts,
    two_rollouts,
)
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import A2C, PPO
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import SharedRolloutCollector
from rlightning_ray.pettingzoo import RaySharedRolloutCollector
from rlightning_sb3 import set_acting_seed, start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")


def _load_envs() -> ModuleType:
    path = Path(__file__).resolve().parents[1] / "pettingzoo" / "collector_envs.py"
    spec = importlib.util.spec_from_file_location("rlightning_ray_test_pz_collector_envs", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    ray.cloudpickle.register_pickle_by_value(module)  # the runners need not import tests
    return module


ENVS = _load_envs()
# a0 lives the episode (truncated at 6); a1 joins at 1, terminated at 3; a2 joins at 2,
# truncated at 5; a1 waits at step 2, a2 at step 3 (their masks allow nothing)
SCHEDULE = [(0, 6, "truncated"), (1, 3, "terminated"), (2, 5, "truncated")]
WAITS = frozenset({(1, 2), (2, 3)})
FIELDS = ("observations", "actions", "rewards", "returns", "episode_starts", "values")
FIELDS += ("log_probs", "advantages")
CLOSE = ("returns", "advantages")


def _env_fns(copies: range, partial_masks: bool) -> list[Any]:
    return [partial(ENVS.ScheduleEnv, SCHEDULE, copy, WAITS, partial_masks) for copy in copies]


#: RecurrentRolloutBuffer's stored LSTM states, (n_steps, n_lstm_layers, n_envs, hidden) each
STATES = ("hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf")


def _model(algo: Any, n_envs: int) -> Any:
    env = DummyVecEnv([ENVS.AgentSlot] * n_envs)
    extra: dict[str, Any] = {"batch_size": 4 * n_envs, "n_epochs": 2} if algo is not A2C else {}
    policy = "MlpPolicy"
    if algo is RecurrentPPO:
        policy, extra["policy_kwargs"] = "MlpLstmPolicy", {"net_arch": [8], "lstm_hidden_size": 4}
    model = algo(policy, env, n_steps=8, seed=0, device="cpu", **extra)
    start_training(model, total_timesteps=10_000)
    return model


def _buffer(model: Any, columns: slice = slice(None)) -> dict[str, np.ndarray]:
    buf = model.rollout_buffer
    names = FIELDS + (("action_masks",) if hasattr(buf, "action_masks") else ())
    out = {name: np.array(getattr(buf, name)[:, columns]) for name in names}
    if "action_masks" in out:
        out["action_masks"] = np.array(buf.action_masks.reshape(buf.buffer_size, buf.n_envs, -1))[
            :, columns
        ]
    if hasattr(buf, "hidden_states_pi"):  # RecurrentPPO: the columns are axis 2
        out.update({name: np.array(getattr(buf, name)[:, :, columns]) for name in STATES})
    return out


# PPO, MaskablePPO and RecurrentPPO here, A2C in the two-runner test: every algorithm exact,
# one runner process (seconds: torch and SB3 are imported) fewer. RecurrentPPO: each runner's
# replica carries its agents' LSTM states from one rollout to the next, as in process
@pytest.mark.parametrize("algo", [PPO, MaskablePPO, RecurrentPPO], ids=lambda a: a.__name__)
def test_one_runner_fills_the_in_process_collectors_buffer(local_ray: None, algo: Any) -> None:
    """1 runner of 2 copies == SharedRolloutCollector over the same 2 copies, two rollouts."""
    masked = algo is MaskablePPO
    n_envs, seeds, acting_seed = 3, [7, 8], 11
    ref = _model(algo, n_envs)
    inproc = SharedRolloutCollector(ref, _env_fns(range(2), masked), seeds=seeds)
    want = two_rollouts(inproc, ref, _buffer, acting_seed)
    model = _model(algo, n_envs)
    collector = RaySharedRolloutCollector(
        model, _env_fns(range(2), masked), seeds=seeds, acting_seeds=[acting_seed], num_cpus=0.5
    )
    got = two_rollouts(collector, model, _buffer, None)
    assert_same_rollouts(got, want, (collector, inproc), (model, ref))
    assert {s.end for s in got[0][0] + got[0][1]} >= {"terminated", "truncated", "cut"}
    if algo is RecurrentPPO:  # rollout 1's first rows act from states rollout 0 left
        assert np.any(got[1][1]["hidden_states_pi"][0] != 0)


@pytest.mark.parametrize("algo", [A2C, RecurrentPPO], ids=lambda a: a.__name__)
def test_two_runners_fill_their_columns_as_in_process(local_ray: None, algo: Any) -> None:
    """2 runners x 2 copies: runner r's columns == the in-process collector over its copies."""
    n_envs, seeds, acting_seeds = 4, [3, 4, 5, 6], [21, 22]
    model = _model(algo, n_envs)
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
        ref = _model(algo, 2)
        copies = range(2 * r, 2 * r + 2)
        inproc = SharedRolloutCollector(
            ref, _env_fns(copies, False), seeds=seeds[2 * r : 2 * r + 2]
        )
        set_acting_seed(acting_seeds[r])
        for k in range(2):
            ref.policy.load_state_dict(weights[k])
            ref_segments = inproc.collect()
            cols = slice(2 * r, 2 * r + 2)
            block = {
                name: array[:, :, cols] if name in STATES else array[:, cols]
                for name, array in buffers[k].items()
            }
            # returns and advantages hold the learner's bootstraps (the critic over all 4
            # columns' observations in one batch, the reference's over 2: not bitwise alike)
            assert_buffers_equal(block, _buffer(ref), f"runner {r}, rollout {k}", CLOSE)
            mine = [s for s in segments[k] if 2 * r <= s.column < 2 * r + 2]
            assert len(mine) == len(ref_segments)
            for got, want in zip(mine, ref_segments, strict=True):
                assert got.column - 2 * r == want.column
                assert got.env_index - 2 * r == want.env_index
                assert (got.start_row, got.stop_row, got.agent_id, got.end) == (
                    want.start_row,
                    want.stop_row,
                    want.agent_id,
                    want.end,
                )
                assert got.env_steps == want.env_steps


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


def test_a_runner_that_fails_to_build_is_named(local_ray: None) -> None:
    model = _model(PPO, 2)
    with pytest.raises(
        RuntimeError,
        match=r"(?s)runner 'pz-runner-0' failed to build.*needs a PettingZoo ParallelEnv",
    ):
        RaySharedRolloutCollector(model, env_fn=ENVS.AgentSlot, num_cpus=0.5)  # a gymnasium env


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
