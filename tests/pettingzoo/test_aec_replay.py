"""AECReplayCollector on PettingZoo's real turn-based games, against a per-agent reference.

The reference is test_aec_collector.py's: ``Logged`` wraps a real ``tictactoe_v3`` /
``connect_four_v3`` / ``rps_v2`` and logs every ``env.step``; each trained agent's transition
is taken from that log alone (``_trajectory``: its turn, the rewards summed over the env steps
up to its next selection -- its next turn, or its dead step where the game ended on another
agent's turn -- and the observation there). The replay buffer's cells must be exactly those
transitions (observation, action, reward, next observation, ``dones``, ``timeouts``), each
once, none of an opponent, and every closed transition stored but for fewer than a row's worth
waiting for the next row.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import numpy as np
import pytest
from pettingzoo.classic import connect_four_v3, rps_v2, tictactoe_v3
from rlightning_test_support import sibling
from stable_baselines3 import DQN, PPO, TD3
from stable_baselines3.common.noise import NormalActionNoise
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import AECReplayCollector
from rlightning_sb3 import finish_training, start_training

REF = sibling(__file__, "test_aec_collector.py")
Logged, Slot, _trajectory = REF.Logged, REF.Slot, REF._trajectory


def _dqn(game: Any, n_columns: int, train_freq: int, learning_starts: int) -> DQN:
    policy = "MultiInputPolicy" if game is not rps_v2 else "MlpPolicy"
    return DQN(
        policy,
        DummyVecEnv([lambda: Slot(game)] * n_columns),
        learning_starts=learning_starts,
        train_freq=train_freq,
        gradient_steps=1,
        batch_size=8,
        buffer_size=2000,
        exploration_fraction=0.5,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [16]},
    )


def _bytes(value: Any) -> bytes:
    """An observation's exact content, whatever the dtype the buffer stores it in."""
    if isinstance(value, dict):
        return b"|".join(_bytes(value[k]) for k in sorted(value))
    return np.asarray(value, dtype=np.float64).ravel().tobytes()


def _reference(envs: list[Any], trained: set[str]) -> Counter[tuple[Any, ...]]:
    """Every closed transition of a trained agent, from the logs alone."""
    found: Counter[tuple[Any, ...]] = Counter()
    for env in envs:
        for t, entry in enumerate(env.log):
            if entry["agent"] not in trained or not entry["live"]:
                continue
            ref = _trajectory(env, entry["agent"], t)
            if ref["next"] is None:  # still open: its agent was not selected again yet
                continue
            found[
                (
                    _bytes(ref["observation"]),
                    ref["action"],
                    float(np.float32(ref["reward"])),
                    _bytes(ref["next"]),
                    ref["end"] is not None,
                    ref["end"] == "truncated",
                )
            ] += 1
    return found


def _buffer(model: Any) -> Counter[tuple[Any, ...]]:
    buf = model.replay_buffer
    cells: Counter[tuple[Any, ...]] = Counter()
    for row in range(buf.pos):
        for col in range(buf.n_envs):
            if isinstance(buf.observations, dict):
                observation: Any = {k: v[row, col] for k, v in buf.observations.items()}
                nxt: Any = {k: v[row, col] for k, v in buf.next_observations.items()}
            else:
                observation, nxt = buf.observations[row, col], buf.next_observations[row, col]
            cells[
                (
                    _bytes(observation),
                    int(buf.actions[row, col, 0]),
                    float(buf.rewards[row, col]),
                    _bytes(nxt),
                    bool(buf.dones[row, col]),
                    bool(buf.timeouts[row, col]),
                )
            ] += 1
    return cells


def check_buffer(model: Any, envs: list[Any], trained: set[str]) -> int:
    """The buffer against the reference; returns the transitions waiting for a row."""
    reference, stored = _reference(envs, trained), _buffer(model)
    assert sum(stored.values()) == model.replay_buffer.pos * model.replay_buffer.n_envs
    extra = stored - reference
    assert not extra, f"cells that are no logged transition of a trained agent: {extra}"
    waiting = sum((reference - stored).values())
    assert 0 <= waiting < model.replay_buffer.n_envs + len(envs) * 2
    return waiting


