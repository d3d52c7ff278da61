"""``rlightning._fields``: building a response from fields that were already checked."""

from __future__ import annotations

import numpy as np
import pytest

from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning._fields import response_from_checked


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
