"""AECGroupRolloutCollector with sb3-contrib RecurrentPPO groups, in real turn-based games.

The semantics are ``AECRolloutCollector``'s RecurrentPPO (``docs/pettingzoo.md``, "AEC
environments", "Recurrent"), per group: one LSTM state per (copy, agent) of the group, advanced
only on that agent's own turns (a turn acted but not stored, waiting for another group's buffer
or closing the rollout, advances it too), reset at its first turn of each game and where its run
in one of the group's columns starts below row 0 (``_lanes.RecurrentLanes``, one per recurrent
group, kept across collects).

Two oracles, both reused from the suite (loaded as the tests load them, not copied):

* (a) One group holding every trained agent, with a RecurrentPPO, is ``AECRolloutCollector``
  with the same RecurrentPPO exactly: every ``RecurrentDictRolloutBuffer`` array (the four LSTM
  state arrays included), the segments, the counters and the weights after ``train()``, over
  three collects (the same seeds, so the same sampled actions).
* (b) Two groups (a seat each of ``tictactoe_v3``, the mask left in the Dict observation): a
  RecurrentPPO group against ``test_aec_collector_recurrent``'s per-agent reference (the
  agent's LSTM stepped turn by turn through the model's own policy over the env's log, SB3's
  GAE on each segment, sb3-contrib's own training sequences), a MaskablePPO group against
  ``test_aec_collector.check_rollout``; RecurrentPPO + MaskablePPO either way round and two
  RecurrentPPOs, of different buffer sizes (one group fills first: its turns wait, then are
  acted unstored), and every logged turn of a group's agent stored once or counted in
  ``group_dropped``.
* (c) Mutations fail: a mutated recurrent buffer array, and a collector whose forward passes
  are never told the resets its buffer flags (the silent wrong value: right layout, LSTM not
  reset).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pettingzoo.classic import tictactoe_v3
from rlightning_test_support import sibling
from sb3_contrib import MaskablePPO
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import AECGroupRolloutCollector, AECRolloutCollector
from rlightning_pettingzoo._lanes import RecurrentLanes
from rlightning_pettingzoo.aec_groups import _GroupTurns
from rlightning_sb3 import finish_training, start_training

AEC = sibling(__file__, "test_aec_collector.py")
REC = sibling(__file__, "test_aec_collector_recurrent.py")
Logged, Slot = AEC.Logged, AEC.Slot
GAME = tictactoe_v3
AGENTS = ("player_1", "player_2")
GROUP_OF = {"player_1": "first", "player_2": "second"}


def _maskable(n_steps: int, n_columns: int, seed: int) -> MaskablePPO:
    """A tiny MaskablePPO for one seat of tictactoe (the Dict spaces the RecurrentPPO sees)."""
    return MaskablePPO(
        "MultiInputPolicy",
        DummyVecEnv([lambda: Slot(GAME)] * n_columns),
        n_steps=n_steps,
        batch_size=n_steps * n_columns,
        n_epochs=1,
        policy_kwargs={"net_arch": [8]},
        seed=seed,
        device="cpu",
    )


def _is_recurrent(model: Any) -> bool:
    return hasattr(model.rollout_buffer, "hidden_states_pi")


# ----------------------------------------------------- (a) one group: AECRolloutCollector


def _one_group_run(
    grouped: bool, opponents: dict[str, Any], copies: int, n_columns: int, rollouts: int
) -> list[dict[str, Any]]:
    """``rollouts`` collects with ``train()`` between, by either collector; what each left."""
    model = REC.recurrent_model(GAME, 8, n_columns, seed=3)  # seeds torch: both runs alike
    env_fns = [GAME.env] * copies
    seeds = [11 + c for c in range(copies)]
    collector: Any
    if grouped:
        trained = [a for a in AGENTS if a not in opponents]
        collector = AECGroupRolloutCollector(
            {"all": model},
            env_fns,
            group_of=dict.fromkeys(trained, "all"),
            opponents=opponents,
            seeds=seeds,
        )
    else:
        collector = AECRolloutCollector(model, env_fns, opponents=opponents, seeds=seeds)
    start_training(model, rollouts * 8 * n_columns)
    seen = []
    for _ in range(rollouts):
        segments = collector.collect()
        if grouped:
            assert set(segments) == {"all"}
            assert collector.group_dropped == {"all": collector.dropped}
            segments = segments["all"]
        seen.append(
            {
                "buffer": REC.snapshot(model),
                "segments": segments,
                "dropped": collector.dropped,
                "num_timesteps": model.num_timesteps,
                "episodes": [(e["r"], e["l"]) for e in model.ep_info_buffer],
                "returns": {a: list(r) for a, r in collector.agent_returns.items()},
            }
        )
        model.train()
    finish_training(model)
    seen.append({"weights": {k: v.clone() for k, v in model.policy.state_dict().items()}})
    return seen


@pytest.mark.parametrize(
    ("opponents", "copies", "n_columns"),
    [({}, 2, 4), ({"player_2": "random"}, 2, 2), ({}, 2, 1)],
    ids=["self-play", "vs-random", "fewer-columns-than-seats"],
)
def test_one_recurrent_group_of_all_agents_is_the_aec_collector_exactly(
    opponents: dict[str, Any], copies: int, n_columns: int
) -> None:
    reference = _one_group_run(False, opponents, copies, n_columns, rollouts=3)
    grouped = _one_group_run(True, opponents, copies, n_columns, rollouts=3)
    for ref, got in zip(reference[:-1], grouped[:-1], strict=True):
        for name in REC.ARRAYS:  # the four LSTM state arrays included
            np.testing.assert_array_equal(got["buffer"][name], ref["buffer"][name], err_msg=name)
        for key, array in ref["buffer"]["observations"].items():
            np.testing.assert_array_equal(got["buffer"]["observations"][key], array, err_msg=key)
        assert got["segments"] == ref["segments"]
        for key in ("dropped", "num_timesteps", "episodes", "returns"):
            assert got[key] == ref[key], key
    # the LSTM states are not trivially zero: some row carries a state
    assert any(np.abs(r["buffer"]["hidden_states_pi"]).sum() > 0 for r in reference[:-1])
    assert any(r["dropped"] for r in reference[:-1]) == (not opponents)  # self-play drops
    for name, tensor in reference[-1]["weights"].items():
        assert bool((grouped[-1]["weights"][name] == tensor).all()), name  # trained alike


# ---------------------------------------------------------- (b) two groups: per-agent references


def _models(kinds: tuple[str, str], sizes: dict[str, tuple[int, int]]) -> dict[str, Any]:
    """The groups' models: ``"rec"`` a tiny RecurrentPPO, ``"mask"`` a tiny MaskablePPO."""
    models: dict[str, Any] = {}
    for seed, (kind, (group, (n_steps, columns))) in enumerate(
        zip(kinds, sizes.items(), strict=True), start=5
    ):
        if kind == "rec":
            models[group] = REC.recurrent_model(GAME, n_steps, columns, seed=seed)
        else:
            models[group] = _maskable(n_steps, columns, seed)
    return models


