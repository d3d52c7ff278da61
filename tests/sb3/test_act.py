"""SB3PolicyAdapter.act: SB3's rollout semantics per algorithm, action space and observation."""

from __future__ import annotations

import copy
import pickle
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from stable_baselines3 import A2C, DQN, PPO, SAC, TD3
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.utils import obs_as_tensor

from rlightning import PolicyResponse
from rlightning_sb3 import SB3PolicyAdapter
from rlightning_sb3._state import mode_dependent_modules

pytestmark = pytest.mark.torch

NET = {"net_arch": [16]}
IDS = ["e0", "e1", "e2"]


def _env(env_id: str, n_envs: int = 3, **kw: Any) -> Any:
    return make_vec_env(env_id, n_envs=n_envs, seed=0, **kw)


def _on_policy(tiny: Any, obs: str, action: str, cls: Any = PPO, **kw: Any) -> Any:
    policy_kwargs = copy.deepcopy(tiny.SMALL_CNN if obs == "image" else NET)
    policy_kwargs.update(kw.pop("policy_kwargs", {}))
    return cls(
        tiny.policy(obs),
        _env(tiny.env_id(obs, action)),
        n_steps=8,
        seed=0,
        policy_kwargs=policy_kwargs,
        **kw,
    )


def _check_on_policy_response(model: Any, obs: Any, responses: list[PolicyResponse]) -> None:
    """Fields, shapes, dtypes, devices, and values consistent with the policy's own answers."""
    space = model.action_space
    policy = model.policy
    buffer_actions = np.stack([r.buffer_action for r in responses])
    obs_t = obs_as_tensor(obs, model.device)
    with th.no_grad():
        values = policy.predict_values(obs_t)
        act_t = th.as_tensor(buffer_actions, device=model.device)
        if isinstance(space, spaces.Discrete):
            act_t = act_t.flatten()
        _, log_probs, _ = policy.evaluate_actions(obs_t, act_t)
    for i, response in enumerate(responses):
        assert set(response.to_dict()) == {
            "action",
            "buffer_action",
            "value",
            "log_prob",
            "episode_start",
        }
        assert space.contains(np.asarray(response.action, dtype=space.dtype)), response.action
        expected_buffer_shape = (1,) if isinstance(space, spaces.Discrete) else space.shape
        assert response.buffer_action.shape == expected_buffer_shape
        for name in ("value", "log_prob"):
            tensor = getattr(response, name)
            assert isinstance(tensor, th.Tensor)
            assert tensor.shape == ()
            assert tensor.dtype == th.float32
            assert tensor.device == model.device
        th.testing.assert_close(response.value, values[i, 0])
        th.testing.assert_close(response.log_prob, log_probs[i])
        assert isinstance(response.episode_start, bool)


@pytest.mark.parametrize("action", ["discrete", "box", "multidiscrete", "multibinary"])
@pytest.mark.parametrize("obs", ["flat", "dict", "image"])
def test_on_policy_fields_for_every_space(obs: str, action: str, tiny: Any) -> None:
    model = _on_policy(tiny, obs, action)
    batch = model.get_env().reset()
    responses = SB3PolicyAdapter(model).act(batch, IDS)
    assert [r.env_id for r in responses] == IDS
    _check_on_policy_response(model, batch, responses)


def test_a2c_fields(tiny: Any) -> None:
    model = _on_policy(tiny, "flat", "box", cls=A2C)
    batch = model.get_env().reset()
    _check_on_policy_response(model, batch, SB3PolicyAdapter(model).act(batch, IDS))


def test_box_actions_are_clipped_for_the_env_not_for_the_buffer(tiny: Any) -> None:
    model = _on_policy(tiny, "flat", "box", policy_kwargs={"log_std_init": 2.0})
    space = model.action_space
    batch = model.get_env().reset()
    adapter = SB3PolicyAdapter(model)
    responses = [r for _ in range(5) for r in adapter.act(batch, IDS)]
    raw = np.stack([r.buffer_action for r in responses])
    env = np.stack([r.action for r in responses])
    assert ((raw < space.low) | (raw > space.high)).any()  # sampling left the bounds ...
    np.testing.assert_array_equal(env, np.clip(raw, space.low, space.high))  # ... env got clipped


