"""What the Ray PettingZoo collector tests share: the envs, the buffer arrays, the comparison.

Loaded (and pickled by value) by conftest as ``rlightning_ray_test_pz_checks`` where PettingZoo
is installed; ``collector_envs`` (``ScheduleEnv``, ``AgentSlot``: tests/pettingzoo) is loaded
here once and pickled by value too, so the runners need not import tests.
"""

from __future__ import annotations

import importlib.util
import random
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import ray
import torch as th


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
