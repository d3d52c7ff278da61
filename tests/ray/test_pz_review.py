"""Review findings on the PettingZoo collectors on Ray runners (each test failed before its fix).

Eval mode: SB3's ``collect_rollouts`` calls ``policy.set_training_mode(False)`` as each rollout
starts, and the in-process collectors act with the learner's own model (their adapter puts it in
eval mode), so the truncation bootstraps ``gamma * V(final observation)`` and the last values
the fill computes on the learner are eval-mode values. On Ray runners the learner never acts: a
fresh model (torch modules start in training mode) or one just trained (``train()`` leaves it in
training mode) computed them in training mode. With a policy whose output depends on the mode
(dropout, batch norm) the buffer's ``rewards`` (bootstrapped), ``returns`` and ``advantages``
silently differed from the in-process collector's (and SB3's). Fixed where SB3's rule is kept:
``rlightning_sb3.add_rollout_step`` (every fill's first step).
"""

from __future__ import annotations

import sys
import threading
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import ray
import torch as th
from pettingzoo.classic import tictactoe_v3
from rlightning_ray_test_helpers import assert_same_rollouts, two_rollouts
from rlightning_ray_test_pz_checks import ENVS, FIELDS, assert_arrays, buffer_arrays
from sb3_contrib import MaskablePPO, RecurrentPPO
from stable_baselines3 import DQN, PPO
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.utils import set_random_seed
from stable_baselines3.common.vec_env import DummyVecEnv, VecTransposeImage

from rlightning_pettingzoo import (
    AECRolloutCollector,
    GroupRolloutCollector,
    SharedRolloutCollector,
)
from rlightning_ray.pettingzoo import (
    RayAECRolloutCollector,
    RayGroupRolloutCollector,
    RaySharedRolloutCollector,
)
from rlightning_sb3 import StopTraining, set_acting_seed, start_training

pytestmark = pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")

# a0 lives the episode (truncated at 6: a bootstrap); a1 joins at 1, terminated at 3; a2
# joins at 2, truncated at 5
SCHEDULE = [(0, 6, "truncated"), (1, 3, "terminated"), (2, 5, "truncated")]


def _env_fns(copies: range) -> list[Any]:
    return [partial(ENVS.ScheduleEnv, SCHEDULE, copy) for copy in copies]


def _dropout_model(n_envs: int) -> Any:
    """A PPO whose hidden layers are followed by ``nn.Dropout`` (mode-dependent output)."""
    env = DummyVecEnv([ENVS.AgentSlot] * n_envs)
    kwargs = {"net_arch": [16], "activation_fn": th.nn.Dropout}
    model = PPO(
        "MlpPolicy", env, n_steps=8, batch_size=8, n_epochs=1, seed=0, device="cpu",
        policy_kwargs=kwargs,
    )  # fmt: skip
    start_training(model, total_timesteps=10_000)
    return model


def test_bootstraps_are_eval_mode_values_as_in_process(local_ray: None) -> None:
    """A dropout policy: the learner's bootstraps and last values as the in-process collector's."""
    n_envs, seeds, acting_seed = 2, [7, 8], 11
    ref = _dropout_model(n_envs)
    inproc = SharedRolloutCollector(ref, _env_fns(range(2)), seeds=seeds)
    want = two_rollouts(inproc, ref, buffer_arrays, acting_seed)
    model = _dropout_model(n_envs)
    assert model.policy.training  # a fresh torch module: training mode
    collector = RaySharedRolloutCollector(
        model, _env_fns(range(2)), seeds=seeds, acting_seeds=[acting_seed], num_cpus=0.5
    )
    got = two_rollouts(collector, model, buffer_arrays, None)
    assert {s.end for s in got[0][0] + got[0][1]} >= {"terminated", "truncated", "cut"}
    assert_same_rollouts(got, want, (collector, inproc), (model, ref))
    assert not np.array_equal(want[1][0]["returns"], want[1][0]["rewards"])


# ---------------------------------------------------------------------------------------------
# Probes that found nothing, kept as regressions: many runners, three copies per runner, three
# rollouts with train() between, n_steps that does not divide the episodes, every algorithm,
# masks in Dict observations.

