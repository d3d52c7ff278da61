"""The differential parity fuzzer's pieces: generated envs, models, layouts and the case counter.

Every test in ``tests/parity`` draws a :class:`Case` with hypothesis (``st.data()`` and the
strategies the ``gen`` fixture holds), builds two identical SB3 models on two identical VecEnvs
of :class:`GenEnv`, runs SB3's own code on one and the adapter + buffer helpers on the other,
and compares the results exactly.

``GenEnv`` is a tiny real ``gymnasium.Env`` parameterised by its observation and action spaces,
its reward kind (ints or dyadic floats, so float32 and float64 hold the same values), its
termination probability and (through ``TimeLimit``) its episode length. Everything it returns
comes from its own ``np_random``, so two envs reset with the same seed return the same
observations whatever actions they receive; every action it receives is checked with
``action_space.contains`` and recorded.

Hypothesis profiles (``RLIGHTNING_PARITY_PROFILE``): ``short`` (the default; derandomized, so
every CI run draws the same cases; 200 examples per test, the whole directory in about 1.5 minutes
on two cores) and ``long`` (random, 8000 examples per test: ``tox -e parity-long``, over 30
minutes on two cores);
``RLIGHTNING_PARITY_EXAMPLES`` overrides either profile's examples per test. The number of cases
run, per test and per dimension, is printed at the end of the session and, when
``RLIGHTNING_PARITY_COUNTS`` names a file, written there as JSON.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from gymnasium.wrappers import TimeLimit
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import (
    DummyVecEnv,
    VecFrameStack,
    VecMonitor,
    VecNormalize,
    VecTransposeImage,
)

th.set_num_threads(1)  # tiny networks on a shared 2-core machine

PROFILE = os.environ.get("RLIGHTNING_PARITY_PROFILE", "short")
_SUPPRESS = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
settings.register_profile(
    "rlightning-parity-short",
    max_examples=200,
    deadline=None,
    derandomize=True,
    suppress_health_check=_SUPPRESS,
    print_blob=True,
)
settings.register_profile(
    "rlightning-parity-long",
    max_examples=8000,
    deadline=None,
    derandomize=False,
    suppress_health_check=_SUPPRESS,
    print_blob=True,
)
if PROFILE not in ("short", "long"):
    raise ValueError(f"RLIGHTNING_PARITY_PROFILE must be 'short' or 'long', got {PROFILE!r}")
# The test modules read this with settings.get_profile("rlightning-parity") at import time
# (conftest.py is imported first); the global profile of other test directories is untouched.
_EXAMPLES = os.environ.get("RLIGHTNING_PARITY_EXAMPLES")  # overrides the profile's max_examples
settings.register_profile(
    "rlightning-parity",
    settings.get_profile(f"rlightning-parity-{PROFILE}"),
    **({"max_examples": int(_EXAMPLES)} if _EXAMPLES else {}),
)

IMAGE_SIDE = 36  # the smallest input SB3's NatureCNN accepts
TOTAL = 10_000  # the "learn" budget both sides announce (schedules read it)
RNG_SEED = 7

# ---------------------------------------------------------------------------- spaces


def make_action_space(spec: tuple[Any, ...]) -> spaces.Space[Any]:
    """Build a fresh action space from its hashable description (see :func:`action_specs`)."""
    kind = spec[0]
    if kind == "discrete":
        return spaces.Discrete(spec[1], start=spec[2])
    if kind == "multidiscrete":
        return spaces.MultiDiscrete(np.array(spec[1]), start=np.array(spec[2]))
    if kind == "multibinary":
        return spaces.MultiBinary(spec[1])
    if kind == "box":
        _, low, high, dtype = spec
        return spaces.Box(np.array(low, dtype), np.array(high, dtype), dtype=np.dtype(dtype))
    raise ValueError(spec)


def _box_specs(dtypes: tuple[str, ...]) -> st.SearchStrategy[tuple[Any, ...]]:
    @st.composite
    def build(draw: st.DrawFn) -> tuple[Any, ...]:
        dim = draw(st.integers(1, 3))
        lows = draw(st.lists(st.integers(-8, 4), min_size=dim, max_size=dim))
        widths = draw(st.lists(st.integers(1, 8), min_size=dim, max_size=dim))
        scale = draw(st.sampled_from([0.25, 0.5, 1.0, 4.0]))
        dtype = draw(st.sampled_from(dtypes))
        low = tuple(float(lo) * scale for lo in lows)
        high = tuple(lo + w * scale for lo, w in zip(low, widths, strict=True))
        if np.dtype(dtype).kind == "i":
            low, high = (
                tuple(int(v) for v in lows),
                tuple(lo + w for lo, w in zip(lows, widths, strict=True)),
            )
        return ("box", low, high, dtype)

    return build()


def action_specs(
    kinds: tuple[str, ...], *, starts: bool = True, box_dtypes: tuple[str, ...] = ("float32",)
) -> st.SearchStrategy[tuple[Any, ...]]:
    """Hashable action-space descriptions of the given kinds.

    ``starts``: Discrete/MultiDiscrete may have a non-zero ``start``. ``box_dtypes``: the Box
    dtypes drawn (integer dtypes give integer bounds).
    """
    start = st.integers(-3, 3) if starts else st.just(0)
    options: list[st.SearchStrategy[tuple[Any, ...]]] = []
    if "discrete" in kinds:
        options.append(st.tuples(st.just("discrete"), st.integers(2, 5), start))
    if "multidiscrete" in kinds:
        options.append(
            st.integers(1, 3).flatmap(
                lambda n: st.tuples(
                    st.just("multidiscrete"),
                    st.lists(st.integers(2, 4), min_size=n, max_size=n).map(tuple),
                    st.lists(start, min_size=n, max_size=n).map(tuple),
                )
            )
        )
    if "multibinary" in kinds:
        options.append(st.tuples(st.just("multibinary"), st.integers(1, 4)))
    if "box" in kinds:
        options.append(_box_specs(box_dtypes))
    return st.one_of(options)


# ---------------------------------------------------------------------------- the env


@dataclass(frozen=True)
class EnvSpec:
    """What a :class:`GenEnv` is: its spaces, rewards and episode lengths."""

    obs: str  # "box", "dict", "image" or "discrete"
    action: tuple[Any, ...]  # see make_action_space
    reward: str  # "int", "float" (dyadic) or "float-any"
    terminate_p: float
    max_steps: int
    masks: bool = False  # action_masks() for MaskablePPO


class GenEnv(gym.Env[Any, Any]):
    """A generated env: observations and rewards drawn from its own RNG, actions checked.

    Args:
        spec: The spaces, reward kind and episode lengths.
        strict: Raise ``ValueError`` (naming the space) for an action outside the action space
            or the current mask; otherwise only record it in ``outside``.
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, spec: EnvSpec, strict: bool) -> None:
        self.spec_ = spec
        self.strict = strict
        self.action_space = make_action_space(spec.action)
        vec = spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.observation_space = {
            "box": lambda: vec,
            "dict": lambda: spaces.Dict({"vec": vec, "pos": spaces.Discrete(4)}),
            "image": lambda: spaces.Box(0, 255, (IMAGE_SIDE, IMAGE_SIDE, 1), np.uint8),
            "discrete": lambda: spaces.Discrete(5),
        }[spec.obs]()
        self.received: list[Any] = []
        self.rewards: list[float | int] = []  # as step returned them, before any VecEnv
        self.outside: list[Any] = []
        self._t = 0

    def _obs(self) -> Any:
        rng = self.np_random
        if self.spec_.obs == "box":
            return rng.uniform(-1, 1, 3).astype(np.float32)
        if self.spec_.obs == "dict":
            return {"vec": rng.uniform(-1, 1, 3).astype(np.float32), "pos": int(rng.integers(4))}
        if self.spec_.obs == "image":
            return rng.integers(0, 256, (IMAGE_SIDE, IMAGE_SIDE, 1), dtype=np.uint8)
        return int(rng.integers(5))

    def action_masks(self) -> np.ndarray:
        """A mask that changes every step and leaves a legal choice in every sub-space."""
        space = self.action_space
        if isinstance(space, spaces.Discrete):
            blocks = [int(space.n)]
        elif isinstance(space, spaces.MultiDiscrete):
            blocks = [int(n) for n in space.nvec]
        elif isinstance(space, spaces.MultiBinary):
            blocks = [2] * int(space.n)
        else:
            raise TypeError(f"masks need a discrete action space, got {space}")
        rng = np.random.default_rng((self._t, sum(blocks)))
        rows = []
        for n in blocks:
            row = rng.random(n) < 0.6
            row[rng.integers(n)] = True
            rows.append(row)
        return np.concatenate(rows)

    def _mask_allows(self, action: Any) -> bool:
        mask = self.action_masks()
        space = self.action_space
        flat = np.ravel(np.asarray(action)).astype(np.int64)
        if isinstance(space, spaces.Discrete):
            return bool(mask[int(flat[0]) - int(space.start)])
        if isinstance(space, spaces.MultiDiscrete):
            offsets = np.concatenate([[0], np.cumsum(space.nvec)[:-1]])
            return bool(mask[offsets + flat - space.start].all())
        return bool(mask[2 * np.arange(flat.size) + flat].all())

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        self._t = 0
        return self._obs(), {}

    def step(self, action: Any) -> Any:
        self.received.append(np.array(action, copy=True))
        inside = self.action_space.contains(action)
        if inside and self.spec_.masks:
            inside = self._mask_allows(action)
        if not inside:
            self.outside.append(np.array(action, copy=True))
            if self.strict:
                raise ValueError(
                    f"action {action!r} (dtype {np.asarray(action).dtype}) is outside "
                    f"{self.action_space}" + (" or its mask" if self.spec_.masks else "")
                )
        self._t += 1
        rng = self.np_random
        if self.spec_.reward == "int":
            reward: float | int = int(rng.integers(-3, 4))
        elif self.spec_.reward == "float":  # dyadic: float32 and float64 hold the same value
            reward = float(rng.integers(-16, 17)) / 8
        else:  # "float-any": what float32 rounds (DummyVecEnv returns it rounded)
            reward = float(rng.normal(0, 10))
        self.rewards.append(reward)
        terminated = bool(rng.random() < self.spec_.terminate_p)
        return self._obs(), reward, terminated, False, {}


