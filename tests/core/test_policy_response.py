"""Unit tests for PolicyResponse and MultiAgentPolicyResponse on numpy/Python data (no torch)."""

from __future__ import annotations

import copy
import pickle
import re
import time
from collections import OrderedDict, defaultdict, namedtuple

import gymnasium as gym
import numpy as np
import pytest

import rlightning
import rlightning.types
from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning.types import policy_response as pr_module

Hidden = namedtuple("Hidden", ["h", "c"])


# ---------------------------------------------------------------- construction & access
def test_importable_from_three_places():
    assert rlightning.PolicyResponse is rlightning.types.PolicyResponse is pr_module.PolicyResponse
    assert (
        rlightning.MultiAgentPolicyResponse
        is rlightning.types.MultiAgentPolicyResponse
        is pr_module.MultiAgentPolicyResponse
    )
    assert set(rlightning.__all__) >= {"PolicyResponse", "MultiAgentPolicyResponse"}


def test_is_simple_namespace_with_data_as_attributes():
    from types import SimpleNamespace

    r = PolicyResponse("env-0", action=np.array([1]), value=0.5)
    assert isinstance(r, SimpleNamespace)
    assert r.env_id == "env-0"
    assert r.value == 0.5
    np.testing.assert_array_equal(r.action, [1])
    r.log_prob = -1.0
    assert r.log_prob == -1.0


def test_env_id_keyword_and_none():
    assert PolicyResponse(env_id="e", action=1).env_id == "e"
    assert PolicyResponse(None, action=1).env_id is None


@pytest.mark.parametrize("bad", [3, 1.5, b"e", ["e"]])
def test_env_id_must_be_str_or_none(bad):
    with pytest.raises(
        TypeError, match=re.escape(f"env_id must be a str (or None), got {type(bad).__name__}")
    ):
        PolicyResponse(bad, action=1)
    r = PolicyResponse("e")
    with pytest.raises(TypeError, match="env_id must be a str"):
        r.env_id = bad


@pytest.mark.parametrize(
    "name",
    [
        "to_dict",
        "cpu",
        "cuda",
        "numpy",
        "to",
        "mark_policy_sent",
        "compute_sent_latency",
        "compute_policy_latency",
        "make_example",
        "__class__",
        "__dict__",
        "__eq__",
    ],
)
def test_reserved_names_refused_at_init_and_setattr(name):
    msg = f"field name(s) {name!r} would shadow PolicyResponse.{name}"
    with pytest.raises(ValueError, match=re.escape(msg)):
        PolicyResponse("e", **{name: 1})
    r = PolicyResponse("e")
    if not name.startswith("__"):
        with pytest.raises(ValueError, match=re.escape(msg)):
            setattr(r, name, 1)


def test_multi_agent_reserved_names_include_its_members():
    for name in ("for_agent", "from_agents", "agent_ids", "is_per_agent"):
        with pytest.raises(ValueError, match=re.escape(repr(name))):
            MultiAgentPolicyResponse("e", action={"a": 1}, **{name: 1})
    # ... which the single-agent class does not reserve
    assert PolicyResponse("e", agent_ids=[1]).agent_ids == [1]


def test_reserved_clash_message_lists_every_clash():
    with pytest.raises(ValueError, match=re.escape("field name(s) 'cpu', 'numpy' would shadow")):
        PolicyResponse("e", numpy=1, cpu=2, action=0)


def test_values_are_not_copied():
    a = np.zeros(3)
    r = PolicyResponse("e", action=a)
    assert r.action is a


# ---------------------------------------------------------------- to_dict
def test_to_dict_excludes_env_id_and_stamps_and_keeps_order():
    r = PolicyResponse("e", action=1, ts_env_sent_ns=5, value=2.0)
    r.mark_policy_sent()
    r.log_prob = -0.1
    assert r.to_dict() == {"action": 1, "value": 2.0, "log_prob": -0.1}
    assert list(r.to_dict()) == ["action", "value", "log_prob"]
    assert r.ts_env_sent_ns == 5  # still on the response