STATES = ("hidden_states_pi", "cell_states_pi", "hidden_states_vf", "cell_states_vf")
CLOSE = ("returns", "advantages")


def _arrays(model: Any) -> dict[str, np.ndarray]:
    """Copies of the buffer's arrays (a Dict space's observations per key; LSTM states)."""
    buf = model.rollout_buffer
    names = [n for n in ("observations", *FIELDS) if n != "observations"]
    out = {name: np.array(getattr(buf, name)) for name in names}
    if isinstance(buf.observations, dict):
        out.update({f"obs/{k}": np.array(v) for k, v in buf.observations.items()})
    else:
        out["observations"] = np.array(buf.observations)
    if hasattr(buf, "action_masks"):
        out["action_masks"] = np.array(buf.action_masks.reshape(buf.buffer_size, buf.n_envs, -1))
    if hasattr(buf, "hidden_states_pi"):
        out.update({name: np.array(getattr(buf, name)) for name in STATES})
    return out


def _columns(arrays: dict[str, np.ndarray], cols: slice) -> dict[str, np.ndarray]:
    return {n: a[:, :, cols] if n in STATES else a[:, cols] for n, a in arrays.items()}


def _model(algo: Any, n_envs: int, slot: Any, n_steps: int) -> Any:
    env = DummyVecEnv([slot] * n_envs)
    extra: dict[str, Any] = {"batch_size": n_steps * n_envs, "n_epochs": 1}
    policy = "MultiInputPolicy" if slot is ENVS.DictSlot else "MlpPolicy"
    extra["policy_kwargs"] = {"net_arch": [8]}
    if algo is RecurrentPPO:
        policy = "MultiInputLstmPolicy" if slot is ENVS.DictSlot else "MlpLstmPolicy"
        extra["policy_kwargs"]["lstm_hidden_size"] = 4
    model = algo(policy, env, n_steps=n_steps, seed=0, device="cpu", **extra)
    start_training(model, total_timesteps=100_000)
    return model


def _where(s: Any) -> tuple[Any, ...]:
    return (s.start_row, s.stop_row, s.agent_id, s.end, s.env_steps)


def _runners_equal_in_process(
    algo: Any,
    env_fns: Any,
    slot: Any,
    *,
    n_runners: int,
    copies: int,
    columns: int,
    n_steps: int,
    rollouts: int,
) -> None:
    """Each runner's columns == the in-process collector over its copies, ``rollouts`` times."""
    n_envs = n_runners * columns
    seeds = list(range(100, 100 + n_runners * copies))
    acting_seeds = [40 + r for r in range(n_runners)]
    model = _model(algo, n_envs, slot, n_steps)
    collector = RaySharedRolloutCollector(
        model,
        env_fns(range(n_runners * copies)),
        n_runners=n_runners,
        copies_per_runner=copies,
        seeds=seeds,
        acting_seeds=acting_seeds,
        num_cpus=0,
    )
    segments, buffers, weights = [], [], []
    try:
        for _ in range(rollouts):
            weights.append({k: v.clone() for k, v in model.policy.state_dict().items()})
            segments.append(collector.collect())
            buffers.append(_arrays(model))
            model.train()
    finally:
        collector.close()
    assert model.num_timesteps == rollouts * n_steps * n_envs
    ends = set()
    for r in range(n_runners):
        ref = _model(algo, columns, slot, n_steps)
        block = range(r * copies, (r + 1) * copies)
        inproc = SharedRolloutCollector(
            ref, env_fns(block), seeds=seeds[r * copies : (r + 1) * copies]
        )
        set_acting_seed(acting_seeds[r])
        cols = slice(r * columns, (r + 1) * columns)
        for k in range(rollouts):
            ref.policy.load_state_dict(weights[k])
            want_segments = inproc.collect()
            assert_arrays(
                _columns(buffers[k], cols), _arrays(ref), f"runner {r}, rollout {k}", CLOSE
            )
            mine = [s for s in segments[k] if cols.start <= s.column < cols.stop]
            assert [
                (s.column - cols.start, s.env_index - block.start, *_where(s)) for s in mine
            ] == [(s.column, s.env_index, *_where(s)) for s in want_segments]
            ends |= {s.end for s in mine}
    assert not np.array_equal(buffers[1]["values"], buffers[0]["values"])  # new weights acted
    assert ends >= {"terminated", "truncated", "cut"}


