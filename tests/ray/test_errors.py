"""Errors reach every runner: weights the server cannot load, a failing env, a wrong setup.

Every ``ray.get`` here has a timeout: a regression (a request left waiting) fails the test
instead of hanging it. The SB3 servers (one deterministic, one dynamic) are started once for the
module and serve each test's new runners; tests that need no model use ``EchoPolicy`` servers.
"""

from __future__ import annotations

import itertools
import math
import re
import time
from collections.abc import Iterator
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import ray
import torch

import rlightning_ray
from rlightning_ray.sb3 import SB3BatchPolicy, acting_state, collect_replay, policy_weights
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

TIMEOUT_S = 30


ORDER = ["runner-0", "runner-1"]
VERSIONS = itertools.count(1)  # the module's servers outlive a test: versions only grow


@pytest.fixture(scope="module")
def sb3_servers(local_ray: None, helpers: ModuleType) -> Iterator[dict[str, tuple[Any, Any]]]:
    """``{"order": (server, registry), "dynamic": (...)}`` of ``counter_ppo(4)`` models."""
    servers = {
        mode: rlightning_ray.start_server(
            partial(SB3BatchPolicy, partial(helpers.counter_ppo, 4)),
            order=ORDER if mode == "order" else None,
            max_batch=256,
            max_wait_us=2000,
            num_cpus=0.25,
        )
        for mode in ("order", "dynamic")
    }
    yield servers
    for server, registry in servers.values():
        _kill(server, registry)


def _runners(helpers: ModuleType, server: Any, env_fns: list[Any] | None = None) -> list[Any]:
    fns = env_fns or [partial(helpers.CounterEnv, i) for i in range(4)]
    return rlightning_ray.start_runners(fns, server, n_runners=2, envs_per_runner=2, num_cpus=0.25)


def _start(
    helpers: ModuleType, order: list[str] | None, env_fns: list[Any] | None = None
) -> tuple[Any, Any, list[Any]]:
    """An ``EchoPolicy`` server (no model) and two runners of two envs."""
    server, registry = rlightning_ray.start_server(
        helpers.EchoPolicy, order=order, max_batch=256, max_wait_us=2000, num_cpus=0.25
    )
    return server, registry, _runners(helpers, server, env_fns)


def _kill(*actors: Any) -> None:
    for actor in actors:
        ray.kill(actor, no_restart=True)


@pytest.mark.parametrize("mode", ["order", "dynamic"])
def test_weights_the_server_cannot_load_fail_every_request_and_keep_the_old_ones(
    sb3_servers: dict[str, tuple[Any, Any]], helpers: ModuleType, mode: str
) -> None:
    server, registry = sb3_servers[mode]
    runners = _runners(helpers, server)
    good = policy_weights(helpers.counter_ppo(4))
    old = next(VERSIONS)
    rlightning_ray.publish_weights(server, registry, old, good)
    ray.get([r.sample.remote(1) for r in runners], timeout=TIMEOUT_S)
    bad = {name: torch.zeros(1) for name in good}  # every shape wrong
    version = next(VERSIONS)
    rlightning_ray.publish_weights(server, registry, version, bad)
    refs = [r.sample.remote(2) for r in runners]
    errors = []
    for ref in refs:
        # in the dynamic mode a runner's first request may come after the failed batch
        try:
            ray.get(ref, timeout=TIMEOUT_S)
        except ray.exceptions.RayTaskError as exc:
            errors.append(str(exc))
    assert errors  # the batch that loaded the bad version failed, all of it
    for error in errors:
        assert f"could not load the published weights version {version}" in error
        assert "size mismatch" in error and f"keeps version {old}" in error
    assert ray.get(server.info.remote(), timeout=TIMEOUT_S)["version"] == old
    newer = next(VERSIONS)
    rlightning_ray.publish_weights(server, registry, newer, good)
    fragments = ray.get([r.sample.remote(2) for r in runners], timeout=TIMEOUT_S)
    assert {a.policy_version for f in fragments for a in f.answers} == {newer}
    _kill(*runners)


