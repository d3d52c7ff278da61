"""SB3PolicyAdapter.predict: model.predict, answered as one PolicyResponse per env."""

from __future__ import annotations

import copy
import re
import time
from typing import Any

import numpy as np
import pytest
import torch as th
from stable_baselines3 import A2C, DDPG, DQN, PPO, SAC, TD3
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.policies import ActorCriticPolicy, BasePolicy

from rlightning import PolicyResponse
from rlightning_sb3 import SB3PolicyAdapter

pytestmark = pytest.mark.torch

NET = {"net_arch": [16]}


def _ppo(env_id: str = "CartPole-v1", n_envs: int = 3, policy: Any = "MlpPolicy", **kw: Any) -> PPO:
    env = make_vec_env(env_id, n_envs=n_envs, seed=0)
    return PPO(
        policy, env, n_steps=16, seed=0, policy_kwargs=kw.pop("policy_kwargs", dict(NET)), **kw
    )


def test_batch_gives_one_response_per_env_with_its_row_of_sb3_actions() -> None:
    model = _ppo()
    adapter = SB3PolicyAdapter(model)
    obs = model.get_env().reset()
    expected, _ = model.predict(obs, deterministic=True)
    responses = adapter.predict(obs, env_ids=["a", "b", "c"], deterministic=True)
    assert [type(r) for r in responses] == [PolicyResponse] * 3
    assert [r.env_id for r in responses] == ["a", "b", "c"]
    for i, response in enumerate(responses):
        assert response.action == expected[i]
        assert np.asarray(response.action).dtype == expected.dtype
        assert "state" not in response.to_dict()
    np.testing.assert_array_equal(adapter.env_actions(responses), expected, strict=True)


def test_stochastic_predict_draws_what_model_predict_draws() -> None:
    model = _ppo("Pendulum-v1")
    adapter = SB3PolicyAdapter(model)
    obs = model.get_env().reset()
    th.manual_seed(1)
    expected, _ = model.predict(obs)
    th.manual_seed(1)
    responses = adapter.predict(obs, env_ids=["a", "b", "c"])
    np.testing.assert_array_equal(adapter.env_actions(responses), expected, strict=True)
    space = model.action_space
    assert all(space.contains(r.action) for r in responses)  # clipped, as predict clips


def test_single_unbatched_observation_and_str_id_give_one_response() -> None:
    model = _ppo("Pendulum-v1")
    adapter = SB3PolicyAdapter(model)
    single = model.get_env().reset()[0]
    expected, _ = model.predict(single, deterministic=True)
    response = adapter.predict(single, env_ids="only", deterministic=True)
    assert isinstance(response, PolicyResponse)
    assert response.env_id == "only"
    assert response.action.shape == model.action_space.shape
    np.testing.assert_array_equal(response.action, expected, strict=True)


def test_single_discrete_observation_gives_an_unbatched_0d_action() -> None:
    model = _ppo()
    response = SB3PolicyAdapter(model).predict(
        model.get_env().reset()[0], env_ids="x", deterministic=True
    )
    assert isinstance(response.action, np.ndarray)
    assert response.action.shape == ()


def test_off_policy_predict_is_model_predict() -> None:
    env = make_vec_env("Pendulum-v1", n_envs=2, seed=0)
    model = SAC("MlpPolicy", env, seed=0, policy_kwargs=dict(NET), learning_starts=0)
    obs = env.reset()
    expected, _ = model.predict(obs, deterministic=True)
    responses = SB3PolicyAdapter(model).predict(obs, env_ids=["p", "q"], deterministic=True)
    np.testing.assert_array_equal(np.stack([r.action for r in responses]), expected, strict=True)