WAITS = frozenset({(1, 2), (2, 3)})


def _schedule_fns(copies: range, masked: bool = False) -> list[Any]:
    return [partial(ENVS.ScheduleEnv, SCHEDULE, c, WAITS, masked) for c in copies]


def _dict_fns(copies: range) -> list[Any]:
    return [partial(ENVS.MaskInObservation, SCHEDULE, c, WAITS, True) for c in copies]


@pytest.mark.parametrize(
    ("algo", "fns", "slot"),
    [
        (PPO, _schedule_fns, ENVS.AgentSlot),
        (MaskablePPO, partial(_schedule_fns, masked=True), ENVS.AgentSlot),
        (RecurrentPPO, _schedule_fns, ENVS.AgentSlot),
        (MaskablePPO, _dict_fns, ENVS.DictSlot),
    ],
    ids=["PPO", "MaskablePPO", "RecurrentPPO", "MaskablePPO-dict"],
)
def test_three_runners_three_copies_three_rollouts(
    local_ray: None, algo: Any, fns: Any, slot: Any
) -> None:
    _runners_equal_in_process(
        algo, fns, slot, n_runners=3, copies=3, columns=2, n_steps=5, rollouts=3
    )


# ---------------------------------------------------------------------------------------------
# Acting seeds >= 2**32 passed the checks; every runner was built (torch and SB3 imported, the
# replica loaded: seconds) and then failed with numpy's bare "Seed must be between 0 and
# 2**32 - 1" (set_acting_seed is SB3's set_random_seed). The default model.seed + r overflowed
# the same way for the last runners of a model seeded near 2**32.


def test_an_acting_seed_past_numpys_range_is_refused_before_any_runner_is_built(
    local_ray: None,
) -> None:
    model = _model(PPO, 2, ENVS.AgentSlot, 4)
    with pytest.raises(ValueError, match=r"acting_seeds\[1\] must be < 2\*\*32.*got 4294967296"):
        RaySharedRolloutCollector(
            model, _schedule_fns(range(2)), n_runners=2, acting_seeds=[0, 2**32], num_cpus=0
        )
    model.seed = 2**32 - 1  # SB3's own range; runner 1's default seed is one past it
    with pytest.raises(ValueError, match=r"runner 1's default acting seed model.seed \+ 1"):
        RaySharedRolloutCollector(model, _schedule_fns(range(2)), n_runners=2, num_cpus=0)
    with pytest.raises(ValueError, match=r"RayAECRolloutCollector acting_seeds\[0\]"):
        RayAECRolloutCollector(model, [ENVS.AgentSlot], acting_seeds=[2**40], num_cpus=0)


# ---------------------------------------------------------------------------------------------
# collect() after close() failed with Python's bare "zip() argument 2 is longer than argument 1"
# (RunnerPool.get zipped no refs with the runners' ids). A killed runner is named, at every later
# collect() too (probe: found nothing).


def test_collect_after_close_is_refused_naming_the_collector(local_ray: None) -> None:
    model = _model(PPO, 2, ENVS.AgentSlot, 4)
    collector = RaySharedRolloutCollector(model, _schedule_fns(range(1)), seeds=[0], num_cpus=0)
    collector.collect()
    collector.close()
    before = model.num_timesteps
    with pytest.raises(RuntimeError, match=r"RaySharedRolloutCollector.*closed"):
        collector.collect()
    assert model.num_timesteps == before


def test_a_killed_runner_is_named_at_every_collect(local_ray: None) -> None:
    model = _model(PPO, 2, ENVS.AgentSlot, 4)
    collector = RaySharedRolloutCollector(
        model, _schedule_fns(range(2)), n_runners=2, seeds=[0, 1], num_cpus=0
    )
    try:
        collector.collect()
        ray.kill(collector._pool.actors[1])
        for _ in range(2):
            with pytest.raises(RuntimeError, match=r"runner 'pz-runner-1' failed to record"):
                collector.collect()
    finally:
        collector.close()


