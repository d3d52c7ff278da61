"""Adversarial tests: bad and unusual inputs a careful user would expect to be handled.

Each test pins the behaviour a user would want (a clear TypeError/ValueError naming the field,
agent or env id; no silent data change or drop; no crash, hang or leaked RecursionError). Tests
that fail on the current core are marked ``xfail(strict=True)`` with the defect as the reason, so
the suite stays green and a fix shows up as an XPASS that must be unmarked.
"""

from __future__ import annotations

import copy
import pickle
import re
import time
from collections import namedtuple
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest

from rlightning import MultiAgentPolicyResponse, PolicyResponse


def _torch() -> ModuleType:
    module: ModuleType = pytest.importorskip("torch", reason="torch is not installed")
    return module


def _torch_itself_fails(probe: Any) -> bool:
    """Tell whether torch itself (without rlightning) fails ``probe(torch)``.

    Used as an xfail condition where the defect comes from a torch limitation that a later torch
    (the torch-cuda tox env pins another version) may lift: the test must not XPASS-fail there.
    """
    try:
        import torch
    except ImportError:
        return False
    try:
        probe(torch)
    except Exception:
        return True
    return False


_TORCH_FLOAT4_TOLIST_FAILS = _torch_itself_fails(
    lambda torch: torch.zeros(1, dtype=torch.uint8).view(torch.float4_e2m1fn_x2).tolist()
)


class _MyFloat(float):
    """A float subclass (picklable: defined at module level)."""


def _self_referential_list() -> list[Any]:
    cycle: list[Any] = [1]
    cycle.append(cycle)
    return cycle


def _self_referential_dict() -> dict[str, Any]:
    cycle: dict[str, Any] = {"a": 1}
    cycle["self"] = cycle
    return cycle


# ------------------------------------------------------------------------------------- from_agents


def test_from_agents_keeps_timing_stamps_usable() -> None:
    sent = time.time_ns()
    # Each agent's response carries the same stamp, as distinct int objects (as after a transport).
    responses = {
        agent: PolicyResponse(
            "env-0",
            action=i,
            ts_env_sent_ns=int(str(sent)),
            ts_policy_sent_ns=int(str(sent + 10**9)),
        )
        for i, agent in enumerate(["a", "b"])
    }
    merged = MultiAgentPolicyResponse.from_agents("env-0", responses)
    assert merged.compute_sent_latency(sent + 2 * 10**9) == pytest.approx(2.0)
    assert merged.compute_policy_latency(sent + 2 * 10**9) == pytest.approx(1.0)


def test_from_agents_structure_does_not_depend_on_int_identity() -> None:
    literal = MultiAgentPolicyResponse.from_agents(
        "env-0",
        {
            "a": PolicyResponse(None, action=0, value=300),
            "b": PolicyResponse(None, action=1, value=300),
        },
    )
    computed = MultiAgentPolicyResponse.from_agents(
        "env-0",
        {
            "a": PolicyResponse(None, action=0, value=int("300")),
            "b": PolicyResponse(None, action=1, value=int("300")),
        },
    )
    assert literal == computed


def test_from_agents_round_trip_with_shared_agent_keyed_dict() -> None:
    scores = {"a": 1.0, "b": 2.0}  # the same object in both agents' responses: a shared field
    responses = {
        "a": PolicyResponse("env-0", action=0, scores=scores),
        "b": PolicyResponse("env-0", action=1, scores=scores),
    }
    try:
        merged = MultiAgentPolicyResponse.from_agents("env-0", responses)
    except ValueError as exc:  # refusing the ambiguity, naming the field, is acceptable too
        refusal = str(exc)
    else:
        refusal = ""
    if refusal:
        assert "scores" in refusal
        return
    assert merged.for_agent("a") == responses["a"]
    assert merged.for_agent("b") == responses["b"]


def test_from_agents_refuses_multi_agent_responses() -> None:
    inner = MultiAgentPolicyResponse("env-0", action={"x": 1})
    with pytest.raises(TypeError, match="'a'"):
        MultiAgentPolicyResponse.from_agents("env-0", {"a": inner})