def test_to_dict_is_a_shallow_copy():
    a = np.zeros(2)
    r = PolicyResponse("e", action=a)
    d = r.to_dict()
    d["new"] = 1
    assert not hasattr(r, "new")
    assert d["action"] is a


# ---------------------------------------------------------------- timing
def test_mark_policy_sent_stamps_ns_and_returns_self():
    r = PolicyResponse("e", action=1)
    before = time.time_ns()
    assert r.mark_policy_sent() is r
    assert isinstance(r.ts_policy_sent_ns, int)
    assert before <= r.ts_policy_sent_ns <= time.time_ns()


def test_compute_sent_latency_seconds():
    r = PolicyResponse("e", ts_env_sent_ns=1_000_000_000)
    assert r.compute_sent_latency(now_ns=3_500_000_000) == pytest.approx(2.5)
    r.ts_env_sent_ns = np.int64(1_000_000_000)
    assert r.compute_sent_latency(now_ns=2_000_000_000) == pytest.approx(1.0)


def test_compute_sent_latency_uses_clock_when_now_is_none():
    r = PolicyResponse("e", ts_env_sent_ns=time.time_ns() - 50_000_000)
    latency = r.compute_sent_latency()
    assert 0.05 <= latency < 5.0


@pytest.mark.parametrize("stamp", [None, "123", 1.5, True, [1]])
def test_compute_sent_latency_zero_for_bad_stamp(stamp):
    r = PolicyResponse("e", ts_env_sent_ns=stamp)
    assert r.compute_sent_latency(now_ns=10**18) == 0.0


def test_latency_zero_when_stamp_missing():
    r = PolicyResponse("e")
    assert r.compute_sent_latency() == 0.0
    assert r.compute_policy_latency() == 0.0


def test_latency_never_negative_under_clock_skew():
    r = PolicyResponse("e", ts_env_sent_ns=time.time_ns() + 10**10, ts_policy_sent_ns=10**19)
    assert r.compute_sent_latency() == 0.0
    assert r.compute_policy_latency(now_ns=1) == 0.0


def test_compute_policy_latency():
    r = PolicyResponse("e").mark_policy_sent()
    assert r.compute_policy_latency(now_ns=r.ts_policy_sent_ns + 2_000_000) == pytest.approx(0.002)


@pytest.mark.parametrize("now", [1.5, "1", True])
def test_latency_now_ns_must_be_int(now):
    r = PolicyResponse("e", ts_env_sent_ns=1)
    with pytest.raises(TypeError, match=re.escape("now_ns must be an int of nanoseconds")):
        r.compute_sent_latency(now_ns=now)
    with pytest.raises(TypeError, match="now_ns must be an int"):
        r.compute_policy_latency(now_ns=now)


# ---------------------------------------------------------------- conversions without torch data
def test_conversions_return_self_and_leave_numpy_alone():
    a = np.arange(3)
    nested = {"x": [a, (a,)], "s": "text"}
    r = PolicyResponse("e", action=a, nested=nested, n=3)
    assert r.numpy() is r
    assert r.cpu() is r
    assert r.to("cpu") is r
    assert r.action is a
    assert r.nested is nested


# ---------------------------------------------------------------- equality
def test_equality_compares_class_env_id_fields():
    a = PolicyResponse("e", action=np.array([1, 2]), value=np.float32(0.5))
    assert a == PolicyResponse("e", action=np.array([1, 2]), value=np.float32(0.5))
    assert a != PolicyResponse("f", action=np.array([1, 2]), value=np.float32(0.5))
    assert a != PolicyResponse("e", action=np.array([1, 3]), value=np.float32(0.5))
    assert a != PolicyResponse("e", action=np.array([1, 2], dtype=np.int32), value=np.float32(0.5))
    assert a != PolicyResponse("e", action=np.array([[1, 2]]), value=np.float32(0.5))
    assert a != PolicyResponse("e", action=np.array([1, 2]))
    assert a != MultiAgentPolicyResponse("e", action={"x": 1})
    assert a != {"action": np.array([1, 2])}