# ---------------------------------------------------------------------------------------------
# collector.timeout_s, a public attribute, was a copy of the constructor's: setting it changed
# nothing (the pool kept its own), silently; a bad value was not checked either.


def test_setting_timeout_s_limits_the_next_collect(local_ray: None) -> None:
    model = _model(PPO, 2, ENVS.AgentSlot, 4)
    collector = RaySharedRolloutCollector(model, _schedule_fns(range(1)), seeds=[0], num_cpus=0)
    try:
        assert collector.timeout_s is None
        with pytest.raises(ValueError, match=r"RaySharedRolloutCollector: timeout_s must be"):
            collector.timeout_s = -1.0
        collector.timeout_s = 1e-9  # no runner records a rollout in a nanosecond
        with pytest.raises(RuntimeError, match=r"'pz-runner-0' did not record a rollout within"):
            collector.collect()
        assert model.num_timesteps == 0
    finally:
        collector.close()


# ---------------------------------------------------------------------------------------------
# Probe (found nothing; kept): a RecurrentPPO over a sequence of collect(), train(),
# collect(update_model=False), collect() stopped by a callback: the learner's buffer, counters
# and the StopTraining raised equal the in-process collector's, and the next collect() refuses
# before any runner steps.


class _StopAt(BaseCallback):
    def __init__(self, calls: int) -> None:
        super().__init__()
        self.calls = calls

    def _on_step(self) -> bool:
        self.calls -= 1
        return self.calls > 0


def _sequence(collector: Any, model: Any, acting_seed: int | None) -> list[Any]:
    from rlightning_ray_test_helpers import acting_state, restore_acting_state

    out: list[Any] = []
    if acting_seed is not None:
        set_acting_seed(acting_seed)
    for update in (True, False, True):
        try:
            collector.collect(update_model=update)
            out.append(("ok", model.num_timesteps, _arrays(model)))
        except StopTraining:
            pos = model.rollout_buffer.pos
            out.append(("stopped", model.num_timesteps, pos, _arrays(model)))
            break  # the buffer is not full: no train()
        saved = acting_state()
        set_random_seed(99)
        model.train()
        if acting_seed is not None:
            restore_acting_state(saved)
    with pytest.raises(StopTraining):
        collector.collect()
    return out


def test_recurrent_update_model_false_and_a_stopping_callback_as_in_process(
    local_ray: None,
) -> None:
    n_envs, seeds, acting_seed = 2, [7, 8], 11

    def model() -> Any:
        m = _model(RecurrentPPO, n_envs, ENVS.AgentSlot, 5)
        start_training(m, total_timesteps=100_000, callback=_StopAt(5 + 3))  # rollout 3, row 2
        return m

    ref = model()
    want = _sequence(SharedRolloutCollector(ref, _schedule_fns(range(2)), seeds=seeds), ref, 11)
    learner = model()
    collector = RaySharedRolloutCollector(
        learner, _schedule_fns(range(2)), seeds=seeds, acting_seeds=[acting_seed], num_cpus=0
    )
    try:
        got = _sequence(collector, learner, None)
    finally:
        collector.close()
    assert [g[:3] if g[0] == "stopped" else g[:2] for g in got] == [
        w[:3] if w[0] == "stopped" else w[:2] for w in want
    ]
    assert got[-1][0] == "stopped"
    for g, w in zip(got, want, strict=True):
        assert_arrays(g[-1], w[-1], str(g[:2]))


# ---------------------------------------------------------------------------------------------
# Probe (found nothing; kept): the group collector with 3 runners x 3 copies, 3 rollouts with
# train() between, n_steps that do not divide the episodes, groups of unequal shares.

GROUP_OF = {"a0": "even", "a1": "odd", "a2": "even"}


def _group_models(share: dict[str, int]) -> dict[str, Any]:
    spec = {"even": (PPO, 2, 5), "odd": (MaskablePPO, 1, 3)}
    models = {}
    for group, (algo, columns, n_steps) in spec.items():
        n_envs = columns * share[group]
        models[group] = algo(
            "MlpPolicy",
            DummyVecEnv([ENVS.AgentSlot] * n_envs),
            n_steps=n_steps,
            batch_size=n_steps * n_envs,
            n_epochs=1,
            seed=len(models),
            device="cpu",
            policy_kwargs={"net_arch": [8]},
        )
        start_training(models[group], total_timesteps=100_000)
    return models