def test_from_agents_error_messages_are_accurate() -> None:
    with pytest.raises(ValueError, match="action") as missing:
        MultiAgentPolicyResponse.from_agents(
            "env-0", {"a": PolicyResponse(None, x=1), "b": PolicyResponse(None, x=2)}
        )
    assert "action" in str(missing.value)
    assert "present for others" not in str(missing.value)
    with pytest.raises(ValueError, match="env-1") as env:
        MultiAgentPolicyResponse.from_agents(None, {"a": PolicyResponse("env-1", action=1)})
    assert "'env-1'" in str(env.value)
    assert "None (or None)" not in str(env.value)


# --------------------------------------------------------------------------------------- for_agent


def test_for_agent_unhashable_id_is_a_clear_error() -> None:
    response = MultiAgentPolicyResponse("env-0", action={"a": 1, "b": 2})
    with pytest.raises((TypeError, KeyError), match="agent"):
        response.for_agent(["a"])


# -------------------------------------------------------------------------------------- attributes


def test_env_id_and_action_cannot_be_deleted() -> None:
    response = PolicyResponse("env-0", action=1)
    with pytest.raises((AttributeError, TypeError, ValueError), match="env_id"):
        del response.env_id
    assert response.env_id == "env-0"
    multi = MultiAgentPolicyResponse("env-0", action={"a": 1})
    with pytest.raises((AttributeError, TypeError, ValueError), match="action"):
        del multi.action
    assert multi.agent_ids == ["a"]


@pytest.mark.parametrize("name", ["__deepcopy__", "__array__", "__array_interface__"])
def test_dunder_protocol_names_are_refused(name: str) -> None:
    with pytest.raises(ValueError, match=name):
        PolicyResponse("env-0", **{name: 5})


# ---------------------------------------------------------------------------------------- equality


def test_eq_with_plain_simplenamespace() -> None:
    response = PolicyResponse("env-0", action=1)
    plain = SimpleNamespace(env_id="env-0", action=1)
    assert (response == plain) is False
    assert (plain == response) is False
    with_array = PolicyResponse("env-0", action=np.arange(3))
    assert (with_array == SimpleNamespace(env_id="env-0", action=np.arange(3))) is False


def test_eq_self_referential_copy() -> None:
    response = PolicyResponse("env-0", x=_self_referential_list())
    assert response == pickle.loads(pickle.dumps(response))


@pytest.mark.parametrize(
    "value",
    [
        complex("nan"),
        _MyFloat("nan"),
        np.datetime64("NaT"),
        np.array(["NaT"], dtype="datetime64[s]"),
        np.array([float("nan"), None], dtype=object),
        np.array([(np.nan, 1)], dtype=[("a", "f8"), ("b", "i4")]),
    ],
    ids=["complex", "float-subclass", "NaT", "NaT-array", "object-array", "structured-array"],
)
def test_nan_equal_to_its_own_copy(value: Any) -> None:
    assert PolicyResponse("env-0", x=value) == copy.deepcopy(PolicyResponse("env-0", x=value))
    response = PolicyResponse("env-0", x=value)
    assert response == pickle.loads(pickle.dumps(response))


def test_masked_arrays_with_different_masks_differ() -> None:
    a = PolicyResponse("env-0", x=np.ma.masked_array([1, 2], mask=[False, True]))
    b = PolicyResponse("env-0", x=np.ma.masked_array([1, 2], mask=[False, False]))
    assert a != b


# -------------------------------------------------------------------------------------------- repr


@pytest.mark.parametrize("make", [_self_referential_list, _self_referential_dict])
def test_repr_of_self_referential_container(make: Any) -> None:
    text = repr(PolicyResponse("env-0", x=make()))
    assert text.startswith("PolicyResponse(env_id='env-0', x=")
    assert "..." in text


def test_repr_of_response_holding_itself() -> None:
    response = PolicyResponse("env-0", action=1)
    response.me = response
    assert repr(response).startswith("PolicyResponse(env_id='env-0', action=1, me=")


def test_repr_is_bounded_for_big_containers() -> None:
    assert len(repr(PolicyResponse("env-0", x=list(range(100_000))))) < 10_000
    assert len(repr(PolicyResponse("env-0", x={i: i for i in range(100_000)}))) < 10_000


# ------------------------------------------------------------------------------------- pickle/copy


