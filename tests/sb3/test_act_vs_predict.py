"""``SB3PolicyAdapter.act`` against SB3's own ``predict``, per algorithm; masks per row; spaces
SB3 would map to numbers outside the env's space (refused at construction)."""

from __future__ import annotations

import re
import warnings
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import sb3_contrib as contrib
import torch as th
from gymnasium import spaces
from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3
from stable_baselines3.common.env_util import make_vec_env

from rlightning_sb3 import SB3PolicyAdapter

NET = {"net_arch": [8]}
SQUASHED_SDE = {"use_sde": True, "policy_kwargs": {"squash_output": True, **NET}}
IDS = ["e0", "e1", "e2"]

# algorithm -> (class, action kind of the tiny env, extra kwargs)
ALGORITHMS: dict[str, tuple[Any, str, dict[str, Any]]] = {
    "ppo": (PPO, "box", {"n_steps": 8, "batch_size": 24}),
    "ppo-squashed-sde": (
        PPO,
        "box",
        {"n_steps": 8, "batch_size": 24, **SQUASHED_SDE},
    ),
    "a2c": (A2C, "multidiscrete", {"n_steps": 8}),
    "trpo": (contrib.TRPO, "box", {"n_steps": 8, "batch_size": 24}),
    "recurrent-ppo": (contrib.RecurrentPPO, "box", {"n_steps": 8, "batch_size": 24}),
    "recurrent-ppo-squashed-sde": (
        contrib.RecurrentPPO,
        "box",
        {"n_steps": 8, "batch_size": 24, **SQUASHED_SDE},
    ),
    "maskable-ppo": (contrib.MaskablePPO, "discrete", {"n_steps": 8, "batch_size": 24}),
    "sac": (SAC, "box", {"learning_starts": 0}),
    "td3": (TD3, "box", {"learning_starts": 0}),
    "ddpg": (DDPG, "box", {"learning_starts": 0}),
    "tqc": (contrib.TQC, "box", {"learning_starts": 0}),
    "crossq": (contrib.CrossQ, "box", {"learning_starts": 0}),
    "dqn": (DQN, "discrete", {"learning_starts": 0}),
    "qrdqn": (contrib.QRDQN, "discrete", {"learning_starts": 0}),
}


def _model(name: str, tiny: Any) -> Any:
    cls, action, kwargs = ALGORITHMS[name]
    kwargs = {"policy_kwargs": dict(NET), **kwargs}
    env = make_vec_env(tiny.env_id("flat", action), n_envs=len(IDS), seed=0)
    policy = "MlpLstmPolicy" if cls is contrib.RecurrentPPO else "MlpPolicy"
    return cls(policy, env, seed=0, **kwargs)


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_act_without_exploration_equals_deterministic_predict(name: str, tiny: Any) -> None:
    model = _model(name, tiny)
    model.policy.set_training_mode(False)
    adapter = SB3PolicyAdapter(model)
    rng = np.random.default_rng(0)
    for _ in range(3):
        batch = rng.uniform(-3, 3, (len(IDS), 2)).astype(np.float32)
        expected, _ = model.predict(batch, deterministic=True)
        got = adapter.act(batch, IDS, episode_start=np.ones(len(IDS), bool), explore=False)
        np.testing.assert_array_equal(adapter.env_actions(got), expected)
        assert all(model.action_space.contains(a) for a in adapter.env_actions(got))


@pytest.mark.parametrize("name", ["dqn", "qrdqn"])
@pytest.mark.parametrize("epsilon", [0.0, 0.5, 1.0])
def test_dqn_exploration_equals_predict_with_epsilon(name: str, epsilon: float, tiny: Any) -> None:
    model = _model(name, tiny)
    model.exploration_rate = epsilon
    adapter = SB3PolicyAdapter(model)
    batches = [np.full((len(IDS), 2), i / 4, np.float32) for i in range(8)]
    np.random.seed(5)
    model.action_space.seed(5)
    expected = [model.predict(b, deterministic=False)[0] for b in batches]
    np.random.seed(5)
    model.action_space.seed(5)
    for batch, want in zip(batches, expected, strict=True):
        responses = adapter.act(batch, IDS)
        np.testing.assert_array_equal(adapter.env_actions(responses), want)
        np.testing.assert_array_equal(np.stack([r.buffer_action for r in responses]), want)


@pytest.fixture
def maskable(tiny: Any) -> Any:
    env = make_vec_env(tiny.env_id("flat", "multidiscrete"), n_envs=len(IDS), seed=0)
    return contrib.MaskablePPO("MlpPolicy", env, n_steps=8, seed=0, policy_kwargs=dict(NET))


