"""``ParallelEnvRunner`` s reset their envs at a new resetting training run, as SB3's ``learn()``.

SB3's ``BaseAlgorithm._setup_learn`` resets the model's VecEnv when a run begins with
``reset_num_timesteps=True`` (every copy reset, unseeded after its first seeded reset; the first
step starts every episode) and continues the episodes with ``False``. ``collect_shared_rollout``
sends the runners ``rlightning_sb3.training_reset_run_id(model)``, and a runner resets its
PettingZoo envs before the first step of a new one (``EnvRunner.sample``; the first run it sees
finds fresh envs and is only recorded). The oracle is SB3's own ``_setup_learn`` +
``collect_rollouts`` over ``benchmarks.agents_vec_env.AgentsVecEnv`` (SuperSuit's one slot per
agent), run by run (``reset_num_timesteps`` True, False, True; every run ending mid-episode): one
runner of one simple_spread env, answered by a server in the deterministic mode whose torch RNG
is seeded as this process's (so it draws the actions SB3 draws here, over the same three rows),
fills the buffer SB3 fills, array for array.
"""

from __future__ import annotations

from functools import partial
from types import ModuleType

import pytest
import ray
from benchmarks.agents_vec_env import AgentsVecEnv
from stable_baselines3 import PPO
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import VecMonitor

import rlightning_ray
from rlightning_ray.pettingzoo import ParallelEnvRunner, SharedBatchPolicy, collect_shared_rollout
from rlightning_ray.sb3 import policy_weights

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

RUNS = (True, False, True)  # reset_num_timesteps of each run
#: simple_spread truncates every 4 steps; rollouts of 6 steps end mid-episode
MAX_CYCLES, N_STEPS, RNG_SEED = 4, 6, 123
AGENTS = ["agent_0", "agent_1", "agent_2"]
#: Exact: what the envs returned and what the policy drew and computed over the same rows
EXACT = ("observations", "actions", "episode_starts", "values", "log_probs")
#: The truncation bootstraps: collect_shared_rollout computes V(terminal observation) over an
#: env's agents in one batch, SB3 one slot at a time (last bits; tests/ray/test_pettingzoo.py)
CLOSE = ("rewards", "advantages", "returns")


def test_parallel_env_runners_reset_their_envs_at_a_resetting_run_as_learn(
    local_ray: None, helpers: ModuleType
) -> None:
    make_env = partial(helpers.spread, MAX_CYCLES)
    model = helpers.spread_slots_ppo(len(AGENTS), N_STEPS)
    reference = PPO(
        "MlpPolicy",
        VecMonitor(AgentsVecEnv(make_env, 1)),
        n_steps=N_STEPS,
        batch_size=len(AGENTS) * N_STEPS,
        seed=0,
        device="cpu",
    )
    reference.policy.load_state_dict(model.policy.state_dict())
    set_random_seed(RNG_SEED)  # the server's policy seeds its RNGs so after building its model
    server, registry = rlightning_ray.start_server(
        partial(
            SharedBatchPolicy,
            partial(helpers.spread_slots_ppo, len(AGENTS), N_STEPS),
            make_env,
            seed=RNG_SEED,
        ),
        order=["runner-0"],
        num_cpus=0.5,
    )
    runners = rlightning_ray.start_runners(
        make_env,
        server,
        n_runners=1,
        envs_per_runner=1,
        seed=0,  # AgentsVecEnv resets copy 0 with seed 0 first
        num_cpus=0.5,
        runner_class=ParallelEnvRunner,
    )
    collector = rlightning_ray.Collector(runners, timeout_s=120)

    def collect(run: int) -> None:
        rlightning_ray.publish_weights(server, registry, run, policy_weights(model))
        collect_shared_rollout(model, collector, AGENTS, current_version=run)

    try:
        helpers.runs_against_learn(
            model,
            reference,
            RUNS,
            N_STEPS,
            collect,
            exact=EXACT,
            close=CLOSE,
            compare_episodes=True,
        )
    finally:
        for actor in [*runners, server, registry]:
            ray.kill(actor)