def test_pickle_and_deepcopy_of_cyclic_response() -> None:
    direct = PolicyResponse("env-0", action=1)
    direct.me = direct
    restored = pickle.loads(pickle.dumps(direct))
    assert restored.me is restored
    copied = copy.deepcopy(direct)
    assert copied.me is copied
    nested = PolicyResponse("env-0", action=1)
    nested.info = {"response": nested}
    restored = pickle.loads(pickle.dumps(nested))
    assert restored.info["response"] is restored
    copied = copy.deepcopy(nested)
    assert copied.info["response"] is copied


class _Stamped(PolicyResponse):
    """A user subclass whose __init__ records when the response was made."""

    def __init__(self, env_id: str | None, **data: Any) -> None:
        super().__init__(env_id, **data)
        self.created_ns = time.time_ns()


class _Fixed(PolicyResponse):
    """A user subclass with a fixed constructor signature."""

    def __init__(self, env_id: str | None, action: Any, value: float = 0.0) -> None:
        super().__init__(env_id, action=action, value=value)


def test_user_subclass_pickle_and_copy_keep_fields() -> None:
    stamped = _Stamped("env-0", action=1)
    stamped.created_ns = 123
    assert pickle.loads(pickle.dumps(stamped)).created_ns == 123
    assert copy.copy(stamped).created_ns == 123
    assert copy.deepcopy(stamped) == stamped
    fixed = _Fixed("env-0", 1, 2.0)
    fixed.extra = 3
    assert pickle.loads(pickle.dumps(fixed)) == fixed


# ----------------------------------------------------------------------------------------- latency


@pytest.mark.parametrize(
    ("stamp", "now"), [(0, 10**400), (-(10**400), 5)], ids=["huge-now", "huge-negative-stamp"]
)
def test_latency_with_huge_ints(stamp: int, now: int) -> None:
    response = PolicyResponse("env-0", ts_env_sent_ns=stamp)
    try:
        latency = response.compute_sent_latency(now)
    except ValueError as exc:  # a clear ValueError naming the stamp or now_ns is fine too
        refusal = str(exc)
    else:
        refusal = ""
    if refusal:
        assert "ts_env_sent_ns" in refusal or "now_ns" in refusal
        return
    assert isinstance(latency, float) and latency >= 0.0


# ------------------------------------------------------------------------------------------- torch


@pytest.mark.torch
def test_eq_object_array_of_tensors_does_not_raise() -> None:
    torch = _torch()

    def make(second: float) -> np.ndarray[Any, Any]:
        out = np.empty(2, dtype=object)
        out[0], out[1] = torch.ones(3), torch.full((3,), second)
        return out

    assert PolicyResponse("env-0", x=make(0.0)) == PolicyResponse("env-0", x=make(0.0))
    assert PolicyResponse("env-0", x=make(0.0)) != PolicyResponse("env-0", x=make(1.0))


def _sparse_coo() -> Any:
    return _torch().zeros(3).to_sparse()


def _sparse_csr() -> Any:
    return _torch().eye(3).to_sparse_csr()


def _nested() -> Any:
    torch = _torch()
    return torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])


def _meta() -> Any:
    return _torch().zeros(3, device="meta")


@pytest.mark.torch
@pytest.mark.parametrize("make", [_sparse_coo, _sparse_csr, _nested, _meta])
def test_eq_never_raises_on_tensor_layouts(make: Any) -> None:
    response = PolicyResponse("env-0", x=make())
    restored = pickle.loads(pickle.dumps(response))
    result = response == restored
    assert isinstance(result, bool)
    if make is not _meta:  # a meta tensor has no values to compare
        assert result is True