def test_equality_never_raises_ambiguous_truth_value():
    a = PolicyResponse("e", action=np.ones((2, 2)))
    b = PolicyResponse("e", action=np.ones((2, 2)))
    assert (a == b) is True
    assert (a != b) is False


def test_equality_nan_and_nested_types():
    a = PolicyResponse("e", x=np.array([np.nan, 1.0]), y=float("nan"), h=Hidden(np.zeros(1), [1]))
    b = PolicyResponse("e", x=np.array([np.nan, 1.0]), y=float("nan"), h=Hidden(np.zeros(1), [1]))
    assert a == b
    assert PolicyResponse("e", h=(1, 2)) != PolicyResponse("e", h=[1, 2])
    assert PolicyResponse("e", h=Hidden(1, 2)) != PolicyResponse("e", h=(1, 2))


def test_equality_with_object_arrays_and_custom_eq():
    class Weird:
        def __eq__(self, other):
            raise RuntimeError("cannot compare")

    w = Weird()
    assert PolicyResponse("e", x=w) == PolicyResponse("e", x=w)  # same object
    assert PolicyResponse("e", x=Weird()) != PolicyResponse("e", x=Weird())
    objs = np.array([np.zeros(2), np.ones(3)], dtype=object)
    objs2 = np.array([np.zeros(2), np.ones(3)], dtype=object)
    assert PolicyResponse("e", x=objs) == PolicyResponse("e", x=objs2)


def test_responses_are_unhashable():
    with pytest.raises(TypeError):
        hash(PolicyResponse("e"))


# ---------------------------------------------------------------- repr
def test_repr_summarises_big_arrays_and_shows_small_ones():
    r = PolicyResponse("e", action=np.array([1, 2]), obs=np.zeros((64, 64), dtype=np.float32))
    text = repr(r)
    assert text == (
        "PolicyResponse(env_id='e', action=array([1, 2], dtype=int64), "
        "obs=array(shape=(64, 64), dtype=float32))"
    )
    assert len(repr(PolicyResponse("e", obs=np.zeros(10**6)))) < 100


def test_repr_nested_containers():
    r = PolicyResponse(
        None, state=Hidden(h=np.zeros(100), c=[1]), d=OrderedDict(a=1), t=(1,), text="x" * 500
    )
    text = repr(r)
    assert "state=Hidden(h=array(shape=(100,), dtype=float64), c=[1])" in text
    assert "d=OrderedDict({'a': 1})" in text
    assert "t=(1,)" in text
    assert len(text) < 300


# ---------------------------------------------------------------- pickle & copy
@pytest.mark.parametrize("protocol", [pickle.DEFAULT_PROTOCOL, 5])
def test_pickle_round_trip(protocol):
    r = MultiAgentPolicyResponse(
        "env-3",
        action={"a": np.int64(1), "b": np.int64(0)},
        value={"a": np.float32(0.1), "b": np.float32(0.2)},
        state=Hidden(np.zeros(3), np.ones(3)),
        ts_env_sent_ns=123,
    )
    back = pickle.loads(pickle.dumps(r, protocol=protocol))
    assert type(back) is MultiAgentPolicyResponse
    assert back == r
    assert back.env_id == "env-3"
    assert type(back.state) is Hidden


def test_copy_and_deepcopy():
    a = np.zeros(3)
    r = PolicyResponse("e", action=a, d={"k": [1]})
    shallow = copy.copy(r)
    deep = copy.deepcopy(r)
    assert shallow == r == deep
    assert type(shallow) is type(deep) is PolicyResponse
    assert shallow is not r
    assert shallow.action is a
    assert deep.action is not a
    deep.d["k"].append(2)
    assert r.d == {"k": [1]}


