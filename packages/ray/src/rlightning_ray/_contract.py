"""What a gymnasium env's ``reset`` and ``step`` must return, judged before a value is kept.

The messages of :class:`rlightning_ray.groups.EnvContractError` (private helpers of
:class:`~rlightning_ray.GymEnvGroup`). Each returns None when the contract holds.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from gymnasium import spaces

_PORT = "port the env to gymnasium >= 0.26 or wrap it with shimmy's GymV21CompatibilityV0"


def kind(value: Any) -> str:
    """``a 4-tuple``, ``a ndarray`` ...: what an env call returned, for messages."""
    if isinstance(value, tuple):
        return f"a {len(value)}-tuple"
    return f"a {type(value).__name__}"


def reset_problem(i: int, result: Any, space: spaces.Space[Any]) -> str | None:
    """Why env ``i``'s ``reset`` result is not gymnasium's ``(observation, info)``, or None."""
    if isinstance(result, tuple) and len(result) == 2 and isinstance(result[1], dict):
        return observation_problem(i, result[0], space, "reset")
    return (
        f"env {i}'s reset returned {kind(result)}, not gymnasium's (observation, info) tuple "
        f"(an old-gym reset returns the observation alone; observation space {space}): {_PORT}"
    )


def step_problem(i: int, result: Any, space: spaces.Space[Any]) -> str | None:
    """Why env ``i``'s ``step`` result is not gymnasium's 5-tuple, or None."""
    if isinstance(result, tuple) and len(result) == 5:
        return observation_problem(i, result[0], space, "step")
    return (
        f"env {i}'s step returned {kind(result)}, not gymnasium's (observation, reward, "
        f"terminated, truncated, info) 5-tuple (an old-gym step returns (observation, reward, "
        f"done, info); observation space {space}): {_PORT}"
    )


def observation_problem(i: int, obs: Any, space: spaces.Space[Any], call: str) -> str | None:
    """Why env ``i``'s observation from ``call`` cannot be a row of ``space``'s batch, or None."""
    problem = _shape_problem(space, obs, "observation")
    if problem is None:
        return None
    return (
        f"env {i}'s {call} returned an observation that is not in the observation space "
        f"{space}: the {problem} (DummyVecEnv would broadcast it into the batch silently); "
        "return observations of the space's shape"
    )


def _shape_problem(space: spaces.Space[Any], obs: Any, where: str) -> str | None:
    """Why ``obs`` does not have ``space``'s shape (or ``Dict`` keys), or None.

    Only shapes and ``Dict`` keys are judged (dtypes are cast on storing, as in SB3); spaces
    without a shape (``Tuple``, ``Text``, ...) are not judged.
    """
    if isinstance(space, spaces.Dict):
        if not isinstance(obs, dict) or set(obs) != set(space.spaces):
            got = sorted(obs) if isinstance(obs, dict) else type(obs).__name__
            return f"{where} has keys {got}, the space's are {sorted(space.spaces)}"
        for key, sub in space.spaces.items():
            problem = _shape_problem(sub, obs[key], f"{where}[{key!r}]")
            if problem is not None:
                return problem
        return None
    shape = getattr(space, "shape", None)
    if shape is None:
        return None
    got_shape = tuple(np.shape(obs))
    if got_shape != tuple(shape):
        return f"{where} has shape {got_shape}, the space's is {tuple(shape)}"
    return None
