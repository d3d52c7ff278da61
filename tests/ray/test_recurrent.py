"""RecurrentPPO on Ray fills its RecurrentRolloutBuffer as sb3-contrib's ``collect_rollouts``.

2 runners x 2 envs step on Ray and the server batches all 4 rows in runner order (``order=``),
so its forward passes see the batches sb3-contrib's ``RecurrentPPO.collect_rollouts`` sees. The
last values (the returns' and advantages' bootstrap) come from the LSTM states after the
rollout's last step, as sb3-contrib computes them: ``collect_rollout`` hands the last step's
answers to ``finish_rollout``.
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
    "hidden_states_pi",
    "cell_states_pi",
    "hidden_states_vf",
    "cell_states_vf",
)
N_RUNNERS, K, N_STEPS, SEED, RNG_SEED, LIMIT, TOTAL = 2, 2, 8, 3, 123, 6, 10_000


def test_recurrent_rollouts_on_ray_equal_collect_rollouts(
    local_ray: None, helpers: ModuleType
) -> None:
    make_model = partial(helpers.make_recurrent_ppo, N_RUNNERS * K, N_STEPS, SEED, LIMIT)
    model = make_model()  # building a model seeds torch's global RNG: build both first
    start_training(model, TOTAL)
    reference, callback = helpers.learn_reference(make_model, TOTAL)
    server, registry, collector = helpers.ordered_collector(
        make_model,
        partial(helpers.cartpole, LIMIT),
        n_runners=N_RUNNERS,
        k=K,
        seed=SEED,
        rng_seed=RNG_SEED,
    )
    for version in range(2):
        helpers.sb3_collect(reference, callback, N_STEPS)
        rlightning_ray.publish_weights(server, registry, version, policy_weights(model))
        collect_rollout(model, collector, current_version=version)
        ours, theirs = model.rollout_buffer, reference.rollout_buffer
        for name in FIELDS:
            np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name), err_msg=name)
        for mine, sb3 in zip(model._last_lstm_states, reference._last_lstm_states, strict=True):
            for a, b in zip(mine, sb3, strict=True):
                np.testing.assert_array_equal(a.numpy(), b.numpy())
        assert ours.episode_starts[1:].any(), "episodes must end inside the rollout"
        state = np.random.get_state()
        model.train()
        np.random.set_state(state)
        reference.train()