def test_group_collector_three_runners_three_copies_three_rollouts(local_ray: None) -> None:
    n_runners, copies, rollouts = 3, 3, 3
    seeds = list(range(200, 200 + n_runners * copies))
    acting_seeds = [60 + r for r in range(n_runners)]
    models = _group_models({"even": n_runners, "odd": n_runners})
    collector = RayGroupRolloutCollector(
        models,
        _schedule_fns(range(n_runners * copies)),
        group_of=GROUP_OF,
        n_runners=n_runners,
        seeds=seeds,
        acting_seeds=acting_seeds,
        num_cpus=0,
    )
    got, weights = [], []
    try:
        for _ in range(rollouts):
            weights.append(
                {
                    g: {k: v.clone() for k, v in m.policy.state_dict().items()}
                    for g, m in models.items()
                }
            )
            segments = collector.collect()
            got.append((segments, {g: _arrays(m) for g, m in models.items()}))
            for m in models.values():
                m.train()
    finally:
        collector.close()
    for r in range(n_runners):
        refs = _group_models({"even": 1, "odd": 1})
        block = range(r * copies, (r + 1) * copies)
        inproc = GroupRolloutCollector(
            refs,
            _schedule_fns(block),
            group_of=GROUP_OF,
            seeds=seeds[r * copies : (r + 1) * copies],
        )
        set_acting_seed(acting_seeds[r])
        for k in range(rollouts):
            for g, m in refs.items():
                m.policy.load_state_dict(weights[k][g])
            want_segments = inproc.collect()
            for g, m in refs.items():
                n = m.n_envs
                cols = slice(r * n, (r + 1) * n)
                assert_arrays(
                    _columns(got[k][1][g], cols), _arrays(m), f"{g} runner {r} rollout {k}", CLOSE
                )
                mine = [s for s in got[k][0][g] if cols.start <= s.column < cols.stop]
                assert [
                    (s.column - cols.start, s.env_index - block.start, *_where(s)) for s in mine
                ] == [(s.column, s.env_index, *_where(s)) for s in want_segments[g]]


# ---------------------------------------------------------------------------------------------
# Probe: Dict observations with a channel-last image key (SB3 wraps a MultiInputPolicy's env in
# VecTransposeImage, which transposes the image key): the replica transposes as in process.

DICT_IMAGE = gym.spaces.Dict(
    {"image": ENVS.IMAGE, "vec": gym.spaces.Box(-10.0, 10.0, (2,), np.float32)}
)


class DictImageParallel(ENVS.ImageParallel):  # type: ignore[misc, name-defined]
    """ImageParallel's images with a small vector beside them (a Dict observation)."""

    def observation_space(self, agent: str) -> Any:
        return DICT_IMAGE

    def _observe(self, actions: dict[str, Any]) -> dict[str, Any]:
        images = super()._observe(actions)
        return {
            a: {"image": im, "vec": np.array([self.t, len(a)], np.float32)}
            for a, im in images.items()
        }


class DictImageSlot(gym.Env[Any, Any]):
    observation_space = DICT_IMAGE
    action_space = ENVS.ACT

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}


def _dict_image_model(n_envs: int) -> Any:
    model = PPO(
        "MultiInputPolicy",
        DummyVecEnv([DictImageSlot] * n_envs),
        n_steps=6,
        batch_size=6 * n_envs,
        n_epochs=1,
        seed=0,
        device="cpu",
        policy_kwargs={"net_arch": [8], "features_extractor_kwargs": {"cnn_output_dim": 8}},
    )
    assert isinstance(model.get_env(), VecTransposeImage)
    start_training(model, total_timesteps=10_000)
    return model