def test_squashing_policy_actions_are_unscaled(tiny: Any) -> None:
    model = _on_policy(tiny, "flat", "box", use_sde=True, policy_kwargs={"squash_output": True})
    assert model.policy.squash_output
    space = model.action_space
    batch = model.get_env().reset()
    responses = SB3PolicyAdapter(model).act(batch, IDS)
    for r in responses:
        assert np.all(np.abs(r.buffer_action) <= 1.0)
        expected = space.low + 0.5 * (r.buffer_action + 1.0) * (space.high - space.low)
        np.testing.assert_allclose(r.action, expected, rtol=1e-6)


def test_explore_false_is_deterministic_predict(tiny: Any) -> None:
    model = _on_policy(tiny, "dict", "multidiscrete")
    batch = model.get_env().reset()
    expected, _ = model.predict(batch, deterministic=True)
    adapter = SB3PolicyAdapter(model)
    got = adapter.env_actions(adapter.act(batch, IDS, explore=False))
    np.testing.assert_array_equal(got, expected)


def test_single_observation_gives_one_unbatched_response(tiny: Any) -> None:
    model = _on_policy(tiny, "flat", "box")
    batch = model.get_env().reset()
    adapter = SB3PolicyAdapter(model)
    th.manual_seed(0)
    single = adapter.act(batch[0], "solo")
    th.manual_seed(0)
    batched = adapter.act(batch[:1], ["solo"])[0]
    assert isinstance(single, PolicyResponse)
    assert single.action.shape == model.action_space.shape
    for name in ("action", "buffer_action"):
        np.testing.assert_array_equal(getattr(single, name), getattr(batched, name))
    assert th.equal(single.value, batched.value)
    assert th.equal(single.log_prob, batched.log_prob)


def test_channel_last_images_are_transposed_as_predict_does(tiny: Any) -> None:
    model = _on_policy(tiny, "image", "discrete")
    chw = model.get_env().reset()  # SB3 wrapped the env in VecTransposeImage
    hwc = np.ascontiguousarray(np.transpose(chw, (0, 2, 3, 1)))
    adapter = SB3PolicyAdapter(model)
    a = adapter.act(chw, IDS, explore=False)
    b = adapter.act(hwc, IDS, explore=False)
    for x, y in zip(a, b, strict=True):
        assert x.action == y.action
        th.testing.assert_close(x.value, y.value)


def test_default_episode_start_and_reset_state(tiny: Any) -> None:
    model = _on_policy(tiny, "flat", "discrete")
    batch = model.get_env().reset()
    adapter = SB3PolicyAdapter(model)
    assert [r.episode_start for r in adapter.act(batch, IDS)] == [True] * 3
    assert [r.episode_start for r in adapter.act(batch, IDS)] == [False] * 3
    adapter.reset_state("e1")
    assert [r.episode_start for r in adapter.act(batch, IDS)] == [False, True, False]
    given = adapter.act(batch, IDS, episode_start=np.array([1.0, 0.0, 1.0]))
    assert [r.episode_start for r in given] == [True, False, True]
    adapter.reset_state()
    assert [r.episode_start for r in adapter.act(batch, IDS)] == [True] * 3
    with pytest.raises(ValueError, match=re.escape("episode_start must have shape (3,)")):
        adapter.act(batch, IDS, episode_start=[True, False])
    with pytest.raises(
        ValueError,
        match=re.escape(
            "episode_start must hold only booleans or exactly 0 and 1: element [0] ('e0') = 0.5"
            " is neither; got [0.5, 0, 1] [rule boolean]"
        ),
    ):
        adapter.act(batch, IDS, episode_start=[0.5, 0, 1])


