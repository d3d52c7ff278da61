"""AECRolloutCollector with sb3-contrib's RecurrentPPO, against a per-agent reference.

The semantics under test (``docs/pettingzoo.md``, "AEC environments", "Recurrent"): one LSTM
state per (copy, trained agent), advanced only on that agent's own turns (an AEC agent observes
and acts only at its turn), reset at its first turn of each game (``episode_start``) and where
its run in a buffer column starts below row 0 (the parallel collector's column rule,
``_lanes``); each row's ``lstm_states`` is the state its agent acted from.

The reference is built from the env's log alone (``test_aec_collector.Logged``, a real
``tictactoe_v3`` / ``connect_four_v3``, masks in the observations: a RecurrentPPO reads no
mask, the Dict observation includes it, an illegal move ends the game): each trained agent's
turns, across rollouts, as its own trajectory; its LSTM stepped turn by turn through the
model's own policy (``evaluate_actions`` for the value and log-probability of the logged
action, the policy's LSTMs for the next state), reset at its first turn of each game and where
the buffer starts a run (a turn the collector acted but did not store, at a rollout's end, is
reset only at a game's first turn); SB3's own ``RolloutBuffer.compute_returns_and_advantage``
on each segment alone, with ``RecurrentPPO.collect_rollouts``' bootstraps (``gamma *
V(next observation)`` from the LSTM state after the agent's last turn, where the rollout or a
column change cuts the segment). The buffer must equal it: observations, actions, rewards and
``episode_starts`` exactly; values, log-probs, advantages, returns and the four LSTM state
arrays allclose (a batch of copies and a single observation run different float kernels).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch as th
from gymnasium import spaces
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pettingzoo.classic import connect_four_v3, tictactoe_v3
from rlightning_test_support import sibling
from sb3_contrib import RecurrentPPO
from sb3_contrib.common.recurrent.type_aliases import RNNStates
from stable_baselines3 import PPO
from stable_baselines3.common.buffers import RolloutBuffer
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import AECRolloutCollector, Segment
from rlightning_sb3 import finish_training, start_training

AEC = sibling(__file__, "test_aec_collector.py")
Logged, Slot = AEC.Logged, AEC.Slot
STATES = ("hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf")
ARRAYS = (
    "actions",
    "rewards",
    "episode_starts",
    "values",
    "log_probs",
    "advantages",
    "returns",
    *STATES,
)
HIDDEN = 4
Key = tuple[int, str, int]  # (copy, agent, env step of its turn)


def recurrent_model(game: Any, n_steps: int, n_columns: int, seed: int = 0) -> RecurrentPPO:
    """A tiny RecurrentPPO over ``n_columns`` slots of one seat's (Dict) spaces."""
    return RecurrentPPO(
        "MultiInputLstmPolicy",
        DummyVecEnv([lambda: Slot(game)] * n_columns),
        n_steps=n_steps,
        batch_size=n_steps * n_columns,
        n_epochs=1,
        seed=seed,
        device="cpu",
        policy_kwargs={"net_arch": [8], "lstm_hidden_size": HIDDEN},
    )


def snapshot(model: Any) -> dict[str, Any]:
    """Copies of the buffer's arrays (observations as a dict of arrays)."""
    buf = model.rollout_buffer
    arrays: dict[str, Any] = {name: getattr(buf, name).copy() for name in ARRAYS}
    arrays["observations"] = {k: v.copy() for k, v in buf.observations.items()}
    return arrays


