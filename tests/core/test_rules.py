"""rlightning.rules: each rule, its verdicts and its messages. Runs without torch (torch marked)."""

from __future__ import annotations

import inspect
import re
import time
import warnings
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

import rlightning.rules as rules
import rlightning.testing
from rlightning.rules import (
    RULES,
    STAMP_FIELDS,
    action_allowed,
    as_bools,
    check_action_mask,
    check_flag,
    check_stamp,
    contains,
    describe,
    flat_mask,
    mask_size,
    mask_violation,
    rule_error,
    space_violation,
)

NO_LEGAL = "[rule no-legal-action]"
MASK = "[rule action-mask]"


# ---------------------------------------------------------------------------- the error builder
def test_rule_error_message_shape() -> None:
    error = rule_error(
        ValueError,
        "action-mask",
        "response.action_mask",
        "must have shape (3,), not (2,)",
        np.array([1, 1], np.int8),
        expected="one entry per action",
        fix="pad the mask",
    )
    assert type(error) is ValueError
    assert str(error) == (
        "response.action_mask must have shape (3,), not (2,); got array([1, 1], dtype=int8); "
        "expected one entry per action; fix: pad the mask [rule action-mask]"
    )
    assert (
        str(rule_error(TypeError, "timestamp", "x", "is bad", 1))
        == "x is bad; got 1 [rule timestamp]"
    )


def test_rule_error_refuses_an_unknown_rule() -> None:
    with pytest.raises(ValueError, match=re.escape("unknown rule id 'no-such-rule'")):
        rule_error(ValueError, "no-such-rule", "x", "is bad", 1)


def test_describe_is_bounded() -> None:
    assert describe(np.zeros(2, np.int8)) == "array([0, 0], dtype=int8)"
    big = describe(np.zeros((1000, 1000)))
    assert "shape=(1000, 1000)" in big and len(big) < 100
    nested: list[Any] = []
    nested.append(nested)
    assert describe(nested) == "[[...]]"


def test_one_table_of_rules() -> None:
    assert rlightning.testing.RULES is RULES
    assert rlightning.testing.space_violation is space_violation
    assert {"action-mask", "no-legal-action", "timestamp", "boolean", "action-in-space"} <= set(
        RULES
    )
    assert all(isinstance(text, str) and text for text in RULES.values())


def test_public_names_are_documented() -> None:
    for name in rules.__all__:
        member = getattr(rules, name)
        if inspect.isfunction(member):
            doc = inspect.getdoc(member) or ""
            assert "Args:" in doc and "Examples:" in doc, name
            returns_none = inspect.signature(member).return_annotation in ("None", None)
            assert returns_none or "Returns:" in doc, name
            assert returns_none or member.__module__ == "rlightning.rules", name
        assert getattr(member, "__module__", "rlightning.rules") == "rlightning.rules" or (
            not inspect.isfunction(member) and not inspect.isclass(member)
        ), name


def test_the_rule_table_names_an_owner_of_every_rule() -> None:
    """Every rule id has a row in the module docstring's table, each owner a public name."""
    doc = rules.__doc__ or ""
    table = doc.split("(every message)")[0]
    for rule in RULES:
        assert f"``{rule}``" in table, rule
    for owner in re.findall(r":(?:func|data|class):`(\w+)`", table):
        assert owner in rules.__all__, owner