def make_venv(
    spec: EnvSpec, n_envs: int, seed: int, strict: bool, monitor: bool = True
) -> DummyVecEnv:
    """``n_envs`` Monitor(TimeLimit(GenEnv)) in a DummyVecEnv, seeded ``seed, seed+1, ...``.

    ``monitor=False`` leaves out ``Monitor`` (for SB3's ``VecMonitor``).
    """

    def factory() -> gym.Env[Any, Any]:
        env = TimeLimit(GenEnv(spec, strict), max_episode_steps=spec.max_steps)
        return Monitor(env) if monitor else env

    venv = DummyVecEnv([factory] * n_envs)
    venv.seed(seed)
    return venv


# ---------------------------------------------------------------------------- VecEnv wrappers


#: The wrappers :func:`wrapper_specs` draws, and the observation kinds each fits: for Dict
#: observations ``VecNormalize`` normalizes only the Box key ``"vec"``, for Discrete ones no
#: observation (SB3's ``VecNormalize`` refuses to normalize anything but a Box), and images are
#: not normalized; ``VecFrameStack`` stacks Box and image observations.
WRAPPER_OBSERVATIONS: dict[str, tuple[str, ...]] = {
    "none": ("box", "dict", "image", "discrete"),
    "monitor": ("box", "dict", "image", "discrete"),
    "normalize": ("box", "dict", "discrete"),
    "frame_stack": ("box", "image"),
    "normalize+frame_stack": ("box",),
    "transpose": ("image",),
}


