"""Review probes of the ``ParallelEnvRunner`` reset at a new resetting training run.

The oracle is SB3's ``_setup_learn`` + ``collect_rollouts`` over
``VecMonitor(AgentsVecEnv(make_env, n_copies))``; both sides act with the policy's mode (the
server's ``SharedBatchPolicy(deterministic=True)``, SB3's ``forward(deterministic=True)``), so
what the envs returned must be SB3's exactly whatever the server's batching. Besides 2 runners x
2 envs over five runs (rollouts ending mid-episode and at episode ends; a first run with
``reset_num_timesteps=False``, which resets as SB3 resets a model without ``_last_obs``) and the
local mode, the cases the review found: two models sharing one Collector must not reset each
other's episodes (a run id older than the one recorded is not a new run), a runner restarted
around a resetting run resets once, and a first call of a resetting run that fails after
stepping leaves the run unrecorded, so the next call (the run's first delivered rollout) resets.
The episodes ``collect_shared_rollout`` reports (``VecMonitor``'s, per slot) are compared too.
"""

from __future__ import annotations

from functools import partial
from types import ModuleType

import pytest
import ray
from benchmarks.agents_vec_env import AgentsVecEnv
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import VecMonitor

import rlightning_ray
from rlightning_ray.pettingzoo import ParallelEnvRunner, SharedBatchPolicy, collect_shared_rollout
from rlightning_ray.sb3 import policy_weights
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

AGENTS = ["agent_0", "agent_1", "agent_2"]
EXACT = ("observations", "actions", "episode_starts")
CLOSE = ("values", "log_probs", "rewards", "advantages", "returns")


@pytest.mark.parametrize(
    ("max_cycles", "n_steps", "runs", "k"),
    [
        (4, 6, (True, False, True, True, False), 2),  # runs end mid-episode
        (3, 6, (True, False, True, True, False), 2),  # rollouts end at episode ends
        (4, 6, (False, False, True), 2),  # a first run with False (no _last_obs): it resets
    ],
)
def test_two_runners_reset_as_learn(
    local_ray: None,
    helpers: ModuleType,
    max_cycles: int,
    n_steps: int,
    runs: tuple[bool, ...],
    k: int,
) -> None:
    n_runners = 2
    n_slots = n_runners * k * len(AGENTS)
    make_env = partial(helpers.spread, max_cycles)
    model = helpers.spread_slots_ppo(n_slots, n_steps)
    reference = PPO(
        "MlpPolicy",
        VecMonitor(AgentsVecEnv(make_env, n_runners * k)),
        n_steps=n_steps,
        batch_size=n_slots * n_steps,
        seed=0,
        device="cpu",
    )
    reference.policy.load_state_dict(model.policy.state_dict())
    reference.policy.forward = partial(
        type(reference.policy).forward, reference.policy, deterministic=True
    )
    server, registry = rlightning_ray.start_server(
        partial(
            SharedBatchPolicy,
            partial(helpers.spread_slots_ppo, n_slots, n_steps),
            make_env,
            deterministic=True,
        ),
        num_cpus=0.25,
    )
    runners = rlightning_ray.start_runners(
        make_env,
        server,
        n_runners=n_runners,
        envs_per_runner=k,
        seed=0,
        num_cpus=0.25,
        runner_class=ParallelEnvRunner,
    )
    collector = rlightning_ray.Collector(runners, timeout_s=120)

    def collect(run: int) -> None:
        rlightning_ray.publish_weights(server, registry, run, policy_weights(model))
        collect_shared_rollout(model, collector, AGENTS, current_version=run)

    try:
        # rollouts that end at episode ends start every episode at a continuing run too
        helpers.runs_against_learn(
            model,
            reference,
            runs,
            n_steps,
            collect,
            exact=EXACT,
            close=CLOSE,
            atol=1e-5,
            compare_episodes=True,
            check_first_row=False,
        )
    finally:
        for actor in [*runners, server, registry]:
            ray.kill(actor)


def test_two_models_sharing_a_collector_do_not_reset_each_other(
    local_ray: None, helpers: ModuleType
) -> None:
    """Two shared models, each in one resetting run, alternate rollouts over one Collector.

    A rule of "reset at any other id" reset at every alternation (each call's id is the other
    model's): every rollout started every episode, silently. A runner resets only on an id
    newer than the one it recorded."""
    n_steps, max_cycles = 4, 25
    make_env = partial(helpers.spread, max_cycles)
    models = [helpers.spread_slots_ppo(len(AGENTS), n_steps) for _ in range(2)]
    server, registry = rlightning_ray.start_server(
        partial(SharedBatchPolicy, partial(helpers.spread_slots_ppo, 3, n_steps), make_env),
        num_cpus=0.25,
    )
    runners = rlightning_ray.start_runners(
        make_env,
        server,
        n_runners=1,
        envs_per_runner=1,
        seed=0,
        num_cpus=0.25,
        runner_class=ParallelEnvRunner,
    )
    collector = rlightning_ray.Collector(runners, timeout_s=120)
    try:
        for m in models:
            start_training(m, 1000, reset_num_timesteps=True)
        starts = []
        for i in range(6):
            m = models[i % 2]
            collect_shared_rollout(m, collector, AGENTS)
            starts.append(bool(m.rollout_buffer.episode_starts[0].all()))
        # neither model began a new run after its first: the episodes should continue
        assert starts[2:] == [False] * 4, starts
    finally:
        for actor in [*runners, server, registry]:
            ray.kill(actor)


