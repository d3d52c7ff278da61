"""PolicyResponse.stack / unbind: batched responses through nested containers."""

from __future__ import annotations

import re
from collections import OrderedDict, namedtuple
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlightning import MultiAgentPolicyResponse, PerEnv, PolicyResponse
from rlightning._tree import tree_equal

Pair = namedtuple("Pair", ["left", "right"])


def _responses(n: int = 3) -> list[PolicyResponse]:
    return [
        PolicyResponse(
            f"env-{i}",
            action=np.array([i, i + 1], dtype=np.int64),
            # np.float32(i) / 2 would be float64 under numpy 1.x's value-based promotion
            value=np.float32(i / 2),
            log_prob=np.array(-0.5 * i, dtype=np.float32),
            obs={"pos": np.full((2, 3), i, dtype=np.float64), "tag": f"t{i}"},
            pair=Pair(np.arange(3) + i, None),
            seq=[np.zeros(1) + i, (i, b"x")],
            ts_env_sent_ns=1_000 + i,
        )
        for i in range(n)
    ]


def test_stack_gives_leading_batch_dimension_and_env_ids() -> None:
    responses = _responses(3)
    stacked = PolicyResponse.stack(responses)
    assert type(stacked) is PolicyResponse
    assert stacked.env_id is None
    assert stacked.env_ids == ["env-0", "env-1", "env-2"]
    assert stacked.action.shape == (3, 2)
    assert stacked.action.dtype == np.int64
    np.testing.assert_array_equal(stacked.action, [[0, 1], [1, 2], [2, 3]])
    assert stacked.log_prob.shape == (3,)
    assert stacked.obs["pos"].shape == (3, 2, 3)
    assert stacked.obs["tag"] == PerEnv(["t0", "t1", "t2"])
    assert type(stacked.pair) is Pair
    assert stacked.pair.left.shape == (3, 3)
    assert stacked.pair.right == PerEnv([None, None, None])
    assert stacked.seq[1] == (PerEnv([0, 1, 2]), PerEnv([b"x", b"x", b"x"]))
    assert stacked.value.dtype == np.float32  # numpy scalars stack into an array
    np.testing.assert_array_equal(stacked.value, [0.0, 0.5, 1.0])
    assert stacked.ts_env_sent_ns == PerEnv([1000, 1001, 1002])
    # field order: env_ids first, then the fields in the order they were set
    assert list(vars(stacked)) == ["env_id", "env_ids", *list(vars(responses[0]))[1:]]


def test_unbind_returns_what_went_in() -> None:
    responses = _responses(4)
    unbound = PolicyResponse.stack(responses).unbind()
    assert unbound == responses
    for original, back in zip(responses, unbound, strict=True):
        assert tree_equal(vars(original), vars(back))
        assert type(back.value) is np.float32
        assert back.log_prob.shape == ()
        assert type(back.log_prob) is np.ndarray  # 0-d arrays stay arrays, not scalars


def test_stack_does_not_mutate_inputs_and_unbind_gives_views() -> None:
    responses = _responses(2)
    before = [vars(r).copy() for r in responses]
    stacked = PolicyResponse.stack(responses)
    for response, fields in zip(responses, before, strict=True):
        assert vars(response) == fields or tree_equal(vars(response), fields)
    rows = stacked.unbind()
    assert np.shares_memory(rows[1].action, stacked.action)
    rows[1].action[0] = 99
    assert stacked.action[1, 0] == 99


def test_stack_of_one_and_dict_subclasses() -> None:
    response = PolicyResponse(None, action=OrderedDict(b=np.ones(2), a=np.zeros(2)), extra=[])
    stacked = PolicyResponse.stack([response])
    assert type(stacked.action) is OrderedDict
    assert list(stacked.action) == ["b", "a"]
    assert stacked.env_ids == [None]
    assert stacked.unbind() == [response]


def test_stack_with_real_gymnasium_spaces() -> None:
    space = gym.spaces.Dict(
        {"move": gym.spaces.Box(-1.0, 1.0, (2,), np.float32), "fire": gym.spaces.Discrete(3)}
    )
    space.seed(0)
    responses = [PolicyResponse.make_example(space, env_id=f"e{i}") for i in range(5)]
    stacked = PolicyResponse.stack(responses)
    assert stacked.action["move"].shape == (5, 2)
    assert stacked.action["fire"].shape == (5,)  # Discrete samples are np.int64 scalars
    assert stacked.action["fire"].dtype == np.int64
    assert stacked.unbind() == responses