def wrapper_specs(kind: str, obs: str) -> st.SearchStrategy[tuple[Any, ...]]:
    """Hashable descriptions of SB3 VecEnv wrappers of ``kind`` for observations ``obs``.

    ``("none",)``; ``("monitor",)`` (``VecMonitor`` instead of ``Monitor``); ``("normalize",
    norm_obs, norm_reward, clip_obs, clip_reward)`` (``VecNormalize``); ``("frame_stack",
    n_stack)`` (``VecFrameStack``); ``("normalize+frame_stack", norm_obs, norm_reward,
    clip_obs, clip_reward, n_stack)`` (``VecNormalize`` over ``VecFrameStack``, SB3's order);
    ``("transpose", n_stack)`` (images: ``VecTransposeImage`` over ``VecFrameStack``, given
    explicitly, which SB3 otherwise adds itself). See :data:`WRAPPER_OBSERVATIONS`.
    """
    assert obs in WRAPPER_OBSERVATIONS[kind], (kind, obs)
    normalize = st.tuples(
        st.just(False) if obs == "discrete" else st.booleans(),
        st.booleans(),
        st.sampled_from((10.0, 0.5)),
        st.sampled_from((10.0, 0.3)),
    )
    stack = st.integers(2, 3)
    if kind == "normalize":
        return normalize.map(lambda t: ("normalize", *t))
    if kind == "normalize+frame_stack":
        return st.tuples(normalize, stack).map(lambda t: (kind, *t[0], t[1]))
    if kind == "frame_stack":
        return stack.map(lambda n: ("frame_stack", n))
    if kind == "transpose":
        return st.integers(1, 2).map(lambda n: ("transpose", n))
    return st.just((kind,))


