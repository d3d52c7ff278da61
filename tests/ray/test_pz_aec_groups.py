"""RayAECGroupRolloutCollector: the in-process AEC group collector's buffers, from Ray runners.

The oracle is ``rlightning_pettingzoo.AECGroupRolloutCollector`` (itself checked against env
logs, SB3's GAE per agent and ``AECRolloutCollector`` in tests/pettingzoo/test_aec_groups.py):
over the same copies of PettingZoo's real ``connect_four_v3`` and ``tictactoe_v3``, reset seeds,
opponents, weights and torch seed, every group's learner MaskablePPO buffer (one runner), or
each runner's block of every group's columns (two runners), equals the in-process collector's,
array for array, over three rollouts with each model's ``train()`` between (the weights
republished): two groups (a seat each, of different ``n_steps``: one group's buffer fills
first, its later turns are acted unstored), one group against ``"random"`` and against a
frozen model (sent as its SB3 save bytes, loaded in the runner), a PPO per good agent of
mpe2's ``simple_adversary_v3`` AEC env next to a random adversary, and (one runner) a
RecurrentPPO group next to a MaskablePPO group on ``tictactoe_v3`` (the mask left in the
RecurrentPPO's Dict observation; the four LSTM state arrays compared exactly too).
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
from mpe2 import simple_adversary_v3
from pettingzoo.classic import connect_four_v3, tictactoe_v3
from rlightning_ray_test_pz_checks import (
    CLOSE,
    FIELDS,
    STATES,
    Slot,
    assert_segments_moved,
    episodes,
    restore_rng,
    rng_state,
)
from rlightning_ray_test_pz_checks import assert_arrays as _assert_equal
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import (
    AECGroupRolloutCollector,
    AECGroupRolloutRecorder,
    fill_recorded_groups,
)
from rlightning_ray.pettingzoo import RayAECGroupRolloutCollector
from rlightning_sb3 import set_acting_seed, start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

#: mpe2's simple_adversary AEC env: the adversary observes 8 numbers, the good agents 10; the
#: rewards come after the last agent's move of each cycle, every game truncated after 5 cycles.
ADVERSARY = partial(simple_adversary_v3.env, max_cycles=5, continuous_actions=False)
GAMES = {"connect4": connect_four_v3.env, "tictactoe": tictactoe_v3.env, "adversary": ADVERSARY}
CONNECT4, TICTACTOE = GAMES["connect4"], GAMES["tictactoe"]
#: The learner's bootstraps (its critic batches every runner's columns, a reference one
#: runner's): the rewards of the rows a rollout cuts, the returns and the advantages.
BOOTSTRAPPED = (*CLOSE, "rewards")
ROLLOUTS = 3


def _seat(make: Any, agent: str | None = None) -> tuple[Any, Any]:
    """The spaces of ``agent`` (None: the first) of ``make()``'s env."""
    env = make()
    agent = env.possible_agents[0] if agent is None else agent
    return env.observation_space(agent), env.action_space(agent)


def _model(
    make: Any,
    n_steps: int,
    n_envs: int,
    seed: int,
    started: bool = True,
    ortho: bool = True,
    agent: str | None = None,
) -> Any:
    """A tiny model for ``agent``'s seat of ``make()``'s env (``n_envs`` buffer columns).

    A MaskablePPO over a Dict observation (a classic game's, its mask in it), else a PPO. A
    frozen opponent is built without SB3's orthogonal init (``ortho``): its action head's gain
    of 0.01 would make it all but uniform, and a wrong copy of its weights would act alike.
    """
    spaces = _seat(make, agent)
    masked = isinstance(spaces[0], gym.spaces.Dict)
    model = (MaskablePPO if masked else PPO)(
        "MultiInputPolicy" if masked else "MlpPolicy",
        DummyVecEnv([partial(Slot, *spaces)] * n_envs),
        n_steps=n_steps,
        batch_size=n_steps * n_envs,
        n_epochs=1,
        policy_kwargs={"net_arch": [16], "ortho_init": ortho},
        seed=seed,
        device="cpu",
    )
    if started:
        start_training(model, total_timesteps=10_000)
    return model


