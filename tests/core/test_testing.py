"""rlightning.testing: the conformance checkers. Runs without torch (torch cases are marked)."""

from __future__ import annotations

import re
import warnings
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st

from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning.testing import (
    RULES,
    check_multi_agent_policy_response,
    check_policy_response,
    space_violation,
)
from rlightning.types import response_from_checked

BOX = spaces.Box(-1.0, 1.0, (2,), np.float32)


# ---------------------------------------------------------------------------- space_violation
@pytest.mark.parametrize(
    ("space", "value", "reason"),
    [
        (spaces.Discrete(3), 5, "5 is outside [0, 2]"),
        (spaces.Discrete(3, start=1), 0, "0 is outside [1, 3]"),
        (
            spaces.Discrete(3),
            1.0,
            "it is not an integer (a Python int or a 0-d numpy integer), it is a float",
        ),
        (
            spaces.Discrete(3),
            np.array([1]),
            "it is not an integer (a Python int or a 0-d numpy "
            "integer), it is a ndarray of shape (1,)",
        ),
        (BOX, np.array([0.5, 2.0], np.float32), "element [1] = 2.0 is above high = 1.0"),
        (BOX, np.array([-1.5, 0.0], np.float32), "element [0] = -1.5 is below low = -1.0"),
        (BOX, np.array([np.nan, 0.0], np.float32), "element [0] is NaN"),
        (BOX, np.array([0.5], np.float32), "shape (1,) is not the space's shape (2,)"),
        (
            BOX,
            np.array([0.5, 0.5]),
            "dtype float64 cannot be cast safely to the space's float32 "
            "(cast it with .astype(np.float32))",
        ),
        (BOX, "up", "it cannot be converted to a float32 array"),
        (spaces.MultiDiscrete([2, 3]), np.array([1, 3]), "element [1] = 3 is outside [0, 2]"),
        (spaces.MultiDiscrete([2, 3]), np.array([1]), "shape (1,) is not the space's shape (2,)"),
        (spaces.MultiDiscrete([2, 3]), 1, "it is a int, not an integer numpy array"),
        (spaces.MultiBinary(3), np.array([0, 2, 1]), "element [1] = 2 is neither 0 nor 1"),
        (spaces.MultiBinary(3), [0, 1], "shape (2,) is not the space's shape (3,)"),
        (
            spaces.Dict({"a": spaces.Discrete(2)}),
            {"a": 2},
            "['a'] is not in Discrete(2): 2 is outside [0, 1]",
        ),
        (
            spaces.Dict({"a": spaces.Discrete(2)}),
            {"b": 1},
            "its keys differ from the space's: missing ['a'], unexpected ['b']",
        ),
        (spaces.Dict({"a": spaces.Discrete(2)}), 1, "it is a int, not a dict"),
        (
            spaces.Tuple((spaces.Discrete(2), BOX)),
            (1, np.zeros(3, np.float32)),
            "[1] is not in Box(-1.0, 1.0, (2,), float32): shape (3,) is not the space's shape (2,)",
        ),
        (spaces.Tuple((spaces.Discrete(2),)), (1, 1), "it has 2 items, the space has 1"),
        (spaces.Text(3), "toolong", "gymnasium's Text.contains rejects it"),
    ],
)
def test_space_violation_explains(space: spaces.Space[Any], value: Any, reason: str) -> None:
    with warnings.catch_warnings():  # Box.contains warns when it casts a non-array
        warnings.simplefilter("ignore")
        assert not space.contains(value)
    assert space_violation(space, value) == reason


@pytest.mark.parametrize(
    ("space", "value"),
    [
        (spaces.Discrete(3), 2),
        (spaces.Discrete(3), np.int64(0)),
        (spaces.Discrete(3, start=-1), -1),
        (BOX, np.array([1.0, -1.0], np.float32)),
        (BOX, [0.5, 0.5]),  # cast as gymnasium's Box.contains casts
        (spaces.MultiDiscrete([2, 3]), np.array([1, 2])),
        (spaces.MultiBinary(2), np.array([0, 1], np.int8)),
        (spaces.Dict({"a": spaces.Discrete(2), "b": BOX}), {"a": 1, "b": np.zeros(2, np.float32)}),
        (spaces.Tuple((spaces.Discrete(2), spaces.Discrete(3))), (1, 2)),
    ],
)
def test_space_violation_none_for_members(space: spaces.Space[Any], value: Any) -> None:
    assert space_violation(space, value) is None