def test_responses_survive_pickle_and_convert_to_numpy(tiny: Any) -> None:
    model = _on_policy(tiny, "flat", "box")
    response = SB3PolicyAdapter(model).act(model.get_env().reset(), IDS)[1]
    clone = pickle.loads(pickle.dumps(response, protocol=5))
    assert clone == response
    clone.numpy()
    assert isinstance(clone.value, np.ndarray)
    assert clone.value.dtype == np.float32
    assert clone.value.shape == ()
    assert response.cpu() is response


# ---------------------------------------------------------------------------- off-policy


def _pendulum_sac(**kw: Any) -> SAC:
    return SAC("MlpPolicy", _env("Pendulum-v1"), seed=0, policy_kwargs=dict(NET), **kw)


def test_off_policy_warm_up_samples_the_action_space() -> None:
    model = _pendulum_sac(learning_starts=100)
    batch = model.get_env().reset()
    model.action_space.seed(42)
    responses = SB3PolicyAdapter(model).act(batch, IDS)
    model.action_space.seed(42)
    samples = np.array([model.action_space.sample() for _ in IDS])
    # as _sample_action: scaled to [-1, 1] for the buffer, unscaled back for the env
    scaled = model.policy.scale_action(samples)
    np.testing.assert_array_equal(np.stack([r.buffer_action for r in responses]), scaled)
    np.testing.assert_array_equal(
        np.stack([r.action for r in responses]), model.policy.unscale_action(scaled)
    )
    np.testing.assert_allclose(np.stack([r.action for r in responses]), samples, rtol=1e-6)
    for r in responses:
        assert set(r.to_dict()) == {"action", "buffer_action"}


def test_off_policy_after_warm_up_and_without_exploration() -> None:
    model = _pendulum_sac(learning_starts=0)
    batch = model.get_env().reset()
    adapter = SB3PolicyAdapter(model)
    deterministic, _ = model.predict(batch, deterministic=True)
    got = adapter.act(batch, IDS, explore=False)
    np.testing.assert_array_equal(np.stack([r.action for r in got]), deterministic)
    explored = adapter.act(batch, IDS)
    for r in explored:
        assert np.all(np.abs(r.buffer_action) <= 1.0)
        np.testing.assert_allclose(r.action, 2.0 * r.buffer_action, rtol=1e-6)
    assert not np.array_equal(np.stack([r.action for r in explored]), deterministic)


def test_td3_noise_is_added_to_the_scaled_action_and_clipped() -> None:
    noise = NormalActionNoise(np.zeros(1), 0.5 * np.ones(1))
    model = TD3(
        "MlpPolicy",
        _env("Pendulum-v1", n_envs=1),
        seed=0,
        learning_starts=0,
        action_noise=noise,
        policy_kwargs=dict(NET),
    )
    obs = model.get_env().reset()
    adapter = SB3PolicyAdapter(model)
    base, _ = model.predict(obs, deterministic=True)
    state = np.random.get_state()
    response = adapter.act(obs, ["only"])[0]
    np.random.set_state(state)
    expected = np.clip(model.policy.scale_action(base) + noise(), -1, 1)
    np.testing.assert_array_equal(response.buffer_action, expected[0])
    np.testing.assert_array_equal(response.action, model.policy.unscale_action(expected)[0])
    quiet = adapter.act(obs, ["only"], explore=False)[0]
    np.testing.assert_array_equal(quiet.action, base[0])


