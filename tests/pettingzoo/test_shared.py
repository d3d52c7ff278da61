"""SharedPolicyAdapter: one SB3 model, one batched forward pass for all homogeneous agents."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from pettingzoo.butterfly import pistonball_v6
from pettingzoo.classic import tictactoe_v3
from pettingzoo.utils.conversions import turn_based_aec_to_parallel

from rlightning import PolicyResponse
from rlightning.testing import check_multi_agent_policy_response
from rlightning_pettingzoo import (
    SharedPolicyAdapter,
    respond,
    to_parallel_actions,
)

pytestmark = pytest.mark.torch


def _spaces(env: Any) -> dict[str, Any]:
    return {agent: env.action_space(agent) for agent in env.possible_agents}


def _count_forward_passes(model: Any) -> list[int]:
    """Batch sizes seen by the policy's feature extractor, one entry per forward pass."""
    sizes: list[int] = []
    model.policy.features_extractor.register_forward_hook(
        lambda module, args, out: sizes.append(int(out.shape[0]))
    )
    return sizes


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_simple_spread_episode(simple_spread: ModuleType, make_sb3: Any, continuous: bool) -> None:
    from stable_baselines3 import PPO

    env = simple_spread.parallel_env(max_cycles=10, continuous_actions=continuous)
    observations, infos = env.reset(seed=0)
    model = make_sb3(
        PPO, "MlpPolicy", env.observation_space("agent_0"), env.action_space("agent_0")
    )
    adapter = SharedPolicyAdapter(model)
    passes = _count_forward_passes(model)
    steps = 0
    while env.agents:
        response = adapter.act(env, observations, "env-0", infos=infos)
        assert list(response.action) == ["agent_0", "agent_1", "agent_2"]
        assert set(response.to_dict()) == {"action", "buffer_action", "value", "log_prob"}
        check_multi_agent_policy_response(response, _spaces(env), live_agents=env.agents)
        view = response.for_agent("agent_1")
        assert isinstance(view, PolicyResponse)
        assert view.env_id == "env-0"
        assert view.value is response.value["agent_1"]
        observations, _, _, _, infos = env.step(to_parallel_actions(response, env))
        steps += 1
    # One features-extractor call per forward pass (actor and critic share the extractor).
    assert passes == [3] * steps


@pytest.mark.parametrize("continuous", [False, True], ids=["discrete", "continuous"])
def test_batched_equals_per_agent(
    simple_spread: ModuleType, make_sb3: Any, continuous: bool
) -> None:
    """Row i of the batch is what the same model gives agent i alone."""
    import torch
    from stable_baselines3 import PPO

    env = simple_spread.parallel_env(continuous_actions=continuous)
    observations, _ = env.reset(seed=3)
    model = make_sb3(
        PPO, "MlpPolicy", env.observation_space("agent_0"), env.action_space("agent_0")
    )
    shared = SharedPolicyAdapter(model).act(env, observations, deterministic=True)
    # A batch of n rows and a batch of one run different float32 kernels (blocking, FMA and
    # AVX-512 paths differ by CPU), so results agree to float32 rounding, not bit for bit:
    # rtol=1e-5 is ~80 float32 ulps, and atol=1e-6 covers values near 0 (seen: 1.4e-9 apart
    # at 8e-5 on an AVX-512 Xeon).
    tol = {"rtol": 1e-5, "atol": 1e-6}
    for agent in env.agents:
        obs_tensor, _ = model.policy.obs_to_tensor(observations[agent])  # a batch of one
        with torch.no_grad():
            raw, value, log_prob = model.policy(obs_tensor, deterministic=True)
        np.testing.assert_allclose(shared.buffer_action[agent], raw.numpy()[0], **tol)
        expected, _ = model.predict(observations[agent], deterministic=True)
        np.testing.assert_allclose(shared.action[agent], expected, **tol)
        assert shared.value[agent] == pytest.approx(value.item(), rel=1e-5, abs=1e-6)
        assert shared.log_prob[agent] == pytest.approx(log_prob.item(), rel=1e-5, abs=1e-6)
    values = SharedPolicyAdapter(model).predict_values(env, observations)
    assert list(values) == env.possible_agents
    for agent, value in values.items():
        assert value == pytest.approx(float(shared.value[agent]), rel=1e-5, abs=1e-6)


def test_pistonball_twenty_agents_one_cnn_pass(make_sb3: Any) -> None:
    """Image observations (457, 120, 3), Box actions, 20 agents: one CnnPolicy forward pass."""
    from gymnasium import spaces
    from stable_baselines3 import PPO

    env = pistonball_v6.parallel_env(n_pistons=20, max_cycles=3)
    observations, _ = env.reset(seed=0)
    obs_space = env.observation_space("piston_0")
    # SB3 trains image policies channel-first (VecTransposeImage); its obs_to_tensor transposes
    # the env's channel-last observations the same way at prediction time.
    channel_first = spaces.Box(0, 255, (3, *obs_space.shape[:2]), np.uint8)
    model = make_sb3(PPO, "CnnPolicy", channel_first, env.action_space("piston_0"))
    passes = _count_forward_passes(model)
    response = SharedPolicyAdapter(model).act(env, observations, "pb")
    assert passes == [20]
    assert list(response.action) == [f"piston_{i}" for i in range(20)]
    for agent in env.agents:
        assert response.action[agent].dtype == np.float32
        assert response.action[agent].shape == (1,)
    check_multi_agent_policy_response(response, _spaces(env), live_agents=env.agents)
    env.step(to_parallel_actions(response, env))