@pytest.mark.parametrize("mode", ["order", "dynamic"])
def test_an_env_raising_fails_the_sample_naming_it_and_frees_the_other_runners(
    sb3_servers: dict[str, tuple[Any, Any]], helpers: ModuleType, mode: str
) -> None:
    fns = [partial(helpers.FailingEnv, 0, 2)] + [
        partial(helpers.CounterEnv, i, 100) for i in range(1, 4)
    ]
    runners = _runners(helpers, sb3_servers[mode][0], fns)
    collector = rlightning_ray.Collector(runners)
    with pytest.raises(RuntimeError, match=r"runner 'runner-0'.*env 'env-0'.*env 0 broke"):
        collector.sample(3, timeout_s=TIMEOUT_S)
    # runner-1 is free again (its request was failed, not left waiting): it answers a ping
    assert ray.get(runners[1].ping.remote(), timeout=TIMEOUT_S) == "runner-1"
    _kill(*runners)


def test_a_collector_refuses_an_order_that_is_not_its_runners_and_repeated_ids(
    local_ray: None, helpers: ModuleType
) -> None:
    server, _, runners = _start(helpers, ["runner-0", "runner-1", "runner-2"])
    with pytest.raises(ValueError, match=re.escape("order entries with no runner ['runner-2']")):
        rlightning_ray.Collector(runners)
    with pytest.raises(ValueError, match=re.escape("distinct runner ids, got ['runner-0']")):
        rlightning_ray.Collector([runners[0], runners[0]])
    _kill(server, *runners)


def test_every_sample_has_a_default_timeout_naming_the_runners_still_sampling(
    local_ray: None, helpers: ModuleType
) -> None:
    fns = [partial(helpers.CounterEnv, i, 100, 0.0 if i < 2 else 3.0) for i in range(4)]
    server, registry = rlightning_ray.start_server(
        helpers.EchoPolicy, max_batch=4, max_wait_us=2000, num_cpus=0.25
    )
    runners = rlightning_ray.start_runners(
        fns, server, n_runners=2, envs_per_runner=2, num_cpus=0.25
    )
    rlightning_ray.publish_weights(server, registry, 0, {})
    assert rlightning_ray.Collector(runners).timeout_s == rlightning_ray.DEFAULT_TIMEOUT_S == 600
    collector = rlightning_ray.Collector(runners, timeout_s=1.5)
    message = "runners ['runner-1'] (envs ['env-2', 'env-3']) returned no fragment within 1.5 s"
    started = time.monotonic()
    with pytest.raises(TimeoutError, match=re.escape(message)):
        collector.sample(2)
    assert time.monotonic() - started < 15
    with pytest.raises(ValueError, match=re.escape("timeout_s must be > 0 seconds")):
        rlightning_ray.Collector(runners, timeout_s=math.nan)
    _kill(server, *runners)


