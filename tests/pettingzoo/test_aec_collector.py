"""AECRolloutCollector on PettingZoo's real turn-based games, against a per-agent reference.

``Logged`` wraps a real ``tictactoe_v3`` / ``connect_four_v3`` (PettingZoo's own ``BaseWrapper``)
and logs every ``env.step``: who was selected, what it observed, the action, and the env's
``rewards``, ``terminations`` and ``truncations`` after the step. The reference takes each
trained agent's trajectory from that log alone: its turns, each transition's reward summed
over the env steps from its turn up to its next selection (its next turn, or its dead step
where the game ended on the other agent's turn: PettingZoo's ``_accumulate_rewards``), and
computes SB3's GAE on each segment (``RolloutBuffer.compute_returns_and_advantage``'s formula,
with ``collect_rollouts``' time-limit bootstrap where the rollout cuts a segment in a column).
The buffer must equal it: observations, actions, masks and rewards exactly, advantages and
returns allclose (the critic's values of single observations and of batches come from
different float kernels).
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import torch as th
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pettingzoo.classic import connect_four_v3, rps_v2, tictactoe_v3
from pettingzoo.utils import BaseWrapper
from sb3_contrib import MaskablePPO
from stable_baselines3 import PPO
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import AECRolloutCollector, Segment
from rlightning_sb3 import finish_training, start_training


class Logged(BaseWrapper[Any, Any, Any]):  # type: ignore[misc]
    """A real AEC env that logs every step (index = the collector's ``env_steps``)."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.log: list[dict[str, Any]] = []

    def step(self, action: Any) -> None:
        agent = self.agent_selection
        observation = self.observe(agent)
        live = not (self.terminations[agent] or self.truncations[agent])
        super().step(action)
        self.log.append(
            {
                "agent": agent,
                "observation": observation,
                "action": action,
                "live": live,
                "rewards": dict(self.rewards),
                "terminations": dict(self.terminations),
                "truncations": dict(self.truncations),
            }
        )


class Slot(gym.Env[Any, Any]):
    """One seat's spaces, for the model's VecEnv (sizes the buffer; never stepped)."""

    def __init__(self, game: Any) -> None:
        env = game.env()
        self.observation_space = env.observation_space(env.possible_agents[0])
        self.action_space = env.action_space(env.possible_agents[0])

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("Slot is never stepped")


def _model(game: Any, n_steps: int, n_columns: int, seed: int = 0) -> MaskablePPO:
    return MaskablePPO(
        "MultiInputPolicy",
        DummyVecEnv([lambda: Slot(game)] * n_columns),
        n_steps=n_steps,
        batch_size=n_steps * n_columns,
        seed=seed,
        device="cpu",
    )


def _trajectory(env: Logged, agent: str, t: int) -> dict[str, Any]:
    """The transition of ``agent`` acted at env step ``t``, from the log (and, for the last
    one, the selection the copy waits at)."""
    log = env.log
    entry = log[t]
    assert entry["agent"] == agent and entry["live"], (t, entry["agent"])
    reward = 0.0
    u = t
    while True:
        if log[u]["live"]:  # PettingZoo accumulates rewards on live steps; dead steps add none
            reward += float(log[u]["rewards"].get(agent, 0.0))
        u += 1
        if u >= len(log) or log[u]["agent"] == agent:
            break
    if u < len(log):
        nxt: dict[str, Any] | None = log[u]
    elif env.agents and env.agent_selection == agent:  # the copy waits at this agent's selection
        done = env.terminations[agent] or env.truncations[agent]
        nxt = {"observation": env.observe(agent), "live": not done}
    else:
        nxt = None
    end = None
    if nxt is not None and not nxt["live"]:
        end = "terminated" if log[u - 1]["terminations"][agent] else "truncated"
    return {
        "observation": entry["observation"],
        "action": int(entry["action"]),
        "reward": reward,
        "end": end,
        "next": None if nxt is None else nxt["observation"],
    }


def _values(model: Any, observations: list[Any]) -> np.ndarray:
    if isinstance(observations[0], dict):
        batch: Any = {k: np.stack([o[k] for o in observations]) for k in observations[0]}
    else:
        batch = np.stack([np.asarray(o) for o in observations])
    with th.no_grad():
        obs, _ = model.policy.obs_to_tensor(batch)
        return np.asarray(model.policy.predict_values(obs).cpu().numpy().reshape(-1))


def check_rollout(
    model: Any, envs: list[Logged], segments: list[Segment], opponents: dict[str, Any]
) -> dict[str, int]:
    """The buffer against the per-agent reference; returns counts for hypothesis' events."""
    buf = model.rollout_buffer
    gamma, lam = model.gamma, model.gae_lambda
    n_rows = buf.buffer_size
    seen = {"rows": 0, "lost_on_other_turn": 0, "cut": 0, "truncated": 0}
    covered = np.zeros((n_rows, buf.n_envs), dtype=int)
    for seg in segments:
        assert seg.agent_id not in opponents  # no row for an opponent's turn
        log = envs[seg.env_index].log
        rows = range(seg.start_row, seg.stop_row)
        steps = [
            u for u, e in enumerate(log) if e["agent"] == seg.agent_id and e["live"]
        ]  # the agent's turns
        k0 = steps.index(seg.env_steps[0])
        assert list(seg.env_steps) == steps[k0 : k0 + len(seg.env_steps)]  # consecutive turns
        refs = [_trajectory(envs[seg.env_index], seg.agent_id, t) for t in seg.env_steps]
        assert all(r["end"] is None for r in refs[:-1])
        last = refs[-1]
        assert seg.end == ("cut" if last["end"] is None else last["end"])
        assert last["next"] is not None  # every stored transition was closed by the env
        values = buf.values[seg.start_row : seg.stop_row, seg.column].copy()
        np.testing.assert_allclose(
            values, _values(model, [r["observation"] for r in refs]), rtol=1e-5, atol=1e-5
        )
        rewards = np.array([r["reward"] for r in refs], dtype=np.float32)
        bootstrap = 0.0 if last["end"] == "terminated" else float(_values(model, [last["next"]])[0])
        stored = rewards.copy()
        if last["end"] == "truncated" or (last["end"] is None and seg.stop_row < n_rows):
            stored[-1] += np.float32(gamma * bootstrap)  # collect_rollouts' time-limit bootstrap
        # SB3's GAE on this segment alone: a truncation ends it with reward + gamma * V(final)
        advantages = np.zeros(len(refs), dtype=np.float64)
        gae_rewards = rewards.astype(np.float64)
        if last["end"] == "truncated":
            gae_rewards[-1] += gamma * bootstrap
        gae, next_value, non_terminal = 0.0, bootstrap, 0.0 if last["end"] else 1.0
        for k in reversed(range(len(refs))):
            delta = gae_rewards[k] + gamma * next_value * non_terminal - values[k]
            gae = delta + gamma * lam * non_terminal * gae
            advantages[k] = gae
            next_value, non_terminal = values[k], 1.0
        for k, (row, ref) in enumerate(zip(rows, refs, strict=True)):
            covered[row, seg.column] += 1
            observation = ref["observation"]
            if isinstance(observation, dict):
                for key in ("observation", "action_mask"):
                    np.testing.assert_array_equal(
                        buf.observations[key][row, seg.column], observation[key]
                    )
            elif np.ndim(observation):  # a Box observation (MPE's AEC envs)
                np.testing.assert_array_equal(buf.observations[row, seg.column], observation)
            else:  # a Discrete observation: SB3 stores it as shape (1,)
                assert buf.observations[row, seg.column].tolist() == [observation]
            assert int(buf.actions[row, seg.column, 0]) == ref["action"]
            if hasattr(buf, "action_masks"):
                np.testing.assert_array_equal(
                    buf.action_masks[row, seg.column], observation["action_mask"].astype(bool)
                )
            if k < len(refs) - 1 or stored[-1] == rewards[-1]:
                assert buf.rewards[row, seg.column] == np.float32(ref["reward"])
            else:
                np.testing.assert_allclose(buf.rewards[row, seg.column], stored[-1], rtol=1e-5)
            starts = k == 0 and (row > 0 or _first_turn(log, seg.agent_id, seg.env_steps[0]))
            assert bool(buf.episode_starts[row, seg.column]) == starts
        np.testing.assert_allclose(buf.advantages[rows, seg.column], advantages, atol=1e-5)
        np.testing.assert_allclose(
            buf.returns[rows, seg.column], advantages + values, rtol=1e-5, atol=1e-5
        )
        own_move = log[seg.env_steps[-1]]["rewards"][seg.agent_id]
        if last["end"] == "terminated" and own_move == 0 and last["reward"] == -1.0:
            seen["lost_on_other_turn"] += 1  # lost on the other agent's turn: its -1 closes it
        seen["cut"] += seg.end == "cut"
        seen["truncated"] += seg.end == "truncated"
        seen["rows"] += len(refs)
    assert (covered == 1).all()  # every cell once
    return seen


def _first_turn(log: list[dict[str, Any]], agent: str, t: int) -> bool:
    """Whether env step ``t`` is ``agent``'s first turn of its game."""
    for u in range(t - 1, -1, -1):
        if log[u]["agent"] == agent:
            return not log[u]["live"]  # its previous selection was its dead step
    return True


def _collect(
    game: Any,
    n_steps: int,
    copies: int,
    seeds: list[int],
    opponents: dict[str, Any],
    rollouts: int,
) -> tuple[dict[str, int], AECRolloutCollector]:
    model = _model(game, n_steps, copies)
    envs = [Logged(game.env()) for _ in range(copies)]
    collector = AECRolloutCollector(
        model, [lambda e=e: e for e in envs], opponents=opponents, seeds=seeds
    )
    totals = {"rows": 0, "lost_on_other_turn": 0, "cut": 0, "truncated": 0, "dropped": 0}
    for _ in range(rollouts):
        segments = collector.collect(update_model=False)
        for key, value in check_rollout(model, envs, segments, opponents).items():
            totals[key] += value
        totals["dropped"] += collector.dropped
        if not opponents:
            assert collector.dropped <= copies * (len(envs[0].possible_agents) - 1)
        else:
            assert collector.dropped == 0  # opponents' turns are stepped, no learner's turn
    return totals, collector


@pytest.mark.parametrize("game", [tictactoe_v3, connect_four_v3], ids=["tictactoe", "connect4"])
@pytest.mark.parametrize("seat", [None, 0, 1], ids=["self-play", "random-first", "random-second"])
def test_buffer_equals_each_agents_own_trajectory(game: Any, seat: int | None) -> None:
    opponents = {} if seat is None else {game.env().possible_agents[seat]: "random"}
    totals, _ = _collect(game, 24, 2, [0, 1], opponents, rollouts=3)
    assert totals["rows"] == 3 * 24 * 2
    assert totals["lost_on_other_turn"] > 0  # a game lost on the other's turn: its -1 is stored
    if not opponents:
        assert totals["dropped"] > 0  # self-play: the last open transitions are closed unstored


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    n_steps=st.integers(2, 12),
    copies=st.integers(1, 3),
    opponents=st.sampled_from([{}, {"player_1": "random"}, {"player_2": "random"}]),
)
def test_reference_holds_over_seeds_steps_and_copies(
    seed: int, n_steps: int, copies: int, opponents: dict[str, Any]
) -> None:
    # tictactoe_v3 names its seats player_1 and player_2
    seeds = [seed + c for c in range(copies)]
    totals, _ = _collect(tictactoe_v3, n_steps, copies, seeds, opponents, rollouts=2)
    assert totals["rows"] == 2 * n_steps * copies
    event(f"cut segments: {totals['cut'] > 0}")
    event(f"lost on the other's turn: {totals['lost_on_other_turn'] > 0}")


