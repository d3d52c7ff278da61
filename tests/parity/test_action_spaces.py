"""Every action an env receives is inside its action space, or the adapter raises naming it.

SB3 itself mishandles some spaces: its distributions sample Discrete and MultiDiscrete actions
from 0 whatever the space's ``start``, and Box actions as floats whatever the Box's dtype (an
int32 or float16 Box then receives float32/float64 actions ``contains`` refuses). For those,
the adapter must map the action into the space (documented) or raise, naming the space; it
must never hand the env an action outside it. ``env.action_space.contains`` is the oracle.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3.common.noise import NormalActionNoise

from rlightning_sb3 import SB3PolicyAdapter

pytestmark = pytest.mark.torch

PARITY = settings.get_profile("rlightning-parity")


def _actions_or_error(
    gen: Any, algo: str, action: tuple[Any, ...], n_envs: int, seed: int, call: str
) -> tuple[Any, np.ndarray | None, Exception | None]:
    """Run ``call`` ("act", "act-det", "predict", "predict-det") on a fresh model."""
    spec = gen.EnvSpec(obs="box", action=action, reward="float", terminate_p=0.2, max_steps=4)
    venv = gen.make_venv(spec, n_envs, seed, True)
    space = gen.make_action_space(action)
    try:
        model = gen.build_model(algo, venv, "box", seed)
    except (AssertionError, ValueError, TypeError) as error:  # SB3 refuses the space itself
        return space, None, error
    ids = [f"env-{i}" for i in range(n_envs)]
    obs = venv.reset()
    try:
        adapter = SB3PolicyAdapter(model)  # may refuse the space at construction
        if call.startswith("act"):
            responses = adapter.act(obs, ids, explore=call == "act")
        else:
            responses = adapter.predict(obs, env_ids=ids, deterministic=call == "predict-det")
        actions = adapter.env_actions(responses)
    except (ValueError, TypeError) as error:  # the adapter refused: _check reads the message
        return space, None, error
    venv.step(actions)  # the strict GenEnv raises for an action outside the space
    return space, actions, None


def _check(space: Any, actions: np.ndarray | None, error: Exception | None) -> None:
    if error is not None:
        assert str(space) in str(error), error  # a refusal names the space
        return
    assert actions is not None
    for row in actions:
        assert space.contains(row), (row, space)


@st.composite
def _mishandled(draw: st.DrawFn, gen: Any) -> dict[str, Any]:
    algo = draw(st.sampled_from(("ppo", "a2c", "dqn", "sac", "maskable_ppo", "recurrent_ppo")))
    if algo in ("ppo", "a2c", "recurrent_ppo"):
        kinds = ("discrete", "multidiscrete", "box")
    elif algo == "maskable_ppo":
        kinds = ("discrete", "multidiscrete")
    elif algo == "dqn":
        kinds = ("discrete",)
    else:
        kinds = ("box",)
    action = draw(gen.action_specs(kinds, starts=True, box_dtypes=("int32", "int64", "float16")))
    if action[0] == "discrete" and action[2] == 0:
        action = (*action[:2], 1)  # a non-zero start
    elif action[0] == "multidiscrete" and not any(action[2]):
        action = (*action[:2], tuple(int(s) + 1 for s in action[2]))
    return {
        "algo": algo,
        "action": action,
        "n_envs": draw(st.integers(1, 8)),
        "seed": draw(st.integers(0, 2**16)),
        "call": draw(st.sampled_from(("act", "act-det", "predict", "predict-det"))),
    }


@settings(PARITY)
@given(data=st.data())
def test_spaces_sb3_mishandles_give_actions_inside_the_space(data: Any, gen: Any) -> None:
    case = data.draw(_mishandled(gen))
    space, actions, error = _actions_or_error(
        gen, case["algo"], case["action"], case["n_envs"], case["seed"], case["call"]
    )
    _check(space, actions, error)
    gen.count("mishandled-space", algo=case["algo"], action=case["action"][0])


@settings(PARITY)
@given(data=st.data())
def test_spaces_sb3_handles_give_actions_inside_the_space(data: Any, gen: Any) -> None:
    algo = data.draw(st.sampled_from(("ppo", "a2c", "dqn", "sac", "td3", "ddpg")))
    kinds = {"dqn": ("discrete",), "sac": ("box",), "td3": ("box",), "ddpg": ("box",)}.get(
        algo, ("discrete", "multidiscrete", "multibinary", "box")
    )
    action = data.draw(gen.action_specs(kinds, starts=False, box_dtypes=("float32", "float64")))
    n_envs = data.draw(st.integers(1, 8))
    call = data.draw(st.sampled_from(("act", "act-det", "predict", "predict-det")))
    space, actions, error = _actions_or_error(gen, algo, action, n_envs, 0, call)
    assert error is None, error
    _check(space, actions, error)
    gen.count("handled-space", algo=algo, action=action[0], call=call)


# Minimized inputs of the fuzz test above, one per way SB3 mishandles a space.
@pytest.mark.parametrize(
    ("algo", "action", "call"),
    [
        ("ppo", ("discrete", 3, 2), "act"),
        ("ppo", ("discrete", 3, 3), "predict-det"),
        ("ppo", ("multidiscrete", (3, 2), (3, -3)), "act"),
        ("dqn", ("discrete", 3, 2), "predict-det"),
        ("maskable_ppo", ("discrete", 3, 3), "act"),
        ("ppo", ("box", (-2, 0), (5, 3), "int32"), "act"),
        ("sac", ("box", (-2.0,), (5.0,), "float16"), "act-det"),
        ("a2c", ("box", (0,), (4,), "int64"), "predict"),
    ],
    ids=lambda v: str(v) if isinstance(v, str) else "-".join(map(str, v[:2]))[:40],
)
def test_env_action_inside_a_space_sb3_mishandles(
    algo: str, action: tuple[Any, ...], call: str, gen: Any
) -> None:
    space, actions, error = _actions_or_error(gen, algo, action, 2, 0, call)
    _check(space, actions, error)


def test_off_policy_act_before_start_training_draws_noise_per_env(gen: Any) -> None:
    spec = gen.EnvSpec(
        obs="box", action=("box", (-1.0,), (1.0,), "float32"), reward="float",
        terminate_p=0.0, max_steps=4,
    )  # fmt: skip
    venv = gen.make_venv(spec, 3, 0, True)
    model = gen.build_model("td3", venv, "box", 0)
    model.action_noise = NormalActionNoise(np.zeros(1), 0.5 * np.ones(1))
    obs = np.repeat(venv.reset()[:1], 3, axis=0)  # the same observation for every env
    responses = SB3PolicyAdapter(model).act(obs, ["a", "b", "c"])
    buffer_actions = np.stack([r.buffer_action for r in responses])
    assert len({float(a[0]) for a in buffer_actions}) == 3, buffer_actions


def test_unbounded_box_is_refused_by_sb3_before_the_adapter_sees_it(gen: Any) -> None:
    action = ("box", (-np.inf,), (np.inf,), "float32")
    _, actions, error = _actions_or_error(gen, "ppo", action, 2, 0, "act")
    assert actions is None and isinstance(error, AssertionError)
    assert re.search("finite", str(error)), error
