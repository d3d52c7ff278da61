"""Two nodes on this machine (``ray.cluster_utils.Cluster``: separate raylets and object stores).

The server sits on the head node (custom resource ``policy_node``), the runners on the second
node (``env_node``): every observation and answer crosses object stores twice (runner -> server
-> runner) and the fragments a third time (runner -> driver on the head). The test recomputes
each row's value and log-probability on the driver from the fragment's observation and action
and checks dtypes, env ids and stamps.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from types import ModuleType

import numpy as np
import pytest
import ray
import torch
from ray.cluster_utils import Cluster

import rlightning_ray
from rlightning.rules import check_stamp
from rlightning_ray.sb3 import SB3BatchPolicy, collect_rollout, policy_weights
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
            "resources": {"policy_node": 1},
            "include_dashboard": False,
            "object_store_memory": 100 * 1024 * 1024,
        },
    )
    cluster.add_node(num_cpus=1, resources={"env_node": 2}, object_store_memory=100 * 1024 * 1024)
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
