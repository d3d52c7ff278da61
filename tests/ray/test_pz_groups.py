"""RayGroupRolloutCollector: the in-process group collector's buffers, from Ray runners.

The oracle is ``rlightning_pettingzoo.GroupRolloutCollector`` (itself checked against SB3's
``learn()`` per group and against env logs in tests/pettingzoo/test_collector_groups.py): over
the same copies, reset seeds, weights and torch seed, every group's learner buffer (one
runner), or each runner's block of every group's columns (two runners), equals the in-process
collector's, array for array, over two rollouts with each model's ``train()`` between (the
weights republished). Envs: ``ScheduleEnv`` (agents join, die terminated and truncated, wait
with masks allowing nothing; one group's buffer fills first and its later steps are dropped)
and mpe2's ``simple_adversary`` (the adversary observes 8 numbers, the good agents 10).
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import numpy as np
import pytest
from rlightning_ray_test_pz_checks import (
    CLOSE,
    ENVS,
    Slot,
    adversary_fn,
    assert_segments_moved,
    column_block,
    episodes,
    restore_rng,
    rng_state,
)
from rlightning_ray_test_pz_checks import assert_arrays as _assert_equal
from rlightning_ray_test_pz_checks import buffer_arrays as _buffer
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import A2C, PPO
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv, VecTransposeImage

from rlightning_pettingzoo import GroupRolloutCollector
from rlightning_ray.pettingzoo import RayGroupRolloutCollector
from rlightning_sb3 import set_acting_seed, start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")


# a0 (even) lives the episode (truncated at 6); a1 (odd) joins at 1, terminated at 3; a2 (even)
# joins at 2, truncated at 5; a1 waits at step 2, a2 at step 3 (their masks allow nothing).
# "even" acts about 4x as often as "odd": its buffer fills first, its later steps are dropped.
SCHEDULE = [(0, 6, "truncated"), (1, 3, "terminated"), (2, 5, "truncated")]
WAITS = frozenset({(1, 2), (2, 3)})
ODD_EVEN = {"a0": "even", "a1": "odd", "a2": "even"}  # a dict: picklable to the runners


def _schedule_fns(copies: range) -> list[Any]:
    return [partial(ENVS.ScheduleEnv, SCHEDULE, copy, WAITS) for copy in copies]


def _models(
    spec: dict[str, tuple[Any, int, int]], spaces: dict[str, tuple[Any, Any]]
) -> dict[str, Any]:
    """Group -> ``algo`` over ``n_envs`` slots of its spaces, ``n_steps`` rows, started.

    A group of channel-last images gets a tiny ``CnnPolicy`` (SB3 wraps its VecEnv in
    ``VecTransposeImage``), the others an ``MlpPolicy``; a RecurrentPPO an ``MlpLstmPolicy``
    whose LSTM has ``4 + 2 * k`` units (``k``: the group's place in ``spec``).
    """
    models = {}
    for k, (group, (algo, n_envs, n_steps)) in enumerate(spec.items()):
        obs_space, act_space = spaces[group]
        env = DummyVecEnv([partial(Slot, obs_space, act_space)] * n_envs)
        extra = {"batch_size": n_steps * n_envs, "n_epochs": 1} if algo is not A2C else {}
        image = len(obs_space.shape or ()) == 3
        recurrent = algo is RecurrentPPO
        policy = "CnnPolicy" if image else "MlpPolicy"
        models[group] = algo(
            policy.replace("Policy", "LstmPolicy") if recurrent else policy,
            env,
            n_steps=n_steps,
            seed=k,
            device="cpu",
            policy_kwargs={"net_arch": [8]}
            | ({"features_extractor_kwargs": {"features_dim": 8}} if image else {})
            | ({"lstm_hidden_size": 4 + 2 * k} if recurrent else {}),
            **extra,
        )
        assert isinstance(models[group].get_env(), VecTransposeImage) == image
        start_training(models[group], total_timesteps=10_000)
    return models


def _train(models: dict[str, Any]) -> None:
    set_random_seed(99)  # each train()'s minibatches, the same in both runs
    for model in models.values():
        model.train()


def _in_process(
    models: dict[str, Any], fns: list[Any], group_of: Any, seeds: list[int], acting_seed: int
) -> tuple[GroupRolloutCollector, list[dict[str, Any]], list[dict[str, dict[str, np.ndarray]]]]:
    """Two rollouts of the in-process collector, ``train()`` between (acting RNG kept aside)."""
    collector = GroupRolloutCollector(models, fns, group_of=group_of, seeds=seeds)
    set_acting_seed(acting_seed)
    segments, buffers = [], []
    for k in range(2):
        if k:
            acting = rng_state()
            _train(models)  # the runner's acting stream runs on undisturbed by training
            restore_rng(acting)
        segments.append(collector.collect())
        buffers.append({g: _buffer(m) for g, m in models.items()})
    return collector, segments, buffers


def _one_runner_equals_in_process(
    spec: dict[str, tuple[Any, int, int]],
    spaces: dict[str, tuple[Any, Any]],
    fns: list[Any],
    group_of: Any,
) -> tuple[RayGroupRolloutCollector, list[dict[str, Any]]]:
    seeds, acting_seed = [7, 8], 11
    ref_models = _models(spec, spaces)
    inproc, ref_segments, ref_buffers = _in_process(ref_models, fns, group_of, seeds, acting_seed)

    models = _models(spec, spaces)
    collector = RayGroupRolloutCollector(
        models,
        fns,
        group_of=group_of,
        n_runners=1,
        seeds=seeds,
        acting_seeds=[acting_seed],
        num_cpus=0,
    )
    try:
        segments, buffers = [], []
        for k in range(2):
            if k:
                _train(models)  # the second rollout acts with these weights (republished)
            segments.append(collector.collect())
            buffers.append({g: _buffer(m) for g, m in models.items()})
    finally:
        collector.close()
    for k in range(2):
        for group in spec:
            _assert_equal(buffers[k][group], ref_buffers[k][group], f"{group} rollout {k}")
        assert segments[k] == ref_segments[k]
    for group, model in models.items():
        ref = ref_models[group]
        assert model.num_timesteps == ref.num_timesteps == 2 * ref.n_steps * ref.n_envs
        assert episodes(model) == episodes(ref)
        # the second rollout acted with the trained weights: its values are not the first's
        assert not np.array_equal(buffers[1][group]["values"], buffers[0][group]["values"])
    for model in models.values():  # as stored: channel-first where SB3 transposes
        assert model.rollout_buffer.observations.shape[2:] == model.observation_space.shape
    assert collector.group_dropped == inproc.group_dropped
    assert collector.dropped == inproc.dropped
    assert {a: list(r) for a, r in collector.agent_returns.items()} == {
        a: list(r) for a, r in inproc.agent_returns.items()
    }
    return collector, segments


# one runner of 2 copies each test: PPO and MaskablePPO here, A2C in the others
def test_one_runner_fills_every_groups_buffer_as_in_process(local_ray: None) -> None:
    """Joins, deaths (terminated, truncated), waits; "even" full first, its steps dropped."""
    spec = {"even": (PPO, 2, 8), "odd": (MaskablePPO, 1, 6)}
    spaces = {g: (ENVS.OBS, ENVS.ACT) for g in spec}
    collector, segments = _one_runner_equals_in_process(
        spec, spaces, _schedule_fns(range(2)), ODD_EVEN
    )
    ends = {s.end for k in range(2) for g in spec for s in segments[k][g]}
    assert ends >= {"terminated", "truncated", "cut"}
    assert {s.agent_id for s in segments[0]["odd"]} == {"a1"}
    assert {s.agent_id for s in segments[0]["even"]} == {"a0", "a2"}
    assert collector.group_dropped["even"] > 0  # the plan dropped the full group's steps


def test_one_runner_on_simple_adversary(local_ray: None) -> None:
    """Two groups of different observation sizes on a real env (a model per group)."""
    make = adversary_fn()
    env = make()
    groups = {"adversary": ["adversary_0"], "good": ["agent_0", "agent_1"]}
    group_of = {agent: group for group, agents in groups.items() for agent in agents}
    spaces = {g: (env.observation_space(a[0]), env.action_space(a[0])) for g, a in groups.items()}
    spec = {"adversary": (PPO, 2, 8), "good": (A2C, 4, 4)}
    _, segments = _one_runner_equals_in_process(spec, spaces, [make] * 2, group_of)
    assert segments[0]["adversary"] and {s.agent_id for s in segments[0]["good"]} == set(
        groups["good"]
    )


def test_one_runner_transposes_each_image_groups_observations_as_in_process(
    local_ray: None,
) -> None:
    """A CNN per agent over channel-last images: each replica is loaded over image slots."""
    spec = {"first": (PPO, 2, 4), "second": (A2C, 2, 4)}
    spaces = {g: (ENVS.IMAGE, ENVS.ACT) for g in spec}
    group_of = {"a0": "first", "a1": "second"}  # a policy per agent
    _, segments = _one_runner_equals_in_process(spec, spaces, [ENVS.ImageParallel] * 2, group_of)
    assert {s.agent_id for s in segments[1]["second"]} == {"a1"}
    assert {s.end for s in segments[1]["first"]} >= {"truncated"}


def _two_runners_equal_in_process(spec: dict[str, tuple[Any, int, int]]) -> None:
    """2 runners x 2 copies: runner r's columns of each group == in-process over its copies."""
    seeds, acting_seeds = [3, 4, 5, 6], [21, 22]
    spaces = {g: (ENVS.OBS, ENVS.ACT) for g in spec}
    models = _models(spec, spaces)
    collector = RayGroupRolloutCollector(
        models,
        _schedule_fns(range(4)),
        group_of=ODD_EVEN,
        n_runners=2,
        seeds=seeds,
        acting_seeds=acting_seeds,
        num_cpus=0,
    )
    try:
        segments, buffers, weights = [], [], []
        for k in range(2):
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
    half = {g: (n_envs // 2, n_steps) for g, (_, n_envs, n_steps) in spec.items()}
    dropped = dict.fromkeys(spec, 0)
    for r in range(2):
        refs = _models({g: (spec[g][0], *half[g]) for g in spec}, spaces)
        inproc = GroupRolloutCollector(
            refs,
            _schedule_fns(range(2 * r, 2 * r + 2)),
            group_of=ODD_EVEN,
            seeds=seeds[2 * r :][:2],
        )
        set_acting_seed(acting_seeds[r])
        for k in range(2):
            for group, ref in refs.items():
                ref.policy.load_state_dict(weights[k][group])
            ref_segments = inproc.collect(update_model=False)
            for group, ref in refs.items():
                m = half[group][0]
                block = column_block(buffers[k][group], slice(r * m, (r + 1) * m))
                # returns and advantages hold the learner's bootstraps (the critic over all
                # runners' last observations in one batch, the reference's over one runner's)
                _assert_equal(block, _buffer(ref), f"runner {r}, {group}, rollout {k}", CLOSE)
                mine = [s for s in segments[k][group] if r * m <= s.column < (r + 1) * m]
                what = f"runner {r}, {group}, rollout {k}"
                assert_segments_moved(mine, ref_segments[group], r * m, 2 * r, what)
            if k == 1:
                for group in spec:
                    dropped[group] += inproc.group_dropped[group]
    assert collector.group_dropped == dropped
    for model in models.values():
        assert model.num_timesteps == 2 * model.n_steps * model.n_envs


def test_two_runners_fill_their_columns_of_every_group_as_in_process(local_ray: None) -> None:
    """2 runners x 2 copies: runner r's columns of each group == in-process over its copies."""
    _two_runners_equal_in_process({"even": (A2C, 4, 8), "odd": (PPO, 2, 6)})


def test_arguments_are_refused_before_any_runner_starts(local_ray: None) -> None:
    spec = {"even": (PPO, 2, 8), "odd": (A2C, 1, 8)}
    models = _models(spec, {g: (ENVS.OBS, ENVS.ACT) for g in spec})
    fns = _schedule_fns(range(2))

    def build(**kwargs: Any) -> Any:
        args: dict[str, Any] = {"models": models, "env_fns": fns, "group_of": ODD_EVEN}
        args.update(kwargs)
        return RayGroupRolloutCollector(**args)

    with pytest.raises(ValueError, match="needs models: a non-empty mapping"):
        build(models={})
    with pytest.raises(ValueError, match="groups 'even' and 'odd' have the same model object"):
        build(models={"even": models["even"], "odd": models["even"]})
    with pytest.raises(TypeError, match=r"\(group 'odd'\) needs an on-policy SB3 model"):
        build(models={"even": models["even"], "odd": object()})
    with pytest.raises(ValueError, match="exactly one of env_fns"):
        build(env_fns=None)
    with pytest.raises(ValueError, match=r"env_fns holds 2 functions.*need 4"):
        build(n_runners=2, copies_per_runner=2)
    with pytest.raises(
        ValueError, match="the model of group 'odd' has n_envs=1 buffer columns cannot be split"
    ):
        build(env_fns=fns + _schedule_fns(range(2, 4)), n_runners=2)
    with pytest.raises(ValueError, match=r"seeds must hold one seed per env copy \(2\), got 1"):
        build(seeds=[0])
    with pytest.raises(ValueError, match=r"acting_seeds must hold one seed per runner \(1\)"):
        build(acting_seeds=[0, 1])
    with pytest.raises(TypeError, match="group_of must map agent ids to group names"):
        build(group_of=["even"])
    lock = threading.Lock()
    with pytest.raises(TypeError, match="group_of must be picklable"):
        build(group_of=lambda agent: ODD_EVEN[agent] if lock else "odd")
    with pytest.raises(TypeError, match="timeout_s must be None"):
        build(timeout_s="1")
    unstarted = _models(spec, {g: (ENVS.OBS, ENVS.ACT) for g in spec})
    unstarted["odd"] = A2C("MlpPolicy", DummyVecEnv([ENVS.AgentSlot]), n_steps=8, device="cpu")
    collector = RayGroupRolloutCollector(
        unstarted, fns, group_of=ODD_EVEN, seeds=[1, 2], acting_seeds=[5], num_cpus=0
    )
    try:
        for value in ("False", 0, None):  # rule flag: refused before any runner steps
            with pytest.raises(
                TypeError,
                match=rf"^RayGroupRolloutCollector\.collect: update_model must be a bool, not "
                rf"{type(value).__name__}; .*\[rule flag\]$",
            ):
                collector.collect(update_model=value)
        with pytest.raises(ValueError, match=r"\(the model of group 'odd'\).*start_training"):
            collector.collect()
        collector.collect(update_model=False)
    finally:
        collector.close()
    # refused before the runner stepped: the rollout after it is a fresh collector's first
    ref = {g: _models({g: spec[g]}, {g: (ENVS.OBS, ENVS.ACT)})[g] for g in spec}
    ref["odd"] = A2C("MlpPolicy", DummyVecEnv([ENVS.AgentSlot]), n_steps=8, device="cpu")
    for group, model in ref.items():
        model.policy.load_state_dict(unstarted[group].policy.state_dict())
    inproc = GroupRolloutCollector(ref, fns, group_of=ODD_EVEN, seeds=[1, 2])
    set_acting_seed(5)
    inproc.collect(update_model=False)
    for group in spec:
        _assert_equal(_buffer(unstarted[group]), _buffer(ref[group]), f"{group} after refusal")


def test_a_group_of_without_an_agents_group_is_named_by_its_runner(local_ray: None) -> None:
    spec = {"even": (PPO, 2, 8), "odd": (A2C, 1, 8)}
    models = _models(spec, {g: (ENVS.OBS, ENVS.ACT) for g in spec})
    with pytest.raises(
        RuntimeError, match=r"(?s)runner 'pz-runner-0' failed to build.*agent 'a2'.*no group"
    ):
        RayGroupRolloutCollector(
            models, _schedule_fns(range(1)), group_of={"a0": "even", "a1": "odd"}, num_cpus=0
        )