# ---------------------------------------------------------------------------- space membership
def _gymnasium_contains(space: spaces.Space[Any], value: Any) -> bool:
    """gymnasium's own verdict: ``space.contains``; a contains() that raises means 'no'."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Box.contains warns when it casts a non-array
        try:
            return bool(space.contains(value))
        except Exception:
            return False


_SHAPES = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)
_BOUND = st.one_of(st.floats(-100, 100), st.sampled_from([-np.inf, np.inf]))


def _float_box(shape: tuple[int, ...], dtype: Any, a: float, b: float) -> spaces.Box:
    low, high = min(a, b), max(a, b)
    if low == high:
        high = low + 1 if np.isfinite(low) else high
    if low == np.inf:
        low = -np.inf
    if high == -np.inf:
        high = np.inf
    return spaces.Box(low, high, shape, dtype)


def _int_box(shape: tuple[int, ...], dtype: Any, low: int, width: int) -> spaces.Box:
    return spaces.Box(low, low + width, shape, dtype)


def _leaf_spaces() -> st.SearchStrategy[spaces.Space[Any]]:
    float_box = st.builds(
        _float_box, _SHAPES, st.sampled_from([np.float16, np.float32, np.float64]), _BOUND, _BOUND
    )
    int_box = st.builds(
        _int_box,
        _SHAPES,
        st.sampled_from([np.int8, np.int32, np.int64, np.uint8]),
        st.integers(0, 50),
        st.integers(0, 50),
    )
    discrete = st.builds(spaces.Discrete, st.integers(1, 10), start=st.integers(-20, 20))
    multi_discrete = st.builds(
        lambda nvec, start: spaces.MultiDiscrete(nvec, start=start[: len(nvec)]),
        st.lists(st.integers(1, 5), min_size=4, max_size=4).flatmap(
            lambda n: st.integers(1, 4).map(lambda k: n[:k])
        ),
        st.lists(st.integers(-10, 10), min_size=4, max_size=4),
    )
    multi_binary = st.builds(spaces.MultiBinary, st.integers(1, 5))
    return st.one_of(float_box, int_box, discrete, multi_discrete, multi_binary)


SPACES = st.recursive(
    _leaf_spaces(),
    lambda children: st.one_of(
        st.dictionaries(st.sampled_from("abcd"), children, min_size=1, max_size=3).map(spaces.Dict),
        st.lists(children, min_size=1, max_size=3).map(lambda s: spaces.Tuple(tuple(s))),
    ),
    max_leaves=5,
)

_ODD_VALUES = st.sampled_from(
    [None, "up", 1.5, True, -1, 2**70, float("nan"), [1, 2], (), {}, b"x", object()]
)


def _perturb(value: Any, draw: Any) -> Any:
    """Something near ``value``: another dtype, shape or container, a bound crossed, a NaN."""
    if isinstance(value, dict):
        choice = draw(st.integers(0, 3))
        if choice == 0 and value:
            key = draw(st.sampled_from(sorted(value)))
            return {**value, key: _perturb(value[key], draw)}
        if choice == 1:
            return {**value, "zz": 0}
        if choice == 2 and value:
            return {k: v for k, v in list(value.items())[1:]}
        return list(value.values())
    if isinstance(value, tuple):
        choice = draw(st.integers(0, 3))
        if choice == 0 and value:
            i = draw(st.integers(0, len(value) - 1))
            return (*value[:i], _perturb(value[i], draw), *value[i + 1 :])
        if choice == 1:
            return list(value)
        if choice == 2:
            return (*value, 0)
        return value[:-1]
    try:
        array = np.asarray(value)
    except ValueError:  # a ragged list made by an earlier perturbation
        return draw(_ODD_VALUES)
    if array.dtype.kind not in "biuf":  # objects, strings: nothing numeric to perturb
        return draw(_ODD_VALUES)
    choice = draw(st.integers(0, 7))
    if choice == 0:
        dtype = draw(st.sampled_from([np.int8, np.int64, np.uint8, np.float32, np.float64, bool]))
        with np.errstate(all="ignore"):
            return array.astype(dtype)
    if choice == 1:
        return array.tolist()
    if choice == 2:
        return array.reshape(-1)[:0] if array.size else np.zeros((2, *array.shape), array.dtype)
    if choice == 3:
        with np.errstate(all="ignore"):
            return array + np.array(draw(st.sampled_from([1, -1, 2, 100, 0.5])))  # may widen
    if choice == 4 and array.dtype.kind == "f" and array.size:
        out = array.copy()
        out.reshape(-1)[0] = np.nan
        return out
    if choice == 5 and array.shape == ():
        return array.item()
    if choice == 6:
        return array[None]
    return draw(_ODD_VALUES)


@st.composite
def _space_and_value(
    draw: Any, space_strategy: st.SearchStrategy[spaces.Space[Any]] = SPACES
) -> tuple[spaces.Space[Any], Any]:
    space = draw(space_strategy)
    space.seed(draw(st.integers(0, 2**31 - 1)))
    value = space.sample()
    for _ in range(draw(st.integers(0, 3))):
        value = _perturb(value, draw)
    return space, value


@settings(max_examples=400, deadline=None)
@given(case=st.one_of(_space_and_value(), _space_and_value(_leaf_spaces())))
def test_contains_agrees_with_gymnasium(case: tuple[spaces.Space[Any], Any]) -> None:
    space, value = case
    verdict = contains(space, value)
    assert verdict == _gymnasium_contains(space, value)
    reason = space_violation(space, value)
    assert (reason is None) == verdict
    assert reason is None or (isinstance(reason, str) and reason)


def test_contains_does_not_warn(recwarn: pytest.WarningsRecorder) -> None:
    box = spaces.Box(-1.0, 1.0, (), np.float32)
    assert contains(box, 0.5)
    assert contains(box, np.float32(0.5))
    assert not contains(box, 2.0)
    assert space_violation(box, 2.0) == "element [] = 2.0 is above high = 1.0"
    assert not recwarn.list


@pytest.mark.parametrize(
    ("space", "value", "reason"),
    [
        (spaces.Discrete(3, start=-2), 1, "1 is outside [-2, 0]"),
        (
            spaces.MultiDiscrete([2, 3], start=[5, -1]),
            np.array([5, 2]),
            "element [1] = 2 is outside [-1, 1]",
        ),
        (spaces.Box(0, 5, (2,), np.int64), np.array([1, 6]), "element [1] = 6 is above high = 5"),
        (
            spaces.Box(-np.inf, np.inf, (1,), np.float32),
            np.array([np.nan], np.float32),
            "element [0] is NaN",
        ),
    ],
)
def test_space_violation_explains(space: spaces.Space[Any], value: Any, reason: str) -> None:
    assert not _gymnasium_contains(space, value)
    assert space_violation(space, value) == reason


def test_a_zero_d_array_is_not_a_tuple() -> None:
    """gymnasium's Tuple.contains raises on a 0-d array (tuple() of it); it is not an element."""
    space = spaces.Tuple((spaces.MultiBinary(1), spaces.Discrete(1)))
    assert not contains(space, np.array(1, np.int8))
    assert space_violation(space, np.array(1, np.int8)) == "it is a 0-d array, not a tuple"