def test_maskable_masks_for_a_subset_of_rows(maskable: Any) -> None:
    batch = maskable.get_env().reset()
    adapter = SB3PolicyAdapter(maskable)
    only_first = np.array([False, False, True, True, True])  # first sub-action must be 2
    rows = [None, only_first, None]
    full = np.ones((3, 5), bool)
    full[1] = only_first
    th.manual_seed(1)
    got = adapter.act(batch, IDS, action_masks=rows)
    th.manual_seed(1)
    want = adapter.act(batch, IDS, action_masks=full)
    np.testing.assert_array_equal(adapter.env_actions(got), adapter.env_actions(want))
    np.testing.assert_array_equal(np.stack([r.action_mask for r in got]), full)
    for _ in range(20):
        assert adapter.env_actions(adapter.act(batch, IDS, action_masks=rows))[1, 0] == 2
    # a call covering a subset of the envs takes that subset's masks
    sub = adapter.act(batch[1:], IDS[1:], action_masks=[only_first, None], explore=False)
    expected, _ = maskable.predict(batch[1:], deterministic=True, action_masks=full[1:])
    np.testing.assert_array_equal(adapter.env_actions(sub), expected)


@pytest.mark.parametrize(
    ("rows", "message", "rule"),
    [
        ([None, None], "action_masks must have one row (or None) per env: 3 for", ""),
        (
            [None, np.ones(4, bool), None],
            "action_masks['e1'] must have shape (5,), not (4,)",
            "[rule action-mask]",
        ),
        (
            [None, None, np.full(5, 2)],
            "action_masks['e2'] must hold only booleans or exactly 0 and 1: element [0] = 2"
            " is neither",
            "[rule action-mask]",
        ),
        (
            [None, np.array([0, 0, 0, 1, 1]), None],
            "action_masks['e1'] allows no value in dimension 0 of MultiDiscrete([3 2])"
            " (flat entries [0:3]), so no action",
            "[rule no-legal-action]",
        ),
    ],
)
def test_maskable_per_row_mask_errors(
    maskable: Any, rows: list[Any], message: str, rule: str
) -> None:
    batch = maskable.get_env().reset()
    with pytest.raises(ValueError, match=f"(?s){re.escape(message)}.*{re.escape(rule)}"):
        SB3PolicyAdapter(maskable).act(batch, IDS, action_masks=rows)


class _SpaceEnv(gym.Env[Any, Any]):
    def __init__(self, action_space: Any, observation_space: Any) -> None:
        self.action_space = action_space
        self.observation_space = observation_space

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> Any:
        return self.observation_space.sample(), 0.0, False, False, {}


FLAT = spaces.Box(-1, 1, (2,), np.float32)


@pytest.mark.parametrize(
    ("cls", "action_space", "observation_space", "message"),
    [
        (PPO, spaces.Discrete(3, start=-1), FLAT, "action space Discrete(3, start=-1) has a"),
        (DQN, spaces.Discrete(3, start=1), FLAT, "action space Discrete(3, start=1) has a"),
        (
            PPO,
            spaces.MultiDiscrete([3, 2], start=[1, 0]),
            FLAT,
            "action space MultiDiscrete([3 2], start=[1 0]) has a non-zero start",
        ),
        (PPO, spaces.Box(0, 9, (2,), np.int64), FLAT, "has a non-float dtype int64"),
        (SAC, spaces.Box(0, 9, (2,), np.int32), FLAT, "has a non-float dtype int32"),
        (
            PPO,
            spaces.Discrete(2),
            spaces.Discrete(4, start=1),
            "observation space Discrete(4, start=1) has a non-zero start",
        ),
        (
            PPO,
            spaces.Discrete(2),
            spaces.Dict({"a": FLAT, "b": spaces.MultiDiscrete([2, 3], start=[0, -1])}),
            "observation space key 'b', MultiDiscrete([2 3], start=[ 0 -1]), has a non-zero",
        ),
    ],
)
def test_spaces_sb3_would_map_outside_the_env_space_are_refused(
    cls: Any, action_space: Any, observation_space: Any, message: str
) -> None:
    policy = "MultiInputPolicy" if isinstance(observation_space, spaces.Dict) else "MlpPolicy"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SB3's own warnings about the unsupported space
        model = cls(policy, _SpaceEnv(action_space, observation_space), seed=0)
    with pytest.raises(ValueError, match=re.escape(message)):
        SB3PolicyAdapter(model)
