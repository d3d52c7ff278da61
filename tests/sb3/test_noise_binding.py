"""Which env each action-noise process is, and when it is reset, as SB3's ``learn()`` does.

SB3 gives env ``i`` of its VecEnv the process ``noises[i]`` of a ``VectorizedActionNoise``,
resets it by that index when env ``i``'s episode ends (``collect_rollouts``) and resets every
process at each ``learn()`` (``_setup_learn``: ``action_noise.reset()``, whatever
``reset_num_timesteps``). The oracle is SB3 itself: a second model built the same way, from the
same seeds, running its own ``learn()``.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from stable_baselines3 import TD3
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import OrnsteinUhlenbeckActionNoise

from rlightning_sb3 import (
    ActingReplica,
    SB3PolicyAdapter,
    acting_state,
    add_replay_step,
    start_training,
    training_run_id,
)

N_ENVS, LIMIT, SEED, RNG_SEED = 3, 7, 0, 11
IDS = [f"env-{i}" for i in range(N_ENVS)]


def _td3(n_envs: int = N_ENVS) -> Any:
    return TD3(
        "MlpPolicy",
        make_vec_env(
            "Pendulum-v1", n_envs=n_envs, seed=SEED, env_kwargs={"max_episode_steps": LIMIT}
        ),
        seed=SEED,
        learning_starts=0,
        gradient_steps=0,  # learn() never trains: the weights stay the constructor's
        buffer_size=200,
        action_noise=OrnsteinUhlenbeckActionNoise(np.zeros(1), 0.4 * np.ones(1)),
        policy_kwargs={"net_arch": [8]},
    )


def test_replay_columns_in_another_order_than_the_noise_processes_are_refused() -> None:
    model = _td3()
    obs = start_training(model, 1000)
    adapter = SB3PolicyAdapter(model)
    rows = [2, 0, 1]  # the first exploring call names the envs in another order: c, a, b
    responses = adapter.act(obs[rows], [IDS[i] for i in rows])
    env = model.get_env()
    new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, env_ids=IDS))
    message = (
        f"model.action_noise keeps one noise process per env, bound to the envs "
        f"{[IDS[i] for i in rows]} in that order (the rows of the first exploring "
        f"SB3PolicyAdapter.act() call), but the replay buffer's columns are the envs {IDS}"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        add_replay_step(model, obs, responses, new_obs, rewards, dones, infos, env_ids=IDS)
    assert model.replay_buffer.pos == 0 and model.num_timesteps == 0  # nothing changed
    adapter.reset_state()  # forgets the binding: a first call in env order is accepted
    responses = adapter.act(obs, IDS)
    add_replay_step(model, obs, responses, new_obs, rewards, dones, infos, env_ids=IDS)
    assert model.replay_buffer.pos == 1


def test_responses_in_any_order_reset_each_envs_own_noise_as_learn() -> None:
    steps = 3 * LIMIT  # every env's episode ends 3 times: each done resets its own process
    reference, model = _td3(), _td3()
    np.random.seed(RNG_SEED)
    reference.learn(steps * N_ENVS)

    obs = start_training(model, steps * N_ENVS)
    np.random.seed(RNG_SEED)
    adapter = SB3PolicyAdapter(model)
    env = model.get_env()
    for t in range(steps):
        rows = [0, 1, 2] if t == 0 else [(t + i) % N_ENVS for i in range(N_ENVS)][::-1]
        responses = adapter.act(obs[rows], [IDS[i] for i in rows])
        new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, env_ids=IDS))
        add_replay_step(model, obs, responses, new_obs, rewards, dones, infos, env_ids=IDS)
        obs = new_obs
    _assert_replay_equal(model, reference, steps)
    assert model.replay_buffer.timeouts[:steps].sum() == 3 * N_ENVS


@pytest.mark.parametrize("reset_num_timesteps", [False, True])
def test_a_replica_resets_its_noise_when_the_learner_starts_a_new_run(
    reset_num_timesteps: bool,
) -> None:
    first, second = 5, 6  # steps per env of each run; episodes of 7 steps end inside run 2
    reference, learner, served = _td3(), _td3(), _td3()
    np.random.seed(RNG_SEED)
    reference.learn(first * N_ENVS)
    reference.learn(second * N_ENVS, reset_num_timesteps=reset_num_timesteps)

    np.random.seed(RNG_SEED)
    replica = ActingReplica(served)
    env = learner.get_env()
    starts = np.ones(N_ENVS, dtype=bool)
    for budget, steps in ((first, first), (second, second)):
        obs = start_training(learner, budget * N_ENVS, reset_num_timesteps=reset_num_timesteps)
        if reset_num_timesteps:  # _setup_learn reset the env: every env starts an episode
            starts = np.ones(N_ENVS, dtype=bool)
        replica.load(acting_state(learner))  # a new run: its start_time is the run's id
        for _ in range(steps):
            responses = replica.act(obs, IDS, episode_start=starts)
            new_obs, rewards, dones, infos = env.step(
                replica.adapter.env_actions(responses, env_ids=IDS)
            )
            add_replay_step(learner, obs, responses, new_obs, rewards, dones, infos, env_ids=IDS)
            obs, starts = new_obs, dones
    assert learner.num_timesteps == reference.num_timesteps
    _assert_replay_equal(learner, reference, reference.replay_buffer.pos)


def test_a_publish_of_the_same_run_leaves_the_noise_as_it_is() -> None:
    learner, served = _td3(1), _td3(1)
    start_training(learner, 100)
    replica = ActingReplica(served)
    replica.load(acting_state(learner))
    replica.act(np.zeros((1, 3), np.float32), ["env-0"], episode_start=[True])
    noise: Any = served.action_noise
    drawn = noise.noise_prev.copy()
    assert drawn.any()
    replica.load(acting_state(learner))  # the same run: nothing reset
    np.testing.assert_array_equal(noise.noise_prev, drawn)
    start_training(learner, 100, reset_num_timesteps=False)
    replica.load(acting_state(learner))  # a new run, as _setup_learn: action_noise.reset()
    np.testing.assert_array_equal(noise.noise_prev, np.zeros(1))


def test_each_run_has_its_own_id_even_where_the_clock_repeats(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``training_run_id`` is ``start_time``, which ``_setup_learn`` takes from
    ``time.time_ns()``; a coarse clock (one value for two runs) must not make a new run look
    like the last one, or a replica (or a PettingZoo collector) would not reset its noise."""
    import stable_baselines3.common.base_class as base_class

    learner = _td3(1)
    assert training_run_id(learner) is None  # never started: SB3's start_time 0.0
    monkeypatch.setattr(base_class.time, "time_ns", lambda: 1_000_000)  # a clock that repeats
    ids = []
    for reset in (True, False, True):
        start_training(learner, 100, reset_num_timesteps=reset)
        ids.append(training_run_id(learner))
        assert acting_state(learner).run_id == ids[-1] == learner.start_time
    assert ids == [1_000_000, 1_000_001, 1_000_002]
    replica = ActingReplica(_td3(1))
    replica.load(acting_state(learner))
    replica.act(np.zeros((1, 3), np.float32), ["env-0"], episode_start=[True])
    noise: Any = replica.model.action_noise
    assert noise.noise_prev.any()
    start_training(learner, 100, reset_num_timesteps=False)  # the same clock value again
    replica.load(acting_state(learner))
    np.testing.assert_array_equal(noise.noise_prev, np.zeros(1))  # reset: a new run


def _assert_replay_equal(ours: Any, theirs: Any, n: int) -> None:
    assert ours.replay_buffer.pos == theirs.replay_buffer.pos == n
    for name in ("observations", "next_observations", "actions", "rewards", "dones", "timeouts"):
        np.testing.assert_array_equal(
            getattr(ours.replay_buffer, name)[:n],
            getattr(theirs.replay_buffer, name)[:n],
            err_msg=name,
            strict=True,
        )
