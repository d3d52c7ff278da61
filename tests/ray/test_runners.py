"""Runners and the batching server on a local cluster: routing, batches, stamps, refusals."""

from __future__ import annotations

import re
import time
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import ray
import torch
from stable_baselines3.common.callbacks import BaseCallback

import rlightning_ray
from rlightning import MultiAgentPolicyResponse, PolicyResponse
from rlightning_ray.pettingzoo import ParallelEnvRunner
from rlightning_ray.sb3 import SB3BatchPolicy, collect_rollout, policy_weights
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")


def _counter_fns(helpers: ModuleType, n: int, **kwargs: Any) -> list[Any]:
    return [partial(helpers.CounterEnv, i, **kwargs) for i in range(n)]


def test_dynamic_batches_route_each_row_to_its_env(local_ray: None, helpers: ModuleType) -> None:
    server, registry = rlightning_ray.start_server(
        helpers.EchoPolicy, max_batch=6, max_wait_us=200_000, num_cpus=0.25
    )
    runners = rlightning_ray.start_runners(
        _counter_fns(helpers, 6), server, n_runners=2, envs_per_runner=3, num_cpus=0.25
    )
    rlightning_ray.publish_weights(server, registry, 1, {"w": np.ones(3)})
    collector = rlightning_ray.Collector(runners)
    fragments = collector.sample(12, current_version=1)
    assert collector.env_ids == [f"env-{i}" for i in range(6)]
    for r, frag in enumerate(fragments):
        assert frag.runner_id == f"runner-{r}"
        assert frag.rewards.shape == (12, 3) and frag.rewards.dtype == np.float32
        assert frag.dones.dtype == np.bool_
        for t, (obs, answer) in enumerate(zip(frag.observations, frag.answers, strict=True)):
            assert obs.dtype == np.float32 and obs.shape == (3, 2)
            assert answer.env_ids == frag.env_ids
            assert answer.policy_version == 1
            np.testing.assert_array_equal(answer.obs_seen, obs)  # each runner got its own rows
            np.testing.assert_array_equal(obs[:, 0], [3 * r, 3 * r + 1, 3 * r + 2])
            assert obs[0, 1] == t % 5  # CounterEnv: episodes of 5 steps, reset at once
        assert (frag.hops_ns >= 0).all()
        ends = frag.dones[:, 0]
        assert ends.sum() == 2
        terminal = [frag.infos[t][0]["terminal_observation"] for t in np.flatnonzero(ends)]
        assert [o[1] for o in terminal] == [5, 5]
    batches = ray.get(server.info.remote())["batch_rows"]
    assert sum(batches) == 12 * 6
    assert max(batches) == 6  # the two runners' requests shared forward passes
    report = collector.latency()
    assert report.hops["inference"].count == 24
    assert "| queue |" in report.table()


