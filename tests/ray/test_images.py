"""Image envs on Ray: the buffers hold what SB3's ``learn()`` stores, ``CxHxW`` observations.

The runners' envs return ``8x8x3`` uint8 images (channel-last); SB3 wraps the reference model's
VecEnv in ``VecTransposeImage`` (``BaseAlgorithm._wrap_env``), so its buffers hold ``3x8x8``
observations, next observations and terminal observations. The server and the driver apply
the same transpose (``rlightning_sb3.vec_env.image_transpose``); 2 runners x 2 envs in runner
order (``order=``) must fill the buffers exactly as SB3's own ``collect_rollouts``.
"""

from __future__ import annotations

from functools import partial
from types import ModuleType

import numpy as np
import pytest
import ray
from stable_baselines3.common.vec_env import VecTransposeImage

import rlightning_ray
from rlightning_ray.sb3 import acting_state, collect_replay, collect_rollout
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

N_RUNNERS, K, N_STEPS, SEED, RNG_SEED, TOTAL = 2, 2, 8, 5, 123, 10_000
ROLLOUT_FIELDS = ("observations", "actions", "rewards", "episode_starts", "values", "log_probs")
ROLLOUT_FIELDS += ("advantages", "returns")
REPLAY_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


@pytest.mark.parametrize("algo", ["ppo", "dqn"])
def test_image_rollouts_on_ray_hold_what_learn_stores(
    local_ray: None, helpers: ModuleType, envs: ModuleType, algo: str
) -> None:
    make_model = partial(helpers.make_image_model, algo, N_RUNNERS * K, N_STEPS, SEED)
    model = make_model()  # building a model seeds torch's global RNG: build both first
    start_training(model, TOTAL)
    reference, callback = helpers.learn_reference(make_model, TOTAL)
    assert isinstance(reference.get_env(), VecTransposeImage)
    assert reference.observation_space.shape == (3, 8, 8)
    server, registry, collector = helpers.ordered_collector(
        make_model, envs.ImageEnv, n_runners=N_RUNNERS, k=K, seed=SEED, rng_seed=RNG_SEED
    )
    try:
        for version in range(2):  # no training in between: both sides keep their weights
            rlightning_ray.publish_weights(server, registry, version, acting_state(model))
            helpers.sb3_collect(reference, callback, N_STEPS)
            if algo == "ppo":
                collect_rollout(model, collector, current_version=version)
                ours, theirs, fields = (
                    model.rollout_buffer,
                    reference.rollout_buffer,
                    ROLLOUT_FIELDS,
                )
            else:
                done, _ = collect_replay(model, collector, current_version=version)
                assert done
                ours, theirs = model.replay_buffer, reference.replay_buffer
                fields = REPLAY_FIELDS
                assert ours.pos == theirs.pos == (version + 1) * N_STEPS
            assert ours.observations.shape[-3:] == (3, 8, 8)
            for name in fields:
                np.testing.assert_array_equal(
                    getattr(ours, name), getattr(theirs, name), err_msg=name, strict=True
                )
            assert model.num_timesteps == reference.num_timesteps
        if algo == "dqn":  # episodes ended: next_observations hold transposed terminal images
            assert reference.replay_buffer.dones[: 2 * N_STEPS].any()
        else:
            assert reference.rollout_buffer.episode_starts[1:].any()
    finally:
        for runner in collector.runners:
            ray.kill(runner)
        ray.kill(server)