def test_dqn_predict_keeps_epsilon_greedy() -> None:
    env = make_vec_env("CartPole-v1", n_envs=4, seed=0)
    model = DQN("MlpPolicy", env, seed=0, policy_kwargs=dict(NET))
    model.exploration_rate = 1.0  # every action random: drawn from model.action_space
    obs = env.reset()
    np.random.seed(5)
    model.action_space.seed(9)
    expected, _ = model.predict(obs)
    np.random.seed(5)
    model.action_space.seed(9)
    got = SB3PolicyAdapter(model).env_actions(
        SB3PolicyAdapter(model).predict(obs, env_ids=list("abcd"))
    )
    np.testing.assert_array_equal(got, expected, strict=True)


def test_timestamps_and_latency() -> None:
    model = _ppo()
    obs = model.get_env().reset()
    sent = time.time_ns()
    responses = SB3PolicyAdapter(model).predict(obs, env_ids=["a", "b", "c"], ts_env_sent_ns=sent)
    for response in responses:
        assert response.ts_env_sent_ns == sent
        response.mark_policy_sent()
        assert response.ts_policy_sent_ns >= sent
        assert response.compute_sent_latency() >= 0.0
        assert "ts_env_sent_ns" not in response.to_dict()
    per_env = SB3PolicyAdapter(model).predict(
        obs, env_ids=["a", "b", "c"], ts_env_sent_ns=[1, 2, 3]
    )
    assert [r.ts_env_sent_ns for r in per_env] == [1, 2, 3]


# ---------------------------------------------------------------------------- recurrent


@pytest.fixture(scope="module")
def recurrent_model() -> Any:
    contrib = pytest.importorskip("sb3_contrib")
    env = make_vec_env("CartPole-v1", n_envs=3, seed=0)
    return contrib.RecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=16,
        seed=0,
        policy_kwargs={"net_arch": [16], "lstm_hidden_size": 8, "n_lstm_layers": 2},
    )


def test_recurrent_state_is_per_env_and_round_trips(recurrent_model: Any) -> None:
    model = recurrent_model
    adapter = SB3PolicyAdapter(model)
    obs = model.get_env().reset()
    ids = ["a", "b", "c"]
    starts = np.ones(3, dtype=bool)
    # SB3's own two calls, batched state passed back
    a1, s1 = model.predict(obs, state=None, episode_start=starts, deterministic=True)
    a2, s2 = model.predict(obs, state=s1, episode_start=np.zeros(3, bool), deterministic=True)
    # the adapter's: per-env states carried by the responses
    r1 = adapter.predict(obs, env_ids=ids, episode_start=starts, deterministic=True)
    for i, response in enumerate(r1):
        h, c = response.state
        assert h.shape == (2, 8)
        assert c.shape == (2, 8)
        np.testing.assert_array_equal(h, s1[0][:, i, :])
        np.testing.assert_array_equal(c, s1[1][:, i, :])
    r2 = adapter.predict(
        obs, env_ids=ids, state=[r.state for r in r1], episode_start=[False] * 3, deterministic=True
    )
    np.testing.assert_array_equal(adapter.env_actions(r2), a2)
    for i, response in enumerate(r2):
        np.testing.assert_array_equal(response.state[0], s2[0][:, i, :])
    # SB3's batched form is accepted too, and None entries mean "fresh env"
    r2b = adapter.predict(obs, env_ids=ids, state=s1, deterministic=True)
    np.testing.assert_array_equal(adapter.env_actions(r2b), a2)
    fresh = adapter.predict(obs, env_ids=ids, state=[None, None, None], deterministic=True)
    np.testing.assert_array_equal(adapter.env_actions(fresh), a1)


def test_recurrent_single_observation(recurrent_model: Any) -> None:
    model = recurrent_model
    single = model.get_env().reset()[0]
    expected, state = model.predict(single, deterministic=True)
    response = SB3PolicyAdapter(model).predict(single, env_ids="solo", deterministic=True)
    np.testing.assert_array_equal(response.action, expected)
    np.testing.assert_array_equal(response.state[0], state[0][:, 0, :])