def _check_groups(
    collector: AECGroupRolloutCollector,
    envs: list[Any],
    references: dict[str, Any],
    segments: dict[str, list[Any]],
    totals: dict[str, int],
) -> None:
    """Each group's buffer against its reference (recurrent or feed-forward); counts."""
    assert list(segments) == list(collector.models)
    for g, model in collector.models.items():
        n_cells = model.rollout_buffer.buffer_size * model.rollout_buffer.n_envs
        if _is_recurrent(model):
            arrays = REC.snapshot(model)
            references[g].advance(model, REC.stored_starts(arrays, segments[g]))
            seen = REC.check_rollout(model, envs, segments[g], references[g], arrays)
            REC.check_training_sequences(model)
            for key in ("forced_resets", "carried", "closed_on_dead_step"):
                totals[key] += seen[key]
        else:
            mine = [a for a, group in GROUP_OF.items() if group == g]
            others = {a: None for a in AGENTS if a not in mine}
            seen = AEC.check_rollout(model, envs, segments[g], others)
        assert seen["rows"] == n_cells, g
        totals[f"stored/{g}"] += seen["rows"]
        totals[f"dropped/{g}"] += collector.group_dropped[g]
        totals["cut"] += seen["cut"]
    assert sum(collector.group_dropped.values()) == collector.dropped


