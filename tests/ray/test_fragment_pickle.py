"""A ``Fragment`` pickles column-wise and loads exactly as it did step by step (issue 20).

``Fragment.__reduce_ex__`` ships its answers as one stacked array per field and its observations
(and masks) as one array per key (``rlightning._pickle.pack_responses`` / ``pack_steps``). The
oracle is the per-step pickling it replaced: the fragment's field dict pickled as a plain dict
(each answer through ``PolicyResponse.__reduce_ex__``, each array by numpy). Fragments come from
real local-mode runners built in this process (the actor's class, as
``benchmarks/ray_runner_cost.py`` builds it): CartPole PPO with truncations and terminal
observations, DQN, a ``Dict`` observation env, MaskablePPO with masks. Each is loaded three
ways (in band; out of band from read-only buffers, as Ray's object store gives them; through
``ray.put``/``ray.get``) and every value compared with the oracle's: type, dtype, shape,
device, bits, writability, contiguity, a tensor's storage size and offset, field order. With
protocol 5 the whole state is one standard pickle (``rlightning.batch.reduce_in_band``): the
out-of-band oracle copies buffers under ``IN_BAND_MAX_BYTES`` into the pickle (they load
writable, with their own memory) and keeps larger ones out of band, read-only. The
consumers' buffers over Ray are ``tests/ray/test_local.py``'s (unchanged, and green).
"""

from __future__ import annotations

import copy
import pickle
from functools import partial
from types import ModuleType
from typing import Any

import gymnasium as gym
import numpy as np
import pytest
import ray
import torch

from rlightning.batch import IN_BAND_MAX_BYTES
from rlightning_ray.groups import Fragment
from rlightning_ray.runner import EnvRunner
from rlightning_ray.sb3 import SB3BatchPolicy, acting_state

N_STEPS = 24


class InProcessRunner(EnvRunner):
    """The actor's class, built in this process (no Ray actor context to read)."""

    def _actor_identity(self) -> tuple[bool, str]:
        return False, "in-process"


def _fragment(make_model: Any, env_fn: Any, k: int) -> Fragment:
    runner = InProcessRunner(
        "runner-0",
        [env_fn] * k,
        None,
        seeds=list(range(k)),
        policy=partial(SB3BatchPolicy, make_model),
    )
    local = runner._local
    assert local is not None
    local.policy.set_weights(acting_state(make_model()))
    fragment = runner.sample(N_STEPS)
    assert isinstance(fragment, Fragment)
    return fragment


def _cases(helpers: ModuleType, envs: ModuleType) -> dict[str, Fragment]:
    k = 3
    masked = {"act": "discrete", "limit": 5, "p_end": 0.15, "masks": True}
    box = {"act": "discrete", "limit": 5, "p_end": 0.15}
    dict_obs = {"obs": "dict", "act": "discrete", "limit": 4, "p_end": 0.2}
    return {
        "cartpole-ppo": _fragment(
            partial(helpers.make_ppo, k, 8, 0, 7), partial(helpers.cartpole, 7), k
        ),
        "dqn": _fragment(
            partial(helpers.fuzz_model, "dqn", box, k, 1), partial(envs.fuzz_env, **box), k
        ),
        "dict-ppo": _fragment(
            partial(helpers.fuzz_model, "ppo", dict_obs, k, 2),
            partial(envs.fuzz_env, **dict_obs),
            k,
        ),
        "maskable": _fragment(
            partial(helpers.fuzz_model, "maskable", masked, k, 3),
            partial(envs.fuzz_env, **masked),
            k,
        ),
    }


@pytest.fixture(scope="module")
def fragments(helpers: ModuleType, envs: ModuleType) -> dict[str, Fragment]:
    return _cases(helpers, envs)