def test_recurrent_state_errors(recurrent_model: Any) -> None:
    adapter = SB3PolicyAdapter(recurrent_model)
    obs = recurrent_model.get_env().reset()
    with pytest.raises(ValueError, match=re.escape("one entry per env (3 for ['a', 'b', 'c']")):
        adapter.predict(obs, env_ids=["a", "b", "c"], state=[None])
    bad = (np.zeros((2, 8)), np.zeros((2, 9)))
    with pytest.raises(ValueError, match=re.escape("state for env 'b' must be None or an (h, c)")):
        adapter.predict(obs, env_ids=["a", "b", "c"], state=[None, bad, None])
    with pytest.raises(ValueError, match=re.escape("each (n_layers, 3, hidden)")):
        adapter.predict(
            obs, env_ids=["a", "b", "c"], state=(np.zeros((2, 2, 8)), np.zeros((2, 2, 8)))
        )


# ---------------------------------------------------------------------------- errors


def test_state_for_a_policy_without_one_is_refused() -> None:
    model = _ppo()
    adapter = SB3PolicyAdapter(model)
    obs = model.get_env().reset()
    with pytest.raises(ValueError, match=re.escape("state is only used by recurrent policies")):
        adapter.predict(obs, env_ids=["a", "b", "c"], state=[(np.zeros(1), np.zeros(1))] * 3)
    # what evaluate_policy passes back for a non-recurrent policy is fine
    adapter.predict(obs, env_ids=["a", "b", "c"], state=None)
    adapter.predict(obs, env_ids=["a", "b", "c"], state=[None, None, None])


@pytest.mark.parametrize(
    ("env_ids", "error", "message"),
    [
        ("a", ValueError, "env_ids is the single str 'a' but the observation is a batch of 3"),
        (["a", "b"], ValueError, "env_ids has 2 ids but the observation batch has 3 rows"),
        (["a", "b", "c", "d"], ValueError, "env_ids has 4 ids but the observation batch has 3"),
        (["a", "a", "b"], ValueError, "env_ids repeats ['a']"),
        (["a", 1, "b"], TypeError, "env_ids[1] must be a str, got int 1"),
        (7, TypeError, "env_ids must be a str (one unbatched observation) or a sequence of str"),
    ],
)
def test_env_id_errors(env_ids: Any, error: type[Exception], message: str) -> None:
    model = _ppo()
    obs = model.get_env().reset()
    with pytest.raises(error, match=re.escape(message)):
        SB3PolicyAdapter(model).predict(obs, env_ids=env_ids)


def test_sequence_of_ids_with_an_unbatched_observation_is_refused() -> None:
    model = _ppo()
    with pytest.raises(ValueError, match=re.escape("single unbatched observation but env_ids")):
        SB3PolicyAdapter(model).predict(model.get_env().reset()[0], env_ids=["a"])


def test_gymnasium_reset_tuple_is_refused() -> None:
    model = _ppo()
    import gymnasium as gym

    reset = gym.make("CartPole-v1").reset(seed=0)
    with pytest.raises(ValueError, match=re.escape("observation is an (obs, info) tuple")):
        SB3PolicyAdapter(model).predict(reset, env_ids="a")


def test_wrong_observation_shape_names_it() -> None:
    model = _ppo()
    with pytest.raises(ValueError, match=re.escape("Unexpected observation shape (3, 5)")):
        SB3PolicyAdapter(model).predict(np.zeros((3, 5), np.float32), env_ids=["a", "b", "c"])


def test_bad_timestamps() -> None:
    model = _ppo()
    obs = model.get_env().reset()
    adapter = SB3PolicyAdapter(model)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "env 'b' ts_env_sent_ns must be an int of nanoseconds since the epoch"
            " (time.time_ns()); got 2.5 [rule timestamp]"
        ),
    ):
        adapter.predict(obs, env_ids=["a", "b", "c"], ts_env_sent_ns=[1, 2.5, 3])
    with pytest.raises(ValueError, match=re.escape("ts_env_sent_ns has 2 stamps but there are 3")):
        adapter.predict(obs, env_ids=["a", "b", "c"], ts_env_sent_ns=[1, 2])
    with pytest.raises(TypeError, match=re.escape("ts_env_sent_ns must be an int of nanoseconds")):
        adapter.predict(obs, env_ids=["a", "b", "c"], ts_env_sent_ns=1.5)


