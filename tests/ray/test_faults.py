"""Faults, with Ray's own mechanisms: ``ray.kill`` a runner or the server mid-rollout.

The rule (docs/ray.md, "Faults"): a runner that dies loses what it stepped since its last
delivered fragment; Ray restarts it (``max_restarts``) and retries the ``sample`` call
(``max_task_retries``), so its envs start fresh episodes and the buffer still gets exactly
``n_steps`` rows per env, each env's rows its own and in step order. A server that dies is
restarted, reads the newest weights from the registry, and the runners' ``act`` calls are
retried on it; but its acting state (counters, exploration, noise) went back to the last
publish, so the collector refuses the call (the server's incarnation changed) and every later
one: publish again and make a new collector to go on. In the deterministic mode a runner
restarted mid-``sample`` cannot rejoin the others' step: the call fails at once naming it
(``LockstepError``), and the next call delivers. CounterEnv's observation ``[tag, t]`` lets
the test read every row's env and step.
"""

from __future__ import annotations

import threading
import time
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import ray

import rlightning_ray
from rlightning_ray.sb3 import SB3BatchPolicy, collect_rollout, policy_weights
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

N_ENVS, N_STEPS, LENGTH = 4, 24, 5


def _setup(
    helpers: ModuleType, order: list[str] | None = None
) -> tuple[Any, Any, Any, list[Any], rlightning_ray.Collector]:
    make_model = partial(helpers.counter_ppo, N_ENVS, N_STEPS)
    model = make_model()
    start_training(model, 10_000)
    server, registry = rlightning_ray.start_server(
        partial(SB3BatchPolicy, make_model),
        max_batch=N_ENVS,
        max_wait_us=2000,
        order=order,
        num_cpus=0.25,
    )
    fns = [partial(helpers.CounterEnv, i, LENGTH, 0.02) for i in range(N_ENVS)]
    runners = rlightning_ray.start_runners(
        fns, server, n_runners=2, envs_per_runner=2, num_cpus=0.25
    )
    return model, server, registry, runners, rlightning_ray.Collector(runners)


def _check_rows(model: Any, fresh: set[int]) -> None:
    """Every column holds its own env's steps, consecutive; ``fresh`` envs start at an episode."""
    buffer = model.rollout_buffer
    assert buffer.full and buffer.observations.shape == (N_STEPS, N_ENVS, 2)
    np.testing.assert_array_equal(
        buffer.observations[:, :, 0], np.tile(np.arange(N_ENVS), (N_STEPS, 1))
    )
    for env in range(N_ENVS):
        t = buffer.observations[:, env, 1]
        starts = buffer.episode_starts[:, env]
        np.testing.assert_array_equal(np.diff(t)[starts[1:] == 0], 1)  # no row lost or repeated
        np.testing.assert_array_equal(t[1:][starts[1:] == 1], 0)  # a new episode starts at t=0
        if env in fresh:
            assert t[0] == 0 and starts[0] == 1


def _kill_later(actor: Any, delay_s: float) -> threading.Timer:
    timer = threading.Timer(delay_s, lambda: ray.kill(actor, no_restart=False))
    timer.start()
    return timer


def test_a_runner_killed_mid_rollout_restarts_with_fresh_episodes(
    local_ray: None, helpers: ModuleType
) -> None:
    model, server, registry, runners, collector = _setup(helpers)
    rlightning_ray.publish_weights(server, registry, 0, policy_weights(model))
    collect_rollout(model, collector, current_version=0)  # runner-1's episodes are under way
    _check_rows(model, fresh={0, 1, 2, 3})
    model.train()
    rlightning_ray.publish_weights(server, registry, 1, policy_weights(model))
    timer = _kill_later(runners[1], 0.3)
    fragments = collect_rollout(model, collector, current_version=1)
    timer.join()
    assert [f.restarted for f in fragments] == [False, True]
    assert collector.restarts == 1
    assert ray.get(runners[1].describe.remote())["restarted"]
    _check_rows(model, fresh={2, 3})  # runner-1's envs: fresh episodes, its old fragment dropped
    assert model.rollout_buffer.observations[0, 0, 1] == N_STEPS % LENGTH  # runner-0 went on
    model.train()
    assert model.num_timesteps == 2 * N_STEPS * N_ENVS


def test_a_killed_server_restarts_and_the_collector_refuses_its_lost_acting_state(
    local_ray: None, helpers: ModuleType
) -> None:
    model, server, registry, _, collector = _setup(helpers)
    rlightning_ray.publish_weights(server, registry, 0, policy_weights(model))
    collect_rollout(model, collector, current_version=0)
    model.train()
    rlightning_ray.publish_weights(server, registry, 1, policy_weights(model))
    before = model.rollout_buffer.observations.copy()
    timer = _kill_later(server, 0.3)
    # Ray restarts the server from the newest published weights, and the runners' requests are
    # retried on it, but its acting-side counters (num_timesteps, exploration, noise) went back
    # to the publish: the collector refuses the rollout (before: it was added, silently)
    with pytest.raises(RuntimeError, match=r"policy server .* restarted .*acting state"):
        collect_rollout(model, collector, current_version=1)
    timer.join()
    np.testing.assert_array_equal(model.rollout_buffer.observations, before)  # nothing added
    assert model.num_timesteps == N_STEPS * N_ENVS
    info = ray.get(server.info.remote())
    assert info["restarted"] and info["version"] == 1
    with pytest.raises(RuntimeError, match="restarted"):  # every later call of this collector
        collector.sample(1)
    # republish the learner's state and take a new collector: training goes on
    rlightning_ray.publish_weights(server, registry, 2, policy_weights(model))
    collector = rlightning_ray.Collector(collector.runners)
    fragments = collect_rollout(model, collector, current_version=2)
    assert {a.policy_version for f in fragments for a in f.answers} == {2}
    assert [f.restarted for f in fragments] == [False, False]  # the runners went on
    _check_rows(model, fresh=set())
    assert model.num_timesteps == 2 * N_STEPS * N_ENVS


def test_a_runner_restarted_mid_sample_in_the_deterministic_mode_fails_fast_then_delivers(
    local_ray: None, helpers: ModuleType
) -> None:
    model, server, registry, runners, collector = _setup(helpers, ["runner-0", "runner-1"])
    rlightning_ray.publish_weights(server, registry, 0, policy_weights(model))
    collect_rollout(model, collector, current_version=0)
    before = model.rollout_buffer.observations.copy()
    timer = _kill_later(runners[1], 0.3)
    started = time.monotonic()
    # Ray retries runner-1's sample from step 0 while runner-0 is further on: the lockstep is
    # broken, so the call fails at once, naming the restarted runner (before: a hang)
    with pytest.raises(
        RuntimeError, match=r"runner 'runner-1' .*failed: LockstepError: .*Ray restarted the runner"
    ):
        collect_rollout(model, collector, current_version=0, timeout_s=60)
    timer.join()
    assert time.monotonic() - started < 30
    np.testing.assert_array_equal(model.rollout_buffer.observations, before)  # nothing added
    fragments = collect_rollout(model, collector, current_version=0)  # the next call delivers
    assert [f.restarted for f in fragments] == [False, True] and collector.restarts == 1
    _check_rows(model, fresh={2, 3})  # runner-1's envs: fresh episodes
    assert model.num_timesteps == 2 * N_STEPS * N_ENVS
