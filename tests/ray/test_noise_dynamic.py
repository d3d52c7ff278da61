"""Action noise under dynamic batching: one process per env id, reset when that env's episode ends.

A ``PolicyServer`` without ``order=`` batches whichever runners asked, so a batch holds any
subset of the envs, in arrival order. The server's :class:`rlightning_sb3.ActingReplica` draws
each row's noise from its env's own process of the model's ``VectorizedActionNoise`` and resets
an env's process when the runner reports that env's episode start. The noise used here
(``make_td3(..., noise="decay")``) starts at 0.2 and halves at every draw, so the learner reads
from its replay buffer alone when each env's process was last reset: the noise of the k-th step
of an episode (buffer action minus the deterministic action, in [-1, 1]) is ``0.2 / 2 ** (k+1)``.
A missing or misplaced reset (another env's process, or none) breaks that pattern.
"""

from __future__ import annotations

from functools import partial
from types import ModuleType

import numpy as np
import pytest
import ray

import rlightning_ray
from rlightning_ray.sb3 import SB3BatchPolicy, acting_state, collect_replay
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

N_RUNNERS, K, SEED, LIMIT, STEPS = 2, 2, 3, 4, 11
#: Each env's episode length: the envs' episodes end at different steps, so a reset of another
#: env's process than the ending env's shows.
LIMITS = (3, 4, 5, 2)


def test_dynamic_batches_draw_and_reset_each_envs_own_noise(
    local_ray: None, helpers: ModuleType
) -> None:
    make_model = partial(helpers.make_td3, N_RUNNERS * K, SEED, LIMIT, 0, "decay")
    model = make_model()
    start_training(model, 1000)
    server, registry = rlightning_ray.start_server(
        partial(SB3BatchPolicy, make_model, seed=SEED), max_batch=4, max_wait_us=500, num_cpus=0.5
    )
    runners = rlightning_ray.start_runners(
        [partial(helpers.pendulum, limit) for limit in LIMITS],
        server,
        n_runners=N_RUNNERS,
        envs_per_runner=K,
        seed=SEED,
        num_cpus=0.25,
    )
    try:
        collector = rlightning_ray.Collector(runners, timeout_s=60)
        assert not collector.deterministic and not collector.local  # dynamic batching
        rlightning_ray.publish_weights(server, registry, 0, acting_state(model))
        _, fragments = collect_replay(model, collector, n_steps=STEPS, current_version=0)
        buffer = model.replay_buffer
        assert buffer.pos == STEPS
        n_envs = N_RUNNERS * K
        actions = buffer.actions[:STEPS]  # (steps, envs, 1): scaled to [-1, 1], noise added
        assert actions.shape == (STEPS, n_envs, 1)
        assert np.all(np.abs(actions) <= 1.0)
        for fragment in fragments:  # the env actions the runners stepped: in the action space
            for answer in fragment.answers:
                assert all(model.action_space.contains(a) for a in answer.action)
        # the learner's weights are the server's (published): the deterministic action of each
        # stored observation, scaled as the buffer's actions
        observations = buffer.observations[:STEPS].reshape(STEPS * n_envs, -1)
        deterministic = model.policy.scale_action(model.predict(observations, True)[0])
        noise = actions.reshape(STEPS * n_envs, 1) - deterministic
        noise = noise.reshape(STEPS, n_envs)
        dones = buffer.dones[:STEPS]
        for column, limit in enumerate(LIMITS):  # every env's episodes end at its time limit
            ends = [t for t in range(STEPS) if (t + 1) % limit == 0]
            assert np.flatnonzero(dones[:, column]).tolist() == ends
        for column in range(n_envs):
            k = 0  # the step of the env's episode
            for t in range(STEPS):
                # the server computed the actions in batches of its own size: allclose
                np.testing.assert_allclose(
                    noise[t, column],
                    0.2 / 2 ** (k + 1),
                    rtol=0,
                    atol=1e-4,
                    err_msg=f"env {collector.env_ids[column]}, step {t}",
                )
                k = 0 if dones[t, column] else k + 1
        info = ray.get(server.info.remote())
        assert sum(info["batch_rows"]) == STEPS * n_envs
    finally:
        for actor in (server, *runners):
            ray.kill(actor)
