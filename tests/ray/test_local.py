"""The local mode (runner-local inference) fills SB3's buffers exactly as ``collect_rollouts``.

One runner of ``k`` envs acts with its own replica of the model (``start_runners(...,
policy=partial(SB3BatchPolicy, make_model, seed=RNG_SEED))``); SB3 collects with its
``collect_rollouts`` over ``make_vec_env(k, seed=s)`` from the same model state and RNG state.
Weights (``acting_state``) are published with ``Collector.publish`` between rollouts and the
runner loads them between fragments. Every buffer array must be equal exactly
(``assert_array_equal(strict=True)``): the replica runs the same batched kernels on the same
batch (all ``k`` envs in each call), so not even the floats may differ.

Cases: PPO on CartPole-v1 (12-step limit: truncations bootstrapped), MaskablePPO, TD3 with
Ornstein-Uhlenbeck noise reset per env, DQN's epsilon schedule with warm-up sampling, RecurrentPPO
(LSTM states in the buffer and carried, equal too); N runners
(each runner's columns are SB3 over its own envs and seed). Also: weights load between fragments
only (a publish while a fragment is sampled included), a killed local runner restarts with the
newest weights, and the two modes are exclusive.
"""

from __future__ import annotations

import re
import threading
import time
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import ray
import torch
from stable_baselines3.common.utils import set_random_seed

import rlightning_ray
from rlightning_ray.sb3 import SB3BatchPolicy, acting_state, collect_replay, collect_rollout
from rlightning_sb3 import SB3PolicyAdapter, start_training

ROLLOUT_FIELDS = ("observations", "actions", "rewards", "episode_starts", "values", "log_probs")
ROLLOUT_FIELDS += ("advantages", "returns")
RECURRENT_FIELDS = ("hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf")
REPLAY_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
ROLLOUTS, N_STEPS, TRAIN_FREQ, RNG_SEED = 2, 16, 4, 1234