class Reference:
    """Each trained agent's LSTM, stepped through its own turns of the log, turn by turn.

    :meth:`advance` is called after each ``collect`` (before ``train``: the turns of that
    rollout were acted with these weights) and steps every turn logged since the last call.
    """

    def __init__(self, envs: list[Any], opponents: dict[str, Any]) -> None:
        self.envs, self.opponents = envs, opponents
        self.states: dict[tuple[int, str], RNNStates] = {}
        self.stepped = [0] * len(envs)
        self.turns: dict[Key, dict[str, Any]] = {}  # this rollout's turns

    def advance(self, model: Any, starts: dict[Key, bool]) -> None:
        """Step the turns logged since the last call; ``starts``: the stored turns' resets."""
        policy = model.policy
        zero = th.zeros((1, 1, HIDDEN))
        self.turns = {}
        with th.no_grad():
            for c, env in enumerate(self.envs):
                log = env.log
                for u in range(self.stepped[c], len(log)):
                    entry = log[u]
                    agent = entry["agent"]
                    if agent in self.opponents or not entry["live"]:
                        continue
                    first = AEC._first_turn(log, agent, u)
                    key = (c, agent, u)
                    # a stored turn: the buffer's reset (the first turn of a game must be one);
                    # a turn acted but not stored: reset at a game's first turn only
                    start = starts.get(key, first)
                    assert start or not first, f"{key}: a game's first turn without a reset"
                    state = self.states.get((c, agent), RNNStates((zero, zero), (zero, zero)))
                    obs, _ = policy.obs_to_tensor(entry["observation"])
                    flag = th.tensor([float(start)])
                    action = th.tensor([int(entry["action"])])
                    value, log_prob, _ = policy.evaluate_actions(obs, action, state, flag)
                    features = policy.extract_features(obs)
                    pi_f, vf_f = (
                        (features, features) if policy.share_features_extractor else features
                    )
                    _, pi = policy._process_sequence(pi_f, state.pi, flag, policy.lstm_actor)
                    _, vf = policy._process_sequence(vf_f, state.vf, flag, policy.lstm_critic)
                    after = RNNStates(pi, vf)
                    self.turns[key] = {
                        "before": state,
                        "after": after,
                        "value": float(value.reshape(-1)[0]),
                        "log_prob": float(log_prob.reshape(-1)[0]),
                        "start": start,
                        "first": first,
                    }
                    self.states[(c, agent)] = after
                self.stepped[c] = len(log)

    def value(self, model: Any, observation: Any, state: RNNStates) -> float:
        """The critic's value of ``observation`` from the LSTM state ``state`` (no reset)."""
        with th.no_grad():
            obs, _ = model.policy.obs_to_tensor(observation)
            v = model.policy.predict_values(obs, state.vf, th.tensor([0.0]))
        return float(v.reshape(-1)[0])


def stored_starts(arrays: dict[str, Any], segments: list[Segment]) -> dict[Key, bool]:
    """The buffer's ``episode_starts`` of each stored turn, by (copy, agent, env step)."""
    out: dict[Key, bool] = {}
    for seg in segments:
        for row, u in zip(range(seg.start_row, seg.stop_row), seg.env_steps, strict=True):
            out[(seg.env_index, seg.agent_id, u)] = bool(arrays["episode_starts"][row, seg.column])
    return out


def check_rollout(
    model: Any,
    envs: list[Any],
    segments: list[Segment],
    reference: Reference,
    arrays: dict[str, Any],
) -> dict[str, int]:
    """The buffer's ``arrays`` against the reference (advanced for this rollout); counts."""
    gamma, lam = model.gamma, model.gae_lambda
    n_rows, n_columns = arrays["rewards"].shape
    seen = {"rows": 0, "forced_resets": 0, "carried": 0, "closed_on_dead_step": 0, "cut": 0}
    covered = np.zeros((n_rows, n_columns), dtype=int)
    for seg in segments:
        c, agent = seg.env_index, seg.agent_id
        assert agent not in reference.opponents
        log = envs[c].log
        steps = [u for u, e in enumerate(log) if e["agent"] == agent and e["live"]]
        k0 = steps.index(seg.env_steps[0])
        assert list(seg.env_steps) == steps[k0 : k0 + len(seg.env_steps)]  # consecutive turns
        refs = [AEC._trajectory(envs[c], agent, u) for u in seg.env_steps]
        turns = [reference.turns[(c, agent, u)] for u in seg.env_steps]
        assert all(r["end"] is None for r in refs[:-1])
        last = refs[-1]
        assert seg.end == ("cut" if last["end"] is None else last["end"])
        assert last["next"] is not None  # every stored transition was closed by the env
        values = np.array([t["value"] for t in turns], dtype=np.float32)
        rewards = np.array([r["reward"] for r in refs], dtype=np.float32)
        # RecurrentPPO.collect_rollouts' bootstraps: V(next observation) from the LSTM state
        # after the agent's last turn (a truncation, or a cut inside a column: added to the
        # reward; a cut on the column's last row: finish_rollout's last value)
        bootstrap = 0.0
        if last["end"] != "terminated":
            bootstrap = reference.value(model, last["next"], turns[-1]["after"])
        gae_rewards = rewards.copy()
        mid_cut = last["end"] is None and seg.stop_row < n_rows
        if last["end"] == "truncated" or mid_cut:
            gae_rewards[-1] += np.float32(gamma * bootstrap)
        # SB3's own GAE on this segment alone
        gae = RolloutBuffer(
            len(refs),
            spaces.Box(-1.0, 1.0, (1,), np.float32),
            spaces.Discrete(2),
            device="cpu",
            gae_lambda=lam,
            gamma=gamma,
            n_envs=1,
        )
        gae.rewards[:, 0] = gae_rewards
        gae.values[:, 0] = values
        gae.episode_starts[:, 0] = np.arange(len(refs)) == 0
        gae.compute_returns_and_advantage(
            th.tensor([bootstrap]), np.array([last["end"] is not None or mid_cut])
        )
        rows = range(seg.start_row, seg.stop_row)
        for k, (row, ref, turn) in enumerate(zip(rows, refs, turns, strict=True)):
            covered[row, seg.column] += 1
            where = f"copy {c} {agent} turn {seg.env_steps[k]} (row {row}, column {seg.column})"
            for key in ("observation", "action_mask"):
                np.testing.assert_array_equal(
                    arrays["observations"][key][row, seg.column],
                    ref["observation"][key],
                    err_msg=where,
                )
            assert int(arrays["actions"][row, seg.column, 0]) == ref["action"], where
            if k < len(refs) - 1 or gae_rewards[-1] == rewards[-1]:
                assert arrays["rewards"][row, seg.column] == ref["reward"], where
            else:
                np.testing.assert_allclose(
                    arrays["rewards"][row, seg.column], gae_rewards[-1], rtol=1e-5, atol=1e-6
                )
            start = bool(arrays["episode_starts"][row, seg.column])
            # a run's first row below row 0, or a game's first turn; nowhere else
            assert start == (k == 0 and (row > 0 or turn["first"])), where
            assert start == turn["start"], where
            seen["forced_resets"] += start and not turn["first"]
            seen["carried"] += row == 0 and not start and bool(turn["before"].pi[0].abs().sum())
            (h_pi, c_pi), (h_vf, c_vf) = turn["before"]
            for name, want in zip(STATES, (h_pi, c_pi, h_vf, c_vf), strict=True):
                np.testing.assert_allclose(
                    arrays[name][row, :, seg.column],
                    want[:, 0].numpy(),
                    rtol=1e-5,
                    atol=1e-6,
                    err_msg=f"{where} {name}",
                )
            np.testing.assert_allclose(
                arrays["values"][row, seg.column], turn["value"], rtol=1e-5, atol=1e-5
            )
            np.testing.assert_allclose(
                arrays["log_probs"][row, seg.column], turn["log_prob"], rtol=1e-5, atol=1e-5
            )
        np.testing.assert_allclose(
            arrays["advantages"][rows, seg.column], gae.advantages[:, 0], rtol=1e-5, atol=1e-5
        )
        np.testing.assert_allclose(
            arrays["returns"][rows, seg.column], gae.returns[:, 0], rtol=1e-5, atol=1e-5
        )
        ended_on = log[seg.env_steps[-1] + 1 :]
        if last["end"] == "terminated" and ended_on and ended_on[0]["agent"] != agent:
            seen["closed_on_dead_step"] += 1  # the game ended on another agent's turn
        seen["cut"] += seg.end == "cut"
        seen["rows"] += len(refs)
    assert (covered == 1).all()  # every cell once
    return seen