def test_dqn_epsilon_greedy() -> None:
    model = DQN(
        "MlpPolicy",
        _env("CartPole-v1", n_envs=4),
        seed=0,
        learning_starts=0,
        policy_kwargs=dict(NET),
    )
    batch = model.get_env().reset()
    ids = list("abcd")
    adapter = SB3PolicyAdapter(model)
    greedy, _ = model.predict(batch, deterministic=True)
    model.exploration_rate = 0.0
    np.testing.assert_array_equal(adapter.env_actions(adapter.act(batch, ids)), greedy)
    model.exploration_rate = 1.0
    np.testing.assert_array_equal(
        adapter.env_actions(adapter.act(batch, ids, explore=False)), greedy
    )
    model.action_space.seed(42)
    randoms = adapter.act(batch, ids)
    model.action_space.seed(42)
    expected = np.array([model.action_space.sample() for _ in ids])
    np.testing.assert_array_equal(adapter.env_actions(randoms), expected)
    assert all(r.buffer_action == r.action for r in randoms)


# ---------------------------------------------------------------------------- RecurrentPPO


@pytest.fixture
def recurrent() -> Any:
    contrib = pytest.importorskip("sb3_contrib")
    return contrib.RecurrentPPO(
        "MlpLstmPolicy",
        _env("CartPole-v1"),
        n_steps=8,
        seed=0,
        policy_kwargs={"net_arch": [16], "lstm_hidden_size": 8},
    )


def test_recurrent_state_is_carried_per_env_id(recurrent: Any) -> None:
    batch = recurrent.get_env().reset()
    adapter = SB3PolicyAdapter(recurrent)
    first = adapter.act(batch, IDS, explore=False)
    for r in first:
        assert set(r.to_dict()) == {
            "action",
            "buffer_action",
            "value",
            "log_prob",
            "episode_start",
            "state",
            "buffer_state",
        }
        assert r.episode_start is True
        assert r.state.pi[0].shape == (1, 8)  # (n_lstm_layers, hidden)
        assert all(float(t.abs().sum()) == 0.0 for t in (*r.buffer_state.pi, *r.buffer_state.vf))
    # second step, envs in another order: each env continues from its own state
    order = [2, 0, 1]
    second = adapter.act(batch[order], [IDS[i] for i in order], explore=False)
    for r in second:
        before = first[IDS.index(r.env_id)]
        assert all(
            th.equal(a, b)
            for a, b in zip(
                (*r.buffer_state.pi, *r.buffer_state.vf),
                (*before.state.pi, *before.state.vf),
                strict=True,
            )
        )
    # a fresh adapter given the same order from the same states agrees
    fresh = SB3PolicyAdapter(recurrent)
    fresh.act(batch, IDS, explore=False)
    same = fresh.act(batch, IDS, explore=False)
    for r in second:
        twin = same[IDS.index(r.env_id)]
        assert r.action == twin.action
        assert th.equal(r.state.pi[0], twin.state.pi[0])


def test_recurrent_episode_start_resets_the_state(recurrent: Any) -> None:
    batch = recurrent.get_env().reset()
    adapter = SB3PolicyAdapter(recurrent)
    first = adapter.act(batch, IDS, explore=False)
    again = adapter.act(batch, IDS, episode_start=[True, False, True], explore=False)
    for i in (0, 2):  # reset: the same as the first step from zeros
        assert th.equal(again[i].state.pi[0], first[i].state.pi[0])
        assert th.equal(again[i].value, first[i].value)
    assert not th.equal(again[1].state.pi[0], first[1].state.pi[0])


# ---------------------------------------------------------------------------- MaskablePPO


@pytest.fixture
def maskable(tiny: Any) -> Any:
    contrib = pytest.importorskip("sb3_contrib")
    env = _env(tiny.env_id("flat", "multidiscrete"), env_kwargs={"check_masks": True})
    return contrib.MaskablePPO("MlpPolicy", env, n_steps=8, seed=0, policy_kwargs=dict(NET))


