"""The pipelined server mode fills SB3's RolloutBuffer as SB3's own ``collect_rollouts``.

``start_runners(..., pipeline=True)``: each runner splits its envs into two halves that alternate
(one half steps while the other half's request is in the server). The server batches dynamically
(``max_wait_us``), so a batch holds whichever halves asked; with a sampling policy the random
draws would then depend on timing. The policy here acts deterministically on both sides
(``SB3BatchPolicy(..., explore=False)`` on the server; SB3's ``collect_rollouts`` with the
policy's ``forward(..., deterministic=True)``): every action is the mode of the distribution,
whichever batch a row was in, so the buffers must agree column for column: observations,
actions and episode starts exactly (the same envs, seeds and actions), rewards (truncations add
a bootstrapped value), values, log-probs, advantages and returns allclose (batches of other
sizes: other float kernels).

Two runners of 3 envs (halves of 2 and 1: an odd split), CartPole-v1 with a 12-step limit
(truncations bootstrapped), two rollouts with a PPO update in between (the second rollout's
weights are the first update's). The fragments show the pipeline itself: one fragment per half,
each half's next request sent before the other half's answer arrived. And the argument checks.
"""

from __future__ import annotations

from functools import partial
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import ray

import rlightning_ray
from rlightning_ray.pettingzoo import ParallelEnvRunner
from rlightning_ray.sb3 import SB3BatchPolicy, collect_rollout, policy_weights
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

EXACT = ("observations", "actions", "episode_starts")
#: rewards too: a truncated episode's reward holds SB3's bootstrap ``gamma * V(terminal obs)``,
#: a value of the server's batch (another size than SB3's: other float kernels)
CLOSE = ("rewards", "values", "log_probs", "advantages", "returns")
N_RUNNERS, K, N_STEPS, SEED, LIMIT, TOTAL = 2, 3, 16, 3, 12, 10_000


def _deterministic_forward(policy: Any) -> None:
    """Make SB3's ``collect_rollouts`` act with the mode: ``policy(obs)`` -> deterministic."""
    forward = type(policy).forward
    policy.forward = partial(forward, policy, deterministic=True)


def test_pipelined_rollouts_equal_collect_rollouts(local_ray: None, helpers: ModuleType) -> None:
    make_model = partial(helpers.make_ppo, N_RUNNERS * K, N_STEPS, SEED, LIMIT)
    model = make_model()
    start_training(model, TOTAL)
    reference, callback = helpers.learn_reference(make_model, TOTAL)
    _deterministic_forward(reference.policy)
    server, registry = rlightning_ray.start_server(
        partial(SB3BatchPolicy, make_model, explore=False),
        max_batch=N_RUNNERS * K,
        max_wait_us=300,
        num_cpus=0.5,
    )
    runners = rlightning_ray.start_runners(
        partial(helpers.monitored_cartpole, LIMIT),
        server,
        n_runners=N_RUNNERS,
        envs_per_runner=K,
        seed=SEED,
        num_cpus=0.5,
        pipeline=True,
    )
    try:
        collector = rlightning_ray.Collector(runners, timeout_s=120)
        assert collector.pipelined and not collector.deterministic
        assert collector.env_ids == [f"env-{i}" for i in range(N_RUNNERS * K)]
        halves = [["env-0", "env-1"], ["env-2"], ["env-3", "env-4"], ["env-5"]]
        assert [ids for streams in collector.runner_streams for ids in streams] == halves
        for version in range(2):
            helpers.sb3_collect(reference, callback, N_STEPS)
            rlightning_ray.publish_weights(server, registry, version, policy_weights(model))
            fragments = collect_rollout(model, collector, current_version=version)
            ours, theirs = model.rollout_buffer, reference.rollout_buffer
            for name in EXACT:
                np.testing.assert_array_equal(
                    getattr(ours, name), getattr(theirs, name), err_msg=name, strict=True
                )
            for name in CLOSE:
                np.testing.assert_allclose(
                    getattr(ours, name), getattr(theirs, name), rtol=1e-5, atol=1e-6, err_msg=name
                )
            assert ours.episode_starts[1:].any(), "episodes must end inside the rollout"
            assert model.num_timesteps == reference.num_timesteps == (version + 1) * N_STEPS * 6
            assert [ep["r"] for ep in model.ep_info_buffer] == [
                ep["r"] for ep in reference.ep_info_buffer
            ]
            assert [(f.runner_id, f.env_ids) for f in fragments] == [
                (f"runner-{i // 2}", ids) for i, ids in enumerate(halves)
            ]
            for first, second in zip(fragments[::2], fragments[1::2], strict=True):
                _assert_alternating(first, second, version)
            state = np.random.get_state()  # PPO.train shuffles with numpy's global RNG
            model.train()
            np.random.set_state(state)
            reference.train()
        report = collector.latency()
        assert all(s.count == 2 * N_STEPS * N_RUNNERS * 2 for s in report.hops.values())
        info = ray.get(server.info.remote())
        assert sum(info["batch_rows"]) == 2 * N_STEPS * N_RUNNERS * K
    finally:
        for actor in (server, *runners):
            ray.kill(actor)