@pytest.mark.torch
@pytest.mark.parametrize(
    "kind",
    [
        "sparse_coo",
        "nested_strided",
        "nested_jagged",
        "float4",
    ],
)
def test_repr_never_raises_on_tensor_kinds(kind: str) -> None:
    torch = _torch()
    if kind == "sparse_coo":
        value = torch.zeros(3).to_sparse()
    elif kind == "nested_strided":
        value = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    elif kind == "nested_jagged":
        value = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)], layout=torch.jagged)
    else:
        if not hasattr(torch, "float4_e2m1fn_x2"):
            pytest.skip("torch has no float4_e2m1fn_x2")
        value = torch.zeros(3, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    text = repr(PolicyResponse("env-0", x=value))
    assert text.startswith("PolicyResponse(env_id='env-0', x=tensor(")


@pytest.mark.torch
@pytest.mark.parametrize(
    "dtype_name", ["uint16", "uint32", "uint64", "complex32", "float8_e4m3fn", "float8_e5m2"]
)
def test_pickle_keeps_exotic_dtypes(dtype_name: str) -> None:
    torch = _torch()
    dtype = getattr(torch, dtype_name)
    response = PolicyResponse("env-0", x=torch.arange(3).to(dtype))
    restored = pickle.loads(pickle.dumps(response, protocol=5))
    assert restored.x.dtype == dtype
    assert restored == response


Base = namedtuple("Base", ["x", "y"])


class _Tagged(Base):
    """A namedtuple subclass with an extra instance attribute."""

    tag: str

    def __new__(cls, x: Any, y: Any, tag: str = "default") -> _Tagged:
        self = super().__new__(cls, x, y)
        self.tag = tag
        return self


@pytest.mark.torch
def test_numpy_keeps_namedtuple_subclass_attributes() -> None:
    torch = _torch()
    response = PolicyResponse("env-0", v=_Tagged(torch.ones(2), 1, tag="important"))
    try:
        response.numpy()
    except TypeError as exc:  # refusing, naming the field, is acceptable; dropping is not
        refusal = str(exc)
    else:
        refusal = ""
    if refusal:
        assert "'v'" in refusal
        return
    assert isinstance(response.v.x, np.ndarray)
    assert response.v.tag == "important"


@pytest.mark.torch
def test_conversions_on_self_referential_field() -> None:
    _torch()
    for convert in ("numpy", "cpu"):
        response = PolicyResponse("env-0", x=_self_referential_list())
        try:
            getattr(response, convert)()
        except ValueError as exc:  # a clear error naming the field is acceptable
            refusal = str(exc)
        else:
            refusal = ""
        assert not refusal or "'x'" in refusal


@pytest.mark.torch
def test_failed_numpy_leaves_response_unchanged() -> None:
    torch = _torch()
    response = PolicyResponse("env-0", a=torch.ones(2), b=torch.zeros(3).to_sparse())
    with pytest.raises(TypeError, match="'b'"):
        response.numpy()
    assert isinstance(response.a, torch.Tensor)


@pytest.mark.torch
@pytest.mark.parametrize("kind", ["meta", "nested", "float4"])
def test_numpy_unconvertible_tensor_is_type_error(kind: str) -> None:
    torch = _torch()
    if kind == "meta":
        value = torch.zeros(3, device="meta")
    elif kind == "nested":
        value = torch.nested.nested_tensor([torch.zeros(2), torch.zeros(3)])
    else:
        if not hasattr(torch, "float4_e2m1fn_x2"):
            pytest.skip("torch has no float4_e2m1fn_x2")
        value = torch.zeros(3, dtype=torch.uint8).view(torch.float4_e2m1fn_x2)
    with pytest.raises(TypeError, match="'x'"):
        PolicyResponse("env-0", x=value).numpy()


@pytest.mark.torch
def test_to_cuda_without_a_gpu_names_the_field() -> None:
    torch = _torch()
    if torch.cuda.is_available():  # a CPU-only build and a CUDA build without a GPU both refuse
        pytest.skip("a GPU is visible, so moving to 'cuda' succeeds and there is no error to test")
    response = PolicyResponse("env-0", x=torch.ones(2))
    with pytest.raises(RuntimeError, match="'x'"):
        response.to("cuda")


# ----------------------------------------------------------------------------------------- passing
# Edge cases that the core already handles well; kept so they stay that way.


class EnvName(str):
    """A user's str subclass used as an env id."""


def test_env_id_str_subclass_survives_pickle() -> None:
    response = PolicyResponse(EnvName("env-0"), action=1)
    restored = pickle.loads(pickle.dumps(response))
    assert type(restored.env_id) is EnvName and restored == response


def test_multi_agent_reserved_names_and_bad_action_assignment() -> None:
    with pytest.raises(ValueError, match="agent_ids"):
        MultiAgentPolicyResponse("env-0", action={"a": 1}, agent_ids=["a"])
    response = MultiAgentPolicyResponse("env-0", action={"a": 1})
    with pytest.raises(ValueError, match="agent_ids"):
        response.agent_ids = ["b"]  # type: ignore[misc]
    with pytest.raises(TypeError, match="dict keyed by agent id"):
        response.action = [1]
    assert response.agent_ids == ["a"]


def test_non_string_agent_ids_round_trip() -> None:
    responses = {0: PolicyResponse(None, action=1), ("team", 1): PolicyResponse(None, action=2)}
    merged = MultiAgentPolicyResponse.from_agents("env-0", responses)
    assert merged.agent_ids == [0, ("team", 1)]
    assert merged.for_agent(("team", 1)).action == 2
    assert pickle.loads(pickle.dumps(merged)) == merged


def test_latency_accepts_numpy_ints_and_refuses_bools() -> None:
    response = PolicyResponse("env-0", ts_env_sent_ns=np.uint64(2**63))
    # numpy ints work at runtime though the annotation says int | None.
    now = np.uint64(2**63 + 10**9)
    assert response.compute_sent_latency(now) == pytest.approx(1.0)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="now_ns"):
        response.compute_sent_latency(np.bool_(True))  # type: ignore[arg-type]
    assert PolicyResponse("env-0", ts_env_sent_ns=True).compute_sent_latency(10) == 0.0


