"""``observation_space_mismatch``: which env observation spaces fit a model's, by SB3's rules.

Every pair said to fit is checked against SB3 itself: a batch sampled from the env's space goes
through ``BasePolicy.obs_to_tensor`` of a real policy built on the model's space without an error
and comes out with the model space's shape.
"""

from __future__ import annotations

import inspect
from typing import Any

import numpy as np
import pytest
from gymnasium import spaces
from hypothesis import given, settings
from hypothesis import strategies as st
from stable_baselines3.common.policies import ActorCriticPolicy, MultiInputActorCriticPolicy

from rlightning_sb3 import observation_space_mismatch

IMAGE = spaces.Box(0, 255, (3, 36, 36), np.uint8)
IMAGE_LAST = spaces.Box(0, 255, (36, 36, 3), np.uint8)
FLAT = spaces.Box(-1, 1, (4,), np.float32)

FITS: list[tuple[str, spaces.Space[Any], spaces.Space[Any]]] = [
    ("same box", FLAT, spaces.Box(-1, 1, (4,), np.float32)),
    ("box of other bounds and dtype", spaces.Box(-5, 5, (4,), np.float64), FLAT),
    ("channel-first image", IMAGE, IMAGE),
    ("channel-last image of a channel-first model", IMAGE_LAST, IMAGE),
    ("discrete", spaces.Discrete(5), spaces.Discrete(5)),
    ("multidiscrete", spaces.MultiDiscrete([2, 3]), spaces.MultiDiscrete([2, 3])),
    (
        "multidiscrete of another dtype",
        spaces.MultiDiscrete([2, 3], dtype=np.int32),
        spaces.MultiDiscrete([2, 3]),
    ),
    ("multibinary", spaces.MultiBinary(3), spaces.MultiBinary(3)),
    (
        "dict",
        spaces.Dict({"a": FLAT, "img": IMAGE_LAST}),
        spaces.Dict({"img": IMAGE, "a": FLAT}),
    ),
]
if "dtype" in inspect.signature(spaces.Discrete).parameters:  # gymnasium >= 1.1
    FITS.append(
        ("discrete of another dtype", spaces.Discrete(5, dtype=np.int32), spaces.Discrete(5))
    )

MISMATCHES: list[tuple[spaces.Space[Any], spaces.Space[Any], str]] = [
    (spaces.Box(-1, 1, (18,)), spaces.Box(-1, 1, (10,)), "shape (18,) is not the model's (10,)"),
    (
        spaces.Box(0, 1, (36, 36, 3), np.float32),
        spaces.Box(0, 1, (3, 36, 36), np.float32),
        "shape (36, 36, 3) is not the model's (3, 36, 36)",
    ),
    (
        spaces.Box(0, 1, (3, 36, 36), np.float32),
        IMAGE,
        "the model's space is an image space (uint8 in [0, 255], which SB3 divides by 255) "
        "and the env's is not",
    ),
    (
        IMAGE,
        spaces.Box(0, 1, (3, 36, 36), np.float32),
        "the env's space is an image space (uint8 in [0, 255], which SB3 divides by 255) "
        "and the model's is not",
    ),
    (IMAGE, IMAGE_LAST, "shape (3, 36, 36) is not the model's (36, 36, 3)"),
    (spaces.Discrete(4), spaces.Discrete(5), "size 4 is not the model's 5"),
    (spaces.Discrete(5, start=1), spaces.Discrete(5), "start 1 is not the model's 0"),
    (spaces.MultiDiscrete([2, 4]), spaces.MultiDiscrete([2, 3]), "nvec [2 4] is not the model's"),
    (
        spaces.MultiDiscrete([2, 3], start=[0, 1]),
        spaces.MultiDiscrete([2, 3]),
        "start [0 1] is not the model's [0 0]",
    ),
    (spaces.MultiBinary(4), spaces.MultiBinary(3), "shape (4,) is not the model's (3,)"),
    (spaces.Discrete(3), spaces.MultiBinary(3), "a Discrete space is not the model's"),
    (
        spaces.Dict({"a": FLAT}),
        spaces.Dict({"a": FLAT, "b": FLAT}),
        "keys ['a'] are not the model's ['a', 'b']",
    ),
    (
        spaces.Dict({"a": spaces.Box(-1, 1, (5,))}),
        spaces.Dict({"a": FLAT}),
        "key 'a': shape (5,) is not the model's (4,)",
    ),
]


