"""Two nodes on this machine (``ray.cluster_utils.Cluster``: separate raylets and object stores).

The server sits on the head node (custom resource ``policy_node``), the runners on the second
node (``env_node``): every observation and answer crosses object stores twice (runner -> server
-> runner) and the fragments a third time (runner -> driver on the head). The test recomputes
each row's value and log-probability on the driver from the fragment's observation and action
and checks dtypes, env ids and stamps.

The local mode (each runner acts with its own replica): two runners, one per node (each node has
one ``runner_slot``), fill the learner's rollout buffer exactly as the same two runners on one
node do, from the same seeds: weights come from the registry on the head, the envs and replicas
draw in their own processes, and nothing depends on where those are.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import ray
import torch
from ray.cluster_utils import Cluster

import rlightning_ray
from rlightning.rules import check_stamp
from rlightning_ray.sb3 import SB3BatchPolicy, acting_state, collect_rollout, policy_weights
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")


@pytest.fixture(scope="module")
def two_nodes(ray_session: None) -> Iterator[Cluster]:
    if ray.is_initialized():  # the session's local cluster: this module needs another shape
        ray.shutdown()
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 1,
            "resources": {"policy_node": 1, "runner_slot": 1},
            "include_dashboard": False,
            "object_store_memory": 100 * 1024 * 1024,
        },
    )
    cluster.add_node(
        num_cpus=1,
        resources={"env_node": 2, "runner_slot": 1},
        object_store_memory=100 * 1024 * 1024,
    )
    ray.init(address=cluster.address, log_to_driver=False)
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_answers_cross_object_stores_intact(two_nodes: Cluster, helpers: ModuleType) -> None:
    make_model = partial(helpers.make_ppo, 4, 8, 0, 20)
    model = make_model()
    start_training(model, 1000)
    server, registry = rlightning_ray.start_server(
        partial(SB3BatchPolicy, make_model),
        max_batch=4,
        max_wait_us=5000,
        num_cpus=0.5,
        resources={"policy_node": 1},
    )
    runners = rlightning_ray.start_runners(
        partial(helpers.monitored_cartpole, 20),
        server,
        n_runners=2,
        envs_per_runner=2,
        seed=0,
        num_cpus=0.25,
        resources={"env_node": 1},
    )
    server_node = ray.get(server.info.remote())["node_id"]
    runner_nodes = {d["node_id"] for d in ray.get([r.describe.remote() for r in runners])}
    assert len(runner_nodes) == 1 and server_node not in runner_nodes
    assert ray.get_runtime_context().get_node_id() == server_node  # the driver is on the head

    rlightning_ray.publish_weights(server, registry, 0, policy_weights(model))
    collector = rlightning_ray.Collector(runners)
    fragments = collect_rollout(model, collector, current_version=0)
    for frag in fragments:
        for obs, answer in zip(frag.observations, frag.answers, strict=True):
            assert answer.env_ids == frag.env_ids and answer.policy_version == 0
            assert answer.action.dtype == np.int64 and answer.action.shape == (2,)
            assert answer.buffer_action.dtype == np.int64 and answer.buffer_action.shape == (2, 1)
            assert answer.value.dtype == torch.float32 and answer.log_prob.dtype == torch.float32
            assert obs.dtype == np.float32 and obs.shape == (2, 4)
            stamps = [
                check_stamp(name, getattr(answer, name))
                for name in (
                    "ts_env_sent_ns",
                    "ts_policy_recv_ns",
                    "ts_infer_start_ns",
                    "ts_policy_sent_ns",
                )
            ]
            assert stamps == sorted(stamps)  # one machine, one clock: the hops are in order
            with torch.no_grad():
                values, log_prob, _ = model.policy.evaluate_actions(
                    torch.as_tensor(obs), torch.as_tensor(answer.buffer_action[:, 0])
                )
            # The server computed these in a batch of 4 rows, the driver in one of 2: float32
            # kernels may round differently by batch size, hence the tolerance.
            torch.testing.assert_close(answer.value, values.flatten(), rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(answer.log_prob, log_prob, rtol=1e-5, atol=1e-6)
    assert model.rollout_buffer.full
    report = collector.latency()
    assert report.hops["env_to_server"].count == 2 * 8


ROLLOUT_FIELDS = ("observations", "actions", "rewards", "episode_starts", "values", "log_probs")
ROLLOUT_FIELDS += ("advantages", "returns")
N_RUNNERS, K, N_STEPS, SEED, RNG_SEED, LIMIT = 2, 2, 8, 5, 1234, 6


def _local_rollout(helpers: ModuleType, resources: dict[str, float]) -> tuple[Any, set[str]]:
    """One local-mode rollout of N_RUNNERS x K envs placed by ``resources``: (model, nodes)."""
    model = helpers.make_ppo(N_RUNNERS * K, N_STEPS, SEED, LIMIT)
    start_training(model, N_STEPS * N_RUNNERS * K)
    runners = rlightning_ray.start_runners(
        partial(helpers.cartpole, LIMIT),
        n_runners=N_RUNNERS,
        envs_per_runner=K,
        seed=SEED,
        num_cpus=0.25,
        resources=resources,
        policy=[  # one replica seed per runner, as tests/ray/test_local.py
            partial(
                SB3BatchPolicy, partial(helpers.make_ppo, K, N_STEPS, 0, LIMIT), seed=RNG_SEED + r
            )
            for r in range(N_RUNNERS)
        ],
    )
    try:
        nodes = {d["node_id"] for d in ray.get([r.describe.remote() for r in runners])}
        collector = rlightning_ray.Collector(runners, timeout_s=120)
        assert collector.local
        collector.publish(1, acting_state(model))
        collect_rollout(model, collector, current_version=1)
    finally:
        for runner in runners:
            ray.kill(runner)
    return model, nodes


def test_local_runners_on_two_nodes_fill_the_buffer_as_on_one(
    two_nodes: Cluster, helpers: ModuleType
) -> None:
    spread, spread_nodes = _local_rollout(helpers, {"runner_slot": 1})  # one runner per node
    assert len(spread_nodes) == 2
    together, together_nodes = _local_rollout(helpers, {"env_node": 1})  # both on one node
    assert len(together_nodes) == 1
    assert spread.rollout_buffer.full and together.rollout_buffer.full
    for name in ROLLOUT_FIELDS:
        np.testing.assert_array_equal(
            getattr(spread.rollout_buffer, name),
            getattr(together.rollout_buffer, name),
            err_msg=name,
            strict=True,
        )
    assert spread.rollout_buffer.episode_starts[1:].any()  # episodes ended inside the rollout