def _run(
    helpers: ModuleType, make_model: Any, env_fn: Any, k: int, seed: int, on_policy: bool
) -> Any:
    """Collect ROLLOUTS rollouts both ways and compare every buffer array after each."""
    steps = N_STEPS if on_policy else TRAIN_FREQ
    total = ROLLOUTS * steps * k
    model = make_model()  # building a model seeds the global RNGs: build both first
    start_training(model, total)
    reference, callback = helpers.learn_reference(make_model, total)
    # The runner's replica draws in its process from RNGs seeded RNG_SEED (after its model is
    # built); SB3 draws in this one, which both learners' train() draw from too.
    set_random_seed(RNG_SEED)
    acting = (np.random.get_state(), torch.get_rng_state())
    training = acting
    runners = rlightning_ray.start_runners(
        env_fn,
        n_runners=1,
        envs_per_runner=k,
        seed=seed,
        num_cpus=0.25,
        policy=partial(SB3BatchPolicy, make_model, seed=RNG_SEED),
    )
    collector = rlightning_ray.Collector(runners, timeout_s=120)
    assert collector.local and not collector.deterministic
    try:
        for rollout in range(ROLLOUTS):
            np.random.set_state(acting[0])
            torch.set_rng_state(acting[1])
            helpers.sb3_collect(reference, callback, N_STEPS)
            acting = (np.random.get_state(), torch.get_rng_state())
            version = collector.publish(rollout + 1, acting_state(model))
            if on_policy:
                fragments = collect_rollout(model, collector, current_version=version)
                fields = ROLLOUT_FIELDS
                ours, theirs = model.rollout_buffer, reference.rollout_buffer
            else:
                done, fragments = collect_replay(model, collector, current_version=version)
                assert done
                fields = REPLAY_FIELDS
                ours, theirs = model.replay_buffer, reference.replay_buffer
                assert ours.pos == theirs.pos
                assert model._episode_num == reference._episode_num
                assert getattr(model, "exploration_rate", None) == getattr(
                    reference, "exploration_rate", None
                )
            if hasattr(theirs, "action_masks"):  # MaskablePPO's buffer
                fields = (*fields, "action_masks")
            if hasattr(theirs, "hidden_states_pi"):  # RecurrentPPO's buffer, and its carried states
                fields = (*fields, *RECURRENT_FIELDS)
                for mine, sb3 in zip(
                    model._last_lstm_states, reference._last_lstm_states, strict=True
                ):
                    for a, b in zip(mine, sb3, strict=True):
                        np.testing.assert_array_equal(a.numpy(), b.numpy())
            for name in fields:
                np.testing.assert_array_equal(
                    getattr(ours, name), getattr(theirs, name), err_msg=name, strict=True
                )
            assert model.num_timesteps == reference.num_timesteps == (rollout + 1) * steps * k
            # the same fragments as the server mode's: versioned and stamped answers
            assert all(a.policy_version == version for a in fragments[0].answers)
            assert fragments[0].hops_ns.shape == (steps, len(rlightning_ray.HOPS))
            assert (fragments[0].hops_ns >= 0).all()
            for learner in (model, reference):
                np.random.set_state(training[0])
                torch.set_rng_state(training[1])
                if on_policy:
                    learner.train()
                elif learner.num_timesteps > learner.learning_starts:
                    learner.train(batch_size=learner.batch_size, gradient_steps=1)
            training = (np.random.get_state(), torch.get_rng_state())
        buffer = reference.rollout_buffer if on_policy else reference.replay_buffer
        ends = buffer.episode_starts[1:] if on_policy else buffer.dones[: buffer.pos]
        assert ends.any(), "episodes must end inside the run"
        described = ray.get(runners[0].describe.remote())
        assert described["mode"] == "local" and described["server"] is None
        assert described["policy_version"] == ROLLOUTS
        return collector
    finally:
        for runner in runners:
            ray.kill(runner)


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_local_ppo_rollouts_equal_collect_rollouts(local_ray: None, helpers: ModuleType) -> None:
    k, seed, limit = 4, 3, 12
    make_model = partial(helpers.make_ppo, k, N_STEPS, seed, limit)
    collector = _run(helpers, make_model, partial(helpers.cartpole, limit), k, seed, on_policy=True)
    report = collector.latency()
    assert all(s.count == ROLLOUTS * N_STEPS for s in report.hops.values())


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_local_recurrent_ppo_rollouts_equal_collect_rollouts(
    local_ray: None, helpers: ModuleType
) -> None:
    """RecurrentPPO: the replica carries each env's LSTM state; buffer and states are SB3's."""
    k, seed, limit = 2, 3, 6
    make_model = partial(helpers.make_recurrent_ppo, k, N_STEPS, seed, limit)
    _run(helpers, make_model, partial(helpers.cartpole, limit), k, seed, on_policy=True)


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_local_maskable_ppo_rollouts_equal_collect_rollouts(
    local_ray: None, helpers: ModuleType, envs: ModuleType
) -> None:
    """MaskablePPO: the runner reads its envs' masks, its replica masks, the buffer stores them."""
    k, seed = 2, 7
    config = {"act": "discrete", "limit": 5, "p_end": 0.15, "masks": True}
    make_model = partial(helpers.fuzz_model, "maskable", config, k, seed, n_steps=N_STEPS)
    _run(helpers, make_model, partial(envs.fuzz_env, **config), k, seed, on_policy=True)


@pytest.mark.parametrize(
    ("algo", "noise", "learning_starts"),
    [("td3", "ou", 8), ("dqn", None, 8)],
    ids=["td3-ou-noise", "dqn-epsilon"],
)
@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_local_off_policy_steps_equal_collect_rollouts(
    local_ray: None,
    helpers: ModuleType,
    envs: ModuleType,
    algo: str,
    noise: str | None,
    learning_starts: int,
) -> None:
    k, seed = 2, 11
    config = {"act": "box" if algo == "td3" else "discrete", "limit": 5, "p_end": 0.15}
    make_model = partial(
        helpers.fuzz_model,
        algo,
        config,
        k,
        seed,
        learning_starts=learning_starts,
        noise=noise,
        train_freq=TRAIN_FREQ,
    )
    _run(helpers, make_model, partial(envs.fuzz_env, **config), k, seed, on_policy=False)


def test_local_runners_load_weights_between_fragments_only(
    local_ray: None, envs: ModuleType
) -> None:
    """Every answer of one fragment comes from one version: the newest published before it."""
    runners = rlightning_ray.start_runners(
        partial(envs.CounterEnv, 0),
        n_runners=2,
        envs_per_runner=2,
        num_cpus=0.25,
        policy=partial(envs.EchoPolicy),
    )
    collector = rlightning_ray.Collector(runners)
    try:
        first = collector.sample(3, current_version=0)
        assert [a.policy_version for f in first for a in f.answers] == [0] * 6
        collector.publish(5, {"w": 1})
        later = collector.sample(3, current_version=5)
        assert [a.policy_version for f in later for a in f.answers] == [5] * 6
        with pytest.raises(ValueError, match="not newer than the published 5"):
            collector.publish(5, {"w": 2})
    finally:
        for runner in runners:
            ray.kill(runner)