@pytest.mark.parametrize("value", [-1, 256, [-1], [0, 300]], ids=["-1", "256", "[-1]", "[0, 300]"])
def test_out_of_range_python_ints_are_refused_for_an_integer_box(value: Any) -> None:
    # numpy 1.x wraps np.asarray(-1, dtype=np.uint8) to 255 (with a DeprecationWarning), numpy 2
    # raises OverflowError: either way the value is not a uint8 and must not pass as one.
    space = spaces.Box(0, 255, np.shape(value), np.uint8)
    assert space_violation(space, value) == "it cannot be converted to a uint8 array"


def test_space_violation_list_for_box_does_not_warn(recwarn: pytest.WarningsRecorder) -> None:
    assert space_violation(BOX, [0.0, 0.0]) is None
    assert space_violation(BOX, [0.0, 5.0]) == "element [1] = 5.0 is above high = 1.0"
    assert not recwarn.list


# ---------------------------------------------------------------------------- hypothesis
def _leaf_spaces() -> st.SearchStrategy[spaces.Space[Any]]:
    shapes = st.lists(st.integers(1, 3), min_size=0, max_size=2).map(tuple)
    box = st.builds(
        lambda shape, dtype, lo, width: spaces.Box(lo, lo + width, shape, dtype),
        shapes,
        st.sampled_from([np.float32, np.float64]),
        st.floats(-10, 10),
        st.floats(0.5, 10),
    )
    int_box = st.builds(lambda shape: spaces.Box(-3, 3, shape, np.int64), shapes)
    discrete = st.builds(spaces.Discrete, st.integers(1, 10), start=st.integers(-5, 5))
    multi_discrete = st.builds(
        lambda nvec: spaces.MultiDiscrete(nvec), st.lists(st.integers(1, 5), min_size=1, max_size=4)
    )
    multi_binary = st.builds(spaces.MultiBinary, st.integers(1, 5))
    return st.one_of(box, int_box, discrete, multi_discrete, multi_binary)


SPACES = st.recursive(
    _leaf_spaces(),
    lambda children: st.one_of(
        st.dictionaries(st.sampled_from("abcd"), children, min_size=1, max_size=3).map(spaces.Dict),
        st.lists(children, min_size=1, max_size=3).map(lambda s: spaces.Tuple(tuple(s))),
    ),
    max_leaves=6,
)


@settings(max_examples=60, deadline=None)
@given(space=SPACES, seed=st.integers(0, 2**31 - 1))
def test_sampled_actions_conform(space: spaces.Space[Any], seed: int) -> None:
    space.seed(seed)
    response = PolicyResponse.make_example(space, env_id="env-0", value=0.5, log_prob=-1.2)
    check_policy_response(response, space)
    assert space_violation(space, response.action) is None


@settings(max_examples=60, deadline=None)
@given(space=_leaf_spaces(), seed=st.integers(0, 2**31 - 1))
def test_out_of_space_actions_are_explained(space: spaces.Space[Any], seed: int) -> None:
    """Push a sampled action just outside its space: the checker must say why."""
    space.seed(seed)
    action = space.sample()
    if isinstance(space, spaces.Discrete):
        bad: Any = action + space.n
    elif isinstance(space, spaces.MultiBinary):
        bad = action + 2
    elif isinstance(space, spaces.MultiDiscrete):
        bad = action + space.nvec
    else:
        assert isinstance(space, spaces.Box)
        bad = np.asarray(action).copy()
        if bad.shape == ():
            bad = space.high + 1
        else:
            bad.flat[0] = space.high.flat[0] + 1
    reason = space_violation(space, bad)
    assert reason is not None
    assert reason.startswith(("element", "[")) or "outside" in reason
    with pytest.raises(ValueError, match=re.escape("[rule action-in-space]")):
        check_policy_response(PolicyResponse(None, action=bad), space)


