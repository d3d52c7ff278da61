"""MultiAgentPolicyResponse (``rlightning.types._multi_agent``): per-agent fields by agent id.

Construction and reserved names, ``make_example`` over a dict of spaces, ``for_agent`` (split one
agent's response off) and ``from_agents`` (merge per-agent responses), with non-str agent ids.
"""

from __future__ import annotations

import collections
import pickle
import re
import time

import gymnasium as gym
import numpy as np
import pytest

from rlightning import MultiAgentPolicyResponse, PolicyResponse

_DISCRETE = gym.spaces.Discrete(4, start=1)
_BOX = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)


# ---------------------------------------------------------------- construction & reserved names
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


def test_multi_agent_action_checks() -> None:
    with pytest.raises(TypeError, match=re.escape("MultiAgentPolicyResponse needs action=")):
        MultiAgentPolicyResponse("e", value=1)
    with pytest.raises(TypeError, match=re.escape("must be a dict keyed by agent id, got list")):
        MultiAgentPolicyResponse("e", action=[1, 2])
    od = collections.OrderedDict(a=1)
    assert MultiAgentPolicyResponse("e", action=od).action is od


def test_multi_agent_reserved_names_include_its_members():
    for name in ("for_agent", "from_agents", "agent_ids", "is_per_agent"):
        with pytest.raises(ValueError, match=re.escape(repr(name))):
            MultiAgentPolicyResponse("e", action={"a": 1}, **{name: 1})
    # ... which the single-agent class does not reserve
    assert PolicyResponse("e", agent_ids=[1]).agent_ids == [1]


def test_reserved_names_include_members_of_subclasses() -> None:
    with pytest.raises(ValueError, match=re.escape("'agent_ids' would shadow")):
        MultiAgentPolicyResponse("e", action={"a": 1}, agent_ids=[1])


def test_multi_agent_reserved_names_and_bad_action_assignment() -> None:
    with pytest.raises(ValueError, match="agent_ids"):
        MultiAgentPolicyResponse("env-0", action={"a": 1}, agent_ids=["a"])
    response = MultiAgentPolicyResponse("env-0", action={"a": 1})
    with pytest.raises(ValueError, match="agent_ids"):
        response.agent_ids = ["b"]  # type: ignore[misc]
    with pytest.raises(TypeError, match="dict keyed by agent id"):
        response.action = [1]
    assert response.agent_ids == ["a"]


# ---------------------------------------------------------------- make_example
def test_multi_agent_make_example():
    spaces = {"a": _DISCRETE, "b": _BOX}
    r = MultiAgentPolicyResponse.make_example(spaces, "e", value={"a": 1.0, "b": 2.0})
    assert type(r) is MultiAgentPolicyResponse
    assert r.agent_ids == ["a", "b"]
    assert all(spaces[a].contains(r.action[a]) for a in spaces)
    assert MultiAgentPolicyResponse.make_example(spaces).env_id is None


def test_multi_agent_make_example_errors():
    with pytest.raises(TypeError, match=re.escape("action_spaces must be a dict")):
        MultiAgentPolicyResponse.make_example([_BOX])
    with pytest.raises(ValueError, match=re.escape("action_spaces is empty")):
        MultiAgentPolicyResponse.make_example({})
    with pytest.raises(TypeError, match=re.escape("action_spaces['b'] must be a gymnasium.Space")):
        MultiAgentPolicyResponse.make_example({"a": _BOX, "b": "Box"})


# ---------------------------------------------------------------- for_agent
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


def _partial_message(
    name: str,
    missing: list[str],
    agents: list[str],
    got: str,
    when: str = "action's agents",
) -> str:
    return (
        f"response.{name} is keyed by agent ids but not by exactly {when} {agents}: missing "
        f"{missing}, extra [], so it would be read as shared by all agents and "
        f"for_agent({missing[0]!r}) would get the whole dict; got {got}; fix: give every agent "
        "of action an entry (None for an agent that has none), or rekey a dict meant to be "
        "shared by all agents [rule per-agent-keys]"
    )


def test_a_field_keyed_by_some_of_the_agents_is_refused_naming_the_field_and_the_missing() -> None:
    # Read as shared, log_prob={"a": -0.1} would hand agent "b" a dict holding agent a's entry.
    msg = _partial_message("log_prob", ["b"], ["a", "b"], "{'a': -0.1}")
    with pytest.raises(ValueError, match=re.escape(msg)):
        MultiAgentPolicyResponse("e", action={"a": 0, "b": 1}, log_prob={"a": -0.1})
    msg = _partial_message("value", ["b"], ["a", "b", "c"], "{'c': 1.0, 'a': 2.0}")
    with pytest.raises(ValueError, match=re.escape(msg)):
        MultiAgentPolicyResponse("e", action={"a": 0, "b": 1, "c": 2}, value={"c": 1.0, "a": 2.0})


def test_every_agent_with_an_entry_none_for_an_agent_without_is_per_agent() -> None:
    r = MultiAgentPolicyResponse("e", action={"a": 0, "b": 1}, log_prob={"a": -0.1, "b": None})
    assert r.is_per_agent("log_prob")
    assert r.for_agent("a").log_prob == -0.1
    assert r.for_agent("b").log_prob is None


@pytest.mark.parametrize(
    "value",
    [
        {},  # no key: shared
        {"team": "red"},  # no agent id: shared
        {"a": 1, "team": "red"},  # a key that is not an agent id: shared
        {"a": 1, "b": 2, "c": 3},  # more keys than agents: shared
    ],
)
def test_a_dict_field_not_keyed_by_some_of_the_agents_stays_shared(value: dict[str, int]) -> None:
    r = MultiAgentPolicyResponse("e", action={"a": 0, "b": 1}, info=value)
    assert not r.is_per_agent("info")
    assert r.for_agent("b").info is value