def make_wrapped_venv(
    spec: EnvSpec, n_envs: int, seed: int, strict: bool, wrapper: tuple[Any, ...]
) -> Any:
    """:func:`make_venv` wrapped as ``wrapper`` describes (see :func:`wrapper_specs`)."""
    kind = wrapper[0]
    venv: Any = make_venv(spec, n_envs, seed, strict, monitor=kind != "monitor")
    if kind == "monitor":
        return VecMonitor(venv)
    if kind in ("frame_stack", "transpose"):
        venv = VecFrameStack(venv, n_stack=wrapper[1])
        return VecTransposeImage(venv) if kind == "transpose" else venv
    if kind == "normalize+frame_stack":
        venv = VecFrameStack(venv, n_stack=wrapper[5])
    if kind.startswith("normalize"):
        _, norm_obs, norm_reward, clip_obs, clip_reward = wrapper[:5]
        return VecNormalize(
            venv,
            norm_obs=norm_obs,
            norm_reward=norm_reward,
            clip_obs=clip_obs,
            clip_reward=clip_reward,
            norm_obs_keys=["vec"] if spec.obs == "dict" else None,
        )
    assert kind == "none", wrapper
    return venv


def gen_envs(venv: Any) -> list[GenEnv]:
    """The GenEnv inside each env of ``venv`` (under SB3's VecEnv wrappers)."""
    return list(venv.get_attr("unwrapped"))


# ---------------------------------------------------------------------------- models


def policy_kwargs(obs: str, recurrent: bool = False) -> dict[str, Any]:
    """Tiny networks: ``net_arch=[8]``, an 8-feature CNN, a 4-unit LSTM."""
    kwargs: dict[str, Any] = {"net_arch": [8]}
    if obs == "image":
        kwargs["features_extractor_kwargs"] = {"features_dim": 8}
    if recurrent:
        kwargs["lstm_hidden_size"] = 4
    return kwargs


