"""RayAECRolloutCollector: the in-process AEC collector's buffers, from Ray runners.

The oracle is ``rlightning_pettingzoo.AECRolloutCollector`` (itself checked against env logs and
SB3's GAE in tests/pettingzoo/test_aec_collector.py): over the same copies of PettingZoo's real
``tictactoe_v3``, reset seeds, opponents, weights and torch seed, the learner's MaskablePPO
buffer (one runner), or each runner's block of columns (two runners), equals the in-process
collector's, array for array, over two rollouts with ``model.train()`` between (the weights
republished): in self-play, against ``"random"`` and against a frozen model (sent as its SB3
save bytes, loaded in the runner).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3
from rlightning_ray_test_helpers import (  # conftest.py loads it; runners never import this
    # module (what they are sent is importable, or pickled by value)
    assert_buffers_equal,
    assert_same_rollouts,
    two_rollouts,
)
from sb3_contrib import MaskablePPO
from stable_baselines3 import PPO
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import AECRolloutCollector
from rlightning_ray.pettingzoo import RayAECRolloutCollector
from rlightning_sb3 import set_acting_seed, start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

FIELDS = ("actions", "rewards", "returns", "episode_starts", "values", "log_probs")
FIELDS += ("advantages",)
#: What holds the learner's bootstraps (its critic batches all columns, a runner's reference
#: only the runner's): the rewards of rows a rollout cuts, the returns and the advantages.
CLOSE = ("rewards", "returns", "advantages")


class Seat(gym.Env[Any, Any]):
    """One tictactoe seat's spaces, for the model's VecEnv (sizes the buffer; never stepped)."""

    def __init__(self) -> None:
        env = tictactoe_v3.env()
        self.observation_space = env.observation_space("player_1")
        self.action_space = env.action_space("player_1")

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("Seat is never stepped")


def _model(n_envs: int, seed: int = 0, started: bool = True) -> MaskablePPO:
    model = MaskablePPO(
        "MultiInputPolicy",
        DummyVecEnv([Seat] * n_envs),
        n_steps=8,
        batch_size=4 * n_envs,
        n_epochs=2,
        seed=seed,
        device="cpu",
        policy_kwargs={"net_arch": [16]},
    )
    if started:
        start_training(model, total_timesteps=10_000)
    return model


def _env_fns(n: int) -> list[Any]:
    return [tictactoe_v3.env] * n


def _opponents(kind: str) -> dict[str, Any] | None:
    if kind == "self-play":
        return None
    if kind == "random":
        return {"player_2": "random"}
    return {"player_2": _model(1, seed=5, started=False)}  # frozen: never trained here


def _buffer(model: Any, columns: slice = slice(None)) -> dict[str, np.ndarray]:
    buf = model.rollout_buffer
    out = {name: np.array(getattr(buf, name)[:, columns]) for name in FIELDS}
    for key, array in buf.observations.items():
        out[f"observations/{key}"] = np.array(array[:, columns])
    masks = buf.action_masks.reshape(buf.buffer_size, buf.n_envs, -1)
    out["action_masks"] = np.array(masks[:, columns])
    return out


@pytest.mark.parametrize("kind", ["self-play", "random", "frozen"])
def test_one_runner_fills_the_in_process_collectors_buffer(local_ray: None, kind: str) -> None:
    """1 runner of 2 copies == AECRolloutCollector over the same 2 copies, two rollouts."""
    n_envs, seeds, acting_seed = 2, [7, 8], 11
    opponents = _opponents(kind)
    ref = _model(n_envs)
    inproc = AECRolloutCollector(ref, _env_fns(2), opponents=opponents, seeds=seeds)
    want = two_rollouts(inproc, ref, _buffer, acting_seed)
    model = _model(n_envs)
    collector = RayAECRolloutCollector(
        model,
        _env_fns(2),
        opponents=opponents,
        seeds=seeds,
        acting_seeds=[acting_seed],
        num_cpus=0.5,
    )
    got = two_rollouts(collector, model, _buffer, None)
    assert_same_rollouts(got, want, (collector, inproc), (model, ref))
    assert {s.end for s in got[0][0] + got[0][1]} >= {"terminated", "cut"}
    trained = {"player_1", "player_2"} if opponents is None else {"player_1"}
    assert {s.agent_id for s in got[0][0]} == trained


def test_two_runners_fill_their_columns_as_in_process(local_ray: None) -> None:
    """2 runners x 2 copies vs random: runner r's columns == in process over its copies."""
    n_envs, seeds, acting_seeds = 4, [3, 4, 5, 6], [21, 22]
    opponents = {"player_1": "random"}  # the trained seat moves second
    model = _model(n_envs)
    collector = RayAECRolloutCollector(
        model,
        env_fn=tictactoe_v3.env,
        opponents=opponents,
        n_runners=2,
        copies_per_runner=2,
        seeds=seeds,
        acting_seeds=acting_seeds,
        num_cpus=0.5,
    )
    try:
        segments, buffers, weights = [], [], []
        for _ in range(2):
            weights.append({k: v.clone() for k, v in model.policy.state_dict().items()})
            segments.append(collector.collect())
            buffers.append(_buffer(model))
            set_random_seed(99)
            model.train()
    finally:
        collector.close()
    for r in range(2):
        ref = _model(2)
        inproc = AECRolloutCollector(
            ref, _env_fns(2), opponents=opponents, seeds=seeds[2 * r : 2 * r + 2]
        )
        set_acting_seed(acting_seeds[r])
        for k in range(2):
            ref.policy.load_state_dict(weights[k])
            ref_segments = inproc.collect()
            cols = slice(2 * r, 2 * r + 2)
            block = {name: array[:, cols] for name, array in buffers[k].items()}
            assert_buffers_equal(block, _buffer(ref), f"runner {r}, rollout {k}", CLOSE)
            mine = [s for s in segments[k] if 2 * r <= s.column < 2 * r + 2]
            # runner r's segments are the reference's, its columns and copies shifted by 2 r
            shift = {"column": -2 * r, "env_index": -2 * r}
            assert [
                dataclasses.replace(s, **{f: getattr(s, f) + d for f, d in shift.items()})
                for s in mine
            ] == ref_segments


