"""SB3PolicyAdapter's env ids follow rule env-id (rlightning.rules.check_env_ids), as the core's.

Before, the adapter took an id by ``isinstance(env_id, str)``, so an object whose ``__class__``
claims ``str`` became a response's env id, and ``env_actions`` compared ``env_ids`` of ints with
the responses' str ids (a "do not match" ValueError instead of the kind error).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest

from rlightning import PolicyResponse
from rlightning.rules import check_env_ids
from rlightning_sb3 import SB3PolicyAdapter

pytestmark = pytest.mark.torch


class _PosesAs:
    """An object whose ``__class__`` lies, so ``isinstance`` takes it for ``cls``."""

    def __init__(self, cls: type) -> None:
        self._cls = cls

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        return self._cls

    def __hash__(self) -> int:
        return 0


class _EnvName(str):
    """A user's str subclass."""


def _obs(n: int) -> np.ndarray:
    return np.zeros((n, 4), np.float32)


@pytest.mark.parametrize(
    "ids",
    [
        ["a", "b"],
        ("a", "b"),
        np.array(["a", "b"]),
        [_EnvName("a"), np.str_("b")],
        ["a", _PosesAs(str)],
        ["a", 1],
        ["a", None],
        ["a", "a"],
        ["a"],
        {"a", "b"},
    ],
)
def test_act_and_predict_judge_env_ids_as_the_core_rule_does(
    ppo2_adapter: SB3PolicyAdapter, ids: Any
) -> None:
    try:
        expected: list[str] | None = check_env_ids(ids, 2)
        error = None
    except (TypeError, ValueError) as caught:
        expected, error = None, caught
    for call in (ppo2_adapter.act, lambda obs, i: ppo2_adapter.predict(obs, env_ids=i)):
        if error is None:
            answer = call(_obs(2), ids)
            assert [r.env_id for r in answer] == expected
            assert all(issubclass(type(r.env_id), str) for r in answer)
        else:
            # The same verdict and subject; the adapter words the count per row of the batch.
            subject = str(error).split(" ")[0]
            with pytest.raises(type(error), match=rf"^{re.escape(subject)} .*\[rule env-id\]$"):
                call(_obs(2), ids)


def test_an_object_posing_as_str_never_becomes_an_env_id(ppo1_adapter: SB3PolicyAdapter) -> None:
    with pytest.raises(
        TypeError, match=re.escape("env_ids[0] must be a str, got _PosesAs ")
    ) as caught:
        ppo1_adapter.act(_obs(1), [_PosesAs(str)])
    assert str(caught.value).endswith("[rule env-id]")


def test_env_actions_refuses_env_ids_that_are_not_str(ppo2_adapter: SB3PolicyAdapter) -> None:
    responses = [PolicyResponse("0", action=np.int64(0)), PolicyResponse("1", action=np.int64(1))]
    with pytest.raises(
        TypeError,
        match=re.escape(
            "env_ids[0] must be a str, got int 0; got [0, 1]; fix: pass str(0) if a number "
            "identifies the env [rule env-id]"
        ),
    ):
        ppo2_adapter.env_actions(responses, [0, 1])  # type: ignore[list-item]
    got = ppo2_adapter.env_actions(responses, ["1", "0"])
    np.testing.assert_array_equal(got, np.array([1, 0]), strict=False)
