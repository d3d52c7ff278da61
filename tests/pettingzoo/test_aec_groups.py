"""AECGroupRolloutCollector: a model per group of agents in real turn-based PettingZoo games.

Two oracles. With one group holding every trained agent, the collector is
``AECRolloutCollector`` exactly: every buffer array, the segments, the counters, the episodes,
over several rollouts with ``train()`` between (the same seeds, so the same sampled actions).
With two groups (``player_0`` / ``player_1`` of ``connect_four_v3`` and ``tictactoe_v3``, a
MaskablePPO each, of different seeds and buffer sizes), each group's buffer equals the
per-agent reference ``test_aec_collector.check_rollout`` builds from a log of the env alone
(``Logged``): each of the group's agents' turns, its reward summed between its turns, SB3's
GAE on its trajectory; and every logged turn of a trained agent is stored exactly once or
counted in its group's ``group_dropped``.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from pettingzoo.classic import connect_four_v3, tictactoe_v3
from rlightning_test_support import sibling
from sb3_contrib import MaskablePPO
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import AECGroupRolloutCollector, AECRolloutCollector, Segment
from rlightning_pettingzoo.aec_groups import _GroupTurns
from rlightning_sb3 import finish_training, start_training

AEC = sibling(__file__, "test_aec_collector.py")
SCHEDULES = sibling(__file__, "test_collector_schedules.py")
Logged, Slot, check_rollout = AEC.Logged, AEC.Slot, AEC.check_rollout

GAMES = [connect_four_v3, tictactoe_v3]
GAME_IDS = ["connect4", "tictactoe"]


def _model(game: Any, n_steps: int, n_columns: int, seed: int) -> MaskablePPO:
    """A tiny MaskablePPO for one seat of ``game`` (``n_columns`` buffer columns)."""
    return MaskablePPO(
        "MultiInputPolicy",
        DummyVecEnv([lambda: Slot(game)] * n_columns),
        n_steps=n_steps,
        batch_size=n_steps * n_columns,
        n_epochs=1,
        policy_kwargs={"net_arch": [16]},
        seed=seed,
        device="cpu",
    )


def _buffer(model: Any) -> dict[str, np.ndarray]:
    """Every array of a (Maskable)RolloutBuffer, copied."""
    buf = model.rollout_buffer
    out = {f"observations/{k}": v.copy() for k, v in buf.observations.items()}
    for name in ("actions", "rewards", "episode_starts", "values", "log_probs", "advantages"):
        out[name] = getattr(buf, name).copy()
    out["returns"] = buf.returns.copy()
    out["action_masks"] = buf.action_masks.copy()
    return out


def _others(game: Any, agents: list[str]) -> dict[str, None]:
    """The agents not in ``agents``: what ``check_rollout`` asserts no row is of."""
    return {a: None for a in game.env().possible_agents if a not in agents}


# ----------------------------------------------------- (a) one group: AECRolloutCollector


def _one_group_run(
    game: Any, grouped: bool, opponent: str | None, rollouts: int
) -> list[dict[str, Any]]:
    """``rollouts`` collects with ``train()`` between, by either collector; what each left."""
    agents = game.env().possible_agents
    opponents: dict[str, Any] = {}
    if opponent == "random":
        opponents = {agents[1]: "random"}
    elif opponent == "frozen":
        opponents = {agents[1]: _model(game, 4, 1, seed=7)}
    model = _model(game, 10, 2, seed=3)  # seeds torch, numpy and random: both runs alike
    env_fns = [game.env] * 2
    collector: Any
    if grouped:
        trained = [a for a in agents if a not in opponents]
        collector = AECGroupRolloutCollector(
            {"all": model},
            env_fns,
            group_of=dict.fromkeys(trained, "all"),
            opponents=opponents,
            seeds=[11, 12],
        )
    else:
        collector = AECRolloutCollector(model, env_fns, opponents=opponents, seeds=[11, 12])
    start_training(model, rollouts * 20)
    seen = []
    for _ in range(rollouts):
        segments = collector.collect()
        if grouped:
            assert set(segments) == {"all"} and collector.group_dropped == {
                "all": collector.dropped
            }
            segments = segments["all"]
        seen.append(
            {
                "buffer": _buffer(model),
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


@pytest.mark.parametrize("game", GAMES, ids=GAME_IDS)
@pytest.mark.parametrize("opponent", [None, "random", "frozen"], ids=["self-play", "rnd", "frz"])
def test_one_group_of_all_agents_is_the_aec_collector_exactly(
    game: Any, opponent: str | None
) -> None:
    reference = _one_group_run(game, False, opponent, rollouts=3)
    grouped = _one_group_run(game, True, opponent, rollouts=3)
    for ref, got in zip(reference[:-1], grouped[:-1], strict=True):
        for name, array in ref["buffer"].items():
            np.testing.assert_array_equal(got["buffer"][name], array, err_msg=name)
        assert got["segments"] == ref["segments"]
        for key in ("dropped", "num_timesteps", "episodes", "returns"):
            assert got[key] == ref[key], key
    assert any(r["dropped"] for r in reference[:-1]) == (opponent is None)  # self-play drops
    for name, tensor in reference[-1]["weights"].items():
        assert bool((grouped[-1]["weights"][name] == tensor).all()), name  # trained alike


# ---------------------------------------------------------- (b) two groups: per-agent references


def _two_groups(
    game: Any,
    sizes: dict[str, tuple[int, int]],
    copies: int,
    seeds: list[int],
    rollouts: int,
    update_model: bool,
) -> tuple[dict[str, int], AECGroupRolloutCollector]:
    """Two groups (a seat each) trained together; each rollout checked against the log."""
    first, second = game.env().possible_agents
    group_of = {first: "first", second: "second"}
    models = {
        g: _model(game, n_steps, columns, seed=seed)
        for seed, (g, (n_steps, columns)) in enumerate(sizes.items(), start=5)
    }
    envs = [Logged(game.env()) for _ in range(copies)]
    collector = AECGroupRolloutCollector(
        models, [lambda e=e: e for e in envs], group_of=group_of, seeds=seeds
    )
    if update_model:
        for g, model in models.items():
            start_training(model, rollouts * sizes[g][0] * sizes[g][1])
    totals = dict.fromkeys(("rows", "cut", "lost_on_other_turn", "dropped"), 0)
    stored = dict.fromkeys(models, 0)
    dropped = dict.fromkeys(models, 0)
    for _ in range(rollouts):
        segments = collector.collect(update_model=update_model)
        assert list(segments) == list(models)
        for g, model in models.items():
            agents = [a for a, group in group_of.items() if group == g]
            seen = check_rollout(model, envs, segments[g], _others(game, agents))
            assert seen["rows"] == sizes[g][0] * sizes[g][1]
            stored[g] += seen["rows"]
            dropped[g] += collector.group_dropped[g]
            for key in ("rows", "cut", "lost_on_other_turn"):
                totals[key] += seen[key]
        assert sum(collector.group_dropped.values()) == collector.dropped
        totals["dropped"] += collector.dropped
        if update_model:
            for model in models.values():
                model.train()
    # every trained turn the env logged is stored once or counted as dropped: none is lost
    for g in models:
        agents = [a for a, group in group_of.items() if group == g]
        acted = sum(e["agent"] in agents and e["live"] for env in envs for e in env.log)
        assert acted == stored[g] + dropped[g], g
    if update_model:
        for g, model in models.items():
            assert model.num_timesteps == stored[g]  # its own agents' stored turns only
            finish_training(model)
    return totals, collector


@pytest.mark.parametrize("game", GAMES, ids=GAME_IDS)
def test_each_groups_buffer_is_its_agents_own_trajectories(game: Any) -> None:
    # different sizes: the first seat's buffer (24) fills before the second's (30), so its
    # turns wait, then are acted unstored while the second group fills
    sizes = {"first": (12, 2), "second": (10, 3)}
    totals, collector = _two_groups(game, sizes, 2, [0, 1], rollouts=3, update_model=True)
    assert totals["rows"] == 3 * (24 + 30)
    assert totals["lost_on_other_turn"] > 0  # a -1 on the other's turn, in the loser's buffer
    assert totals["dropped"] > 0
    assert set(collector.agent_returns) == set(game.env().possible_agents)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**16),
    sizes=st.tuples(st.integers(1, 9), st.integers(1, 3), st.integers(1, 9), st.integers(1, 3)),
    copies=st.integers(1, 3),
    game=st.sampled_from(GAMES),
)
def test_two_groups_hold_over_seeds_sizes_and_copies(
    seed: int, sizes: tuple[int, int, int, int], copies: int, game: Any
) -> None:
    shapes = {"first": sizes[:2], "second": sizes[2:]}
    seeds = [seed + c for c in range(copies)]
    totals, _ = _two_groups(game, shapes, copies, seeds, rollouts=2, update_model=False)
    event(f"dropped: {totals['dropped'] > 0}")
    event(f"cut segments: {totals['cut'] > 0}")


def test_each_model_has_its_own_callback_logger_and_agents_episodes() -> None:
    models = {"first": _model(tictactoe_v3, 8, 2, seed=0), "second": _model(tictactoe_v3, 6, 2, 1)}
    group_of = {"player_1": "first", "player_2": "second"}
    captures = {g: SCHEDULES.Capture() for g in models}
    callbacks = {g: SCHEDULES.Counting() for g in models}
    for g, model in models.items():
        model.set_logger(Logger(None, [captures[g]]))
        start_training(model, 2 * model.n_steps * 2, callback=callbacks[g])
    collector = AECGroupRolloutCollector(
        models, [tictactoe_v3.env] * 2, group_of=group_of, seeds=[0, 1]
    )
    for _ in range(2):
        collector.collect()
        for model in models.values():
            model.train()
    for model in models.values():
        finish_training(model)
    for g, agent, other in (("first", "player_1", "player_2"), ("second", "player_2", "player_1")):
        model, n = models[g], models[g].n_steps
        assert model.num_timesteps == 2 * n * 2
        rows = [f"step {2 * k}" for k in range(1, n + 1)]  # on_step once per row of 2 turns
        later = [f"step {2 * n + 2 * k}" for k in range(1, n + 1)]
        expected = ["rollout_start", *rows, "rollout_end", "rollout_start", *later, "rollout_end"]
        assert callbacks[g].calls == expected
        dump = captures[g].dumps[-1]
        assert dump[f"rollout/ep_rew_mean/{agent}"] == pytest.approx(
            np.mean(collector.agent_returns[agent])
        )
        assert f"rollout/ep_rew_mean/{other}" not in dump
        assert dump["rollout/ep_rew_mean"] == pytest.approx(
            np.mean([e["r"] for e in model.ep_info_buffer])
        )
        assert dump["time/iterations"] == 2


# ------------------------------------------------------------------ (c) a group vs an opponent


@pytest.mark.parametrize("opponent", ["frozen", "random"])
def test_a_group_against_an_opponent_stores_only_its_agents(opponent: str) -> None:
    game = connect_four_v3
    frozen = _model(game, 4, 1, seed=9)
    model = _model(game, 12, 2, seed=2)
    envs = [Logged(game.env()) for _ in range(2)]
    collector = AECGroupRolloutCollector(
        {"learner": model},
        [lambda e=e: e for e in envs],
        group_of={"player_0": "learner"},
        opponents={"player_1": frozen if opponent == "frozen" else "random"},
        seeds=[3, 4],
    )
    start_training(model, 3 * 24)
    for _ in range(3):
        segments = collector.collect()
        check_rollout(model, envs, segments["learner"], {"player_1": None})
        assert collector.group_dropped == {"learner": 0}  # an opponent's turn drops nothing
        model.train()
    finish_training(model)
    assert model.num_timesteps == 3 * 24
    assert any(e["agent"] == "player_1" and e["live"] for e in envs[0].log)  # it played
    assert set(collector.agent_returns) == {"player_0"}


def test_a_function_group_of_and_a_policy_per_agent() -> None:
    models = {a: _model(tictactoe_v3, 6, 1, seed=s) for s, a in enumerate(["player_1", "player_2"])}
    envs = [Logged(tictactoe_v3.env())]
    collector = AECGroupRolloutCollector(
        models, [lambda: envs[0]], group_of=lambda agent: agent, seeds=[8]
    )
    for _ in range(2):
        segments = collector.collect(update_model=False)
        for agent, model in models.items():
            check_rollout(model, envs, segments[agent], _others(tictactoe_v3, [agent]))
    assert collector.models == models and collector.opponents == {}
    assert collector.envs == envs


class AgentSlot(gym.Env[Any, Any]):
    """One agent's spaces, for a group model's VecEnv (sizes the buffer; never stepped)."""

    def __init__(self, env: Any, agent: str) -> None:
        self.observation_space = env.observation_space(agent)
        self.action_space = env.action_space(agent)

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}

    def step(self, action: Any) -> Any:
        raise RuntimeError("AgentSlot is never stepped")


@pytest.mark.parametrize("adversary", ["group", "random", "random-per-agent"])
def test_groups_of_different_spaces_and_sizes_in_an_mpe_aec_env(adversary: str) -> None:
    # simple_adversary's AEC env: the adversary observes 8 numbers, the good agents 10; the
    # rewards come after the last agent's move of each cycle (other agents' turns), and every
    # game is truncated after max_cycles (bootstrapped gamma * V(final observation)); with
    # "random-per-agent", two groups of one good agent each next to a random adversary
    from mpe2 import simple_adversary_v3

    def make() -> Any:
        return Logged(simple_adversary_v3.env(max_cycles=5, continuous_actions=False))

    spaces = make()
    group_of = {"agent_0": "good", "agent_1": "good"}
    sizes = {"adversary": (9, 2), "good": (7, 3)}
    first = {"adversary": "adversary_0", "good": "agent_0", "a0": "agent_0", "a1": "agent_1"}
    opponents: dict[str, Any] = {"adversary_0": "random"}
    if adversary == "group":
        group_of["adversary_0"] = "adversary"
        opponents = {}
    elif adversary == "random":
        del sizes["adversary"]
    else:
        group_of = {"agent_0": "a0", "agent_1": "a1"}
        sizes = {"a0": (6, 2), "a1": (5, 3)}
    models = {
        g: PPO(
            "MlpPolicy",
            DummyVecEnv([lambda a=first[g]: AgentSlot(spaces, a)] * columns),
            n_steps=n_steps,
            batch_size=n_steps * columns,
            n_epochs=1,
            policy_kwargs={"net_arch": [16]},
            seed=seed,
            device="cpu",
        )
        for seed, (g, (n_steps, columns)) in enumerate(sizes.items())
    }
    envs = [make() for _ in range(2)]
    collector = AECGroupRolloutCollector(
        models, [lambda e=e: e for e in envs], group_of=group_of, opponents=opponents, seeds=[0, 1]
    )
    truncated = 0
    accounted = dict.fromkeys(models, 0)  # stored + dropped turns per group
    for _ in range(3):
        segments = collector.collect(update_model=False)
        for g, model in models.items():
            agents = [a for a, group in group_of.items() if group == g]
            others = {a: None for a in spaces.possible_agents if a not in agents}
            seen = check_rollout(model, envs, segments[g], others)
            assert seen["rows"] == sizes[g][0] * sizes[g][1]
            truncated += seen["truncated"]
            assert {s.agent_id for s in segments[g]} == set(agents)
            accounted[g] += seen["rows"] + collector.group_dropped[g]
    assert truncated > 0
    for g in models:  # every logged turn of a group's agent: stored once or counted as dropped
        agents = [a for a, group in group_of.items() if group == g]
        assert accounted[g] == sum(e["agent"] in agents and e["live"] for v in envs for e in v.log)


# ----------------------------------------------------------------------- (d) refusals, named


def _c4(seed: int = 0, n_steps: int = 4) -> MaskablePPO:
    return _model(connect_four_v3, n_steps, 1, seed=seed)


GROUP_OF = {"player_0": "a", "player_1": "b"}


@pytest.mark.parametrize(
    ("make", "error", "message"),
    [
        (
            lambda: ({"a": _c4(), "b": _model(tictactoe_v3, 4, 1, 0)}, GROUP_OF, None),
            ValueError,
            r"group 'b': agent 'player_1' of connect_four_v3 observes .* but the model",
        ),
        (
            lambda: ({"a": _c4(), "b": _c4(1)}, GROUP_OF, {"player_1": "random"}),
            ValueError,
            r"agent 'player_1' is in opponents and in group_of \(group 'b'\)",
        ),
        (
            lambda: ({"a": _c4()}, {"player_0": "a"}, None),
            ValueError,
            r"agent 'player_1' of connect_four_v3 \(copy 0\) has no group: group_of maps only "
            r"\[\"'player_0'\"\]; give every agent a group of models \(\['a'\]\) or name it in "
            r"opponents",
        ),
        (
            lambda: ({"a": _c4(), "b": _c4(1)}, {"player_0": "a", "player_1": "c"}, None),
            ValueError,
            r"group_of gives agent 'player_1' of connect_four_v3 \(copy 0\) the group 'c', "
            r"which is not a group of models \(\['a', 'b'\]\)",
        ),
        (
            lambda: ({"a": _c4(), "b": _c4(1)}, {"player_0": "a"}, {"player_1": "random"}),
            ValueError,
            r"group\(s\) \['b'\] of models have no trained agent among the possible_agents",
        ),
        (
            lambda: ({"a": (m := _c4()), "b": m}, GROUP_OF, None),
            ValueError,
            r"groups 'a' and 'b' have the same model object",
        ),
        (
            lambda: (
                {"a": (m := _c4())},
                {"player_0": "a"},
                {"player_1": m},
            ),
            ValueError,
            r"opponents\['player_1'\] is the model of group 'a'",
        ),
        (
            lambda: (
                {"a": _c4(), "b": DQN("MlpPolicy", DummyVecEnv([lambda: gym.make("CartPole-v1")]))},
                GROUP_OF,
                None,
            ),
            TypeError,
            r"needs an on-policy SB3 model .* got DQN for group 'b'",
        ),
        (
            lambda: ({}, GROUP_OF, None),
            ValueError,
            r"AECGroupRolloutCollector needs at least one group in models",
        ),
    ],
    ids=[
        "wrong-spaces",
        "group-and-opponent",
        "no-group",
        "unknown-group",
        "empty-group",
        "shared-model",
        "group-model-as-opponent",
        "off-policy",
        "no-models",
    ],
)
def test_refuses_unfit_inputs_naming_the_group(make: Any, error: type, message: str) -> None:
    models, group_of, opponents = make()
    with pytest.raises(error, match=message):
        AECGroupRolloutCollector(
            models, [connect_four_v3.env], group_of=group_of, opponents=opponents
        )


def test_the_shared_checks_name_the_group_collector() -> None:
    models = {"a": _c4(), "b": _c4(1)}
    with pytest.raises(
        ValueError, match=r"AECGroupRolloutCollector: seeds must hold one seed per env copy"
    ):
        AECGroupRolloutCollector(models, [connect_four_v3.env], group_of=GROUP_OF, seeds=[0, 1])


def test_refuses_an_unstarted_model_before_any_step_naming_its_group() -> None:
    models = {"a": _c4(), "b": _c4(1)}
    env = Logged(connect_four_v3.env())
    collector = AECGroupRolloutCollector(models, [lambda: env], group_of=GROUP_OF)
    start_training(models["a"], 8)
    with pytest.raises(ValueError, match=r"AECGroupRolloutCollector \(the model of group 'b'\)"):
        collector.collect()
    assert env.log == []  # refused before any step


# -------------------------------------------------------------------------- (e) mutations


def _collected() -> tuple[dict[str, Any], list[Any], dict[str, list[Segment]]]:
    models = {"first": _model(tictactoe_v3, 8, 2, seed=0), "second": _model(tictactoe_v3, 6, 2, 1)}
    envs = [Logged(tictactoe_v3.env()) for _ in range(2)]
    collector = AECGroupRolloutCollector(
        models,
        [lambda e=e: e for e in envs],
        group_of={"player_1": "first", "player_2": "second"},
        seeds=[0, 1],
    )
    collector.collect(update_model=False)
    return models, envs, collector.collect(update_model=False)


def _check_all(models: dict[str, Any], envs: list[Any], segments: Any) -> None:
    for g, agent in (("first", "player_1"), ("second", "player_2")):
        check_rollout(models[g], envs, segments[g], _others(tictactoe_v3, [agent]))


def _mutate(models: dict[str, Any], name: str) -> None:
    """One wrong value in a group's buffer (what a collector bug would leave)."""
    first, second = models["first"].rollout_buffer, models["second"].rollout_buffer
    if name == "reward":
        first.rewards[3, 1] += 1.0
    elif name == "action":
        first.actions[2, 0, 0] = (first.actions[2, 0, 0] + 1) % 9
    elif name == "episode_start":
        second.episode_starts[1, 0] = 1.0 - second.episode_starts[1, 0]
    elif name == "advantage":
        second.advantages[0, 1] += 0.1
    else:  # a row of the other group's agent in the first group's buffer
        assert name == "other_groups_row"
        for key in ("observation", "action_mask"):
            first.observations[key][0, 0] = second.observations[key][5, 1]


@pytest.mark.parametrize(
    "mutation", ["reward", "action", "episode_start", "advantage", "other_groups_row"]
)
def test_the_reference_catches_a_mutated_buffer(mutation: str) -> None:
    models, envs, segments = _collected()
    _check_all(models, envs, segments)  # unmutated: it holds
    _mutate(models, mutation)
    with pytest.raises(AssertionError):
        _check_all(models, envs, segments)


def test_the_reference_catches_a_turn_acted_by_the_wrong_groups_model(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # a mutant collector: every turn acted (and valued) by the first group's model
    monkeypatch.setattr(_GroupTurns, "_model_of", lambda self, agent: self.models["first"])
    models, envs, segments = _collected()
    with pytest.raises(AssertionError):
        _check_all(models, envs, segments)