@pytest.mark.parametrize("opponents", [{}, {"player_1": "random"}], ids=["self-play", "random"])
def test_rewards_of_every_round_and_truncation_follow_last(opponents: dict[str, Any]) -> None:
    # rps_v2 rewards both players after the second one's move (the first one's reward comes on
    # the other's turn), zeroes the mover's _cumulative_rewards, and truncates after max_cycles
    copies, n_steps = 2, 12
    slots = DummyVecEnv([lambda: Slot(rps_v2)] * copies)
    model = PPO("MlpPolicy", slots, n_steps=n_steps, batch_size=n_steps * copies, seed=0)
    envs = [Logged(rps_v2.env(max_cycles=4)) for _ in range(copies)]
    collector = AECRolloutCollector(
        model, [lambda e=e: e for e in envs], opponents=opponents, seeds=[0, 1]
    )
    truncated, rewarded = 0, 0
    for _ in range(3):
        segments = collector.collect(update_model=False)
        seen = check_rollout(model, envs, segments, opponents)
        truncated += seen["truncated"]
        rewarded += int(np.count_nonzero(model.rollout_buffer.rewards))
    assert truncated > 0  # truncated segments, bootstrapped gamma * V(final observation)
    assert rewarded > 0


def test_a_frozen_model_opponent_is_acted_and_never_stored() -> None:
    opponent = _model(connect_four_v3, 8, 1, seed=1)
    totals, collector = _collect(connect_four_v3, 16, 2, [3, 4], {"player_1": opponent}, 2)
    assert totals["rows"] == 2 * 16 * 2
    log = collector.envs[0].log
    assert any(e["agent"] == "player_1" and e["live"] for e in log)  # the opponent played


