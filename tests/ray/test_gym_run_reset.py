"""The gymnasium runners reset their envs at a new training run that resets SB3's env.

SB3's ``BaseAlgorithm._setup_learn`` resets the model's VecEnv when a run begins with
``reset_num_timesteps=True`` (``DummyVecEnv.reset``: every env, the seeds used once; the first
step starts every episode); with ``False`` the episodes continue. ``collect_rollout`` sends the
runners ``training_reset_run_id(model)`` (and a local runner also reads it from the
``ActingState`` it loads): a runner resets its envs, unseeded, before the first step of a new
one, and records the first one it sees without resetting (its envs are fresh: a second reset
would not be SB3's seeded one). The oracle: SB3's own ``_setup_learn`` + ``collect_rollouts``
over ``make_vec_env(k, seed=s)``, run by run (``reset_num_timesteps`` True, False, True), every
rollout buffer array equal exactly, and the episodes ``Monitor`` reported (the pipelined server
mode acts with the policy's mode on both sides: what the envs returned exactly, the values of
other batch sizes allclose).
"""

from __future__ import annotations

from functools import partial
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
import ray
from stable_baselines3.common.utils import set_random_seed

import rlightning_ray
from rlightning_ray.sb3 import SB3BatchPolicy, acting_state, collect_rollout, policy_weights

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

RUNS = (True, False, True)  # reset_num_timesteps of each run
FIELDS = ("observations", "actions", "rewards", "episode_starts", "values", "log_probs")
FIELDS += ("advantages", "returns")
N_STEPS, LIMIT, RNG_SEED = 10, 12, 321


def _runs(helpers: ModuleType, model: Any, reference: Any, publish: Any, collector: Any) -> None:
    """One rollout per run of RUNS both ways; every buffer array and the episodes compared."""

    def collect(run: int) -> None:
        version = publish(run, acting_state(model))
        collect_rollout(model, collector, current_version=version)

    helpers.runs_against_learn(
        model, reference, RUNS, N_STEPS, collect, exact=FIELDS, compare_episodes=True
    )


def test_a_local_runner_resets_its_envs_at_a_resetting_run_as_learn(
    local_ray: None, helpers: ModuleType
) -> None:
    k, seed = 4, 3
    make_model = partial(helpers.make_ppo, k, N_STEPS, seed, LIMIT)
    model, reference = make_model(), make_model()  # building seeds the global RNGs: first
    set_random_seed(RNG_SEED)  # the runner's replica draws from RNGs seeded so, as SB3 here
    runners = rlightning_ray.start_runners(
        partial(helpers.monitored_cartpole, LIMIT),
        n_runners=1,
        envs_per_runner=k,
        seed=seed,
        num_cpus=0.25,
        policy=partial(SB3BatchPolicy, make_model, seed=RNG_SEED),
    )
    collector = rlightning_ray.Collector(runners, timeout_s=120)
    try:
        _runs(helpers, model, reference, collector.publish, collector)
    finally:
        for runner in runners:
            ray.kill(runner)


def test_server_mode_runners_reset_their_envs_at_a_resetting_run_as_learn(
    local_ray: None, helpers: ModuleType
) -> None:
    n_runners, k, seed = 2, 2, 5
    make_model = partial(helpers.make_ppo, n_runners * k, N_STEPS, seed, LIMIT)
    model, reference = make_model(), make_model()
    server, registry, collector = helpers.ordered_collector(
        make_model,
        partial(helpers.monitored_cartpole, LIMIT),
        n_runners=n_runners,
        k=k,
        seed=seed,
        rng_seed=RNG_SEED,
    )

    def publish(version: int, state: Any) -> int:
        rlightning_ray.publish_weights(server, registry, version, state)
        return version

    try:
        _runs(helpers, model, reference, publish, collector)
    finally:
        for runner in collector.runners:
            ray.kill(runner)
        ray.kill(server)


