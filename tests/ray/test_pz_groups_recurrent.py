"""RayGroupRolloutCollector with RecurrentPPO groups: the in-process group collector's buffers.

The oracle is ``rlightning_pettingzoo.GroupRolloutCollector`` with RecurrentPPO groups (itself
checked against ``SharedRolloutCollector`` and each agent's own LSTM run in
tests/pettingzoo/test_collector_groups_recurrent.py). Each runner's replica of a recurrent
group carries its agents' LSTM states from one rollout to the next in the runner's process, and
the recorded rows carry the states the learner stores (``buffer_state``) and bootstraps from
(``state``). One runner of 2 copies: every group's learner buffer, the four LSTM state arrays
included, its segments, ``num_timesteps``, episodes and drops equal the in-process collector's
over the same copies, seeds and acting seed, array for array, over two rollouts with
``train()`` between; 2 runners x 2 copies: runner ``r``'s columns of every group equal the
in-process collector's over its copies. On ``ScheduleEnv`` (joins, deaths terminated and
truncated, waits; the "even" group's buffer fills first and its later steps are dropped) with
the tests/ray/test_pz_groups.py helpers.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from rlightning_ray_test_pz_checks import ENVS
from rlightning_test_support import sibling
from sb3_contrib import RecurrentPPO
from stable_baselines3 import PPO

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")


GROUPS = sibling(__file__, "test_pz_groups.py")
SPECS = {
    "recurrent+ppo": {"even": (RecurrentPPO, 2, 8), "odd": (PPO, 1, 6)},
    # two LSTMs of different sizes (4 and 6 units: test_pz_groups._models)
    "two-recurrent": {"even": (RecurrentPPO, 2, 8), "odd": (RecurrentPPO, 1, 6)},
}


@pytest.mark.parametrize("spec", list(SPECS.values()), ids=list(SPECS))
def test_one_runner_fills_every_groups_buffer_as_in_process(
    local_ray: None, spec: dict[str, tuple[Any, int, int]]
) -> None:
    """1 runner x 2 copies == GroupRolloutCollector over the same copies, two rollouts."""
    spaces = {g: (ENVS.OBS, ENVS.ACT) for g in spec}
    collector, segments = GROUPS._one_runner_equals_in_process(
        spec, spaces, GROUPS._schedule_fns(range(2)), GROUPS.ODD_EVEN
    )
    ends = {s.end for k in range(2) for g in spec for s in segments[k][g]}
    assert ends >= {"terminated", "truncated", "cut"}
    assert collector.group_dropped["even"] > 0  # the full group's agents acted on, unstored
    for group, model in collector.models.items():
        if spec[group][0] is RecurrentPPO:  # rollout 1's first rows act from rollout 0's states
            assert np.any(model.rollout_buffer.hidden_states_pi[0] != 0), group


@pytest.mark.parametrize("spec", list(SPECS.values()), ids=list(SPECS))
def test_two_runners_fill_their_columns_of_every_group_as_in_process(
    local_ray: None, spec: dict[str, tuple[Any, int, int]]
) -> None:
    """2 runners x 2 copies: runner r's columns of each group (LSTM states on axis 2)."""
    doubled = {g: (algo, 2 * n_envs, n_steps) for g, (algo, n_envs, n_steps) in spec.items()}
    GROUPS._two_runners_equal_in_process(doubled)