def check_training_sequences(model: Any) -> None:
    """sb3-contrib's own sequences (``RecurrentDictRolloutBuffer.get``, the stored state at each
    sequence start, reset where ``episode_starts``) reproduce every stored value and log-prob."""
    buf = model.rollout_buffer
    with th.no_grad():
        for data in buf.get(buf.buffer_size * buf.n_envs):
            values, log_prob, _ = model.policy.evaluate_actions(
                data.observations,
                data.actions.long().flatten(),
                data.lstm_states,
                data.episode_starts,
            )
            mask = data.mask > 1e-8
            th.testing.assert_close(log_prob[mask], data.old_log_prob[mask], rtol=1e-4, atol=1e-5)
            th.testing.assert_close(
                values.flatten()[mask], data.old_values[mask], rtol=1e-4, atol=1e-5
            )


def run(
    game: Any,
    n_steps: int,
    copies: int,
    n_columns: int,
    opponents: dict[str, Any],
    rollouts: int,
    seeds: list[int] | None = None,
) -> tuple[dict[str, int], AECRolloutCollector, Any]:
    """Collect ``rollouts`` rollouts, ``train()`` between, each checked against the reference."""
    model = recurrent_model(game, n_steps, n_columns)
    envs = [Logged(game.env()) for _ in range(copies)]
    collector = AECRolloutCollector(
        model,
        [lambda e=e: e for e in envs],
        opponents=opponents,
        seeds=seeds or list(range(copies)),
    )
    reference = Reference(envs, opponents)
    start_training(model, rollouts * n_steps * n_columns)
    totals = {"rows": 0, "forced_resets": 0, "carried": 0, "closed_on_dead_step": 0, "cut": 0}
    totals["dropped"] = 0
    for _ in range(rollouts):
        segments = collector.collect()
        arrays = snapshot(model)
        reference.advance(model, stored_starts(arrays, segments))
        for key, value in check_rollout(model, envs, segments, reference, arrays).items():
            totals[key] += value
        check_training_sequences(model)
        totals["dropped"] += collector.dropped
        if opponents:
            assert collector.dropped == 0
        model.train()
    finish_training(model)
    assert model.num_timesteps == rollouts * n_steps * n_columns  # one per stored turn
    return totals, collector, model


