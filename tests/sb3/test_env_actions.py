"""SB3PolicyAdapter.env_actions: responses back into the array VecEnv.step takes."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env

from rlightning import PolicyResponse
from rlightning_sb3 import SB3PolicyAdapter

pytestmark = pytest.mark.torch


@pytest.fixture(scope="module")
def adapter() -> SB3PolicyAdapter:
    env = make_vec_env("CartPole-v1", n_envs=1, seed=0)
    return SB3PolicyAdapter(PPO("MlpPolicy", env, n_steps=16, policy_kwargs={"net_arch": [8]}))


def _responses(*ids: str) -> list[PolicyResponse]:
    return [PolicyResponse(env_id, action=np.array([i, 10 * i])) for i, env_id in enumerate(ids)]


def test_order_of_responses_kept_without_env_ids(adapter: SB3PolicyAdapter) -> None:
    got = adapter.env_actions(_responses("a", "b", "c"))
    np.testing.assert_array_equal(got, np.array([[0, 0], [1, 10], [2, 20]]))


@given(st.permutations(["e0", "e1", "e2", "e3", "e4"]))
def test_env_ids_put_any_order_back_in_env_order(
    adapter: SB3PolicyAdapter, order: list[str]
) -> None:
    responses = {r.env_id: r for r in _responses("e0", "e1", "e2", "e3", "e4")}
    shuffled = [responses[env_id] for env_id in order]
    got = adapter.env_actions(shuffled, env_ids=["e0", "e1", "e2", "e3", "e4"])
    np.testing.assert_array_equal(got[:, 0], np.arange(5))


def test_discrete_scalars_stack_to_a_1d_array(adapter: SB3PolicyAdapter) -> None:
    responses = [PolicyResponse("a", action=np.int64(1)), PolicyResponse("b", action=np.int64(0))]
    got = adapter.env_actions(responses, ["b", "a"])
    assert got.dtype == np.int64
    np.testing.assert_array_equal(got, [0, 1])


def test_the_result_is_a_new_array(adapter: SB3PolicyAdapter) -> None:
    responses = _responses("a", "b")
    got = adapter.env_actions(responses)
    got[:] = -1
    assert responses[0].action[1] == 0


@pytest.mark.parametrize(
    ("responses", "env_ids", "error", "message"),
    [
        (
            _responses("a", "b", "a"),
            None,
            ValueError,
            "several responses for env id(s) ['a']: give one response per env",
        ),
        (
            _responses("a", "b"),
            ["a", "b", "b"],
            ValueError,
            "env_ids repeats ['b']: each env of the VecEnv needs its own id",
        ),
        (
            _responses("a", "b"),
            ["a", "b", "c"],
            ValueError,
            "env_ids has 3 ids but there are 2 responses; envs without a response: ['c'], "
            "responses for unknown env ids: []",
        ),
        (
            _responses("a", "b", "x"),
            ["a", "b"],
            ValueError,
            "env_ids has 2 ids but there are 3 responses; envs without a response: [], "
            "responses for unknown env ids: ['x']",
        ),
        (
            _responses("a", "x"),
            ["a", "b"],
            ValueError,
            "responses do not match env_ids: envs without a response: ['b'], "
            "responses for unknown env ids: ['x']",
        ),
        ([], None, ValueError, "responses is empty: pass one PolicyResponse per env"),
        (
            PolicyResponse("a", action=1),
            None,
            TypeError,
            "responses must be a sequence of PolicyResponse (one per env), got PolicyResponse",
        ),
        (
            [PolicyResponse("a", action=1), {"action": 2}],
            None,
            TypeError,
            "responses[1] must be a PolicyResponse, got dict",
        ),
        (
            _responses("a"),
            "a",
            TypeError,
            "env_ids must be a sequence of str in the VecEnv's env order, not str; got 'a' "
            "[rule env-id]",
        ),
        (
            [PolicyResponse("a", action=1), PolicyResponse("b", value=2)],
            None,
            ValueError,
            "response for env 'b' has no action field",
        ),
        (
            [PolicyResponse("a", action=np.zeros(2)), PolicyResponse("b", action=np.zeros(3))],
            None,
            ValueError,
            "actions have different shapes: 'a': (2,), 'b': (3,)",
        ),
    ],
)
def test_errors_name_the_ids(
    adapter: SB3PolicyAdapter,
    responses: Any,
    env_ids: Any,
    error: type[Exception],
    message: str,
) -> None:
    with pytest.raises(error, match=re.escape(message)):
        adapter.env_actions(responses, env_ids)


# --------------------------------------------------------------------- refusals that name the env


def _obs(n: int) -> np.ndarray:
    return np.zeros((n, 4), np.float32)


def test_env_actions_of_a_stacked_response_is_not_taken_as_one_env(
    ppo1_adapter: SB3PolicyAdapter,
) -> None:
    responses = [PolicyResponse("a", action=np.int64(1)), PolicyResponse("b", action=np.int64(0))]
    batch = PolicyResponse.stack(responses)
    try:
        got = ppo1_adapter.env_actions([batch])
    except (TypeError, ValueError):
        return
    np.testing.assert_array_equal(got, [1, 0])


@pytest.mark.parametrize("bad", [None, "left"])
def test_env_actions_refuses_non_numeric_actions_naming_the_env(
    ppo1_adapter: SB3PolicyAdapter, bad: Any
) -> None:
    responses = [PolicyResponse("good", action=np.int64(1)), PolicyResponse("bad", action=bad)]
    with pytest.raises((TypeError, ValueError), match="'bad'"):
        ppo1_adapter.env_actions(responses)


def test_env_actions_with_mixed_dtypes_is_refused(ppo1_adapter: SB3PolicyAdapter) -> None:
    responses = [PolicyResponse("a", action=np.int64(1)), PolicyResponse("b", action=1.5)]
    with pytest.raises((TypeError, ValueError), match="'b'"):
        ppo1_adapter.env_actions(responses)


def test_env_actions_without_an_action_names_the_env(ppo1_adapter: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match=re.escape("response for env 'a' has no action field")):
        ppo1_adapter.env_actions([PolicyResponse("a", x=1)])


def test_env_actions_of_another_env_set_names_both_sides(ppo1_adapter: SB3PolicyAdapter) -> None:
    responses = [PolicyResponse("x", action=1), PolicyResponse("y", action=0)]
    with pytest.raises(ValueError, match=re.escape("without a response: ['a', 'b']")) as info:
        ppo1_adapter.env_actions(responses, ["a", "b"])
    assert "['x', 'y']" in str(info.value)


def test_env_actions_with_env_ids_of_another_length_says_both(
    ppo1_adapter: SB3PolicyAdapter,
) -> None:
    responses = [PolicyResponse("a", action=1)]
    with pytest.raises(ValueError, match="env_ids has 2 ids but there are 1 responses"):
        ppo1_adapter.env_actions(responses, ["a", "b"])


def test_env_actions_with_duplicate_responses_names_the_id(ppo1_adapter: SB3PolicyAdapter) -> None:
    responses = [PolicyResponse("a", action=1), PolicyResponse("a", action=0)]
    with pytest.raises(ValueError, match=re.escape("several responses for env id(s) ['a']")):
        ppo1_adapter.env_actions(responses)


def test_env_actions_of_ragged_actions_names_the_shapes(ppo1_adapter: SB3PolicyAdapter) -> None:
    responses = [PolicyResponse("a", action=[1, 2]), PolicyResponse("b", action=[1])]
    with pytest.raises(ValueError, match=re.escape("'a': (2,), 'b': (1,)")):
        ppo1_adapter.env_actions(responses)
