"""MaskablePPO masks: ``predict``/``act`` against sb3-contrib's ``MaskablePPO.predict``.

Masks are generated per env and per sub-space (Discrete, MultiDiscrete, MultiBinary), as
booleans or 0/1 integers, sometimes with a sub-space that allows no action (the waiting player
of a turn-based game). sb3-contrib then samples an arbitrary action (every logit is masked to
the same value): the adapter must refuse, naming the env, and never make an action up. Masks
that leave a choice everywhere give exactly the actions ``MaskablePPO.predict`` gives from the
same RNG state, each one allowed by its mask.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

import numpy as np
import pytest
import torch as th
from hypothesis import given, settings
from hypothesis import strategies as st

from rlightning_sb3 import SB3PolicyAdapter

pytestmark = pytest.mark.torch

PARITY = settings.get_profile("rlightning-parity")


def _blocks(space: Any) -> list[int]:
    if hasattr(space, "nvec"):
        return [int(n) for n in space.nvec]
    if hasattr(space, "n") and space.shape == ():
        return [int(space.n)]
    return [2] * int(space.n)


def _allowed(space: Any, action: np.ndarray, mask: np.ndarray) -> bool:
    offsets = np.cumsum([0, *_blocks(space)])[:-1]
    return bool(mask[offsets + np.ravel(action).astype(np.int64)].all())


@st.composite
def mask_cases(draw: st.DrawFn, gen: Any) -> dict[str, Any]:
    action = draw(gen.action_specs(("discrete", "multidiscrete", "multibinary"), starts=False))
    n_envs = draw(st.integers(1, 8))
    blocks = _blocks(gen.make_action_space(action))
    dead = draw(st.sampled_from((False, False, True)))
    rows = []
    for _ in range(n_envs):
        row = []
        for n in blocks:
            block = draw(st.lists(st.booleans(), min_size=n, max_size=n))
            if not any(block):
                block[draw(st.integers(0, n - 1))] = True
            row.extend(block)
        rows.append(row)
    masks = np.array(rows, dtype=bool)
    if dead:  # one sub-space of one env allows nothing
        env = draw(st.integers(0, n_envs - 1))
        offsets = np.cumsum([0, *blocks])
        block = draw(st.integers(0, len(blocks) - 1))
        masks[env, offsets[block] : offsets[block + 1]] = False
    return {
        "action": action,
        "n_envs": n_envs,
        "masks": masks.astype(draw(st.sampled_from((np.bool_, np.int64, np.uint8)))),
        "seed": draw(st.integers(0, 2**16)),
        "deterministic": draw(st.booleans()),
        "call": draw(st.sampled_from(("predict", "act"))),
    }


@settings(PARITY)
@given(data=st.data())
def test_masked_actions_equal_maskable_ppo_or_a_dead_mask_is_refused(data: Any, gen: Any) -> None:
    case = data.draw(mask_cases(gen))
    spec = gen.EnvSpec(obs="box", action=case["action"], reward="float", terminate_p=0.0,
                       max_steps=4, masks=True)  # fmt: skip
    venv = gen.make_venv(spec, case["n_envs"], case["seed"], True)
    model = gen.build_model("maskable_ppo", venv, "box", case["seed"])
    space = gen.make_action_space(case["action"])
    masks = case["masks"]
    ids = [f"env-{i}" for i in range(case["n_envs"])]
    obs = venv.reset()
    adapter = SB3PolicyAdapter(model)
    blocks = np.cumsum([0, *_blocks(space)])
    dead = [
        ids[i]
        for i, row in enumerate(masks.astype(bool))
        if any(not row[a:b].any() for a, b in itertools.pairwise(blocks))
    ]
    det = case["deterministic"]

    def call() -> Any:
        th.manual_seed(case["seed"])
        if case["call"] == "act":
            return adapter.act(obs, ids, action_masks=masks, explore=not det)
        return adapter.predict(obs, env_ids=ids, action_masks=masks, deterministic=det)

    if dead:
        what = {
            "discrete": "allows no action of Discrete(",
            "multidiscrete": "allows no value in dimension ",
            "multibinary": "allows neither 0 nor 1 for element ",
        }[case["action"][0]]
        refusal = re.escape(f"action_masks[{dead[0]!r}] {what}")
        with pytest.raises(
            ValueError, match=f"(?s){refusal}.*{re.escape('[rule no-legal-action]')}"
        ):
            call()
    else:
        got = adapter.env_actions(call())
        th.manual_seed(case["seed"])
        expected, _ = model.predict(obs, deterministic=det, action_masks=masks)
        np.testing.assert_array_equal(got, expected, strict=True)
        for action, mask in zip(got, masks.astype(bool), strict=True):
            assert space.contains(action) and _allowed(space, action, mask), (action, mask)
    gen.count("masks", action=case["action"][0], dead=bool(dead), call=case["call"])
