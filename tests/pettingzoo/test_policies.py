"""respond(): per-agent policies (SB3 models and callables) on real envs."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3

from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning.testing import check_multi_agent_policy_response
from rlightning_pettingzoo import SharedPolicyAdapter, aec_action, respond, to_parallel_actions


def _spaces(env: Any) -> dict[str, Any]:
    return {agent: env.action_space(agent) for agent in env.possible_agents}


# ---------------------------------------------------------------------------- callables
def test_callables_returning_actions(simple_spread: ModuleType) -> None:
    env = simple_spread.parallel_env(max_cycles=10)
    observations, infos = env.reset(seed=0)
    policies = {
        a: (lambda obs, k=k: int(np.argmax(obs[:5])) % 5 + 0 * k) for k, a in enumerate(env.agents)
    }
    steps = 0
    while env.agents:
        response = respond(env, observations, policies, "env-0", infos=infos)
        assert response.env_id == "env-0"
        assert list(response.action) == env.agents
        assert response.to_dict().keys() == {"action"}
        for agent in env.agents:
            assert response.action[agent] == int(np.argmax(observations[agent][:5])) % 5
        check_multi_agent_policy_response(response, _spaces(env), live_agents=env.agents)
        observations, _, _, _, infos = env.step(to_parallel_actions(response, env))
        steps += 1
    assert steps == 10


def test_callables_returning_responses_fill_missing_fields_with_none(
    simple_spread: ModuleType,
) -> None:
    env = simple_spread.parallel_env()
    observations, _ = env.reset(seed=0)
    policies: dict[str, Callable[[Any], Any]] = {
        "agent_0": lambda obs: PolicyResponse(None, action=1, log_prob=-0.5, note="scripted"),
        "agent_1": lambda obs: PolicyResponse("env-9", action=2, log_prob=-0.25),
        "agent_2": lambda obs: 3,
    }
    response = respond(env, observations, policies, "env-9")
    assert response.action == {"agent_0": 1, "agent_1": 2, "agent_2": 3}
    assert response.log_prob == {"agent_0": -0.5, "agent_1": -0.25, "agent_2": None}
    assert response.note == {"agent_0": "scripted", "agent_1": None, "agent_2": None}
    assert response.is_per_agent("log_prob")
    assert response.for_agent("agent_1") == PolicyResponse(
        "env-9", action=2, log_prob=-0.25, note=None
    )
    check_multi_agent_policy_response(response, _spaces(env), live_agents=env.agents)


def test_respond_errors(simple_spread: ModuleType) -> None:
    env = simple_spread.parallel_env()
    observations, _ = env.reset(seed=0)
    ok = dict.fromkeys(env.agents, lambda obs: 0)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "policies has no entry for acting agent(s) ['agent_2'] of simple_spread_v3; it has "
            "['agent_0', 'agent_1']"
        ),
    ):
        respond(env, observations, {"agent_0": ok["agent_0"], "agent_1": ok["agent_1"]})
    with pytest.raises(
        ValueError, match=re.escape("observations has no entry for acting agent(s) ['agent_0']")
    ):
        respond(env, {k: v for k, v in observations.items() if k != "agent_0"}, ok)
    with pytest.raises(
        TypeError,
        match=re.escape(
            "policy for agent 'agent_1' must be an SB3 model or a callable (observation) -> "
            "action | PolicyResponse, got int"
        ),
    ):
        respond(env, observations, {**ok, "agent_1": 3})
    with pytest.raises(TypeError, match=re.escape("returned a MultiAgentPolicyResponse")):
        respond(
            env,
            observations,
            {**ok, "agent_0": lambda obs: MultiAgentPolicyResponse(None, action={"x": 0})},
        )
    with pytest.raises(
        ValueError,
        match=re.escape(
            "the PolicyResponse the policy for agent 'agent_0' returned has another env_id; got "
            "'other'; expected 'env-0' or None [rule env-id]"
        ),
    ):
        respond(
            env,
            observations,
            {**ok, "agent_0": lambda obs: PolicyResponse("other", action=0)},
            "env-0",
        )
    with pytest.raises(TypeError, match=re.escape("policies must be a mapping")):
        respond(env, observations, [ok])  # type: ignore[arg-type]


def test_no_acting_agent_gives_an_empty_response(simple_spread: ModuleType) -> None:
    env = simple_spread.parallel_env(max_cycles=1)
    observations, _ = env.reset(seed=0)
    observations, *_ = env.step(dict.fromkeys(env.agents, 0))
    assert env.agents == []
    response = respond(env, observations, {}, "env-0")
    assert response.action == {}


# ---------------------------------------------------------------------------- SB3 models
@pytest.mark.torch
@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_ppo_per_agent(simple_spread: ModuleType, make_sb3: Any, continuous: bool) -> None:
    from stable_baselines3 import PPO

    env = simple_spread.parallel_env(max_cycles=8, continuous_actions=continuous)
    observations, _ = env.reset(seed=0)
    models = {
        a: make_sb3(PPO, "MlpPolicy", env.observation_space(a), env.action_space(a))
        for a in env.agents
    }
    while env.agents:
        response = respond(env, observations, models, "env-0")
        assert set(response.to_dict()) == {"action", "buffer_action", "value", "log_prob"}
        for name in ("action", "buffer_action", "value", "log_prob"):
            assert response.is_per_agent(name)
        for agent in env.agents:
            assert isinstance(response.value[agent], np.float32)
            assert isinstance(response.log_prob[agent], np.float32)
        check_multi_agent_policy_response(response, _spaces(env), live_agents=env.agents)
        observations, *_ = env.step(to_parallel_actions(response, env))


@pytest.mark.torch
def test_ppo_matches_sb3_predict_and_predict_values(
    simple_spread: ModuleType, make_sb3: Any
) -> None:
    """Deterministic actions equal SB3's own predict(); values equal policy.predict_values."""
    import torch
    from stable_baselines3 import PPO

    env = simple_spread.parallel_env(continuous_actions=True)
    observations, _ = env.reset(seed=1)
    models = {
        a: make_sb3(PPO, "MlpPolicy", env.observation_space(a), env.action_space(a))
        for a in env.agents
    }
    response = respond(env, observations, models, deterministic=True)
    for agent, model in models.items():
        expected, _ = model.predict(observations[agent], deterministic=True)
        np.testing.assert_array_equal(response.action[agent], expected)
        obs_tensor, _ = model.policy.obs_to_tensor(observations[agent])
        with torch.no_grad():
            value = model.policy.predict_values(obs_tensor).item()
        assert response.value[agent] == pytest.approx(value, rel=1e-6)