def test_an_answer_for_another_env_is_refused(local_ray: None, helpers: ModuleType) -> None:
    server, _ = rlightning_ray.start_server(helpers.SwappingPolicy, max_batch=2, num_cpus=0.25)
    (runner,) = rlightning_ray.start_runners(
        _counter_fns(helpers, 2), server, n_runners=1, envs_per_runner=2, num_cpus=0.25
    )
    message = (
        "runner 'runner-0' got an answer for env 'env-1' in the row of its env 'env-0' (row 0); "
        "answers: ['env-1', 'env-0'], envs: ['env-0', 'env-1']"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        ray.get(runner.sample.remote(3))


def test_a_stale_policy_version_is_refused(local_ray: None, helpers: ModuleType) -> None:
    server, registry = rlightning_ray.start_server(helpers.EchoPolicy, max_batch=2, num_cpus=0.25)
    (runner,) = rlightning_ray.start_runners(
        _counter_fns(helpers, 2), server, n_runners=1, envs_per_runner=2, num_cpus=0.25
    )
    rlightning_ray.publish_weights(server, registry, 3, {"w": 1})
    assert ray.get(runner.sample.remote(2, current_version=4, max_staleness=1)).answers
    message = (
        "runner 'runner-0' got an answer from policy version 3 for envs ['env-0', 'env-1'], but "
        "the newest is 5 and at most 1 version(s) of staleness is allowed (the oldest accepted "
        "is 4)"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        ray.get(runner.sample.remote(2, current_version=5, max_staleness=1))
    with pytest.raises(ValueError, match=re.escape("weights version 2 is older than the")):
        rlightning_ray.publish_weights(server, None, 2, {"w": 0})


def test_a_runner_missing_from_the_order_is_refused(local_ray: None, helpers: ModuleType) -> None:
    # env ids where runner ids belong: the request could never join a batch; refused, not hung
    server, _ = rlightning_ray.start_server(
        helpers.EchoPolicy, order=["env-0", "env-1"], num_cpus=0.25
    )
    (runner,) = rlightning_ray.start_runners(
        _counter_fns(helpers, 2), server, n_runners=1, envs_per_runner=2, num_cpus=0.25
    )
    message = (
        "runner 'runner-0' (envs ['env-0', 'env-1']) is not in the server's order "
        "['env-0', 'env-1']: in the deterministic mode a batch is formed only from the runners "
        "named there"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        ray.get(runner.sample.remote(1), timeout=120)


def test_runners_that_cannot_be_placed_are_warned_about(
    local_ray: None, helpers: ModuleType
) -> None:
    server, _ = rlightning_ray.start_server(helpers.EchoPolicy, num_cpus=0.25)
    with pytest.warns(rlightning_ray.UnschedulableWarning, match=r"need 200 CPUs, but the"):
        runners = rlightning_ray.start_runners(
            _counter_fns(helpers, 2), server, n_runners=2, envs_per_runner=1, num_cpus=100
        )
    for runner in runners:
        ray.kill(runner)


def test_check_answer_refuses_missing_rows_and_versions() -> None:
    answer = PolicyResponse(None, env_ids=["e0"], action=[0])
    with pytest.raises(ValueError, match=re.escape("got answers for 1 envs ['e0'], but it has 2")):
        rlightning_ray.check_answer(answer, ["e0", "e1"], runner_id="r")
    with pytest.raises(ValueError, match=re.escape("without an int policy_version (got None)")):
        rlightning_ray.check_answer(answer, ["e0"], runner_id="r")


class _CountSteps(BaseCallback):
    """Counts ``on_step`` calls and keeps the ``new_obs`` each one saw."""

    def __init__(self) -> None:
        super().__init__()
        self.new_obs: list[np.ndarray] = []

    def _on_step(self) -> bool:
        self.new_obs.append(np.array(self.locals["new_obs"]))
        return True


def test_sb3_rollouts_with_dynamic_batches_run_the_training_callback(
    local_ray: None, helpers: ModuleType
) -> None:
    """Not deterministic: batches form as requests arrive; the buffer is complete and routed.

    As ``OnPolicyAlgorithm.collect_rollouts``: one ``on_step`` per step (of all n_envs), with
    ``new_obs``.
    """
    make_model = partial(helpers.counter_ppo, 4)
    model = make_model()
    callback = _CountSteps()
    start_training(model, 1000, callback=callback)
    server, registry = rlightning_ray.start_server(
        partial(SB3BatchPolicy, make_model), max_batch=4, max_wait_us=2000, num_cpus=0.25
    )
    runners = rlightning_ray.start_runners(
        _counter_fns(helpers, 4), server, n_runners=2, envs_per_runner=2, num_cpus=0.25
    )
    collector = rlightning_ray.Collector(runners)
    for version in range(2):
        rlightning_ray.publish_weights(server, registry, version, policy_weights(model))
        fragments = collect_rollout(model, collector, current_version=version)
        buffer = model.rollout_buffer
        assert buffer.full
        np.testing.assert_array_equal(buffer.observations[:, :, 0], np.tile(np.arange(4), (8, 1)))
        answer = fragments[1].answers[0]
        assert answer.value.dtype == torch.float32 and answer.action.dtype == np.int64
        if version == 0:
            assert callback.n_calls == model.n_steps == 8 and model.num_timesteps == 8 * 4
            # new_obs of step t is the observation of step t + 1 (CounterEnv's episodes: 5 steps)
            np.testing.assert_array_equal(np.stack(callback.new_obs[:-1]), buffer.observations[1:])
        model.train()
    assert model.num_timesteps == 2 * 8 * 4 and callback.n_calls == 16
    for actor in [server, *runners]:
        ray.kill(actor, no_restart=True)


def test_the_server_refuses_episode_starts_that_are_not_booleans(
    local_ray: None, helpers: ModuleType
) -> None:
    # np.asarray([2, 0.5], bool) would read both as True: the server reads them as_bools does
    server, _ = rlightning_ray.start_server(helpers.EchoPolicy, max_batch=2, num_cpus=0.25)
    obs = np.zeros((2, 2), np.float32)
    ok = ray.get(server.act.remote("r", obs, ["e0", "e1"], [1, 0], time.time_ns()), timeout=60)
    assert ok.env_ids == ["e0", "e1"]
    for bad in ([2, 0], [0.5, 1.0]):
        with pytest.raises(ValueError, match=r"episode_start must hold only booleans"):
            ray.get(server.act.remote("r", obs, ["e0", "e1"], bad, time.time_ns()), timeout=60)
    ray.kill(server)


def _answer(env_id: str, sent: int) -> MultiAgentPolicyResponse:
    response = MultiAgentPolicyResponse(env_id, action={"a0": 0})
    response.ts_env_sent_ns = sent
    response.ts_policy_recv_ns, response.ts_infer_start_ns = sent + 1, sent + 2
    response.ts_policy_sent_ns = sent + 3
    return response


def test_the_runner_checks_the_echoed_stamp_of_every_env_of_an_answer() -> None:
    # one rule for every group: a multi-agent answer (one response per env) is checked env by env
    runner = ParallelEnvRunner.__new__(ParallelEnvRunner)
    runner.runner_id, runner.env_ids = "r", ["e0", "e1"]
    sent = time.time_ns()
    hops = runner._hops([_answer("e0", sent), _answer("e1", sent)], sent, sent + 5)
    assert list(hops) == [1, 1, 1, 2]
    with pytest.raises(ValueError, match=re.escape("the stamp did not cross intact")):
        runner._hops([_answer("e0", sent), _answer("e1", sent - 7)], sent, sent + 5)