def test_training_loop_counts_stored_turns_and_logs_episodes() -> None:
    model = _model(tictactoe_v3, 16, 2)
    collector = AECRolloutCollector(
        model, [tictactoe_v3.env] * 2, opponents={"player_2": "random"}, seeds=[0, 1]
    )
    start_training(model, 64)
    while model.num_timesteps < 64:
        collector.collect()
        model.train()
    finish_training(model)
    assert model.num_timesteps == 64  # one per stored turn
    assert model.ep_info_buffer  # the trained agent's finished games
    assert all(e["r"] in (-1.0, 0.0, 1.0) for e in model.ep_info_buffer)
    assert set(collector.agent_returns) == {"player_1"}


def test_random_opponents_are_seeded_by_the_collector_seeds() -> None:
    def run() -> list[Any]:
        model = _model(tictactoe_v3, 8, 1)
        env = Logged(tictactoe_v3.env())
        collector = AECRolloutCollector(
            model, [lambda: env], opponents={"player_2": "random"}, seeds=[5]
        )
        collector.collect(update_model=False)
        return [e["action"] for e in env.log if e["agent"] == "player_2" and e["live"]]

    first, second = run(), run()
    assert first and first == second


def test_refuses_a_parallel_env() -> None:
    model = _model(tictactoe_v3, 8, 1)
    with pytest.raises(TypeError, match=r"AECRolloutCollector needs a PettingZoo AECEnv"):
        AECRolloutCollector(model, [rps_v2.parallel_env])