# ---------------------------------------------------------------------------- single agent
def test_valid_response_passes() -> None:
    response = PolicyResponse(
        "env-0",
        action=np.array([0.1, -0.2], np.float32),
        buffer_action=np.array([0.1, -0.2], np.float32),
        value=np.float32(0.3),
        log_prob=np.array([-1.0]),
        ts_env_sent_ns=1_700_000_000_000_000_000,
        state=None,
        anything="else",
    ).mark_policy_sent()
    check_policy_response(response, BOX)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        (
            {"value": 1.0},
            "response has no action field among its fields; got ['value'] [rule has-action]",
        ),
        (
            {"action": 3},
            "response.action is not in Discrete(3): 3 is outside [0, 2]; got 3 "
            "[rule action-in-space]",
        ),
        (
            {"action": 1, "value": np.array([1.0, 2.0])},
            "response.value must hold one real number (an int or float, or an array/tensor of "
            "one element); got array([1., 2.], dtype=float64) [rule scalar-field]",
        ),
        (
            {"action": 1, "value": "high"},
            "response.value must hold one real number (an int or float, or an array/tensor of "
            "one element); got 'high' [rule scalar-field]",
        ),
        (
            {"action": 1, "value": True},
            "response.value must hold one real number (an int or float, or an array/tensor of "
            "one element); got True [rule scalar-field]",
        ),
        (
            {"action": 1, "value": float("inf")},
            "response.value must be finite; got inf [rule scalar-field]",
        ),
        (
            {"action": 1, "log_prob": np.float32("nan")},
            # repr(np.float32("nan")) is "np.float32(nan)" under numpy 2, "nan" under numpy 1.x
            f"response.log_prob must not be NaN; got {np.float32('nan')!r} [rule scalar-field]",
        ),
        (
            {"action": 1, "ts_policy_sent_ns": -5},
            "response.ts_policy_sent_ns must not be negative; got -5 [rule timestamp]",
        ),
        (
            {"action": 1, "ts_policy_sent_ns": 2**64},
            "response.ts_policy_sent_ns must fit in 64 bits (at most 2**64 - 1 nanoseconds); "
            "got 18446744073709551616 [rule timestamp]",
        ),
        (
            {"action": 1, "action_mask": np.array([1, 0, 1], np.int8)},
            "response.action 1 is masked out by the action mask (legal: [0, 2]); got 1 "
            "[rule action-mask]",
        ),
        (
            {"action": 1, "action_mask": np.array([1, 1], np.int8)},
            "response.action_mask must have shape (3,), not (2,); got "
            "array([1, 1], dtype=int8); expected 3 0/1 entries for Discrete(3) [rule action-mask]",
        ),
        (
            {"action": 1, "action_mask": np.array([0.5, 1, 1])},
            "response.action_mask must hold only booleans or exactly 0 and 1: element [0] = 0.5 "
            "is neither; got array([0.5, 1. , 1. ], dtype=float64) [rule action-mask]",
        ),
        (
            {"action": 1, "action_mask": np.zeros(3)},
            "response.action_mask allows no action of Discrete(3); got array([0., 0., 0.], "
            "dtype=float64); fix: an agent that cannot act must not be asked to act",
        ),
    ],
)
def test_single_agent_rules(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        check_policy_response(PolicyResponse("env-0", **fields), spaces.Discrete(3))


@pytest.mark.parametrize(("stamp", "shown"), [(1.5, "1.5"), (True, "True"), ("now", "'now'")])
def test_stamp_of_the_wrong_kind_is_a_type_error(stamp: Any, shown: str) -> None:
    message = (
        "response.ts_env_sent_ns must be an int of nanoseconds since the epoch "
        f"(time.time_ns()); got {shown} [rule timestamp]"
    )
    with pytest.raises(TypeError, match=re.escape(message)):
        check_policy_response(PolicyResponse("env-0", action=1, ts_env_sent_ns=stamp), BOX)


def test_bool_mask_and_legal_action_pass() -> None:
    mask = np.array([True, False, True])
    check_policy_response(PolicyResponse(None, action=2, action_mask=mask), spaces.Discrete(3))


def test_mask_allowing_no_action_is_refused() -> None:
    """A waiting player's all-zero mask: it must not be asked to act, whatever its action."""
    space = spaces.Discrete(3)
    mask = np.zeros(3, np.int8)
    for action in (0, 2):  # 0 is what gymnasium's sample(mask=mask) returns: space.start
        with pytest.raises(ValueError, match=re.escape("[rule no-legal-action]")):
            check_policy_response(PolicyResponse(None, action=action, action_mask=mask), space)


def test_multi_discrete_mask() -> None:
    space = spaces.MultiDiscrete([2, 3])
    mask = (np.array([1, 1], np.int8), np.array([0, 1, 0], np.int8))
    check_policy_response(PolicyResponse(None, action=np.array([0, 1]), action_mask=mask), space)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "response.action element [1] = 2 is masked out by the action mask of dimension 1 "
            "(legal: [1]); got array([0, 2], dtype=int64) [rule action-mask]"
        ),
    ):
        check_policy_response(
            PolicyResponse(None, action=np.array([0, 2]), action_mask=mask), space
        )
    # sb3-contrib's flat layout (what MaskablePPO takes) is read as such.
    flat = np.array([1, 1, 0, 1, 0], np.int8)
    check_policy_response(PolicyResponse(None, action=np.array([0, 1]), action_mask=flat), space)
    with pytest.raises(ValueError, match=re.escape("masked out by the action mask of dimension 1")):
        check_policy_response(
            PolicyResponse(None, action=np.array([0, 2]), action_mask=flat), space
        )
    with pytest.raises(
        ValueError,
        match=re.escape(
            "response.action_mask must have shape (5,), not (4,); got array([1., 1., 1., 1.], "
            "dtype=float64); expected 5 0/1 entries for MultiDiscrete([2 3]) (sb3-contrib's flat "
            "layout), or a tuple of 2 per-dimension masks (gymnasium's layout, "
            "layout='gymnasium') [rule action-mask]"
        ),
    ):
        check_policy_response(
            PolicyResponse(None, action=np.array([0, 1]), action_mask=np.ones(4)), space
        )
    empty = (np.array([1, 1], np.int8), np.zeros(3, np.int8))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "response.action_mask allows no value in dimension 1 of MultiDiscrete([2 3]) (flat "
            "entries [2:5]), so no action; got (array([1, 1], dtype=int8), array([0, 0, 0], "
            "dtype=int8)); fix: an agent that cannot act"
        ),
    ):
        check_policy_response(
            PolicyResponse(None, action=np.array([0, 1]), action_mask=empty), space
        )


