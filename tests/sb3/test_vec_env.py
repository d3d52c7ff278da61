"""``rlightning_sb3.vec_env``: SB3's automatic ``VecTransposeImage``, checked against SB3 itself.

The oracle is ``BaseAlgorithm._wrap_env`` (whether a model built with an env wraps it) and the
``VecTransposeImage`` it builds (what its ``reset``/``step_wait`` return for the raw outputs of
the same envs, stepped side by side in a plain ``DummyVecEnv``).
"""

from __future__ import annotations

import copy
import re
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from gymnasium import spaces
from stable_baselines3 import PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.vec_env import DummyVecEnv, VecTransposeImage

from rlightning_sb3.vec_env import ImageTranspose, image_transpose, transposes_images

SPACES: dict[str, spaces.Space[Any]] = {
    "hwc": spaces.Box(0, 255, (8, 8, 3), np.uint8),
    "chw": spaces.Box(0, 255, (3, 8, 8), np.uint8),
    "float image": spaces.Box(0, 255, (8, 8, 3), np.float32),
    "vector": spaces.Box(-1, 1, (5,), np.float32),
    "dict hwc": spaces.Dict(
        {"image": spaces.Box(0, 255, (6, 4, 1), np.uint8), "v": spaces.Box(-1, 1, (2,))}
    ),
    "dict chw": spaces.Dict({"image": spaces.Box(0, 255, (1, 6, 4), np.uint8)}),
}


class SpaceEnv(gym.Env[Any, np.int64]):
    """Random observations of a given space, episodes of 3 steps (truncated)."""

    action_space = spaces.Discrete(2)

    def __init__(self, space: spaces.Space[Any]) -> None:
        self.observation_space = copy.deepcopy(space)  # its own sampler
        self.t = 0

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        self.observation_space.seed(int(self.np_random.integers(1 << 30)))
        self.t = 0
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.t += 1
        return self.observation_space.sample(), 0.0, False, self.t >= 3, {}


def _venv(space: spaces.Space[Any]) -> DummyVecEnv:
    venv = DummyVecEnv([lambda: SpaceEnv(space), lambda: SpaceEnv(space)])
    venv.seed(0)
    return venv


@pytest.mark.parametrize("name", sorted(SPACES))
def test_transposes_images_is_sb3s_wrap_env_rule(name: str) -> None:
    space = SPACES[name]
    wrapped = BaseAlgorithm._wrap_env(_venv(space))
    assert transposes_images(space) == isinstance(wrapped, VecTransposeImage)
    transpose = ImageTranspose.for_space(space)
    assert (transpose is None) == (not isinstance(wrapped, VecTransposeImage))
    if transpose is not None:
        assert transpose.observation_space == wrapped.observation_space


@pytest.mark.parametrize("name", ["hwc", "dict hwc"])
def test_image_transpose_returns_what_vec_transpose_image_returns(name: str) -> None:
    space = SPACES[name]
    sb3, raw = VecTransposeImage(_venv(space)), _venv(space)
    transpose = ImageTranspose(space)
    _assert_same(transpose.observations(raw.reset()), sb3.reset())
    ended = 0
    for _ in range(4):
        actions = np.zeros(2, dtype=np.int64)
        expected = sb3.step(actions)
        obs, _, dones, infos = raw.step(actions)
        _assert_same(transpose.observations(obs), expected[0])
        got_infos = transpose.infos(dones, infos)
        for got, want in zip(got_infos, expected[3], strict=True):
            if "terminal_observation" in want:
                ended += 1
                _assert_same(got["terminal_observation"], want["terminal_observation"])
    assert ended == 2


def test_image_transpose_of_a_model_is_the_one_sb3_applied() -> None:
    image_model = PPO("MlpPolicy", _venv(SPACES["hwc"]), n_steps=4, batch_size=8)
    transpose = image_transpose(image_model)
    assert transpose is not None
    assert transpose.observation_space == image_model.observation_space
    vector_model = PPO("MlpPolicy", _venv(SPACES["vector"]), n_steps=4, batch_size=8)
    assert image_transpose(vector_model) is None


def test_a_space_sb3_does_not_transpose_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("SB3 does not wrap an env of observation")):
        ImageTranspose(SPACES["chw"])


def _assert_same(got: Any, want: Any) -> None:
    if isinstance(want, dict):
        assert set(got) == set(want)
        for key in want:
            np.testing.assert_array_equal(got[key], want[key], err_msg=key, strict=True)
    else:
        np.testing.assert_array_equal(got, want, strict=True)


def test_unapplied_wrappers_lists_the_wrappers_envs_stepped_elsewhere_lack() -> None:
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import (
        VecCheckNan,
        VecFrameStack,
        VecMonitor,
        VecNormalize,
    )

    from rlightning_sb3.vec_env import unapplied_wrappers

    def ppo(env: Any) -> PPO:
        return PPO("MlpPolicy", env, n_steps=4, batch_size=4, device="cpu")

    base = make_vec_env("CartPole-v1", n_envs=1, seed=0)
    assert unapplied_wrappers(ppo(base)) == []
    assert unapplied_wrappers(ppo(VecCheckNan(VecMonitor(base)))) == []
    stacked = VecFrameStack(VecNormalize(make_vec_env("CartPole-v1", n_envs=1, seed=0)), 2)
    assert unapplied_wrappers(ppo(stacked)) == ["VecFrameStack", "VecNormalize"]
    image = ppo(_venv(SPACES["hwc"]))
    assert isinstance(image.get_env(), VecTransposeImage)
    assert unapplied_wrappers(image) == []
