"""``rlightning._fields``: building a response from fields that were already checked."""

from __future__ import annotations

import numpy as np
import pytest

from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning._fields import response_from_checked
from rlightning.types import response_from_fields


@pytest.mark.parametrize("env_id", [None, "", "env-0"])
def test_response_from_checked_equals_the_constructor(env_id: str | None) -> None:
    # The adapters' per-step paths build responses with this function instead of __init__.
    fields = {"action": {"a": np.int64(1)}, "log_prob": {"a": -0.5}}
    for cls in (PolicyResponse, MultiAgentPolicyResponse):
        built = response_from_checked(cls, env_id, fields)
        expected = cls(env_id, **fields)
        assert type(built) is cls
        assert list(vars(built)) == list(vars(expected)) == ["env_id", "action", "log_prob"]
        assert built == expected and repr(built) == repr(expected)
        assert built.action is fields["action"]  # values stored, not copied
    assert list(fields) == ["action", "log_prob"]  # the mapping passed in is not changed


@pytest.mark.parametrize("env_id", [None, "", "env-0"])
def test_response_from_fields_equals_the_constructor(env_id: str | None) -> None:
    fields = {"env_id": env_id, "action": {"a": np.int64(1)}, "log_prob": {"a": -0.5}}
    for cls in (PolicyResponse, MultiAgentPolicyResponse):
        built = response_from_fields(cls, fields)
        expected = cls(env_id, action=fields["action"], log_prob=fields["log_prob"])
        assert type(built) is cls
        assert list(vars(built)) == list(vars(expected)) == ["env_id", "action", "log_prob"]
        assert built == expected and repr(built) == repr(expected)
        assert built.action is fields["action"]  # values stored, not copied
        assert vars(built) is not fields  # the mapping is copied, not kept
    built.log_prob = {"a": 0.0}
    assert fields["log_prob"] == {"a": -0.5}  # the mapping passed in is not changed