def test_multi_binary_mask_in_sb3_contrib_layout() -> None:
    space = spaces.MultiBinary(2)
    mask = np.array([1, 0, 1, 1], np.int8)  # element 0 may only be 0; element 1 either
    check_policy_response(
        PolicyResponse(None, action=np.array([0, 1], np.int8), action_mask=mask), space
    )
    with pytest.raises(
        ValueError,
        match=re.escape(
            "response.action element [0] = 1 is masked out by the action mask (entry [1] is 0; "
            "legal: [0]); got array([1, 1], dtype=int8) [rule action-mask]"
        ),
    ):
        check_policy_response(
            PolicyResponse(None, action=np.array([1, 1], np.int8), action_mask=mask), space
        )


def test_buffer_action_shape_for_box() -> None:
    response = PolicyResponse(
        None, action=np.zeros(2, np.float32), buffer_action=np.zeros((1, 2), np.float32)
    )
    with pytest.raises(
        ValueError,
        match=re.escape(
            "response.buffer_action must have the action space's shape (2,), not (1, 2); got "
            "array([[0., 0.]], dtype=float32) [rule buffer-action]"
        ),
    ):
        check_policy_response(response, BOX)


def test_wrong_kinds_are_type_errors() -> None:
    multi = MultiAgentPolicyResponse(None, action={"a": 1})
    with pytest.raises(
        TypeError,
        match=re.escape(
            "response must be a single-agent PolicyResponse, not MultiAgentPolicyResponse; got "
            "MultiAgentPolicyResponse(env_id=None, action={'a': 1}); fix: use "
            "check_multi_agent_policy_response for a MultiAgentPolicyResponse [rule response-type]"
        ),
    ):
        check_policy_response(multi, spaces.Discrete(2))
    with pytest.raises(
        TypeError,
        match=re.escape(
            "response must be a single-agent PolicyResponse, not dict; got {'action': 1} "
            "[rule response-type]"
        ),
    ):
        check_policy_response({"action": 1}, spaces.Discrete(2))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape("action_space must be a gymnasium.Space")):
        check_policy_response(PolicyResponse(None, action=1), 3)  # type: ignore[arg-type]
    response = PolicyResponse(None, action=1)
    response.__dict__["env_id"] = 7  # bypassing the constructor's own check
    with pytest.raises(
        TypeError,
        match=re.escape("response.env_id must be a str or None, not int; got 7; fix: pass str(7)"),
    ):
        check_policy_response(response, spaces.Discrete(2))


def test_checker_does_not_modify_the_response() -> None:
    action = np.array([0.0, 0.0], np.float32)
    response = PolicyResponse("e", action=action, value=1.0)
    before = dict(response.__dict__)
    check_policy_response(response, BOX)
    assert response.__dict__ == before
    assert response.action is action