def test_adapter_needs_an_sb3_model() -> None:
    with pytest.raises(TypeError, match=re.escape("model must be a Stable-Baselines3 model")):
        SB3PolicyAdapter(object())  # type: ignore[arg-type]


def test_numpy_array_of_ids_is_accepted() -> None:
    model = _ppo()
    obs = model.get_env().reset()
    responses = SB3PolicyAdapter(model).predict(obs, env_ids=np.array(["a", "b", "c"]))
    assert [r.env_id for r in responses] == ["a", "b", "c"]


# ------------------------------------------------------ SB3's (actions, state) habit


POSITIONAL_MESSAGE = (
    "SB3PolicyAdapter.predict() takes the observation as its only positional argument, "
    "got {n} more: pass env_ids (and state, episode_start, deterministic) by keyword, "
    "as in responses = adapter.predict(obs, env_ids=ids). It answers with responses "
    "(a PolicyResponse for one observation, a ResponseBatch of one response per env for "
    "a batch), not SB3's (actions, state) tuple: adapter.env_actions(responses) gives the "
    "actions VecEnv.step takes, and a recurrent env's next state is its response's 'state'"
)


def test_env_ids_by_position_is_refused_before_a_two_env_batch_can_be_unpacked() -> None:
    # `actions, state = adapter.predict(obs, ids)` would unpack a two-env batch into its two
    # responses without an error; the positional call is refused instead.
    model = _ppo(n_envs=2)
    adapter = SB3PolicyAdapter(model)
    obs = model.get_env().reset()
    with pytest.raises(TypeError, match=re.escape(POSITIONAL_MESSAGE.format(n=1))):
        _actions, _state = adapter.predict(obs, ["a", "b"])  # type: ignore[call-overload]
    # SB3's full positional order (observation, state, episode_start, deterministic) too
    with pytest.raises(TypeError, match=re.escape(POSITIONAL_MESSAGE.format(n=3))):
        adapter.predict(obs, None, None, True)  # type: ignore[call-overload]
    # even with env_ids given by keyword beside it
    with pytest.raises(TypeError, match=re.escape(POSITIONAL_MESSAGE.format(n=1))):
        adapter.predict(obs, None, env_ids=["a", "b"])  # type: ignore[call-overload]


def test_env_ids_by_keyword_answers_with_responses_sb3_actions_through_env_actions() -> None:
    model = _ppo(n_envs=2)
    adapter = SB3PolicyAdapter(model)
    obs = model.get_env().reset()
    expected, _ = model.predict(obs, deterministic=True)
    responses = adapter.predict(obs, env_ids=["a", "b"], deterministic=True)
    assert [r.env_id for r in responses] == ["a", "b"]
    np.testing.assert_array_equal(adapter.env_actions(responses), expected, strict=True)


def test_env_ids_is_required() -> None:
    model = _ppo(n_envs=2)
    msg = (
        "SB3PolicyAdapter.predict() missing env_ids: pass one str id per row of the batch "
        "(one str for an unbatched observation) by keyword, as in "
        "responses = adapter.predict(obs, env_ids=ids)"
    )
    with pytest.raises(TypeError, match=re.escape(msg)):
        SB3PolicyAdapter(model).predict(model.get_env().reset())  # type: ignore[call-overload]


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_plain_call_answers_as_the_call_with_one_none_state_per_env(env_id: str) -> None:
    # predict() without state, masks or a recurrent policy calls model.predict directly;
    # state=[None] * n_envs takes the general path (predict_actions): same draws, same answer
    model = _ppo(env_id)
    adapter = SB3PolicyAdapter(model)
    obs = model.get_env().reset()
    ids = ["a", "b", "c"]
    th.manual_seed(5)
    plain = adapter.predict(obs, env_ids=ids)
    th.manual_seed(5)
    general = adapter.predict(obs, env_ids=ids, state=[None, None, None])
    assert list(plain) == list(general)
    th.manual_seed(5)
    one = adapter.predict(obs[0], env_ids="a")
    th.manual_seed(5)
    one_general = adapter.predict(obs[0], env_ids="a", state=[None])
    assert one == one_general