def assert_same(ours: Any, oracle: Any, where: str = "fragment") -> None:
    """Assert ``ours`` is ``oracle`` in every observable way (recursively)."""
    assert type(ours) is type(oracle), f"{where}: {type(ours)} != {type(oracle)}"
    if isinstance(oracle, np.ndarray):
        assert ours.dtype == oracle.dtype and ours.shape == oracle.shape, where
        assert ours.flags.writeable == oracle.flags.writeable, f"{where}: writeable"
        assert ours.flags.c_contiguous == oracle.flags.c_contiguous, f"{where}: layout"
        assert ours.strides == oracle.strides, f"{where}: strides"
        if oracle.dtype.hasobject:
            assert ours.tolist() == oracle.tolist(), where
        else:
            assert ours.tobytes() == oracle.tobytes(), f"{where}: values"
    elif isinstance(oracle, torch.Tensor):
        assert ours.dtype == oracle.dtype and ours.shape == oracle.shape, where
        assert ours.device == oracle.device, f"{where}: device"
        assert ours.requires_grad == oracle.requires_grad, f"{where}: requires_grad"
        assert ours.stride() == oracle.stride(), f"{where}: strides"
        assert ours.storage_offset() == oracle.storage_offset(), f"{where}: storage offset"
        assert ours.untyped_storage().nbytes() == oracle.untyped_storage().nbytes(), where
        assert bytes(ours.detach().untyped_storage()) == bytes(oracle.detach().untyped_storage())
    elif isinstance(oracle, dict):
        assert list(ours) == list(oracle), f"{where}: keys"
        for key in oracle:
            assert_same(ours[key], oracle[key], f"{where}[{key!r}]")
    elif isinstance(oracle, (list, tuple)):
        assert len(ours) == len(oracle), f"{where}: length"
        for i, (a, b) in enumerate(zip(ours, oracle, strict=True)):
            assert_same(a, b, f"{where}[{i}]")
    elif hasattr(oracle, "__dict__") and not isinstance(oracle, type):
        assert_same(vars(ours), vars(oracle), f"{where}.__dict__")
    else:
        assert ours == oracle, f"{where}: {ours!r} != {oracle!r}"


def _oracle_state(fragment: Fragment) -> dict[str, Any]:
    return dict(vars(fragment))  # a plain dict: the per-step pickling


def _aliases(answers: list[Any]) -> list[list[tuple[str, str]]]:
    """Per answer, the pairs of fields holding one object (DQN: ``action`` is ``buffer_action``)."""
    out = []
    for answer in answers:
        fields = vars(answer)
        out.append(
            [
                (a, b)
                for a in fields
                for b in fields
                if a < b and fields[a] is fields[b] and type(fields[a]) not in (int, type(None))
            ]
        )
    return out


def _out_of_band(obj: Any) -> tuple[Any, int]:
    """Pickle with protocol 5 out of band, load from read-only buffers (as Ray's object store)."""
    buffers: list[pickle.PickleBuffer] = []
    blob = pickle.dumps(obj, protocol=5, buffer_callback=buffers.append)
    frozen = [memoryview(bytes(b.raw())).toreadonly() for b in buffers]
    return pickle.loads(blob, buffers=frozen), len(buffers)


def _split_band(obj: Any) -> Any:
    """The oracle of ``reduce_in_band``: small buffers in band, large ones out of band, read-only.

    Pickles ``obj`` with protocol 5, copying buffers under ``IN_BAND_MAX_BYTES`` into the pickle
    (numpy loads those writable, with their own memory) and leaving larger ones out of band,
    loaded from read-only memory as from Ray's object store.
    """
    buffers: list[pickle.PickleBuffer] = []

    def keep(buffer: pickle.PickleBuffer) -> bool:
        if buffer.raw().nbytes < IN_BAND_MAX_BYTES:
            return True
        buffers.append(buffer)
        return False

    blob = pickle.dumps(obj, protocol=5, buffer_callback=keep)
    frozen = [memoryview(bytes(b.raw())).toreadonly() for b in buffers]
    return pickle.loads(blob, buffers=frozen)


def test_fragments_have_what_the_cases_need(fragments: dict[str, Fragment]) -> None:
    """The cases hold truncations with terminal observations, dict observations and masks."""
    infos = [info for step in fragments["cartpole-ppo"].infos for info in step]
    assert any(info.get("TimeLimit.truncated") for info in infos)
    assert any("terminal_observation" in info for info in infos)
    assert isinstance(fragments["dict-ppo"].observations[0], dict)
    assert len(fragments["maskable"].action_masks) == N_STEPS
    assert isinstance(fragments["cartpole-ppo"].answers[0].value, torch.Tensor)


@pytest.mark.parametrize("case", ["cartpole-ppo", "dqn", "dict-ppo", "maskable"])
def test_a_fragment_loads_as_the_per_step_pickling_did(
    fragments: dict[str, Fragment], case: str
) -> None:
    fragment = fragments[case]
    state = _oracle_state(fragment)
    for protocol in (2, 4, 5):
        ours = pickle.loads(pickle.dumps(fragment, protocol=protocol))
        assert_same(vars(ours), pickle.loads(pickle.dumps(state, protocol=protocol)))
        assert type(ours) is Fragment
    ours, n_ours = _out_of_band(fragment)
    oracle = _split_band(state)
    assert_same(vars(ours), oracle)
    assert _aliases(ours.answers) == _aliases(oracle["answers"]) == _aliases(fragment.answers)
    assert n_ours == 0  # every column is under IN_BAND_MAX_BYTES: one bytes object in all
    assert_same(vars(copy.deepcopy(fragment)), vars(fragment))
    shallow = copy.copy(fragment)
    assert shallow.answers is fragment.answers and shallow is not fragment