@pytest.mark.torch
def test_a_tensor_is_never_an_element() -> None:
    import torch

    box = spaces.Box(-1.0, 1.0, (2,), np.float32)
    assert not contains(box, torch.zeros(2))
    assert not contains(spaces.Discrete(2), torch.tensor(1))
    reason = space_violation(box, torch.zeros(2))
    assert reason is not None and "convert with response.numpy() first" in reason


# ---------------------------------------------------------------------------- action masks
D3 = spaces.Discrete(3)
MD = spaces.MultiDiscrete([2, 3], start=[1, -1])
MB = spaces.MultiBinary(2)


def test_mask_sizes_follow_sb3_contrib() -> None:
    assert mask_size(D3) == 3
    assert mask_size(MD) == 5
    assert mask_size(MB) == 4
    assert mask_size(spaces.MultiBinary([3])) == 6


@pytest.mark.parametrize(
    "space",
    [
        spaces.Box(-1, 1, (2,)),
        spaces.MultiDiscrete([[2, 3], [2, 2]]),
        spaces.MultiBinary((2, 2)),
        spaces.Dict({"a": spaces.Discrete(2)}),
    ],
)
def test_masks_are_not_defined_for_other_spaces(space: spaces.Space[Any]) -> None:
    with pytest.raises(ValueError, match=re.escape(f"action mask is not defined for {space}")):
        mask_size(space)
    with pytest.raises(ValueError, match=re.escape(MASK)):
        check_action_mask(space, np.ones(4), layout="flat")


_GOOD_DTYPES = [bool, np.int8, np.uint8, np.int64, np.float32, np.float64]


@pytest.mark.parametrize("dtype", _GOOD_DTYPES)
@pytest.mark.parametrize(
    ("space", "layout", "mask", "expected"),
    [
        (D3, "gymnasium", [1, 0, 1], [True, False, True]),
        (D3, "flat", [0, 1, 0], [False, True, False]),
        (MD, "flat", [0, 1, 1, 0, 0], [False, True, True, False, False]),
        (MB, "gymnasium", [1, 0, 1, 1], [True, False, True, True]),
        (MB, "flat", [0, 1, 1, 0], [False, True, True, False]),
    ],
)
def test_array_masks_in_every_dtype(
    space: spaces.Space[Any], layout: Any, mask: list[int], expected: list[bool], dtype: Any
) -> None:
    given_mask = np.array(mask, dtype)
    checked = check_action_mask(space, given_mask, layout=layout)
    assert checked.dtype == np.bool_
    np.testing.assert_array_equal(checked, np.array(expected))
    assert checked is not given_mask and not np.shares_memory(checked, given_mask)
    np.testing.assert_array_equal(check_action_mask(space, mask, layout=layout), expected)


