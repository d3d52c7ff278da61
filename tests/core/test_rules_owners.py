"""rlightning.rules' owners of the response and agent rules: one verdict at every old call site.

Each rule once had copies (the constructors, ``rlightning.testing``, the adapters); these tests
hold the call sites that remain in the core against the one owner, with the same verdict and the
same words. Runs without torch.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces

from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning.rules import (
    SHARED_FIELDS,
    STAMP_FIELDS,
    check_env_id,
    check_env_id_matches,
    check_env_ids,
    check_has_action,
    check_known_agents,
    check_live_agents,
    check_per_agent_field,
    check_per_agent_keys,
    check_response_type,
    response_type_error,
    takes_action_mask,
)
from rlightning.testing import check_multi_agent_policy_response, check_policy_response


class _PosesAs:
    """An object whose ``__class__`` lies, so ``isinstance`` takes it for ``cls``."""

    def __init__(self, cls: type) -> None:
        self._cls = cls

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return self._cls

    def __repr__(self) -> str:
        return "<poses as str>"


class _EnvName(str):
    """A user's str subclass: an env id."""


# ---------------------------------------------------------------------------- env-id
ENV_IDS: list[tuple[Any, bool]] = [
    (None, True),
    ("env-0", True),
    (_EnvName("env-1"), True),
    (np.str_("env-2"), True),
    (_PosesAs(str), False),  # isinstance() says str: the old checker of rlightning.testing took it
    (3, False),
    (np.int64(3), False),
    (b"env", False),
    (1.5, False),
    (["env"], False),
]


def _raises(call: Any) -> str | None:
    try:
        call()
    except TypeError as error:
        return str(error)
    return None


@pytest.mark.parametrize(("env_id", "valid"), ENV_IDS, ids=[repr(v) for v, _ in ENV_IDS])
def test_one_env_id_verdict_for_the_constructor_the_setter_and_the_checker(
    env_id: Any, valid: bool
) -> None:
    """PolicyResponse(...), response.env_id = ..., MultiAgentPolicyResponse(...) and
    check_policy_response judge an env id alike, in the same words."""
    built = _raises(lambda: PolicyResponse(env_id, action=1))
    multi = _raises(lambda: MultiAgentPolicyResponse(env_id, action={"a": 1}))
    response = PolicyResponse("e", action=1)
    setter = _raises(lambda: setattr(response, "env_id", env_id))
    raw = PolicyResponse(None, action=1)
    raw.__dict__["env_id"] = env_id  # past the constructor: what the checker itself says
    checker = _raises(lambda: check_policy_response(raw, spaces.Discrete(2)))
    owner = _raises(lambda: check_env_id(env_id))
    if valid:
        assert built is multi is setter is checker is owner is None
        return
    assert owner is not None
    assert built == multi == setter == owner
    assert checker == owner.replace("env_id", "response.env_id", 1)
    assert owner.startswith(f"env_id must be a str or None, not {type(env_id).__name__}; got ")
    assert owner.endswith("[rule env-id]")


def test_a_number_gets_the_str_hint() -> None:
    with pytest.raises(
        TypeError,
        match=re.escape(
            "env_id must be a str or None, not int64; got np.int64(7); fix: pass str(np.int64(7)) "
            "if a number identifies the env [rule env-id]"
        )
        if np.__version__ >= "2"
        else "fix: pass str",
    ):
        check_env_id(np.int64(7))


@pytest.mark.parametrize(
    "ids", [["a", "b"], ("a", "b"), np.array(["a", "b"]), [_EnvName("a"), np.str_("b")]]
)
def test_env_id_lists_of_str(ids: Any) -> None:
    checked = check_env_ids(ids, 2)
    assert checked == ["a", "b"] and type(checked) is list
    assert checked is not ids


@pytest.mark.parametrize(
    ("ids", "error", "message"),
    [
        (
            "ab",
            TypeError,
            "env_ids must be a sequence of str (a list, tuple or 1-D array), not str; got 'ab' "
            "[rule env-id]",
        ),
        ({"a", "b"}, TypeError, "env_ids must be a sequence of str"),
        ({"a": 0}, TypeError, "env_ids must be a sequence of str"),
        (np.array([["a"], ["b"]]), TypeError, "env_ids must be a sequence of str"),
        (_PosesAs(list), TypeError, "env_ids must be a sequence of str"),
        (
            ["a", 3],
            TypeError,
            "env_ids[1] must be a str, got int 3; got ['a', 3]; fix: pass str(3) if a number "
            "identifies the env [rule env-id]",
        ),
        (["a", _PosesAs(str)], TypeError, "env_ids[1] must be a str, got _PosesAs "),
        (["a", None], TypeError, "env_ids[1] must be a str, got NoneType None"),
        (
            ["a"],
            ValueError,
            "env_ids has 1 ids but there are 2 envs; got ['a']; fix: pass one env id per env "
            "[rule env-id]",
        ),
        (
            ["a", "a"],
            ValueError,
            "env_ids repeats ['a']: each env needs its own id; got ['a', 'a'] [rule env-id]",
        ),
    ],
)
def test_env_id_lists_refused(ids: Any, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=re.escape(message)):
        check_env_ids(ids, 2)


