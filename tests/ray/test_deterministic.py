"""The deterministic mode fills SB3's RolloutBuffer exactly as SB3's own ``collect_rollouts``.

Same envs (CartPole-v1 with a 12-step time limit, so truncated episodes are bootstrapped), same
seeds, same model state: SB3's PPO collects with one ``DummyVecEnv`` of 4 envs; here 2 runners x 2
envs step on Ray, and the server batches all 4 rows in runner order (``order=``), so its one
forward pass per step sees the batch SB3's sees and draws the same random numbers. Every buffer
array must be equal, exactly: both sides run the same batched kernels on the same batch.

This test also checks the latency report, the server's batch sizes and, with SB3's ``Monitor``
on the runners' envs, the episode infos. The off-policy paths (action noise, DQN's epsilon),
MaskablePPO, Dict observations and the env quirks are drawn by the fuzzer
(``test_deterministic_fuzz.py``).
"""

from __future__ import annotations

from functools import partial
from types import ModuleType

import numpy as np
import pytest

import rlightning_ray
from rlightning_ray.sb3 import collect_rollout, policy_weights
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
    reference, callback = helpers.learn_reference(make_model, TOTAL)
    server, registry, collector = helpers.ordered_collector(
        make_model,
        partial(helpers.monitored_cartpole, LIMIT),
        n_runners=N_RUNNERS,
        k=K,
        seed=SEED,
        rng_seed=RNG_SEED,
    )
    for version in range(3):
        helpers.sb3_collect(reference, callback, N_STEPS)
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