def _recurrent(make: Any, n_steps: int, n_envs: int, seed: int) -> Any:
    """A tiny RecurrentPPO (an LSTM of 4) for the first seat of ``make()``'s env, started.

    Its Dict observation keeps the action mask (a RecurrentPPO does not mask: it observes it),
    as tests/pettingzoo/test_aec_groups_recurrent.py builds it.
    """
    model = RecurrentPPO(
        "MultiInputLstmPolicy",
        DummyVecEnv([partial(Slot, *_seat(make))] * n_envs),
        n_steps=n_steps,
        batch_size=n_steps * n_envs,
        n_epochs=1,
        policy_kwargs={"net_arch": [8], "lstm_hidden_size": 4},
        seed=seed,
        device="cpu",
    )
    start_training(model, total_timesteps=10_000)
    return model


def _buffer(model: Any, columns: slice = slice(None)) -> dict[str, np.ndarray]:
    """Copies of the buffer's arrays (each key of Dict observations; masks) of ``columns``."""
    buf = model.rollout_buffer
    out = {
        name: np.array(getattr(buf, name)[:, columns]) for name in FIELDS if name != "observations"
    }
    observations = buf.observations
    for key, array in (
        observations if isinstance(observations, dict) else {"": observations}
    ).items():
        out[f"observations/{key}"] = np.array(array[:, columns])
    if hasattr(buf, "action_masks"):
        masks = buf.action_masks.reshape(buf.buffer_size, buf.n_envs, -1)
        out["action_masks"] = np.array(masks[:, columns])
    if hasattr(buf, "hidden_states_pi"):  # a RecurrentPPO's LSTM states: columns on axis 2
        out.update({name: np.array(getattr(buf, name)[:, :, columns]) for name in STATES})
    return out


def _setup(make: Any, kind: str, columns: int) -> tuple[Any, dict[str, str], Any]:
    """``(models, group_of, opponents)``: two groups (a seat each), or one vs an opponent.

    Two groups: "first" ``n_steps=6``, "second" ``n_steps=4`` (each ``columns`` columns), so
    that "second"'s buffer fills first and its later turns are acted unstored; "recurrent":
    the same with "first" a RecurrentPPO (its LSTM states kept in the runner). "adversary":
    a PPO per good agent of simple_adversary (``n_steps`` 7 and 5: a game is 5 turns of each),
    the adversary random.
    """
    if kind == "adversary":
        models = {
            "a0": _model(make, 7, columns, 3, agent="agent_0"),
            "a1": _model(make, 5, columns, 4, agent="agent_1"),
        }
        return models, {"agent_0": "a0", "agent_1": "a1"}, {"adversary_0": "random"}
    first, second = make().possible_agents
    if kind in ("groups", "recurrent"):
        lead = (_model if kind == "groups" else _recurrent)(make, 6, columns, 3)
        models = {"first": lead, "second": _model(make, 4, columns, 4)}
        return models, {first: "first", second: "second"}, None
    opponent = "random" if kind == "random" else _model(make, 4, 1, 9, started=False, ortho=False)
    return {"learner": _model(make, 8, columns, 3)}, {first: "learner"}, {second: opponent}


def _train(models: dict[str, Any]) -> None:
    set_random_seed(99)  # each train()'s minibatches, the same in both runs
    for model in models.values():
        model.train()


def _seen(collector: Any, models: dict[str, Any], segments: Any) -> dict[str, Any]:
    return {
        "segments": segments,
        "buffers": {g: _buffer(m) for g, m in models.items()},
        "num_timesteps": {g: m.num_timesteps for g, m in models.items()},
        "episodes": {g: episodes(m) for g, m in models.items()},
        "group_dropped": dict(collector.group_dropped),
        "dropped": collector.dropped,
        "returns": {a: list(r) for a, r in collector.agent_returns.items()},
    }


def _in_process(make: Any, kind: str, seeds: list[int], acting_seed: int) -> list[dict[str, Any]]:
    """``ROLLOUTS`` collects of the in-process collector, ``train()`` between (acting RNG kept)."""
    models, group_of, opponents = _setup(make, kind, len(seeds))
    collector = AECGroupRolloutCollector(
        models, [make] * len(seeds), group_of=group_of, opponents=opponents, seeds=seeds
    )
    set_acting_seed(acting_seed)
    seen = []
    for k in range(ROLLOUTS):
        if k:
            acting = rng_state()
            _train(models)  # the runner's acting stream runs on undisturbed by training
            restore_rng(acting)
        seen.append(_seen(collector, models, collector.collect()))
    return seen