@pytest.mark.parametrize("dtype", _GOOD_DTYPES)
def test_multi_discrete_tuple_masks(dtype: Any) -> None:
    mask = (np.array([1, 0], dtype), np.array([0, 1, 1], dtype))
    checked = check_action_mask(MD, mask)
    assert isinstance(checked, tuple) and len(checked) == 2
    np.testing.assert_array_equal(checked[0], [True, False])
    np.testing.assert_array_equal(checked[1], [False, True, True])
    assert all(part.dtype == np.bool_ for part in checked)
    np.testing.assert_array_equal(flat_mask(MD, mask), [True, False, False, True, True])


@pytest.mark.parametrize(
    ("space", "layout", "mask", "error", "message"),
    [
        (
            D3,
            "gymnasium",
            np.zeros(3, bool),
            ValueError,
            "action_mask allows no action of Discrete(3); got array([False, False, False], "
            "dtype=bool); fix: an agent that cannot act must not be asked to act",
        ),
        (D3, "flat", [0.0, 0.0, 0.0], ValueError, "allows no action of Discrete(3)"),
        (
            MD,
            "flat",
            [1, 0, 0, 0, 0],
            ValueError,
            "action_mask allows no value in dimension 1 of MultiDiscrete([2 3], start=[ 1 -1]) "
            "(flat entries [2:5]), so no action; got [1, 0, 0, 0, 0]",
        ),
        (
            MD,
            "gymnasium",
            (np.zeros(2, np.int8), np.ones(3, np.int8)),
            ValueError,
            "allows no value in dimension 0 of MultiDiscrete([2 3], start=[ 1 -1]) "
            "(flat entries [0:2])",
        ),
        (
            MB,
            "flat",
            [1, 1, 0, 0],
            ValueError,
            "action_mask allows neither 0 nor 1 for element 1 of MultiBinary(2) (flat entries "
            "[2:4]), so no action",
        ),
        (
            D3,
            "gymnasium",
            np.array([1, np.nan, 0]),
            ValueError,
            "action_mask must hold only booleans or exactly 0 and 1: element [1] = nan is "
            "neither; got array([ 1., nan,  0.], dtype=float64) [rule action-mask]",
        ),
        (D3, "gymnasium", [1, 2, 0], ValueError, "element [1] = 2 is neither"),
        (D3, "gymnasium", [1, -1, 0], ValueError, "element [1] = -1 is neither"),
        (D3, "gymnasium", np.array([1, 0.5, 0], np.float32), ValueError, "element [1] = 0.5 is"),
        (
            D3,
            "gymnasium",
            [1, 1],
            ValueError,
            "action_mask must have shape (3,), not (2,); got [1, 1]; expected 3 0/1 entries for "
            "Discrete(3) [rule action-mask]",
        ),
        (D3, "gymnasium", [[1, 1, 1]], ValueError, "must have shape (3,), not (1, 3)"),
        (MD, "flat", np.ones(6), ValueError, "must have shape (5,), not (6,)"),
        (MB, "gymnasium", np.ones(2), ValueError, "must have shape (4,), not (2,)"),
        (
            D3,
            "gymnasium",
            ["1", "0", "1"],
            TypeError,
            "action_mask must hold booleans or the numbers 0 and 1, not dtype <U1",
        ),
        (D3, "gymnasium", np.array([1, None, 0], object), TypeError, "not dtype object"),
        (D3, "gymnasium", np.array([1, 0, 1], complex), TypeError, "not dtype complex128"),
        (D3, "gymnasium", [[1], [0, 1], 1], TypeError, "cannot be read as a numpy array"),
        (
            MD,
            "gymnasium",
            np.ones(5),
            TypeError,
            "action_mask must be a tuple (gymnasium's MultiDiscrete.sample(mask=...) layout), "
            "not a ndarray",
        ),
        (MD, "gymnasium", (np.ones(2),), ValueError, "has 1 per-dimension masks, not 2"),
        (
            MD,
            "gymnasium",
            (np.ones(2), np.ones(2)),
            ValueError,
            "action_mask[1] must have shape (3,)",
        ),
        (
            MD,
            "flat",
            (np.ones(2), np.ones(3)),
            TypeError,
            "action_mask is a tuple of per-dimension masks (gymnasium's layout), but "
            "layout='flat'; got (array([1., 1.], dtype=float64), array([1., 1., 1.], "
            "dtype=float64)); fix: pass layout='gymnasium', or np.concatenate(mask) for the flat "
            "layout [rule action-mask]",
        ),
    ],
)
def test_bad_masks_are_refused(
    space: spaces.Space[Any], layout: Any, mask: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        check_action_mask(space, mask, layout=layout)


def test_no_legal_action_names_the_subject_and_why() -> None:
    with pytest.raises(ValueError, match=re.escape(NO_LEGAL)) as info:
        check_action_mask(D3, [0, 0, 0], subject="action mask of agent 'player_1'")
    text = str(info.value)
    assert text.startswith("action mask of agent 'player_1' allows no action of Discrete(3)")
    assert "an agent that cannot act must not be asked to act" in text
    assert "in an AEC env only env.agent_selection acts" in text
    assert "log_prob 0.0 would poison PPO's ratios" in text
    assert text.endswith(NO_LEGAL)


def test_batches_of_flat_masks_name_the_row() -> None:
    ids = ["env-0", "env-1"]
    masks = np.array([[1, 0, 0, 1, 0], [0, 1, 0, 0, 0]], np.float32)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "action_masks['env-1'] allows no value in dimension 1 of MultiDiscrete([2 3], "
            "start=[ 1 -1]) (flat entries [2:5]), so no action; got array([False,  True, False, "
            "False, False], dtype=bool)"
        ),
    ):
        check_action_mask(MD, masks, layout="flat", rows=ids, subject="action_masks")
    masks[1, 4] = 1
    checked = check_action_mask(MD, masks, layout="flat", rows=ids)
    assert checked.shape == (2, 5) and checked.dtype == np.bool_
    one = check_action_mask(D3, np.array([True, False, True]), rows=["only"])
    np.testing.assert_array_equal(one, [[True, False, True]])
    with pytest.raises(ValueError, match=re.escape("must have shape (2, 3), not (3,)")):
        check_action_mask(D3, np.ones(3), rows=ids)
    with pytest.raises(ValueError, match=re.escape("needs layout='flat'")):
        check_action_mask(MD, (np.ones(2), np.ones(3)), rows=["a"])