def test_pipelined_runners_reset_both_halves_at_a_resetting_run_as_learn(
    local_ray: None, helpers: ModuleType
) -> None:
    """The pipelined server mode (halves of 2 and 1 envs) over runs True, False, True.

    The server batches the halves dynamically, so both sides act with the mode of the policy
    (``explore=False`` there, SB3's ``forward(..., deterministic=True)`` here, as
    tests/ray/test_pipelined.py): observations, actions and episode starts must be SB3's exactly
    (the same envs, seeds, resets and actions); values, log-probs and what is computed from them
    come from batches of other sizes than SB3's (allclose).
    """
    n_runners, k, seed = 2, 3, 7
    make_model = partial(helpers.make_ppo, n_runners * k, N_STEPS, seed, LIMIT)
    model, reference = make_model(), make_model()
    reference.policy.forward = partial(
        type(reference.policy).forward, reference.policy, deterministic=True
    )
    server, registry = rlightning_ray.start_server(
        partial(SB3BatchPolicy, make_model, explore=False),
        max_batch=n_runners * k,
        max_wait_us=300,
        num_cpus=0.5,
    )
    runners = rlightning_ray.start_runners(
        partial(helpers.monitored_cartpole, LIMIT),
        server,
        n_runners=n_runners,
        envs_per_runner=k,
        seed=seed,
        num_cpus=0.5,
        pipeline=True,
    )
    collector = rlightning_ray.Collector(runners, timeout_s=120)
    assert collector.pipelined

    def collect(run: int) -> None:
        rlightning_ray.publish_weights(server, registry, run, policy_weights(model))
        collect_rollout(model, collector, current_version=run)

    exact = ("observations", "actions", "episode_starts")
    try:
        helpers.runs_against_learn(
            model,
            reference,
            RUNS,
            N_STEPS,
            collect,
            exact=exact,
            close=tuple(name for name in FIELDS if name not in exact),
            compare_episodes=True,
        )
    finally:
        for actor in [*runners, server, registry]:
            ray.kill(actor)


def test_a_reset_run_id_that_is_no_int_is_refused_before_sampling(
    local_ray: None, envs: ModuleType
) -> None:
    runners = rlightning_ray.start_runners(
        partial(envs.CounterEnv, 0),
        n_runners=1,
        envs_per_runner=2,
        num_cpus=0.25,
        policy=partial(envs.EchoPolicy),
    )
    collector = rlightning_ray.Collector(runners)
    try:
        with pytest.raises(TypeError, match="reset_run_id must be an int"):
            collector.sample(2, reset_run_id=True)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="reset_run_id must be an int"):
            ray.get(runners[0].sample.remote(2, reset_run_id="1"))
    finally:
        for runner in runners:
            ray.kill(runner)


def test_a_local_runner_resets_at_a_new_reset_run_id_of_the_state_it_loads(
    local_ray: None, envs: ModuleType
) -> None:
    """Collector.sample without reset_run_id: the loaded publish's ``reset_run_id`` decides.

    ``CounterEnv`` observes ``[tag, t]``: ``t`` is 0 right after a reset (5-step episodes).
    """
    runners = rlightning_ray.start_runners(
        partial(envs.CounterEnv, 0),
        n_runners=1,
        envs_per_runner=2,
        num_cpus=0.25,
        policy=partial(envs.EchoPolicy),
    )
    collector = rlightning_ray.Collector(runners)

    def first_t(version: int | None, run: int | None, **kwargs: Any) -> list[float]:
        if version is not None:
            collector.publish(version, SimpleNamespace(reset_run_id=run))
        (fragment,) = collector.sample(1, **kwargs)
        return list(fragment.observations[0][:, 1])

    try:
        assert first_t(0, 7) == [0, 0]  # the first run seen: fresh envs, not reset again
        assert first_t(1, 7) == [1, 1]  # the same run: the episodes continue
        assert first_t(2, None) == [2, 2]  # a publish without one: nothing changes
        assert first_t(3, 9) == [0, 0]  # a new resetting run: every env reset
        assert first_t(None, None, reset_run_id=9) == [1, 1]  # the run it was reset for
        assert first_t(None, None, reset_run_id=11) == [0, 0]  # the argument wins
    finally:
        for runner in runners:
            ray.kill(runner)
