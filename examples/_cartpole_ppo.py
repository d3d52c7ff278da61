"""The PPO model both CartPole examples train: rl-baselines3-zoo's tuned CartPole-v1 settings.

Shared by ``cartpole_demo.py`` (trained with ``learn()``) and ``sb3_custom_loop.py`` (trained
through the adapter loop), so the two train exactly the same model.
"""

from __future__ import annotations

from collections.abc import Callable

from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env


def linear(start: float) -> Callable[[float], float]:
    """rl-zoo's ``lin_<start>`` schedule: ``start * progress_remaining`` (1 -> 0 over training)."""

    def schedule(progress_remaining: float) -> float:
        return progress_remaining * start

    return schedule


def make_model(seed: int) -> PPO:
    """PPO on 8 CartPole-v1 envs, rl-baselines3-zoo hyperparams/ppo.yml, on the CPU."""
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    return PPO(
        "MlpPolicy",
        env,
        n_steps=32,
        batch_size=256,
        gae_lambda=0.8,
        gamma=0.98,
        n_epochs=20,
        ent_coef=0.0,
        learning_rate=linear(1e-3),
        clip_range=linear(0.2),
        seed=seed,
        device="cpu",
    )
