"""Frozen RecurrentPPO opponents in the turn-based (AEC) collectors, against sb3-contrib's predict.

The semantics (``docs/pettingzoo.md``, "AEC environments", "Opponents"): a RecurrentPPO opponent
keeps one LSTM state per (copy, agent) it plays, advanced only on that agent's own turns and
reset at its first turn of each game, as sb3-contrib's own loop steps a recurrent policy game by
game: ``action, state = model.predict(observation, state=state, episode_start=start,
deterministic=False)``.

The oracle is that loop, run in the test over the env's log (``test_aec_collector.Logged``, a real
``tictactoe_v3``, the mask in the Dict observation): for each copy and each game, the opponent's
logged observations in turn order, its state carried from one of its turns to the next (across
rollouts too) and reset at its game's first turn. An opponent samples its actions (as
``predict(deterministic=False)``), so to compare actions exactly, whatever the torch generator
has given the trained model's sampling in between, the opponent is made *sharp*: its action
net's weights are scaled by 1e6 (bias zeroed), so that every action but the argmax of its
logits has probability exactly 0 in float32 and the sampled action is a function of the
observation and the LSTM state alone (the rare turn whose two best logits nearly tie, where the
draw is real, is not compared: sb3-contrib's own distribution from the reference state says
which). Its LSTM weights are scaled up too, so the action depends
on the state (checked: a reference that forgets the game-start resets disagrees with the log, and
mutant collectors, one without the resets, one with a single state for every copy, fail the
oracle).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch as th
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pettingzoo.classic import tictactoe_v3
from rlightning_test_support import sibling
from stable_baselines3 import DQN
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import (
    AECGroupRolloutCollector,
    AECReplayCollector,
    AECRolloutCollector,
)
from rlightning_sb3 import finish_training, start_training

AEC = sibling(__file__, "test_aec_collector.py")
REC = sibling(__file__, "test_aec_collector_recurrent.py")
Logged = AEC.Logged
GAME = tictactoe_v3


def sharp_opponent(seed: int) -> Any:
    """A frozen tiny RecurrentPPO whose sampled action is its argmax (see the module)."""
    model = REC.recurrent_model(GAME, 8, 1, seed=seed)
    policy = model.policy
    with th.no_grad():
        policy.action_net.weight.mul_(1e6)
        policy.action_net.bias.zero_()
        for name, weight in policy.lstm_actor.named_parameters():
            if name.startswith("weight"):
                weight.mul_(4.0)  # the state weighs on the action
    return model


def _certain(opponent: Any, observation: Any, state: Any, start: np.ndarray) -> bool:
    """Whether the opponent's action distribution from ``state`` has a single nonzero entry.

    Then its sampled action is that entry whatever the torch generator gives (a near tie of
    the two best logits, rare, leaves a real draw: that turn's action is not compared, its
    state is still stepped).
    """
    policy = opponent.policy
    hidden = policy.lstm_actor.hidden_size
    with th.no_grad():
        obs, _ = policy.obs_to_tensor(observation)
        if state is None:
            h = c = th.zeros((policy.lstm_actor.num_layers, 1, hidden))
        else:
            h, c = (th.as_tensor(x) for x in state)
        distribution, _ = policy.get_distribution(
            obs, (h, c), th.as_tensor(start, dtype=th.float32)
        )
        probs = distribution.distribution.probs[0]
    return int((probs > 0).sum()) == 1


def predicted_actions(
    opponent: Any, envs: list[Any], agent: str, *, resets: bool = True
) -> tuple[list[list[int | None]], list[list[int | None]]]:
    """Per copy: the logged actions of ``agent``'s turns, and sb3-contrib's predict loop's.

    A turn whose draw is not certain (:func:`_certain`) is None in both lists. ``resets`` False
    (a reference that resets only at the copy's first game) is the wrong reference, for the
    check that the oracle tells it apart.
    """
    logged: list[list[int | None]] = []
    predicted: list[list[int | None]] = []
    for env in envs:
        state: Any = None
        mine: list[int | None] = []
        theirs: list[int | None] = []
        for u, entry in enumerate(env.log):
            if entry["agent"] != agent or not entry["live"]:
                continue
            first = AEC._first_turn(env.log, agent, u)
            start = np.array([first and (resets or state is None)])
            certain = _certain(opponent, entry["observation"], state, start)
            action, state = opponent.predict(
                entry["observation"], state=state, episode_start=start, deterministic=False
            )
            mine.append(int(entry["action"]) if certain else None)
            theirs.append(int(np.asarray(action).reshape(-1)[0]) if certain else None)
        logged.append(mine)
        predicted.append(theirs)
    return logged, predicted


def _compared(actions: list[list[int | None]]) -> list[int]:
    """The turns' actions that were compared (certain draws)."""
    return [a for per_copy in actions for a in per_copy if a is not None]


def games_of(envs: list[Any], agent: str) -> int:
    """How many games ``agent`` started in the logs (its first turns)."""
    return sum(
        AEC._first_turn(env.log, agent, u)
        for env in envs
        for u, e in enumerate(env.log)
        if e["agent"] == agent and e["live"]
    )


def _trained(kind: str, n_columns: int) -> Any:
    """The trained model: a MaskablePPO, a RecurrentPPO (its own adapter) or a DQN."""
    if kind == "maskable":
        return AEC._model(GAME, 8, n_columns, seed=1)
    if kind == "recurrent":
        return REC.recurrent_model(GAME, 8, n_columns, seed=1)
    return DQN(
        "MultiInputPolicy",
        DummyVecEnv([lambda: AEC.Slot(GAME)] * n_columns),
        learning_starts=4,
        buffer_size=200,
        policy_kwargs={"net_arch": [8]},
        seed=1,
        device="cpu",
    )


def _run(
    collector_kind: str,
    trained: str,
    seat: str,
    copies: int,
    rollouts: int,
    engine: Any = None,
    seed: int = 0,
) -> tuple[Any, list[Any], Any]:
    """Collect ``rollouts`` rollouts (``train()`` between) against a sharp recurrent opponent."""
    opponent = sharp_opponent(seed=9 + seed)
    envs = [Logged(GAME.env()) for _ in range(copies)]
    env_fns = [lambda e=e: e for e in envs]
    model = _trained(trained, copies)
    opponents = {seat: opponent}
    seeds = [seed + c for c in range(copies)]
    collector: Any
    if collector_kind == "groups":
        other = next(a for a in envs[0].possible_agents if a != seat)
        collector = AECGroupRolloutCollector(
            {"g": model}, env_fns, group_of={other: "g"}, opponents=opponents, seeds=seeds
        )
    elif collector_kind == "replay":
        collector = AECReplayCollector(model, env_fns, opponents=opponents, seeds=seeds)
    else:
        collector = (engine or AECRolloutCollector)(
            model, env_fns, opponents=opponents, seeds=seeds
        )
    start_training(model, 10_000)
    for _ in range(rollouts):
        collector.collect()
        if collector_kind == "replay":
            model.train(gradient_steps=1, batch_size=4)
        else:
            model.train()
    finish_training(model)
    return opponent, envs, collector


@pytest.mark.parametrize(
    ("collector_kind", "trained", "seat", "copies"),
    [
        ("aec", "maskable", "player_2", 2),
        ("aec", "maskable", "player_1", 3),
        ("aec", "recurrent", "player_2", 2),
        ("groups", "recurrent", "player_1", 2),
        ("replay", "dqn", "player_2", 2),
    ],
    ids=["vs-maskable", "opponent-first", "vs-recurrent", "group-collector", "replay-collector"],
)
def test_a_recurrent_opponent_plays_as_its_own_predict_loop_per_game(
    collector_kind: str, trained: str, seat: str, copies: int
) -> None:
    opponent, envs, _ = _run(collector_kind, trained, seat, copies, rollouts=5)
    logged, predicted = predicted_actions(opponent, envs, seat)
    assert logged == predicted
    assert games_of(envs, seat) > copies  # several games per copy: the resets are exercised
    compared = _compared(logged)
    assert len(compared) > 20
    assert len(compared) >= 0.9 * sum(map(len, logged))  # near ties are rare
    assert len(set(compared)) > 1  # not one constant move
    # the oracle tells a wrong state apart: a reference that forgets the game-start reset
    # disagrees with what the opponent played (the mutant collectors below fail it too)
    assert predicted_actions(opponent, envs, seat, resets=False)[1] != logged


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    copies=st.integers(1, 3),
    seat=st.sampled_from(["player_1", "player_2"]),
    kind=st.sampled_from([("aec", "maskable"), ("aec", "recurrent"), ("groups", "recurrent")]),
)
def test_the_predict_loop_holds_over_seeds_copies_and_seats(
    seed: int, copies: int, seat: str, kind: tuple[str, str]
) -> None:
    opponent, envs, _ = _run(kind[0], kind[1], seat, copies, rollouts=2, seed=seed)
    logged, predicted = predicted_actions(opponent, envs, seat)
    assert logged == predicted
    event(f"games per copy > 1: {games_of(envs, seat) > copies}")


