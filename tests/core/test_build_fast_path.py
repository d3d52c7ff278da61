"""Regression tests for the build fast path: ``__init__`` checks and ``to_dict``.

``PolicyResponse.__init__`` checks ``env_id`` and the reserved names inline, and
``MultiAgentPolicyResponse.__init__`` repeats that body instead of calling ``super().__init__``
(see docs/performance.md); these tests pin that nothing it must refuse gets through and that the
fields keep their order. They need no torch.
"""

from __future__ import annotations

import collections
import re

import numpy as np
import pytest

from rlightning import MultiAgentPolicyResponse, PolicyResponse


# ids avoid the bare word "cuda": conftest treats a test whose keywords include it as a GPU test.
@pytest.mark.parametrize(
    "name",
    ["to_dict", "cpu", "numpy", "to", "cuda", "__class__", "__dict__"],
    ids=lambda name: f"name={name}",
)
def test_reserved_names_are_refused_at_construction(name: str) -> None:
    msg = f"field name(s) {name!r} would shadow PolicyResponse.{name}"
    with pytest.raises(ValueError, match=re.escape(msg)):
        PolicyResponse("e", **{name: 1})
    msg = f"field name(s) {name!r} would shadow MultiAgentPolicyResponse.{name}"
    with pytest.raises(ValueError, match=re.escape(msg)):
        MultiAgentPolicyResponse("e", action={"a": 1}, **{name: 1})
    r = PolicyResponse("e", action=1)
    with pytest.raises(ValueError, match=re.escape(f"would shadow PolicyResponse.{name}")):
        setattr(r, name, 1)


def test_reserved_names_include_members_of_subclasses() -> None:
    with pytest.raises(ValueError, match=re.escape("'agent_ids' would shadow")):
        MultiAgentPolicyResponse("e", action={"a": 1}, agent_ids=[1])


def test_env_id_checks() -> None:
    class Name(str):
        pass

    assert PolicyResponse(None, action=1).env_id is None
    assert PolicyResponse(env_id="e", action=1).env_id == "e"
    assert PolicyResponse(Name("e"), action=1).env_id == "e"
    msg = "env_id must be a str (or None), got int 3; pass str(3) if a number identifies the env"
    with pytest.raises(TypeError, match=re.escape(msg)):
        PolicyResponse(3, action=1)
    with pytest.raises(TypeError, match=re.escape(msg)):
        MultiAgentPolicyResponse(3, action={"a": 1})


def test_multi_agent_action_checks() -> None:
    with pytest.raises(TypeError, match=re.escape("MultiAgentPolicyResponse needs action=")):
        MultiAgentPolicyResponse("e", value=1)
    with pytest.raises(TypeError, match=re.escape("must be a dict keyed by agent id, got list")):
        MultiAgentPolicyResponse("e", action=[1, 2])
    od = collections.OrderedDict(a=1)
    assert MultiAgentPolicyResponse("e", action=od).action is od


def test_fields_keep_their_order_and_env_id_comes_first() -> None:
    r = PolicyResponse("e", b=1, a=2, c=3)
    assert list(vars(r)) == ["env_id", "b", "a", "c"]
    assert list(r.to_dict()) == ["b", "a", "c"]


def test_to_dict_is_a_new_dict_without_the_envelope() -> None:
    t = np.zeros(1)
    r = PolicyResponse("e", action=t, ts_env_sent_ns=5, value=1.0)
    r.mark_policy_sent()
    d = r.to_dict()
    assert d == {"action": t, "value": 1.0}
    assert d["action"] is t
    d["extra"] = 1
    assert not hasattr(r, "extra")
    assert r.ts_env_sent_ns == 5


@pytest.mark.parametrize("env_id", [None, "", "env-0"])
def test_response_from_checked_equals_the_constructor(env_id: str | None) -> None:
    # The adapters' per-step paths build responses with this helper instead of __init__.
    from rlightning._fields import response_from_checked

    fields = {"action": {"a": np.int64(1)}, "log_prob": {"a": -0.5}}
    for cls in (PolicyResponse, MultiAgentPolicyResponse):
        built = response_from_checked(cls, env_id, fields)
        expected = cls(env_id, **fields)
        assert type(built) is cls
        assert list(vars(built)) == list(vars(expected)) == ["env_id", "action", "log_prob"]
        assert built == expected and repr(built) == repr(expected)
        assert built.action is fields["action"]  # values stored, not copied
    assert list(fields) == ["action", "log_prob"]  # the mapping passed in is not changed
