"""RaySharedRolloutCollector: bad seeds and timeouts refused at once; image observations.

Images: a CnnPolicy over a VecEnv of channel-last images (SB3 wraps it in ``VecTransposeImage``)
made every runner fail to build, with the in-process collector's message that the model "cannot
store" the agents' images ("build the model over a VecEnv of the agents' own spaces", which it
was): the replica was loaded without an env, so it did not transpose. Now its buffer equals the
in-process collector's (which transposes as ``VecTransposeImage``), array for array.

Unstarted: ``collect()`` on a model not given ``start_training`` stepped every runner for a whole
rollout and only then refused (the in-process collector refuses before any step); the rollout
was lost and the envs had moved on. Now it refuses first: the next rollout is the in-process one.
So does ``collect(update_model=...)`` with no bool (rule ``flag``): ``0`` or ``None`` had
stepped every runner, ``"False"`` been taken as True.

Seeds and timeouts:
Before: ``seeds=5`` or ``acting_seeds=5`` failed with Python's bare ``'int' object is not
iterable``; a float, str or negative seed reached the runners' processes (``env.reset(seed=1.5)``
or ``set_acting_seed("a")`` there: a runner build failure, or a reset seeded with a float); a
``timeout_s`` of ``-1`` reached ``ray.get(timeout=-1)``, whose error escaped the collector's
runner naming. Every such check runs before any Ray actor is started (no cluster needed).
"""

from __future__ import annotations

import math
import sys
import time
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import ray
from gymnasium import spaces
from rlightning_ray_test_pz_checks import ENVS
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv, VecTransposeImage

from rlightning_pettingzoo import SharedRolloutCollector
from rlightning_ray._pz_runners import RunnerPool
from rlightning_ray.pettingzoo import RaySharedRolloutCollector
from rlightning_sb3 import set_acting_seed, start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")


SCHEDULE = [(0, 6, "truncated"), (1, 3, "terminated"), (2, 5, "truncated")]


@pytest.fixture(scope="module")
def model() -> Any:
    env = DummyVecEnv([ENVS.AgentSlot] * 2)
    return PPO("MlpPolicy", env, n_steps=8, batch_size=8, n_epochs=1, seed=0, device="cpu")


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"seeds": 5}, TypeError, r"seeds must be a sequence .* got int 5"),
        ({"seeds": "ab"}, TypeError, r"seeds must be a sequence .* got str"),
        ({"acting_seeds": 5}, TypeError, r"acting_seeds must be a sequence .* got int 5"),
        ({"seeds": [1.5, 2]}, TypeError, r"seeds\[0\] must be an int count; got 1.5"),
        ({"seeds": [3, True]}, TypeError, r"seeds\[1\] must be an int count; got True"),
        ({"acting_seeds": ["a", 1]}, TypeError, r"acting_seeds\[0\] must be an int count"),
        ({"acting_seeds": [1, -2]}, ValueError, r"acting_seeds\[1\] .*got -2"),
        ({"timeout_s": -1}, ValueError, r"timeout_s must be None .* > 0, got -1"),
        ({"timeout_s": 0}, ValueError, r"timeout_s must be None .* > 0, got 0"),
        ({"timeout_s": math.nan}, ValueError, r"timeout_s must be None .* > 0, got nan"),
        ({"timeout_s": "10"}, TypeError, r"timeout_s must be None .* got str '10'"),
    ],
)
def test_bad_seeds_and_timeouts_are_named(
    model: Any, kwargs: dict[str, Any], error: type[Exception], match: str
) -> None:
    fn = partial(ENVS.ScheduleEnv, SCHEDULE, 0)
    with pytest.raises(error, match=match):
        RaySharedRolloutCollector(model, [fn, fn], n_runners=2, **kwargs)


def test_numpy_seeds_pass_the_checks(model: Any) -> None:
    """Seeds as numpy integers (``np.arange``) are seeds: the next check (``timeout_s``) is met."""
    fn = partial(ENVS.ScheduleEnv, SCHEDULE, 0)
    with pytest.raises(ValueError, match="timeout_s must be None"):
        RaySharedRolloutCollector(
            model,
            [fn, fn],
            n_runners=2,
            seeds=np.arange(2),
            acting_seeds=(np.int64(4), None),
            timeout_s=-1,
        )


IMAGE = ENVS.IMAGE
ACT = spaces.Discrete(3)


class ImageSlot(gym.Env):  # type: ignore[type-arg]
    """One agent's spaces, for the model's VecEnv (sizes the buffer; never stepped)."""

    observation_space = IMAGE
    action_space = ACT

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return np.zeros(IMAGE.shape, np.uint8), {}

    def step(self, action: Any) -> Any:
        raise AssertionError("never stepped")


ImageParallel = ENVS.ImageParallel