def test_an_unstarted_model_is_refused_before_any_runner_steps(local_ray: None) -> None:
    """collect() refuses first; the runner's copies are then where they started."""
    model = _model(2, started=False)
    collector = RayAECRolloutCollector(model, _env_fns(2), seeds=[1, 2], acting_seeds=[3])
    try:
        with pytest.raises(ValueError, match="start_training"):
            collector.collect()
        start_training(model, total_timesteps=10_000)
        collector.collect()
        got = _buffer(model)
    finally:
        collector.close()
    ref = _model(2)
    inproc = AECRolloutCollector(ref, _env_fns(2), seeds=[1, 2])
    set_acting_seed(3)
    inproc.collect()
    assert_buffers_equal(got, _buffer(ref), "after the refusal")


def test_refusals_are_named_before_any_runner_steps(local_ray: None) -> None:
    model = _model(2)
    fns = _env_fns(2)
    with pytest.raises(ValueError, match="exactly one of env_fns"):
        RayAECRolloutCollector(model)
    with pytest.raises(ValueError, match=r"seeds must hold one seed per env copy \(2\), got 1"):
        RayAECRolloutCollector(model, fns, seeds=[0])
    with pytest.raises(ValueError, match="n_envs=2 buffer columns cannot be split into 3"):
        RayAECRolloutCollector(model, env_fn=fns[0], n_runners=3)
    with pytest.raises(TypeError, match="timeout_s must be None"):
        RayAECRolloutCollector(model, fns, timeout_s="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs an on-policy SB3 model"):
        RayAECRolloutCollector(object(), fns)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="opponents must be a mapping"):
        RayAECRolloutCollector(model, fns, opponents=["random"])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"opponents\['player_2'\] must be .* got the string"):
        RayAECRolloutCollector(model, fns, opponents={"player_2": "greedy"})
    with pytest.raises(TypeError, match=r"opponents\['player_2'\] must be .* got int"):
        RayAECRolloutCollector(model, fns, opponents={"player_2": 3})
    with pytest.raises(ValueError, match=r"opponents\['player_2'\] is the trained model itself"):
        RayAECRolloutCollector(model, fns, opponents={"player_2": model})
    # a RecurrentPPO trained model and RecurrentPPO opponents are accepted:
    # tests/ray/test_pz_aec_recurrent.py


class _Box(gym.Env[Any, Any]):
    observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
    action_space = gym.spaces.Discrete(9)


def test_an_opponent_whose_spaces_misfit_fails_the_runners_build(local_ray: None) -> None:
    """What only the envs can tell (an opponent's spaces) fails the runner's build, named."""
    model = _model(2)
    misfit = PPO("MlpPolicy", DummyVecEnv([_Box]), n_steps=8, batch_size=8, device="cpu")
    with pytest.raises(
        RuntimeError,
        match=r"(?s)runner 'pz-runner-0' failed to build.*"
        r"opponents\['player_2'\]: agent 'player_2'.*but the model \(PPO\)",
    ):
        RayAECRolloutCollector(model, _env_fns(2), opponents={"player_2": misfit}, num_cpus=0.5)
