"""What the Ray PettingZoo collector tests share: the envs, the buffer arrays, the comparison.

Loaded (and pickled by value) by conftest as ``rlightning_ray_test_pz_checks`` where PettingZoo
is installed; ``collector_envs`` (``ScheduleEnv``, ``AgentSlot``: tests/pettingzoo) is loaded
here once and pickled by value too, so the runners need not import tests.
"""

from __future__ import annotations

import importlib
import importlib.util
import random
import sys
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import ray
import torch as th
from gymnasium import spaces
from stable_baselines3.common.utils import set_random_seed


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
FIELDS = ("observations", "actions", "rewards", "returns", "episode_starts", "values")
FIELDS += ("log_probs", "advantages")
#: The arrays that hold the learner's bootstraps: its critic batches all runners' columns, an
#: in-process reference one runner's (other batch shapes: not bitwise alike).
CLOSE = ("returns", "advantages")
#: RecurrentRolloutBuffer's stored LSTM states, ``(n_steps, n_lstm_layers, n_envs, hidden)``
#: each: their columns are axis 2.
STATES = ("hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf")


#: The replay-buffer arrays the replay collectors' tests compare.
REPLAY_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
#: ``BoxScheduleEnv``'s action space.
BOX = spaces.Box(-1.0, 1.0, (2,), np.float32)


class BoxScheduleEnv(ENVS.ScheduleEnv):  # type: ignore[misc, name-defined]
    """``ScheduleEnv`` with Box(-1, 1, (2,)) actions (binned to the discrete ones), no masks."""

    def action_space(self, agent: str) -> spaces.Space[Any]:
        return BOX

    def _infos(self) -> dict[str, Any]:
        return {a: {} for a in self.agents}

    def step(self, actions: dict[str, Any]) -> Any:
        binned = {
            a: int(np.clip(np.floor((float(x[0]) + 1) * 1.5), 0, 2)) for a, x in actions.items()
        }
        return super().step(binned)


class BoxSlot(gym.Env[Any, Any]):
    """One ``BoxScheduleEnv`` agent's spaces, for a model's VecEnv (never stepped)."""

    observation_space = ENVS.OBS
    action_space = BOX

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(4, np.float32), {}


class Slot(gym.Env[Any, Any]):
    """One agent's spaces, for a group model's VecEnv (sizes the buffer; never stepped)."""

    def __init__(self, observation_space: Any, action_space: Any) -> None:
        self.observation_space = observation_space
        self.action_space = action_space

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}


def replay_arrays(model: Any, columns: slice = slice(None)) -> dict[str, np.ndarray]:
    """Copies of ``model.replay_buffer``'s filled rows (``REPLAY_FIELDS``) of ``columns``."""
    buf = model.replay_buffer
    return {name: np.array(getattr(buf, name)[: buf.pos, columns]) for name in REPLAY_FIELDS}


def replay_counters(model: Any) -> tuple[Any, ...]:
    """``num_timesteps``, DQN's ``exploration_rate`` (None without one), episodes counted."""
    return (model.num_timesteps, getattr(model, "exploration_rate", None), model._episode_num)


def train_off_policy(model: Any) -> None:
    """``learn()``'s step after a rollout, on a fixed training seed."""
    if model.num_timesteps > model.learning_starts:
        set_random_seed(99)
        model.train(gradient_steps=model.gradient_steps, batch_size=model.batch_size)


def adversary_fn(max_cycles: int = 5) -> Any:
    """mpe2's (or PettingZoo's own) ``simple_adversary_v3.parallel_env``, discrete actions.

    The adversary observes 8 numbers, the good agents 10; every agent lives until all are
    truncated after ``max_cycles``. Skips the test where neither package is installed.
    """
    for name in ("mpe2.simple_adversary_v3", "pettingzoo.mpe.simple_adversary_v3"):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        return partial(module.parallel_env, max_cycles=max_cycles, continuous_actions=False)
    pytest.skip("neither mpe2 nor pettingzoo.mpe is installed")


def not_parallel() -> Any:
    """A gymnasium env, not a PettingZoo ParallelEnv (a runner must refuse to build on it)."""
    return ENVS.AgentSlot()


def buffer_arrays(model: Any, columns: slice = slice(None)) -> dict[str, np.ndarray]:
    """Copies of ``model.rollout_buffer``'s arrays (``FIELDS``, a MaskablePPO's masks and a
    RecurrentPPO's four LSTM state arrays), of ``columns`` only."""
    buf = model.rollout_buffer
    out = {name: np.array(getattr(buf, name)[:, columns]) for name in FIELDS}
    if hasattr(buf, "action_masks"):
        masks = buf.action_masks.reshape(buf.buffer_size, buf.n_envs, -1)
        out["action_masks"] = np.array(masks[:, columns])
    if hasattr(buf, "hidden_states_pi"):
        out.update({name: np.array(getattr(buf, name)[:, :, columns]) for name in STATES})
    return out


def column_block(arrays: dict[str, np.ndarray], columns: slice) -> dict[str, np.ndarray]:
    """:func:`buffer_arrays`' ``columns`` of arrays it returned (the states' columns: axis 2)."""
    return {
        name: array[:, :, columns] if name in STATES else array[:, columns]
        for name, array in arrays.items()
    }


def assert_arrays(
    got: dict[str, np.ndarray],
    want: dict[str, np.ndarray],
    what: str,
    close: tuple[str, ...] = (),
) -> None:
    """Exact (the same kernels on the same batch shapes), but ``close``: allclose."""
    assert got.keys() == want.keys()
    for name in got:
        assert got[name].shape == want[name].shape, (what, name)
        if name in close:
            assert np.allclose(got[name], want[name], rtol=1e-5, atol=1e-6), (what, name)
        else:
            assert np.array_equal(got[name], want[name]), (what, name, got[name], want[name])


def assert_segments_moved(
    got: Any, want: Any, column_offset: int, copy_offset: int, what: str
) -> None:
    """Runner segments ``got`` are the in-process ``want`` but for their column and copy offsets.

    ``got``: the learner's segments of one runner's columns, in order; ``want``: the in-process
    collector's over that runner's copies (columns and copies from 0).
    """
    assert len(got) == len(want), what
    for mine, ref in zip(got, want, strict=True):
        assert (mine.column - column_offset, mine.env_index - copy_offset) == (
            ref.column,
            ref.env_index,
        ), what
        assert (mine.start_row, mine.stop_row, mine.agent_id, mine.end) == (
            ref.start_row,
            ref.stop_row,
            ref.agent_id,
            ref.end,
        ), what
        assert mine.env_steps == ref.env_steps, what


def episodes(model: Any) -> list[tuple[float, int]]:
    """``model.ep_info_buffer``'s returns and lengths (its ``"t"`` is wall time)."""
    return [(e["r"], e["l"]) for e in model.ep_info_buffer]


def rng_state() -> tuple[Any, Any, Any]:
    """Python's, numpy's and torch's global generator states."""
    return random.getstate(), np.random.get_state(), th.get_rng_state()


def restore_rng(state: tuple[Any, Any, Any]) -> None:
    """Back to :func:`rng_state`'s states."""
    random.setstate(state[0])
    np.random.set_state(state[1])
    th.set_rng_state(state[2])
