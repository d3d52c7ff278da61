"""SB3BatchPolicy in-process: what an off-policy publish carries to the server's model."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch
from stable_baselines3 import DQN
from stable_baselines3.common.env_util import make_vec_env

from rlightning_ray.sb3 import ActingState, SB3BatchPolicy, acting_state, policy_weights
from rlightning_sb3 import start_training


def make_dqn() -> DQN:
    env = make_vec_env("CartPole-v1", n_envs=2, seed=0)
    return DQN("MlpPolicy", env, learning_starts=4, seed=0, device="cpu")


def test_acting_state_sets_the_learners_counters_on_the_server_model() -> None:
    learner = make_dqn()
    start_training(learner, 1_000)
    learner.num_timesteps, learner.exploration_rate = 6, 0.25
    state = acting_state(learner)
    assert isinstance(state, ActingState)
    assert (state.num_timesteps, state.exploration_rate, state.total_timesteps) == (6, 0.25, 1_000)
    policy = SB3BatchPolicy(make_dqn)
    policy.set_weights(state)
    assert policy.model.num_timesteps == 6 and policy.model.exploration_rate == 0.25
    for name, tensor in learner.policy.state_dict().items():
        assert bool((policy.model.policy.state_dict()[name] == tensor).all()), name
    obs = np.zeros((3, 4), np.float32)
    answer = policy(obs, ["a", "b", "c"], np.zeros(3, bool), [1, 1, 1])
    assert len(answer) == 3
    # the server counts the rows it explored for, as the learner counts n_envs per step, and
    # sets DQN's rate from the progress remaining after them, as DQN._on_step
    assert policy.model.num_timesteps == 9
    assert policy.model.exploration_rate == learner.exploration_schedule(1.0 - 9 / 1_000)


def test_a_publish_without_total_timesteps_keeps_the_published_rate() -> None:
    policy = SB3BatchPolicy(make_dqn)
    policy.set_weights(ActingState(policy_weights(policy.model), 6, 0.25))
    policy(np.zeros((2, 4), np.float32), ["a", "b"], np.zeros(2, bool), [1, 1])
    assert (policy.model.num_timesteps, policy.model.exploration_rate) == (8, 0.25)


def test_plain_weights_for_an_exploring_off_policy_model_are_refused() -> None:
    policy = SB3BatchPolicy(make_dqn)
    with pytest.raises(TypeError, match=re.escape("publish acting_state(model)")):
        policy.set_weights(policy_weights(policy.model))
    SB3BatchPolicy(make_dqn, explore=False).set_weights(policy_weights(policy.model))  # greedy


def test_weights_of_another_architecture_leave_the_model_as_it_was() -> None:
    policy = SB3BatchPolicy(make_dqn)
    before = policy_weights(policy.model)
    bad = {name: torch.zeros_like(t) for name, t in before.items()}
    bad["q_net.q_net.0.weight"] = torch.zeros(1)  # one shape wrong: torch copies the others first
    with pytest.raises(RuntimeError, match=re.escape("size mismatch for q_net.q_net.0.weight")):
        policy.set_weights(ActingState(bad, 6, 0.25))
    for name, tensor in policy.model.policy.state_dict().items():
        assert bool((tensor == before[name]).all()), name
    assert policy.model.num_timesteps == 0


def test_a_model_with_a_vec_env_wrapper_the_runners_lack_is_refused_by_the_server() -> None:
    from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize

    def normalized() -> DQN:
        return DQN("MlpPolicy", VecNormalize(make_vec_env("CartPole-v1", n_envs=2, seed=0)))

    def stacked() -> DQN:
        return DQN("MlpPolicy", VecFrameStack(make_vec_env("CartPole-v1", n_envs=2, seed=0), 2))

    for make, name in ((normalized, "VecNormalize"), (stacked, "VecFrameStack")):
        with pytest.raises(ValueError, match=rf"wrapped in {name}: .*Ray runners step raw envs"):
            SB3BatchPolicy(make)


def test_the_server_policy_refuses_to_act_before_the_first_publish() -> None:
    policy = SB3BatchPolicy(make_dqn)
    observation = np.zeros((2, 4), np.float32)
    start = np.ones(2, bool)
    with pytest.raises(RuntimeError, match=re.escape("no weights published yet")):
        policy(observation, ["e0", "e1"], start, [0, 0])
    learner = make_dqn()
    start_training(learner, 100)
    policy.set_weights(acting_state(learner))
    assert len(policy(observation, ["e0", "e1"], start, [0, 0])) == 2


@pytest.mark.parametrize("flag", ["explore", "use_masking"])
@pytest.mark.parametrize("value", ["no", 0, None])
def test_flags_are_refused_by_name_before_the_model_is_built(flag: str, value: object) -> None:
    built: list[DQN] = []

    def factory() -> DQN:
        built.append(make_dqn())
        return built[-1]

    with pytest.raises(TypeError, match=f"SB3BatchPolicy: {flag} must be a bool"):
        SB3BatchPolicy(factory, **{flag: value})  # type: ignore[arg-type]
    assert built == []