@pytest.mark.parametrize("case", ["cartpole-ppo", "dict-ppo", "maskable"])
def test_a_fragment_through_ray_loads_as_the_per_step_pickling_did(
    local_ray: None, fragments: dict[str, Fragment], case: str
) -> None:
    fragment = fragments[case]
    ours = ray.get(ray.put(fragment))
    assert_same(vars(ours), _split_band(_oracle_state(fragment)))
    big = copy.deepcopy(fragment)
    k = len(big.env_ids)
    big.observations = [np.full((k, 8192), t, np.float32) for t in range(N_STEPS)]
    ours = ray.get(ray.put(big))  # each step 96 KiB: out of band, stacked too
    assert_same(vars(ours), _split_band(_oracle_state(big)))
    assert not ours.observations[0].flags.writeable  # a view of the object store, zero-copy
    assert ours.answers[0].action.flags.writeable  # small: copied in, its own memory


def test_large_columns_stay_out_of_band_and_small_ones_are_copied_in(
    fragments: dict[str, Fragment],
) -> None:
    fragment = copy.deepcopy(fragments["cartpole-ppo"])
    k = len(fragment.env_ids)
    fragment.observations = [np.full((k, 8192), t, np.float32) for t in range(N_STEPS)]
    ours, n_ours = _out_of_band(fragment)
    assert n_ours == 1  # the stacked observations, not copied into the pickle
    assert_same(vars(ours), _split_band(_oracle_state(fragment)))
    assert not ours.observations[5].flags.writeable
    assert ours.observations[5][0, 0] == 5.0
    assert len(pickle.dumps(fragment, protocol=5, buffer_callback=lambda b: False)) < 2**16
    assert len(pickle.dumps(fragment, protocol=4)) > k * 8192 * 4 * N_STEPS  # no buffers: in


def test_a_state_the_standard_pickler_cannot_save_travels_through_the_callers_pickler(
    local_ray: None, fragments: dict[str, Fragment]
) -> None:
    """A lambda in an info dict: cloudpickle (Ray's) saves it, the standard pickler cannot."""
    fragment = copy.deepcopy(fragments["cartpole-ppo"])
    fragment.infos[0][0]["scale"] = lambda x: 2 * x
    with pytest.raises((pickle.PicklingError, AttributeError, TypeError)):
        pickle.dumps(fragment, protocol=5)  # the fallback, saved by the standard pickler: fails
    ours = ray.get(ray.put(fragment))
    assert ours.infos[0][0]["scale"](3) == 6
    del fragment.infos[0][0]["scale"], ours.infos[0][0]["scale"]
    assert_same(vars(ours), ray.get(ray.put(_oracle_state(fragment))))


def test_columns_that_cannot_stack_exactly_travel_step_by_step(
    fragments: dict[str, Fragment],
) -> None:
    """Shared objects, grad tensors, mixed field sets, read-only arrays: loaded as before."""
    base = fragments["cartpole-ppo"]
    cases = []
    shared = copy.deepcopy(base)
    shared.answers[2].log_prob = shared.answers[2].value  # one tensor in two fields
    shared.observations[3] = shared.observations[1]  # one batch at two steps
    cases.append(shared)
    grad = copy.deepcopy(base)
    grad.answers[0].value = grad.answers[0].value.clone().requires_grad_(True)
    cases.append(grad)
    extra = copy.deepcopy(base)
    extra.answers[5].extra = np.arange(3)
    cases.append(extra)
    frozen = copy.deepcopy(base)
    for answer in frozen.answers:
        answer.action.flags.writeable = False
    cases.append(frozen)
    mixed = copy.deepcopy(base)
    mixed.answers[1].action = mixed.answers[1].action.astype(np.int32)
    mixed.observations[0] = np.asfortranarray(np.zeros((3, 4), np.float32).T).T
    cases.append(mixed)
    odd = copy.deepcopy(base)
    for t, answer in enumerate(odd.answers):
        answer.value = answer.value.to(torch.bfloat16)  # a dtype numpy lacks
        answer.scalar = np.array(t, np.float64)  # 0-d arrays stack and load as 0-d arrays
        answer.nested = {"t": torch.full((2,), float(t))}  # tensors inside a container
    cases.append(odd)
    for fragment in cases:
        state = _oracle_state(fragment)
        assert_same(vars(pickle.loads(pickle.dumps(fragment, protocol=5))), _roundtrip(state))
        assert_same(vars(_out_of_band(fragment)[0]), _split_band(state))
    ours = pickle.loads(pickle.dumps(shared, protocol=5))
    assert ours.answers[2].log_prob is ours.answers[2].value
    assert ours.observations[3] is ours.observations[1]