def test_unknown_layout_is_refused() -> None:
    with pytest.raises(ValueError, match=re.escape("layout must be 'gymnasium' or 'flat'")):
        check_action_mask(MD, np.ones(5), layout="sb3")  # type: ignore[arg-type]


def test_fast_path_returns_a_copy() -> None:
    mask = np.array([True, False, True])
    checked = check_action_mask(D3, mask)
    mask[:] = False  # the caller refills its array for the next step
    np.testing.assert_array_equal(checked, [True, False, True])


@pytest.mark.parametrize(
    ("space", "mask", "action", "layout", "reason"),
    [
        (
            spaces.Discrete(3, start=1),
            [1, 0, 1],
            2,
            "gymnasium",
            "2 is masked out by the action mask (legal: [1, 3])",
        ),
        (spaces.Discrete(3, start=1), [1, 0, 1], 3, "gymnasium", None),
        (
            MD,
            (np.array([1, 0]), np.array([0, 1, 1])),
            np.array([2, 1]),
            "gymnasium",
            "element [0] = 2 is masked out by the action mask of dimension 0 (legal: [1])",
        ),
        (MD, [1, 0, 0, 1, 1], np.array([1, 1]), "flat", None),
        (
            MD,
            [1, 0, 0, 1, 1],
            np.array([1, -1]),
            "flat",
            "element [1] = -1 is masked out by the action mask of dimension 1 (legal: [0, 1])",
        ),
        (
            MB,
            [0, 1, 1, 1],
            np.array([0, 1], np.int8),
            "flat",
            "element [0] = 0 is masked out by the action mask (entry [0] is 0; legal: [1])",
        ),
        (MB, [0, 1, 1, 1], [1, 0], "flat", None),
        (D3, [1, 1, 1], 3, "gymnasium", "it is not in Discrete(3): 3 is outside [0, 2]"),
    ],
)
def test_mask_violation_and_action_allowed(
    space: spaces.Space[Any], mask: Any, action: Any, layout: Any, reason: str | None
) -> None:
    assert mask_violation(space, mask, action, layout=layout) == reason
    assert action_allowed(space, mask, action, layout=layout) is (reason is None)