def test_dict_observations_with_an_image_key_as_in_process(local_ray: None) -> None:
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the env class above
    ref = _dict_image_model(2)
    inproc = SharedRolloutCollector(ref, [DictImageParallel], seeds=[3])
    want = two_rollouts(inproc, ref, _arrays, 5)
    model = _dict_image_model(2)
    collector = RaySharedRolloutCollector(
        model, [DictImageParallel], seeds=[3], acting_seeds=[5], num_cpus=0
    )
    got = two_rollouts(collector, model, _arrays, None)
    for k in range(2):
        assert_arrays(got[1][k], want[1][k], f"rollout {k}")
        assert got[0][k] == want[0][k]
    assert got[1][0]["obs/image"].shape[-3:] == (3, 36, 36)  # stored channel-first


# ---------------------------------------------------------------------------------------------
# An env function Ray cannot pickle failed in Ray's actor creation with "Could not serialize
# the argument [<function <lambda> ...>] for a task or actor ...SharedRolloutRunner.__init__",
# naming neither the copy nor the runner (and after the runners before it were started).


def test_an_unpicklable_env_function_is_named_by_copy_and_runner(local_ray: None) -> None:
    lock = threading.Lock()
    good = partial(ENVS.ScheduleEnv, SCHEDULE, 0)

    def bad() -> Any:  # a closure over a lock: cloudpickle cannot send it
        with lock:
            return good()

    model = _model(PPO, 2, ENVS.AgentSlot, 4)
    with pytest.raises(TypeError, match=r"the env function of copy 1 \(runner 1\) must be pick"):
        RaySharedRolloutCollector(model, [good, bad], n_runners=2, num_cpus=0)
    with pytest.raises(TypeError, match=r"RayAECRolloutCollector: the env function of copy 0"):
        RayAECRolloutCollector(model, env_fn=bad, num_cpus=0)


# ---------------------------------------------------------------------------------------------
# A frozen off-policy opponent acts at random during its warm-up (num_timesteps <
# learning_starts) and on epsilon, drawing from its own action space. In process it samples on
# from wherever the user's model left its generator; each runner's copy, loaded from the model's
# save, had SB3's load reseed it with model.seed (_setup_model's set_random_seed): another
# opponent's moves, so other observations, actions and rewards in the buffer, silently, for any
# opponent whose space had sampled before (a trained model, a deepcopy of one).


class _Seat(gym.Env[Any, Any]):
    def __init__(self) -> None:
        env = tictactoe_v3.env()
        self.observation_space = env.observation_space("player_1")
        self.action_space = env.action_space("player_1")

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}


def _seat_model() -> Any:
    model = MaskablePPO(
        "MultiInputPolicy", DummyVecEnv([_Seat] * 2), n_steps=8, batch_size=8, n_epochs=1,
        seed=0, device="cpu", policy_kwargs={"net_arch": [8]},
    )  # fmt: skip
    start_training(model, total_timesteps=10_000)
    return model


def _used_dqn() -> Any:
    dqn = DQN(
        "MultiInputPolicy", DummyVecEnv([_Seat]), learning_starts=1000, seed=5, device="cpu",
        policy_kwargs={"net_arch": [8]},
    )  # fmt: skip
    for _ in range(3):
        dqn.action_space.sample()  # used: its generator has moved on from seed 5
    return dqn


def _seat_arrays(model: Any) -> dict[str, np.ndarray]:
    buf = model.rollout_buffer
    out = {name: np.array(getattr(buf, name)) for name in FIELDS if name != "observations"}
    out.update({f"obs/{k}": np.array(v) for k, v in buf.observations.items()})
    return out


def test_a_frozen_off_policy_opponent_samples_as_in_process(local_ray: None) -> None:
    ref = _seat_model()
    opponent = _used_dqn()
    inproc = AECRolloutCollector(
        ref, [tictactoe_v3.env] * 2, opponents={"player_2": opponent}, seeds=[1, 2]
    )
    want = two_rollouts(inproc, ref, _seat_arrays, 11)
    model = _seat_model()
    collector = RayAECRolloutCollector(
        model,
        [tictactoe_v3.env] * 2,
        opponents={"player_2": _used_dqn()},
        seeds=[1, 2],
        acting_seeds=[11],
        num_cpus=0,
    )
    got = two_rollouts(collector, model, _seat_arrays, None)
    for k in range(2):
        assert_arrays(got[1][k], want[1][k], f"rollout {k}")
        assert got[0][k] == want[0][k]
