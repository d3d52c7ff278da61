"""``rlightning_sb3.acting``: a replica acting as ``collect_rollouts`` acts, against SB3 itself.

In one process: the learner keeps the books with ``add_replay_step`` / ``add_rollout_step``
while a separate replica of the model acts (``ActingReplica.act``), loaded from the learner's
``acting_state``; SB3's own ``collect_rollouts`` on a third model of the same seed is the
oracle. The replica and SB3 draw from the same global generators, reset between the two runs.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
import torch
from stable_baselines3 import DQN, PPO, TD3
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import OrnsteinUhlenbeckActionNoise
from stable_baselines3.common.utils import set_random_seed

from rlightning_sb3 import (
    ActingReplica,
    ActingState,
    acting_state,
    add_replay_step,
    add_rollout_step,
    finish_rollout,
    policy_weights,
    rollout_steps,
    set_acting_seed,
    start_training,
)

REPLAY_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
N_ENVS, SEED, RNG = 3, 11, 99


def make_dqn() -> DQN:
    env = make_vec_env("CartPole-v1", n_envs=N_ENVS, seed=SEED, env_kwargs={"max_episode_steps": 9})
    return DQN(
        "MlpPolicy",
        env,
        learning_starts=6,
        train_freq=4,
        exploration_fraction=1.0,
        policy_kwargs={"net_arch": [16]},
        seed=SEED,
        device="cpu",
    )


def make_td3() -> TD3:
    env = make_vec_env("Pendulum-v1", n_envs=N_ENVS, seed=SEED, env_kwargs={"max_episode_steps": 5})
    noise = OrnsteinUhlenbeckActionNoise(np.zeros(1), 0.5 * np.ones(1))
    return TD3(
        "MlpPolicy",
        env,
        learning_starts=6,
        train_freq=4,
        action_noise=noise,
        policy_kwargs={"net_arch": [16]},
        seed=SEED,
        device="cpu",
    )


def _replica_loop(learner: Any, replica: ActingReplica, steps: int) -> None:
    """Act with the replica, keep the learner's books, as ``collect_rollouts`` does both."""
    env = learner.get_env()
    ids = [f"env-{i}" for i in range(env.num_envs)]
    obs, starts = learner._last_obs, np.ones(env.num_envs, dtype=bool)
    for _ in range(steps):
        responses = replica.act(obs, ids, episode_start=starts)
        new_obs, rewards, dones, infos = env.step(replica.adapter.env_actions(responses))
        add_replay_step(learner, obs, responses, new_obs, rewards, dones, infos)
        obs, starts = new_obs, dones


@pytest.mark.parametrize("make", [make_dqn, make_td3], ids=["dqn-epsilon", "td3-ou-noise"])
def test_a_replica_acts_as_collect_rollouts_does(make: Any) -> None:
    total, rollouts = 200, 4
    learner, reference = make(), make()
    start_training(learner, total)
    replica = ActingReplica(make())
    _, callback = reference._setup_learn(total, callback=None)
    callback.on_training_start(locals(), globals())
    set_random_seed(RNG)
    state = (np.random.get_state(), torch.get_rng_state())
    for _ in range(rollouts):
        reference.collect_rollouts(
            reference.get_env(),
            callback,
            reference.train_freq,
            reference.replay_buffer,
            reference.action_noise,
            reference.learning_starts,
        )
    np.random.set_state(state[0])
    torch.set_rng_state(state[1])
    replica.load(acting_state(learner))
    _replica_loop(learner, replica, rollouts * rollout_steps(learner))
    ours, theirs = learner.replay_buffer, reference.replay_buffer
    assert ours.pos == theirs.pos == rollouts * 4
    for name in REPLAY_FIELDS:
        np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name), strict=True)
    assert theirs.dones[: theirs.pos].any() and theirs.timeouts[: theirs.pos].any()
    # the replica advanced the learner's counters itself, as collect_rollouts advances SB3's
    assert replica.model.num_timesteps == learner.num_timesteps == reference.num_timesteps
    assert getattr(replica.model, "exploration_rate", None) == getattr(
        reference, "exploration_rate", None
    )


def test_episode_starts_that_are_not_booleans_are_refused_before_any_noise_reset() -> None:
    replica = ActingReplica(make_td3())
    ids = ["a", "b", "c"]
    obs = np.zeros((3, 3), np.float32)
    replica.act(obs, ids, episode_start=[1, 1, 1])  # the first call fixes the noise processes
    noise: Any = replica.model.action_noise
    before = [n.noise_prev.copy() for n in noise.noises]
    assert any(b.any() for b in before)
    with pytest.raises(ValueError, match=re.escape("episode_start must hold only booleans")):
        replica.act(obs, ids, episode_start=[2, 0, 0])  # np.asarray(..., bool) would reset env a
    for n, b in zip(noise.noises, before, strict=True):
        np.testing.assert_array_equal(n.noise_prev, b)
    assert replica.reset_noise(ids, [True, False, False]) == ["a"]
    assert not noise.noises[0].noise_prev.any() and noise.noises[1].noise_prev.any()