def test_env_id_lists_name_their_owner_and_what_each_id_is_for() -> None:
    with pytest.raises(
        ValueError,
        match=re.escape(
            "runner 'r0' env_ids has 3 ids but runner 'r0' has 2 envs; got ['a', 'b', 'c']; fix: "
            "pass one env id per env"
        ),
    ):
        check_env_ids(
            ["a", "b", "c"], 2, subject="runner 'r0' env_ids", count="runner 'r0' has 2 envs"
        )
    assert check_env_ids([], 0) == []
    assert check_env_ids(["x", "y", "z"]) == ["x", "y", "z"]  # no count asked


def test_a_part_carries_no_env_id_or_its_wholes() -> None:
    check_env_id_matches(None, "e", "part")
    check_env_id_matches("e", "e", "part")
    with pytest.raises(
        ValueError,
        match=re.escape("part has another env_id; got 'x'; expected None [rule env-id]"),
    ):
        check_env_id_matches("x", None, "part")
    responses = {"a": PolicyResponse("x", action=0)}
    with pytest.raises(ValueError, match=re.escape("response for agent 'a' has another env_id")):
        MultiAgentPolicyResponse.from_agents("e", responses)


# ---------------------------------------------------------------------------- response-type
def test_response_type_names_the_other_checker() -> None:
    multi = MultiAgentPolicyResponse("e", action={"a": 1})
    check_response_type(multi, multi_agent=True)
    check_response_type(PolicyResponse("e", action=1), multi_agent=False)
    error = response_type_error(multi, multi_agent=False)
    assert type(error) is TypeError
    assert str(error) == (
        "response must be a single-agent PolicyResponse, not MultiAgentPolicyResponse; got "
        "MultiAgentPolicyResponse(env_id='e', action={'a': 1}); fix: use "
        "check_multi_agent_policy_response for a MultiAgentPolicyResponse [rule response-type]"
    )
    with pytest.raises(TypeError, match=re.escape("arg must be a MultiAgentPolicyResponse, not")):
        check_response_type(3, multi_agent=True, subject="arg", fix="wrap it")


def test_has_action_lists_the_fields_there_are() -> None:
    assert check_has_action({"action": 0}) == 0
    with pytest.raises(
        ValueError,
        match=re.escape(
            "agent 'a' has no action field among its fields; got ['value', 'log_prob'] "
            "[rule has-action]"
        ),
    ):
        check_has_action({"env_id": "e", "value": 1.0, "log_prob": 0.0}, "agent 'a'")


# ---------------------------------------------------------------------------- per-agent keys
def _unchecked(**fields: Any) -> MultiAgentPolicyResponse:
    response = MultiAgentPolicyResponse("e", action=fields.pop("action"))
    response.__dict__.update(fields)  # past the constructor: what the checker itself says
    return response


PER_AGENT_CASES: list[tuple[dict[str, Any], Any, bool]] = [
    ({"a": 0, "b": 1}, {"a": -0.1}, False),
    ({"a": 0, "b": 1}, {"b": -0.1}, False),
    ({"a": 0, "b": 1}, {"a": -0.1, "b": None}, True),
    ({"a": 0, "b": 1}, {"a": -0.1, "b": -0.2, "c": 1}, True),  # a key that is no agent: shared
    ({"a": 0, "b": 1}, {"team": "red"}, True),
    ({"a": 0, "b": 1}, {}, True),
    ({"a": 0}, {"a": 1.0}, True),
    ({1: 0, 2: 1}, {1: 0.5}, False),
    ({"a": 0, "b": 1}, [0.1, 0.2], True),
]


@pytest.mark.parametrize(("actions", "field", "valid"), PER_AGENT_CASES)
def test_one_per_agent_keys_verdict_for_the_constructor_the_setter_and_the_checker(
    actions: dict[Any, Any], field: Any, valid: bool
) -> None:
    """The constructor, setting a field, and check_multi_agent_policy_response (given the
    agents of action as the spaces) refuse the same fields, in the same words."""

    def error(call: Any) -> str | None:
        try:
            call()
        except ValueError as caught:
            return str(caught)
        return None

    built = error(lambda: MultiAgentPolicyResponse("e", action=actions, extra=field))
    response = MultiAgentPolicyResponse("e", action=actions)
    setter = error(lambda: setattr(response, "extra", field))
    space_of = dict.fromkeys(actions, spaces.Discrete(2))
    checker = error(
        lambda: check_multi_agent_policy_response(_unchecked(action=actions, extra=field), space_of)
    )
    owner = error(lambda: check_per_agent_field("extra", field, actions.keys()))
    keys = error(lambda: check_per_agent_keys({"extra": field}, list(actions)))
    if valid:
        assert built is setter is checker is owner is keys is None
        return
    assert built == setter == checker == owner == keys
    assert owner is not None and owner.endswith("[rule per-agent-keys]")


