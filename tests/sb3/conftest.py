"""Shared pieces of the SB3 adapter tests: tiny real envs and the parity harness.

``TinyEnv`` is a small real gymnasium env (registered below as ``RLTiny-<obs>-<action>-v0``)
with flat, Dict or image observations and Discrete, Box, MultiDiscrete or MultiBinary actions,
an 8-step time limit (so truncation happens), random termination, and ``action_masks()`` for
MaskablePPO. Its ``step`` refuses actions outside the space (and, with ``check_masks=True``,
outside the current mask), so a test that runs it checks the actions it was given.

The parity harness runs SB3's own ``collect_rollouts`` on one model and the adapter loop
(``SB3PolicyAdapter.act`` + the buffer helpers) on a second model built the same way, from the
same seeds, then compares the buffers and, after ``model.train()``, the parameters.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3 import DQN, PPO, SAC
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from stable_baselines3.common.type_aliases import TrainFreq, TrainFrequencyUnit

from rlightning_sb3 import (
    SB3PolicyAdapter,
    add_replay_step,
    add_rollout_step,
    finish_rollout,
    start_training,
)

th.set_num_threads(1)  # tiny networks on a shared 2-core machine

IMAGE_SIDE = 36  # the smallest input SB3's NatureCNN accepts


def action_space_of(kind: str) -> spaces.Space[Any]:
    return {
        "discrete": spaces.Discrete(3),
        "box": spaces.Box(
            low=np.array([-2.0, 0.0], np.float32), high=np.array([3.0, 0.5], np.float32)
        ),
        "multidiscrete": spaces.MultiDiscrete([3, 2]),
        "multibinary": spaces.MultiBinary(3),
    }[kind]


class TinyEnv(gym.Env[Any, Any]):
    """A two-number random walk the actions push around; observations flat, dict or image."""

    metadata: ClassVar[dict[str, Any]] = {"render_modes": ["rgb_array"]}

    def __init__(
        self,
        obs: str = "flat",
        action: str = "discrete",
        check_masks: bool = False,
        render_mode: str | None = None,
    ) -> None:
        self.render_mode = render_mode
        self.obs_kind = obs
        self.check_masks = check_masks
        self.action_space = action_space_of(action)
        vec = spaces.Box(-1.0, 1.0, (2,), np.float32)
        if obs == "flat":
            self.observation_space = vec
        elif obs == "dict":
            self.observation_space = spaces.Dict({"vec": vec, "mode": spaces.Discrete(3)})
        elif obs == "image":
            self.observation_space = spaces.Box(0, 255, (IMAGE_SIDE, IMAGE_SIDE, 1), np.uint8)
        else:
            raise ValueError(obs)
        self._x = np.zeros(2, np.float32)
        self._t = 0

    def _obs(self) -> Any:
        if self.obs_kind == "flat":
            return self._x.copy()
        if self.obs_kind == "dict":
            return {"vec": self._x.copy(), "mode": int(self._t % 3)}
        img = np.zeros((IMAGE_SIDE, IMAGE_SIDE, 1), np.uint8)
        row = int((self._x[0] + 1) / 2 * (IMAGE_SIDE - 1))
        col = int((self._x[1] + 1) / 2 * (IMAGE_SIDE - 1))
        img[row, :, 0] = 255
        img[:, col, 0] = 128
        return img

    def action_masks(self) -> np.ndarray:
        """A mask that changes every step and always leaves a valid choice in each sub-space."""
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            mask = np.ones(space.n, bool)
            mask[self._t % space.n] = False
        elif isinstance(space, spaces.MultiDiscrete):
            mask = np.ones(int(space.nvec.sum()), bool)
            mask[self._t % int(space.nvec[0])] = False
            mask[int(space.nvec[0]) + (self._t % 2)] = False
        elif isinstance(space, spaces.MultiBinary):
            mask = np.ones(2 * space.n, bool)
            mask[2 * (self._t % space.n)] = False  # sub-space t: "0" not allowed
        else:
            raise TypeError("masks need a discrete action space")
        return mask

    def _mask_allows(self, action: Any) -> bool:
        mask = self.action_masks()
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            return bool(mask[int(action)])
        if isinstance(space, spaces.MultiDiscrete):
            offsets = np.concatenate([[0], np.cumsum(space.nvec)[:-1]])
            return bool(all(mask[o + int(a)] for o, a in zip(offsets, action, strict=True)))
        return bool(all(mask[2 * i + int(a)] for i, a in enumerate(action)))

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self._x = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        if not self.action_space.contains(np.asarray(action, dtype=self.action_space.dtype)):
            raise ValueError(f"action {action!r} is outside {self.action_space}")
        if self.check_masks and not self._mask_allows(action):
            raise ValueError(f"action {action!r} violates the mask {self.action_masks()}")
        push = float(np.tanh(np.sum(np.asarray(action, dtype=np.float32)) - 1.0))
        noise = self.np_random.normal(0, 0.05, 2)
        self._x = np.clip(self._x + 0.2 * push + noise, -1, 1).astype(np.float32)
        self._t += 1
        reward = float(1.0 - np.abs(self._x).sum())
        terminated = bool(self.np_random.random() < 0.08)
        return self._obs(), reward, terminated, False, {}


OBS_KINDS = ("flat", "dict", "image")
ACTION_KINDS = ("discrete", "box", "multidiscrete", "multibinary")


def tiny_id(obs: str, action: str) -> str:
    return f"RLTiny-{obs}-{action}-v0"


for _obs in OBS_KINDS:
    for _act in ACTION_KINDS:
        if tiny_id(_obs, _act) not in gym.registry:
            gym.register(
                tiny_id(_obs, _act),
                entry_point=TinyEnv,
                max_episode_steps=8,
                kwargs={"obs": _obs, "action": _act},
            )


def policy_for(obs: str) -> str:
    return {"flat": "MlpPolicy", "dict": "MultiInputPolicy", "image": "CnnPolicy"}[obs]


SMALL_CNN = {"features_extractor_kwargs": {"features_dim": 16}, "net_arch": [16]}

# ---------------------------------------------------------------------------- parity harness

TOTAL = 10_000  # the "learn" budget both sides announce (schedules read it)
RNG_SEED = 7

ON_POLICY_FIELDS = (
    "observations",
    "actions",
    "rewards",
    "episode_starts",
    "values",
    "log_probs",
    "advantages",
    "returns",
)
RECURRENT_FIELDS = ("hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf")
OFF_POLICY_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


def _seed_global_rngs() -> None:
    th.manual_seed(RNG_SEED)
    np.random.seed(RNG_SEED)


def _snapshot(buffer: Any) -> Any:
    return copy.deepcopy(buffer)


def sb3_on_policy(model: BaseAlgorithm, rollouts: int) -> list[Any]:
    """SB3's own loop: ``learn``'s body, rollout by rollout; returns a buffer copy per rollout."""
    _, callback = model._setup_learn(TOTAL, callback=None)
    callback.on_training_start(locals(), globals())
    _seed_global_rngs()
    snapshots = []
    for _ in range(rollouts):
        assert model.collect_rollouts(
            model.get_env(), callback, model.rollout_buffer, model.n_steps
        )
        model._update_current_progress_remaining(model.num_timesteps, TOTAL)
        snapshots.append(_snapshot(model.rollout_buffer))
        model.train()
    return snapshots


def adapter_on_policy(
    model: BaseAlgorithm,
    rollouts: int,
    masks: bool = False,
    env_ids: list[str] | None = None,
    shuffle: bool = False,
) -> list[Any]:
    """The same loop built only from the adapter and the helpers."""
    obs = start_training(model, TOTAL)
    _seed_global_rngs()
    env = model.get_env()
    ids = env_ids or [f"env-{i}" for i in range(env.num_envs)]
    adapter = SB3PolicyAdapter(model)
    starts = np.ones(env.num_envs, dtype=bool)
    order_rng = np.random.default_rng(0)
    snapshots = []
    for _ in range(rollouts):
        for _ in range(model.n_steps):
            kwargs: dict[str, Any] = {"episode_start": starts}
            if masks:
                kwargs["action_masks"] = np.stack(env.env_method("action_masks"))
            responses = adapter.act(obs, ids, **kwargs)
            if shuffle:  # responses may arrive in any order: env_ids restores the env order
                responses = [responses[i] for i in order_rng.permutation(len(responses))]
            new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, ids))
            add_rollout_step(model, obs, responses, rewards, dones, infos, env_ids=ids)
            obs, starts = new_obs, dones
        finish_rollout(model, obs, dones, responses=responses, env_ids=ids)
        snapshots.append(_snapshot(model.rollout_buffer))
        model.train()
    return snapshots


def sb3_off_policy(model: BaseAlgorithm, steps: int, gradient_steps: int = 2) -> Any:
    _, callback = model._setup_learn(TOTAL, callback=None)
    callback.on_training_start(locals(), globals())
    _seed_global_rngs()
    rollout = model.collect_rollouts(
        model.get_env(),
        callback,
        TrainFreq(steps, TrainFrequencyUnit.STEP),
        model.replay_buffer,
        model.action_noise,
        model.learning_starts,
    )
    assert rollout.continue_training
    snapshot = _snapshot(model.replay_buffer)
    model.train(gradient_steps=gradient_steps, batch_size=model.batch_size)
    return snapshot


def adapter_off_policy(
    model: BaseAlgorithm, steps: int, gradient_steps: int = 2, split: bool = False
) -> Any:
    obs = start_training(model, TOTAL)
    _seed_global_rngs()
    env = model.get_env()
    ids = [f"env-{i}" for i in range(env.num_envs)]
    adapter = SB3PolicyAdapter(model)
    for _ in range(steps):
        responses = adapter.act(obs, ids)
        if split:  # per-env responses (the ResponseBatch split): the helpers' general path
            responses = list(responses)
        new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses))
        add_replay_step(model, obs, responses, new_obs, rewards, dones, infos)
        obs = new_obs
    snapshot = _snapshot(model.replay_buffer)
    model.train(gradient_steps=gradient_steps, batch_size=model.batch_size)
    return snapshot


def _as_arrays(value: Any) -> dict[str, np.ndarray]:
    if isinstance(value, dict):
        return {k: np.asarray(v) for k, v in value.items()}
    return {"": np.asarray(value)}


def assert_buffers_equal(a: Any, b: Any, fields: tuple[str, ...]) -> None:
    """Exact array equality (shape, dtype, every bit) of each named buffer field."""
    for name in fields:
        for key, x in _as_arrays(getattr(a, name)).items():
            y = _as_arrays(getattr(b, name))[key]
            label = f"{name}{'[' + key + ']' if key else ''}"
            assert x.dtype == y.dtype, (label, x.dtype, y.dtype)
            assert x.shape == y.shape, (label, x.shape, y.shape)
            np.testing.assert_array_equal(x, y, err_msg=label, strict=True)


def _flatten_params(tree: Any, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(tree, dict):
        for k, v in tree.items():
            out.update(_flatten_params(v, f"{prefix}/{k}"))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            out.update(_flatten_params(v, f"{prefix}/{i}"))
    else:
        out[prefix] = tree
    return out


def assert_params_equal(a: BaseAlgorithm, b: BaseAlgorithm) -> None:
    """Every parameter and optimizer state tensor of the two models is bitwise equal."""
    pa, pb = _flatten_params(a.get_parameters()), _flatten_params(b.get_parameters())
    assert pa.keys() == pb.keys()
    n_tensors = 0
    for key, x in pa.items():
        y = pb[key]
        if isinstance(x, th.Tensor):
            assert th.equal(x, y), key
            n_tensors += 1
        else:
            assert x == y, key
    assert n_tensors > 0
    for name in ("num_timesteps", "_n_updates", "_episode_num"):
        assert getattr(a, name) == getattr(b, name), name
    if hasattr(a, "log_ent_coef"):
        assert th.equal(a.log_ent_coef, b.log_ent_coef)
    if hasattr(a, "exploration_rate"):
        assert a.exploration_rate == b.exploration_rate


@pytest.fixture
def parity() -> SimpleNamespace:
    """The parity harness, as a namespace of functions (see this module's docstring)."""
    return SimpleNamespace(
        sb3_on_policy=sb3_on_policy,
        adapter_on_policy=adapter_on_policy,
        sb3_off_policy=sb3_off_policy,
        adapter_off_policy=adapter_off_policy,
        assert_buffers_equal=assert_buffers_equal,
        assert_params_equal=assert_params_equal,
        ON_POLICY_FIELDS=ON_POLICY_FIELDS,
        RECURRENT_FIELDS=RECURRENT_FIELDS,
        OFF_POLICY_FIELDS=OFF_POLICY_FIELDS,
    )


@pytest.fixture
def tiny() -> SimpleNamespace:
    """Tiny env helpers: ``tiny.env_id(obs, action)``, ``tiny.policy(obs)``, kinds, CNN kwargs."""
    return SimpleNamespace(
        env_id=tiny_id,
        policy=policy_for,
        OBS_KINDS=OBS_KINDS,
        ACTION_KINDS=ACTION_KINDS,
        SMALL_CNN=SMALL_CNN,
        action_space=action_space_of,
    )


Factory = Callable[[], BaseAlgorithm]


# ----------------------------------------------------- small adapters, built once per test module
# Each builds its own policy_kwargs: SB3 adds keys (use_sde) to the dict it is given.


@pytest.fixture(scope="module")
def ppo1_adapter() -> SB3PolicyAdapter:
    env = make_vec_env("CartPole-v1", n_envs=1, seed=0)
    return SB3PolicyAdapter(
        PPO("MlpPolicy", env, n_steps=8, batch_size=8, seed=0, policy_kwargs={"net_arch": [8]})
    )


@pytest.fixture(scope="module")
def ppo2_adapter() -> SB3PolicyAdapter:
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    return SB3PolicyAdapter(
        PPO("MlpPolicy", env, n_steps=4, batch_size=8, seed=0, policy_kwargs={"net_arch": [8]})
    )


@pytest.fixture(scope="module")
def sac2_adapter() -> SB3PolicyAdapter:
    env = make_vec_env("Pendulum-v1", n_envs=2, seed=0)
    return SB3PolicyAdapter(
        SAC("MlpPolicy", env, learning_starts=0, seed=0, policy_kwargs={"net_arch": [8]})
    )


@pytest.fixture(scope="module")
def dict_ppo_adapter() -> SB3PolicyAdapter:
    env = make_vec_env("RLTiny-dict-discrete-v0", n_envs=1, seed=0)  # tests/sb3/conftest.py
    return SB3PolicyAdapter(
        PPO(
            "MultiInputPolicy",
            env,
            n_steps=8,
            batch_size=8,
            seed=0,
            policy_kwargs={"net_arch": [8]},
        )
    )


@pytest.fixture(scope="module")
def recurrent_adapter() -> SB3PolicyAdapter:
    sb3_contrib = pytest.importorskip("sb3_contrib")
    kwargs = {"lstm_hidden_size": 4, "net_arch": [4]}
    model = sb3_contrib.RecurrentPPO(
        "MlpLstmPolicy", "CartPole-v1", n_steps=8, seed=0, policy_kwargs=kwargs
    )
    return SB3PolicyAdapter(model)


@pytest.fixture(scope="module")
def maskable_adapter() -> SB3PolicyAdapter:
    sb3_contrib = pytest.importorskip("sb3_contrib")
    model = sb3_contrib.MaskablePPO(
        "MlpPolicy", "RLTiny-flat-discrete-v0", n_steps=8, seed=0, policy_kwargs={"net_arch": [4]}
    )
    return SB3PolicyAdapter(model)


@pytest.fixture
def cartpole2() -> Callable[[str], BaseAlgorithm]:
    """Factory of fresh tiny models on 2 CartPole envs (seed 0, CPU): ``cartpole2("ppo")``
    (n_steps=4) or ``cartpole2("dqn")`` (learning_starts=0, buffer_size=50)."""

    def make(algo: str) -> BaseAlgorithm:
        env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
        kwargs: dict[str, Any] = {"seed": 0, "device": "cpu", "policy_kwargs": {"net_arch": [8]}}
        if algo == "ppo":
            return PPO("MlpPolicy", env, n_steps=4, batch_size=8, **kwargs)
        return DQN("MlpPolicy", env, learning_starts=0, buffer_size=50, **kwargs)

    return make


class DropoutExtractor(BaseFeaturesExtractor):
    """Flatten + heavy dropout: the policy's outputs depend on train vs eval mode."""

    def __init__(self, observation_space: gym.spaces.Box) -> None:
        super().__init__(observation_space, features_dim=int(np.prod(observation_space.shape)))
        self.flatten = th.nn.Flatten()
        self.dropout = th.nn.Dropout(p=0.9)

    def forward(self, observations: th.Tensor) -> th.Tensor:
        return self.dropout(self.flatten(observations))


@pytest.fixture
def dropout_extractor() -> type[BaseFeaturesExtractor]:
    """A features extractor whose output depends on train/eval mode (``policy_kwargs``)."""
    return DropoutExtractor