def test_action_allowed_refuses_a_mask_with_no_legal_action() -> None:
    with pytest.raises(ValueError, match=re.escape(NO_LEGAL)):
        action_allowed(D3, [0, 0, 0], 0)


_MASKABLE = st.one_of(
    st.builds(spaces.Discrete, st.integers(1, 6), start=st.integers(-5, 5)),
    st.lists(st.integers(1, 4), min_size=1, max_size=3).flatmap(
        lambda nvec: st.builds(
            lambda start: spaces.MultiDiscrete(nvec, start=start),
            st.lists(st.integers(-5, 5), min_size=len(nvec), max_size=len(nvec)),
        )
    ),
    st.builds(spaces.MultiBinary, st.integers(1, 4)),
)


def _blocks(space: spaces.Space[Any]) -> list[int]:
    if isinstance(space, spaces.Discrete):
        return [int(space.n)]
    if isinstance(space, spaces.MultiDiscrete):
        return [int(n) for n in space.nvec]
    return [2] * int(space.n)


@settings(max_examples=200, deadline=None)
@given(space=_MASKABLE, data=st.data())
def test_masks_agree_with_gymnasium_sampling(space: spaces.Space[Any], data: Any) -> None:
    """Random 0/1 masks: refused exactly when a block is empty; sampled actions are allowed."""
    blocks = _blocks(space)
    dtype = data.draw(st.sampled_from(_GOOD_DTYPES))
    parts = [
        np.array(data.draw(st.lists(st.integers(0, 1), min_size=n, max_size=n)), dtype)
        for n in blocks
    ]
    flat = np.concatenate(parts)
    empty = any(not part.any() for part in parts)
    if empty:
        with pytest.raises(ValueError, match=re.escape(NO_LEGAL)):
            check_action_mask(space, flat, layout="flat")
        return
    np.testing.assert_array_equal(check_action_mask(space, flat, layout="flat"), flat != 0)
    space.seed(data.draw(st.integers(0, 2**31 - 1)))
    if isinstance(space, spaces.MultiBinary):
        # gymnasium's MultiBinary mask is 0/1/2 = force 0 / force 1 / random, one per element.
        force = np.array([2 if p.all() else int(p[1]) for p in parts], np.int8)
        action = space.sample(mask=force)
        assert action_allowed(space, flat, action, layout="flat")
        return
    gym_mask: Any = (
        parts[0].astype(np.int8)
        if isinstance(space, spaces.Discrete)
        else tuple(p.astype(np.int8) for p in parts)
    )
    np.testing.assert_array_equal(flat_mask(space, gym_mask), flat != 0)
    for _ in range(3):
        action = space.sample(mask=gym_mask)
        assert action_allowed(space, gym_mask, action)
        assert action_allowed(space, flat, action, layout="flat")


@pytest.mark.torch
def test_flat_layout_is_sb3_contribs() -> None:
    """mask_size is MaskableRolloutBuffer's mask_dims; sampled actions honour the flat masks."""
    sb3_contrib = pytest.importorskip("sb3_contrib")
    import torch
    from sb3_contrib.common.maskable.buffers import MaskableRolloutBuffer
    from sb3_contrib.common.maskable.distributions import make_masked_proba_distribution

    observation_space = spaces.Box(-1, 1, (2,))
    rng = np.random.default_rng(0)
    for space in (D3, spaces.MultiDiscrete([2, 3, 4]), spaces.MultiBinary(3)):
        buffer = MaskableRolloutBuffer(4, observation_space, space, device="cpu", n_envs=1)
        assert mask_size(space) == buffer.mask_dims
        blocks = _blocks(space)
        distribution = make_masked_proba_distribution(space)
        net = distribution.proba_distribution_net(latent_dim=4)
        torch.manual_seed(0)
        for _ in range(20):
            parts = [rng.integers(0, 2, n) for n in blocks]
            for part in parts:
                part[rng.integers(0, len(part))] = 1  # at least one legal choice per block
            mask = np.concatenate(parts).astype(bool)
            distribution.proba_distribution(net(torch.zeros(1, 4)))
            distribution.apply_masking(mask[None])
            action = distribution.sample().numpy()[0]
            if isinstance(space, spaces.Discrete):
                action = int(action)
            assert action_allowed(space, mask, action, layout="flat"), (space, mask, action)
    assert sb3_contrib is not None