def test_a_field_keyed_by_an_agent_that_has_left_is_refused_where_the_agents_are_known() -> None:
    """The env's other agents are agent ids too: a dict keyed by a departed agent is stale."""
    actions = {"a": 0}
    field = {"a": -0.1, "b": -0.2}  # "b" has left: the constructor cannot know it
    MultiAgentPolicyResponse("e", action=actions, log_prob=field)
    message = (
        "response.log_prob is keyed by agent ids but not by exactly action's agents ['a']: "
        "missing [], extra ['b'], so it would be read as shared by all agents and "
        "for_agent('a') would get the whole dict"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        check_per_agent_field("log_prob", field, actions.keys(), known_agents=["b"])
    spaces_ab = {"a": spaces.Discrete(2), "b": spaces.Discrete(2)}
    with pytest.raises(ValueError, match=re.escape(message)):
        check_multi_agent_policy_response(
            MultiAgentPolicyResponse("e", action=actions, log_prob=field), spaces_ab
        )


def test_a_declared_per_agent_field_must_have_exactly_the_agents() -> None:
    check_per_agent_field("v", {"a": 1, "b": 2}, ["a", "b"], declared=True)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "f(): v is a per-agent field but not keyed by exactly action's agents ['a', 'b']: "
            "missing ['b'], extra ['team']; got {'a': 1, 'team': 2}"
        ),
    ):
        check_per_agent_field("v", {"a": 1, "team": 2}, ["a", "b"], subject="f(): ", declared=True)


# ---------------------------------------------------------------------------- agents
def test_known_and_live_agents() -> None:
    check_known_agents({"a": 0}, {"a": None, "b": None})
    with pytest.raises(ValueError, match=re.escape("has agent(s) ['z'] with no action space")):
        check_known_agents({"z": 0}, {"a": None})
    assert check_live_agents({"a": 0, "b": None}, ["a", "b"]) == []  # b waits: live, None
    assert check_live_agents({"a": 0, "x": 1}, ["a"], allow_inactive=True) == ["x"]
    with pytest.raises(
        ValueError,
        match=re.escape(
            "response.action has action(s) for agent(s) ['x'] that are not live (live: ['a']); "
            "got {'a': 0, 'x': 1}; fix: drop them: a terminated, truncated or unknown agent "
            "takes no action [rule no-inactive-action]"
        ),
    ):
        check_live_agents({"a": 0, "x": 1}, ["a"])
    with pytest.raises(ValueError, match=re.escape("lacks live agent(s) ['b']; got {'a': 0}; ")):
        check_live_agents({"a": 0}, ("a", "b"), allow_inactive=True)


def test_a_waiting_agent_is_live_for_the_checker() -> None:
    """``live_agents=env.agents``: the waiting agent (action None, an empty mask) is among them."""
    mask = {"a": np.array([1, 0], np.int8), "b": np.zeros(2, np.int8)}
    response = MultiAgentPolicyResponse("e", action={"a": 0, "b": None}, action_mask=mask)
    space_of = {"a": spaces.Discrete(2), "b": spaces.Discrete(2)}
    check_multi_agent_policy_response(response, space_of, live_agents=["a", "b"])


# ---------------------------------------------------------------------------- Ray's stamps
RAY_STAMPS = {
    "ts_env_sent_ns": 1_700_000_000_000_000_000,
    "ts_policy_recv_ns": 1_700_000_000_000_100_000,
    "ts_infer_start_ns": 1_700_000_000_000_200_000,
    "ts_policy_sent_ns": 1_700_000_000_000_300_000,
}


def test_stamp_fields_are_every_stamp_a_step_carries() -> None:
    assert set(RAY_STAMPS) == STAMP_FIELDS
    assert STAMP_FIELDS | {"policy_version"} == SHARED_FIELDS


def test_to_dict_leaves_out_every_stamp_and_keeps_policy_version() -> None:
    response = PolicyResponse("e", action=1, policy_version=3, **RAY_STAMPS)
    assert response.to_dict() == {"action": 1, "policy_version": 3}
    only_ray = PolicyResponse("e", ts_policy_recv_ns=5, action=1, ts_infer_start_ns=6)
    assert only_ray.to_dict() == {"action": 1}
    multi = MultiAgentPolicyResponse("e", action={"a": 1}, **RAY_STAMPS)
    assert multi.to_dict() == {"action": {"a": 1}}