def _roundtrip(obj: Any) -> Any:
    return pickle.loads(pickle.dumps(obj, protocol=5))


def _recorded(kind: str) -> Any:
    """A real recording of the PettingZoo recorders the Ray runners return (simple_spread)."""
    from mpe2 import simple_spread_v3
    from stable_baselines3 import DQN, PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from rlightning_pettingzoo import ReplayRecorder, RolloutRecorder
    from rlightning_sb3 import start_training

    def make_env() -> Any:
        return simple_spread_v3.parallel_env(max_cycles=10)

    probe = make_env()
    agent = probe.possible_agents[0]
    spaces = (probe.observation_space(agent), probe.action_space(agent))
    slots = DummyVecEnv([partial(_Slot, *spaces)] * 2 * len(probe.possible_agents))
    if kind == "rollout":
        model: Any = PPO("MlpPolicy", slots, n_steps=N_STEPS, seed=0, device="cpu")
        start_training(model, 10_000)
        return RolloutRecorder(model, [make_env] * 2, seeds=[0, 3]).record()
    model = DQN("MlpPolicy", slots, learning_starts=0, train_freq=N_STEPS, seed=0, device="cpu")
    start_training(model, 10_000)
    return ReplayRecorder(model, [make_env] * 2, seeds=[0, 3]).record(acting_state(model))


class _Slot(gym.Env[Any, Any]):
    """One agent's spaces for the shared model's VecEnv: sizes the buffer, never stepped."""

    def __init__(self, observation_space: Any, action_space: Any) -> None:
        self.observation_space, self.action_space = observation_space, action_space

    def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
        super().reset(seed=seed)
        return self.observation_space.sample(), {}


@pytest.mark.parametrize("kind", ["rollout", "replay"])
def test_a_pettingzoo_recording_through_ray_loads_as_its_plain_pickle(
    local_ray: None, kind: str
) -> None:
    """RecordedRollout / RecordedReplay (what the Ray PettingZoo runners return): one pickle."""
    recorded = _recorded(kind)
    state = dict(vars(recorded))  # the oracle: the rows pickled by the caller's pickler
    assert len(recorded.rows) >= 2 and recorded.rows[0]
    ours = ray.get(ray.put(recorded))
    assert type(ours) is type(recorded)
    assert_same(vars(ours), _split_band(state))
    ours, n_buffers = _out_of_band(recorded)
    assert n_buffers == 0  # small rows: all in the one bytes object
    assert_same(vars(ours), _split_band(state))
    assert_same(vars(copy.deepcopy(recorded)), state)
    for protocol in (2, 4, 5):
        assert_same(
            vars(pickle.loads(pickle.dumps(recorded, protocol=protocol))), _roundtrip(state)
        )


def test_values_rays_serializer_owns_travel_through_it(
    local_ray: None, fragments: dict[str, Fragment]
) -> None:
    """An ObjectRef and a type given to ``ray.util.register_serializer``: Ray's way, not ours."""
    from fractions import Fraction

    fragment = copy.deepcopy(fragments["cartpole-ppo"])
    payload = ray.put(np.arange(5))
    fragment.infos[0][0]["ref"] = payload
    fragment.infos[0][1]["ratio"] = Fraction(1, 3)
    ray.util.register_serializer(
        Fraction, serializer=lambda f: str(f), deserializer=lambda s: ("custom", s)
    )
    try:
        ours = ray.get(ray.put(fragment))
        oracle = ray.get(ray.put(_oracle_state(fragment)))
    finally:
        ray.util.deregister_serializer(Fraction)
    del payload  # the loaded ref keeps the object alive, as Ray counts it
    assert ours.infos[0][1]["ratio"] == oracle["infos"][0][1]["ratio"] == ("custom", "1/3")
    assert np.array_equal(ray.get(ours.infos[0][0]["ref"], timeout=30), np.arange(5))