def test_multi_agent_stack_and_unbind() -> None:
    responses = [
        MultiAgentPolicyResponse(
            f"env-{i}",
            action={"a0": np.array([i]), "a1": np.array([-i])},
            value={"a0": np.float64(i), "a1": np.float64(-i)},
            shared=np.zeros(3),
        )
        for i in range(3)
    ]
    stacked = MultiAgentPolicyResponse.stack(responses)
    assert type(stacked) is MultiAgentPolicyResponse
    assert stacked.agent_ids == ["a0", "a1"]
    assert stacked.action["a1"].shape == (3, 1)
    assert stacked.is_per_agent("value")
    assert stacked.unbind() == responses
    # PolicyResponse.stack accepts the subclass too and keeps it
    assert type(PolicyResponse.stack(responses)) is MultiAgentPolicyResponse


def test_multi_agent_stack_refuses_different_agents() -> None:
    responses = [
        MultiAgentPolicyResponse("e0", action={"a0": 1, "a1": 0}),
        MultiAgentPolicyResponse("e1", action={"a0": 1, "a1": 0}),
        MultiAgentPolicyResponse("e2", action={"a0": 1}),
    ]
    with pytest.raises(
        ValueError,
        match=re.escape(
            "field 'action' has keys ['a0', 'a1'] for env 'e0' but ['a0'] for env(s) ['e2']"
        ),
    ):
        MultiAgentPolicyResponse.stack(responses)


@pytest.mark.parametrize(
    ("second", "error", "message"),
    [
        (
            {"action": np.zeros(3)},
            ValueError,
            "stack(): field 'action' has shape (2,) for env 'a' but (3,) for env(s) ['b']; "
            "every response must have the same structure, keys, shapes and dtypes",
        ),
        (
            {"action": np.zeros(2, dtype=np.float32)},
            ValueError,
            "field 'action' has dtype float64 for env 'a' but float32 for env(s) ['b']",
        ),
        (
            {"action": [0.0, 0.0]},
            TypeError,
            "field 'action' has type ndarray for env 'a' but list for env(s) ['b']",
        ),
        (
            {"action": np.zeros(2), "extra": 1},
            ValueError,
            "stack(): the response for env 'b' has extra field(s) ['extra'] compared with env "
            "'a'; every response must have the same fields",
        ),
    ],
)
def test_stack_errors_name_field_and_env_ids(
    second: dict[str, Any], error: type[Exception], message: str
) -> None:
    first = PolicyResponse("a", action=np.zeros(2))
    with pytest.raises(error, match=re.escape(message)):
        PolicyResponse.stack([first, PolicyResponse("b", **second)])


def test_stack_errors_in_nested_fields_list_every_odd_env() -> None:
    responses = [
        PolicyResponse(f"e{i}", obs={"rgb": [np.zeros((2, 2)), np.zeros(i % 2 + 1)]})
        for i in range(4)
    ]
    with pytest.raises(
        ValueError,
        match=re.escape(
            "field 'obs'['rgb'][1] has shape (1,) for env 'e0' but (2,), (2,) for env(s) "
            "['e1', 'e3']"
        ),
    ):
        PolicyResponse.stack(responses)
    anonymous = [PolicyResponse(None, x=1), PolicyResponse(None, x=1.0)]
    with pytest.raises(
        TypeError,
        match=re.escape("for env #0 (env_id=None) but float for env(s) [#1 (env_id=None)]"),
    ):
        PolicyResponse.stack(anonymous)


def test_stack_refuses_bad_input() -> None:
    with pytest.raises(ValueError, match=re.escape("stack() needs at least one response")):
        PolicyResponse.stack([])
    with pytest.raises(
        TypeError, match=re.escape("stack() takes a list of PolicyResponse objects, got dict")
    ):
        PolicyResponse.stack({"a": PolicyResponse(None, action=1)})  # type: ignore[arg-type]
    with pytest.raises(
        TypeError,
        match=re.escape("item 1 is a MultiAgentPolicyResponse but item 0 is a PolicyResponse"),
    ):
        PolicyResponse.stack(
            [PolicyResponse(None, action=1), MultiAgentPolicyResponse(None, action={"a": 1})]
        )
    with pytest.raises(
        TypeError,
        match=re.escape("item 0 is a PolicyResponse, expected a MultiAgentPolicyResponse"),
    ):
        MultiAgentPolicyResponse.stack([PolicyResponse(None, action=1)])  # type: ignore[list-item]
    stacked = PolicyResponse.stack([PolicyResponse("a", action=1)])
    with pytest.raises(ValueError, match=re.escape("already has a field 'env_ids'")):
        PolicyResponse.stack([stacked])


