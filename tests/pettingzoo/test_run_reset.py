"""A second training run that resets the env resets the collectors' copies: SB3's learn() as oracle.

``BaseAlgorithm._setup_learn`` resets the model's VecEnv when a run begins with
``reset_num_timesteps=True`` (``VecEnv.reset``: every env, without the seeds, which were used
once; ``VecMonitor.reset``: the episodes' returns so far forgotten; ``_last_episode_starts`` all
True) and continues the episodes with ``reset_num_timesteps=False``. The reference is SB3's own
``learn()``, twice, over a VecEnv of the same PettingZoo env (one slot per agent:
``benchmarks.agents_vec_env.AgentsVecEnv`` for simple_spread; one seat per copy against a random
opponent for tictactoe, as tests/pettingzoo/test_review4_aec_replay_learn.py builds it), in a
``VecMonitor`` for the episode infos; ours is two ``start_training`` runs of ``collect()`` and
``train()`` over the collector's copies. Every rollout buffer at each rollout's end, the replay
buffer, ``num_timesteps``, ``ep_info_buffer`` and the weights after training must be SB3's. The
first run ends mid-episode (n_steps=8, episodes of 5) or exactly at an episode's end (n_steps=5:
SB3's VecEnv reset the envs there already, then ``_setup_learn`` resets them again).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from benchmarks.agents_vec_env import AgentsVecEnv
from mpe2 import simple_spread_v3
from pettingzoo.classic import tictactoe_v3
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.vec_env import DummyVecEnv, VecMonitor

from rlightning_pettingzoo import (
    AECReplayCollector,
    AECRolloutCollector,
    SharedReplayCollector,
    SharedRolloutCollector,
)
from rlightning_sb3 import (
    acting_state,
    finish_training,
    start_training,
    training_reset_run_id,
    training_run_id,
)

ROLLOUT_FIELDS = (
    "observations",
    "actions",
    "rewards",
    "episode_starts",
    "values",
    "log_probs",
    "advantages",
    "returns",
)
RECURRENT_FIELDS = ("hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf")
REPLAY_FIELDS = ("observations", "next_observations", "actions", "rewards", "dones", "timeouts")


class _Slot(gym.Env[Any, Any]):
    """One agent's spaces, for the collector's model (sizes the buffer; never stepped)."""

    def __init__(self, observation_space: Any, action_space: Any) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("never stepped")


class _Seat(gym.Env[Any, Any]):
    """tictactoe as player_2's env against a random player_1 drawn from the copy's generator.

    The first reset is seeded with the copy's seed, every later one unseeded (a VecEnv's
    seeds are used once): the collector's copy, given ``seeds=[seed, ...]``.
    """

    def __init__(self, seed: int) -> None:
        self.env = tictactoe_v3.env()
        self.observation_space = self.env.observation_space("player_2")
        self.action_space = self.env.action_space("player_2")
        self.rng = np.random.default_rng(seed)  # the collector's per-copy generator
        self.seed_: int | None = seed

    def _advance(self) -> tuple[Any, float, bool, bool]:
        env = self.env
        while True:
            observation, reward, terminated, truncated, _ = env.last()
            if env.agent_selection == "player_2":
                return observation, float(reward), bool(terminated), bool(truncated)
            if terminated or truncated:
                env.step(None)  # the opponent's dead step
                continue
            env.step(np.int64(self.rng.choice(np.flatnonzero(observation["action_mask"]))))

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        self.env.reset(seed=self.seed_)
        self.seed_ = None
        return self._advance()[0], {}

    def step(self, action: Any) -> Any:
        self.env.step(int(action))
        observation, reward, terminated, truncated = self._advance()
        if terminated or truncated:
            self.env.step(None)  # the seat's dead step: the game is over
        return observation, reward, terminated, truncated, {}


class _Snapshots(BaseCallback):
    """The rollout buffer at each ``on_rollout_end`` (returns and advantages computed)."""

    def __init__(self, fields: tuple[str, ...]) -> None:
        super().__init__()
        self.fields = fields
        self.rollouts: list[dict[str, np.ndarray]] = []

    def _on_step(self) -> bool:
        return True

    def _on_rollout_end(self) -> None:
        self.rollouts.append(_buffer(self.model, self.fields))


def _buffer(model: Any, fields: tuple[str, ...]) -> dict[str, Any]:
    buf = model.rollout_buffer
    out: dict[str, Any] = {}
    for name in fields:
        value = getattr(buf, name)
        if isinstance(value, dict):
            out.update({f"{name}[{k}]": v.copy() for k, v in value.items()})
        else:
            out[name] = value.copy()
    return out


def _episodes(model: BaseAlgorithm) -> list[tuple[float, int]]:
    """``ep_info_buffer`` without the wall-clock times (returns as VecMonitor's float32)."""
    assert model.ep_info_buffer is not None
    return [(round(float(np.float32(e["r"])), 4), int(e["l"])) for e in model.ep_info_buffer]


def _case(name: str, n_steps: int) -> dict[str, Any]:
    """The reference VecEnv, the collector, the model's class and arguments of a case."""
    net: dict[str, Any] = {"net_arch": [16]}
    if name.endswith("parallel"):
        copies, policy = 2, "MlpPolicy"

        def make() -> Any:
            return simple_spread_v3.parallel_env(max_cycles=5)

        reference_env: Any = VecMonitor(AgentsVecEnv(make, copies))
        spaces = make()
        space = (spaces.observation_space("agent_0"), spaces.action_space("agent_0"))
        columns = reference_env.num_envs

        def collector(model: Any) -> Any:
            cls = SharedRolloutCollector if name.startswith("ppo") else SharedReplayCollector
            return cls(model, [make] * copies, seeds=list(range(copies)))

    else:
        copies = columns = 2
        policy = "MultiInputPolicy"
        seeds = [10 + c for c in range(copies)]
        reference_env = VecMonitor(DummyVecEnv([lambda s=s: _Seat(s) for s in seeds]))
        game = tictactoe_v3.env()
        space = (game.observation_space("player_2"), game.action_space("player_2"))

        def collector(model: Any) -> Any:
            cls = (
                AECRolloutCollector if name.startswith(("ppo", "recurrent")) else AECReplayCollector
            )
            return cls(
                model, [tictactoe_v3.env] * copies, opponents={"player_1": "random"}, seeds=seeds
            )

    algorithm: Any
    if name.startswith("dqn"):
        algorithm = DQN
        kwargs: dict[str, Any] = {
            "learning_starts": 20,
            "train_freq": 4,
            "batch_size": 8,
            "buffer_size": 1000,
            "target_update_interval": 10,
            "exploration_fraction": 0.5,
        }
        total = 3 * 4 * columns
    else:
        if name.startswith("recurrent"):
            from sb3_contrib import RecurrentPPO

            algorithm, policy = RecurrentPPO, "MultiInputLstmPolicy"
            net["lstm_hidden_size"] = 8
        else:
            algorithm = PPO
        kwargs = {"n_steps": n_steps, "batch_size": 2 * n_steps, "n_epochs": 1}
        total = n_steps * columns
    kwargs.update(seed=0, device="cpu", policy_kwargs=net)
    slots = DummyVecEnv([lambda: _Slot(*space)] * columns)
    return {
        "algorithm": algorithm,
        "policy": policy,
        "kwargs": kwargs,
        "reference_env": reference_env,
        "slots": slots,
        "collector": collector,
        "total": total,
    }


def _reference(case: dict[str, Any], reset: bool, fields: tuple[str, ...]) -> dict[str, Any]:
    model = case["algorithm"](case["policy"], case["reference_env"], **case["kwargs"])
    snapshots = _Snapshots(fields)
    callback = None if isinstance(model, OffPolicyAlgorithm) else snapshots
    runs = []
    for flag in (True, reset):
        model.learn(case["total"], callback=callback, reset_num_timesteps=flag)
        runs.append((model.num_timesteps, _episodes(model)))
    return {"model": model, "rollouts": snapshots.rollouts, "runs": runs}


def _ours(case: dict[str, Any], reset: bool, fields: tuple[str, ...]) -> dict[str, Any]:
    model = case["algorithm"](case["policy"], case["slots"], **case["kwargs"])
    collector: Callable[[Any], Any] = case["collector"]
    made = collector(model)
    rollouts, runs, reset_ids = [], [], []
    for flag in (True, reset):
        start_training(model, case["total"], reset_num_timesteps=flag)
        reset_ids.append(training_reset_run_id(model))
        while model.num_timesteps < model._total_timesteps:  # learn()'s loop
            if isinstance(model, OffPolicyAlgorithm):
                made.collect()
                if model.num_timesteps > model.learning_starts:
                    model.train(gradient_steps=model.gradient_steps, batch_size=model.batch_size)
            else:
                made.collect()
                rollouts.append(_buffer(model, fields))
                model.train()
        finish_training(model)
        runs.append((model.num_timesteps, _episodes(model)))
    return {"model": model, "rollouts": rollouts, "runs": runs, "reset_ids": reset_ids}


@pytest.mark.parametrize("reset", [True, False], ids=["reset", "continue"])
@pytest.mark.parametrize(
    ("name", "n_steps"),
    [
        ("ppo-parallel", 8),
        ("ppo-parallel", 5),
        ("dqn-parallel", 0),
        ("ppo-aec", 8),
        ("dqn-aec", 0),
        ("recurrent-aec", 6),
    ],
    ids=[
        "ppo-parallel",
        "ppo-parallel-at-episode-end",
        "dqn-parallel",
        "ppo-aec",
        "dqn-aec",
        "recurrent-aec",
    ],
)
def test_two_runs_equal_two_learn_calls(name: str, n_steps: int, reset: bool) -> None:
    fields = ROLLOUT_FIELDS + (RECURRENT_FIELDS if name.startswith("recurrent") else ())
    theirs = _reference(_case(name, n_steps), reset, fields)
    ours = _ours(_case(name, n_steps), reset, fields)
    mine, ref = ours["model"], theirs["model"]
    first, second = ours["reset_ids"]
    assert first is not None and (second != first if reset else second == first)
    assert ours["runs"] == theirs["runs"]
    assert len(ours["rollouts"]) == len(theirs["rollouts"])
    for t, (a, b) in enumerate(zip(ours["rollouts"], theirs["rollouts"], strict=True)):
        for key in b:
            np.testing.assert_array_equal(a[key], b[key], err_msg=f"rollout {t} {key}")
    if isinstance(ref, OffPolicyAlgorithm):
        a_buf, b_buf = mine.replay_buffer, ref.replay_buffer
        assert a_buf.pos == b_buf.pos
        for field in REPLAY_FIELDS:
            x, y = getattr(a_buf, field), getattr(b_buf, field)
            for key in y if isinstance(y, dict) else [None]:
                np.testing.assert_array_equal(
                    x if key is None else x[key], y if key is None else y[key], err_msg=field
                )
        assert mine.exploration_rate == ref.exploration_rate
        assert mine._n_updates == ref._n_updates > 0
    for (key, p), (_, q) in zip(
        mine.policy.state_dict().items(), ref.policy.state_dict().items(), strict=True
    ):
        assert th.equal(p, q), key
    # the replicas' view: the published state carries the latest resetting run
    state = acting_state(mine)
    assert state.reset_run_id == second
    assert state.run_id == training_run_id(mine)


def test_reset_run_id_of_runs_begun_by_learn() -> None:
    """``learn()`` itself is not seen; the id depends only on ``start_training``'s records."""
    env = DummyVecEnv([lambda: gym.make("CartPole-v1")])
    model = PPO("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=1, device="cpu")
    twin = PPO("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=1, device="cpu")
    assert training_reset_run_id(model) is None
    model.learn(16)
    assert training_reset_run_id(model) is None  # no start_training run yet
    start_training(model, 16, reset_num_timesteps=False)  # learn() left a _last_obs: continues
    assert training_reset_run_id(model) is None
    start_training(model, 16)
    first = training_reset_run_id(model)
    assert first == training_run_id(model)
    # the same history on two models, one queried in between and one not: the same answers
    for queried in (model, twin):
        if queried is twin:
            twin.learn(16)
            start_training(twin, 16)
            first = training_reset_run_id(twin)
        queried.learn(16)  # resets, unseen
        if queried is model:
            assert training_reset_run_id(model) == first
        queried.learn(16, reset_num_timesteps=False)
        assert training_reset_run_id(queried) == first != training_run_id(queried)
        start_training(queried, 16, reset_num_timesteps=False)
        assert training_reset_run_id(queried) == first != training_run_id(queried)
    collected = PPO("MlpPolicy", env, n_steps=16, batch_size=16, n_epochs=1, device="cpu")
    start_training(collected, 16)
    # steps collected without counting them leave num_timesteps at 0: a learn() that continues
    # from there is not taken for a reset
    collected.learn(16, reset_num_timesteps=False)
    start_training(collected, 16, reset_num_timesteps=False)
    assert training_reset_run_id(collected) not in (None, training_run_id(collected))


def test_group_collector_resets_once_every_group_began_a_resetting_run() -> None:
    """The groups' models share the copies: reset once each began a resetting run since."""
    from rlightning_pettingzoo import GroupRolloutCollector

    def make() -> Any:
        return simple_spread_v3.parallel_env(max_cycles=5)

    copies, n_steps = 2, 4
    groups = {"agent_0": "a", "agent_1": "b", "agent_2": "b"}
    spaces = make()
    space = (spaces.observation_space("agent_0"), spaces.action_space("agent_0"))
    models = {
        g: PPO(
            "MlpPolicy",
            DummyVecEnv([lambda: _Slot(*space)] * (copies * n)),
            n_steps=n_steps,
            batch_size=n_steps * copies * n,
            seed=k,
            device="cpu",
            policy_kwargs={"net_arch": [8]},
        )
        for k, (g, n) in enumerate([("a", 1), ("b", 2)])
    }
    collector = GroupRolloutCollector(models, [make] * copies, group_of=groups, seeds=[0, 1])

    def run(resets: dict[str, bool]) -> dict[str, np.ndarray]:
        for g, model in models.items():
            start_training(model, n_steps * model.n_envs, reset_num_timesteps=resets[g])
        segments = collector.collect()
        for model in models.values():
            finish_training(model)
        steps = {
            g: np.array([s.env_steps[0] for s in segments[g] if s.start_row == 0]) for g in models
        }
        return {g: models[g].rollout_buffer.episode_starts[0] for g in models} | {
            f"{g}-steps": steps[g] for g in models
        }

    first = run({"a": True, "b": True})
    assert all(first[g].all() for g in models)
    # only a's run reset: the copies continue (copy step 4 of episodes of 5), a's reset waits
    second = run({"a": True, "b": False})
    assert not any(second[g].any() for g in models)
    assert (second["a-steps"] == n_steps).all()
    # now b's run resets too: every group's model began a resetting run since the last reset
    third = run({"a": False, "b": True})
    assert all(third[g].all() for g in models)
    # a continuing run of both continues
    fourth = run({"a": False, "b": False})
    assert not any(fourth[g].any() for g in models)


def test_rollout_recorders_refuse_reset_runs_that_do_not_fit() -> None:
    """A recorder's ``record(reset_runs)`` (what a Ray runner is sent) is checked, named."""
    from rlightning_pettingzoo import GroupRolloutRecorder, RolloutRecorder

    make = partial(simple_spread_v3.parallel_env, max_cycles=5)
    spaces = make()
    space = (spaces.observation_space("agent_0"), spaces.action_space("agent_0"))

    def ppo(n_envs: int) -> PPO:
        slots = DummyVecEnv([lambda: _Slot(*space)] * n_envs)
        return PPO("MlpPolicy", slots, n_steps=2, batch_size=2 * n_envs, seed=0, device="cpu")

    recorder = RolloutRecorder(ppo(3), [make], seeds=[0])
    with pytest.raises(ValueError, match=r"RolloutRecorder.record: reset_runs must hold one"):
        recorder.record([1, 2])
    with pytest.raises(TypeError, match=r"reset_runs\[0\] must be None or an int.*bool"):
        recorder.record([True])
    assert recorder.record([None]).n_rows == 2  # None: the learner never began a resetting run
    groups = {"agent_0": "a", "agent_1": "b", "agent_2": "b"}
    group_recorder = GroupRolloutRecorder(
        {"a": ppo(1), "b": ppo(2)}, [make], group_of=groups, seeds=[0]
    )
    with pytest.raises(ValueError, match=r"must map every group \['a', 'b'\].*\['a'\]"):
        group_recorder.record({"a": 1})
    with pytest.raises(TypeError, match=r"reset_runs\['b'\] must be None or an int.*str"):
        group_recorder.record({"a": 1, "b": "2"})
    assert set(group_recorder.record({"a": 1, "b": 2})) == {"a", "b"}
