"""A differential fuzzer: Ray's deterministic mode against SB3's own ``collect_rollouts``.

Each example draws an algorithm (PPO, MaskablePPO, TD3 or SAC with or without action noise,
DQN's epsilon schedule), an observation space (Box or Dict), an action space, an env quirk
(arrays written in place by ``step`` and ``reset``; draws from the env's own action space),
a time limit and a termination probability, the runner layout (1 or 2 runners of 1 or 2 envs)
and the seeds. SB3 collects with its ``collect_rollouts`` over ``make_vec_env(fuzz_env, n_envs,
seed=s)`` (a model of seed ``s``, so the VecEnv's seeds stay ``s + i``); Ray collects from
``start_runners(..., seed=s)`` through a server in the deterministic mode (``order=``); both
learners train between rollouts on the same random draws. Every buffer array must be equal
exactly (``assert_array_equal(strict=True)``): both sides run the same batched kernels on the
same batches, so not even the floats may differ.

Not drawn: an env that samples its own action space under an off-policy model that samples the
model's (warm-up before ``learning_starts``, DQN's epsilon). SB3's model shares env 0's
``action_space`` object (``VecEnv.action_space`` is ``envs[0].action_space``), so there the two
draw from one generator; across processes they cannot (docs/ray.md, "The deterministic mode").

Cost: the server of each runner layout is started once and rebuilds its model for each example
(``ray_helpers.RebuildablePolicy``); each example starts its own runners (cheap: their envs,
``ray_envs``, import neither torch nor SB3).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from types import ModuleType
from typing import Any

import numpy as np
import pytest
import ray
import torch
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from stable_baselines3.common.utils import set_random_seed

import rlightning_ray
from rlightning_ray.sb3 import acting_state, collect_replay, collect_rollout
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

ON_POLICY = ("ppo", "maskable")
ROLLOUT_FIELDS = ("observations", "actions", "rewards", "episode_starts", "values", "log_probs")
ROLLOUT_FIELDS += ("advantages", "returns")
REPLAY_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")
ROLLOUTS, N_STEPS, TRAIN_FREQ, RNG_SEED = 3, 8, 4, 1234


@dataclass(frozen=True)
class Case:
    """One fuzzer example (see the module docstring)."""

    algo: str
    obs: str = "box"
    act: str = "discrete"
    reuse: bool = False
    sample_space: bool = False
    noise: str | None = None
    learning_starts: int = 0
    n_runners: int = 2
    k: int = 2
    limit: int = 5
    p_end: float = 0.15
    seed: int = 0

    @property
    def env_config(self) -> dict[str, Any]:
        return {
            "obs": self.obs,
            "act": self.act,
            "limit": self.limit,
            "p_end": self.p_end,
            "reuse": self.reuse,
            "sample_space": self.sample_space,
            "masks": self.algo == "maskable",
        }


@st.composite
def cases(draw: st.DrawFn) -> Case:
    algo = draw(st.sampled_from(["ppo", "maskable", "td3", "sac", "dqn"]))
    act = {"maskable": "discrete", "dqn": "discrete", "td3": "box", "sac": "box"}.get(
        algo, draw(st.sampled_from(["discrete", "box"]))
    )
    learning_starts = 0 if algo in ON_POLICY else draw(st.sampled_from([0, 8]))
    # the model's own sampling (warm-up, epsilon) shares env 0's space in SB3 (module docstring)
    own_space_ok = algo in ON_POLICY or (algo in ("td3", "sac") and learning_starts == 0)
    return Case(
        algo=algo,
        obs=draw(st.sampled_from(["box", "dict"])),
        act=act,
        reuse=draw(st.booleans()),
        sample_space=draw(st.booleans()) if own_space_ok else False,
        noise=draw(st.sampled_from([None, "normal", "ou"])) if algo in ("td3", "sac") else None,
        learning_starts=learning_starts,
        n_runners=draw(st.sampled_from([1, 2])),
        k=draw(st.sampled_from([1, 2])),
        limit=draw(st.integers(3, 7)),
        p_end=draw(st.sampled_from([0.0, 0.15])),
        seed=draw(st.integers(0, 2**16)),
    )


class Servers:
    """One deterministic-mode server per runner count, rebuilt per example."""

    def __init__(self, helpers: ModuleType) -> None:
        self.helpers = helpers
        self.version = 0
        self._servers: dict[int, tuple[Any, Any]] = {}

    def get(self, n_runners: int) -> tuple[Any, Any]:
        if n_runners not in self._servers:
            self._servers[n_runners] = rlightning_ray.start_server(
                self.helpers.RebuildablePolicy,
                order=[f"runner-{r}" for r in range(n_runners)],
                num_cpus=0.25,
            )
        return self._servers[n_runners]

    def publish(self, n_runners: int, weights: Any) -> int:
        server, registry = self.get(n_runners)
        self.version += 1
        return rlightning_ray.publish_weights(server, registry, self.version, weights)

    def close(self) -> None:
        for server, registry in self._servers.values():
            ray.kill(server)
            ray.kill(registry)


@pytest.fixture(scope="module")
def servers(local_ray: None, helpers: ModuleType) -> Iterator[Servers]:
    pool = Servers(helpers)
    yield pool
    pool.close()


def _assert_equal(ours: Any, theirs: Any, name: str) -> None:
    if isinstance(theirs, dict):
        assert set(ours) == set(theirs), name
        for key in theirs:
            np.testing.assert_array_equal(
                ours[key], theirs[key], err_msg=f"{name}[{key}]", strict=True
            )
    else:
        np.testing.assert_array_equal(ours, theirs, err_msg=name, strict=True)


def run_case(case: Case, servers: Servers, helpers: ModuleType, envs: ModuleType) -> None:
    n_envs = case.n_runners * case.k
    make_model = partial(
        helpers.fuzz_model,
        case.algo,
        case.env_config,
        n_envs,
        case.seed,
        n_steps=N_STEPS,
        learning_starts=case.learning_starts,
        noise=case.noise,
        train_freq=TRAIN_FREQ,
    )
    on_policy = case.algo in ON_POLICY
    steps = N_STEPS if on_policy else TRAIN_FREQ
    total = ROLLOUTS * steps * n_envs
    model = make_model()  # building a model seeds the global RNGs: build both first
    start_training(model, total)
    reference, callback = helpers.learn_reference(make_model, total)
    # The server draws in its own process from RNGs seeded RNG_SEED; SB3 draws in this one,
    # which both learners' train() draw from too: keep the streams apart as processes would.
    set_random_seed(RNG_SEED)
    acting = (np.random.get_state(), torch.get_rng_state())
    training = (np.random.get_state(), torch.get_rng_state())
    server, _ = servers.get(case.n_runners)
    version = servers.publish(
        case.n_runners, helpers.Rebuild(make_model, RNG_SEED, acting_state(model))
    )
    runners = rlightning_ray.start_runners(
        partial(envs.fuzz_env, **case.env_config),
        server,
        n_runners=case.n_runners,
        envs_per_runner=case.k,
        seed=case.seed,
        num_cpus=0.25,
    )
    collector = rlightning_ray.Collector(runners, timeout_s=120)
    try:
        for rollout in range(ROLLOUTS):
            np.random.set_state(acting[0])
            torch.set_rng_state(acting[1])
            helpers.sb3_collect(reference, callback, N_STEPS)
            acting = (np.random.get_state(), torch.get_rng_state())
            if rollout:
                version = servers.publish(case.n_runners, acting_state(model))
            if on_policy:
                collect_rollout(model, collector, current_version=version)
                pairs = [(name, name) for name in ROLLOUT_FIELDS]
                if case.algo == "maskable":
                    pairs.append(("action_masks", "action_masks"))
                ours, theirs = model.rollout_buffer, reference.rollout_buffer
            else:
                done, _ = collect_replay(model, collector, current_version=version)
                assert done
                pairs = [(name, name) for name in REPLAY_FIELDS]
                ours, theirs = model.replay_buffer, reference.replay_buffer
                assert ours.pos == theirs.pos
            for name, _ in pairs:
                _assert_equal(getattr(ours, name), getattr(theirs, name), f"{case} {name}")
            assert model.num_timesteps == reference.num_timesteps == (rollout + 1) * steps * n_envs
            if not on_policy:
                assert model._episode_num == reference._episode_num
                assert getattr(model, "exploration_rate", None) == getattr(
                    reference, "exploration_rate", None
                )
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
    finally:
        for runner in runners:
            ray.kill(runner)


FUZZ = settings(
    # a few drawn examples beside the explicit ones (more: RLIGHTNING_RAY_FUZZ_EXAMPLES=50)
    max_examples=int(os.environ.get("RLIGHTNING_RAY_FUZZ_EXAMPLES", "2")),
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)


@FUZZ
@example(case=Case("ppo", limit=6))  # truncated episodes bootstrapped; 2 runners x 2 envs
# Dict observations, arrays written in place, make_vec_env's action-space seeds
@example(case=Case("ppo", obs="dict", act="box", reuse=True, sample_space=True, n_runners=1))
@example(case=Case("maskable", obs="dict", reuse=True, k=1))  # masks read, used, stored
@example(case=Case("td3", act="box", noise="ou", learning_starts=8))  # per-env noise resets
@example(case=Case("sac", act="box", noise="normal", sample_space=True, n_runners=1, k=1))
@example(case=Case("dqn", learning_starts=8, obs="dict", reuse=True))  # epsilon schedule
@given(case=cases())
def test_deterministic_mode_equals_collect_rollouts(
    case: Case, servers: Servers, helpers: ModuleType, envs: ModuleType
) -> None:
    run_case(case, servers, helpers, envs)