def test_maskable_actions_respect_the_masks(maskable: Any) -> None:
    batch = maskable.get_env().reset()
    adapter = SB3PolicyAdapter(maskable)
    masks = np.ones((3, 5), dtype=bool)
    masks[0, [0, 1]] = False  # env e0: first sub-action must be 2
    masks[1, 3] = False  # env e1: second sub-action must be 1
    masks[2, [1, 2, 4]] = False  # env e2: only (0, 0)
    for _ in range(30):
        responses = adapter.act(batch, IDS, action_masks=masks)
        a = adapter.env_actions(responses)
        assert a[0, 0] == 2
        assert a[1, 1] == 1
        assert tuple(a[2]) == (0, 0)
        for r, mask in zip(responses, masks, strict=True):
            np.testing.assert_array_equal(r.action_mask, mask)
    unmasked = adapter.act(batch, IDS)
    assert all("action_mask" not in r.to_dict() for r in unmasked)


@pytest.mark.parametrize(
    ("masks", "message", "rule"),
    [
        (
            np.ones((3, 4), bool),
            "action_masks must have shape (3, 5), not (3, 4); got array(shape=(3, 4), dtype=bool);"
            " expected one row of 5 0/1 entries for MultiDiscrete([3 2]) per row"
            " ['e0', 'e1', 'e2'] (sb3-contrib's flat layout)",
            "[rule action-mask]",
        ),
        (
            np.array([[1, 1, 1, 1, 1], [0, 0, 0, 1, 1], [1, 1, 1, 1, 1]], bool),
            "action_masks['e1'] allows no value in dimension 0 of MultiDiscrete([3 2])"
            " (flat entries [0:3]), so no action",
            "[rule no-legal-action]",
        ),
        (
            np.full((3, 5), 2),
            "action_masks must hold only booleans or exactly 0 and 1: element [0, 0] ('e0') = 2"
            " is neither",
            "[rule action-mask]",
        ),
    ],
)
def test_maskable_mask_errors(maskable: Any, masks: Any, message: str, rule: str) -> None:
    batch = maskable.get_env().reset()
    with pytest.raises(ValueError, match=f"(?s){re.escape(message)}.*{re.escape(rule)}"):
        SB3PolicyAdapter(maskable).act(batch, IDS, action_masks=masks)


def test_masks_for_a_model_without_masking_are_refused(tiny: Any) -> None:
    model = _on_policy(tiny, "flat", "discrete")
    with pytest.raises(ValueError, match=re.escape("action_masks are used only by sb3-contrib's")):
        SB3PolicyAdapter(model).act(model.get_env().reset(), IDS, action_masks=np.ones((3, 3)))


def test_act_needs_an_on_or_off_policy_algorithm() -> None:
    contrib = pytest.importorskip("sb3_contrib")
    model = contrib.ARS("LinearPolicy", _env("Pendulum-v1", n_envs=1), seed=0)
    adapter = SB3PolicyAdapter(model)
    obs = model.get_env().reset()
    with pytest.raises(TypeError, match=re.escape("ARS is neither (use predict())")):
        adapter.act(obs, ["a"])
    assert adapter.predict(obs, env_ids=["a"])[0].action.shape == (1,)


def test_dict_observation_must_be_a_dict(tiny: Any) -> None:
    model = _on_policy(tiny, "dict", "discrete")
    with pytest.raises(TypeError, match=re.escape("so the observation must be a dict of arrays")):
        SB3PolicyAdapter(model).act(np.zeros((3, 2)), IDS)
    with pytest.raises(ValueError, match=re.escape("observation has keys ['vec']")):
        SB3PolicyAdapter(model).act({"vec": np.zeros((3, 2))}, IDS)


def test_off_policy_checks_but_ignores_episode_start() -> None:
    model = _pendulum_sac(learning_starts=0)
    batch = model.get_env().reset()
    adapter = SB3PolicyAdapter(model)
    responses = adapter.act(batch, IDS, episode_start=[True, False, True], explore=False)
    assert all("episode_start" not in r.to_dict() for r in responses)
    with pytest.raises(ValueError, match=re.escape("episode_start must have shape (3,)")):
        adapter.act(batch, IDS, episode_start=[True])


