"""RaySharedReplayCollector with action noise (TD3, SAC): the in-process collector's draws.

The oracle is ``rlightning_pettingzoo.SharedReplayCollector`` with action noise (itself equal to
SB3's ``learn()``, noise states included: tests/pettingzoo/test_collector_noise.py). Its noise
is one process per (copy, agent) slot, drawn from numpy's global generator when the agent acts,
reset after the step that ends its episode and all reset at a new ``start_training``. On Ray
each runner's ``ReplayRecorder`` keeps its copies' processes across rollouts (the base noise
travels in the model's save) and draws them from its process's numpy generator, which the
runner's acting seed seeds (SB3's ``replica.set_random_seed``: what the in-process side does to
its model after ``start_training``).

On continuous simple_spread (3 agents, truncated every 5 steps), three runs (``start_training``
with ``reset_num_timesteps`` True, False, True, each ending mid-episode), ``model.train()``
between rollouts: one runner's buffer, ``num_timesteps`` and noise states equal the in-process
collector's after every rollout, exactly; two runners' columns each equal the in-process
collector over that runner's copies. Mutations: the in-process collector with the resets
skipped (an agent's episode end, a new run) fills another buffer than the runner's.
"""

from __future__ import annotations

import importlib
import importlib.util
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from rlightning_ray_test_pz_checks import restore_rng, rng_state
from rlightning_test_support import sibling
from stable_baselines3 import SAC, TD3
from stable_baselines3.common.noise import (
    NormalActionNoise,
    OrnsteinUhlenbeckActionNoise,
    VectorizedActionNoise,
)
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import SharedReplayCollector
from rlightning_pettingzoo._noise import SlotNoise
from rlightning_ray.pettingzoo import RaySharedReplayCollector
from rlightning_sb3 import finish_training, start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")


