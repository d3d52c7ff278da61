"""Envs and factories the Ray tests send to their actors (pickled by value, see conftest)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch as th
from gymnasium import spaces

# loaded (and pickled by value) before this module; torch-free, so runners of them start fast
from rlightning_ray_test_envs import (  # noqa: F401  (EchoPolicy... re-exported for the tests)
    CounterEnv,
    EchoPolicy,
    FailingEnv,
    ImageEnv,
    SwappingPolicy,
    dict_parallel,
    fuzz_env,
    reusing_parallel,
)
from stable_baselines3 import PPO
from stable_baselines3.common.env_util import make_vec_env
from stable_baselines3.common.monitor import Monitor


def cartpole(max_episode_steps: int | None = None) -> gym.Env[Any, Any]:
    return gym.make("CartPole-v1", max_episode_steps=max_episode_steps)


def monitored_cartpole(max_episode_steps: int | None = None) -> gym.Env[Any, Any]:
    return Monitor(cartpole(max_episode_steps))


def make_ppo(n_envs: int, n_steps: int, seed: int, max_episode_steps: int | None = None) -> PPO:
    env = make_vec_env(
        cartpole, n_envs=n_envs, seed=seed, env_kwargs={"max_episode_steps": max_episode_steps}
    )
    return PPO(
        "MlpPolicy",
        env,
        n_steps=n_steps,
        batch_size=n_envs * n_steps // 2,
        n_epochs=2,
        seed=seed,
        device="cpu",
    )


def counter_ppo(n_envs: int, n_steps: int = 8) -> PPO:
    env = make_vec_env(lambda: CounterEnv(0), n_envs=n_envs)
    return PPO(
        "MlpPolicy",
        env,
        n_steps=n_steps,
        batch_size=n_envs * n_steps,
        n_epochs=1,
        seed=0,
        device="cpu",
    )


def spread(max_cycles: int = 6) -> Any:
    from mpe2 import simple_spread_v3

    return simple_spread_v3.parallel_env(max_cycles=max_cycles)


def spread_ppo() -> PPO:
    env = spread()
    env.reset(seed=0)

    class AgentSpaces(gym.Env[Any, Any]):  # one agent's spaces, for SB3's constructor
        observation_space = env.observation_space("agent_0")
        action_space = env.action_space("agent_0")

    return PPO("MlpPolicy", AgentSpaces(), n_steps=8, batch_size=8, seed=0, device="cpu")


class AgentSlot(gym.Env[Any, Any]):
    """One agent's spaces as a gymnasium env, for a shared model's VecEnv (never stepped)."""

    def __init__(self, observation_space: Any, action_space: Any) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[Any, dict[str, Any]]:
        super().reset(seed=seed)
        sample = self.observation_space.sample()
        if isinstance(sample, dict):
            return {key: value * 0 for key, value in sample.items()}, {}
        return sample * 0, {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("AgentSlot only sizes a shared model's buffer; it is never stepped")


def spread_slots_ppo(n_slots: int, n_steps: int = 8) -> PPO:
    """A shared PPO for simple_spread with a VecEnv of ``n_slots`` agent slots."""
    from stable_baselines3.common.vec_env import DummyVecEnv

    env = spread()
    env.reset(seed=0)
    obs_space, act_space = env.observation_space("agent_0"), env.action_space("agent_0")
    venv = DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * n_slots)
    return PPO(
        "MlpPolicy", venv, n_steps=n_steps, batch_size=n_slots * n_steps, seed=0, device="cpu"
    )


def pendulum(max_episode_steps: int | None = None) -> gym.Env[Any, Any]:
    return gym.make("Pendulum-v1", max_episode_steps=max_episode_steps)


def make_td3(
    n_envs: int, seed: int, max_episode_steps: int, learning_starts: int, noise: str = "normal"
) -> Any:
    """TD3 on Pendulum; ``noise`` is ``"normal"``, ``"ou"`` (Ornstein-Uhlenbeck) or ``"decay"``.

    ``"decay"``: a ``VectorizedActionNoise`` of ``n_envs`` Ornstein-Uhlenbeck processes that
    start at 0.2 and halve at every draw (``theta * dt = 0.5``, ``mu = 0``, a ``sigma`` of
    ``1e-4``): the k-th draw after a reset is ``0.2 / 2 ** k`` (to 1e-5), so an env's buffer
    actions show when its process was last reset.
    """
    from stable_baselines3 import TD3
    from stable_baselines3.common.noise import (
        NormalActionNoise,
        OrnsteinUhlenbeckActionNoise,
        VectorizedActionNoise,
    )

    kinds = {"normal": NormalActionNoise, "ou": OrnsteinUhlenbeckActionNoise}
    env = make_vec_env(
        pendulum, n_envs=n_envs, seed=seed, env_kwargs={"max_episode_steps": max_episode_steps}
    )
    if noise == "decay":
        decaying = OrnsteinUhlenbeckActionNoise(
            np.zeros(1), 1e-4 * np.ones(1), theta=50.0, dt=0.01, initial_noise=0.2 * np.ones(1)
        )
        action_noise: Any = VectorizedActionNoise(decaying, n_envs)
    else:
        action_noise = kinds[noise](np.zeros(1), 0.3 * np.ones(1))
    return TD3(
        "MlpPolicy",
        env,
        learning_starts=learning_starts,
        batch_size=16,
        buffer_size=1_000,
        policy_kwargs={"net_arch": [32, 32]},
        action_noise=action_noise,
        seed=seed,
        device="cpu",
    )


def dwindle() -> Any:
    """A pettingzoo ``ParallelEnv`` whose agents leave and join mid-episode.

    ``a0``/``a1``/``a2`` terminate after steps 2, 4 and 6, ``a3`` joins after step 1 and
    terminates after step 5, so the episode ends after step 6. Observation ``[agent index, t]``
    (float32), action ``Discrete(2)``, reward 1 per agent in the step's results.
    """
    from pettingzoo import ParallelEnv

    obs_space = spaces.Box(0.0, 100.0, (2,), np.float32)
    act_space = spaces.Discrete(2)
    ends = {"a0": 2, "a1": 4, "a2": 6, "a3": 5}

    class Dwindle(ParallelEnv):  # type: ignore[misc]
        render_mode = None

        def __init__(self) -> None:
            self.metadata = {"name": "dwindle_v0", "render_modes": []}
            self.possible_agents = ["a0", "a1", "a2", "a3"]
            self.agents: list[str] = []
            self.t = 0

        def observation_space(self, agent: str) -> spaces.Box:
            return obs_space

        def action_space(self, agent: str) -> spaces.Discrete:
            return act_space

        def _obs(self) -> dict[str, np.ndarray]:
            return {
                a: np.array([self.possible_agents.index(a), self.t], np.float32)
                for a in self.agents
            }

        def reset(self, seed: int | None = None, options: Any = None) -> Any:
            self.t = 0
            self.agents = ["a0", "a1", "a2"]
            return self._obs(), {a: {} for a in self.agents}

        def step(self, actions: dict[str, Any]) -> Any:
            assert set(actions) == set(self.agents), (actions, self.agents)
            self.t += 1
            acting = list(self.agents)
            terminations = {a: ends[a] == self.t for a in acting}
            live = [a for a in acting if not terminations[a]]
            if self.t == 1:
                live.append("a3")
            self.agents = live
            observations = {
                a: np.array([self.possible_agents.index(a), self.t], np.float32)
                for a in dict.fromkeys(acting + live)
            }
            keys = list(observations)
            rewards = {a: 1.0 for a in keys}
            truncations = {a: False for a in keys}
            terminations = {a: terminations.get(a, False) for a in keys}
            return observations, rewards, terminations, truncations, {a: {} for a in keys}

    return Dwindle()


def dwindle_ppo() -> PPO:
    env = dwindle()

    class AgentSpaces(gym.Env[Any, Any]):  # one agent's spaces, for SB3's constructor
        observation_space = env.observation_space("a0")
        action_space = env.action_space("a0")

    return PPO("MlpPolicy", AgentSpaces(), n_steps=8, batch_size=8, seed=0, device="cpu")


def fuzz_model(
    algo: str,
    env_config: dict[str, Any],
    n_envs: int,
    seed: int,
    *,
    n_steps: int = 8,
    learning_starts: int = 0,
    noise: str | None = None,
    train_freq: int = 4,
) -> Any:
    """The fuzzer's model: ``algo`` on ``make_vec_env(fuzz_env, n_envs, seed=seed)``, seed ``seed``.

    ``algo``: ``"ppo"``, ``"maskable"`` (sb3-contrib's MaskablePPO), ``"td3"``, ``"sac"`` or
    ``"dqn"``; ``noise``: None, ``"normal"`` or ``"ou"`` (TD3/SAC).
    """
    from stable_baselines3 import DQN, SAC, TD3
    from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise

    env = make_vec_env(fuzz_env, n_envs=n_envs, seed=seed, env_kwargs=env_config)
    policy = "MultiInputPolicy" if env_config.get("obs") == "dict" else "MlpPolicy"
    small: dict[str, Any] = {"net_arch": [16]}
    if algo in ("ppo", "maskable"):
        from sb3_contrib import MaskablePPO

        cls = MaskablePPO if algo == "maskable" else PPO
        return cls(
            policy,
            env,
            n_steps=n_steps,
            batch_size=n_envs * n_steps,
            n_epochs=1,
            policy_kwargs=small,
            seed=seed,
            device="cpu",
        )
    common: dict[str, Any] = {
        "learning_starts": learning_starts,
        "train_freq": train_freq,
        "batch_size": 8,
        "buffer_size": 500,
        "policy_kwargs": small,
        "seed": seed,
        "device": "cpu",
    }
    if algo == "dqn":
        return DQN(policy, env, exploration_fraction=1.0, target_update_interval=8, **common)
    kinds = {"normal": NormalActionNoise, "ou": OrnsteinUhlenbeckActionNoise}
    action_noise = None if noise is None else kinds[noise](np.zeros(2), 0.3 * np.ones(2))
    return {"td3": TD3, "sac": SAC}[algo](policy, env, action_noise=action_noise, **common)


@dataclass(frozen=True)
class Rebuild:
    """A publish that makes a :class:`RebuildablePolicy` build a new ``SB3BatchPolicy``."""

    make_model: Callable[[], Any]
    seed: int
    state: Any


class RebuildablePolicy:
    """A BatchPolicy that rebuilds its ``SB3BatchPolicy`` when a :class:`Rebuild` is published.

    Lets one server process serve the fuzzer's examples one after the other (each rebuild is a
    fresh model, seeded), instead of starting a server per example.
    """

    def __init__(self) -> None:
        self.inner: Any = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.inner is None:
            raise RuntimeError("nothing published yet: publish a Rebuild first")
        return self.inner(*args, **kwargs)

    def set_weights(self, weights: Any) -> None:
        from rlightning_ray.sb3 import SB3BatchPolicy

        if isinstance(weights, Rebuild):
            self.inner = SB3BatchPolicy(weights.make_model, seed=weights.seed)
            self.inner.set_weights(weights.state)
        else:
            self.inner.set_weights(weights)


def reusing_ppo() -> Any:
    """A shared MaskablePPO for ``ray_envs.reusing_parallel`` (one agent's spaces)."""
    from sb3_contrib import MaskablePPO

    env = reusing_parallel()
    slot = AgentSlot(env.observation_space("a0"), env.action_space("a0"))
    return MaskablePPO("MlpPolicy", slot, n_steps=8, batch_size=8, seed=0, device="cpu")


def reusing_slots_ppo(n_slots: int, n_steps: int) -> Any:
    """A shared MaskablePPO for ``reusing_parallel`` with a VecEnv of ``n_slots`` agent slots."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    env = reusing_parallel()
    obs_space, act_space = env.observation_space("a0"), env.action_space("a0")
    venv = DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * n_slots)
    return MaskablePPO(
        "MlpPolicy", venv, n_steps=n_steps, batch_size=n_slots * n_steps, seed=0, device="cpu"
    )


def make_recurrent_ppo(
    n_envs: int, n_steps: int, seed: int, max_episode_steps: int | None = None
) -> Any:
    """sb3-contrib's RecurrentPPO on CartPole (a tiny LSTM), built as :func:`make_ppo`."""
    from sb3_contrib import RecurrentPPO

    env = make_vec_env(
        cartpole, n_envs=n_envs, seed=seed, env_kwargs={"max_episode_steps": max_episode_steps}
    )
    return RecurrentPPO(
        "MlpLstmPolicy",
        env,
        n_steps=n_steps,
        batch_size=n_envs * n_steps // 2,
        n_epochs=2,
        seed=seed,
        device="cpu",
        policy_kwargs={"lstm_hidden_size": 8, "net_arch": [8]},
    )


def make_image_model(algo: str, n_envs: int, n_steps: int, seed: int) -> Any:
    """PPO or DQN (MlpPolicy) on :class:`ImageEnv`: SB3 wraps its env in ``VecTransposeImage``."""
    from stable_baselines3 import DQN

    env = make_vec_env(ImageEnv, n_envs=n_envs, seed=seed)
    common: dict[str, Any] = {"seed": seed, "device": "cpu", "policy_kwargs": {"net_arch": [8]}}
    if algo == "ppo":
        return PPO("MlpPolicy", env, n_steps=n_steps, batch_size=n_envs * n_steps, **common)
    return DQN(
        "MlpPolicy",
        env,
        learning_starts=0,
        buffer_size=100,
        train_freq=n_steps,
        exploration_fraction=0.5,
        **common,
    )


def dict_slots_ppo(n_slots: int = 1, n_steps: int = 6) -> Any:
    """A shared MaskablePPO("MultiInputPolicy") for ``ray_envs.dict_parallel`` (``n_slots``)."""
    from sb3_contrib import MaskablePPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    env = dict_parallel()
    obs_space, act_space = env.observation_space("a0"), env.action_space("a0")
    venv = DummyVecEnv([lambda: AgentSlot(obs_space, act_space)] * n_slots)
    return MaskablePPO(
        "MultiInputPolicy",
        venv,
        n_steps=n_steps,
        batch_size=n_slots * n_steps,
        seed=0,
        device="cpu",
    )


def learn_reference(make_model: Callable[[], Any], total: int) -> tuple[Any, Any]:
    """An SB3 model prepared as ``learn(total)`` prepares it, and its callback (the oracle side).

    ``make_model()`` builds it (which seeds the global RNGs: build the learner's model first),
    then ``_setup_learn`` and ``callback.on_training_start``, as ``BaseAlgorithm.learn`` runs
    them before its first ``collect_rollouts``.
    """
    reference = make_model()
    _, callback = reference._setup_learn(total, callback=None)
    callback.on_training_start(locals(), globals())
    return reference, callback


def sb3_collect(reference: Any, callback: Any, n_steps: int) -> Any:
    """One ``collect_rollouts`` of SB3 as ``learn()`` calls it, on- or off-policy.

    On-policy: ``n_steps`` steps into ``rollout_buffer`` (asserted to finish: no callback stops
    it). Off-policy: one ``train_freq`` of steps into ``replay_buffer`` with the model's noise and
    ``learning_starts``. Returns what ``collect_rollouts`` returned.
    """
    from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

    if isinstance(reference, OnPolicyAlgorithm):
        done = reference.collect_rollouts(
            reference.get_env(), callback, reference.rollout_buffer, n_steps
        )
        assert done
        return done
    return reference.collect_rollouts(
        reference.get_env(),
        callback,
        reference.train_freq,
        reference.replay_buffer,
        reference.action_noise,
        reference.learning_starts,
    )


def runs_against_learn(
    model: Any,
    reference: Any,
    runs: tuple[bool, ...],
    n_steps: int,
    collect: Callable[[int], Any],
    *,
    exact: tuple[str, ...],
    close: tuple[str, ...] = (),
    atol: float = 1e-6,
    compare_episodes: bool = False,
    check_first_row: bool = True,
) -> None:
    """Training runs of ``model`` through the runners against SB3's own, run by run.

    For each ``reset_num_timesteps`` of ``runs``: SB3's ``_setup_learn`` + one
    ``collect_rollouts`` of ``reference`` (as ``learn()`` begins a run), then
    ``start_training(model, ...)`` and ``collect(run)`` (publish and collect through the
    runners); then every rollout buffer array named in ``exact`` equal and in ``close`` allclose
    (``rtol=1e-5``, ``atol``), ``num_timesteps`` equal, the episodes too with
    ``compare_episodes``, and, with ``check_first_row``, the first row starting every episode
    exactly at a resetting run (a case whose rollouts end at episode ends starts them anyway).
    """
    from rlightning_sb3 import start_training

    total = n_steps * model.n_envs
    compared = 0
    for run, reset in enumerate(runs):
        _, callback = reference._setup_learn(total, callback=None, reset_num_timesteps=reset)
        callback.on_training_start(locals(), globals())
        sb3_collect(reference, callback, n_steps)
        start_training(model, total, reset_num_timesteps=reset)
        collect(run)
        ours, theirs = model.rollout_buffer, reference.rollout_buffer
        for name in exact:
            np.testing.assert_array_equal(
                getattr(ours, name),
                getattr(theirs, name),
                err_msg=f"run {run}: {name}",
                strict=True,
            )
        for name in close:
            np.testing.assert_allclose(
                getattr(ours, name),
                getattr(theirs, name),
                rtol=1e-5,
                atol=atol,
                err_msg=f"run {run}: {name}",
            )
        assert model.num_timesteps == reference.num_timesteps, run
        if compare_episodes:
            assert episodes(model) == episodes(reference), f"run {run}"
            compared += len(episodes(reference))
        if check_first_row:
            first = theirs.episode_starts[0]
            # a resetting run starts every episode; a continuing one goes on mid-episode
            assert first.all() if reset else not first.all(), (run, first)
    assert compared or not compare_episodes, "no episode ended: the comparison compared nothing"


def ordered_collector(
    make_model: Callable[[], Any],
    env_fn: Callable[[], Any],
    *,
    n_runners: int,
    k: int,
    seed: int,
    rng_seed: int,
) -> tuple[Any, Any, Any]:
    """A server in the deterministic mode, ``n_runners`` runners of ``k`` envs, their Collector.

    The server acts with ``SB3BatchPolicy(make_model, seed=rng_seed)`` and ``order`` the runner
    ids; this process's global RNGs are seeded ``rng_seed`` first, as the server seeds its own
    after building its model (the reference then draws what the server draws). Runner ``r``'s
    env ``i`` is seeded ``seed + r * k + i`` (``make_vec_env(n_runners * k, seed=seed)``).

    Returns:
        ``(server, registry, collector)``.
    """
    from functools import partial

    from stable_baselines3.common.utils import set_random_seed

    import rlightning_ray
    from rlightning_ray.sb3 import SB3BatchPolicy

    set_random_seed(rng_seed)
    server, registry = rlightning_ray.start_server(
        partial(SB3BatchPolicy, make_model, seed=rng_seed),
        order=[f"runner-{r}" for r in range(n_runners)],
        num_cpus=0.5,
    )
    runners = rlightning_ray.start_runners(
        env_fn, server, n_runners=n_runners, envs_per_runner=k, seed=seed, num_cpus=0.5
    )
    return server, registry, rlightning_ray.Collector(runners)


# --- the PettingZoo collectors on Ray against their in-process oracles (tests/ray/test_pz_*.py)


def assert_buffers_equal(
    got: dict[str, np.ndarray],
    want: dict[str, np.ndarray],
    what: str,
    close: tuple[str, ...] = (),
) -> None:
    """Array for array: exact (the same kernels on the same batch shapes), but ``close``:
    allclose at rtol 1e-5 (batched kernels over a different number of columns)."""
    assert got.keys() == want.keys()
    for name in got:
        assert got[name].shape == want[name].shape, (what, name)
        if name in close:
            assert np.allclose(got[name], want[name], rtol=1e-5, atol=1e-6), (what, name)
        else:
            assert np.array_equal(got[name], want[name]), (what, name, got[name], want[name])


def episodes(model: Any) -> list[tuple[float, int]]:
    """The model's finished episodes (return, length); ``"t"`` is wall time, left out."""
    return [(e["r"], e["l"]) for e in model.ep_info_buffer]


def acting_state() -> tuple[Any, Any, Any]:
    """Python's, numpy's and torch's global generator states (an acting stream, saved)."""
    return random.getstate(), np.random.get_state(), th.get_rng_state()


def restore_acting_state(state: tuple[Any, Any, Any]) -> None:
    """Put back what :func:`acting_state` saved."""
    random.setstate(state[0])
    np.random.set_state(state[1])
    th.set_rng_state(state[2])


def two_rollouts(
    collector: Any, model: Any, buffer: Callable[[Any], dict[str, np.ndarray]], acting_seed: Any
) -> tuple[list[Any], list[dict[str, np.ndarray]]]:
    """Two ``collector.collect()`` with ``model.train()`` between; their segments and buffers.

    ``train`` runs after ``set_random_seed(99)``. In process (``acting_seed`` an int), acting and
    training share the global generators: the acting stream is seeded first and put back after
    the training, as a runner's acting stream runs on undisturbed by the learner's training
    (on Ray, ``acting_seed`` is None: the runners were given it). A Ray collector is closed.
    """
    from stable_baselines3.common.utils import set_random_seed

    from rlightning_sb3 import set_acting_seed

    try:
        if acting_seed is not None:
            set_acting_seed(acting_seed)
        segments = [collector.collect()]
        buffers = [buffer(model)]
        acting = acting_state()
        set_random_seed(99)
        model.train()  # the second rollout acts with these weights (republished on Ray)
        if acting_seed is not None:
            restore_acting_state(acting)
        segments.append(collector.collect())
        buffers.append(buffer(model))
    finally:
        if acting_seed is None:
            collector.close()
    return segments, buffers


def assert_same_rollouts(
    got: tuple[list[Any], list[dict[str, np.ndarray]]],
    want: tuple[list[Any], list[dict[str, np.ndarray]]],
    collectors: tuple[Any, Any],
    models: tuple[Any, Any],
) -> None:
    """Two rollouts of a Ray collector (``got``) == the in-process collector's (``want``).

    Buffers array for array, segments, ``num_timesteps``, episodes, ``dropped`` and per-agent
    returns; the second rollout acted with the trained weights (its values differ).
    """
    for k in range(2):
        assert_buffers_equal(got[1][k], want[1][k], f"rollout {k}")
        assert got[0][k] == want[0][k]
    ray_collector, inproc = collectors
    model, ref = models
    assert model.num_timesteps == ref.num_timesteps == 2 * ref.n_steps * ref.n_envs
    assert episodes(model) == episodes(ref) and episodes(model)
    assert ray_collector.dropped == inproc.dropped
    assert {a: list(r) for a, r in ray_collector.agent_returns.items()} == {
        a: list(r) for a, r in inproc.agent_returns.items()
    }
    assert not np.array_equal(got[1][1]["values"], want[1][0]["values"])