# ---------------------------------------------------------------------------- stamps
def test_stamp_fields() -> None:
    assert rules.STAMP_ORDER == (
        "ts_env_sent_ns",
        "ts_policy_recv_ns",
        "ts_infer_start_ns",
        "ts_policy_sent_ns",
    )
    assert frozenset(rules.STAMP_ORDER) == STAMP_FIELDS
    assert rules.STAMP_FIELDS is STAMP_FIELDS
    assert STAMP_FIELDS | {"policy_version"} == rules.SHARED_FIELDS
    assert rules.POLICY_VERSION_FIELD == "policy_version"


@pytest.mark.parametrize(
    "stamp",
    [0, time.time_ns(), np.int64(123), np.uint64(2**64 - 1), np.int32(7), 2**64 - 1],
)
def test_valid_stamps(stamp: Any) -> None:
    checked = check_stamp("ts_env_sent_ns", stamp)
    assert type(checked) is int and checked == int(stamp)


@pytest.mark.parametrize(
    ("stamp", "error", "message"),
    [
        (
            1.5,
            TypeError,
            "response.ts_env_sent_ns must be an int of nanoseconds since the epoch "
            "(time.time_ns()); got 1.5 [rule timestamp]",
        ),
        (
            True,
            TypeError,
            "must be an int of nanoseconds since the epoch (time.time_ns()); got True",
        ),
        # repr of numpy scalars differs between numpy 1.x and 2.x: expected as this numpy writes it
        (np.bool_(False), TypeError, f"got {np.bool_(False)!r} [rule timestamp]"),
        ("1", TypeError, "got '1' [rule timestamp]"),
        (None, TypeError, "got None [rule timestamp]"),
        (np.array(5), TypeError, "got array(5, dtype=int64) [rule timestamp]"),
        (-1, ValueError, "response.ts_env_sent_ns must not be negative; got -1 [rule timestamp]"),
        (np.int64(-5), ValueError, f"must not be negative; got {np.int64(-5)!r}"),
        (
            2**64,
            ValueError,
            "must fit in 64 bits (at most 2**64 - 1 nanoseconds); got 18446744073709551616",
        ),
    ],
)
def test_bad_stamps(stamp: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        check_stamp("ts_env_sent_ns", stamp, "response.")


def test_latency_reads_stamps_by_the_same_rule() -> None:
    from rlightning import PolicyResponse, StampWarning

    # The warning's text is the rule's (rule_message), with check_stamp's problem words.
    with pytest.warns(StampWarning, match=re.escape("ts_env_sent_ns must not be negative")):
        assert PolicyResponse("e", ts_env_sent_ns=-(10**9)).compute_sent_latency(10**9) == 0.0
    with pytest.warns(StampWarning, match=re.escape("ts_env_sent_ns must fit in 64 bits")):
        assert PolicyResponse("e", ts_env_sent_ns=2**64).compute_sent_latency(10**9) == 0.0
    assert PolicyResponse("e", ts_env_sent_ns=10**9).compute_sent_latency(now_ns=2 * 10**9) == 1.0


# ---------------------------------------------------------------------------- 0/1 booleans
@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ([True, False], [True, False]),
        ([1, 0], [True, False]),
        (np.array([1.0, 0.0], np.float32), [True, False]),
        (np.array([0, 1], np.uint8), [False, True]),
        (np.array([1, 0], ">i4"), [True, False]),  # non-native byte order
        (np.array([-0.0, 1.0]), [False, True]),
        (True, True),
        (0.0, False),
    ],
)
def test_as_bools_accepts_exact_zero_one(value: Any, expected: Any) -> None:
    result = as_bools(value, "dones")
    assert result.dtype == np.bool_
    np.testing.assert_array_equal(result, expected)


def test_as_bools_fast_path_returns_the_array() -> None:
    dones = np.array([True, False])
    assert as_bools(dones, "dones") is dones
    assert as_bools(dones, "dones", shape=(2,)) is dones