CASES = [("connect4", "groups"), ("tictactoe", "groups"), ("tictactoe", "random")]
CASES += [("connect4", "frozen"), ("adversary", "adversary"), ("tictactoe", "recurrent")]


@pytest.mark.parametrize(("game", "kind"), CASES, ids=[f"{g}-{k}" for g, k in CASES])
def test_one_runner_fills_every_groups_buffer_as_in_process(
    local_ray: None, game: str, kind: str
) -> None:
    """1 runner x 2 copies == AECGroupRolloutCollector over the same 2 copies, 3 rollouts."""
    seeds, acting_seed = [7, 8], 11
    want = _in_process(GAMES[game], kind, seeds, acting_seed)
    models, group_of, opponents = _setup(GAMES[game], kind, 2)
    collector = RayAECGroupRolloutCollector(
        models,
        env_fn=GAMES[game],
        group_of=group_of,
        opponents=opponents,
        copies_per_runner=2,
        seeds=seeds,
        acting_seeds=[acting_seed],
        num_cpus=0,
    )
    try:
        got = []
        for k in range(ROLLOUTS):
            if k:
                _train(models)  # the next rollout acts with these weights (republished)
            got.append(_seen(collector, models, collector.collect()))
    finally:
        collector.close()
    for k, (mine, ref) in enumerate(zip(got, want, strict=True)):
        for group in models:
            _assert_equal(mine["buffers"][group], ref["buffers"][group], f"{group} rollout {k}")
        for key in ("segments", "num_timesteps", "episodes", "group_dropped", "dropped"):
            assert mine[key] == ref[key], (key, k)
        assert mine["returns"] == ref["returns"], k
    for group, model in models.items():
        assert model.num_timesteps == ROLLOUTS * model.n_steps * model.n_envs
        assert got[-1]["episodes"][group]  # games finished and were counted
        values = [g["buffers"][group]["values"] for g in got]
        assert not np.array_equal(values[0], values[1])  # acted with the trained weights
    ends = {s.end for k in range(ROLLOUTS) for g in models for s in got[k]["segments"][g]}
    assert ends >= {"truncated" if kind == "adversary" else "terminated", "cut"}
    if kind in ("groups", "recurrent"):  # "second" (4 rows) fills before "first" (6): dropped
        assert sum(g["group_dropped"]["second"] for g in got) > 0
        assert {s.agent_id for s in got[0]["segments"]["first"]} == {_agent_of(group_of, "first")}
        if kind == "recurrent":  # the LSTM states compared are not all zero
            assert set(STATES) <= set(got[0]["buffers"]["first"])
            assert any(np.abs(g["buffers"]["first"][STATES[0]]).sum() > 0 for g in got)
    elif kind == "adversary":  # "a1" (5 rows) fills before "a0" (7); the adversary not stored
        assert sum(g["group_dropped"]["a1"] for g in got) > 0
        assert {s.agent_id for s in got[0]["segments"]["a0"]} == {"agent_0"}
        assert set(got[-1]["returns"]) == {"agent_0", "agent_1"}
    else:
        assert all(g["group_dropped"] == {"learner": 0} for g in got)  # opponents drop nothing
        assert set(got[-1]["returns"]) == set(group_of)


def _agent_of(group_of: dict[str, str], group: str) -> str:
    return next(a for a, g in group_of.items() if g == group)


