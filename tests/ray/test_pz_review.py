"""Review findings on the PettingZoo collectors on Ray runners (each test failed before its fix).

Eval mode: SB3's ``collect_rollouts`` calls ``policy.set_training_mode(False)`` as each rollout
starts, and the in-process collectors act with the learner's own model (their adapter puts it in
eval mode), so the truncation bootstraps ``gamma * V(final observation)`` and the last values
the fill computes on the learner are eval-mode values. On Ray runners the learner never acts: a
fresh model (torch modules start in training mode) or one just trained (``train()`` leaves it in
training mode) computed them in training mode. With a policy whose output depends on the mode
(dropout, batch norm) the buffer's ``returns`` and ``advantages`` silently differed from the
in-process collector's (and SB3's).
"""

from __future__ import annotations

from functools import partial
from typing import Any

import numpy as np
import pytest
import torch as th
from rlightning_ray_test_helpers import assert_same_rollouts, two_rollouts
from rlightning_ray_test_pz_checks import ENVS, buffer_arrays
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import SharedRolloutCollector
from rlightning_ray.pettingzoo import RaySharedRolloutCollector
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

# a0 lives the episode (truncated at 6: a bootstrap); a1 joins at 1, terminated at 3; a2
# joins at 2, truncated at 5
SCHEDULE = [(0, 6, "truncated"), (1, 3, "terminated"), (2, 5, "truncated")]


def _env_fns(copies: range) -> list[Any]:
    return [partial(ENVS.ScheduleEnv, SCHEDULE, copy) for copy in copies]


def _dropout_model(n_envs: int) -> Any:
    """A PPO whose hidden layers are followed by ``nn.Dropout`` (mode-dependent output)."""
    env = DummyVecEnv([ENVS.AgentSlot] * n_envs)
    kwargs = {"net_arch": [16], "activation_fn": th.nn.Dropout}
    model = PPO(
        "MlpPolicy", env, n_steps=8, batch_size=8, n_epochs=1, seed=0, device="cpu",
        policy_kwargs=kwargs,
    )  # fmt: skip
    start_training(model, total_timesteps=10_000)
    return model


def test_bootstraps_are_eval_mode_values_as_in_process(local_ray: None) -> None:
    """A dropout policy: the learner's bootstraps and last values as the in-process collector's."""
    n_envs, seeds, acting_seed = 2, [7, 8], 11
    ref = _dropout_model(n_envs)
    inproc = SharedRolloutCollector(ref, _env_fns(range(2)), seeds=seeds)
    want = two_rollouts(inproc, ref, buffer_arrays, acting_seed)
    model = _dropout_model(n_envs)
    assert model.policy.training  # a fresh torch module: training mode
    collector = RaySharedRolloutCollector(
        model, _env_fns(range(2)), seeds=seeds, acting_seeds=[acting_seed], num_cpus=0.5
    )
    got = two_rollouts(collector, model, buffer_arrays, None)
    assert {s.end for s in got[0][0] + got[0][1]} >= {"terminated", "truncated", "cut"}
    assert_same_rollouts(got, want, (collector, inproc), (model, ref))
    assert not np.array_equal(want[1][0]["returns"], want[1][0]["rewards"])
