"""``SB3PolicyAdapter.predict`` against ``model.predict``, and ``act`` across memory layouts.

For every algorithm (PPO, A2C, DQN, SAC, TD3, DDPG, RecurrentPPO, MaskablePPO) over generated
spaces and observations, a random subset of 1-8 envs, deterministic or not: ``predict`` on the
observation in any memory layout (C, Fortran, strided, negative strides, non-native byte order,
read-only) gives exactly the actions ``model.predict`` gives on the C-contiguous observation
from the same RNG state, every one inside the env's action space; and ``act`` on any layout
gives exactly what it gives on the C-contiguous observation.

Image observations are drawn only in C order here: SB3 transposes them to channel-first, and a
convolution's float32 result depends on the memory layout of its input in the last bits, so
layouts of images would be batched-vs-unbatched-style comparisons, not exact ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch as th
from hypothesis import given, settings
from hypothesis import strategies as st

from rlightning_sb3 import SB3PolicyAdapter

pytestmark = pytest.mark.torch

PARITY = settings.get_profile("rlightning-parity")
# Every memory layout the generator makes; the ones torch.as_tensor refuses (a negative stride,
# a non-native byte order) are read from a native copy (regression tests in
# test_act_regressions.py).
PREDICT_LAYOUTS = ACT_LAYOUTS = ("c", "fortran", "strided", "negative", "byteswapped", "readonly")
ON_POLICY = ("ppo", "a2c", "recurrent_ppo", "maskable_ppo")
ALGOS = (*ON_POLICY, "dqn", "sac", "td3", "ddpg")


def action_kinds(algo: str) -> tuple[str, ...]:
    """The action space kinds SB3 builds ``algo`` for."""
    if algo == "dqn":
        return ("discrete",)
    if algo in ("sac", "td3", "ddpg"):
        return ("box",)
    if algo == "maskable_ppo":
        return ("discrete", "multidiscrete", "multibinary")
    return ("discrete", "multidiscrete", "multibinary", "box")


@st.composite
def predict_cases(draw: st.DrawFn, gen: Any, layouts: tuple[str, ...]) -> dict[str, Any]:
    algo = draw(st.sampled_from(ALGOS))
    action = draw(
        gen.action_specs(action_kinds(algo), starts=False, box_dtypes=("float32", "float64"))
    )
    obs = draw(st.sampled_from(("box", "dict", "image", "discrete")))
    n_envs = draw(st.integers(1, 8 if obs != "image" else 3))
    rows = draw(
        st.lists(st.integers(0, n_envs - 1), min_size=1, max_size=n_envs, unique=True).map(sorted)
    )
    spec = gen.EnvSpec(
        obs=obs, action=action, reward="float", terminate_p=0.2, max_steps=4,
        masks=algo == "maskable_ppo",
    )  # fmt: skip
    return {
        "algo": algo,
        "spec": spec,
        "n_envs": n_envs,
        "rows": rows,
        "seed": draw(st.integers(0, 2**16)),
        "deterministic": draw(st.booleans()),
        "layout": "c" if obs == "image" else draw(st.sampled_from(layouts)),
    }


def _rows(obs: Any, rows: list[int]) -> Any:
    if isinstance(obs, dict):
        return {k: np.ascontiguousarray(v[rows]) for k, v in obs.items()}
    return np.ascontiguousarray(obs[rows])


def _seed(model: Any, seed: int) -> None:
    th.manual_seed(seed)
    np.random.seed(seed)
    model.action_space.seed(seed)


@settings(PARITY)
@given(data=st.data())
def test_predict_equals_model_predict(data: Any, gen: Any) -> None:
    case = data.draw(predict_cases(gen, PREDICT_LAYOUTS))
    spec, seed = case["spec"], case["seed"]
    venv = gen.make_venv(spec, case["n_envs"], seed, True)
    model = gen.build_model(case["algo"], venv, spec.obs, seed)
    space = gen.make_action_space(spec.action)
    adapter = SB3PolicyAdapter(model)
    rows, deterministic = case["rows"], case["deterministic"]
    ids = [f"env-{i}" for i in rows]
    obs = _rows(venv.reset(), rows)
    kwargs: dict[str, Any] = {}
    if case["algo"] == "maskable_ppo":
        kwargs["action_masks"] = np.stack(venv.env_method("action_masks"))[rows]
    for _ in range(3):
        _seed(model, seed)
        expected, _ = model.predict(obs, deterministic=deterministic, **kwargs)
        _seed(model, seed)
        responses = adapter.predict(
            gen.with_layout(obs, case["layout"]), env_ids=ids, deterministic=deterministic, **kwargs
        )
        got = adapter.env_actions(responses)
        np.testing.assert_array_equal(got, expected, strict=True)
        for action in got:
            assert space.contains(action), (action, space)
        seed += 1
    gen.count(
        "predict",
        algo=case["algo"],
        action=spec.action[0],
        obs=spec.obs,
        rows=len(rows),
        deterministic=deterministic,
        layout=case["layout"],
    )


@settings(PARITY)
@given(data=st.data())
def test_act_is_the_same_for_every_memory_layout(data: Any, gen: Any) -> None:
    case = data.draw(predict_cases(gen, ACT_LAYOUTS))
    spec, seed = case["spec"], case["seed"]
    venv = gen.make_venv(spec, case["n_envs"], seed, True)
    model = gen.build_model(case["algo"], venv, spec.obs, seed)
    ids = [f"env-{i}" for i in case["rows"]]
    obs = _rows(venv.reset(), case["rows"])
    kwargs: dict[str, Any] = {"explore": not case["deterministic"]}
    if case["algo"] == "maskable_ppo":
        kwargs["action_masks"] = np.stack(venv.env_method("action_masks"))[case["rows"]]
    results = []
    for layout in ("c", case["layout"]):
        _seed(model, seed)
        responses = SB3PolicyAdapter(model).act(gen.with_layout(obs, layout), ids, **kwargs)
        results.append(responses)
    fields = ["action", "buffer_action"]
    if case["algo"] in ON_POLICY:
        fields += ["value", "log_prob"]
    for name in fields:
        a = [np.asarray(r.__dict__[name]) for r in results[0]]
        b = [np.asarray(r.__dict__[name]) for r in results[1]]
        np.testing.assert_array_equal(np.stack(b), np.stack(a), err_msg=name, strict=True)
    gen.count("act-layout", algo=case["algo"], obs=spec.obs, layout=case["layout"])
