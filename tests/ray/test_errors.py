"""Errors reach every runner: weights the server cannot load, a failing env, a wrong setup.

Every ``ray.get`` here has a timeout: a regression (a request left waiting) fails the test
instead of hanging it.
"""

from __future__ import annotations

import re
from functools import partial
from types import ModuleType
from typing import Any

import pytest
import ray
import torch

import rlightning_ray
from rlightning_ray.sb3 import SB3BatchPolicy, collect_replay, policy_weights
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

TIMEOUT_S = 30


def _start(
    helpers: ModuleType, order: list[str] | None, env_fns: list[Any] | None = None
) -> tuple[Any, Any, list[Any]]:
    server, registry = rlightning_ray.start_server(
        partial(SB3BatchPolicy, partial(helpers.counter_ppo, 4)),
        order=order,
        max_batch=256,
        max_wait_us=2000,
        num_cpus=0.25,
    )
    fns = env_fns or [partial(helpers.CounterEnv, i) for i in range(4)]
    runners = rlightning_ray.start_runners(
        fns, server, n_runners=2, envs_per_runner=2, num_cpus=0.25
    )
    return server, registry, runners


def _kill(*actors: Any) -> None:
    for actor in actors:
        ray.kill(actor, no_restart=True)


@pytest.mark.parametrize("order", [["runner-0", "runner-1"], None], ids=["order", "dynamic"])
def test_weights_the_server_cannot_load_fail_every_request_and_keep_the_old_ones(
    local_ray: None, helpers: ModuleType, order: list[str] | None
) -> None:
    server, registry, runners = _start(helpers, order)
    good = policy_weights(helpers.counter_ppo(4))
    bad = {name: torch.zeros(1) for name in good}  # every shape wrong
    rlightning_ray.publish_weights(server, registry, 1, bad)
    refs = [r.sample.remote(2) for r in runners]
    errors = []
    for ref in refs:
        # in the dynamic mode a runner's first request may come after the failed batch
        try:
            ray.get(ref, timeout=TIMEOUT_S)
        except ray.exceptions.RayTaskError as exc:
            errors.append(str(exc))
    assert errors  # the batch that loaded version 1 failed, all of it
    for error in errors:
        assert "could not load the published weights version 1" in error
        assert "size mismatch" in error and "keeps version 0" in error
    assert ray.get(server.info.remote(), timeout=TIMEOUT_S)["version"] == 0
    rlightning_ray.publish_weights(server, registry, 2, good)
    fragments = ray.get([r.sample.remote(2) for r in runners], timeout=TIMEOUT_S)
    assert {a.policy_version for f in fragments for a in f.answers} == {2}
    _kill(server, *runners)


@pytest.mark.parametrize("order", [["runner-0", "runner-1"], None], ids=["order", "dynamic"])
def test_an_env_raising_fails_the_sample_naming_it_and_frees_the_other_runners(
    local_ray: None, helpers: ModuleType, order: list[str] | None
) -> None:
    fns = [partial(helpers.FailingEnv, 0, 2)] + [
        partial(helpers.CounterEnv, i, 100) for i in range(1, 4)
    ]
    server, _, runners = _start(helpers, order, fns)
    collector = rlightning_ray.Collector(runners)
    with pytest.raises(RuntimeError, match=r"runner 'runner-0'.*env 'env-0'.*env 0 broke"):
        collector.sample(3, timeout_s=TIMEOUT_S)
    # runner-1 is free again (its request was failed, not left waiting): it answers a ping
    assert ray.get(runners[1].ping.remote(), timeout=TIMEOUT_S) == "runner-1"
    _kill(server, *runners)


def test_a_collector_refuses_an_order_that_is_not_its_runners_and_repeated_ids(
    local_ray: None, helpers: ModuleType
) -> None:
    server, _, runners = _start(helpers, ["runner-0", "runner-1", "runner-2"])
    with pytest.raises(ValueError, match=re.escape("order entries with no runner ['runner-2']")):
        rlightning_ray.Collector(runners)
    with pytest.raises(ValueError, match=re.escape("distinct runner ids, got ['runner-0']")):
        rlightning_ray.Collector([runners[0], runners[0]])
    _kill(server, *runners)


def test_action_noise_under_dynamic_batching_is_refused_up_front(
    local_ray: None, helpers: ModuleType
) -> None:
    make_model = partial(helpers.make_td3, 4, 0, 20, 0)
    model = make_model()
    start_training(model, 100)
    server, _ = rlightning_ray.start_server(
        partial(SB3BatchPolicy, make_model), max_batch=4, num_cpus=0.25
    )
    runners = rlightning_ray.start_runners(
        helpers.pendulum, server, n_runners=2, envs_per_runner=2, num_cpus=0.25
    )
    collector = rlightning_ray.Collector(runners)
    assert not collector.deterministic
    with pytest.raises(ValueError, match=re.escape("start the server in the deterministic mode")):
        collect_replay(model, collector, n_steps=2)
    assert model.num_timesteps == 0  # refused before any step
    _kill(server, *runners)