# ---------------------------------------------------------------- make_example
SPACES = {
    "box": gym.spaces.Box(-1.0, 1.0, (3,), np.float32),
    "discrete": gym.spaces.Discrete(4, start=1),
    "multidiscrete": gym.spaces.MultiDiscrete([2, 3]),
    "multibinary": gym.spaces.MultiBinary(5),
    "text": gym.spaces.Text(8),
    "dict": gym.spaces.Dict({"a": gym.spaces.Discrete(2), "b": gym.spaces.Box(0, 1, (2,))}),
    "tuple": gym.spaces.Tuple((gym.spaces.Discrete(2), gym.spaces.MultiBinary(2))),
    "nested": gym.spaces.Dict(
        {
            "t": gym.spaces.Tuple(
                (gym.spaces.Dict({"x": gym.spaces.Discrete(3)}), gym.spaces.Text(3))
            )
        }
    ),
}


@pytest.mark.parametrize("name", sorted(SPACES))
def test_make_example_samples_from_space(name):
    space = SPACES[name]
    space.seed(0)
    r = PolicyResponse.make_example(space)
    assert type(r) is PolicyResponse
    assert r.env_id is None
    assert space.contains(r.action)
    r2 = PolicyResponse.make_example(space, "env-1", value=1.0)
    assert r2.env_id == "env-1"
    assert r2.value == 1.0


def test_make_example_errors():
    with pytest.raises(
        TypeError, match=re.escape("action_space must be a gymnasium.Space, got int 3")
    ):
        PolicyResponse.make_example(3)
    with pytest.raises(TypeError, match=re.escape("do not pass action=")):
        PolicyResponse.make_example(SPACES["box"], action=1)


def test_multi_agent_make_example():
    spaces = {"a": SPACES["discrete"], "b": SPACES["box"]}
    r = MultiAgentPolicyResponse.make_example(spaces, "e", value={"a": 1.0, "b": 2.0})
    assert type(r) is MultiAgentPolicyResponse
    assert r.agent_ids == ["a", "b"]
    assert all(spaces[a].contains(r.action[a]) for a in spaces)
    assert MultiAgentPolicyResponse.make_example(spaces).env_id is None


def test_multi_agent_make_example_errors():
    with pytest.raises(TypeError, match=re.escape("action_spaces must be a dict")):
        MultiAgentPolicyResponse.make_example([SPACES["box"]])
    with pytest.raises(ValueError, match=re.escape("action_spaces is empty")):
        MultiAgentPolicyResponse.make_example({})
    with pytest.raises(TypeError, match=re.escape("action_spaces['b'] must be a gymnasium.Space")):
        MultiAgentPolicyResponse.make_example({"a": SPACES["box"], "b": "Box"})


# ---------------------------------------------------------------- multi-agent
def test_multi_agent_action_must_be_dict():
    with pytest.raises(TypeError, match=re.escape("MultiAgentPolicyResponse needs action=")):
        MultiAgentPolicyResponse("e")
    with pytest.raises(
        TypeError, match=re.escape("action must be a dict keyed by agent id, got list")
    ):
        MultiAgentPolicyResponse("e", action=[1, 2])
    r = MultiAgentPolicyResponse("e", action={"a": 1})
    with pytest.raises(TypeError, match="action must be a dict"):
        r.action = np.array([1])


def test_for_agent_splits_per_agent_fields_and_shares_the_rest():
    shared = np.arange(4)
    r = MultiAgentPolicyResponse(
        "e",
        action={"a": 1, "b": 2},
        log_prob={"a": -0.1, "b": -0.2},
        team={"red": 1},  # a dict, but not keyed by the agents: shared
        shared=shared,
        ts_env_sent_ns=7,
    )
    a = r.for_agent("a")
    assert type(a) is PolicyResponse
    assert a == PolicyResponse(
        "e", action=1, log_prob=-0.1, team={"red": 1}, shared=shared, ts_env_sent_ns=7
    )
    assert a.shared is shared
    assert r.is_per_agent("log_prob") and r.is_per_agent("action")
    assert not r.is_per_agent("team") and not r.is_per_agent("shared")
    with pytest.raises(
        KeyError, match=re.escape("agent 'c' has no action in this response; agents: ['a', 'b']")
    ):
        r.for_agent("c")
    with pytest.raises(KeyError, match="has no field 'nope'"):
        r.is_per_agent("nope")


