"""The deterministic mode fills SB3's RolloutBuffer exactly as SB3's own ``collect_rollouts``.

Same envs (CartPole-v1 with a 12-step time limit, so truncated episodes are bootstrapped), same
seeds, same model state: SB3's PPO collects with one ``DummyVecEnv`` of 4 envs; here 2 runners x 2
envs step on Ray, and the server batches all 4 rows in runner order (``order=``), so its one
forward pass per step sees the batch SB3's sees and draws the same random numbers. Every buffer
array must be equal, exactly: both sides run the same batched kernels on the same batch.

The same for the off-policy path and SB3's ReplayBuffer:

TD3 on Pendulum-v1 with a 10-step time limit (truncated episodes: ``timeouts`` and terminal
next observations), ``NormalActionNoise`` (one process per env) and a ``learning_starts`` warm-up
that ends mid-run: SB3 collects with one ``DummyVecEnv`` of 4 envs; here 2 runners x 2 envs step
on Ray and the server answers all 4 rows in one batch (``order=``), exploring with
``SB3PolicyAdapter.act``. Both learners train between rollouts, as ``OffPolicyAlgorithm.learn``.
"""

from __future__ import annotations

from functools import partial
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import torch
from stable_baselines3.common.utils import set_random_seed

import rlightning_ray
from rlightning_ray.sb3 import (
    SB3BatchPolicy,
    acting_state,
    collect_replay,
    collect_rollout,
    policy_weights,
)
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

FIELDS = (
    "observations",
    "actions",
    "rewards",
    "episode_starts",
    "values",
    "log_probs",
    "advantages",
    "returns",
)
N_RUNNERS, K, N_STEPS, SEED, RNG_SEED, LIMIT, TOTAL = 2, 2, 16, 3, 123, 12, 10_000


def test_deterministic_rollouts_equal_collect_rollouts(
    local_ray: None, helpers: ModuleType
) -> None:
    make_model = partial(helpers.make_ppo, N_RUNNERS * K, N_STEPS, SEED, LIMIT)

    model = make_model()  # building a model seeds torch's global RNG: build both first
    start_training(model, TOTAL)
    reference = make_model()
    _, callback = reference._setup_learn(TOTAL, callback=None)
    callback.on_training_start(locals(), globals())
    set_random_seed(RNG_SEED)  # what the server does after building its model
    server, registry = rlightning_ray.start_server(
        partial(SB3BatchPolicy, make_model, seed=RNG_SEED),
        order=[f"runner-{r}" for r in range(N_RUNNERS)],
        num_cpus=0.5,
    )
    runners = rlightning_ray.start_runners(
        partial(helpers.monitored_cartpole, LIMIT),
        server,
        n_runners=N_RUNNERS,
        envs_per_runner=K,
        seed=SEED,
        num_cpus=0.5,
    )
    collector = rlightning_ray.Collector(runners)
    for version in range(3):
        assert reference.collect_rollouts(
            reference.get_env(), callback, reference.rollout_buffer, N_STEPS
        )
        rlightning_ray.publish_weights(server, registry, version, policy_weights(model))
        collect_rollout(model, collector, current_version=version)
        ours, theirs = model.rollout_buffer, reference.rollout_buffer
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name), err_msg=name)
        assert model.num_timesteps == reference.num_timesteps == (version + 1) * N_STEPS * 4
        assert [ep["r"] for ep in model.ep_info_buffer] == [
            ep["r"] for ep in reference.ep_info_buffer
        ]
        assert ours.episode_starts[1:].any(), "episodes must end inside the rollout"
        # Both learners live in this process and PPO.train shuffles minibatches with numpy's
        # global RNG: give both the same draws, as two separate learner processes would get.
        state = np.random.get_state()
        model.train()
        np.random.set_state(state)
        reference.train()
    report = collector.latency()
    assert set(report.hops) == set(rlightning_ray.HOPS)
    assert all(s.count == 3 * N_STEPS * N_RUNNERS for s in report.hops.values())
    info = rlightning_ray_info(server)
    assert info["batch_rows"] == [N_RUNNERS * K] * (3 * N_STEPS)
    assert info["version"] == 2


def rlightning_ray_info(server: object) -> dict[str, object]:
    import ray

    return dict(ray.get(server.info.remote()))  # type: ignore[attr-defined]


REPLAY_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
R_SEED, R_RNG_SEED, R_LIMIT, STARTS, R_TOTAL, ROLLOUTS = 5, 77, 10, 24, 1_000, 16
# DQN: 8 steps per publish, exploration falling over 200 timesteps (fast enough that a rate
# left at the published value between publishes changes which steps act at random).
D_LIMIT, D_STARTS, D_TOTAL, D_FREQ, D_ROLLOUTS = 12, 16, 200, 8, 6


