"""A second ``start_training`` on Ray resets the server's action noise, as ``learn()`` does.

Every ``learn()`` resets the action noise (``BaseAlgorithm._setup_learn``), also with
``reset_num_timesteps=False``, where the envs continue their episodes. The learner publishes
``acting_state(model)`` after each ``start_training``; its ``run_id`` (the run's ``start_time``)
makes the server's :class:`rlightning_sb3.ActingReplica` reset its noise processes. The oracle:
SB3's own ``_setup_learn`` + ``collect_rollouts``, twice, on a model built the same way (TD3 with
Ornstein-Uhlenbeck noise, whose state a reset zeroes).
"""

from __future__ import annotations

from functools import partial
from types import ModuleType

import numpy as np
import pytest
import ray

import rlightning_ray
from rlightning_ray.sb3 import acting_state, collect_replay
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

N_RUNNERS, K, SEED, RNG_SEED, LIMIT, STEPS = 2, 1, 4, 123, 9, 6
FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


def test_a_new_run_resets_the_servers_noise_as_learn(local_ray: None, helpers: ModuleType) -> None:
    make_model = partial(helpers.make_td3, N_RUNNERS * K, SEED, LIMIT, 0, "ou")
    model, reference = make_model(), make_model()
    server, registry, collector = helpers.ordered_collector(
        make_model,
        partial(helpers.pendulum, LIMIT),
        n_runners=N_RUNNERS,
        k=K,
        seed=SEED,
        rng_seed=RNG_SEED,
    )
    try:
        for run in range(2):  # the second run continues the episodes (reset_num_timesteps=False)
            _, callback = reference._setup_learn(
                STEPS * N_RUNNERS * K, callback=None, reset_num_timesteps=run == 0
            )
            callback.on_training_start(locals(), globals())
            reference.collect_rollouts(
                reference.get_env(),
                callback,
                reference.train_freq.__class__(STEPS, reference.train_freq.unit),
                reference.replay_buffer,
                reference.action_noise,
                reference.learning_starts,
            )
            start_training(model, STEPS * N_RUNNERS * K, reset_num_timesteps=run == 0)
            rlightning_ray.publish_weights(server, registry, run, acting_state(model))
            collect_replay(model, collector, n_steps=STEPS, current_version=run)
            ours, theirs = model.replay_buffer, reference.replay_buffer
            assert ours.pos == theirs.pos == (run + 1) * STEPS
            for name in FIELDS:
                np.testing.assert_array_equal(
                    getattr(ours, name), getattr(theirs, name), err_msg=name, strict=True
                )
        assert not theirs.dones[STEPS - 1].any(), "episodes must continue into the second run"
    finally:
        for runner in collector.runners:
            ray.kill(runner)
        ray.kill(server)
