"""RayGroupReplayCollector: the in-process group replay collector's buffers, from Ray runners.

The oracle is ``rlightning_pettingzoo.GroupReplayCollector`` (itself checked against env logs
in tests/pettingzoo/test_collector_groups.py). One runner of 2 copies: over the same copies,
reset seeds and acting seed (:func:`rlightning_pettingzoo.set_group_acting_seed`, what the
runner does to its replicas), with each model's ``train()`` between rollouts as ``learn()``
does, every group's replay-buffer arrays, counters (``num_timesteps``, DQN's
``exploration_rate``, episodes), stored counts, ``ep_info_buffer``, trained weights and agent
returns equal the in-process collector's, exactly, over rollouts whose exploration crosses each
group's ``learning_starts`` mid-rollout: two DQN groups on ``ScheduleEnv`` (joins, deaths
terminated and truncated, waits; one group counting ``train_freq`` in episodes), a SAC and a TD3
group on its Box-action version (also with action noise: a Gaussian SAC group, an
Ornstein-Uhlenbeck TD3 group, one process per slot in the runner's recorder), two DQN groups on
mpe2's ``simple_adversary``. Two runners of
2 copies: runner ``r``'s columns of each group equal the in-process collector over runner
``r``'s copies with models of half the columns, ``learning_starts`` and budget, loaded with the
learners' weights: each group explores on its learner's clock.
"""

from __future__ import annotations

import copy
import threading
from functools import partial
from typing import Any

import numpy as np
import pytest
import torch as th
from rlightning_ray_test_pz_checks import (
    BOX,
    ENVS,
    REPLAY_FIELDS,
    BoxScheduleEnv,
    Slot,
    adversary_fn,
    replay_arrays,
    replay_counters,
    restore_rng,
    rng_state,
    train_off_policy,
)
from stable_baselines3 import DQN, PPO, SAC, TD3
from stable_baselines3.common.noise import NormalActionNoise, OrnsteinUhlenbeckActionNoise
from stable_baselines3.common.vec_env import DummyVecEnv

from rlightning_pettingzoo import GroupReplayCollector, set_group_acting_seed
from rlightning_ray.pettingzoo import RayGroupReplayCollector, RayGroupRolloutCollector
from rlightning_sb3 import start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

# a0 (even) lives the episode (truncated at 6); a1 (odd) joins at 1, terminated at 3; a2 (even)
# joins at 2, truncated at 5; a1 waits at step 2, a2 at step 3 (their masks allow nothing)
SCHEDULE = [(0, 6, "truncated"), (1, 3, "terminated"), (2, 5, "truncated")]
WAITS = frozenset({(1, 2), (2, 3)})
ODD_EVEN = {"a0": "even", "a1": "odd", "a2": "even"}  # a dict: picklable to the runners
ADVERSARY = {"adversary_0": "adversary", "agent_0": "good", "agent_1": "good"}


def _schedule_fns(copies: range) -> list[Any]:
    return [partial(ENVS.ScheduleEnv, SCHEDULE, copy, WAITS) for copy in copies]


def _box_fns(copies: range) -> list[Any]:
    return [partial(BoxScheduleEnv, SCHEDULE, copy) for copy in copies]


#: group -> (algo, n_envs, learning_starts, extra kwargs)
Spec = dict[str, tuple[Any, int, int, dict[str, Any]]]