# ----------------------------------------------------------------- BasePolicy.predict run directly
def _plain_models() -> list[Any]:
    """Models whose ``predict`` the adapter runs directly: Box observations, SB3's policies."""
    pendulum = make_vec_env("Pendulum-v1", n_envs=4, seed=0)
    cartpole = make_vec_env("CartPole-v1", n_envs=4, seed=0)
    return [
        PPO("MlpPolicy", cartpole, n_steps=16, seed=0, policy_kwargs=dict(NET)),  # Discrete
        PPO("MlpPolicy", pendulum, n_steps=16, seed=0, policy_kwargs=dict(NET)),  # Box: clipped
        A2C("MlpPolicy", pendulum, seed=0, policy_kwargs=dict(NET)),
        SAC("MlpPolicy", pendulum, seed=0, policy_kwargs=dict(NET)),  # squashed: unscaled
        TD3("MlpPolicy", pendulum, seed=0, policy_kwargs=dict(NET)),
        DDPG("MlpPolicy", pendulum, seed=0, policy_kwargs=dict(NET)),
        PPO(
            "MlpPolicy",
            pendulum,
            n_steps=16,
            seed=0,
            use_sde=True,
            policy_kwargs={**NET, "squash_output": True},
        ),
    ]


@pytest.mark.parametrize("deterministic", [False, True])
def test_direct_predict_draws_and_answers_exactly_as_model_predict(deterministic: bool) -> None:
    for model in _plain_models():
        adapter = SB3PolicyAdapter(model)
        ids = ["a", "b", "c", "d"]
        batch = model.get_env().reset()
        layouts = {
            "c": batch,
            "fortran": np.asfortranarray(batch),
            "strided": np.repeat(batch, 2, axis=0)[::2],
            "float64": batch.astype(np.float64),
        }
        for layout, obs in layouts.items():
            th.manual_seed(3)
            expected, _ = model.predict(obs, deterministic=deterministic)
            after_sb3 = th.get_rng_state()
            th.manual_seed(3)
            answer = adapter.env_actions(
                adapter.predict(obs, env_ids=ids, deterministic=deterministic)
            )
            what = f"{type(model).__name__} {layout}"
            np.testing.assert_array_equal(answer, expected, strict=True, err_msg=what)
            assert th.equal(th.get_rng_state(), after_sb3), what  # the same random draws


def test_direct_predict_switches_to_eval_mode_as_model_predict(dropout_extractor: type) -> None:
    model = _ppo(policy_kwargs={**NET, "features_extractor_class": dropout_extractor})
    adapter = SB3PolicyAdapter(model)
    batch = model.get_env().reset()
    expected, _ = model.predict(batch, deterministic=True)  # in eval mode: no dropout
    for switch in (model.policy.train, model.policy.features_extractor.dropout.train):
        switch()  # the whole policy, then the one module whose output depends on it
        answer = adapter.env_actions(
            adapter.predict(batch, env_ids=["a", "b", "c"], deterministic=True)
        )
        np.testing.assert_array_equal(answer, expected, strict=True)
        assert not model.policy.features_extractor.dropout.training


class _FlippedPolicy(ActorCriticPolicy):
    """A user policy whose own ``predict`` changes SB3's answer: it must be called."""

    def predict(self, observation: Any, *args: Any, **kwargs: Any) -> Any:
        actions, state = super().predict(observation, *args, **kwargs)
        return 1 - actions, state


