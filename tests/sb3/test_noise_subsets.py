"""Action noise for any subset of the envs in a call: one process per env id, reset per env.

A dynamically batching policy server's batch holds whichever runners asked, in arrival order, so
:meth:`SB3PolicyAdapter.act` must draw each row's noise from that env's own process
(``noise.noises[i]()`` of SB3's ``VectorizedActionNoise``), whatever the subset and its row
order, and :class:`ActingReplica` must reset the process of each env whose episode ended. The
oracle is one SB3 ``OrnsteinUhlenbeckActionNoise`` per env, stepped alone (only when its env
acts) from numpy's global RNG in the documented draw order (row order for a subset, process
order for a call of every process), and reset when its env starts an episode.
"""

from __future__ import annotations

import copy
import re
from typing import Any

import numpy as np
import pytest
from stable_baselines3 import TD3
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.noise import OrnsteinUhlenbeckActionNoise, VectorizedActionNoise

from rlightning_sb3 import ActingReplica
from rlightning_sb3._noise import bound_env_ids

N_ENVS, SEED, RNG_SEED = 4, 0, 7
IDS = [f"env-{i}" for i in range(N_ENVS)]

#: (env indices in row order, which of them start an episode): subsets in shuffled order, the
#: first call a subset too (it binds only its envs), one call of every env in another order
#: than the binding, and episode ends of single envs inside batches.
CALLS: list[tuple[list[int], set[int]]] = [
    ([2, 0], {2, 0}),
    ([3], {3}),
    ([1, 2, 3, 0], {1}),  # env 1 met last: every process bound now
    ([2, 0], set()),
    ([3, 1], {3}),  # env 3's episode ended: its process alone is reset
    ([1, 2, 3, 0], {2, 0}),  # every env, but not in the bound order
    ([0], set()),
    ([2, 0, 3, 1], {1}),  # every env in the bound order: one VectorizedActionNoise call
    ([3, 2], set()),
]


def _td3() -> Any:
    return TD3(
        "MlpPolicy",
        make_vec_env("Pendulum-v1", n_envs=N_ENVS, seed=SEED),
        seed=SEED,
        learning_starts=0,
        buffer_size=100,
        action_noise=OrnsteinUhlenbeckActionNoise(np.zeros(1), 0.5 * np.ones(1)),
        policy_kwargs={"net_arch": [8]},
        device="cpu",
    )


def test_each_env_draws_from_its_own_process_in_any_subset_and_resets_alone() -> None:
    model = _td3()
    base = model.action_noise
    replica = ActingReplica(model)
    observations = np.random.default_rng(SEED).uniform(-1, 1, (len(CALLS), N_ENVS, 3))
    observations = observations.astype(np.float32)
    np.random.seed(RNG_SEED)
    states, noises, orders = [], [], []
    for step, (rows, starting) in enumerate(CALLS):
        ids = [IDS[i] for i in rows]
        responses = replica.act(
            observations[step][rows], ids, episode_start=[i in starting for i in rows]
        )
        noise: Any = model.action_noise
        assert isinstance(noise, VectorizedActionNoise) and len(noise.noises) == N_ENVS
        bound = list(bound_env_ids(noise) or [])
        states.append({e: noise.noises[bound.index(e)].noise_prev.copy() for e in ids})
        deterministic = model.policy.scale_action(
            model.predict(observations[step][rows], deterministic=True)[0]
        )
        noises.append(np.stack([r.buffer_action for r in responses]) - deterministic)
        # documented draw order: a call of every process draws them in process order (one
        # VectorizedActionNoise call), a subset in row order
        orders.append(bound if sorted(ids) == sorted(bound) == sorted(IDS) else ids)
    assert bound_env_ids(model.action_noise) == ["env-2", "env-0", "env-3", "env-1"]
    assert model.num_timesteps == sum(len(rows) for rows, _ in CALLS)

    # the oracle: one SB3 OU process per env, stepped alone, reset when its env starts an
    # episode (not on the first call that meets it: a fresh process, as SB3's first step)
    alone = {env_id: copy.deepcopy(base) for env_id in IDS}
    met: set[str] = set()
    np.random.seed(RNG_SEED)
    for step, (rows, starting) in enumerate(CALLS):
        ids = [IDS[i] for i in rows]
        for i in rows:
            if i in starting and IDS[i] in met:
                alone[IDS[i]].reset()
        met.update(ids)
        drawn = {env_id: alone[env_id]() for env_id in orders[step]}
        for env_id in ids:  # each env's process holds its own OU state, exactly
            np.testing.assert_array_equal(states[step][env_id], alone[env_id].noise_prev)
        # the buffer action is the deterministic action plus that env's noise (unclipped here;
        # the two forward passes are the same batch, the subtraction rounds: allclose)
        expected = np.stack([drawn[e] for e in ids])
        assert np.abs(noises[step]).max() < 1.5
        np.testing.assert_allclose(noises[step], expected, rtol=0, atol=1e-5)
    # the resets happened: env 3's process restarted at the 5th call, env 1's at the 8th
    assert len({float(alone[e].noise_prev[0]) for e in IDS}) == N_ENVS


def test_a_reset_touches_only_the_ending_envs_process() -> None:
    model = _td3()
    replica = ActingReplica(model)
    obs = np.zeros((N_ENVS, 3), np.float32)
    replica.act(obs[:2], ["env-1", "env-0"], episode_start=[True, True])
    replica.act(obs[:2], ["env-3", "env-2"], episode_start=[True, True])
    noise: Any = model.action_noise
    before = [p.noise_prev.copy() for p in noise.noises]
    assert all(b.any() for b in before)  # every process drew once
    assert replica.reset_noise(["env-0", "env-2"], [False, True]) == ["env-2"]
    after = [p.noise_prev for p in noise.noises]
    # env-2 is process 3 (the 4th env met): only it is back at its initial position
    for i in (0, 1, 2):
        np.testing.assert_array_equal(after[i], before[i])
    np.testing.assert_array_equal(after[3], np.zeros(1))


def test_an_env_id_with_no_process_is_refused_by_name() -> None:
    model = _td3()
    replica = ActingReplica(model)
    obs = np.zeros((N_ENVS, 3), np.float32)
    replica.act(obs, IDS, episode_start=[True] * N_ENVS)
    state = np.random.get_state()
    message = (
        "model.action_noise draws one sample per env for the envs ['env-0', 'env-1', 'env-2', "
        "'env-3'] (bound to its 4 processes in the order act() first met them, 0 process(es) "
        "left free); this call's env_ids ['env-9'] have no noise process"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        replica.act(obs[:2], ["env-2", "env-9"], episode_start=[False, False])
    assert np.random.get_state()[1].tolist() == state[1].tolist()  # nothing drawn
    assert bound_env_ids(model.action_noise) == IDS  # nothing bound
