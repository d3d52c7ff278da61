"""Clear errors before any step: bad counts to start_runners/start_server, env contract breaks.

Counts (rule ``count``, :func:`rlightning.rules.check_count`) are refused in the driver before
any actor starts. Envs that break gymnasium's API are refused by the runner's env group before a
value of theirs is kept, naming the runner, the env and the observation space: an old-gym
``reset`` (the observation alone: with a 2-element observation ``obs, _ = env.reset()``
unpacked it silently into a wrong scalar), a 4-tuple ``step``, and an observation of another
shape than the space's (``DummyVecEnv``'s row assignment would broadcast a ``(1,)`` observation
into a ``(2,)`` row silently).
"""

from __future__ import annotations

import math
import re
import sys
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import ray
from gymnasium import spaces

import rlightning_ray
from rlightning_ray import EnvStepError, GymEnvGroup
from rlightning_ray.groups import EnvContractError

ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the envs below, for workers


class _Env(gym.Env[Any, Any]):
    """A well-behaved env of ``Box(0, 1, (2,))`` observations; ``bad`` breaks one contract."""

    observation_space = spaces.Box(0.0, 1.0, (2,), np.float32)
    action_space = spaces.Discrete(2)

    def __init__(self, bad: str | None = None) -> None:
        self.bad = bad

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        obs = np.zeros(2, np.float32)
        return obs if self.bad == "old-reset" else (obs, {})

    def step(self, action: Any) -> Any:
        obs = np.zeros(1 if self.bad == "shape" else 2, np.float32)
        if self.bad == "4-tuple":
            return obs, 1.0, False, {}
        return obs, 1.0, False, False, {}


def _env(bad: str | None = None) -> _Env:
    return _Env(bad)


COUNTS = [
    (2.0, TypeError),
    ("2", TypeError),
    (True, TypeError),
    (math.nan, TypeError),
    (0, ValueError),
]


@pytest.mark.parametrize(("value", "error"), COUNTS, ids=[repr(v) for v, _ in COUNTS])
@pytest.mark.parametrize("name", ["n_runners", "envs_per_runner"])
def test_start_runners_refuses_counts_that_are_not_ints(name: str, value: Any, error: Any) -> None:
    counts: dict[str, Any] = {"n_runners": 1, "envs_per_runner": 1, name: value}
    with pytest.raises(error, match=rf"^start_runners {name} .*\[rule count\]$"):
        rlightning_ray.start_runners(_env, policy=object, **counts)


@pytest.mark.parametrize(
    ("name", "value", "error"),
    [
        ("max_batch", 256.0, TypeError),
        ("max_batch", "256", TypeError),
        ("max_batch", True, TypeError),
        ("max_batch", math.nan, TypeError),
        ("max_batch", 0, ValueError),
        ("max_wait_us", 1000.5, TypeError),
        ("max_wait_us", -1, ValueError),
        ("num_cpus", math.nan, ValueError),
        ("num_cpus", "1", TypeError),
        ("num_gpus", False, TypeError),
    ],
)
def test_start_server_refuses_bad_counts(name: str, value: Any, error: Any) -> None:
    with pytest.raises(error, match=rf"^start_server {name} .*got {re.escape(repr(value))}"):
        rlightning_ray.start_server(object, **{name: value})


def test_numpy_integers_are_counts() -> None:
    from rlightning.rules import check_count

    assert check_count(np.int64(3), "n", minimum=1) == 3
    assert type(check_count(np.int64(3), "n")) is int
    assert check_count(0.5, "num_cpus", integer=False) == 0.5
    with pytest.raises(ValueError, match=r"must be finite; got inf"):
        check_count(math.inf, "num_cpus", integer=False)


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("old-reset", r"reset returned a ndarray, not gymnasium's \(observation, info\)"),
        ("4-tuple", r"step returned a 4-tuple, not gymnasium's \(observation, reward, termin"),
        ("shape", r"observation has shape \(1,\), the space's is \(2,\)"),
    ],
)
def test_the_env_group_refuses_a_broken_env_before_keeping_its_values(
    bad: str, message: str
) -> None:
    group = GymEnvGroup([_env, partial(_env, bad)])
    if bad == "old-reset":
        with pytest.raises(EnvContractError, match=message) as caught:
            group.reset([0, 1])
    else:
        group.reset([0, 1])
        with pytest.raises(EnvContractError, match=message) as caught:
            group.step(_Actions(np.zeros(2, np.int64)))
    assert caught.value.env_index == 1
    assert "Box(0.0, 1.0, (2,), float32)" in str(caught.value)
    assert isinstance(caught.value, EnvStepError)


class _Actions:
    def __init__(self, action: np.ndarray) -> None:
        self.action = action


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        ("old-reset", r"env 'env-1' of runner 'runner-0' broke gymnasium's API in its first "),
        ("4-tuple", r"env 'env-1' of runner 'runner-0' broke gymnasium's API in step 0 of th"),
        ("shape", r"env 'env-1' of runner 'runner-0' broke gymnasium's API in step 0 of this"),
    ],
)
def test_runners_name_the_runner_the_env_and_the_space(
    local_ray: None, envs: Any, bad: str, message: str
) -> None:
    runners = rlightning_ray.start_runners(
        [_env, partial(_env, bad)],
        n_runners=1,
        envs_per_runner=2,
        num_cpus=0.25,
        max_restarts=0,
        policy=envs.EchoPolicy,
    )
    try:
        with pytest.raises(Exception, match=message) as caught:
            rlightning_ray.Collector(runners).sample(2)
        assert "Box(0.0, 1.0, (2,), float32)" in str(caught.value)
    finally:
        for runner in runners:
            ray.kill(runner)