def test_from_agents_shares_every_stamp_and_policy_version() -> None:
    parts = {
        agent: PolicyResponse("e", action=i, value=0.5 * i, policy_version=7, **RAY_STAMPS)
        for i, agent in enumerate(["a", "b"])
    }
    combined = MultiAgentPolicyResponse.from_agents("e", parts)
    for name, stamp in RAY_STAMPS.items():
        assert combined.__dict__[name] == stamp, name
    assert combined.policy_version == 7
    assert combined.is_per_agent("value") and not combined.is_per_agent("policy_version")
    assert combined.for_agent("b") == parts["b"]


@pytest.mark.parametrize(
    ("name", "hint"),
    [
        ("ts_policy_recv_ns", "stamp the combined response instead"),
        ("ts_infer_start_ns", "stamp the combined response instead"),
        ("policy_version", "answers of different policy weights are not one response"),
    ],
)
def test_from_agents_refuses_agents_that_differ_in_a_shared_field(name: str, hint: str) -> None:
    parts = {
        "a": PolicyResponse("e", action=0, **{name: 1}),
        "b": PolicyResponse("e", action=1, **{name: 2}),
    }
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"shared field {name!r} differs between agents: agent(s) ['b'] differ from agent 'a'; "
            f"{hint}"
        ),
    ):
        MultiAgentPolicyResponse.from_agents("e", parts)


@pytest.mark.parametrize("name", ["ts_policy_recv_ns", "ts_infer_start_ns"])
def test_the_checker_applies_the_stamp_rule_to_rays_stamps(name: str) -> None:
    with pytest.raises(
        ValueError,
        match=re.escape(f"response.{name} must not be negative; got -1 [rule timestamp]"),
    ):
        check_policy_response(PolicyResponse("e", action=0, **{name: -1}), spaces.Discrete(2))
    with pytest.raises(TypeError, match=re.escape(f"response.{name} must be an int")):
        check_multi_agent_policy_response(
            MultiAgentPolicyResponse("e", action={"a": 0}, **{name: 1.5}),
            {"a": spaces.Discrete(2)},
        )


def test_a_waiting_agent_may_carry_the_shared_policy_version() -> None:
    """policy_version and the stamps are the response's, not a waiting agent's outputs."""
    response = MultiAgentPolicyResponse(
        "e",
        action={"a": 0, "b": None},
        action_mask={"a": np.ones(2, np.int8), "b": np.zeros(2, np.int8)},
        policy_version=4,
        **RAY_STAMPS,
    )
    space_of = {"a": spaces.Discrete(2), "b": spaces.Discrete(2)}
    check_multi_agent_policy_response(response, space_of, live_agents=["a", "b"])
    made_up = MultiAgentPolicyResponse(
        "e",
        action={"a": 0, "b": None},
        action_mask={"a": np.ones(2, np.int8), "b": np.zeros(2, np.int8)},
        value={"a": 0.1, "b": 0.2},
    )
    with pytest.raises(ValueError, match=re.escape("but has policy outputs ['value']")):
        check_multi_agent_policy_response(made_up, space_of)


# ---------------------------------------------------------------------------- the mask predicate
@pytest.mark.parametrize(
    ("space", "takes"),
    [
        (spaces.Discrete(3), True),
        (spaces.MultiDiscrete([2, 3]), True),
        (spaces.MultiBinary(3), True),
        (spaces.MultiDiscrete([[2, 3], [2, 2]]), True),  # read, then refused: not defined
        (spaces.MultiBinary([2, 2]), True),
        (spaces.Box(-1, 1, (2,)), False),
        (spaces.Dict({"a": spaces.Discrete(2)}), False),
        (spaces.Tuple([spaces.Discrete(2)]), False),
    ],
)
def test_takes_action_mask(space: spaces.Space[Any], takes: bool) -> None:
    assert takes_action_mask(space) is takes


def test_the_checker_reads_masks_by_the_predicate() -> None:
    """A Box "mask" is not read; a multi-dimensional MultiDiscrete mask is refused."""
    box = spaces.Box(-1, 1, (2,), np.float32)
    check_policy_response(
        PolicyResponse("e", action=np.zeros(2, np.float32), action_mask=[0, 0]), box
    )
    grid = spaces.MultiDiscrete([[2, 2], [2, 2]])
    with pytest.raises(ValueError, match=re.escape("is not defined for MultiDiscrete")):
        check_policy_response(
            PolicyResponse("e", action=np.zeros((2, 2), np.int64), action_mask=np.ones(8)), grid
        )