def test_unbind_of_a_hand_built_batch() -> None:
    batch = PolicyResponse(
        None,
        env_ids=["x", "y"],
        action=np.array([[1.0], [2.0]]),
        temperature=0.5,  # shared: every row gets the same value
        ts_env_sent_ns=PerEnv([10, 20]),
        info={"note": "hi", "q": np.array([3, 4])},
    )
    x, y = batch.unbind()
    expected = PolicyResponse(
        "x",
        action=np.array([1.0]),
        temperature=0.5,
        ts_env_sent_ns=10,
        info={"note": "hi", "q": np.int64(3)},  # rows of a 1-D array are numpy scalars
    )
    assert x == expected
    assert y.env_id == "y"
    assert y.ts_env_sent_ns == 20
    assert y.info["q"] == 4
    assert x.compute_sent_latency(now_ns=1_000_000_010) == pytest.approx(1.0)
    # stamps as an int64 array work too: rows are np.int64, which the latency methods accept
    stamped = PolicyResponse(None, env_ids=["x"], ts_env_sent_ns=np.array([10], dtype=np.int64))
    assert stamped.unbind()[0].compute_sent_latency(now_ns=2_000_000_010) == pytest.approx(2.0)
    # without env_ids: n comes from the first batched leaf, env ids are None
    rows = PolicyResponse(None, action=np.zeros((3, 2))).unbind()
    assert [r.env_id for r in rows] == [None, None, None]


def test_unbind_errors() -> None:
    bad_rows = PolicyResponse(None, env_ids=["a", "b"], action=np.zeros((3, 2)))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "unbind(): field 'action' is an array of shape (3, 2), expected a leading "
            "dimension of 2 (one row per env id)"
        ),
    ):
        bad_rows.unbind()
    with pytest.raises(
        ValueError, match=re.escape("field 'v' is a PerEnv of length 1, expected 2")
    ):
        PolicyResponse(None, env_ids=["a", "b"], v=PerEnv([1])).unbind()
    with pytest.raises(
        TypeError,
        match=re.escape("field 'env_ids' must be a list of env ids (str or None), got tuple"),
    ):
        PolicyResponse(None, env_ids=("a",), action=np.zeros((1,))).unbind()
    with pytest.raises(ValueError, match=re.escape("the number of rows is unknown")):
        PolicyResponse(None, action=1).unbind()


@pytest.mark.torch
def test_stack_and_unbind_torch_tensors(device: str) -> None:
    import torch

    responses = [
        PolicyResponse(
            f"e{i}",
            action=torch.full((2,), i, device=device),
            hidden=(torch.randn(4, dtype=torch.bfloat16, device=device),),
            log_prob=torch.tensor(-1.0 * i, device=device, requires_grad=True),
        )
        for i in range(3)
    ]
    stacked = PolicyResponse.stack(responses)
    assert stacked.action.shape == (3, 2)
    assert stacked.action.device.type == device
    assert stacked.hidden[0].dtype == torch.bfloat16
    assert stacked.log_prob.requires_grad
    assert stacked.unbind() == responses


@pytest.mark.torch
def test_stack_refuses_mixed_tensor_dtypes_and_arrays() -> None:
    import torch

    a = PolicyResponse("a", action=torch.zeros(2))
    b = PolicyResponse("b", action=torch.zeros(2, dtype=torch.float64))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "field 'action' has dtype torch.float32 for env 'a' but torch.float64 for env(s) ['b']"
        ),
    ):
        PolicyResponse.stack([a, b])
    c = PolicyResponse("c", action=np.zeros(2, dtype=np.float32))
    with pytest.raises(
        TypeError,
        match=re.escape("field 'action' has type Tensor for env 'a' but ndarray for env(s) ['c']"),
    ):
        PolicyResponse.stack([a, c])


# -------------------------------------------------------------------------- property-based
_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True),
    st.text(max_size=5),
    st.binary(max_size=5),
)