def test_refuses_an_off_policy_model() -> None:
    from stable_baselines3 import DQN

    slot = DummyVecEnv([lambda: gym.make("CartPole-v1")])
    with pytest.raises(TypeError, match=r"needs an on-policy SB3 model .* got DQN"):
        AECRolloutCollector(DQN("MlpPolicy", slot), [tictactoe_v3.env])


def test_refuses_an_unknown_opponent_agent() -> None:
    model = _model(tictactoe_v3, 8, 1)
    with pytest.raises(
        ValueError,
        match=r"opponents names agent\(s\) \['player_0'\] that tictactoe_v3 \(copy 0\) does not "
        r"have; its possible_agents are \['player_1', 'player_2'\]",
    ):
        AECRolloutCollector(model, [tictactoe_v3.env], opponents={"player_0": "random"})


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (
            "randm",
            r"opponents\['player_2'\] must be a frozen SB3 model or 'random', got the "
            r"string 'randm'",
        ),
        (3, r"opponents\['player_2'\] must be a frozen SB3 model or 'random', got int"),
    ],
)
def test_refuses_a_bad_opponent_value(value: Any, message: str) -> None:
    model = _model(tictactoe_v3, 8, 1)
    with pytest.raises(TypeError, match=message):
        AECRolloutCollector(model, [tictactoe_v3.env], opponents={"player_2": value})


def test_refuses_the_trained_model_as_opponent_and_all_seats_as_opponents() -> None:
    model = _model(tictactoe_v3, 8, 1)
    with pytest.raises(ValueError, match=r"opponents\['player_2'\] is the trained model itself"):
        AECRolloutCollector(model, [tictactoe_v3.env], opponents={"player_2": model})
    with pytest.raises(ValueError, match=r"no agent is left to train"):
        AECRolloutCollector(
            model, [tictactoe_v3.env], opponents={"player_1": "random", "player_2": "random"}
        )
    with pytest.raises(ValueError, match=r"seeds must hold one seed per env copy \(1\), got 2"):
        AECRolloutCollector(model, [tictactoe_v3.env], seeds=[0, 1])


def test_a_plain_ppo_plays_without_masks() -> None:
    # PPO reads no mask: the buffer is a plain RolloutBuffer, illegal moves end the game (-1)
    model = PPO("MultiInputPolicy", DummyVecEnv([lambda: Slot(tictactoe_v3)]), n_steps=16, seed=0)
    collector = AECRolloutCollector(model, [tictactoe_v3.env], seeds=[0])
    segments = collector.collect(update_model=False)
    assert sum(s.stop_row - s.start_row for s in segments) == 16
    assert not hasattr(model.rollout_buffer, "action_masks")