def test_a_restarted_runner_resets_once_around_a_resetting_run(
    local_ray: None, helpers: ModuleType
) -> None:
    """A runner Ray restarts between start_training(True) and the collect resets once."""
    n_steps, max_cycles = 4, 25
    make_env = partial(helpers.spread, max_cycles)
    model = helpers.spread_slots_ppo(len(AGENTS), n_steps)
    server, registry = rlightning_ray.start_server(
        partial(SharedBatchPolicy, partial(helpers.spread_slots_ppo, 3, n_steps), make_env),
        num_cpus=0.25,
    )
    runners = rlightning_ray.start_runners(
        make_env,
        server,
        n_runners=1,
        envs_per_runner=1,
        seed=0,
        num_cpus=0.25,
        runner_class=ParallelEnvRunner,
    )
    collector = rlightning_ray.Collector(runners, timeout_s=120)
    try:
        start_training(model, 1000, reset_num_timesteps=True)
        collect_shared_rollout(model, collector, AGENTS)
        start_training(model, 1000, reset_num_timesteps=True)
        ray.kill(runners[0], no_restart=False)
        frags = collect_shared_rollout(model, collector, AGENTS)
        assert frags[0].restarted
        assert model.rollout_buffer.episode_starts[0].all()
        assert not model.rollout_buffer.episode_starts[1:].any()
        frags = collect_shared_rollout(model, collector, AGENTS)  # same run: continues
        assert not model.rollout_buffer.episode_starts.any()
        ray.kill(runners[0], no_restart=False)  # restarted mid-run (continuing run)
        start_training(model, 1000, reset_num_timesteps=False)
        frags = collect_shared_rollout(model, collector, AGENTS)
        assert model.rollout_buffer.episode_starts[0].all()  # the restart's fresh episode
        assert not model.rollout_buffer.episode_starts[1:].any()
    finally:
        for actor in [*runners, server, registry]:
            ray.kill(actor)


def test_a_failed_first_call_of_a_resetting_run_keeps_the_reset(
    local_ray: None, helpers: ModuleType
) -> None:
    """Deterministic mode: a runner restarted inside the first call of a resetting run fails
    that call (docs/ray.md); the next call is the run's first delivered rollout, which SB3
    would start at every episode start. A survivor that kept the run recorded from the failed
    call went on mid-episode; a call that stepped and raised leaves the run unrecorded."""
    import threading
    import time

    n_steps, max_cycles = 500, 1000  # a call of seconds: the kill lands inside it
    make_env = partial(helpers.spread, max_cycles)
    model = helpers.spread_slots_ppo(2 * len(AGENTS), n_steps)
    server, registry = rlightning_ray.start_server(
        partial(SharedBatchPolicy, partial(helpers.spread_slots_ppo, 6, n_steps), make_env),
        order=["runner-0", "runner-1"],
        num_cpus=0.25,
    )
    runners = rlightning_ray.start_runners(
        make_env,
        server,
        n_runners=2,
        envs_per_runner=1,
        seed=0,
        num_cpus=0.25,
        runner_class=ParallelEnvRunner,
    )
    collector = rlightning_ray.Collector(runners, timeout_s=120)
    try:
        start_training(model, 10**6, reset_num_timesteps=True)
        collect_shared_rollout(model, collector, AGENTS)  # run 1 (fresh: recorded)
        start_training(model, 10**6, reset_num_timesteps=True)  # run 2 resets
        killer = threading.Timer(0.5, lambda: ray.kill(runners[1], no_restart=False))
        killer.start()
        t0 = time.time()
        with pytest.raises(RuntimeError):
            collect_shared_rollout(model, collector, AGENTS)
        killer.join()
        assert time.time() - t0 > 0.5
        collect_shared_rollout(model, collector, AGENTS)  # run 2's first delivered rollout
        first = model.rollout_buffer.episode_starts[0]
        assert first.all(), first  # SB3: every episode starts the run
    finally:
        for actor in [*runners, server, registry]:
            ray.kill(actor)


def test_local_mode_parallel_runners_reset_as_learn(local_ray: None, helpers: ModuleType) -> None:
    """The local mode (each runner its own SharedBatchPolicy), 2 runners x 2 envs, mode acting."""
    n_runners, k, n_steps, max_cycles = 2, 2, 6, 4
    n_slots = n_runners * k * len(AGENTS)
    make_env = partial(helpers.spread, max_cycles)
    model = helpers.spread_slots_ppo(n_slots, n_steps)
    reference = PPO(
        "MlpPolicy",
        VecMonitor(AgentsVecEnv(make_env, n_runners * k)),
        n_steps=n_steps,
        batch_size=n_slots * n_steps,
        seed=0,
        device="cpu",
    )
    reference.policy.load_state_dict(model.policy.state_dict())
    reference.policy.forward = partial(
        type(reference.policy).forward, reference.policy, deterministic=True
    )
    runners = rlightning_ray.start_runners(
        make_env,
        None,
        policy=partial(
            SharedBatchPolicy,
            partial(helpers.spread_slots_ppo, n_slots, n_steps),
            make_env,
            deterministic=True,
        ),
        n_runners=n_runners,
        envs_per_runner=k,
        seed=0,
        num_cpus=0.25,
        runner_class=ParallelEnvRunner,
    )
    collector = rlightning_ray.Collector(runners, timeout_s=120)

    def collect(run: int) -> None:
        collector.publish(run, policy_weights(model))
        collect_shared_rollout(model, collector, AGENTS, current_version=run)

    try:
        helpers.runs_against_learn(
            model,
            reference,
            (True, False, True),
            n_steps,
            collect,
            exact=EXACT,
            compare_episodes=True,
        )
    finally:
        for actor in runners:
            ray.kill(actor)