def _replay_parity(
    helpers: ModuleType, make_model: Any, make_env: Any, total: int, rollouts: int
) -> tuple[Any, Any]:
    """Collect ``rollouts`` rollouts on Ray and with SB3's ``collect_rollouts``; train both.

    Returns:
        ``(ours, reference)``: the two models after the run.
    """
    model = make_model()
    start_training(model, total)
    reference = make_model()
    _, callback = reference._setup_learn(total, callback=None)
    callback.on_training_start(locals(), globals())
    # The server draws the noise in its own process from numpy's global RNG seeded RNG_SEED;
    # SB3 draws it in this one, which both learners' train() also draw from: keep the streams
    # apart as two processes would.
    set_random_seed(R_RNG_SEED)
    acting_rng = np.random.get_state()
    training_rng = (np.random.get_state(), torch.get_rng_state())
    server, registry = rlightning_ray.start_server(
        partial(SB3BatchPolicy, make_model, seed=R_RNG_SEED),
        order=[f"runner-{r}" for r in range(N_RUNNERS)],
        num_cpus=0.5,
    )
    runners = rlightning_ray.start_runners(
        make_env, server, n_runners=N_RUNNERS, envs_per_runner=K, seed=R_SEED, num_cpus=0.5
    )
    collector = rlightning_ray.Collector(runners)
    steps = int(model.train_freq.frequency)
    try:
        for version in range(rollouts):
            np.random.set_state(acting_rng)
            rollout = reference.collect_rollouts(
                reference.get_env(),
                callback,
                reference.train_freq,
                reference.replay_buffer,
                reference.action_noise,
                reference.learning_starts,
            )
            acting_rng = np.random.get_state()
            rlightning_ray.publish_weights(server, registry, version, acting_state(model))
            done, _ = collect_replay(model, collector, current_version=version)
            assert done and rollout.continue_training
            assert model.num_timesteps == reference.num_timesteps == (version + 1) * steps * 4
            if model.num_timesteps > model.learning_starts:
                for learner in (model, reference):
                    np.random.set_state(training_rng[0])
                    torch.set_rng_state(training_rng[1])
                    learner.train(
                        batch_size=learner.batch_size, gradient_steps=learner.gradient_steps
                    )
                training_rng = (np.random.get_state(), torch.get_rng_state())
    finally:
        import ray

        for actor in [server, registry, *runners]:
            ray.kill(actor)
    ours, theirs = model.replay_buffer, reference.replay_buffer
    assert ours.pos == theirs.pos == rollouts * steps
    for name in REPLAY_FIELDS:
        np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name), err_msg=name)
    assert model._episode_num == reference._episode_num > 0
    assert [ep["r"] for ep in model.ep_info_buffer] == [ep["r"] for ep in reference.ep_info_buffer]
    return model, reference


@pytest.mark.parametrize("noise", ["normal", "ou"])
def test_deterministic_replay_equals_collect_rollouts(
    local_ray: None, helpers: ModuleType, noise: str
) -> None:
    # Ornstein-Uhlenbeck noise carries a state per env that collect_rollouts resets when the
    # env's episode ends: the server must reset the same processes at the same steps.
    make_model = partial(helpers.make_td3, N_RUNNERS * K, R_SEED, R_LIMIT, STARTS, noise)
    _, reference = _replay_parity(
        helpers, make_model, partial(helpers.monitored_pendulum, R_LIMIT), R_TOTAL, ROLLOUTS
    )
    theirs = reference.replay_buffer
    assert theirs.timeouts[:ROLLOUTS].any(), "episodes must be truncated inside the run"
    assert (theirs.actions[: STARTS // 4] != theirs.actions[STARTS // 4 : STARTS // 2]).all()


def test_deterministic_dqn_replay_equals_collect_rollouts(
    local_ray: None, helpers: ModuleType
) -> None:
    # DQN lowers exploration_rate after every step (DQN._on_step); the server must follow it
    # between publishes (8 steps each here), not keep the published rate.
    make_model = partial(helpers.make_dqn, N_RUNNERS * K, R_SEED, D_LIMIT, D_STARTS, D_FREQ)
    ours, reference = _replay_parity(
        helpers, make_model, partial(helpers.monitored_cartpole, D_LIMIT), D_TOTAL, D_ROLLOUTS
    )
    assert ours.exploration_rate == reference.exploration_rate < 0.5
    assert reference.replay_buffer.dones[: D_ROLLOUTS * D_FREQ].any()