def test_a_policy_with_its_own_predict_is_called() -> None:
    model = _ppo(policy=_FlippedPolicy)
    adapter = SB3PolicyAdapter(model)
    batch = model.get_env().reset()
    plain, _ = ActorCriticPolicy.predict(model.policy, batch, deterministic=True)
    answer = adapter.env_actions(
        adapter.predict(batch, env_ids=["a", "b", "c"], deterministic=True)
    )
    np.testing.assert_array_equal(answer, 1 - plain, strict=True)


def test_a_replaced_policy_is_the_one_that_answers() -> None:
    model = _ppo("Pendulum-v1")
    adapter = SB3PolicyAdapter(model)
    batch = model.get_env().reset()
    ids = ["a", "b", "c"]
    before = adapter.env_actions(adapter.predict(batch, env_ids=ids, deterministic=True))
    th.manual_seed(7)
    model.policy = type(model.policy)(  # another object: its own facts are read
        model.observation_space, model.action_space, lambda _: 0.0, **NET
    )
    expected, _ = model.predict(batch, deterministic=True)
    answer = adapter.env_actions(adapter.predict(batch, env_ids=ids, deterministic=True))
    np.testing.assert_array_equal(answer, expected, strict=True)
    assert not np.array_equal(answer, before)


def test_direct_predict_leaves_every_module_in_eval_mode_as_model_predict() -> None:
    model = _ppo("Pendulum-v1")
    adapter = SB3PolicyAdapter(model)
    batch = model.get_env().reset()
    ids = ["a", "b", "c"]
    adapter.predict(batch, env_ids=ids)  # the policy's facts are read and kept
    model.policy.mlp_extractor.train()  # Linear and Tanh layers: no number depends on it
    adapter.predict(batch, env_ids=ids)
    assert not any(m.training for m in model.policy.modules())  # as set_training_mode(False)


def test_a_submodule_swapped_in_after_a_call_is_switched_to_eval_mode() -> None:
    model = _ppo("Pendulum-v1")
    adapter = SB3PolicyAdapter(model)
    batch = model.get_env().reset()
    ids = ["a", "b", "c"]
    adapter.predict(batch, env_ids=ids)
    policy = model.policy
    policy.action_net = th.nn.Sequential(th.nn.Dropout(0.5), policy.action_net)  # training
    sb3 = copy.deepcopy(model)
    expected, _ = sb3.predict(batch, deterministic=True)
    answer = adapter.env_actions(adapter.predict(batch, env_ids=ids, deterministic=True))
    np.testing.assert_array_equal(answer, expected, strict=True)
    assert not policy.action_net[0].training


def _spectral_norm_policy(model: Any) -> None:
    model.policy.set_training_mode(False)
    th.manual_seed(0)
    # a mode-free type with a forward pre-hook that reads self.training (the old-style API)
    model.policy.action_net = th.nn.utils.spectral_norm(th.nn.Linear(16, 1))


def test_a_hook_that_reads_the_training_flag_is_seen_by_predict_and_act() -> None:
    model = _ppo("Pendulum-v1")
    _spectral_norm_policy(model)
    sb3 = copy.deepcopy(model)
    batch = model.get_env().reset()
    ids = ["a", "b", "c"]
    expected, _ = sb3.predict(batch, deterministic=True)
    adapter = SB3PolicyAdapter(model)
    for _ in range(2):  # the hook renormalises the weight on every call in training mode
        answer = adapter.env_actions(adapter.predict(batch, env_ids=ids, deterministic=True))
        np.testing.assert_array_equal(answer, expected, strict=True)
    assert not model.policy.action_net.training
    acting = _ppo("Pendulum-v1")
    _spectral_norm_policy(acting)
    SB3PolicyAdapter(acting).act(batch, ids)
    assert not acting.policy.action_net.training  # collect_rollouts' set_training_mode(False)