@pytest.mark.parametrize("kind", ["groups", "frozen"])
def test_two_runners_fill_their_columns_of_every_group_as_in_process(
    local_ray: None, kind: str
) -> None:
    """2 runners x 2 copies: runner r's columns of each group == in-process over its copies."""
    make, seeds, acting_seeds = CONNECT4, [3, 4, 5, 6], [21, 22]
    models, group_of, opponents = _setup(make, kind, 4)
    collector = RayAECGroupRolloutCollector(
        models,
        [make] * 4,
        group_of=group_of,
        opponents=opponents,
        n_runners=2,
        seeds=seeds,
        acting_seeds=acting_seeds,
        num_cpus=0,
    )
    try:
        segments, buffers, weights = [], [], []
        for k in range(ROLLOUTS):
            if k:
                _train(models)
            weights.append(
                {
                    g: {n: t.clone() for n, t in m.policy.state_dict().items()}
                    for g, m in models.items()
                }
            )
            segments.append(collector.collect())
            buffers.append({g: _buffer(m) for g, m in models.items()})
    finally:
        collector.close()
    m = 2  # each runner's columns of each group
    dropped = dict.fromkeys(models, 0)
    returns: dict[str, list[float]] = {}
    for r in range(2):
        refs, _, ref_opponents = _setup(make, kind, m)
        inproc = AECGroupRolloutCollector(
            refs,
            [make] * 2,
            group_of=group_of,
            opponents=ref_opponents,
            seeds=seeds[2 * r : 2 * r + 2],
        )
        set_acting_seed(acting_seeds[r])
        for k in range(ROLLOUTS):
            for group, ref in refs.items():
                ref.policy.load_state_dict(weights[k][group])
            ref_segments = inproc.collect(update_model=False)
            for group, ref in refs.items():
                what = f"runner {r}, {group}, rollout {k}"
                block = {n: a[:, r * m : (r + 1) * m] for n, a in buffers[k][group].items()}
                # the rewards of cut rows, the returns and the advantages hold the learner's
                # bootstraps (its critic over all runners' columns in one batch)
                _assert_equal(block, _buffer(ref), what, BOOTSTRAPPED)
                mine = [s for s in segments[k][group] if r * m <= s.column < (r + 1) * m]
                assert_segments_moved(mine, ref_segments[group], r * m, 2 * r, what)
        for group in models:
            dropped[group] += inproc.group_dropped[group]
        for agent, got in inproc.agent_returns.items():
            returns.setdefault(agent, []).extend(got)
    assert collector.group_dropped == dropped  # the last rollout's, both runners together
    assert {a: list(r) for a, r in collector.agent_returns.items()} == returns
    for model in models.values():
        assert model.num_timesteps == ROLLOUTS * model.n_steps * model.n_envs
    if kind == "groups":  # "second" filled first in both runners: its later turns dropped
        assert dropped["second"] > 0


def test_the_recorder_and_fill_are_the_in_process_collector() -> None:
    """No Ray: AECGroupRolloutRecorder + fill_recorded_groups == AECGroupRolloutCollector."""
    make, seeds = TICTACTOE, [1, 2]
    ref_models, group_of, _ = _setup(make, "groups", 2)
    inproc = AECGroupRolloutCollector(ref_models, [make] * 2, group_of=group_of, seeds=seeds)
    set_acting_seed(5)
    want = [inproc.collect() for _ in range(2)]
    want_buffers = {g: _buffer(m) for g, m in ref_models.items()}

    models, _, _ = _setup(make, "groups", 2)
    replicas, _, _ = _setup(make, "groups", 2)
    recorder = AECGroupRolloutRecorder(replicas, [make] * 2, group_of=group_of, seeds=seeds)
    set_acting_seed(5)
    got = []
    for _ in range(2):
        recorded = recorder.record()
        assert list(recorded) == list(models)
        assert {g: r.dropped for g, r in recorded.items()} == recorder.group_dropped
        got.append(fill_recorded_groups(models, [recorded]))
    assert got == want
    for group, model in models.items():
        _assert_equal(_buffer(model), want_buffers[group], group)
        assert model.num_timesteps == ref_models[group].num_timesteps
        assert replicas[group].num_timesteps == 0  # the replicas' buffers are never filled
    assert recorder.group_dropped == inproc.group_dropped