def test_one_recurrent_opponent_in_two_collectors_keeps_their_states_apart() -> None:
    # the same frozen model as the opponent in two collectors, collecting in turn: each
    # collector's row ids in the model's adapter, so neither steps the other's states
    opponent = sharp_opponent(seed=9)
    runs = []
    for seed in (0, 1):
        envs = [Logged(GAME.env()) for _ in range(2)]
        model = AEC._model(GAME, 8, 2, seed=seed)
        collector = AECRolloutCollector(
            model,
            [lambda e=e: e for e in envs],
            opponents={"player_2": opponent},
            seeds=[seed, seed + 5],
        )
        runs.append((collector, model, envs))
    for _ in range(2):  # interleaved: the two collectors' opponent calls alternate
        for collector, _, _ in runs:
            collector.collect(update_model=False)
    for _, _, envs in runs:
        logged, predicted = predicted_actions(opponent, envs, "player_2")
        assert logged == predicted


class _NoOpponentResets(AECRolloutCollector):
    """A broken collector: the recurrent opponent's LSTM is never reset at a game's start."""

    def _reset(self, i: int) -> None:
        super()._reset(i)
        self._opponent_starting[i].clear()


class _OneOpponentState(AECRolloutCollector):
    """A broken collector: one opponent LSTM state (and reset flags) for every copy."""

    def _opponent_action(self, i: int, agent: Any, observation: Any, mask: Any) -> Any:
        return super()._opponent_action(0, agent, observation, mask)