def _run(
    game: Any, opponents: dict[str, Any], *, copies: int = 2, n_columns: int = 3, rollouts: int = 6
) -> tuple[DQN, list[Any], AECReplayCollector]:
    env_kwargs = {"max_cycles": 3} if game is rps_v2 else {}
    envs = [Logged(game.env(**env_kwargs)) for _ in range(copies)]
    model = _dqn(game, n_columns, train_freq=4, learning_starts=12)
    collector = AECReplayCollector(
        model, [lambda e=e: e for e in envs], opponents=opponents, seeds=list(range(copies))
    )
    trained = {a for a in envs[0].possible_agents if a not in opponents}
    total = rollouts * 4 * n_columns
    start_training(model, total)
    for _ in range(rollouts):
        stored = collector.collect()
        assert stored == 4 * n_columns  # train_freq rows of n_columns cells
        check_buffer(model, envs, trained)
        if model.num_timesteps > model.learning_starts:
            model.train(gradient_steps=1, batch_size=8)
    finish_training(model)
    assert model.num_timesteps == total == model.replay_buffer.pos * n_columns
    # DQN's epsilon as _on_step sets it from SB3's schedule at the learner's clock
    expected = model.exploration_schedule(1.0 - model.num_timesteps / total)
    assert model.exploration_rate == pytest.approx(expected)
    return model, envs, collector


@pytest.mark.parametrize("game", [tictactoe_v3, connect_four_v3], ids=["tictactoe", "connect4"])
@pytest.mark.parametrize("opponents", [{}, "random-second"], ids=["self-play", "random"])
def test_buffer_cells_are_the_trained_agents_own_transitions(game: Any, opponents: Any) -> None:
    if opponents == "random-second":
        opponents = {game.env().possible_agents[1]: "random"}
    model, _, _ = _run(game, opponents)
    buf = model.replay_buffer
    assert buf.dones[: buf.pos].any()  # games ended inside the buffer
    # a game lost on the other agent's turn: the -1 reaches the loser's last transition
    assert (buf.rewards[: buf.pos] == -1.0).any()


def test_rps_truncations_are_stored_as_time_limits() -> None:
    # rps_v2 rewards both players after the second move and truncates after max_cycles
    model, _, _ = _run(rps_v2, {})
    buf = model.replay_buffer
    assert buf.timeouts[: buf.pos].any()  # SB3's buffer bootstraps these (not terminal)
    assert (buf.dones[: buf.pos] >= buf.timeouts[: buf.pos]).all()
    assert np.count_nonzero(buf.rewards[: buf.pos]) > 0


def test_a_frozen_opponent_is_acted_and_never_stored() -> None:
    opponent = _dqn(tictactoe_v3, 1, train_freq=4, learning_starts=0)
    opponent.exploration_rate = 0.0  # a frozen greedy DQN: its own counters, never advanced
    _, envs, _ = _run(tictactoe_v3, {"player_1": opponent})
    assert any(e["agent"] == "player_1" and e["live"] for e in envs[0].log)


def test_the_reference_check_catches_a_wrong_cell() -> None:
    model, envs, _ = _run(tictactoe_v3, {}, rollouts=2)
    model.replay_buffer.rewards[0, 0] += 1.0  # one reward made up
    with pytest.raises(AssertionError, match="no logged transition"):
        check_buffer(model, envs, set(envs[0].possible_agents))


def test_episodes_reach_ep_info_buffer_per_trained_agent() -> None:
    _, envs, collector = _run(tictactoe_v3, {"player_2": "random"})
    model_returns = collector.agent_returns
    assert set(model_returns) == {"player_1"}
    assert all(r in (-1.0, 0.0, 1.0) for r in model_returns["player_1"])
    games = sum(1 for e in envs[0].log + envs[1].log if e["agent"] == "player_1" and not e["live"])
    assert len(model_returns["player_1"]) == games  # one per finished game (dead step)


def test_refusals_before_any_env_is_built() -> None:
    built: list[int] = []

    def env_fn() -> Any:
        built.append(1)
        return tictactoe_v3.env()

    ppo = PPO("MultiInputPolicy", DummyVecEnv([lambda: Slot(tictactoe_v3)]), n_steps=8)
    with pytest.raises(TypeError, match="AECReplayCollector needs an off-policy SB3 model"):
        AECReplayCollector(ppo, [env_fn])  # type: ignore[arg-type]
    box = Slot(tictactoe_v3)
    import gymnasium as gym

    box.action_space = gym.spaces.Box(-1, 1, (2,))
    td3 = TD3(
        "MultiInputPolicy",
        DummyVecEnv([lambda: box]),
        action_noise=NormalActionNoise(np.zeros(2), np.ones(2)),
    )
    with pytest.raises(ValueError, match="AECReplayCollector does not support action_noise"):
        AECReplayCollector(td3, [env_fn])
    dqn = DQN(
        "MlpPolicy",
        DummyVecEnv([lambda: Slot(rps_v2)]),
        optimize_memory_usage=True,
        replay_buffer_kwargs={"handle_timeout_termination": False},
    )
    with pytest.raises(ValueError, match="optimize_memory_usage"):
        AECReplayCollector(dqn, [env_fn])
    assert not built
    unstarted = AECReplayCollector(_dqn(tictactoe_v3, 1, 4, 0), [tictactoe_v3.env])
    with pytest.raises(ValueError, match="start_training"):
        unstarted.collect()