def policy_name(obs: str, recurrent: bool = False) -> str:
    base = {"box": "Mlp", "discrete": "Mlp", "dict": "MultiInput", "image": "Cnn"}[obs]
    return f"{base}{'Lstm' if recurrent else ''}Policy"


def build_model(algo: str, venv: Any, obs: str, seed: int) -> Any:
    """A tiny untrained model of ``algo`` on ``venv`` for act/predict (DQN explores half the time).

    ``algo``: ppo, a2c, recurrent_ppo, maskable_ppo, dqn, sac, td3 or ddpg.
    """
    contrib = pytest.importorskip("sb3_contrib")
    recurrent = algo == "recurrent_ppo"
    kwargs: dict[str, Any] = {
        "seed": seed,
        "device": "cpu",
        "policy_kwargs": policy_kwargs(obs, recurrent),
    }
    if algo in ("dqn", "sac", "td3", "ddpg"):
        kwargs.update(buffer_size=8, learning_starts=0)
    else:
        kwargs["n_steps"] = 4
        if algo != "a2c":
            kwargs["batch_size"] = 4 * venv.num_envs
    cls = {
        "ppo": PPO,
        "a2c": A2C,
        "recurrent_ppo": contrib.RecurrentPPO,
        "maskable_ppo": contrib.MaskablePPO,
        "dqn": DQN,
        "sac": SAC,
        "td3": TD3,
        "ddpg": DDPG,
    }[algo]
    model = cls(policy_name(obs, recurrent), venv, **kwargs)
    if algo == "dqn":
        model.exploration_rate = 0.5
    return model


# ---------------------------------------------------------------------------- inputs


def reward_forms(kind: str) -> list[str]:
    """How the adapter side passes the rewards on.

    The VecEnv's float32 rewards as a list or an array of another dtype (all holding the same
    values), or (``raw-``) the env's own rewards before ``DummyVecEnv`` rounded them to float32,
    as ``SubprocVecEnv`` would return them (float64).
    """
    floats = ["list-float", "float32", "float64"]
    if kind == "int":
        return ["list-int", "int32", "int64", "raw-list", *floats]
    if kind == "float-any":
        return ["raw-list", "raw-float64", *floats]
    return floats


def as_reward_form(rewards: np.ndarray, form: str, venv: Any) -> Any:
    """The step's rewards as ``form`` (see :func:`reward_forms`) for the envs of ``venv``."""
    if form.startswith("raw-"):
        raw = [env.rewards[-1] for env in gen_envs(venv)]
        return raw if form == "raw-list" else np.array(raw, np.float64)
    if form == "list-int":
        return [int(r) for r in rewards]
    if form == "list-float":
        return [float(r) for r in rewards]
    return rewards.astype(np.dtype(form))


LAYOUTS = ("c", "fortran", "strided", "negative", "byteswapped", "readonly")


def with_layout(value: Any, layout: str) -> Any:
    """The same values in another memory layout (a dict: every array of it)."""
    if isinstance(value, dict):
        return {k: with_layout(v, layout) for k, v in value.items()}
    arr = np.asarray(value)
    if layout == "c":
        return np.ascontiguousarray(arr)
    if layout == "fortran":
        return np.asfortranarray(arr)
    if arr.ndim == 0 and layout in ("strided", "negative"):
        return arr.copy()  # a scalar has no axis to stride along
    if layout == "strided":
        wide = np.zeros((arr.shape[0] * 2, *arr.shape[1:]), arr.dtype)
        wide[::2] = arr
        return wide[::2]
    if layout == "negative":
        return arr[::-1].copy()[::-1]
    if layout == "byteswapped":
        if arr.dtype.itemsize == 1:
            return arr.copy()
        return arr.astype(arr.dtype.newbyteorder())
    if layout == "readonly":
        out = arr.copy()
        out.flags.writeable = False
        return out
    raise ValueError(layout)


# ---------------------------------------------------------------------------- comparisons