@pytest.mark.torch
def test_off_policy_models(simple_spread: ModuleType, make_sb3: Any) -> None:
    """DQN and SAC: env action from SB3's predict, buffer_action as OffPolicyAlgorithm stores."""
    from stable_baselines3 import DQN, SAC

    env = simple_spread.parallel_env()
    observations, _ = env.reset(seed=0)
    dqn = make_sb3(DQN, "MlpPolicy", env.observation_space("agent_0"), env.action_space("agent_0"))
    response = respond(env, observations, dict.fromkeys(env.agents, dqn), deterministic=True)
    assert set(response.to_dict()) == {"action", "buffer_action"}
    for agent in env.agents:
        assert response.action[agent] == dqn.predict(observations[agent], deterministic=True)[0]
    check_multi_agent_policy_response(response, _spaces(env), live_agents=env.agents)

    env = simple_spread.parallel_env(continuous_actions=True)
    observations, _ = env.reset(seed=0)
    space = env.action_space("agent_0")
    # target_entropy given: SAC's "auto" reads it from model.env, which a loaded model lacks.
    sac = make_sb3(SAC, "MlpPolicy", env.observation_space("agent_0"), space, target_entropy=-5.0)
    response = respond(env, observations, dict.fromkeys(env.agents, sac), deterministic=True)
    for agent in env.agents:
        action = response.action[agent]
        np.testing.assert_allclose(response.buffer_action[agent], sac.policy.scale_action(action))
        assert np.all(np.abs(response.buffer_action[agent]) <= 1.0)
    check_multi_agent_policy_response(response, _spaces(env), live_agents=env.agents)