def test_maskable_ppo_without_masks_is_refused_and_other_models_ignore_masks() -> None:
    from sb3_contrib import MaskablePPO
    from sb3_contrib.common.wrappers import ActionMasker

    def masked() -> Any:
        import gymnasium as gym

        return ActionMasker(gym.make("CartPole-v1"), lambda env: np.ones(2, dtype=bool))

    replica = ActingReplica(MaskablePPO("MlpPolicy", make_vec_env(masked, 2), device="cpu"))
    obs = np.zeros((2, 4), np.float32)
    with pytest.raises(ValueError, match=re.escape("sent none: their envs have no action_masks()")):
        replica.act(obs, ["a", "b"], episode_start=[True, True])
    masks = np.array([[True, False], [False, True]])
    answer = replica.act(obs, ["a", "b"], episode_start=[True, True], action_masks=masks)
    assert answer.stacked is not None
    np.testing.assert_array_equal(replica.adapter.env_actions(answer), [0, 1])
    unmasked = ActingReplica(replica.model, use_masking=False)
    assert len(unmasked.act(obs, ["a", "b"], episode_start=[True, True])) == 2
    ppo = ActingReplica(PPO("MlpPolicy", "CartPole-v1", n_steps=8, batch_size=8, device="cpu"))
    answer = ppo.act(obs, ["a", "b"], episode_start=[1, 0], action_masks=masks)
    assert "action_mask" not in vars(answer[0])  # PPO's collect_rollouts never reads masks


def test_plain_weights_refused_for_counters_and_loads_are_all_or_nothing() -> None:
    replica = ActingReplica(make_dqn())
    with pytest.raises(TypeError, match=re.escape("publish acting_state(model)")):
        replica.load(policy_weights(replica.model))
    bad = {name: torch.zeros_like(t) for name, t in policy_weights(replica.model).items()}
    bad["q_net.q_net.0.weight"] = torch.zeros(1)
    before = policy_weights(replica.model)
    with pytest.raises(RuntimeError, match=re.escape("size mismatch for q_net.q_net.0.weight")):
        replica.load(ActingState(bad, 6, 0.25))
    for name, tensor in replica.model.policy.state_dict().items():
        assert bool((tensor == before[name]).all()), name
    assert replica.model.num_timesteps == 0
    replica.load(ActingState(before, 6, 0.25, 1_000))
    assert replica.total_timesteps == 1_000 and replica.model.num_timesteps == 6
    replica.advance(4)
    model: Any = replica.model
    assert model.num_timesteps == 10
    assert model.exploration_rate == model.exploration_schedule(1.0 - 10 / 1_000)
    with pytest.raises(ValueError, match=re.escape("n_rows must be an int >= 0, got -1")):
        replica.advance(-1)


def test_an_exploring_gsde_model_is_refused() -> None:
    model = PPO("MlpPolicy", "Pendulum-v1", use_sde=True, n_steps=8, batch_size=8, device="cpu")
    with pytest.raises(ValueError, match=re.escape("uses gSDE (use_sde=True)")):
        ActingReplica(model)
    assert ActingReplica(model, explore=False).explore is False


def test_rollout_steps_and_the_acting_seed() -> None:
    assert (
        rollout_steps(PPO("MlpPolicy", "CartPole-v1", n_steps=16, batch_size=16, device="cpu"))
        == 16
    )
    assert rollout_steps(make_dqn()) == 4
    episodic = DQN("MlpPolicy", "CartPole-v1", train_freq=(2, "episode"), device="cpu")
    with pytest.raises(ValueError, match=re.escape("counts episodes")):
        rollout_steps(episodic)
    set_acting_seed(5)
    first = (np.random.rand(), torch.rand(1).item())
    set_acting_seed(5)
    assert (np.random.rand(), torch.rand(1).item()) == first


def test_an_on_policy_replica_fills_the_rollout_buffer_as_collect_rollouts() -> None:
    def make() -> PPO:
        env = make_vec_env(
            "CartPole-v1", n_envs=N_ENVS, seed=SEED, env_kwargs={"max_episode_steps": 7}
        )
        return PPO("MlpPolicy", env, n_steps=8, batch_size=24, seed=SEED, device="cpu")

    learner, reference = make(), make()
    start_training(learner, 100)
    replica = ActingReplica(make())
    replica.load(policy_weights(learner))
    _, callback = reference._setup_learn(100, callback=None)
    callback.on_training_start(locals(), globals())
    set_random_seed(RNG)
    state = torch.get_rng_state()
    reference.collect_rollouts(reference.get_env(), callback, reference.rollout_buffer, 8)
    torch.set_rng_state(state)
    env = learner.get_env()
    ids = [f"env-{i}" for i in range(N_ENVS)]
    obs, starts = learner._last_obs, np.ones(N_ENVS, dtype=bool)
    for _ in range(8):
        responses = replica.act(obs, ids, episode_start=starts)
        new_obs, rewards, dones, infos = env.step(replica.adapter.env_actions(responses))
        add_rollout_step(learner, obs, responses, rewards, dones, infos, new_observation=new_obs)
        obs, starts = new_obs, dones
    finish_rollout(learner, obs, starts)
    for name in ("observations", "actions", "rewards", "episode_starts", "values", "log_probs"):
        ours, theirs = (
            getattr(learner.rollout_buffer, name),
            getattr(reference.rollout_buffer, name),
        )
        np.testing.assert_array_equal(ours, theirs, strict=True)