def seed_global_rngs() -> None:
    th.manual_seed(RNG_SEED)
    np.random.seed(RNG_SEED)


def _as_arrays(value: Any) -> dict[str, np.ndarray]:
    if isinstance(value, dict):
        return {k: np.asarray(v) for k, v in value.items()}
    return {"": np.asarray(value)}


def assert_fields_equal(a: Any, b: Any, fields: tuple[str, ...]) -> None:
    """Exact equality (shape, dtype, every value; NaN equal to NaN) of each named field."""
    for name in fields:
        ours = _as_arrays(getattr(b, name))
        for key, x in _as_arrays(getattr(a, name)).items():
            y = ours[key]
            label = f"{name}{'[' + key + ']' if key else ''}"
            np.testing.assert_array_equal(x, y, err_msg=label, strict=True)


def assert_received_equal(sb3_envs: list[GenEnv], our_envs: list[GenEnv]) -> None:
    """Both sides' envs received the same actions (values, dtypes, shapes), step by step."""
    for i, (a, b) in enumerate(zip(sb3_envs, our_envs, strict=True)):
        assert len(a.received) == len(b.received), i
        for t, (x, y) in enumerate(zip(a.received, b.received, strict=True)):
            np.testing.assert_array_equal(x, y, err_msg=f"env {i} step {t}", strict=True)


def note_episode_ends(case: dict[str, Any], dones: np.ndarray, infos: list[dict[str, Any]]) -> None:
    """Record in ``case["ends"]`` how episodes ended this step ("terminated", "truncated")."""
    ends = case.setdefault("ends", set())
    for done, info in zip(dones, infos, strict=True):
        if done:
            ends.add("truncated" if info.get("TimeLimit.truncated") else "terminated")


@dataclass
class CaseCounter:
    """Cases run, per test and per dimension value (printed and written at session end)."""

    counts: Counter[str] = field(default_factory=Counter)

    def count(self, test: str, **dims: Any) -> None:
        self.counts[test] += 1
        for name, value in dims.items():
            self.counts[f"{test} | {name}={value}"] += 1


_COUNTER = CaseCounter()


@pytest.fixture(scope="session")
def gen() -> SimpleNamespace:
    """The fuzzer's pieces as a namespace (see this module's docstring)."""
    return SimpleNamespace(
        EnvSpec=EnvSpec,
        GenEnv=GenEnv,
        make_venv=make_venv,
        wrapper_specs=wrapper_specs,
        WRAPPER_OBSERVATIONS=WRAPPER_OBSERVATIONS,
        make_wrapped_venv=make_wrapped_venv,
        gen_envs=gen_envs,
        action_specs=action_specs,
        make_action_space=make_action_space,
        policy_kwargs=policy_kwargs,
        policy_name=policy_name,
        build_model=build_model,
        reward_forms=reward_forms,
        as_reward_form=as_reward_form,
        LAYOUTS=LAYOUTS,
        with_layout=with_layout,
        seed_global_rngs=seed_global_rngs,
        assert_fields_equal=assert_fields_equal,
        assert_received_equal=assert_received_equal,
        count=_COUNTER.count,
        note_episode_ends=note_episode_ends,
        TOTAL=TOTAL,
    )


Count = Callable[..., None]


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Print the parity cases run (total per test, then per dimension value)."""
    if not _COUNTER.counts:
        return
    terminalreporter.section(f"parity cases run (profile {PROFILE})")
    for key in sorted(_COUNTER.counts):
        terminalreporter.write_line(f"{_COUNTER.counts[key]:7d}  {key}")
    path = os.environ.get("RLIGHTNING_PARITY_COUNTS")
    if path:
        with open(path, "w", encoding="utf-8") as out:
            json.dump({"profile": PROFILE, "counts": dict(sorted(_COUNTER.counts.items()))}, out)
        terminalreporter.write_line(f"case counts written to {path}")