@pytest.mark.torch
def test_same_model_is_one_batched_forward(simple_spread: ModuleType, make_sb3: Any) -> None:
    from stable_baselines3 import PPO

    env = simple_spread.parallel_env()
    observations, _ = env.reset(seed=0)
    shared = make_sb3(
        PPO, "MlpPolicy", env.observation_space("agent_0"), env.action_space("agent_0")
    )
    other = make_sb3(
        PPO, "MlpPolicy", env.observation_space("agent_0"), env.action_space("agent_0")
    )
    batch_sizes: list[int] = []
    for model in (shared, other):
        model.policy.mlp_extractor.register_forward_hook(
            lambda module, args, out: batch_sizes.append(int(args[0].shape[0]))
        )
    respond(env, observations, {"agent_0": shared, "agent_1": other, "agent_2": shared})
    assert sorted(batch_sizes) == [1, 2]


@pytest.mark.torch
def test_maskable_ppo_plays_legal_tictactoe_against_a_callable(
    make_sb3: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """AEC + masks: sb3-contrib's MaskablePPO gets each turn's mask and never moves illegally."""
    sb3_contrib = pytest.importorskip("sb3_contrib")
    env = tictactoe_v3.env()
    env.reset(seed=0)
    model = make_sb3(
        sb3_contrib.MaskablePPO,
        "MultiInputPolicy",
        env.observation_space("player_1"),
        env.action_space("player_1"),
    )
    rng = np.random.default_rng(0)

    def random_legal(observation: dict[str, Any]) -> int:
        return int(rng.choice(np.flatnonzero(observation["action_mask"])))

    policies = {"player_1": model, "player_2": random_legal}
    with caplog.at_level(logging.WARNING):
        for seed in range(3):
            env.reset(seed=seed)
            for agent in env.agent_iter():
                observation, _, termination, truncation, info = env.last()
                response = respond(env, {agent: observation}, policies, infos={agent: info})
                if termination or truncation:
                    assert response.action == {}
                else:
                    assert response.action_mask[agent] is observation["action_mask"]
                    check_multi_agent_policy_response(response, _spaces(env), live_agents=[agent])
                env.step(aec_action(response, env))
    assert not [r for r in caplog.records if "llegal" in r.getMessage()]


@pytest.mark.torch
def test_recurrent_policies_are_refused(simple_spread: ModuleType, make_sb3: Any) -> None:
    sb3_contrib = pytest.importorskip("sb3_contrib")
    env = simple_spread.parallel_env()
    observations, _ = env.reset(seed=0)
    model = make_sb3(
        sb3_contrib.RecurrentPPO,
        "MlpLstmPolicy",
        env.observation_space("agent_0"),
        env.action_space("agent_0"),
    )
    with pytest.raises(TypeError, match=re.escape("RecurrentPPO has a recurrent policy")):
        respond(env, observations, dict.fromkeys(env.agents, model))


# ------------------------------------------------------------ refusals that name the agent or env


def test_respond_with_a_policy_missing_names_the_agents(spread: Any) -> None:
    with pytest.raises(ValueError, match=re.escape("no entry for acting agent(s) ['agent_1'")):
        respond(spread, {a: None for a in spread.agents}, {"agent_0": lambda o: 0})


def test_respond_with_a_non_callable_policy_is_a_type_error(spread: Any) -> None:
    obs = {a: None for a in spread.agents}
    with pytest.raises(TypeError, match="policy for agent 'agent_0' must be an SB3 model"):
        respond(spread, obs, {a: 5 for a in spread.agents})


def test_respond_refuses_a_response_for_another_env(spread: Any) -> None:
    obs = {a: None for a in spread.agents}
    policies = {a: (lambda o: PolicyResponse("other", action=1)) for a in spread.agents}
    with pytest.raises(
        ValueError, match=re.escape("returned has another env_id; got 'other'; expected 'env-0'")
    ):
        respond(spread, obs, policies, "env-0")


# ---------------------------------------------------------------------------- spaces that fit
def _box_model(make_sb3: Any, env: Any, action_space: Any) -> Any:
    from stable_baselines3 import PPO

    return make_sb3(PPO, "MlpPolicy", env.observation_space("agent_0"), action_space)


def test_respond_refuses_a_model_of_another_action_space_as_the_shared_adapter_does(
    spread_box: Any, make_sb3: Any
) -> None:
    """A Box(-1, 1) model clips its actions to [-1, 1]: they are no actions of a Box(0, 1) agent."""
    from gymnasium import spaces

    env = spread_box
    observations, _ = env.reset(seed=0)
    wide = spaces.Box(-1.0, 1.0, (5,), np.float32)
    model = _box_model(make_sb3, env, wide)
    message = (
        f"agent 'agent_0' of simple_spread_v3 acts in {env.action_space('agent_0')}, but the model "
        f"(PPO) acts in {wide} (PettingZoo: an agent's action is an element of "
        "env.action_space(agent); an SB3 model acts in its own action_space, so its actions would "
        "not be the agent's)"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        respond(env, observations, dict.fromkeys(env.agents, model), "env-0")
    with pytest.raises(ValueError, match=re.escape(message)):
        SharedPolicyAdapter(model).act(env, observations, "env-0")
    fitting = _box_model(make_sb3, env, env.action_space("agent_0"))
    response = respond(env, observations, dict.fromkeys(env.agents, fitting), "env-0")
    check_multi_agent_policy_response(response, _spaces(env), live_agents=env.agents)


def test_respond_refuses_a_model_of_another_observation_space_before_any_policy_runs(
    spread: Any, make_sb3: Any
) -> None:
    from gymnasium import spaces
    from stable_baselines3 import PPO

    narrow = spaces.Box(-1.0, 1.0, (10,), np.float32)
    model = make_sb3(PPO, "MlpPolicy", narrow, spread.action_space("agent_1"))
    observations = {a: spread.observation_space(a).sample() for a in spread.agents}
    asked: list[Any] = []
    policies = {"agent_0": lambda obs: asked.append(obs) or 0, "agent_1": model, "agent_2": model}
    message = (
        f"agent 'agent_1' of simple_spread_v3 observes {spread.observation_space('agent_1')}, but "
        f"the model (PPO) takes observations of {narrow}: shape (18,) is not the model's (10,) "
        "(SB3's obs_to_tensor accepts only its observation space's shape)"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        respond(spread, observations, policies, "env-0")
    assert asked == []  # the callable was not asked either
    with pytest.raises(ValueError, match=re.escape(message.replace("agent_1", "agent_0", 2))):
        SharedPolicyAdapter(model).act(spread, observations)


def test_respond_checks_each_model_for_each_agent_it_acts_for(
    spread_box: Any, make_sb3: Any
) -> None:
    """Two models, one fitting: the other is refused for the agents it was given."""
    from gymnasium import spaces

    env = spread_box
    observations, _ = env.reset(seed=0)
    fitting = _box_model(make_sb3, env, env.action_space("agent_0"))
    other = _box_model(make_sb3, env, spaces.Box(0.0, 1.0, (5,), np.float64))
    policies = {"agent_0": fitting, "agent_1": fitting, "agent_2": other}
    with pytest.raises(ValueError, match=re.escape("agent 'agent_2' of simple_spread_v3 acts in")):
        respond(env, observations, policies)
    policies["agent_2"] = fitting
    assert set(respond(env, observations, policies).action) == set(env.agents)


def test_respond_checks_env_id_before_asking_any_policy(spread: Any) -> None:
    asked: list[Any] = []
    policies = dict.fromkeys(spread.agents, lambda obs: asked.append(obs) or 0)
    observations = {a: spread.observation_space(a).sample() for a in spread.agents}
    with pytest.raises(
        TypeError,
        match=re.escape(
            "env_id must be a str or None, not int; got 3; fix: pass str(3) if a number "
            "identifies the env [rule env-id]"
        ),
    ):
        respond(spread, observations, policies, 3)  # type: ignore[arg-type]
    assert asked == []


def test_a_policy_answer_without_an_action_is_named(spread: Any) -> None:
    observations = {a: spread.observation_space(a).sample() for a in spread.agents}
    policies = dict.fromkeys(spread.agents, lambda obs: PolicyResponse(None, value=0.5))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "the PolicyResponse the policy for agent 'agent_0' returned has no action field among "
            "its fields; got ['value'] [rule has-action]"
        ),
    ):
        respond(spread, observations, policies)