def test_make_example_on_unusual_spaces_round_trips() -> None:
    gym = pytest.importorskip("gymnasium")
    spaces = [
        gym.spaces.Graph(node_space=gym.spaces.Box(0, 1, (2,)), edge_space=gym.spaces.Discrete(3)),
        gym.spaces.Sequence(gym.spaces.Discrete(2)),
        gym.spaces.OneOf([gym.spaces.Discrete(2), gym.spaces.Box(0, 1, (2,))]),
        gym.spaces.MultiDiscrete([]),
        gym.spaces.Tuple(()),
    ]
    for space in spaces:
        space.seed(0)
        response = PolicyResponse.make_example(space, "env-0")
        assert pickle.loads(pickle.dumps(response)) == response
    with pytest.raises(TypeError, match=re.escape("gymnasium.Space")):
        PolicyResponse.make_example({"a": gym.spaces.Discrete(2)})  # type: ignore[arg-type]


@pytest.mark.torch
def test_dict_and_list_subclasses_with_required_init_args_survive_numpy() -> None:
    torch = _torch()

    class Owned(dict[str, Any]):
        def __init__(self, owner: str, **items: Any) -> None:
            super().__init__(**items)
            self.owner = owner

    class Named(list[Any]):
        def __init__(self, items: list[Any], name: str) -> None:
            super().__init__(items)
            self.name = name

    response = PolicyResponse(
        "env-0", d=Owned("me", t=torch.ones(2)), l=Named([torch.ones(1)], "n")
    )
    response.numpy()
    assert type(response.d) is Owned and response.d.owner == "me"
    assert isinstance(response.d["t"], np.ndarray)
    assert type(response.l) is Named and response.l.name == "n"
    assert isinstance(response.l[0], np.ndarray)


@pytest.mark.torch
def test_tensor_edge_cases_through_numpy_pickle_eq() -> None:
    torch = _torch()
    values = {
        "grad": torch.ones(3, requires_grad=True) * 2,
        "noncontig": torch.arange(12.0).reshape(3, 4).t(),
        "expanded": torch.zeros(1).expand(5),
        "conj": torch.tensor([1 + 1j]).conj(),
        "bool": torch.tensor([True, False]),
        "nan_bf16": torch.tensor([float("nan")], dtype=torch.bfloat16),
        "empty": torch.zeros(0, 3),
        "scalar": torch.tensor(1.5),
    }
    response = PolicyResponse("env-0", **values)
    assert pickle.loads(pickle.dumps(response)) == response
    response.numpy()
    for name, tensor in values.items():
        assert isinstance(getattr(response, name), np.ndarray), name
        np.testing.assert_array_equal(
            getattr(response, name),
            tensor.detach().resolve_conj().float().numpy()
            if tensor.dtype == torch.bfloat16
            else tensor.detach().resolve_conj().numpy(),
        )