def test_after_a_deterministic_timeout_the_next_sample_delivers_within_its_own_timeout(
    local_ray: None, helpers: ModuleType, envs: ModuleType
) -> None:
    """The timed-out call's late requests are refused, so they cannot block or join the next.

    env-0 (runner-0) sleeps 2.5 s in its third step, once: the first call (timeout 1 s) fails
    naming runner-0 alone (runner-1 only waited in the server for it). When runner-0 wakes, its
    request of that call is refused (before: it met runner-1's request of the next call in one
    batch, and the next call failed with a LockstepError, or waited for the abandoned call).
    First, on the same server, the deterministic collector's setup checks: the runners in
    another order than the server's (before: accepted, each runner's rows in the other's buffer
    columns) and a timeout that is no number.
    """
    fns = [partial(envs.StallingEnv, 0, 3, 2.5)] + [
        partial(helpers.CounterEnv, i, 100) for i in range(1, 4)
    ]
    server, registry, runners = _start(helpers, ORDER, fns)
    rlightning_ray.publish_weights(server, registry, 0, {})
    message = (
        "the server's order ['runner-0', 'runner-1'] is not this collector's runner order "
        "['runner-1', 'runner-0']"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        rlightning_ray.Collector(runners[::-1])
    with pytest.raises(TypeError, match="timeout_s must be a number of seconds, got str"):
        rlightning_ray.Collector(runners, timeout_s="1")
    collector = rlightning_ray.Collector(runners, timeout_s=1.0)
    message = (
        "runners ['runner-0'] (envs ['env-0', 'env-1']) returned no fragment within 1.0 s "
        "(timeout_s; runners ['runner-1'] only waited in the server for them"
    )
    with pytest.raises(TimeoutError, match=re.escape(message)):
        collector.sample(6)
    started = time.monotonic()
    fragments = collector.sample(4, timeout_s=10)
    assert time.monotonic() - started < 10
    for frag in fragments:  # every runner stepped 3 steps in the failed call (dropped), then 4
        pairs = zip(frag.observations, frag.answers, strict=True)
        for t, (observation, answer) in enumerate(pairs):
            assert answer.env_ids == frag.env_ids
            np.testing.assert_array_equal(observation[:, 1], 3 + t)
            np.testing.assert_array_equal(answer.obs_seen, observation)
    assert ray.get(server.info.remote(), timeout=TIMEOUT_S)["batch_rows"] == [4] * 7
    _kill(server, *runners)


def test_maskable_ppo_served_to_envs_without_action_masks_is_refused(
    local_ray: None, helpers: ModuleType, envs: ModuleType
) -> None:
    config = {"obs": "box", "act": "discrete", "masks": True}
    make_model = partial(helpers.fuzz_model, "maskable", config, 2, 0)
    server, registry = rlightning_ray.start_server(
        partial(SB3BatchPolicy, make_model), order=["runner-0"], num_cpus=0.25
    )
    runners = rlightning_ray.start_runners(
        partial(envs.fuzz_env, masks=False), server, n_runners=1, envs_per_runner=2, num_cpus=0.25
    )
    learner = make_model()
    start_training(learner, 100)
    rlightning_ray.publish_weights(server, registry, 1, acting_state(learner))
    message = "MaskablePPO acts with action masks but the envs ['env-0', 'env-1'] sent none"
    with pytest.raises(RuntimeError, match=re.escape(message)):
        rlightning_ray.Collector(runners).sample(1, timeout_s=TIMEOUT_S)
    _kill(server, *runners)


@pytest.mark.parametrize(
    ("env_ids", "error", "message"),
    [
        ([0, 1], TypeError, "runner 'r0' env_ids[0] must be a str"),
        (["a", "a"], ValueError, "runner 'r0' env_ids repeats ['a']"),
        (["a"], ValueError, "runner 'r0' has 2 envs"),
    ],
)
def test_runner_env_ids_follow_the_core_env_id_rule(
    env_ids: list[Any], error: type[Exception], message: str
) -> None:
    """A runner's env ids are checked by rlightning.rules.check_env_ids (before any actor)."""
    from rlightning_ray.runner import checked_env_ids

    fns = [lambda: None, lambda: None]
    with pytest.raises(error, match=re.escape(message)):
        checked_env_ids("r0", fns, env_ids, None)


def test_a_model_with_a_vec_env_wrapper_the_runners_lack_is_refused_up_front(
    local_ray: None, helpers: ModuleType
) -> None:
    from stable_baselines3 import PPO, SAC
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecFrameStack, VecNormalize

    from rlightning_ray.sb3 import collect_rollout

    server, _ = rlightning_ray.start_server(helpers.EchoPolicy, max_batch=4, num_cpus=0.25)
    runners = rlightning_ray.start_runners(
        helpers.pendulum, server, n_runners=1, envs_per_runner=1, num_cpus=0.25
    )
    collector = rlightning_ray.Collector(runners, timeout_s=TIMEOUT_S)
    ppo = PPO("MlpPolicy", VecFrameStack(make_vec_env(helpers.pendulum, 1), 2), n_steps=2)
    sac = SAC("MlpPolicy", VecNormalize(make_vec_env(helpers.pendulum, 1)), device="cpu")
    for model in (ppo, sac):
        start_training(model, 100)
    with pytest.raises(ValueError, match=r"wrapped in VecFrameStack: .*Ray runners step raw envs"):
        collect_rollout(ppo, collector, current_version=0)
    with pytest.raises(ValueError, match=r"wrapped in VecNormalize: .*inside env_fn"):
        collect_replay(sac, collector, n_steps=2)
    assert ppo.num_timesteps == 0 and sac.num_timesteps == 0  # refused before any step
    _kill(server, *runners)


def test_collecting_before_any_publish_is_refused(local_ray: None, helpers: ModuleType) -> None:
    from rlightning_ray.sb3 import collect_rollout

    server, registry = rlightning_ray.start_server(
        partial(SB3BatchPolicy, partial(helpers.counter_ppo, 1, 2)), num_cpus=0.25
    )
    runners = rlightning_ray.start_runners(
        partial(helpers.CounterEnv, 0), server, n_runners=1, envs_per_runner=1, num_cpus=0.25
    )
    learner = helpers.counter_ppo(1, 2)
    start_training(learner, 100)
    collector = rlightning_ray.Collector(runners, timeout_s=TIMEOUT_S)
    with pytest.raises(RuntimeError, match=re.escape("no weights published yet")):
        collect_rollout(learner, collector, current_version=0)
    assert learner.num_timesteps == 0
    _kill(server, registry, *runners)