def test_weights_published_while_runners_sample_wait_for_the_next_fragment(
    local_ray: None, envs: ModuleType
) -> None:
    """A publish while a fragment is sampled: that fragment has one version, the next the new."""
    runners = rlightning_ray.start_runners(
        partial(envs.CounterEnv, 0, sleep_s=0.02),
        n_runners=1,
        envs_per_runner=2,
        num_cpus=0.25,
        policy=envs.EchoPolicy,
    )
    collector = rlightning_ray.Collector(runners)
    try:
        pending = runners[0].sample.remote(20)  # about 0.8 s of env steps
        time.sleep(0.3)
        collector.publish(1, {"w": 1})
        during = ray.get(pending)
        assert len({a.policy_version for a in during.answers}) == 1
        after = collector.sample(2, current_version=1)
        assert [a.policy_version for a in after[0].answers] == [1, 1]
    finally:
        for runner in runners:
            ray.kill(runner)


def test_the_collector_hands_its_runners_the_weights_with_no_registry_read(
    local_ray: None, envs: ModuleType
) -> None:
    """Its runners load what it published from the sample call: even with the registry gone."""
    runners = rlightning_ray.start_runners(
        partial(envs.CounterEnv, 0),
        n_runners=2,
        envs_per_runner=1,
        num_cpus=0.25,
        policy=envs.EchoPolicy,
    )
    collector = rlightning_ray.Collector(runners)
    try:
        collector.publish(2, {"w": 2})
        registry = ray.get(runners[0].describe.remote())["registry"]
        ray.kill(registry, no_restart=True)  # a registry read would fail from here on
        fragments = collector.sample(3, current_version=2)
        assert {a.policy_version for f in fragments for a in f.answers} == {2}
        with pytest.raises(Exception, match=r"(?i)actor"):  # reading it directly does fail
            ray.get(runners[0].sample.remote(1))
    finally:
        for runner in runners:
            ray.kill(runner)


def test_a_newer_collector_takes_the_runners_over_and_the_older_is_refused(
    local_ray: None, envs: ModuleType
) -> None:
    """Only the newest Collector over the runners publishes and samples: no stale weights."""
    runners = rlightning_ray.start_runners(
        partial(envs.CounterEnv, 0),
        n_runners=2,
        envs_per_runner=1,
        num_cpus=0.25,
        policy=envs.EchoPolicy,
    )
    older = rlightning_ray.Collector(runners)
    try:
        older.publish(1, {"w": 1})
        newer = rlightning_ray.Collector(runners)  # claims the registry: starts from version 1
        first = newer.sample(2, current_version=1)
        assert {a.policy_version for f in first for a in f.answers} == {1}
        with pytest.raises(ValueError, match="claimed by the newest Collector"):
            older.publish(2, {"w": 2})
        with pytest.raises(RuntimeError, match="serves the newest Collector built over it"):
            older.sample(2)
        newer.publish(3, {"w": 3})
        later = newer.sample(2, current_version=3)
        assert {a.policy_version for f in later for a in f.answers} == {3}
        # a runner sampled without a Collector reads the registry (the newest publish, 3)
        direct = ray.get(runners[1].sample.remote(1))
        assert [a.policy_version for a in direct.answers] == [3]
        registry = ray.get(runners[0].describe.remote())["registry"]
        refused = registry.publish.remote(4, [ray.put({"w": 4})])
        with pytest.raises(ValueError, match="publish from outside a Collector"):
            ray.get(refused)
    finally:
        for runner in runners:
            ray.kill(runner)


def test_a_local_runner_killed_mid_sample_restarts_with_the_newest_weights(
    local_ray: None, envs: ModuleType
) -> None:
    """Ray re-creates the runner; its new replica loads the newest publish before acting."""
    runners = rlightning_ray.start_runners(
        partial(envs.CounterEnv, 0, length=100, sleep_s=0.02),
        n_runners=2,
        envs_per_runner=1,
        num_cpus=0.25,
        policy=envs.EchoPolicy,
    )
    collector = rlightning_ray.Collector(runners)
    try:
        collector.publish(3, {"w": 3})
        collector.sample(4, current_version=3)  # both runners' episodes are under way
        timer = threading.Timer(0.3, lambda: ray.kill(runners[1], no_restart=False))
        timer.start()
        fragments = collector.sample(20, current_version=3)
        timer.join()
        assert [f.restarted for f in fragments] == [False, True]
        assert {a.policy_version for f in fragments for a in f.answers} == {3}
        assert fragments[0].observations[0][0, 1] == 4  # runner-0 went on
        assert fragments[1].observations[0][0, 1] == 0  # runner-1: a fresh episode
        assert ray.get(runners[1].describe.remote())["policy_version"] == 3
    finally:
        for runner in runners:
            ray.kill(runner)