def _simple_spread() -> ModuleType:
    """mpe2's ``simple_spread_v3`` (PettingZoo's own before MPE moved to mpe2)."""
    for name in ("mpe2.simple_spread_v3", "pettingzoo.mpe.simple_spread_v3"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise ImportError("neither mpe2 nor pettingzoo.mpe provides simple_spread_v3")


REPLAY = sibling(__file__, "test_pz_replay.py")
SPREAD = _simple_spread()
#: One copy: 3 agents, Box(0, 1, (5,)) actions, truncated every 5 steps.
MAKE = partial(SPREAD.parallel_env, max_cycles=5, continuous_actions=True)
AGENTS = 3
NOISES: dict[str, Callable[[], Any]] = {
    "normal": lambda: NormalActionNoise(np.zeros(5), 0.3 * np.ones(5)),
    "ou": lambda: OrnsteinUhlenbeckActionNoise(np.zeros(5), 0.3 * np.ones(5), dt=0.5),
}
#: ``(total_timesteps, reset_num_timesteps)`` of each ``start_training``, for 6 columns: 2
#: rollouts of 4 rows each (every run ends at a copy step of 8, 16, 24: mid-episode).
RUNS = [(48, True), (48, False), (48, True)]


class _Slot(gym.Env[Any, Any]):
    """One simple_spread agent's spaces (sizes the model's buffer; never stepped)."""

    def __init__(self) -> None:
        env = MAKE()
        self.observation_space = env.observation_space("agent_0")
        self.action_space = env.action_space("agent_0")

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return np.zeros(self.observation_space.shape, np.float32), {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("never stepped")


def _model(algo: Any, noise: str, n_envs: int, learning_starts: int) -> Any:
    return algo(
        "MlpPolicy",
        DummyVecEnv([_Slot] * n_envs),
        action_noise=NOISES[noise](),
        learning_starts=learning_starts,
        train_freq=4,
        batch_size=16,
        buffer_size=1000,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [16]},
    )


def _states(noise: Any) -> list[np.ndarray]:
    """Each slot's process state: an OU process's ``noise_prev`` (a Gaussian one has none)."""
    return [np.array(p.noise_prev) for p in noise.noises if hasattr(p, "noise_prev")]


Snapshot = tuple[dict[str, np.ndarray], int, list[np.ndarray]]


def _in_process(
    algo: Any,
    noise: str,
    copies: range,
    seeds: list[int],
    acting_seed: int,
    runs: list[tuple[int, bool]],
    learning_starts: int,
    weights: list[dict[str, th.Tensor]] | None = None,
) -> tuple[list[Snapshot], Any]:
    """The oracle: ``SharedReplayCollector`` over ``copies``, ``learn()``'s loop per run.

    After each rollout: the buffer arrays, ``num_timesteps`` and the slots' noise states.
    Trained between rollouts (``test_pz_replay._train``) with its acting generators kept apart
    (the runners train nowhere); with ``weights``, rollout ``k`` acts with ``weights[k]``
    instead (the learner's, for one runner's share of a wider model).
    """
    ref = _model(algo, noise, AGENTS * len(copies), learning_starts)
    inproc = SharedReplayCollector(ref, [MAKE] * len(copies), seeds=seeds)
    out: list[Snapshot] = []
    for run, (total, reset) in enumerate(runs):
        start_training(ref, total, reset_num_timesteps=reset)
        if run == 0:
            ref.set_random_seed(acting_seed)  # what the runner does to its replica
        while ref.num_timesteps < ref._total_timesteps:
            if weights is not None:
                ref.policy.load_state_dict(weights[len(out)])
            inproc.collect()
            out.append((REPLAY._buffer(ref), ref.num_timesteps, _states(inproc.noise_processes)))
            if weights is None:
                acting = rng_state()
                REPLAY._train(ref)
                restore_rng(acting)
        finish_training(ref)
    return out, ref


def _assert_snapshots(got: list[Snapshot], want: list[Snapshot], what: str) -> None:
    assert len(got) == len(want), what
    for k, ((buf, steps, states), (ref_buf, ref_steps, ref_states)) in enumerate(
        zip(got, want, strict=True)
    ):
        assert steps == ref_steps, (what, k)
        for name in REPLAY.FIELDS:
            np.testing.assert_array_equal(buf[name], ref_buf[name], err_msg=f"{what} {k} {name}")
        assert len(states) == len(ref_states), (what, k)
        for slot, (a, b) in enumerate(zip(states, ref_states, strict=True)):
            np.testing.assert_array_equal(a, b, err_msg=f"{what} {k} slot {slot}")


CASES = {"TD3-ou": (TD3, "ou"), "TD3-normal": (TD3, "normal"), "SAC-normal": (SAC, "normal")}


@pytest.mark.parametrize("case", list(CASES))
def test_one_runner_draws_the_in_process_collectors_noise(
    local_ray: None, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """1 runner x 2 copies == SharedReplayCollector over them: 3 runs of 2 rollouts, trained
    between; every buffer array, ``num_timesteps`` and the runner's noise states (OU)."""
    algo, noise = CASES[case]
    seeds, acting_seed, learning_starts = [7, 8], 11, 30  # warm-up ends in the 2nd rollout
    want, ref = _in_process(algo, noise, range(2), seeds, acting_seed, RUNS, learning_starts)

    model = _model(algo, noise, 2 * AGENTS, learning_starts)
    collector = RaySharedReplayCollector(
        model, [MAKE] * 2, seeds=seeds, acting_seeds=[acting_seed], num_cpus=0.5
    )
    got: list[Snapshot] = []
    try:
        for total, reset in RUNS:
            start_training(model, total, reset_num_timesteps=reset)
            while model.num_timesteps < model._total_timesteps:
                assert collector.collect() == 4 * 2 * AGENTS
                (processes,) = collector.runner_noise()
                got.append((REPLAY._buffer(model), model.num_timesteps, _states(processes)))
                REPLAY._train(model)
            finish_training(model)
    finally:
        collector.close()
    assert len(got) == 2 * len(RUNS)
    _assert_snapshots(got, want, case)
    assert model._n_updates == ref._n_updates > 0
    for (key, mine), (_, theirs) in zip(
        model.policy.state_dict().items(), ref.policy.state_dict().items(), strict=True
    ):
        assert th.equal(mine, theirs), key
    buf = got[-1][0]
    dones, timeouts = buf["dones"].astype(bool), buf["timeouts"].astype(bool)
    assert (dones & timeouts).any()  # the truncations (episode ends) are inside
    assert isinstance(processes.noises[0], type(NOISES[noise]()))  # the learner's noise class
    if noise != "ou":
        return
    # the states the resets act on are far from the initial noise where each run ends
    assert all(abs(s).max() > 0.05 for _, _, states in got[1::2] for s in states)
    # mutations of the oracle: the runner's buffer is not theirs
    for what, method in (("episode-end resets", "ended"), ("new-run resets", "start_run")):
        with monkeypatch.context() as patch:
            patch.setattr(SlotNoise, method, lambda self, *args: False)
            mutant, _ = _in_process(algo, noise, range(2), seeds, acting_seed, RUNS, 30)
        first = 1 if method == "ended" else 2  # the rollout with the first skipped reset
        for k in range(first):
            np.testing.assert_array_equal(mutant[k][0]["actions"], got[k][0]["actions"])
        assert not np.array_equal(mutant[first][0]["actions"], got[first][0]["actions"]), what


def test_two_runners_draw_the_in_process_noise_of_their_copies(local_ray: None) -> None:
    """2 runners x 2 copies (TD3, OU): runner r's columns, noise states included, == the
    in-process collector over runner r's copies with its acting seed and the learner's weights,
    for a model of half the ``learning_starts`` and budgets (the learner's clock); two runs."""
    seeds, acting_seeds, learning_starts = [3, 4, 5, 6], [21, 22], 36
    runs = [(96, True), (96, False)]  # 12 columns: 2 rollouts of 4 rows per run
    model = _model(TD3, "ou", 4 * AGENTS, learning_starts)
    # started before the collector is built: the learner's noise is SB3's VectorizedActionNoise
    # of its 12 columns, whose base noise each runner gets
    start_training(model, runs[0][0], reset_num_timesteps=runs[0][1])
    assert isinstance(model.action_noise, VectorizedActionNoise)
    collector = RaySharedReplayCollector(
        model,
        [MAKE] * 4,
        n_runners=2,
        seeds=seeds,
        acting_seeds=acting_seeds,
        num_cpus=0.5,
    )
    weights: list[dict[str, th.Tensor]] = []
    got: list[list[Snapshot]] = [[], []]
    try:
        for run, (total, reset) in enumerate(runs):
            if run:
                start_training(model, total, reset_num_timesteps=reset)
            while model.num_timesteps < model._total_timesteps:
                weights.append({k: v.clone() for k, v in model.policy.state_dict().items()})
                assert collector.collect() == 4 * 4 * AGENTS
                noises = collector.runner_noise()
                for r in range(2):
                    columns = slice(r * 2 * AGENTS, (r + 1) * 2 * AGENTS)
                    got[r].append(
                        (
                            REPLAY._buffer(model, columns),
                            model.num_timesteps // 2,
                            _states(noises[r]),
                        )
                    )
                REPLAY._train(model)
            finish_training(model)
    finally:
        collector.close()
    assert model._n_updates > 0 and len(weights) == 4
    half = [(total // 2, reset) for total, reset in runs]
    for r in range(2):
        copies = range(2 * r, 2 * r + 2)
        want, _ = _in_process(
            TD3,
            "ou",
            copies,
            seeds[2 * r : 2 * r + 2],
            acting_seeds[r],
            half,
            learning_starts // 2,
            weights,
        )
        _assert_snapshots(got[r], want, f"runner {r}")
    # the two runners drew from generators of their own
    assert not np.array_equal(got[0][-1][0]["actions"], got[1][-1][0]["actions"])