@pytest.mark.parametrize("engine", [_NoOpponentResets, _OneOpponentState])
def test_a_mutant_collector_fails_the_predict_loop(engine: Any) -> None:
    opponent, envs, _ = _run("aec", "maskable", "player_2", 2, rollouts=3, engine=engine)
    logged, predicted = predicted_actions(opponent, envs, "player_2")
    assert logged != predicted


def test_the_trained_buffer_is_unchanged_by_a_recurrent_opponent() -> None:
    # the trained RecurrentPPO's rows still equal the per-agent reference (the opponent's own
    # adapter holds the opponent's states; the trained model's are untouched)
    model = REC.recurrent_model(GAME, 10, 2)
    envs = [Logged(GAME.env()) for _ in range(2)]
    opponents = {"player_2": sharp_opponent(seed=9)}
    collector = AECRolloutCollector(
        model, [lambda e=e: e for e in envs], opponents=opponents, seeds=[0, 1]
    )
    reference = REC.Reference(envs, opponents)
    start_training(model, 2 * 20)
    for _ in range(2):
        segments = collector.collect()
        arrays = REC.snapshot(model)
        reference.advance(model, REC.stored_starts(arrays, segments))
        seen = REC.check_rollout(model, envs, segments, reference, arrays)
        assert seen["rows"] == 20
        REC.check_training_sequences(model)
        model.train()
    finish_training(model)