def test_action_masks_are_copied_so_reusing_the_array_changes_no_response() -> None:
    from sb3_contrib import MaskablePPO

    from rlightning_sb3 import SB3PolicyAdapter

    model = MaskablePPO("MlpPolicy", "CartPole-v1", n_steps=4, batch_size=4, seed=0)
    adapter = SB3PolicyAdapter(model)
    masks = np.ones((1, 2), dtype=bool)
    response = adapter.act(np.zeros((1, 4), np.float32), ["e0"], action_masks=masks)[0]
    masks[0, 0] = False  # the caller refills its array for the next step
    assert response.action_mask.tolist() == [True, True]


# ------------------------------------------------------ env ids remembered from the previous call


TWO_IDS = ["a", "b"]


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
@pytest.mark.parametrize("method", ["act", "predict"])
@pytest.mark.parametrize("rows", [3, 1])
def test_a_batch_whose_rows_differ_from_the_repeated_env_ids_is_refused(
    cartpole2: Callable[[str], Any], algo: str, method: str, rows: int
) -> None:
    model = cartpole2(algo)
    adapter = SB3PolicyAdapter(model)
    obs = model.get_env().reset()
    adapter.act(obs, TWO_IDS)  # the ids are now cached
    other = np.concatenate([obs, obs])[:rows]
    msg = f"env_ids has 2 ids but the observation batch has {rows} rows"
    with pytest.raises(ValueError, match=re.escape(msg)):
        getattr(adapter, method)(other, env_ids=list(TWO_IDS))


def test_the_same_batch_with_fresh_ids_is_refused_as_expected(
    cartpole2: Callable[[str], Any],
) -> None:
    # Control for the test above: without the cached ids the check runs.
    model = cartpole2("ppo")
    obs = model.get_env().reset()
    msg = "env_ids has 2 ids but the observation batch has 3 rows"
    with pytest.raises(ValueError, match=re.escape(msg)):
        SB3PolicyAdapter(model).act(np.concatenate([obs, obs[:1]]), TWO_IDS)


# ---------------------- the per-step shortcuts: eval mode checked, env ids checks reused, one env


ON_POLICY_ORDER = ["env_id", "action", "buffer_action", "value", "log_prob", "episode_start"]


def _cartpole_ppo(n_envs: int = 3, **policy_kwargs: Any) -> PPO:
    env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=0)
    return PPO(
        "MlpPolicy", env, n_steps=8, seed=0, policy_kwargs={"net_arch": [16], **policy_kwargs}
    )


def test_act_runs_in_eval_mode_after_any_switch_to_training(dropout_extractor: type) -> None:
    model = _cartpole_ppo(features_extractor_class=dropout_extractor)
    policy = model.policy
    batch = model.get_env().reset()
    policy.set_training_mode(False)
    with th.no_grad():
        expected = policy.predict_values(obs_as_tensor(batch, model.device)).flatten()
    adapter = SB3PolicyAdapter(model)
    ids = ["e0", "e1", "e2"]

    def values() -> th.Tensor:
        return th.stack([r.value for r in adapter.act(batch, ids)])

    assert th.equal(values(), expected)
    policy.set_training_mode(True)  # as model.train() leaves it
    assert th.equal(values(), expected)
    assert not any(m.training for m in policy.modules())
    policy.features_extractor.train()  # one submodule only
    assert th.equal(values(), expected)
    assert not policy.features_extractor.training
    policy.features_extractor.dropout.train()  # the one module whose output depends on it
    assert th.equal(values(), expected)
    assert not policy.features_extractor.dropout.training
    policy.train()
    assert th.equal(values(), expected)
    with th.no_grad():  # the policy's training-mode output does differ (dropout active)
        policy.set_training_mode(True)
        th.manual_seed(0)
        trained = policy.predict_values(obs_as_tensor(batch, model.device)).flatten()
    assert not th.equal(trained, expected)


class _LoggingLinear(th.nn.Linear):
    """A user subclass of a mode-free torch type: its forward could read ``self.training``."""


