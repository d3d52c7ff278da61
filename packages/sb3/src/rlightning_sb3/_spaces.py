"""Spaces an SB3 model would map to numbers the env or the policy does not mean: refused.

SB3 does not support them (its ``env_checker`` warns about non-zero ``start``), yet builds a
model for them and then, with no error, hands the env actions outside its action space or feeds
the policy a wrong one-hot encoding. The adapter refuses such a model at construction, naming
the space, so no such number reaches an env or a learner.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

__all__ = ["observation_space_mismatch", "unsupported_space"]


def _nonzero_start(space: spaces.Space[Any]) -> bool:
    return isinstance(space, (spaces.Discrete, spaces.MultiDiscrete)) and bool(
        np.any(np.asarray(space.start) != 0)
    )


def unsupported_space(
    action_space: spaces.Space[Any], observation_space: spaces.Space[Any]
) -> str | None:
    """Say why SB3 would hand out wrong numbers for these spaces, or None when it would not.

    * A Discrete or MultiDiscrete action space with a non-zero ``start``: SB3's categorical
      distributions sample ``0 .. n-1`` and ``collect_rollouts``/``predict`` pass those to the
      env unshifted (actions outside the space; DQN's warm-up ``action_space.sample()`` even
      mixes shifted and unshifted actions in one replay buffer).
    * A Box action space of a non-float dtype: SB3's Gaussian and squashed policies produce
      floats, which ``collect_rollouts`` clips but does not round, so the env gets float
      actions its integer space does not contain; likewise a float16 Box, which does not
      contain SB3's float32 actions (gymnasium's ``Box.contains`` refuses an unsafe cast).
    * A Discrete or MultiDiscrete observation space (or such a key of a Dict space) with a
      non-zero ``start``: SB3's ``preprocess_obs`` one-hot encodes the raw value without
      subtracting ``start`` (a wrong encoding, or an index error at the top of the range).

    Args:
        action_space: The model's action space.
        observation_space: The model's observation space.

    Returns:
        The reason, naming the space, or None.
    """
    fix = (
        "SB3 does not support it; wrap the env so that its space starts at 0 (see SB3's "
        "custom-env guide, as its env_checker advises)"
    )
    if _nonzero_start(action_space):
        return f"action space {action_space} has a non-zero start: {fix}"
    if isinstance(action_space, spaces.Box) and action_space.dtype.kind != "f":
        return (
            f"action space {action_space} has a non-float dtype {action_space.dtype}: SB3's "
            f"policies produce float actions, which the env's space does not contain; use a "
            f"float Box and round in an env wrapper"
        )
    if isinstance(action_space, spaces.Box) and action_space.dtype.itemsize < 4:
        return (
            f"action space {action_space} has dtype {action_space.dtype}, narrower than the "
            f"float32 actions SB3's policies produce, which the env's space does not contain "
            f"(gymnasium's Box.contains refuses an unsafe cast); use a float32 Box and cast in "
            f"an env wrapper"
        )
    if isinstance(observation_space, spaces.Dict):
        for key, sub in observation_space.spaces.items():
            if _nonzero_start(sub):
                return f"observation space key {key!r}, {sub}, has a non-zero start: {fix}"
    elif _nonzero_start(observation_space):
        return f"observation space {observation_space} has a non-zero start: {fix}"
    return None


def _image(space: spaces.Space[Any]) -> bool:
    from stable_baselines3.common.preprocessing import is_image_space

    return bool(is_image_space(space))


def observation_space_mismatch(
    env_space: spaces.Space[Any], model_space: spaces.Space[Any]
) -> str | None:
    """Why observations from ``env_space`` cannot go to a model of ``model_space``, or None.

    Follows what SB3's ``BasePolicy.obs_to_tensor`` does with an observation
    (``maybe_transpose``, ``is_vectorized_observation`` and ``preprocess_obs`` in
    ``stable_baselines3.common``), and refuses every pair for which it would raise or compute
    on numbers the model does not mean:

    * Box: the model space's shape, or -- only when the model space is an image space by SB3's
      ``is_image_space`` (uint8 in [0, 255], ``(C, H, W)``) -- the channel-last ``(H, W, C)``
      form that ``maybe_transpose`` turns into it (SB3 trains image policies behind
      ``VecTransposeImage``). Both spaces must be image spaces or neither: SB3 divides an image
      space's observations by 255 (``preprocess_obs``), so float observations given to a
      uint8-image model, or uint8 images to a model of another Box, would be scaled wrongly.
      Other bounds and dtypes are not compared (SB3's ``predict`` does not compare them).
    * Discrete / MultiDiscrete: the same ``n`` / ``nvec`` and the same ``start`` (SB3 one-hot
      encodes the raw value, so a shifted ``start`` encodes every observation wrongly).
      MultiBinary: the same shape.
    * Dict: the same keys, each fitting by these rules.

    Args:
        env_space: The env's (or agent's) observation space, e.g.
            ``env.observation_space(agent)``.
        model_space: ``model.observation_space``.

    Returns:
        None when they fit, else a short reason naming both, such as
        ``"shape (18,) is not the model's (10,)"``.

    Examples:
        >>> from gymnasium import spaces
        >>> import numpy as np
        >>> observation_space_mismatch(spaces.Box(0, 1, (18,)), spaces.Box(0, 1, (10,)))
        "shape (18,) is not the model's (10,)"
        >>> image = spaces.Box(0, 255, (3, 36, 36), np.uint8)
        >>> observation_space_mismatch(spaces.Box(0, 255, (36, 36, 3), np.uint8), image) is None
        True
    """
    if env_space == model_space:
        return None
    if isinstance(env_space, spaces.Box) and isinstance(model_space, spaces.Box):
        shape, want = env_space.shape, model_space.shape
        env_image, model_image = _image(env_space), _image(model_space)
        if env_image != model_image:
            which, other = ("model's", "env's") if model_image else ("env's", "model's")
            return (
                f"the {which} space is an image space (uint8 in [0, 255], which SB3 divides "
                f"by 255) and the {other} is not: {env_space} is not the model's {model_space}"
            )
        if shape == want:
            return None
        if model_image and len(shape) == 3 and (shape[2], shape[0], shape[1]) == want:
            return None  # channel-last, transposed by SB3's maybe_transpose
        return f"shape {shape} is not the model's {want}"
    if isinstance(env_space, spaces.Dict) and isinstance(model_space, spaces.Dict):
        keys, want_keys = sorted(env_space.spaces), sorted(model_space.spaces)
        if keys != want_keys:
            return f"keys {keys} are not the model's {want_keys}"
        for key, sub in env_space.spaces.items():
            reason = observation_space_mismatch(sub, model_space.spaces[key])
            if reason is not None:
                return f"key {key!r}: {reason}"
        return None
    if isinstance(env_space, spaces.Discrete) and isinstance(model_space, spaces.Discrete):
        if env_space.n != model_space.n:
            return f"size {env_space.n} is not the model's {model_space.n}"
        if env_space.start != model_space.start:
            return f"start {env_space.start} is not the model's {model_space.start}"
        return None  # equal up to dtype, which SB3's one-hot encoding does not read
    if isinstance(env_space, spaces.MultiDiscrete) and isinstance(
        model_space, spaces.MultiDiscrete
    ):
        if not np.array_equal(env_space.nvec, model_space.nvec):
            return f"nvec {env_space.nvec} is not the model's {model_space.nvec}"
        if not np.array_equal(env_space.start, model_space.start):
            return f"start {env_space.start} is not the model's {model_space.start}"
        return None  # equal up to dtype, which SB3's one-hot encoding does not read
    if isinstance(env_space, spaces.MultiBinary) and isinstance(model_space, spaces.MultiBinary):
        if env_space.shape == model_space.shape:
            return None
        return f"shape {env_space.shape} is not the model's {model_space.shape}"
    return f"a {type(env_space).__name__} space is not the model's {model_space}"