def test_arguments_are_refused_before_any_runner_starts(local_ray: None) -> None:
    make = CONNECT4
    models = {"a": _model(make, 4, 2, 0), "b": _model(make, 4, 1, 1)}
    group_of = {"player_0": "a", "player_1": "b"}
    fns = [make] * 2

    def build(**kwargs: Any) -> Any:
        args: dict[str, Any] = {"models": models, "env_fns": fns, "group_of": group_of}
        args.update(kwargs)
        return RayAECGroupRolloutCollector(**args)

    name = "RayAECGroupRolloutCollector"
    with pytest.raises(ValueError, match=f"{name} needs models: a non-empty mapping"):
        build(models={})
    with pytest.raises(ValueError, match="groups 'a' and 'b' have the same model object"):
        build(models={"a": models["a"], "b": models["a"]})
    slots = DummyVecEnv([partial(Slot, *_seat(make))])
    dqn = DQN("MultiInputPolicy", slots, buffer_size=16, device="cpu")
    with pytest.raises(TypeError, match=rf"{name} \(group 'b'\) needs an on-policy .* got DQN"):
        build(models={"a": models["a"], "b": dqn})
    with pytest.raises(TypeError, match=rf"{name} \(group 'b'\) needs an on-policy SB3 model"):
        build(models={"a": models["a"], "b": object()})
    with pytest.raises(ValueError, match=r"opponents\['player_1'\] is the model of group 'a'"):
        build(
            models={"a": models["a"]},
            group_of={"player_0": "a"},
            opponents={"player_1": models["a"]},
        )
    with pytest.raises(
        ValueError, match=r"agent 'player_1' is in opponents and in group_of \(group 'b'\)"
    ):
        build(opponents={"player_1": "random"})
    with pytest.raises(TypeError, match="opponents must be a mapping"):
        build(opponents=["random"])
    with pytest.raises(TypeError, match=r"opponents\['player_1'\] must be .* got the string"):
        build(models={"a": models["a"]}, group_of={"player_0": "a"}, opponents={"player_1": "x"})
    with pytest.raises(TypeError, match=r"opponents\['player_1'\] must be .* got int"):
        build(models={"a": models["a"]}, group_of={"player_0": "a"}, opponents={"player_1": 3})
    with pytest.raises(ValueError, match="exactly one of env_fns"):
        build(env_fns=None)
    with pytest.raises(
        ValueError, match="the model of group 'b' has n_envs=1 buffer columns cannot be split"
    ):
        build(env_fns=fns * 2, n_runners=2)
    with pytest.raises(ValueError, match=r"seeds must hold one seed per env copy \(2\), got 1"):
        build(seeds=[0])
    with pytest.raises(TypeError, match="group_of must map agent ids to group names"):
        build(group_of=["a"])
    lock = threading.Lock()
    with pytest.raises(TypeError, match="group_of must be picklable"):
        build(group_of=lambda agent: "a" if lock else "b")
    with pytest.raises(TypeError, match="timeout_s must be None"):
        build(timeout_s="1")


@pytest.mark.parametrize(
    ("models", "group_of", "message"),
    [
        (
            lambda: {"a": _model(CONNECT4, 4, 1, 0)},
            {"player_0": "a"},
            r"agent 'player_1' of connect_four_v3 \(copy 0\) has no group",
        ),
        (
            lambda: {"a": _model(CONNECT4, 4, 1, 0), "b": _model(TICTACTOE, 4, 1, 1)},
            {"player_0": "a", "player_1": "b"},
            r"group 'b': agent 'player_1' of connect_four_v3 observes",
        ),
    ],
    ids=["no-group", "misfit-spaces"],
)
def test_what_only_the_envs_tell_fails_the_runners_build_named(
    local_ray: None, models: Any, group_of: dict[str, str], message: str
) -> None:
    with pytest.raises(RuntimeError, match=rf"(?s)runner 'pz-runner-0' failed to build.*{message}"):
        RayAECGroupRolloutCollector(models(), [CONNECT4], group_of=group_of, num_cpus=0)


def test_an_unstarted_model_is_refused_naming_its_group_and_close_ends_collecting(
    local_ray: None,
) -> None:
    make = TICTACTOE
    models = {"a": _model(make, 4, 1, 0), "b": _model(make, 4, 1, 1, started=False)}
    collector = RayAECGroupRolloutCollector(
        models,
        [make],
        group_of={"player_1": "a", "player_2": "b"},
        seeds=[1],
        acting_seeds=[2],
        num_cpus=0,
    )
    try:
        with pytest.raises(ValueError, match=r"\(the model of group 'b'\).*start_training"):
            collector.collect()
        segments = collector.collect(update_model=False)
        assert list(segments) == ["a", "b"] and models["a"].num_timesteps == 0
    finally:
        collector.close()
    with pytest.raises(RuntimeError, match="RayAECGroupRolloutCollector is closed"):
        collector.collect(update_model=False)
