"""RayAECRolloutCollector with sb3-contrib's RecurrentPPO: the in-process buffers, from Ray runners.

The oracle is ``rlightning_pettingzoo.AECRolloutCollector`` with a RecurrentPPO (itself checked
against a per-agent LSTM reference built from the env's log in
tests/pettingzoo/test_aec_collector_recurrent.py). Each runner's replica carries its agents'
LSTM states from one rollout to the next in its own process (the learner's weights loaded
before each rollout), and the recorded rows carry the states the learner stores
(``buffer_state``) and bootstraps from (``state``). Over the same copies of PettingZoo's real
``tictactoe_v3`` (masks in the Dict observations: a RecurrentPPO observes them), reset seeds,
opponents, weights and torch seed, the learner's ``RecurrentDictRolloutBuffer`` (one runner of
two copies), or each runner's block of columns (two runners), equals the in-process
collector's, the four LSTM state arrays included, over two rollouts with ``model.train()``
between them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from pettingzoo.classic import tictactoe_v3
from rlightning_ray_test_helpers import (  # conftest.py loads it; runners never import this
    AgentSlot,
    assert_buffers_equal,
    assert_same_rollouts,
    two_rollouts,
)
from sb3_contrib import RecurrentPPO
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import AECRolloutCollector
from rlightning_ray.pettingzoo import RayAECRolloutCollector
from rlightning_sb3 import set_acting_seed, start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

FIELDS = ("actions", "rewards", "returns", "episode_starts", "values", "log_probs", "advantages")
#: RecurrentRolloutBuffer's stored LSTM states, (n_steps, n_lstm_layers, n_envs, hidden) each
STATES = ("hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf")
#: What holds the learner's bootstraps (its critic batches all columns, a runner's reference
#: only the runner's): the rewards of rows a rollout cuts, the returns and the advantages.
CLOSE = ("rewards", "returns", "advantages")
SEAT = tictactoe_v3.env()


def _model(n_envs: int) -> RecurrentPPO:
    slot = (SEAT.observation_space("player_1"), SEAT.action_space("player_1"))
    model = RecurrentPPO(
        "MultiInputLstmPolicy",
        DummyVecEnv([lambda: AgentSlot(*slot)] * n_envs),
        n_steps=8,
        batch_size=4 * n_envs,
        n_epochs=2,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8], "lstm_hidden_size": 4},
    )
    start_training(model, total_timesteps=10_000)
    return model


def _buffer(model: Any, columns: slice = slice(None)) -> dict[str, np.ndarray]:
    buf = model.rollout_buffer
    out = {name: np.array(getattr(buf, name)[:, columns]) for name in FIELDS}
    for key, array in buf.observations.items():
        out[f"observations/{key}"] = np.array(array[:, columns])
    # the columns are axis 2 of the LSTM states
    out.update({name: np.array(getattr(buf, name)[:, :, columns]) for name in STATES})
    return out


def _opponent() -> RecurrentPPO:
    """A frozen RecurrentPPO opponent (sent as its save bytes, loaded in the runner)."""
    slot = (SEAT.observation_space("player_2"), SEAT.action_space("player_2"))
    return RecurrentPPO(
        "MultiInputLstmPolicy",
        DummyVecEnv([lambda: AgentSlot(*slot)]),
        n_steps=8,
        seed=5,
        device="cpu",
        policy_kwargs={"net_arch": [8], "lstm_hidden_size": 4},
    )


@pytest.mark.parametrize(
    ("opponents", "n_envs"),
    [(None, 4), ({"player_2": "random"}, 2), ({"player_2": "recurrent"}, 2)],
    ids=["self-play", "random", "recurrent-opponent"],
)
def test_one_runner_fills_the_in_process_collectors_buffer(
    local_ray: None, opponents: dict[str, Any] | None, n_envs: int
) -> None:
    """1 runner of 2 copies == AECRolloutCollector over the same 2 copies, two rollouts."""
    seeds, acting_seed = [7, 8], 11
    if opponents == {"player_2": "recurrent"}:  # its LSTM state per copy, kept in the runner
        opponents = {"player_2": _opponent()}
    ref = _model(n_envs)
    inproc = AECRolloutCollector(ref, [tictactoe_v3.env] * 2, opponents=opponents, seeds=seeds)
    want = two_rollouts(inproc, ref, _buffer, acting_seed)
    model = _model(n_envs)
    collector = RayAECRolloutCollector(
        model,
        [tictactoe_v3.env] * 2,
        opponents=opponents,
        seeds=seeds,
        acting_seeds=[acting_seed],
        num_cpus=0.5,
    )
    got = two_rollouts(collector, model, _buffer, None)
    assert_same_rollouts(got, want, (collector, inproc), (model, ref))
    assert {s.end for s in got[0][0] + got[0][1]} >= {"terminated", "cut"}
    # rollout 1's row 0 acts from the states rollout 0 left (carried in the runner), not reset
    starts = got[1][1]["episode_starts"][0]
    assert not starts.all()
    assert np.any(got[1][1]["hidden_states_pi"][0][:, starts == 0] != 0)


@pytest.mark.parametrize(
    ("opponents", "n_envs"),
    [(None, 8), ({"player_1": "random"}, 4)],
    ids=["self-play", "random"],
)
def test_two_runners_fill_their_columns_as_in_process(
    local_ray: None, opponents: dict[str, Any] | None, n_envs: int
) -> None:
    """2 runners x 2 copies: runner r's columns == the in-process collector over its copies."""
    seeds, acting_seeds = [3, 4, 5, 6], [21, 22]
    m = n_envs // 2  # each runner's columns
    model = _model(n_envs)
    collector = RayAECRolloutCollector(
        model,
        env_fn=tictactoe_v3.env,
        opponents=opponents,
        n_runners=2,
        copies_per_runner=2,
        seeds=seeds,
        acting_seeds=acting_seeds,
        num_cpus=0.5,
    )
    try:
        segments, buffers, weights = [], [], []
        for _ in range(2):
            weights.append({k: v.clone() for k, v in model.policy.state_dict().items()})
            segments.append(collector.collect())
            buffers.append(_buffer(model))
            set_random_seed(99)
            model.train()
    finally:
        collector.close()
    assert model.num_timesteps == 2 * 8 * n_envs
    for r in range(2):
        ref = _model(m)
        inproc = AECRolloutCollector(
            ref, [tictactoe_v3.env] * 2, opponents=opponents, seeds=seeds[2 * r : 2 * r + 2]
        )
        set_acting_seed(acting_seeds[r])
        for k in range(2):
            ref.policy.load_state_dict(weights[k])
            ref_segments = inproc.collect()
            cols = slice(m * r, m * (r + 1))
            block = {
                name: array[:, :, cols] if name in STATES else array[:, cols]
                for name, array in buffers[k].items()
            }
            assert_buffers_equal(block, _buffer(ref), f"runner {r}, rollout {k}", CLOSE)
            mine = [s for s in segments[k] if m * r <= s.column < m * (r + 1)]
            assert len(mine) == len(ref_segments)
            for got, want in zip(mine, ref_segments, strict=True):
                assert (got.column - m * r, got.env_index - 2 * r) == (want.column, want.env_index)
                assert (got.start_row, got.stop_row, got.agent_id, got.end, got.env_steps) == (
                    want.start_row,
                    want.stop_row,
                    want.agent_id,
                    want.end,
                    want.env_steps,
                )