def _two_groups(
    kinds: tuple[str, str],
    sizes: dict[str, tuple[int, int]],
    copies: int,
    seeds: list[int],
    rollouts: int,
    update_model: bool,
) -> dict[str, int]:
    """Two groups (a seat each) collected together; each rollout checked, train() between."""
    models = _models(kinds, sizes)
    envs = [Logged(GAME.env()) for _ in range(copies)]
    collector = AECGroupRolloutCollector(
        models, [lambda e=e: e for e in envs], group_of=GROUP_OF, seeds=seeds
    )
    # the recurrent reference of a group steps its own agents only (the other seat's turns
    # are skipped as an opponent's)
    references = {
        g: REC.Reference(envs, {a: None for a, group in GROUP_OF.items() if group != g})
        for g, model in models.items()
        if _is_recurrent(model)
    }
    if update_model:
        for g, model in models.items():
            start_training(model, rollouts * sizes[g][0] * sizes[g][1])
    totals = dict.fromkeys(("forced_resets", "carried", "closed_on_dead_step", "cut"), 0)
    for g in models:
        totals[f"stored/{g}"] = totals[f"dropped/{g}"] = 0
    for _ in range(rollouts):
        segments = collector.collect(update_model=update_model)
        _check_groups(collector, envs, references, segments, totals)
        if update_model:
            for model in models.values():
                model.train()
    # every trained turn the env logged is stored once or counted as dropped: none is lost
    for g in models:
        mine = [a for a, group in GROUP_OF.items() if group == g]
        acted = sum(e["agent"] in mine and e["live"] for env in envs for e in env.log)
        assert acted == totals[f"stored/{g}"] + totals[f"dropped/{g}"], g
    if update_model:
        for g, model in models.items():
            assert model.num_timesteps == totals[f"stored/{g}"]  # its own agents' turns only
            finish_training(model)
    return totals


@pytest.mark.parametrize(
    "kinds",
    [("rec", "mask"), ("mask", "rec"), ("rec", "rec")],
    ids=["recurrent+maskable", "maskable+recurrent", "two-recurrent"],
)
def test_each_recurrent_groups_buffer_is_its_agents_own_lstm_over_their_turns(
    kinds: tuple[str, str],
) -> None:
    # different sizes: the first seat's buffer (20) fills before the second's (24): its turns
    # wait, then are acted unstored (advancing its LSTM) while the second group fills
    sizes = {"first": (10, 2), "second": (8, 3)}
    totals = _two_groups(kinds, sizes, 2, [0, 1], rollouts=3, update_model=True)
    assert totals["stored/first"] == 3 * 20 and totals["stored/second"] == 3 * 24
    assert totals["dropped/first"] > 0  # turns of the full group acted, not stored
    assert totals["carried"] > 0  # a state carried into the next rollout's row 0
    assert totals["closed_on_dead_step"] > 0  # a game ended on the other seat's turn
    assert totals["cut"] > 0