def _structures(arrays: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.recursive(
        st.one_of(_leaf, arrays),
        lambda inner: st.one_of(
            st.lists(inner, max_size=3),
            st.lists(inner, max_size=3).map(tuple),
            st.dictionaries(st.text(max_size=3), inner, max_size=3),
        ),
        max_leaves=8,
    )


# datetime64/timedelta64 are left out: tree_equal does not treat NaT as equal to itself.
_DTYPES = hnp.scalar_dtypes().filter(lambda d: d.kind not in "mM")


@st.composite
def _batches(draw: st.DrawFn) -> list[PolicyResponse]:
    """A list of responses with one structure; leaf values differ per env."""
    n = draw(st.integers(1, 4))
    template = draw(
        st.dictionaries(
            st.sampled_from(["action", "value", "state", "obs"]),
            _structures(hnp.arrays(_DTYPES, hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))),
            min_size=1,
        )
    )

    def vary(value: Any, i: int) -> Any:
        if isinstance(value, np.ndarray):
            return value if i == 0 else draw(hnp.arrays(value.dtype, value.shape))
        if isinstance(value, dict):
            return {k: vary(v, i) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(vary(v, i) for v in value)
        return value if i == 0 else draw(st.from_type(type(value))) if value is not None else None

    return [
        PolicyResponse(f"env-{i}", **{k: vary(v, i) for k, v in template.items()}) for i in range(n)
    ]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_batches())
def test_unbind_inverts_stack_for_any_structure(responses: list[PolicyResponse]) -> None:
    stacked = PolicyResponse.stack(responses)
    assert stacked.env_ids == [r.env_id for r in responses]
    assert stacked.unbind() == responses


# ------------------------------------------------------------------------ unusual input
def test_stack_of_an_empty_list_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="at least one response"):
        PolicyResponse.stack([])


def test_stack_of_mixed_classes_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="one class"):
        PolicyResponse.stack(
            [PolicyResponse("a", action=1), MultiAgentPolicyResponse("b", action={"x": 1})]
        )


def test_stack_keeps_none_and_str_env_ids_in_order() -> None:
    batch = PolicyResponse.stack([PolicyResponse("a", action=1), PolicyResponse(None, action=2)])
    assert list(batch.env_ids) == ["a", None]
    assert [r.env_id for r in batch.unbind()] == ["a", None]


def test_stack_refuses_arrays_of_different_byte_order_naming_the_env() -> None:
    with pytest.raises(ValueError, match=re.escape("field 'v' has dtype >i4 for env 'a'")):
        PolicyResponse.stack(
            [
                PolicyResponse("a", v=np.arange(2, dtype=">i4")),
                PolicyResponse("b", v=np.arange(2, dtype="<i4")),
            ]
        )


def test_stack_of_a_stacked_response_is_refused() -> None:
    batch = PolicyResponse.stack([PolicyResponse("a", action=1)])
    with pytest.raises(ValueError, match="already has a field 'env_ids'"):
        PolicyResponse.stack([batch, batch])


def test_stack_of_a_self_referencing_field_is_a_value_error() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="'x'"):
        PolicyResponse.stack([PolicyResponse("a", x=cycle), PolicyResponse("b", x=cycle)])


def test_unbind_of_a_self_referencing_field_is_a_value_error() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    with pytest.raises(ValueError, match="'x'"):
        PolicyResponse(None, env_ids=["a"], x=cycle).unbind()


def test_unbind_of_a_response_that_was_never_stacked_is_refused() -> None:
    response = PolicyResponse("env-7", action=np.arange(3))
    with pytest.raises(ValueError, match="env-7"):
        response.unbind()


def test_unbind_with_env_ids_of_the_wrong_length_names_the_field() -> None:
    with pytest.raises(ValueError, match=re.escape("field 'x'")):
        PolicyResponse(None, env_ids=["a", "b"], x=np.arange(3)).unbind()


def test_unbind_with_non_str_env_ids_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="env_ids"):
        PolicyResponse(None, env_ids=[1, 2], x=np.arange(2)).unbind()


def test_multi_agent_stack_with_other_agents_names_the_field() -> None:
    with pytest.raises(ValueError, match=re.escape("field 'action' has keys ['x']")):
        MultiAgentPolicyResponse.stack(
            [
                MultiAgentPolicyResponse("a", action={"x": 1}),
                MultiAgentPolicyResponse("b", action={"y": 1}),
            ]
        )