def test_heterogeneous_agents_are_refused(simple_adversary: ModuleType, make_sb3: Any) -> None:
    from stable_baselines3 import PPO

    env = simple_adversary.parallel_env()
    observations, _ = env.reset(seed=0)
    good = env.observation_space("agent_0")
    model = make_sb3(PPO, "MlpPolicy", good, env.action_space("agent_0"))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "agents of simple_adversary_v3 are not homogeneous: agent 'agent_0' observes "
            f"{good}, agent 'adversary_0' observes {env.observation_space('adversary_0')}; a "
            "shared policy needs one observation space (use respond() with a policy per agent "
            "type)"
        ),
    ):
        SharedPolicyAdapter(model).act(env, observations)


def test_action_space_must_match_the_model(simple_spread: ModuleType, make_sb3: Any) -> None:
    from gymnasium import spaces
    from stable_baselines3 import PPO

    env = simple_spread.parallel_env()
    observations, _ = env.reset(seed=0)
    model = make_sb3(PPO, "MlpPolicy", env.observation_space("agent_0"), spaces.Discrete(3))
    with pytest.raises(
        ValueError,
        match=re.escape(
            "agent 'agent_0' of simple_spread_v3 acts in Discrete(5), but the model (PPO) acts in "
            "Discrete(3) (PettingZoo: an agent's action is an element of env.action_space(agent); "
            "an SB3 model acts in its own action_space, so its actions would not be the agent's)"
        ),
    ):
        SharedPolicyAdapter(model).act(env, observations)


def test_wrong_kinds(simple_spread: ModuleType, make_sb3: Any) -> None:
    from stable_baselines3 import PPO

    with pytest.raises(TypeError, match=re.escape("needs a Stable-Baselines3 model")):
        SharedPolicyAdapter(lambda obs: 0)
    env = tictactoe_v3.env()
    env.reset(seed=0)
    model = make_sb3(
        PPO, "MultiInputPolicy", env.observation_space("player_1"), env.action_space("player_1")
    )
    with pytest.raises(
        TypeError, match=re.escape("SharedPolicyAdapter.act() needs a PettingZoo ParallelEnv")
    ):
        SharedPolicyAdapter(model).act(env, {})
    spread = simple_spread.parallel_env()
    observations, _ = spread.reset(seed=0)
    ppo = make_sb3(
        PPO, "MlpPolicy", spread.observation_space("agent_0"), spread.action_space("agent_0")
    )
    with pytest.raises(
        ValueError, match=re.escape("observations has no entry for acting agent(s) ['agent_2']")
    ):
        SharedPolicyAdapter(ppo).act(
            spread, {k: v for k, v in observations.items() if k != "agent_2"}
        )


def test_maskable_shared_policy_on_turn_based_tictactoe(make_sb3: Any) -> None:
    """Dict observations batched key by key; each mover's mask reaches MaskablePPO."""
    sb3_contrib = pytest.importorskip("sb3_contrib")
    env = turn_based_aec_to_parallel(tictactoe_v3.env())
    model = make_sb3(
        sb3_contrib.MaskablePPO,
        "MultiInputPolicy",
        env.observation_space("player_1"),
        env.action_space("player_1"),
    )
    adapter = SharedPolicyAdapter(model)
    for seed in range(3):
        observations, infos = env.reset(seed=seed)
        moves = 0
        while env.agents:
            response = adapter.act(env, observations, infos=infos)
            check_multi_agent_policy_response(response, _spaces(env), live_agents=env.agents)
            for agent, action in response.action.items():
                mask = observations[agent]["action_mask"]
                if mask.any():
                    assert mask[action] == 1
                    moves += 1
            observations, _, _, _, infos = env.step(to_parallel_actions(response, env))
        assert 5 <= moves <= 9


@pytest.mark.cuda
def test_model_on_gpu_answers_in_numpy(simple_spread: ModuleType, make_sb3: Any) -> None:
    """A CUDA model: one forward pass on the GPU, the response holds CPU numpy values."""
    from stable_baselines3 import PPO

    env = simple_spread.parallel_env(continuous_actions=True)
    observations, _ = env.reset(seed=0)
    obs_space, act_space = env.observation_space("agent_0"), env.action_space("agent_0")
    gpu = make_sb3(PPO, "MlpPolicy", obs_space, act_space, device="cuda")
    cpu = make_sb3(PPO, "MlpPolicy", obs_space, act_space)
    cpu.policy.load_state_dict({k: v.cpu() for k, v in gpu.policy.state_dict().items()})
    on_gpu = SharedPolicyAdapter(gpu).act(env, observations, deterministic=True)
    on_cpu = SharedPolicyAdapter(cpu).act(env, observations, deterministic=True)
    check_multi_agent_policy_response(on_gpu, _spaces(env), live_agents=env.agents)
    for agent in env.agents:
        assert isinstance(on_gpu.action[agent], np.ndarray)
        assert isinstance(on_gpu.value[agent], np.float32)
        np.testing.assert_allclose(on_gpu.action[agent], on_cpu.action[agent], atol=1e-5)
        assert on_gpu.value[agent] == pytest.approx(on_cpu.value[agent], abs=1e-5)