def _models(spec: Spec, spaces: dict[str, tuple[Any, Any]], scale: int = 1) -> dict[str, Any]:
    """Group -> ``algo`` over ``n_envs // scale`` slots of its spaces (``learning_starts //
    scale``), tiny nets, seed ``k`` (its position), each over its own action space object."""
    models = {}
    for k, (group, (algo, n_envs, learning_starts, extra)) in enumerate(spec.items()):
        kwargs: dict[str, Any] = {
            "learning_starts": learning_starts // scale,
            "train_freq": 2,
            "batch_size": 8,
            "buffer_size": 200,
            "seed": k,
            "device": "cpu",
            "policy_kwargs": {"net_arch": [8]},
        }
        if algo is DQN:
            kwargs |= {"exploration_fraction": 0.5, "target_update_interval": 4}
        # a space object of its own: models over one object would sample one generator in
        # process, while each replica has its own (set_group_acting_seed refuses that)
        obs_space, act_space = spaces[group][0], copy.deepcopy(spaces[group][1])
        env = DummyVecEnv([partial(Slot, obs_space, act_space)] * (n_envs // scale))
        models[group] = algo("MlpPolicy", env, **(kwargs | copy.deepcopy(extra)))
    return models


def _weights(models: dict[str, Any]) -> dict[str, dict[str, th.Tensor]]:
    return {g: {n: t.clone() for n, t in m.policy.state_dict().items()} for g, m in models.items()}


SCHEDULE_DQN: Spec = {
    "even": (DQN, 2, 6, {}),
    # a1's rollouts end with its episodes (one runner: SB3 allows episodic training with one env)
    "odd": (DQN, 1, 3, {"train_freq": (1, "episode")}),
}
BOX_SPEC: Spec = {"even": (SAC, 2, 6, {}), "odd": (TD3, 1, 3, {})}
_DIMS = int(np.prod(BOX.shape))
# action noise per group (one process per (copy, agent) slot of the group, in the runner's
# recorder): a stateful OU process for TD3, Gaussian for SAC
NOISE_SPEC: Spec = {
    "even": (SAC, 2, 6, {"action_noise": NormalActionNoise(np.zeros(_DIMS), 0.3 * np.ones(_DIMS))}),
    "odd": (
        TD3,
        1,
        3,
        {"action_noise": OrnsteinUhlenbeckActionNoise(np.zeros(_DIMS), 0.3 * np.ones(_DIMS))},
    ),
}
CASES: dict[str, tuple[Spec, Any, Any]] = {
    "schedule-DQN": (SCHEDULE_DQN, _schedule_fns(range(2)), ODD_EVEN),
    "box-SAC-TD3": (BOX_SPEC, _box_fns(range(2)), ODD_EVEN),
    "box-noise": (NOISE_SPEC, _box_fns(range(2)), ODD_EVEN),
    "adversary-DQN": (
        {"adversary": (DQN, 1, 4, {}), "good": (DQN, 2, 6, {"train_freq": 3})},
        None,
        ADVERSARY,
    ),
}


def _spaces(case: str, fns: list[Any]) -> dict[str, tuple[Any, Any]]:
    if case == "adversary-DQN":
        env = fns[0]()
        return {
            "adversary": (env.observation_space("adversary_0"), env.action_space("adversary_0")),
            "good": (env.observation_space("agent_0"), env.action_space("agent_0")),
        }
    return {g: (ENVS.OBS, BOX if case.startswith("box") else ENVS.ACT) for g in ("even", "odd")}


@pytest.mark.parametrize("case", list(CASES))
def test_one_runner_fills_every_groups_buffer_as_in_process(local_ray: None, case: str) -> None:
    """1 runner x 2 copies == GroupReplayCollector over them: 4 rollouts, trained between."""
    spec, fns, group_of = CASES[case]
    if fns is None:
        fns = [adversary_fn(max_cycles=4)] * 2
    spaces = _spaces(case, fns)
    seeds, acting_seed, rollouts, total = [7, 8], 11, 4, 60
    refs = _models(spec, spaces)
    envs = [fn() for fn in fns]
    inproc = GroupReplayCollector(
        refs, [lambda e=e: e for e in envs], group_of=group_of, seeds=seeds
    )
    for ref in refs.values():
        start_training(ref, total)
    set_group_acting_seed(refs, acting_seed)  # what the runner does to its replicas
    want, want_counters, want_stored = [], [], []
    for _ in range(rollouts):
        want_stored.append(inproc.collect())
        want.append({g: replay_arrays(m) for g, m in refs.items()})
        want_counters.append({g: replay_counters(m) for g, m in refs.items()})
        acting = rng_state()  # in process, training draws from the acting generators: kept apart
        for ref in refs.values():
            train_off_policy(ref)
        restore_rng(acting)

    models = _models(spec, spaces)
    collector = RayGroupReplayCollector(
        models, fns, group_of=group_of, seeds=seeds, acting_seeds=[acting_seed], num_cpus=0.5
    )
    got, got_counters, got_stored = [], [], []
    try:
        # refused before the runner steps (named by group): the rollouts below are in process's
        first = next(iter(spec))
        with pytest.raises(ValueError, match=rf"\(the model of group '{first}'\).*start_training"):
            collector.collect()
        for model in models.values():
            start_training(model, total)
        for _ in range(rollouts):
            got_stored.append(collector.collect())
            got.append({g: replay_arrays(m) for g, m in models.items()})
            got_counters.append({g: replay_counters(m) for g, m in models.items()})
            assert collector.runner_counters() == [{g: c[:2] for g, c in got_counters[-1].items()}]
            for model in models.values():
                train_off_policy(model)
    finally:
        collector.close()
    assert got_stored == want_stored
    for k in range(rollouts):
        assert got_counters[k] == want_counters[k], k
        for group in spec:
            assert got[k][group].keys() == want[k][group].keys()
            for name in REPLAY_FIELDS:
                np.testing.assert_array_equal(
                    got[k][group][name], want[k][group][name], err_msg=f"{k} {group} {name}"
                )
    for group, model in models.items():
        ref = refs[group]
        assert model._n_updates == ref._n_updates > 0, group  # every group trained
        for (key, mine), (_, theirs) in zip(
            model.policy.state_dict().items(), ref.policy.state_dict().items(), strict=True
        ):
            assert th.equal(mine, theirs), (group, key)
        assert [(e["r"], e["l"]) for e in model.ep_info_buffer] == [
            (e["r"], e["l"]) for e in ref.ep_info_buffer
        ], group
        assert model._episode_num > 0, group
        if isinstance(model, DQN):
            assert model.exploration_rate < 1.0, group  # epsilon decayed over the rollouts
    assert {a: list(r) for a, r in collector.agent_returns.items()} == {
        a: list(r) for a, r in inproc.agent_returns.items()
    }
    if case != "adversary-DQN":
        dones = np.concatenate([got[-1][g]["dones"].ravel() for g in spec]).astype(bool)
        timeouts = np.concatenate([got[-1][g]["timeouts"].ravel() for g in spec]).astype(bool)
        assert (dones & timeouts).any() and (dones & ~timeouts).any()  # truncated, terminated
        waited = any(e[1] is None for env in envs for s in env.log.values() for e in s.values())
        assert waited == (case == "schedule-DQN")
    if case == "box-SAC-TD3":  # the warm-up's uniform actions, then each actor's
        for group in spec:
            actions = got[-1][group]["actions"]
            assert actions.min() >= -1 and actions.max() <= 1


TWO_RUNNERS: dict[str, tuple[Spec, Any, Any]] = {
    # even: 2 columns per runner, warm-up over after its 2nd row; odd: 1 column per runner
    "DQN": (
        {"even": (DQN, 4, 8, {}), "odd": (DQN, 2, 4, {"train_freq": 3})},
        _schedule_fns,
        ENVS.ACT,
    ),
    "SAC-TD3": ({"even": (SAC, 4, 8, {}), "odd": (TD3, 2, 4, {"train_freq": 3})}, _box_fns, BOX),
}


@pytest.mark.parametrize("case", list(TWO_RUNNERS))
def test_two_runners_fill_their_columns_of_every_group_on_its_learners_clock(
    local_ray: None, case: str
) -> None:
    """2 runners x 2 copies: runner r's columns of each group == in process over its copies."""
    seeds, acting_seeds, rollouts, total = [3, 4, 5, 6], [21, 22], 3, 80
    spec, make_fns, action_space = TWO_RUNNERS[case]
    spaces = {g: (ENVS.OBS, action_space) for g in spec}
    models = _models(spec, spaces)
    collector = RayGroupReplayCollector(
        models,
        make_fns(range(4)),
        group_of=ODD_EVEN,
        n_runners=2,
        seeds=seeds,
        acting_seeds=acting_seeds,
        num_cpus=0.5,
    )
    weights, counters = [], []
    try:
        for model in models.values():
            start_training(model, total)
        for _ in range(rollouts):
            weights.append(_weights(models))
            assert collector.collect() == {"even": 2 * 4, "odd": 3 * 2}
            counters.append({g: replay_counters(m)[:2] for g, m in models.items()})
            # each runner advanced every group's counters as its learner did, row by row
            assert collector.runner_counters() == [counters[-1]] * 2
            for model in models.values():
                train_off_policy(model)
    finally:
        collector.close()
    with pytest.raises(RuntimeError, match="RayGroupReplayCollector is closed"):
        collector.collect()
    for group, model in models.items():
        assert model._n_updates > 0, group
    for r in range(2):
        refs = _models(spec, spaces, scale=2)
        inproc = GroupReplayCollector(
            refs,
            make_fns(range(2 * r, 2 * r + 2)),
            group_of=ODD_EVEN,
            seeds=seeds[2 * r :][:2],
        )
        for ref in refs.values():
            start_training(ref, total // 2)
        set_group_acting_seed(refs, acting_seeds[r])
        for k in range(rollouts):
            for group, ref in refs.items():
                ref.policy.load_state_dict(weights[k][group])
            inproc.collect()
            for group, ref in refs.items():
                # half the columns, half the steps: the same progress, the same epsilon
                assert 2 * ref.num_timesteps == counters[k][group][0], (r, k, group)
                assert replay_counters(ref)[1] == counters[k][group][1], (r, k, group)
        for group, ref in refs.items():
            m = ref.n_envs
            block = replay_arrays(models[group], slice(r * m, (r + 1) * m))
            for name in REPLAY_FIELDS:
                np.testing.assert_array_equal(
                    block[name], replay_arrays(ref)[name], err_msg=f"{r} {group} {name}"
                )


def test_unfit_models_are_refused_by_group_before_any_runner_starts(local_ray: None) -> None:
    spaces = {g: (ENVS.OBS, ENVS.ACT) for g in ("even", "odd")}
    models = _models(SCHEDULE_DQN, spaces)
    fns = _schedule_fns(range(2))
    name = "RayGroupReplayCollector"

    def build(**kwargs: Any) -> Any:
        args: dict[str, Any] = {"models": models, "env_fns": fns, "group_of": ODD_EVEN}
        return RayGroupReplayCollector(**(args | kwargs))

    ppo = PPO("MlpPolicy", DummyVecEnv([ENVS.AgentSlot]), n_steps=8, batch_size=8)
    with pytest.raises(
        TypeError, match=rf"{name} \(group 'odd'\) needs an off-policy .*got PPO.*RayGroupRollout"
    ):
        build(models={"even": models["even"], "odd": ppo})
    with pytest.raises(
        TypeError, match=r"RayGroupRolloutCollector \(group 'even'\) needs an on-policy .*DQN"
    ):
        RayGroupRolloutCollector(models, fns, group_of=ODD_EVEN)
    with pytest.raises(TypeError, match=rf"{name} \(group 'odd'\) needs an off-policy SB3 model"):
        build(models={"even": models["even"], "odd": object()})
    with pytest.raises(ValueError, match="needs models: a non-empty mapping"):
        build(models={})
    with pytest.raises(ValueError, match="groups 'even' and 'odd' have the same model object"):
        build(models={"even": models["even"], "odd": models["even"]})
    compact = _models(
        {
            "odd": (
                DQN,
                1,
                0,
                {
                    "optimize_memory_usage": True,
                    "replay_buffer_kwargs": {"handle_timeout_termination": False},
                },
            )
        },
        spaces,
    )["odd"]
    with pytest.raises(ValueError, match=r"\(group 'odd'\) cannot fill .*optimize_memory_usage"):
        build(models={"even": models["even"], "odd": compact})
    sde = _models({"odd": (SAC, 1, 0, {"use_sde": True})}, {"odd": (ENVS.OBS, BOX)})["odd"]
    with pytest.raises(ValueError, match=r"\(group 'odd'\) does not support gSDE"):
        build(models={"even": models["even"], "odd": sde}, env_fns=_box_fns(range(2)))
    with pytest.raises(
        ValueError, match=r"\(group 'odd'\) cannot split train_freq=\(1, 'episode'\).* over 2"
    ):
        build(env_fns=_schedule_fns(range(4)), n_runners=2)
    steps = _models({g: (DQN, n, 0, {}) for g, n in (("even", 2), ("odd", 1))}, spaces)
    with pytest.raises(
        ValueError, match="the model of group 'odd' has n_envs=1 buffer columns cannot be split"
    ):
        build(models=steps, env_fns=_schedule_fns(range(4)), n_runners=2)
    with pytest.raises(TypeError, match="group_of must map agent ids to group names"):
        build(group_of=["even"])
    lock = threading.Lock()
    with pytest.raises(TypeError, match="group_of must be picklable"):
        build(group_of=lambda agent: ODD_EVEN[agent] if lock else "odd")
    with pytest.raises(ValueError, match=r"seeds must hold one seed per env copy \(2\), got 1"):
        build(seeds=[0])
    with pytest.raises(ValueError, match=r"acting_seeds must hold one seed per runner \(1\)"):
        build(acting_seeds=[0, 1])
    with pytest.raises(ValueError, match=r"timeout_s must be None .* > 0, got 0"):
        build(timeout_s=0)


def test_a_group_of_without_an_agents_group_is_named_by_its_runner(local_ray: None) -> None:
    models = _models(SCHEDULE_DQN, {g: (ENVS.OBS, ENVS.ACT) for g in ("even", "odd")})
    with pytest.raises(
        RuntimeError, match=r"(?s)runner 'pz-runner-0' failed to build.*agent 'a2'.*no group"
    ):
        RayGroupReplayCollector(
            models, _schedule_fns(range(1)), group_of={"a0": "even", "a1": "odd"}, num_cpus=0
        )