def _cnn_model() -> Any:
    model = PPO(
        "CnnPolicy",
        DummyVecEnv([ImageSlot] * 4),
        n_steps=8,
        batch_size=16,
        n_epochs=1,
        seed=0,
        device="cpu",
        policy_kwargs={"features_extractor_kwargs": {"features_dim": 8}, "net_arch": [8]},
    )
    assert isinstance(model.get_env(), VecTransposeImage)  # SB3 wrapped it
    start_training(model, 10_000)
    return model


IMAGE_FIELDS = ("observations", "actions", "episode_starts", "rewards", "values", "log_probs")


def test_channel_last_images_are_transposed_as_in_process(local_ray: None) -> None:
    """1 runner x 2 copies, 4 columns, two rollouts with a train between: the in-process buffer."""
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the runner needs no tests
    ray.cloudpickle.register_pickle_by_value(ENVS)  # ImageParallel lives there
    model = _cnn_model()
    collector = RaySharedRolloutCollector(
        model, [ImageParallel] * 2, seeds=[0, 1], acting_seeds=[5], num_cpus=0.5
    )
    ours, weights = [], []
    try:
        for _ in range(2):
            weights.append({k: v.clone() for k, v in model.policy.state_dict().items()})
            collector.collect()
            buf = model.rollout_buffer
            ours.append({name: getattr(buf, name).copy() for name in IMAGE_FIELDS})
            model.train()
    finally:
        collector.close()
    reference = _cnn_model()
    inproc = SharedRolloutCollector(reference, [ImageParallel] * 2, seeds=[0, 1])
    set_acting_seed(5)
    for k in range(2):
        reference.policy.load_state_dict(weights[k])
        inproc.collect()
        for name in IMAGE_FIELDS:
            np.testing.assert_allclose(
                ours[k][name],
                getattr(reference.rollout_buffer, name),
                rtol=1e-5,
                atol=1e-6,
                err_msg=f"rollout {k} {name}",
            )
    assert ours[0]["observations"].shape == (8, 4, 3, 36, 36)  # channel-first, as stored


def test_an_unstarted_model_is_refused_before_any_runner_steps(local_ray: None) -> None:
    ray.cloudpickle.register_pickle_by_value(ENVS)
    env_fns = [partial(ENVS.ScheduleEnv, SCHEDULE, 0)]

    def build() -> Any:
        slots = DummyVecEnv([ENVS.AgentSlot] * 2)
        return PPO("MlpPolicy", slots, n_steps=8, batch_size=8, n_epochs=1, seed=0, device="cpu")

    model = build()
    collector = RaySharedRolloutCollector(model, env_fns, seeds=[3], acting_seeds=[7], num_cpus=0.5)
    try:
        for value in ("False", 0, None):  # rule flag: never read by truthiness
            with pytest.raises(
                TypeError,
                match=rf"^RaySharedRolloutCollector\.collect: update_model must be a bool, not "
                rf"{type(value).__name__}; .*\[rule flag\]$",
            ):
                collector.collect(update_model=value)
        with pytest.raises(ValueError, match="start_training"):
            collector.collect()
        start_training(model, 10_000)
        collector.collect()
    finally:
        collector.close()
    reference = build()
    start_training(reference, 10_000)
    inproc = SharedRolloutCollector(reference, env_fns, seeds=[3])
    set_acting_seed(7)
    inproc.collect()  # the runner's first rollout: the refused collect() stepped nothing
    for name in ("observations", "actions", "episode_starts", "rewards", "log_probs"):
        np.testing.assert_allclose(
            getattr(model.rollout_buffer, name),
            getattr(reference.rollout_buffer, name),
            rtol=1e-5,
            atol=1e-6,
            err_msg=name,
        )


class _Napper:
    """A runner that answers ``nap()`` after ``delay_s`` seconds."""

    def __init__(self, delay_s: float) -> None:
        self.delay_s = delay_s

    def ready(self) -> str:
        return "ready"

    def nap(self) -> float:
        time.sleep(self.delay_s)
        return self.delay_s


def test_timeout_is_one_deadline_for_all_runners(local_ray: None) -> None:
    """Runner 0 answers after 1.5 s, runner 1 after 3.5 s, ``timeout_s=2.5``: refused at 2.5 s.

    Before, each runner's ``ray.get`` had its own ``timeout_s`` (runner 1's wait began only once
    runner 0 had answered), so the call returned after 3.5 s, beyond the limit given. The pool
    every Ray PettingZoo collector waits with (``rlightning_ray._pz_runners.RunnerPool``) is
    built without a limit (a loaded machine builds actors slowly), then given the 2.5 s.
    """
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    pool = RunnerPool("test", _Napper, [(1.5,), (3.5,)], num_cpus=0, timeout_s=None)
    try:
        assert pool.call("nap", what="nap") == [1.5, 3.5]  # no limit: both answer
        pool.timeout_s = 2.5
        began = time.monotonic()
        late = r"test: runner 'pz-runner-1' did not nap within timeout_s=2.5"
        with pytest.raises(RuntimeError, match=late):
            pool.call("nap", what="nap")
        waited = time.monotonic() - began
    finally:
        pool.close()
    assert waited >= 2.4, waited  # not before the deadline (the raise is what failed before)