def test_from_agents_is_inverse_of_for_agent():
    shared = np.arange(4)
    r = MultiAgentPolicyResponse(
        "e",
        action={"a": 1, "b": 2},
        value={"a": 0.1, "b": 0.2},
        shared=shared,
        ts_env_sent_ns=10**12,
    )
    parts = {agent: r.for_agent(agent) for agent in r.agent_ids}
    back = MultiAgentPolicyResponse.from_agents("e", parts, shared=["shared"])
    assert back == r
    assert back.shared is shared
    assert back.ts_env_sent_ns == 10**12  # stamps are shared whenever they are equal
    # without shared=, the field is per-agent: every agent keeps its own entry
    per_agent = MultiAgentPolicyResponse.from_agents("e", parts)
    assert per_agent.is_per_agent("shared")
    assert per_agent.for_agent("b") == parts["b"]


def test_from_agents_makes_every_unshared_field_per_agent():
    parts = {"x": PolicyResponse(None, action=0, v=1.5), "y": PolicyResponse(None, action=0, v=1.5)}
    r = MultiAgentPolicyResponse.from_agents("e", parts)
    assert r.action == {"x": 0, "y": 0}  # action is always per-agent
    assert r.v == {"x": 1.5, "y": 1.5}
    assert r.env_id == "e"
    assert MultiAgentPolicyResponse.from_agents("e", parts, shared="v").v == 1.5


def test_from_agents_errors():
    with pytest.raises(ValueError, match="responses is empty"):
        MultiAgentPolicyResponse.from_agents("e", {})
    with pytest.raises(TypeError, match="responses must be a mapping"):
        MultiAgentPolicyResponse.from_agents("e", [PolicyResponse("e", action=1)])
    with pytest.raises(
        TypeError,
        match=re.escape("response for agent 'a' must be a single-agent PolicyResponse, got int"),
    ):
        MultiAgentPolicyResponse.from_agents("e", {"a": 1})
    with pytest.raises(
        ValueError,
        match=re.escape("response for agent 'a' has env_id='other', expected 'e' or None"),
    ):
        MultiAgentPolicyResponse.from_agents("e", {"a": PolicyResponse("other", action=1)})
    parts = {"a": PolicyResponse("e", action=1, v=1), "b": PolicyResponse("e", action=1)}
    with pytest.raises(ValueError, match=re.escape("field 'v' is missing for agent(s) ['b']")):
        MultiAgentPolicyResponse.from_agents("e", parts)
    with pytest.raises(ValueError, match=re.escape("no response has an action; agents: ['a']")):
        MultiAgentPolicyResponse.from_agents("e", {"a": PolicyResponse("e", v=1)})
    two = {"a": PolicyResponse("e", action=1, v=1), "b": PolicyResponse("e", action=2, v=2)}
    with pytest.raises(
        ValueError,
        match=re.escape("shared field 'v' differs between agents: agent(s) ['b'] differ"),
    ):
        MultiAgentPolicyResponse.from_agents("e", two, shared=["v"])
    with pytest.raises(ValueError, match=re.escape("shared names 'action'")):
        MultiAgentPolicyResponse.from_agents("e", two, shared=["action"])
    with pytest.raises(ValueError, match=re.escape("shared names field(s) ['w'] that no agent")):
        MultiAgentPolicyResponse.from_agents("e", two, shared=["w"])
    stamped = {
        "a": PolicyResponse("e", action=1, ts_policy_sent_ns=10),
        "b": PolicyResponse("e", action=1, ts_policy_sent_ns=11),
    }
    with pytest.raises(ValueError, match=re.escape("shared field 'ts_policy_sent_ns' differs")):
        MultiAgentPolicyResponse.from_agents("e", stamped)


# ---------------------------------------------------------------- container types kept
def test_container_types_untouched_without_tensors():
    dd = defaultdict(list, {"a": [np.zeros(1)]})
    r = PolicyResponse("e", dd=dd, od=OrderedDict(x=1), nt=Hidden(1, 2))
    r.numpy().cpu()
    assert r.dd is dd
    assert type(r.od) is OrderedDict and type(r.nt) is Hidden