@pytest.mark.parametrize(
    ("value", "kwargs", "error", "message"),
    [
        (
            [0.0, 0.5],
            {},
            ValueError,
            "dones must hold only booleans or exactly 0 and 1: element [1] = 0.5 is neither; "
            "got [0.0, 0.5] [rule boolean]",
        ),
        (
            np.array([1, 2, 3]),
            {"labels": ["a", "b", "c"]},
            ValueError,
            "dones must hold only booleans or exactly 0 and 1: element [1] ('b') = 2 is neither",
        ),
        (np.array([0, -1], np.int8), {}, ValueError, "element [1] = -1 is neither"),
        (np.array([np.nan, 1.0]), {}, ValueError, "element [0] = nan is neither"),
        (np.array([1.0, np.inf]), {}, ValueError, "element [1] = inf is neither"),
        (
            ["yes", "no"],
            {},
            TypeError,
            "dones must hold booleans or the numbers 0 and 1, not dtype <U3",
        ),
        ([True, None], {}, TypeError, "not dtype object"),
        (np.array([1 + 0j]), {}, TypeError, "not dtype complex128"),
        ([[1], [1, 0]], {}, TypeError, "dones cannot be read as a numpy array"),
        (
            np.array([True, False]),
            {"shape": (3,)},
            ValueError,
            "dones must have shape (3,), not (2,); got array([ True, False], dtype=bool) "
            "[rule boolean]",
        ),
        ([1, 0], {"shape": (1,)}, ValueError, "must have shape (1,), not (2,)"),
    ],
)
def test_as_bools_refuses(
    value: Any, kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        as_bools(value, "dones", **kwargs)


@settings(max_examples=200, deadline=None)
@given(
    values=st.lists(
        st.one_of(st.integers(-3, 3), st.floats(allow_nan=True)), min_size=1, max_size=6
    ),
    dtype=st.sampled_from([np.int8, np.int64, np.uint16, np.float16, np.float32, np.float64]),
)
def test_as_bools_accepts_exactly_zero_and_one(values: list[Any], dtype: Any) -> None:
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            array = np.array(values).astype(dtype)
        except (OverflowError, ValueError):
            return
    exact = bool(np.all((array == 0) | (array == 1)))
    if exact:
        np.testing.assert_array_equal(as_bools(array, "flags"), array == 1)
    else:
        with pytest.raises(ValueError, match=re.escape("[rule boolean]")):
            as_bools(array, "flags")


# ---------------------------------------------------------------------------- flag arguments
@pytest.mark.parametrize(
    ("value", "expected"),
    [(True, True), (False, False), (np.bool_(True), True), (np.bool_(False), False)],
    ids=repr,
)
def test_check_flag_accepts_bools_and_numpy_bools(value: Any, expected: bool) -> None:
    result = check_flag(value, "update_model", "fill_recorded")
    assert result is expected  # a Python bool, never the numpy scalar


class _Truthy:
    def __bool__(self) -> bool:
        return True

    def __repr__(self) -> str:
        return "<truthy>"


@pytest.mark.parametrize(
    ("value", "given"),
    [
        ("False", "str; got 'False'"),
        ("", "str; got ''"),
        (0, "int; got 0"),
        (1, "int; got 1"),
        (None, "NoneType; got None"),
        (1.0, "float; got 1.0"),
        (np.int64(1), "int64; got np.int64(1)" if np.__version__ >= "2" else "int64; got 1"),
        (np.array(True), "ndarray; got array(True, dtype=bool)"),
        (np.array([True]), "ndarray; got array([ True], dtype=bool)"),
        (_Truthy(), "_Truthy; got <truthy>"),
    ],
    ids=repr,
)
def test_check_flag_refuses_everything_else(value: Any, given: str) -> None:
    with pytest.raises(TypeError) as caught:
        check_flag(value, "update_model", "SharedRolloutCollector.collect")
    message = str(caught.value)
    assert message.startswith(
        f"SharedRolloutCollector.collect: update_model must be a bool, not {given}; expected a "
        "bool (True or False; a numpy.bool_ is one too)"
    ), message
    assert message.endswith("never read by its truthiness [rule flag]")


@pytest.mark.torch
def test_check_flag_refuses_a_tensor() -> None:
    import torch

    with pytest.raises(TypeError, match=r"^c: deterministic must be a bool, not Tensor; "):
        check_flag(torch.tensor(True), "deterministic", "c")


@pytest.mark.torch
def test_tensors_are_read_as_arrays() -> None:
    import torch

    np.testing.assert_array_equal(as_bools(torch.tensor([1.0, 0.0]), "dones"), [True, False])
    np.testing.assert_array_equal(
        check_action_mask(D3, torch.tensor([1, 0, 1])), [True, False, True]
    )
    with pytest.raises(ValueError, match=re.escape(NO_LEGAL)):
        check_action_mask(D3, torch.zeros(3))
