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

__all__ = ["unsupported_space"]


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
      actions its integer space does not contain.
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
    if isinstance(observation_space, spaces.Dict):
        for key, sub in observation_space.spaces.items():
            if _nonzero_start(sub):
                return f"observation space key {key!r}, {sub}, has a non-zero start: {fix}"
    elif _nonzero_start(observation_space):
        return f"observation space {observation_space} has a non-zero start: {fix}"
    return None