@pytest.mark.parametrize("where", ["model.predict", "policy.predict", "policy.obs_to_tensor"])
def test_a_method_set_on_the_instance_is_called(where: str) -> None:
    model = _ppo("Pendulum-v1")
    adapter = SB3PolicyAdapter(model)
    batch = model.get_env().reset()
    ids = ["a", "b", "c"]
    plain = adapter.env_actions(adapter.predict(batch, env_ids=ids, deterministic=True))
    owner = model if where == "model.predict" else model.policy
    name = where.split(".")[1]
    original = getattr(owner, name)
    setattr(owner, name, lambda obs, *a, **k: original(obs * 0.5, *a, **k))
    expected, _ = model.predict(batch, deterministic=True)
    answer = adapter.env_actions(adapter.predict(batch, env_ids=ids, deterministic=True))
    np.testing.assert_array_equal(answer, expected, strict=True)
    assert not np.array_equal(answer, plain)  # the patch answered


def test_sb3s_own_policies_take_the_direct_path() -> None:
    for model in _plain_models():  # PPO, A2C, SAC, TD3 (SAC and TD3: their set_training_mode)
        adapter = SB3PolicyAdapter(model)
        adapter.predict(model.get_env().reset(), env_ids=["a", "b", "c", "d"])
        facts = adapter._state.policy_modules
        assert facts is not None and facts[2] is not None, type(model).__name__


@pytest.mark.parametrize(
    ("owner", "name"),
    [(BaseAlgorithm, "predict"), (BasePolicy, "predict"), (BasePolicy, "obs_to_tensor")],
)
def test_a_method_patched_on_sb3s_class_is_called(owner: type, name: str) -> None:
    model = _ppo("Pendulum-v1")
    adapter = SB3PolicyAdapter(model)
    batch = model.get_env().reset()
    ids = ["a", "b", "c"]
    plain = adapter.env_actions(adapter.predict(batch, env_ids=ids, deterministic=True))
    original = getattr(owner, name)

    def halved(self: Any, obs: Any, *args: Any, **kwargs: Any) -> Any:
        return original(self, obs * 0.5, *args, **kwargs)

    setattr(owner, name, halved)
    try:
        expected, _ = model.predict(batch, deterministic=True)
        answer = adapter.env_actions(adapter.predict(batch, env_ids=ids, deterministic=True))
        fresh = SB3PolicyAdapter(model)  # an adapter built while the patch is in place
        again = fresh.env_actions(fresh.predict(batch, env_ids=ids, deterministic=True))
    finally:
        setattr(owner, name, original)
    np.testing.assert_array_equal(answer, expected, strict=True)
    np.testing.assert_array_equal(again, expected, strict=True)
    assert not np.array_equal(answer, plain)  # the patch answered
    after = adapter.env_actions(adapter.predict(batch, env_ids=ids, deterministic=True))
    np.testing.assert_array_equal(after, plain, strict=True)  # and is gone with it


def test_a_compiled_policy_is_called_through_model_predict() -> None:
    model = _ppo("Pendulum-v1")
    model.policy = th.compile(model.policy)  # a wrapper: no BasePolicy methods on its class
    adapter = SB3PolicyAdapter(model)
    batch = model.get_env().reset()
    expected, _ = model.predict(batch, deterministic=True)
    answer = adapter.env_actions(
        adapter.predict(batch, env_ids=["a", "b", "c"], deterministic=True)
    )
    np.testing.assert_array_equal(answer, expected, strict=True)


@pytest.mark.parametrize("grad", [True, False])
def test_predict_and_act_leave_autograd_as_they_found_it(grad: bool) -> None:
    model = _ppo()
    adapter = SB3PolicyAdapter(model)
    batch = model.get_env().reset()
    nan = batch.copy()
    nan[1, 0] = np.nan
    with th.set_grad_enabled(grad):
        responses = adapter.act(batch, ["a", "b", "c"])
        assert th.is_grad_enabled() is grad
        assert not responses[0].value.requires_grad  # computed with autograd off
        adapter.predict(batch, env_ids=["a", "b", "c"])
        assert th.is_grad_enabled() is grad
        for call in (adapter.act, adapter.predict):
            with pytest.raises(ValueError, match="NaN"):  # raised inside the forward pass
                call(nan, env_ids=["a", "b", "c"])
            assert th.is_grad_enabled() is grad