def test_setting_a_field_or_the_action_checks_the_same_rule() -> None:
    r = MultiAgentPolicyResponse("e", action={"a": 0, "b": 1}, log_prob={"a": -0.1, "b": -0.2})
    msg = _partial_message("value", ["a"], ["a", "b"], "{'b': 0.5}")
    with pytest.raises(ValueError, match=re.escape(msg)):
        r.value = {"b": 0.5}
    assert "value" not in vars(r)
    msg = _partial_message(
        "log_prob",
        ["c"],
        ["a", "b", "c"],
        "{'a': -0.1, 'b': -0.2}",
        when="the new action's agents",
    )
    with pytest.raises(ValueError, match=re.escape(msg)):
        r.action = {"a": 0, "b": 1, "c": 2}
    assert r.action == {"a": 0, "b": 1}  # unchanged
    r.log_prob = {"a": -0.1, "b": -0.2, "c": -0.3}  # a superset of the agents: shared for now
    r.action = {"a": 0, "b": 1, "c": 2}  # then per-agent again
    assert r.for_agent("c").log_prob == -0.3


def test_from_agents_refuses_a_shared_dict_keyed_by_some_of_the_agents() -> None:
    responses = {
        "a": PolicyResponse("e", action=0, bonus={"a": 1.0}),
        "b": PolicyResponse("e", action=1, bonus={"a": 1.0}),
    }
    msg = (
        "shared field 'bonus' is a dict keyed by agent ids, so it would look per-agent with "
        "agents missing, which the constructor refuses; make it per-agent (leave it out of "
        "shared=) or rekey it"
    )
    with pytest.raises(ValueError, match=re.escape(msg)):
        MultiAgentPolicyResponse.from_agents("e", responses, shared=["bonus"])
    merged = MultiAgentPolicyResponse.from_agents("e", responses)  # per-agent: fine
    assert merged.for_agent("b").bonus == {"a": 1.0}


def test_for_agent_unhashable_id_is_a_clear_error() -> None:
    response = MultiAgentPolicyResponse("env-0", action={"a": 1, "b": 2})
    with pytest.raises((TypeError, KeyError), match="agent"):
        response.for_agent(["a"])


# ---------------------------------------------------------------- from_agents
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
        match=re.escape(
            "response for agent 'a' has another env_id; got 'other'; expected 'e' or None "
            "[rule env-id]"
        ),
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


def test_non_string_agent_ids_round_trip() -> None:
    responses = {0: PolicyResponse(None, action=1), ("team", 1): PolicyResponse(None, action=2)}
    merged = MultiAgentPolicyResponse.from_agents("env-0", responses)
    assert merged.agent_ids == [0, ("team", 1)]
    assert merged.for_agent(("team", 1)).action == 2
    assert pickle.loads(pickle.dumps(merged)) == merged


def test_a_subclass_may_not_define_action() -> None:
    with pytest.raises(TypeError, match="defines a member named 'action'"):

        class Shadowing(MultiAgentPolicyResponse):
            @property
            def action(self) -> object:
                return None


def test_a_subclass_reserves_its_own_members_beside_a_lone_action() -> None:
    class Teamed(MultiAgentPolicyResponse):
        def team(self) -> str:
            return "red"

    with pytest.raises(ValueError, match=re.escape("'team' would shadow Teamed.team")):
        Teamed("e", action={"a": 1}, team="blue")
    lone = Teamed("e", action={"a": 1})
    assert lone.team() == "red" and lone.action == {"a": 1}


@pytest.mark.parametrize(
    ("env_id", "data", "error"),
    [
        (3, {"action": {"a": 1}}, TypeError),  # env_id checked on the lone-action path too
        ("e", {"action": [1]}, TypeError),
        ("e", {}, TypeError),
        ("e", {"value": {"a": 1}}, TypeError),
        ("e", {"action": {"a": 1, "b": 2}, "value": {"a": 1}}, ValueError),
    ],
)
def test_every_check_runs_whatever_the_fields(env_id: object, data: dict, error: type) -> None:
    with pytest.raises(error):
        MultiAgentPolicyResponse(env_id, **data)  # type: ignore[arg-type]


def test_action_is_stored_first_wherever_it_is_given() -> None:
    r = MultiAgentPolicyResponse("e", value={"a": 0.5}, action={"a": 0}, info="x")
    assert list(r.to_dict()) == ["action", "value", "info"]
    assert list(vars(r)) == ["env_id", "action", "value", "info"]
    assert r == MultiAgentPolicyResponse("e", action={"a": 0}, value={"a": 0.5}, info="x")
    assert pickle.loads(pickle.dumps(r)) == r


def test_fields_a_subclass_sets_before_super_init_are_checked_against_the_agents() -> None:
    class Early(MultiAgentPolicyResponse):
        def __init__(self, env_id: str, action: dict, extra: object) -> None:
            self.extra = extra  # before action exists: __setattr__ cannot check it yet
            super().__init__(env_id, action=action)

    with pytest.raises(ValueError, match=re.escape("response.extra is keyed by agent ids")):
        Early("e", {"a": 1, "b": 2}, {"a": 9})
    ok = Early("e", {"a": 1, "b": 2}, {"a": 9, "b": 8})
    assert ok.for_agent("b").extra == 8
