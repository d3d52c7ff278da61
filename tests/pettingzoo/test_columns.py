"""``stack_rows`` and ``stack_agent_observations`` against ``np.stack``, byte for byte.

The collector stacks each buffer row's observations, actions, values and log-probabilities with
them instead of ``np.stack`` (and ``_sb3.stack_observations``): the arrays must be the very ones
those give (dtype, shape, strides, bytes), or raise what they raise.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from rlightning_pettingzoo._columns import stack_agent_observations, stack_rows
from rlightning_pettingzoo._sb3 import stack_observations

DTYPES = [
    np.bool_,
    np.int8,
    np.uint8,
    np.int32,
    np.int64,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
    ">f4",  # non-native byte order
    "U3",
    [("a", np.int16), ("b", np.float32)],  # structured
]
SHAPES: list[tuple[int, ...]] = [(), (0,), (1,), (5,), (2, 3), (3, 0, 2)]


def _same(got: Any, want: Any) -> None:
    assert type(got) is type(want)
    assert got.dtype == want.dtype and got.dtype.str == want.dtype.str
    assert got.shape == want.shape
    assert got.strides == want.strides
    assert got.flags.c_contiguous == want.flags.c_contiguous
    assert got.tobytes() == want.tobytes()


def _rows(dtype: Any, shape: tuple[int, ...], n: int, seed: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        raw = rng.integers(0, 3, size=shape)
        out.append(np.array(raw).astype(dtype))
    return out


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", SHAPES, ids=str)
@pytest.mark.parametrize("n", [1, 3, 24])
def test_stack_rows_is_np_stack(dtype: Any, shape: tuple[int, ...], n: int) -> None:
    rows = _rows(dtype, shape, n, seed=n)
    _same(stack_rows(rows), np.stack(rows))
    _same(stack_rows(tuple(rows)), np.stack(rows))
    _same(stack_agent_observations(rows), stack_observations(rows))


@pytest.mark.parametrize(
    "dtype", [np.bool_, np.int8, np.int64, np.float16, np.float32, np.float64], ids=str
)
def test_numpy_scalars_and_views(dtype: Any) -> None:
    # SB3's batched outputs, row by row: numpy scalars and 0-d / 1-d views of one array
    batch = np.arange(24 * 2).reshape(24, 2).astype(dtype)
    scalars = list(batch[:, 0])
    assert all(isinstance(s, np.generic) for s in scalars)
    _same(stack_rows(scalars), np.stack(scalars))
    views = [batch[i] for i in range(24)]
    _same(stack_rows(views), np.stack(views))
    strided = [batch[i, ::2] for i in range(24)]  # non-contiguous rows
    _same(stack_rows(strided), np.stack(strided))
    cube = np.arange(4 * 3 * 4).reshape(4, 3, 4).astype(dtype)
    sliced = [cube[i, :, ::2] for i in range(4)]  # 2-d rows, not contiguous
    _same(stack_rows(sliced), np.stack(sliced))
    _same(stack_agent_observations(sliced), stack_observations(sliced))
    planes = [cube[i] for i in range(4)]  # 2-d C-contiguous views
    _same(stack_rows(planes), np.stack(planes))
    transposed = [np.asfortranarray(np.ones((2, 3), dtype)) for _ in range(4)]
    _same(stack_rows(transposed), np.stack(transposed))


def test_mixed_rows_fall_back_to_np_stack() -> None:
    cases: list[list[Any]] = [
        [np.zeros(3, np.float32), np.zeros(3, np.float64)],  # mixed dtypes: promoted
        [np.float32(1), np.float64(2)],  # mixed scalar types
        [np.int64(1), 2, 3.5],  # Python numbers
        [1.0, 2.0],
        [True, False],
        [np.zeros(2, np.int8), [1, 2]],  # a list row
        [np.ma.masked_array([1, 2], mask=[0, 1]), np.ma.masked_array([3, 4])],  # subclass
        [np.array([None, 1], dtype=object), np.array([2, 3], dtype=object)],  # objects
        [np.array(["ab"]), np.array(["abcd"])],  # U2 and U4
    ]
    for rows in cases:
        _same(stack_rows(rows), np.stack(rows))
    for rows in cases[:-3]:
        _same(stack_agent_observations(rows), stack_observations(rows))


def test_errors_are_np_stack_errors() -> None:
    for rows in ([], [np.zeros(2), np.zeros(3)], [np.zeros((2, 1)), np.zeros((1, 2))]):
        try:
            np.stack(rows)
        except ValueError as error:
            want = str(error)
        else:
            raise AssertionError(f"np.stack accepted {rows}")
        with pytest.raises(ValueError, match="^" + re.escape(want) + "$"):
            stack_rows(rows)


def test_dict_observations() -> None:
    rows = [
        {"observation": np.full((2, 2), i, np.float32), "action_mask": np.array([1, 0], np.int8)}
        for i in range(5)
    ]
    got, want = stack_agent_observations(rows), stack_observations(rows)
    assert list(got) == list(want)
    for key in want:
        _same(got[key], want[key])
    mixed = [{"x": np.float64(i), "y": [i, i]} for i in range(3)]
    got, want = stack_agent_observations(mixed), stack_observations(mixed)
    for key in want:
        _same(got[key], want[key])
