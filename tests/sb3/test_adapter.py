"""SB3PolicyAdapter's argument checks: env ids, observations, episode_start, stamps, state, masks.

Each test gives ``act`` or ``predict`` one bad argument and pins the error that names it (or, for
an input SB3 accepts, the answer SB3 gives). Models are tiny and built once per module.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from stable_baselines3 import DQN

from rlightning_sb3 import (
    SB3PolicyAdapter,
)

pytestmark = pytest.mark.torch


def _obs(n: int) -> np.ndarray:
    return np.zeros((n, 4), np.float32)


@pytest.mark.parametrize("ids", [["a", "b"], []])
def test_env_ids_of_the_wrong_length_say_both_lengths(
    ppo1_adapter: SB3PolicyAdapter, ids: Any
) -> None:
    with pytest.raises(ValueError, match=re.escape(f"env_ids has {len(ids)} ids") + ".*1 rows"):
        ppo1_adapter.act(_obs(1), ids)


def test_duplicate_env_ids_are_named(ppo1_adapter: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match=re.escape("env_ids repeats ['x']")):
        ppo1_adapter.predict(_obs(2), env_ids=["x", "x"])


@pytest.mark.parametrize("bad", [0, b"e0", None])
def test_non_str_env_id_is_a_type_error_naming_its_index(
    ppo1_adapter: SB3PolicyAdapter, bad: Any
) -> None:
    with pytest.raises(TypeError, match=re.escape("env_ids[0] must be a str")):
        ppo1_adapter.act(_obs(1), [bad])


@pytest.mark.parametrize("bad", [{"e0": 0}, {"e0"}, np.array([["e0"]])])
def test_env_ids_of_the_wrong_kind_are_a_type_error(
    ppo1_adapter: SB3PolicyAdapter, bad: Any
) -> None:
    with pytest.raises(TypeError, match="env_ids must be a str"):
        ppo1_adapter.act(_obs(1), bad)


def test_numpy_str_env_ids_are_accepted(ppo1_adapter: SB3PolicyAdapter) -> None:
    ids: Any = np.array(["e0"])
    [response] = ppo1_adapter.act(_obs(1), ids)
    assert response.env_id == "e0"


def test_single_str_id_with_a_batch_is_refused(ppo1_adapter: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match="single str 'e' but the observation is a batch of 1"):
        ppo1_adapter.act(_obs(1), "e")


def test_observation_of_the_wrong_shape_is_a_value_error(ppo1_adapter: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match=re.escape("(1, 5)")):
        ppo1_adapter.act(np.zeros((1, 5), np.float32), ["e0"])


def test_unbatched_observation_with_a_list_of_ids_is_refused(
    ppo1_adapter: SB3PolicyAdapter,
) -> None:
    with pytest.raises(ValueError, match="single unbatched observation"):
        ppo1_adapter.act(np.zeros(4, np.float32), ["e0"])


def test_gymnasium_reset_tuple_is_refused(ppo1_adapter: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match=re.escape("(obs, info) tuple")):
        ppo1_adapter.predict((np.zeros(4, np.float32), {}), env_ids="e0")


def test_list_observation_is_converted_as_predict_does(ppo1_adapter: SB3PolicyAdapter) -> None:
    obs = [[0.1, 0.2, 0.3, 0.4]]
    got = ppo1_adapter.predict(obs, env_ids=["e0"], deterministic=True)
    want = ppo1_adapter.predict(np.array(obs, np.float32), env_ids=["e0"], deterministic=True)
    assert got[0].action == want[0].action


def test_empty_batch_is_a_value_error(ppo1_adapter: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match="empty"):
        ppo1_adapter.act(np.zeros((0, 4), np.float32), [])


def test_dict_observation_with_ragged_batch_sizes_names_the_keys(
    dict_ppo_adapter: SB3PolicyAdapter,
) -> None:
    obs = {"vec": np.zeros((2, 2), np.float32), "mode": np.zeros(3, np.int64)}
    with pytest.raises(ValueError, match="'mode'"):
        dict_ppo_adapter.act(obs, ["a", "b"])


def test_dict_observation_with_a_missing_key_names_both_key_sets(
    dict_ppo_adapter: SB3PolicyAdapter,
) -> None:
    with pytest.raises(ValueError, match=re.escape("keys ['vec'], the model's Dict")):
        dict_ppo_adapter.predict({"vec": np.zeros((1, 2), np.float32)}, env_ids=["a"])


def test_array_observation_for_a_dict_model_is_a_type_error(
    dict_ppo_adapter: SB3PolicyAdapter,
) -> None:
    with pytest.raises(TypeError, match="must be a dict of arrays"):
        dict_ppo_adapter.act(np.zeros((1, 2), np.float32), ["a"])


def test_nan_observation_is_refused_naming_the_env() -> None:
    model = DQN(
        "MlpPolicy", "CartPole-v1", learning_starts=0, seed=0, policy_kwargs={"net_arch": [8]}
    )
    adapter = SB3PolicyAdapter(model)
    obs = np.zeros((2, 4), np.float32)
    obs[1, 2] = np.nan
    with pytest.raises(ValueError, match="'bad'"):
        adapter.act(obs, ["ok", "bad"], explore=False)


# The two refusals of rlightning.rules' boolean rule: a number that is neither 0 nor 1
# (ValueError), and an array of the wrong kind, str or object (TypeError).
_NOT_01 = "{} must hold only booleans or exactly 0 and 1: "


_WRONG_KIND = "{} must hold booleans or the numbers 0 and 1, not dtype"


@pytest.mark.parametrize("bad", [[True, False], [[True]]])
def test_episode_start_of_the_wrong_shape_names_the_envs(
    ppo1_adapter: SB3PolicyAdapter, bad: Any
) -> None:
    with pytest.raises(ValueError, match=re.escape("episode_start must have shape (1,)")):
        ppo1_adapter.act(_obs(1), ["e0"], episode_start=bad)


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (
            [0.5],
            ValueError,
            _NOT_01.format("episode_start") + "element [0] ('e0') = 0.5 is neither; got [0.5]",
        ),
        (
            [np.nan],
            ValueError,
            _NOT_01.format("episode_start") + "element [0] ('e0') = nan is neither; got [nan]",
        ),
        (
            [2],
            ValueError,
            _NOT_01.format("episode_start") + "element [0] ('e0') = 2 is neither; got [2]",
        ),
        # a str or object array is the wrong kind of thing, not a bad number
        (["yes"], TypeError, _WRONG_KIND.format("episode_start") + " <U3; got ['yes']"),
        ([None], TypeError, _WRONG_KIND.format("episode_start") + " object; got [None]"),
    ],
)
def test_episode_start_that_is_not_boolean_is_refused(
    ppo1_adapter: SB3PolicyAdapter, bad: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=re.escape(f"{message} [rule boolean]")):
        ppo1_adapter.act(_obs(1), ["e0"], episode_start=bad)


@pytest.mark.parametrize("bad", [True, 1.5, "now", [1.0]])
def test_non_int_stamps_are_type_errors(ppo1_adapter: SB3PolicyAdapter, bad: Any) -> None:
    with pytest.raises(TypeError, match="ts_env_sent_ns"):
        ppo1_adapter.act(_obs(1), ["e0"], ts_env_sent_ns=bad)


@pytest.mark.parametrize("method", ["act", "predict"])
def test_negative_stamp_is_refused(ppo1_adapter: SB3PolicyAdapter, method: str) -> None:
    message = "ts_env_sent_ns must not be negative; got -5 [rule timestamp]"
    with pytest.raises(ValueError, match=re.escape(message)):
        getattr(ppo1_adapter, method)(_obs(1), env_ids=["e0"], ts_env_sent_ns=-5)


def test_state_list_of_the_wrong_length_is_refused_for_a_feed_forward_policy(
    ppo1_adapter: SB3PolicyAdapter,
) -> None:
    with pytest.raises(ValueError, match="state"):
        ppo1_adapter.predict(_obs(1), env_ids=["e0"], state=[None] * 5)


def test_state_for_a_feed_forward_policy_is_refused(ppo1_adapter: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match="only used by recurrent policies"):
        ppo1_adapter.predict(_obs(1), env_ids=["e0"], state=[(np.zeros((1, 4)), np.zeros((1, 4)))])


def test_recurrent_state_list_of_the_wrong_length_is_refused(
    recurrent_adapter: SB3PolicyAdapter,
) -> None:
    first = recurrent_adapter.predict(_obs(2), env_ids=["a", "b"])
    with pytest.raises(ValueError, match="got list of length 1"):
        recurrent_adapter.predict(_obs(2), env_ids=["a", "b"], state=[first[0].state])


def test_recurrent_state_of_the_wrong_shape_names_the_env(
    recurrent_adapter: SB3PolicyAdapter,
) -> None:
    bad = (np.zeros((1, 5)), np.zeros((1, 5)))
    with pytest.raises(ValueError, match=re.escape("state for env 'a'")):
        recurrent_adapter.predict(_obs(2), env_ids=["a", "b"], state=[bad, None])


def test_recurrent_batched_state_with_a_wrong_hidden_size_is_a_value_error(
    recurrent_adapter: SB3PolicyAdapter,
) -> None:
    state = (np.zeros((1, 2, 7), np.float32), np.zeros((1, 2, 7), np.float32))
    with pytest.raises(ValueError, match="hidden"):
        recurrent_adapter.predict(_obs(2), env_ids=["a", "b"], state=state)


@pytest.mark.parametrize(
    "masks", [[[1, 1], [0, 1]], [1, 1, 0, 0, 1, 1], [[[1, 1, 0]], [[0, 1, 1]]]]
)
def test_action_masks_of_the_wrong_shape_say_the_expected_shape(
    maskable_adapter: SB3PolicyAdapter, masks: Any
) -> None:
    with pytest.raises(ValueError, match=re.escape("action_masks must have shape (2, 3)")):
        maskable_adapter.act(np.zeros((2, 2), np.float32), ["a", "b"], action_masks=masks)


def test_an_all_zero_mask_names_the_env(maskable_adapter: SB3PolicyAdapter) -> None:
    refusal = re.escape("action_masks['a'] allows no action of Discrete(3)")
    with pytest.raises(ValueError, match=f"(?s){refusal}.*{re.escape('[rule no-legal-action]')}"):
        maskable_adapter.act(
            np.zeros((2, 2), np.float32), ["a", "b"], action_masks=[[0, 0, 0], [0, 1, 1]]
        )


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        (
            np.nan,
            ValueError,
            _NOT_01.format("action_masks")
            + "element [0, 0] ('a') = nan is neither; got [[nan, 1, 1], [0, 1, 1]]",
        ),
        (
            0.5,
            ValueError,
            _NOT_01.format("action_masks")
            + "element [0, 0] ('a') = 0.5 is neither; got [[0.5, 1, 1], [0, 1, 1]]",
        ),
        # a str in the mask is the wrong kind of thing, not a bad number
        (
            "1",
            TypeError,
            _WRONG_KIND.format("action_masks") + " <U21; got [['1', 1, 1], [0, 1, 1]]",
        ),
    ],
)
def test_non_boolean_masks_are_refused(
    maskable_adapter: SB3PolicyAdapter, bad: Any, error: type[Exception], message: str
) -> None:
    masks = np.array([[1, 1, 1], [0, 1, 1]], dtype=object)
    masks[0, 0] = bad
    with pytest.raises(error, match=re.escape(f"{message} [rule action-mask]")):
        maskable_adapter.act(np.zeros((2, 2), np.float32), ["a", "b"], action_masks=masks.tolist())


def test_float_masks_of_exactly_0_and_1_are_read_as_booleans(
    maskable_adapter: SB3PolicyAdapter,
) -> None:
    # float 0.0/1.0 masks are accepted by design (rule boolean); the response keeps a bool copy
    masks = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    got = maskable_adapter.predict(
        np.zeros((2, 2), np.float32), env_ids=["a", "b"], action_masks=masks
    )
    assert [int(r.action) for r in got] == [2, 0]
    for response, row in zip(got, masks, strict=True):
        assert response.action_mask.dtype == np.bool_
        np.testing.assert_array_equal(response.action_mask, row.astype(bool))


def test_masks_given_to_a_model_without_masking_are_refused(ppo1_adapter: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match="only by sb3-contrib's MaskablePPO; this model is PPO"):
        ppo1_adapter.act(_obs(1), ["e0"], action_masks=[[1, 1]])


def test_predicted_masked_actions_respect_the_mask(maskable_adapter: SB3PolicyAdapter) -> None:
    masks = np.array([[0, 0, 1], [1, 0, 0]], bool)
    for _ in range(5):
        got = maskable_adapter.predict(
            np.zeros((2, 2), np.float32), env_ids=["a", "b"], action_masks=masks
        )
        assert [int(r.action) for r in got] == [2, 0]


def test_nan_rows_are_named_and_infinities_kept(ppo2_adapter: SB3PolicyAdapter) -> None:
    obs = np.zeros((2, 4), np.float32)
    obs[0, 1] = np.inf
    ppo2_adapter.predict(obs, env_ids=["a", "b"])
    obs[1, 0] = -np.inf
    ppo2_adapter.predict(obs, env_ids=["a", "b"])  # inf - inf in the sum, but no NaN
    obs[1, 3] = np.nan
    with pytest.raises(ValueError, match=re.escape("observation holds NaN for env(s) ['b']")):
        ppo2_adapter.act(obs, ["a", "b"])


def test_negative_per_env_stamp_names_the_env(ppo2_adapter: SB3PolicyAdapter) -> None:
    with pytest.raises(
        ValueError,
        match=re.escape("env 'b' ts_env_sent_ns must not be negative; got -1 [rule timestamp]"),
    ):
        ppo2_adapter.act(np.zeros((2, 4), np.float32), ["a", "b"], ts_env_sent_ns=[1, -1])


def test_non_numeric_list_observation_is_refused(ppo2_adapter: SB3PolicyAdapter) -> None:
    with pytest.raises(ValueError, match="must convert to a numeric array"):
        ppo2_adapter.act([["x"] * 4, ["y"] * 4], ["a", "b"])


def test_env_ids_in_the_observations_place_get_a_hint(ppo2_adapter: SB3PolicyAdapter) -> None:
    obs = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match="must convert to a numeric array") as caught:
        ppo2_adapter.act(["a", "b"], obs)  # type: ignore[arg-type]
    assert str(caught.value).endswith(
        "(env ids where the observation belongs? the observation comes first, env ids by "
        "keyword: act(obs, env_ids=ids))"
    ), caught.value


def test_the_model_facts_the_steps_read_cannot_be_changed(ppo1_adapter: SB3PolicyAdapter) -> None:
    facts = ppo1_adapter._facts  # what _calls, _step and _predict are given
    assert facts.model is ppo1_adapter.model and facts.on_policy and not facts.recurrent
    with pytest.raises(AttributeError, match=re.escape("ModelFacts is read-only")):
        facts.recurrent = True
    with pytest.raises(AttributeError, match=re.escape("ModelFacts is read-only")):
        del facts.model