# ---------------------------------------------------------------------------- multi agent
SPACES_AB = {"a": spaces.Discrete(3), "b": BOX}


def _ma(**fields: Any) -> MultiAgentPolicyResponse:
    base: dict[str, Any] = {"action": {"a": 1, "b": np.zeros(2, np.float32)}}
    base.update(fields)
    return MultiAgentPolicyResponse("env-0", **base)


def _ma_unchecked(**fields: Any) -> MultiAgentPolicyResponse:
    # Built past the constructor (which refuses a field keyed by some of the agents), as an
    # adapter's checked fast path builds responses: the checker must still catch it.
    base: dict[str, Any] = {"action": {"a": 1, "b": np.zeros(2, np.float32)}}
    base.update(fields)
    return response_from_checked(MultiAgentPolicyResponse, "env-0", base)


def test_multi_agent_valid() -> None:
    response = _ma(value={"a": 0.1, "b": 0.2}, log_prob={"a": -1.0, "b": -2.0}, shared=3)
    check_multi_agent_policy_response(response, SPACES_AB)
    check_multi_agent_policy_response(response, SPACES_AB, live_agents=["b", "a"])
    # Spaces may list agents that do not act now.
    check_multi_agent_policy_response(response, {**SPACES_AB, "c": spaces.Discrete(2)})
    # No live agent, no action: fine (an episode's end).
    check_multi_agent_policy_response(
        MultiAgentPolicyResponse(None, action={}), SPACES_AB, live_agents=[]
    )