def _policy(space: spaces.Space[Any]) -> Any:
    cls = MultiInputActorCriticPolicy if isinstance(space, spaces.Dict) else ActorCriticPolicy
    return cls(space, spaces.Discrete(2), lambda _: 1e-3)


@pytest.mark.parametrize(
    ("env_space", "model_space"), [c[1:] for c in FITS], ids=[c[0] for c in FITS]
)
def test_spaces_that_fit_go_through_sb3_obs_to_tensor(
    env_space: spaces.Space[Any], model_space: spaces.Space[Any]
) -> None:
    assert observation_space_mismatch(env_space, model_space) is None
    env_space.seed(0)
    samples = [env_space.sample() for _ in range(3)]
    if isinstance(env_space, spaces.Dict):
        batch: Any = {k: np.stack([s[k] for s in samples]) for k in env_space.spaces}
    else:
        batch = np.stack(samples)
    tensor, vectorized = _policy(model_space).obs_to_tensor(batch)
    assert vectorized
    if isinstance(model_space, spaces.Dict):
        for key, sub in model_space.spaces.items():
            assert tuple(tensor[key].shape) == (3, *sub.shape)
    else:
        assert tuple(tensor.shape) == (3, *model_space.shape)


@pytest.mark.parametrize(("env_space", "model_space", "reason"), MISMATCHES)
def test_spaces_that_do_not_fit_are_named(
    env_space: spaces.Space[Any], model_space: spaces.Space[Any], reason: str
) -> None:
    got = observation_space_mismatch(env_space, model_space)
    assert got is not None and reason in got


def _box(shape: tuple[int, ...], image: bool) -> spaces.Box:
    if image:
        return spaces.Box(0, 255, shape, np.uint8)
    return spaces.Box(-1, 1, shape, np.float32)


_dims = st.integers(1, 40)


@settings(max_examples=150, deadline=None)
@given(
    env_shape=st.lists(_dims, min_size=1, max_size=3).map(tuple),
    model_shape=st.lists(_dims, min_size=1, max_size=3).map(tuple),
    image=st.booleans(),
    channel_last=st.booleans(),
)
def test_box_pairs_fit_exactly_when_sb3_obs_to_tensor_takes_them(
    env_shape: tuple[int, ...], model_shape: tuple[int, ...], image: bool, channel_last: bool
) -> None:
    if channel_last and len(env_shape) == 3:  # often the channel-last form of the model's
        model_shape = (env_shape[2], env_shape[0], env_shape[1])
    image = image and len(model_shape) == 3 and len(env_shape) == 3
    env_space, model_space = _box(env_shape, image), _box(model_shape, image)
    batch = np.zeros((2, *env_shape), env_space.dtype)
    try:
        tensor, _ = _policy_of_box(model_space).obs_to_tensor(batch)
        taken = tuple(tensor.shape) == (2, *model_shape)
    except ValueError:  # SB3's is_vectorized_box_observation: "Unexpected observation shape"
        taken = False
    assert (observation_space_mismatch(env_space, model_space) is None) == taken


def _policy_of_box(space: spaces.Box) -> Any:
    # A real SB3 policy on the space; obs_to_tensor needs no network of the right size, so the
    # smallest one (a flatten extractor) is enough even for shapes NatureCNN refuses.
    from stable_baselines3.common.torch_layers import FlattenExtractor

    return ActorCriticPolicy(
        space, spaces.Discrete(2), lambda _: 1e-3, features_extractor_class=FlattenExtractor
    )