def test_local_and_server_modes_are_one_or_the_other(local_ray: None, envs: ModuleType) -> None:
    with pytest.raises(ValueError, match="exactly one"):
        rlightning_ray.start_runners(
            partial(envs.CounterEnv, 0), n_runners=1, envs_per_runner=1, num_cpus=0.25
        )
    with pytest.raises(ValueError, match="2 factories for 1 runners"):
        rlightning_ray.start_runners(
            partial(envs.CounterEnv, 0),
            n_runners=1,
            envs_per_runner=1,
            num_cpus=0.25,
            policy=[envs.EchoPolicy, envs.EchoPolicy],
        )


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_each_local_runner_is_sb3_over_its_own_envs(local_ray: None, helpers: ModuleType) -> None:
    """N runners: runner r's columns are SB3's collect_rollouts over its envs, with its seed.

    Runner ``r`` hosts envs seeded ``seed + r * k + i`` (``start_runners``' rule) and acts with a
    replica seeded ``RNG_SEED + r`` (one factory per runner); SB3's reference ``r`` collects over
    ``make_vec_env(k, seed=seed + r * k)`` from the same weights and RNG seed.
    """
    n_runners, k, seed, limit = 2, 2, 5, 12
    model = helpers.make_ppo(n_runners * k, N_STEPS, seed, limit)
    start_training(model, N_STEPS * n_runners * k)
    weights = model.policy.state_dict()
    references = []
    for r in range(n_runners):
        reference = helpers.make_ppo(k, N_STEPS, seed + r * k, limit)
        reference.policy.load_state_dict(weights)
        _, callback = reference._setup_learn(N_STEPS * k, callback=None)
        set_random_seed(RNG_SEED + r)
        assert reference.collect_rollouts(
            reference.get_env(), callback, reference.rollout_buffer, N_STEPS
        )
        references.append(reference)
    runners = rlightning_ray.start_runners(
        partial(helpers.cartpole, limit),
        n_runners=n_runners,
        envs_per_runner=k,
        seed=seed,
        num_cpus=0.25,
        policy=[
            partial(
                SB3BatchPolicy, partial(helpers.make_ppo, k, N_STEPS, 0, limit), seed=RNG_SEED + r
            )
            for r in range(n_runners)
        ],
    )
    collector = rlightning_ray.Collector(runners, timeout_s=120)
    try:
        collector.publish(1, acting_state(model))
        collect_rollout(model, collector, current_version=1)
        for r, reference in enumerate(references):
            columns = slice(r * k, (r + 1) * k)
            for name in ROLLOUT_FIELDS:
                ours = getattr(model.rollout_buffer, name)[:, columns]
                theirs = getattr(reference.rollout_buffer, name)
                if name in ("advantages", "returns"):
                    # bootstrapped from the learner's values of the last observations, one
                    # forward pass over all 4 envs against SB3's over 2: other batched kernels
                    np.testing.assert_allclose(ours, theirs, rtol=1e-6, err_msg=f"{r} {name}")
                else:  # acted by the runner's replica over its 2 envs, as SB3 acts
                    np.testing.assert_array_equal(
                        ours, theirs, err_msg=f"runner {r} {name}", strict=True
                    )
        assert model.rollout_buffer.episode_starts[1:].any()
    finally:
        for runner in runners:
            ray.kill(runner)


def test_local_runners_refuse_to_act_before_a_publish_and_load_version_0(
    local_ray: None, helpers: ModuleType
) -> None:
    """The factory's weights are not the learner's: no acting before a publish, even of 0."""
    model = helpers.make_ppo(1, 4, 0)
    start_training(model, 100)
    runners = rlightning_ray.start_runners(
        helpers.cartpole,
        n_runners=1,
        envs_per_runner=1,
        seed=0,
        num_cpus=0.25,
        policy=partial(SB3BatchPolicy, partial(helpers.make_ppo, 1, 4, 1)),
    )
    collector = rlightning_ray.Collector(runners, timeout_s=60)
    with pytest.raises(RuntimeError, match=re.escape("no weights published yet")):
        collect_rollout(model, collector, current_version=0)
    collector.publish(0, acting_state(model))
    collect_rollout(model, collector, current_version=0)
    values = SB3PolicyAdapter(model).predict_values(model.rollout_buffer.observations[:, 0])
    np.testing.assert_allclose(values, model.rollout_buffer.values[:, 0], atol=1e-5)
    for runner in runners:
        ray.kill(runner)
