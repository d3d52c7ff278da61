"""SB3's automatic ``VecTransposeImage``, for envs that step outside the model's own VecEnv.

When a model is built with an env of image observations in the channel-last layout (``HxWxC``,
uint8 in [0, 255]), ``BaseAlgorithm._wrap_env`` wraps its VecEnv in ``VecTransposeImage``:
the model's ``observation_space`` is ``CxHxW``, and what ``learn()`` stores in its buffers --
observations, next observations, ``infos[i]["terminal_observation"]`` -- is transposed. Envs
stepped elsewhere (a runner on Ray, a loop over raw gymnasium envs) return the raw ``HxWxC``
observations; :class:`ImageTranspose` turns them into what the model's VecEnv would have
returned, with SB3's own ``VecTransposeImage.transpose_image``.

* :func:`transposes_images` -- SB3's rule: whether ``_wrap_env`` wraps an env of a given
  observation space in ``VecTransposeImage``;
* :class:`ImageTranspose` -- the transpose for a raw observation space
  (:meth:`ImageTranspose.for_space`) or the one SB3 applied to a model's env
  (:func:`image_transpose`);
* :func:`unapplied_wrappers` -- the model's other VecEnv wrappers (``VecNormalize``,
  ``VecFrameStack``, ...), which envs stepped elsewhere do not apply.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.preprocessing import is_image_space, is_image_space_channels_first
from stable_baselines3.common.vec_env import (
    VecCheckNan,
    VecEnvWrapper,
    VecMonitor,
    VecTransposeImage,
    unwrap_vec_wrapper,
)

__all__ = ["ImageTranspose", "image_transpose", "transposes_images", "unapplied_wrappers"]

#: VecEnv wrappers that change nothing a buffer stores (VecMonitor, VecCheckNan) or that
#: :class:`ImageTranspose` applies (VecTransposeImage).
_APPLIED_OR_NEUTRAL: tuple[type[VecEnvWrapper], ...] = (VecTransposeImage, VecMonitor, VecCheckNan)


def transposes_images(observation_space: spaces.Space[Any]) -> bool:
    """Whether SB3 wraps an env of ``observation_space`` in ``VecTransposeImage``.

    ``BaseAlgorithm._wrap_env`` (SB3 2.x): a Box that ``is_image_space`` (uint8, 3 dims, bounds
    [0, 255]) and is not ``is_image_space_channels_first`` (its smallest dimension is not the
    first); for a Dict space, when at least one of its sub-spaces is such an image.

    Args:
        observation_space: The env's observation space, as the env declares it.

    Returns:
        True when a model built with such an env stores (and acts on) ``CxHxW`` observations.
    """
    if isinstance(observation_space, spaces.Dict):
        return any(transposes_images(s) for s in observation_space.spaces.values())
    return bool(
        is_image_space(observation_space) and not is_image_space_channels_first(observation_space)  # type: ignore[arg-type]
    )


class ImageTranspose:
    """SB3's ``VecTransposeImage`` applied to raw (channel-last) env outputs.

    Each method returns what ``VecTransposeImage.reset``/``step_wait`` return for the same raw
    outputs: every image sub-space (a Box ``is_image_space`` finds; for a non-Dict space, the
    space itself) is transposed from ``(..., H, W, C)`` to ``(..., C, H, W)`` with
    ``VecTransposeImage.transpose_image`` (a view of the input: nothing is copied or mutated;
    the buffers copy what they store).

    Args:
        observation_space: The raw env observation space; SB3 must transpose it
            (:func:`transposes_images`).

    Attributes:
        raw_space: ``observation_space``.
        observation_space: The transposed space (``VecTransposeImage.observation_space``: what
            the model's ``observation_space`` is).
        image_keys: For a Dict space, the keys transposed (``VecTransposeImage
            .image_space_keys``); None otherwise.

    Raises:
        ValueError: SB3 would not transpose ``observation_space``, or (Dict) one of its image
            sub-spaces is channel-first while another is not (``VecTransposeImage`` refuses it).
    """

    def __init__(self, observation_space: spaces.Space[Any]) -> None:
        if not transposes_images(observation_space):
            raise ValueError(
                f"SB3 does not wrap an env of observation space {observation_space} in "
                "VecTransposeImage (BaseAlgorithm._wrap_env: a uint8 Box of 3 dims in [0, 255] "
                "whose channels are last): its observations are stored as they are"
            )
        self.raw_space = observation_space
        self.image_keys: list[str] | None = None
        if isinstance(observation_space, spaces.Dict):
            self.image_keys = [k for k, s in observation_space.spaces.items() if is_image_space(s)]
            transposed = dict(observation_space.spaces)
            for key in self.image_keys:
                transposed[key] = _transpose_space(observation_space.spaces[key], key)
            self.observation_space: spaces.Space[Any] = spaces.Dict(transposed)
        else:
            self.observation_space = _transpose_space(observation_space, "")

    @classmethod
    def for_space(cls, observation_space: spaces.Space[Any]) -> ImageTranspose | None:
        """The transpose SB3 applies to envs of ``observation_space``, or None when it applies none.

        Raises:
            ValueError: as the constructor, for a Dict space of mixed image layouts.
        """
        return cls(observation_space) if transposes_images(observation_space) else None

    def observations(self, observations: Any) -> Any:
        """``VecTransposeImage.transpose_observations`` of raw observations.

        Args:
            observations: A batch ``(n, H, W, C)`` or one observation ``(H, W, C)`` (a dict of
                them for a Dict space); not modified.

        Returns:
            ``(n, C, H, W)`` (``(C, H, W)``), a transposed view; for a Dict, a new dict with the
            image keys transposed and the other values as they are.
        """
        if self.image_keys is None:
            return VecTransposeImage.transpose_image(np.asarray(observations))
        out = dict(observations)
        for key in self.image_keys:
            out[key] = VecTransposeImage.transpose_image(np.asarray(observations[key]))
        return out

    def infos(self, dones: Any, infos: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        """The step's infos as ``VecTransposeImage.step_wait`` returns them.

        Args:
            dones: ``(n,)`` booleans of the step.
            infos: ``n`` info dicts (not modified).

        Returns:
            A new list: for each done env with a ``terminal_observation``, a shallow copy of
            its info with that observation transposed; the other infos themselves.
        """
        out = list(infos)
        for idx, done in enumerate(np.asarray(dones).tolist()):
            if done and "terminal_observation" in out[idx]:
                info = dict(out[idx])
                info["terminal_observation"] = self.observations(info["terminal_observation"])
                out[idx] = info
        return out


def image_transpose(model: BaseAlgorithm) -> ImageTranspose | None:
    """The transpose SB3 applied to ``model``'s env, for raw outputs of envs like it.

    When ``model.get_env()`` is wrapped in ``VecTransposeImage`` (``_wrap_env`` wrapped it, or
    the user did) and the wrapper is not ``skip``, the :class:`ImageTranspose` of the raw
    space it wraps; else None (the model takes the envs' observations as they are).

    Args:
        model: An SB3 model.

    Returns:
        The transpose, or None (also for a model without an env).
    """
    env = model.get_env()
    if env is None:
        return None
    wrapper = unwrap_vec_wrapper(env, VecTransposeImage)
    if not isinstance(wrapper, VecTransposeImage) or wrapper.skip:
        return None
    return ImageTranspose(wrapper.venv.observation_space)


def unapplied_wrappers(model: BaseAlgorithm) -> list[str]:
    """The VecEnv wrappers of ``model``'s env that envs stepped elsewhere do not apply.

    ``learn()`` acts on and stores what ``model.get_env()`` returns, i.e. after every
    ``VecEnvWrapper`` around the base VecEnv: ``VecNormalize`` normalizes observations and
    rewards, ``VecFrameStack`` stacks frames, and so on. Envs stepped outside that VecEnv (Ray
    runners, a loop over raw gymnasium envs) return the raw outputs; of the wrappers, only
    ``VecTransposeImage`` is applied to them (:class:`ImageTranspose`), and ``VecMonitor`` and
    ``VecCheckNan`` change no value a buffer stores. Every other wrapper of the chain (walked
    from ``model.get_env()`` down its ``.venv`` attributes), and the ``VecNormalize`` that
    ``model.get_vec_normalize_env()`` returns, is listed.

    Args:
        model: An SB3 model (not modified).

    Returns:
        The wrapper class names, outermost first, without duplicates; empty when there are none
        (also for a model without an env).
    """
    names: list[str] = []
    env: Any = model.get_env()
    while isinstance(env, VecEnvWrapper):
        if not isinstance(env, _APPLIED_OR_NEUTRAL):
            names.append(type(env).__name__)
        env = env.venv
    normalize = model.get_vec_normalize_env()
    if normalize is not None and type(normalize).__name__ not in names:
        names.append(type(normalize).__name__)
    return names


def _transpose_space(space: spaces.Space[Any], key: str) -> spaces.Box:
    """``VecTransposeImage.transpose_space``, its assertion raised as a ValueError."""
    if not isinstance(space, spaces.Box) or is_image_space_channels_first(space):
        raise ValueError(
            f"observation space {key or ''!s}{' ' if key else ''}{space} is an image SB3 "
            "would not transpose (channels first) next to one it would: VecTransposeImage "
            "refuses such a Dict space (its images must all be channel-last)"
        )
    return VecTransposeImage.transpose_space(space, key)