@pytest.mark.parametrize(
    ("game", "opponents", "copies", "n_columns"),
    [
        (tictactoe_v3, {}, 2, 4),
        (tictactoe_v3, {"player_2": "random"}, 2, 2),
        (tictactoe_v3, {"player_1": "random"}, 3, 3),
        (connect_four_v3, {}, 1, 2),
        (connect_four_v3, {"player_1": "random"}, 2, 2),
    ],
    ids=["ttt-self-play", "ttt-vs-random", "ttt-random-first", "c4-self-play", "c4-vs-random"],
)
def test_buffer_equals_each_agents_own_lstm_over_its_turns(
    game: Any, opponents: dict[str, Any], copies: int, n_columns: int
) -> None:
    totals, _, model = run(game, 12, copies, n_columns, opponents, rollouts=3)
    assert totals["rows"] == 3 * 12 * n_columns
    assert totals["closed_on_dead_step"] > 0  # a game ended on the other agent's turn
    assert totals["carried"] > 0  # an agent's LSTM state carried into the next rollout
    assert totals["cut"] > 0
    if not opponents:  # self-play: the last open transitions are closed by turns not stored
        assert totals["dropped"] > 0
    assert model.ep_info_buffer  # the trained agents' finished games
    assert all(e["r"] in (-1.0, 0.0, 1.0) for e in model.ep_info_buffer)


def test_fewer_columns_than_agents_resets_where_a_run_changes_column() -> None:
    # 2 copies x 2 seats in 1 column: a run of a seat's turns is cut where the other acts, and
    # the LSTM is reset where the new run starts (below row 0), as the buffer says
    totals, _, _ = run(tictactoe_v3, 8, 2, 1, {}, rollouts=2)
    assert totals["forced_resets"] > 0
    assert totals["rows"] == 2 * 8


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    n_steps=st.integers(2, 10),
    copies=st.integers(1, 3),
    n_columns=st.integers(1, 4),
    opponents=st.sampled_from([{}, {"player_1": "random"}, {"player_2": "random"}]),
)
def test_reference_holds_over_seeds_steps_copies_and_columns(
    seed: int, n_steps: int, copies: int, n_columns: int, opponents: dict[str, Any]
) -> None:
    seeds = [seed + c for c in range(copies)]
    totals, _, _ = run(tictactoe_v3, n_steps, copies, n_columns, opponents, 2, seeds)
    assert totals["rows"] == 2 * n_steps * n_columns
    event(f"forced resets: {totals['forced_resets'] > 0}")
    event(f"a state carried into the next rollout: {totals['carried'] > 0}")


@pytest.mark.parametrize(
    "mutation",
    ["hidden_states_vf", "cell_states_pi", "episode_starts", "swap_columns", "values"],
)
def test_a_mutated_buffer_fails_the_reference(mutation: str) -> None:
    model = recurrent_model(tictactoe_v3, 12, 2)
    envs = [Logged(tictactoe_v3.env()) for _ in range(2)]
    collector = AECRolloutCollector(model, [lambda e=e: e for e in envs], seeds=[0, 1])
    reference = Reference(envs, {})
    for _ in range(2):  # the second rollout carries the first one's states
        segments = collector.collect(update_model=False)
        arrays = snapshot(model)
        reference.advance(model, stored_starts(arrays, segments))
    check_rollout(model, envs, segments, reference, arrays)  # unmutated: holds
    # a row-0 cell that carries a nonzero state (mutating a zero state from a reset would
    # not change what the LSTM computes)
    row, column = 0, int(np.flatnonzero(arrays["episode_starts"][0] == 0)[0])
    mutated = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in arrays.items()}
    if mutation == "episode_starts":
        mutated["episode_starts"][row, column] = 1.0
    elif mutation == "swap_columns":
        for name in STATES:
            mutated[name][row] = mutated[name][row][:, ::-1]
    elif mutation == "values":
        mutated["values"][3, 1] += 1e-3
    else:
        mutated[mutation][row, :, column] += 1e-3
    with pytest.raises(AssertionError):
        check_rollout(model, envs, segments, reference, mutated)


def test_a_feed_forward_collector_keeps_its_slot_ordered_layout() -> None:
    # the recurrent lanes are used for recurrent models only: a PPO's columns are the slots'
    # streams in slot order, as before (test_aec_collector checks its values)
    slots = DummyVecEnv([lambda: Slot(tictactoe_v3)] * 2)
    model = PPO("MultiInputPolicy", slots, n_steps=8, batch_size=16)
    collector = AECRolloutCollector(model, [tictactoe_v3.env] * 2, seeds=[0, 1])
    segments = collector.collect(update_model=False)
    order = [(s.env_index, s.agent_id) for s in segments]
    assert order == sorted(order, key=lambda s: (s[0], s[1]))