def test_a_recurrent_group_with_fewer_columns_than_its_copies_resets_where_a_run_moves() -> None:
    # 3 copies of a seat in 2 columns: runs change column, the LSTM is reset there
    sizes = {"first": (6, 2), "second": (5, 2)}
    totals = _two_groups(("rec", "rec"), sizes, 3, [4, 5, 6], rollouts=2, update_model=True)
    assert totals["forced_resets"] > 0


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    sizes=st.tuples(st.integers(2, 8), st.integers(1, 3), st.integers(2, 8), st.integers(1, 3)),
    copies=st.integers(1, 3),
    kinds=st.sampled_from([("rec", "mask"), ("mask", "rec"), ("rec", "rec")]),
)
def test_recurrent_groups_hold_over_seeds_sizes_and_copies(
    seed: int, sizes: tuple[int, int, int, int], copies: int, kinds: tuple[str, str]
) -> None:
    shapes = {"first": sizes[:2], "second": sizes[2:]}
    seeds = [seed + c for c in range(copies)]
    totals = _two_groups(kinds, shapes, copies, seeds, rollouts=2, update_model=False)
    event(f"forced resets: {totals['forced_resets'] > 0}")
    event(f"dropped: {totals['dropped/first'] + totals['dropped/second'] > 0}")


# ------------------------------------------------------------------------ (c) mutations fail


class _ActsWithoutResets(RecurrentLanes):
    """Broken lanes: the buffer flags each reset, but the forward pass is told none."""

    def assign(self, keys: Sequence[Any], starting: Sequence[set[Any]]) -> dict[Any, bool]:
        return dict.fromkeys(super().assign(keys, starting), False)


class _NoResets(_GroupTurns):
    """A broken engine: a recurrent group's LSTM is never reset where its buffer says so."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._group_lanes = {
            g: _ActsWithoutResets(int(self.models[g].n_envs)) for g in self._group_lanes
        }


def _mutation_run(engine: type[_GroupTurns]) -> tuple[Any, list[Any], Any, Any, dict[str, Any]]:
    """Two collects of a RecurrentPPO group next to a MaskablePPO; the recurrent one's last."""
    models = _models(("rec", "mask"), {"first": (10, 2), "second": (8, 2)})
    envs = [Logged(GAME.env()) for _ in range(2)]
    turns = engine(models, [lambda e=e: e for e in envs], group_of=GROUP_OF, seeds=[0, 1])
    reference = REC.Reference(envs, {"player_2": None})
    for _ in range(2):  # the second rollout carries the first one's states
        segments = turns.collect_groups(update_model=False)["first"]
        arrays = REC.snapshot(models["first"])
        reference.advance(models["first"], REC.stored_starts(arrays, segments))
    return models["first"], envs, segments, reference, arrays


@pytest.mark.parametrize(
    "mutation", ["hidden_states_pi", "cell_states_vf", "episode_starts", "swap_columns", "values"]
)
def test_a_mutated_recurrent_group_buffer_fails_the_reference(mutation: str) -> None:
    model, envs, segments, reference, arrays = _mutation_run(_GroupTurns)
    REC.check_rollout(model, envs, segments, reference, arrays)  # unmutated: holds
    # a row-0 cell that carries a nonzero state
    row, column = 0, int(np.flatnonzero(arrays["episode_starts"][0] == 0)[0])
    assert np.abs(arrays["hidden_states_pi"][row, :, column]).sum() > 0
    mutated = {k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in arrays.items()}
    if mutation == "episode_starts":
        mutated["episode_starts"][row, column] = 1.0
    elif mutation == "swap_columns":
        for name in REC.STATES:
            mutated[name][row] = mutated[name][row][:, ::-1]
    elif mutation == "values":
        mutated["values"][3, 1] += 1e-3
    else:
        mutated[mutation][row, :, column] += 1e-3
    with pytest.raises(AssertionError):
        REC.check_rollout(model, envs, segments, reference, mutated)


def test_a_collector_that_acts_without_the_buffers_resets_fails_the_reference() -> None:
    model, envs, segments, reference, arrays = _mutation_run(_NoResets)
    assert arrays["episode_starts"].any()  # the buffer flags resets (its layout is right)
    with pytest.raises(AssertionError, match=r"Not equal to tolerance"):
        REC.check_rollout(model, envs, segments, reference, arrays)