def _assert_alternating(first: Any, second: Any, version: int) -> None:
    """Each half's next request left before the other half's answer reached the runner.

    A half's answer reached the runner at ``ts_policy_sent_ns + hops_ns[t, 3]`` (the last hop).
    Step order in the runner: answer of half A at t, step A, send A at t + 1, answer of half B
    at t, step B, send B at t + 1. Every answer is of the published version; its rows are the
    half's envs, in order.
    """
    for frag in (first, second):
        assert len(frag.answers) == N_STEPS and frag.hops_ns.shape == (N_STEPS, 4)
        assert all(a.policy_version == version and a.env_ids == frag.env_ids for a in frag.answers)

    def arrived(frag: Any, t: int) -> int:
        return int(frag.answers[t].ts_policy_sent_ns) + int(frag.hops_ns[t, 3])

    for t in range(N_STEPS):
        sent_b = int(second.answers[t].ts_env_sent_ns)
        assert sent_b <= arrived(first, t), f"step {t}: half B asked after half A's answer"
        if t + 1 < N_STEPS:
            sent_a = int(first.answers[t + 1].ts_env_sent_ns)
            assert sent_a <= arrived(second, t), f"step {t}: half A's next request came late"
            assert arrived(first, t) <= sent_a, f"step {t}: half A asked before its answer"


def test_pipeline_arguments_are_checked(local_ray: None, helpers: ModuleType) -> None:
    make_model = partial(helpers.make_ppo, 2, 8, 0)
    env_fn = helpers.cartpole
    with pytest.raises(ValueError, match=r"pipeline=True .* envs_per_runner >= 2, got 1"):
        rlightning_ray.start_runners(
            env_fn, object(), n_runners=2, envs_per_runner=1, pipeline=True
        )
    with pytest.raises(ValueError, match=r"pipeline=True .* local mode"):
        rlightning_ray.start_runners(
            env_fn,
            policy=partial(SB3BatchPolicy, make_model),
            n_runners=1,
            envs_per_runner=2,
            pipeline=True,
        )
    with pytest.raises(
        TypeError,
        match=r"start_runners: pipeline must be a bool, not str; got 'yes'; .*\[rule flag\]",
    ):
        rlightning_ray.start_runners(
            env_fn, object(), n_runners=1, envs_per_runner=2, pipeline="yes"
        )
    with pytest.raises(ValueError, match="runner_class=ParallelEnvRunner"):
        rlightning_ray.start_runners(
            env_fn,
            object(),
            n_runners=1,
            envs_per_runner=2,
            runner_class=ParallelEnvRunner,
            pipeline=True,
        )
    server, _ = rlightning_ray.start_server(
        partial(SB3BatchPolicy, make_model), order=["runner-0"], num_cpus=0.25
    )
    runner: Any = None
    try:
        with pytest.raises(ValueError, match=r"deterministic mode \(order=\['runner-0'\]\)"):
            rlightning_ray.start_runners(
                env_fn, server, n_runners=1, envs_per_runner=2, num_cpus=0.25, pipeline=True
            )
        # a pipelined runner made by hand on that server: the Collector refuses it too
        runner = (
            ray.remote(rlightning_ray.EnvRunner)
            .options(num_cpus=0.25)
            .remote("runner-0", [env_fn, env_fn], server, pipeline=True)
        )
        with pytest.raises(ValueError, match=r"pipelined .* deterministic mode"):
            rlightning_ray.Collector([runner])
    finally:
        for actor in (server, runner):
            if actor is not None:
                ray.kill(actor)