def test_only_modules_whose_mode_matters_are_checked(dropout_extractor: type) -> None:
    plain = _cartpole_ppo().policy
    assert mode_dependent_modules(plain) == (plain,)  # Linear, Tanh, Sequential, MlpExtractor...
    dropout = _cartpole_ppo(features_extractor_class=dropout_extractor).policy
    assert mode_dependent_modules(dropout) == (
        dropout,
        dropout.features_extractor,  # a user-defined extractor
        dropout.features_extractor.dropout,
    )
    custom = _cartpole_ppo().policy
    custom.action_net = _LoggingLinear(16, 2)
    assert mode_dependent_modules(custom) == (custom, custom.action_net)  # exact types only
    adapter = SB3PolicyAdapter(_cartpole_ppo(n_envs=1))
    policy = adapter.model.policy
    obs = np.zeros((1, 4), dtype=np.float32)
    adapter.act(obs, ["e0"])  # a new model's policy is in training mode: switched to eval
    assert not any(m.training for m in policy.modules())
    policy.mlp_extractor.policy_net.train()  # a mode-free module: no number changes
    adapter.act(obs, ["e0"])
    assert policy.mlp_extractor.policy_net.training  # left as the user set it
    assert not policy.training


@pytest.mark.parametrize("n_envs", [1, 3])
def test_field_order_and_kinds_are_the_same_for_one_env_and_many(n_envs: int) -> None:
    model = _cartpole_ppo(n_envs)
    batch = model.get_env().reset()
    adapter = SB3PolicyAdapter(model)
    ids = [f"e{i}" for i in range(n_envs)]
    th.manual_seed(0)
    responses = adapter.act(batch, ids, ts_env_sent_ns=7)
    th.manual_seed(0)
    with th.no_grad():
        actions, values, log_probs = model.policy(obs_as_tensor(batch, model.device))
    for i, r in enumerate(responses):
        assert list(vars(r)) == [*ON_POLICY_ORDER, "ts_env_sent_ns"]
        assert type(r.action) is np.int64
        assert r.action == actions[i].item()
        assert r.buffer_action.shape == (1,)
        assert r.buffer_action.dtype == np.int64
        for name, expected in (("value", values.flatten()[i]), ("log_prob", log_probs[i])):
            tensor = getattr(r, name)
            assert tensor.shape == ()
            assert tensor.dtype == th.float32
            assert th.equal(tensor, expected)
        assert r.episode_start is True
        assert r.ts_env_sent_ns == 7
    predicted = adapter.predict(batch, env_ids=ids)
    assert all(list(vars(r)) == ["env_id", "action"] for r in predicted)
    assert all(type(r.action) is np.int64 for r in predicted)


def test_env_ids_list_changed_in_place_is_checked_again() -> None:
    model = _cartpole_ppo()
    batch = model.get_env().reset()
    adapter = SB3PolicyAdapter(model)
    ids = ["a", "b", "c"]
    adapter.act(batch, ids)
    assert [r.episode_start for r in adapter.act(batch, ids)] == [False, False, False]
    ids[1] = "z"  # a new env id in the same list object: it starts an episode
    responses = adapter.act(batch, ids)
    assert [r.env_id for r in responses] == ["a", "z", "c"]
    assert [r.episode_start for r in responses] == [False, True, False]
    ids[2] = "a"
    with pytest.raises(ValueError, match=re.escape("env_ids repeats ['a']")):
        adapter.act(batch, ids)
    ids[2] = 3  # type: ignore[call-overload]
    with pytest.raises(TypeError, match=re.escape("env_ids[2] must be a str, got int 3")):
        adapter.act(batch, ids)
    ids[2] = "c"
    assert [r.episode_start for r in adapter.act(batch, ids)] == [False, False, False]
    adapter.reset_state("b")  # not in the batch: nothing changes for it
    adapter.reset_state("z")
    assert [r.episode_start for r in adapter.act(batch, ids)] == [False, True, False]
    assert [r.episode_start for r in adapter.act(batch, ("a", "z", "c"))] == [False] * 3