def test_observation_space_must_fit_the_model(simple_spread: ModuleType, make_sb3: Any) -> None:
    """Checked once per agent, before SB3 sees a batch it would refuse without naming anyone."""
    from gymnasium import spaces
    from stable_baselines3 import PPO

    env = simple_spread.parallel_env()
    observations, _ = env.reset(seed=0)
    model_space = spaces.Box(-1, 1, (10,), np.float32)
    model = make_sb3(PPO, "MlpPolicy", model_space, env.action_space("agent_0"))
    with pytest.raises(
        ValueError,
        match=re.escape(
            f"agent 'agent_0' of simple_spread_v3 observes {env.observation_space('agent_0')}, "
            f"but the model (PPO) takes observations of {model_space}: shape (18,) is not the "
            "model's (10,) (SB3's obs_to_tensor accepts only its observation space's shape)"
        ),
    ):
        SharedPolicyAdapter(model).act(env, observations)


@pytest.mark.parametrize("culprit", ["agent_0", "agent_1", "agent_2"])
def test_a_malformed_observation_names_its_agent(
    simple_spread: ModuleType, make_sb3: Any, culprit: str
) -> None:
    from stable_baselines3 import PPO

    env = simple_spread.parallel_env()
    observations, _ = env.reset(seed=0)
    space = env.observation_space("agent_0")
    model = make_sb3(PPO, "MlpPolicy", space, env.action_space("agent_0"))
    observations = {**observations, culprit: np.zeros(17, np.float32)}
    expected = re.escape(
        f"observation of agent {culprit!r} of simple_spread_v3 does not fit "
        f"observation_space({culprit!r}) {space}: its shape is (17,), not (18,) (PettingZoo: an "
        "agent's observation is an element of env.observation_space(agent))"
    )
    with pytest.raises(ValueError, match=expected):
        SharedPolicyAdapter(model).act(env, observations)
    with pytest.raises(ValueError, match=expected):
        respond(env, observations, {a: model for a in env.agents})


def test_every_agent_with_the_same_wrong_shape_names_the_first(
    simple_spread: ModuleType, make_sb3: Any
) -> None:
    """np.stack succeeds here; SB3's own shape error is the one turned into a named error."""
    from stable_baselines3 import PPO

    env = simple_spread.parallel_env()
    env.reset(seed=0)
    model = make_sb3(
        PPO, "MlpPolicy", env.observation_space("agent_0"), env.action_space("agent_0")
    )
    observations = {a: np.zeros(17, np.float32) for a in env.agents}
    with pytest.raises(ValueError, match=re.escape("observation of agent 'agent_0'")) as info:
        SharedPolicyAdapter(model).act(env, observations)
    assert "Unexpected observation shape" in str(info.value.__cause__)


# ---------------------------------------------------------- refusals that name the agent or space


@pytest.mark.torch
def test_shared_policy_on_heterogeneous_agents_names_both_spaces(
    simple_adversary: ModuleType, make_sb3: Callable[..., Any]
) -> None:
    from stable_baselines3 import PPO

    env = simple_adversary.parallel_env()
    observations, _ = env.reset(seed=0)
    model = make_sb3(
        PPO, "MlpPolicy", env.observation_space("agent_0"), env.action_space("agent_0")
    )
    with pytest.raises(ValueError, match="not homogeneous") as info:
        SharedPolicyAdapter(model).act(env, observations)
    assert "(10,)" in str(info.value) and "(8,)" in str(info.value)


@pytest.mark.torch
def test_shared_policy_with_a_model_of_another_observation_space_names_it(
    spread: Any, make_sb3: Callable[..., Any]
) -> None:
    from stable_baselines3 import PPO

    space = spaces.Box(-1, 1, (10,), np.float32)
    model = make_sb3(PPO, "MlpPolicy", space, spread.action_space("agent_0"))
    observations = {a: np.zeros(18, np.float32) for a in spread.agents}
    with pytest.raises(ValueError, match="'agent_0'"):
        SharedPolicyAdapter(model).act(spread, observations)


@pytest.mark.torch
def test_shared_policy_names_the_agent_with_a_malformed_observation(
    spread: Any, make_sb3: Callable[..., Any]
) -> None:
    from stable_baselines3 import PPO

    space = spread.observation_space("agent_0")
    model = make_sb3(PPO, "MlpPolicy", space, spread.action_space("agent_0"))
    observations = {a: np.zeros(18, np.float32) for a in spread.agents}
    observations["agent_1"] = np.zeros(17, np.float32)
    with pytest.raises(ValueError, match="'agent_1'"):
        SharedPolicyAdapter(model).act(spread, observations)
