"""review4: AECReplayCollector == SB3's own ``DQN.learn()`` where the two can be compared.

One copy, one buffer column, one trained seat against a ``"random"`` opponent: the collector's
rounds are then exactly SB3's steps of a single env whose ``step`` is the trained seat's move
followed by the opponent's moves (and the dead steps) up to the seat's next selection, where
``env.last()`` gives the reward, the next observation and the flags. ``_OneSeat`` is that env
(the opponent drawn from the same per-copy generator the collector seeds with the copy's
seed). ``DQN.learn()`` on it and the collector with ``learn()``'s train calls must give the
same buffer array for array, the same counters, exploration rate and weights: this checks the
exploration (warm-up draws, epsilon at each act: ``num_timesteps`` as SB3 reads it), the
target updates, ``train_freq`` in steps and in episodes (``gradient_steps=-1``: the stored
count), rewards across game resets and the dead steps, against SB3's own code.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from pettingzoo.classic import connect_four_v3, tictactoe_v3
from stable_baselines3 import DQN
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import AECReplayCollector
from rlightning_sb3 import finish_training, start_training

_SEED = 3


class _OneSeat(gym.Env[Any, Any]):
    """``game`` as ``seat``'s env: the random opponent's turns and the dead steps in ``step``."""

    def __init__(self, game: Any, seat: str) -> None:
        self.env = game.env()
        self.seat = seat
        self.observation_space = self.env.observation_space(seat)
        self.action_space = self.env.action_space(seat)
        self.rng = np.random.default_rng(_SEED)  # the collector's per-copy generator
        self.first = True

    def _advance(self) -> tuple[Any, float, bool, bool]:
        env = self.env
        while True:
            if not env.agents:
                env.reset()  # the collector resets a finished copy without a seed
                continue
            observation, reward, terminated, truncated, _ = env.last()
            if env.agent_selection == self.seat:
                return observation, float(reward), bool(terminated), bool(truncated)
            if terminated or truncated:
                env.step(None)  # the opponent's dead step
                continue
            legal = np.flatnonzero(observation["action_mask"])
            env.step(np.int64(self.rng.choice(legal)))

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        if self.first:
            self.env.reset(seed=_SEED)
            self.first = False
        observation, _, terminated, truncated = self._advance()
        assert not (terminated or truncated)
        return observation, {}

    def step(self, action: Any) -> Any:
        self.env.step(int(action))
        observation, reward, terminated, truncated = self._advance()
        if terminated or truncated:
            self.env.step(None)  # the seat's dead step
        return observation, reward, terminated, truncated, {}


class _Slot(gym.Env[Any, Any]):
    def __init__(self, game: Any, seat: str) -> None:
        env = game.env()
        self.observation_space = env.observation_space(seat)
        self.action_space = env.action_space(seat)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        return self.observation_space.sample(), {}


@pytest.mark.parametrize(
    ("game", "seat"),
    [
        (tictactoe_v3, "player_1"),
        (tictactoe_v3, "player_2"),
        (connect_four_v3, "player_0"),
        (connect_four_v3, "player_1"),
    ],
    ids=["ttt-first", "ttt-second", "c4-first", "c4-second"],
)
@pytest.mark.parametrize("train_freq", [3, (2, "episode")], ids=["steps", "episodes"])
def test_one_copy_one_column_equals_dqn_learn(game: Any, seat: str, train_freq: Any) -> None:
    opponent = next(a for a in game.env().possible_agents if a != seat)
    gradient_steps = -1 if isinstance(train_freq, tuple) else 2
    kwargs: dict[str, Any] = {
        "learning_starts": 20,
        "train_freq": train_freq,
        "gradient_steps": gradient_steps,
        "batch_size": 8,
        "buffer_size": 500,
        "exploration_fraction": 0.5,
        "target_update_interval": 10,
        "seed": 0,
        "device": "cpu",
        "policy_kwargs": {"net_arch": [16]},
    }
    total = 120
    reference = DQN("MultiInputPolicy", DummyVecEnv([lambda: _OneSeat(game, seat)]), **kwargs)
    reference.learn(total)

    model = DQN("MultiInputPolicy", DummyVecEnv([lambda: _Slot(game, seat)]), **kwargs)
    collector = AECReplayCollector(model, [game.env], opponents={opponent: "random"}, seeds=[_SEED])
    start_training(model, total)
    while model.num_timesteps < total:  # learn()'s loop
        stored = collector.collect()
        if model.num_timesteps > model.learning_starts:
            steps = gradient_steps if gradient_steps >= 0 else stored
            if steps > 0:
                model.train(gradient_steps=steps, batch_size=model.batch_size)
    finish_training(model)

    ref_buf, buf = reference.replay_buffer, model.replay_buffer
    assert buf.pos == ref_buf.pos
    assert buf.dones[: buf.pos].any()
    for field in ("actions", "rewards", "dones", "timeouts"):
        np.testing.assert_array_equal(getattr(buf, field), getattr(ref_buf, field), err_msg=field)
    for key in ref_buf.observations:
        np.testing.assert_array_equal(buf.observations[key], ref_buf.observations[key])
        np.testing.assert_array_equal(buf.next_observations[key], ref_buf.next_observations[key])
    assert model.num_timesteps == reference.num_timesteps
    assert model._episode_num == reference._episode_num
    assert model._n_updates == reference._n_updates
    assert model.exploration_rate == reference.exploration_rate
    for ours, theirs in zip(model.policy.parameters(), reference.policy.parameters(), strict=True):
        assert th.equal(ours, theirs)


class _SeededSeat(_OneSeat):
    """``_OneSeat`` of copy ``k``: first reset and random opponent seeded with its seed."""

    def __init__(self, game: Any, seat: str, seed: int) -> None:
        super().__init__(game, seat)
        self.rng = np.random.default_rng(seed)
        self.seed_ = seed

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        if self.first:
            self.env.reset(seed=self.seed_)
            self.first = False
        return super().reset()


@pytest.mark.parametrize(
    ("algorithm", "game", "seat", "copies"),
    [
        ("ppo", tictactoe_v3, "player_1", 2),
        ("recurrent", tictactoe_v3, "player_1", 3),
        ("recurrent", connect_four_v3, "player_1", 3),
        ("dqn", tictactoe_v3, "player_2", 3),
    ],
    ids=["ppo-ttt", "recurrent-ttt", "recurrent-c4-second", "dqn-ttt-second"],
)
def test_copies_with_one_trained_seat_each_equal_learn_over_a_vec_env_of_the_seats(
    algorithm: str, game: Any, seat: str, copies: int
) -> None:
    # one trained seat per copy, as many columns as copies: every round acts every copy's turn
    # in one forward pass, exactly SB3's steps over a DummyVecEnv of the seats' envs (the
    # RecurrentPPO's LSTM states and episode starts, the rollout's last values, DQN's rows)
    from sb3_contrib import RecurrentPPO
    from stable_baselines3 import PPO

    from rlightning_pettingzoo import AECRolloutCollector

    opponent = next(a for a in game.env().possible_agents if a != seat)
    seeds = [10 + c for c in range(copies)]
    seats = [lambda s=s: _SeededSeat(game, seat, s) for s in seeds]
    slots = [lambda: _Slot(game, seat)] * copies
    fields = ["actions", "rewards"]
    if algorithm == "dqn":
        kwargs: dict[str, Any] = {
            "learning_starts": 20,
            "train_freq": 3,
            "gradient_steps": 2,
            "batch_size": 8,
            "buffer_size": 500,
            "exploration_fraction": 0.5,
            "target_update_interval": 10,
            "seed": 0,
            "device": "cpu",
            "policy_kwargs": {"net_arch": [16]},
        }
        total = 126
        reference: Any = DQN("MultiInputPolicy", DummyVecEnv(seats), **kwargs)
        reference.learn(total)
        model: Any = DQN("MultiInputPolicy", DummyVecEnv(slots), **kwargs)
        replay = AECReplayCollector(
            model, [game.env] * copies, opponents={opponent: "random"}, seeds=seeds
        )
        start_training(model, total)
        while model.num_timesteps < total:
            replay.collect()
            if model.num_timesteps > model.learning_starts:
                model.train(gradient_steps=2, batch_size=8)
        ours, theirs = model.replay_buffer, reference.replay_buffer
        fields += ["dones", "timeouts"]
    else:
        cls: Any = RecurrentPPO if algorithm == "recurrent" else PPO
        policy = "MultiInputLstmPolicy" if cls is RecurrentPPO else "MultiInputPolicy"
        net: dict[str, Any] = {"net_arch": [16]}
        if cls is RecurrentPPO:
            net["lstm_hidden_size"] = 8
        kwargs = {
            "n_steps": 8,
            "batch_size": 8,
            "n_epochs": 2,
            "seed": 0,
            "device": "cpu",
            "policy_kwargs": net,
        }
        total = 8 * copies * 3
        reference = cls(policy, DummyVecEnv(seats), **kwargs)
        reference.learn(total)
        model = cls(policy, DummyVecEnv(slots), **kwargs)
        rollout = AECRolloutCollector(
            model, [game.env] * copies, opponents={opponent: "random"}, seeds=seeds
        )
        start_training(model, total)
        while model.num_timesteps < total:
            rollout.collect()
            model.train()
        ours, theirs = model.rollout_buffer, reference.rollout_buffer
        fields += ["episode_starts", "values", "log_probs", "advantages", "returns"]
        if cls is RecurrentPPO:
            fields += ["hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf"]
    finish_training(model)
    assert model.num_timesteps == reference.num_timesteps
    for field in fields:  # one batch shape on both sides: the same kernels, exact
        np.testing.assert_array_equal(getattr(ours, field), getattr(theirs, field), err_msg=field)
    for key in theirs.observations:
        np.testing.assert_array_equal(ours.observations[key], theirs.observations[key])
    for mine, ref in zip(model.policy.parameters(), reference.policy.parameters(), strict=True):
        assert th.equal(mine, ref)