@pytest.mark.parametrize(
    ("response", "live", "message"),
    [
        (
            _ma(action={"a": 1, "z": 0}),
            None,
            "response.action has agent(s) ['z'] with no action space (spaces for ['a', 'b']); "
            "got {'a': 1, 'z': 0} [rule known-agent]",
        ),
        (
            _ma(action={"a": 1}),
            ["a", "b"],
            "response.action lacks live agent(s) ['b']; got {'a': 1}; expected an action for every "
            "live agent ['a', 'b'] [rule live-agents]",
        ),
        (
            _ma(),
            ["a"],
            "response.action has action(s) for agent(s) ['b'] that are not live (live: ['a']); "
            "got {'a': 1, 'b': array([0., 0.], dtype=float32)}; fix: drop them: a terminated, "
            "truncated or unknown agent takes no action [rule no-inactive-action]",
        ),
        (
            _ma_unchecked(log_prob={"a": -1.0}),
            None,
            "response.log_prob is keyed by agent ids but not by exactly action's agents "
            "['a', 'b']: missing ['b'], extra [], so it would be read as shared by all agents "
            "and for_agent('b') would get the whole dict; got {'a': -1.0}",
        ),
        (
            _ma_unchecked(action={"a": 1}, value={"a": 1.0, "b": 2.0}),
            None,
            "response.value is keyed by agent ids but not by exactly action's agents ['a']: "
            "missing [], extra ['b'], so it would be read as shared by all agents and "
            "for_agent('a') would get the whole dict; got {'a': 1.0, 'b': 2.0}",
        ),
        (
            _ma(action={"a": 4, "b": np.zeros(2, np.float32)}),
            None,
            "agent 'a' action is not in Discrete(3): 4 is outside [0, 2]; got 4 "
            "[rule action-in-space]",
        ),
        (
            _ma(action={"a": 1, "b": np.array([0.0, 1.7], np.float32)}),
            ["a", "b"],
            "agent 'b' action is not in Box(-1.0, 1.0, (2,), float32): element [1] = 1.7 is "
            "above high = 1.0; got array([0. , 1.7], dtype=float32) [rule action-in-space]",
        ),
        (
            _ma(value={"a": 0.0, "b": np.zeros(3)}),
            None,
            "agent 'b' value must hold one real number (an int or float, or an array/tensor of "
            "one element); got array([0., 0., 0.], dtype=float64) [rule scalar-field]",
        ),
        (
            _ma(action_mask={"a": np.array([1, 0, 0], np.int8), "b": None}),
            None,
            "agent 'a' action 1 is masked out by the action mask (legal: [0]); got 1 "
            "[rule action-mask]",
        ),
        (
            _ma(ts_env_sent_ns=-1),
            None,
            "response.ts_env_sent_ns must not be negative; got -1 [rule timestamp]",
        ),
    ],
)
def test_multi_agent_rules(
    response: MultiAgentPolicyResponse, live: list[str] | None, message: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        check_multi_agent_policy_response(response, SPACES_AB, live_agents=live)


def test_shared_dict_field_not_keyed_by_agents_is_fine() -> None:
    check_multi_agent_policy_response(_ma(stats={"fps": 30.0, "step": 4}), SPACES_AB)


def test_multi_agent_wrong_kinds() -> None:
    with pytest.raises(
        TypeError,
        match=re.escape(
            "response must be a MultiAgentPolicyResponse, not PolicyResponse; got "
            "PolicyResponse(env_id=None, action=1); fix: use check_policy_response for a "
            "single-agent PolicyResponse [rule response-type]"
        ),
    ):
        check_multi_agent_policy_response(PolicyResponse(None, action=1), SPACES_AB)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape("action_spaces must be a mapping")):
        check_multi_agent_policy_response(_ma(), [spaces.Discrete(2)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=re.escape("action_spaces['a'] must be a gymnasium.Space")):
        check_multi_agent_policy_response(_ma(), {"a": 3})  # type: ignore[dict-item]


@settings(max_examples=40, deadline=None)
@given(
    agent_spaces=st.dictionaries(st.sampled_from(["a", "b", "c", "d"]), SPACES, min_size=1),
    seed=st.integers(0, 2**31 - 1),
)
def test_make_example_conforms(agent_spaces: dict[str, spaces.Space[Any]], seed: int) -> None:
    for i, space in enumerate(agent_spaces.values()):
        space.seed(seed + i)
    response = MultiAgentPolicyResponse.make_example(agent_spaces, env_id="env-0")
    check_multi_agent_policy_response(response, agent_spaces, live_agents=list(agent_spaces))


def test_every_rule_is_documented() -> None:
    assert set(RULES) == {
        "response-type",
        "env-id",
        "has-action",
        "action-in-space",
        "action-mask",
        "scalar-field",
        "buffer-action",
        "timestamp",
        "no-legal-action",
        "boolean",
        "known-agent",
        "live-agents",
        "no-inactive-action",
        "per-agent-keys",
        "framework-version",
        "count",
        "flag",
    }
    assert all(isinstance(text, str) and text for text in RULES.values())


# ---------------------------------------------------------------------------- torch
@pytest.mark.torch
def test_tensor_action_is_refused_with_a_hint() -> None:
    import torch

    response = PolicyResponse("env-0", action=torch.tensor(1))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "response.action is not in Discrete(3): it is a torch tensor (device cpu); "
            "environments take numpy or Python values: convert with response.numpy() first; "
            "got tensor(1, dtype=torch.int64, device=cpu) [rule action-in-space]"
        ),
    ):
        check_policy_response(response, spaces.Discrete(3))
    check_policy_response(response.numpy(), spaces.Discrete(3))


@pytest.mark.torch
def test_tensor_fields_are_accepted(device: str) -> None:
    import torch

    response = PolicyResponse(
        "env-0",
        action=np.zeros(2, np.float32),
        buffer_action=torch.zeros(2, device=device),
        value=torch.tensor(0.5, device=device),
        log_prob=torch.tensor([-0.7], device=device),
    )
    check_policy_response(response, BOX)
    response.log_prob = torch.tensor([float("nan")], device=device)
    with pytest.raises(ValueError, match=re.escape("response.log_prob must not be NaN")):
        check_policy_response(response, BOX)
    response.log_prob = torch.tensor([True], device=device)
    with pytest.raises(ValueError, match=re.escape("response.log_prob must hold one real number")):
        check_policy_response(response, BOX)


@pytest.mark.torch
def test_tensor_action_mask(device: str) -> None:
    import torch

    mask = {"a": torch.tensor([1, 0, 1], device=device), "b": None}
    check_multi_agent_policy_response(
        _ma(action={"a": 2, "b": BOX.sample()}, action_mask=mask), SPACES_AB
    )
    with pytest.raises(ValueError, match=re.escape("agent 'a' action 1 is masked out by the")):
        check_multi_agent_policy_response(_ma(action_mask=mask), SPACES_AB)


def test_public_names() -> None:
    import rlightning.testing as testing

    assert set(testing.__all__) == {
        "RULES",
        "check_multi_agent_policy_response",
        "check_policy_response",
        "space_violation",
    }
    for name in testing.__all__:
        assert getattr(testing, name) is not None
