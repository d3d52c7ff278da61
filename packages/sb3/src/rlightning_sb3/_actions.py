"""Env action vs buffer action, per action space, exactly as SB3 computes them.

Each function names the SB3 code it follows. None of them draws random numbers except
:func:`off_policy_actions`, which draws exactly what SB3's ``OffPolicyAlgorithm._sample_action``
draws, in the same order. :data:`ACTION_KINDS` and :func:`refuse_action_dtypes` hold the env
action dtypes ``SB3PolicyAdapter.env_actions`` stacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from gymnasium import spaces
from stable_baselines3.common.base_class import BaseAlgorithm
from stable_baselines3.common.noise import ActionNoise, VectorizedActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm
from stable_baselines3.common.policies import BasePolicy

from rlightning import PolicyResponse
from rlightning.rules import check_action_mask, mask_size
from rlightning_sb3._predict import box_env_actions, direct_predict

__all__ = [
    "ACTION_KINDS",
    "check_action_masks",
    "exploration_noise",
    "off_policy_actions",
    "on_policy_actions",
    "refuse_action_dtypes",
]

#: numpy dtype kinds an env action may have, per action space: Discrete and MultiDiscrete take
#: integers (gymnasium's ``contains`` needs an integer dtype; SB3's categorical distributions
#: sample int64); other spaces take numbers (SB3's ``BernoulliDistribution`` samples MultiBinary
#: actions as floats).
ACTION_KINDS: dict[type[spaces.Space[Any]], str] = {
    spaces.Discrete: "iu",
    spaces.MultiDiscrete: "iu",
}


def on_policy_actions(
    policy: BasePolicy, action_space: spaces.Space[Any], actions: np.ndarray, unscale: bool
) -> tuple[np.ndarray, np.ndarray]:
    """Turn the policy's sampled actions into what the env's ``step`` takes and what SB3 stores.

    As SB3's ``OnPolicyAlgorithm.collect_rollouts``. Env actions: for a Box space, actions of
    a squashing policy (``policy.squash_output``, output in [-1, 1]) are unscaled to
    ``[low, high]`` with ``policy.unscale_action``; otherwise they are clipped to ``[low, high]``
    (the Gaussian is unbounded); other spaces pass through. sb3-contrib's
    ``RecurrentPPO.collect_rollouts`` always clips (``unscale=False``), while its ``predict``
    unscales a squashing policy's actions as ``BasePolicy.predict`` does. Buffer actions (what
    ``RolloutBuffer.add`` is given): the sampled actions, unclipped and unscaled, with Discrete
    actions reshaped from ``(n_envs,)`` to ``(n_envs, 1)``.

    Args:
        policy: The model's policy.
        action_space: The model's action space.
        actions: ``(n_envs, *action_shape)`` numpy actions as sampled (not modified).
        unscale: Whether a squashing policy's actions are unscaled (False: always clip).

    Returns:
        ``(env_actions, buffer_actions)``: ``(n_envs, *action_shape)`` env actions (a new array
        for Box, ``actions`` otherwise) and the buffer actions (``(n_envs, 1)`` for Discrete,
        ``actions`` itself otherwise).
    """
    if isinstance(action_space, spaces.Box):
        return box_env_actions(policy, action_space, actions, unscale), actions
    if isinstance(action_space, spaces.Discrete):
        return actions, actions.reshape(-1, 1)
    return actions, actions


def exploration_noise(model: OffPolicyAlgorithm, n_envs: int) -> ActionNoise | None:
    """Return the action noise one ``_sample_action`` call of ``n_envs`` envs draws from.

    As ``OffPolicyAlgorithm._setup_learn``: a noise that is not a ``VectorizedActionNoise`` is
    wrapped in ``VectorizedActionNoise(noise, n)`` when ``n > 1``, ``n`` the larger of
    ``n_envs`` and ``model.n_envs`` (``_setup_learn`` wraps it with ``model.n_envs``; a
    policy server's model, built with a VecEnv of every env, may first act for a batch of a
    few of them and still needs a process for each), so that every env
    draws its own sample (and an Ornstein-Uhlenbeck noise keeps one state per env, which
    ``collect_rollouts`` resets per env index, as ``add_replay_step`` does). The wrapper
    replaces ``model.action_noise``, exactly as ``_setup_learn`` replaces it, so a later
    ``start_training`` and the per-env resets of ``add_replay_step`` act on the same per-env
    noises. With one env the noise is used as it is, as SB3 uses it for a single env.

    Args:
        model: An off-policy SB3 model.
        n_envs: The number of envs (rows) of the call.

    Returns:
        The noise to call (``model.action_noise``, possibly just wrapped), or None.

    A ``VectorizedActionNoise`` already there is returned as it is, whatever ``n_envs``: which
    of its envs each row is (a call may cover a subset of the envs) is decided by
    ``AdapterState.noise_rows``.
    """
    noise = model.action_noise
    if noise is None:
        return None
    if isinstance(noise, VectorizedActionNoise):
        return noise
    n = max(n_envs, int(getattr(model, "n_envs", 1) or 1))
    if n > 1:
        noise = model.action_noise = VectorizedActionNoise(noise, n)
    return noise


def off_policy_actions(
    model: OffPolicyAlgorithm,
    observation: Any,
    n_envs: int,
    explore: bool,
    noise: ActionNoise | None,
    noise_rows: list[int] | None = None,
    direct: Any = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Choose off-policy actions and the buffer actions, as ``OffPolicyAlgorithm._sample_action``.

    With ``explore``: while ``model.num_timesteps < model.learning_starts`` (and not gSDE at
    warm-up) each env gets ``model.action_space.sample()``; afterwards
    ``model.predict(observation, deterministic=False)`` (for DQN this includes its epsilon-greedy
    draw). For Box spaces the action is scaled to [-1, 1] with ``policy.scale_action``, the
    action noise ``noise`` (if any; one sample per env, see :func:`exploration_noise`) is added
    and the sum clipped to [-1, 1]: that is the buffer action; the env action is its
    ``policy.unscale_action``. Without ``explore`` the env action is
    ``model.predict(observation, deterministic=True)`` itself (no noise, no round trip through
    the [-1, 1] scale) and, for Box spaces, the buffer action its ``policy.scale_action``.

    Args:
        model: An off-policy SB3 model (SAC, TD3, DDPG, DQN, ...).
        observation: A batch of ``n_envs`` observations (array or dict of arrays).
        n_envs: The batch size.
        explore: Whether to explore (warm-up sampling, stochastic policy, noise, epsilon).
        noise: What :func:`exploration_noise` returned for this call (None: no noise; ignored
            without ``explore`` or for other spaces than Box).
        noise_rows: For a ``VectorizedActionNoise`` whose envs are not the rows in order: row
            ``i`` takes the sample of process ``noise_rows[i]``. When the rows are every
            process (in another order), all samples are drawn in process order, as
            ``VectorizedActionNoise.__call__`` draws them; when they are a subset (a
            dynamically batching server's batch), only those processes are drawn from, in row
            order, ``noise.noises[j]()`` each (SB3 never acts for a subset, so there is no
            other order to follow; each env's process still advances once per step it acts,
            as SB3's process of that env does). None: row ``i`` is process ``i`` of all.
        direct: The device ``AdapterState.direct_predict`` gave for a ready batch (the policy
            already in eval mode): ``model.predict`` is then computed by
            :func:`~rlightning_sb3._predict.direct_predict` (the same actions and random
            draws). None: ``model.predict`` is called.

    Returns:
        ``(env_actions, buffer_actions)``, each ``(n_envs, *action_shape)``.
    """
    box = isinstance(model.action_space, spaces.Box)
    if (
        explore
        and model.num_timesteps < model.learning_starts
        and not (model.use_sde and model.use_sde_at_warmup)
    ):
        unscaled = np.array([model.action_space.sample() for _ in range(n_envs)])
    elif direct is not None:
        unscaled = direct_predict(model.policy, observation, direct, not explore)
    else:
        unscaled, _ = model.predict(observation, deterministic=not explore)
    if box:
        scaled = model.policy.scale_action(unscaled)
        if not explore:
            return unscaled, np.asarray(scaled)
        if noise is not None:
            if noise_rows is None:
                sample = noise()
            elif isinstance(noise, VectorizedActionNoise) and len(noise_rows) < len(noise.noises):
                # A subset of the envs: only their processes advance (an OU state per env).
                sample = np.stack([noise.noises[j]() for j in noise_rows])
            else:  # every env, in another order: drawn in env order, as SB3 draws them
                sample = noise()[noise_rows]
            scaled = np.clip(scaled + sample, -1, 1)
        return np.asarray(model.policy.unscale_action(scaled)), np.asarray(scaled)
    return unscaled, unscaled


def check_action_masks(
    model: BaseAlgorithm, maskable: bool, action_masks: Any, ids: Sequence[str]
) -> np.ndarray:
    """Validate MaskablePPO ``action_masks`` and return them as ``(n_envs, mask_size)`` bools.

    The rule is :func:`rlightning.rules.check_action_mask` in sb3-contrib's flat layout
    (``action-mask``: one row of ``mask_size(space)`` 0/1 entries per env; ``no-legal-action``:
    a row that allows no action in one of its sub-spaces is refused, naming the env). The
    result is a new bool array (sb3-contrib's ``MaskableCategorical`` reads masks as booleans),
    so responses keep their masks even when the caller refills its array for the next step.

    Args:
        model: The SB3 model.
        maskable: Whether the model is sb3-contrib's MaskablePPO.
        action_masks: ``(n_envs, mask_size)`` (or ``(mask_size,)`` for one env), as
            ``get_action_masks(env)`` returns them; or a list of one entry per env, each a
            ``(mask_size,)`` row or None for an env without a mask (every action allowed:
            an all-True row, what ``MaskableRolloutBuffer`` holds for an unmasked step).
        ids: The env ids of the batch, for messages.

    Returns:
        The masks, ``(n_envs, mask_size)``, dtype bool.

    Raises:
        TypeError: a mask is not of a bool, integer or float dtype.
        ValueError: the model does not use masks, the shape is wrong, a value is not 0/1, or an
            env's mask allows no action in one of its sub-spaces (the env id is named).
    """
    if not maskable:
        raise ValueError(
            f"action_masks are used only by sb3-contrib's MaskablePPO; this model is "
            f"{type(model).__name__}"
        )
    space = model.action_space
    if isinstance(action_masks, (list, tuple)) and any(m is None for m in action_masks):
        action_masks = _masks_with_unmasked_rows(action_masks, space, ids)
    checked: np.ndarray = check_action_mask(
        space, action_masks, subject="action_masks", layout="flat", rows=ids
    )
    return checked


def _masks_with_unmasked_rows(
    rows: list[Any] | tuple[Any, ...], space: spaces.Space[Any], ids: Sequence[str]
) -> np.ndarray:
    """Stack per-env mask rows where None means "every action allowed" (an all-True row).

    An all-True row is what sb3-contrib's ``MaskableRolloutBuffer`` holds for a step collected
    without masks, and ``MaskableCategorical`` with an all-True mask samples as without one.
    Each given row is checked by :func:`rlightning.rules.check_action_mask` (flat layout).

    Raises:
        TypeError: a row is not of a bool, integer or float dtype.
        ValueError: the rows are not one per env, or a row breaks the mask rule (env named).
    """
    if len(rows) != len(ids):
        raise ValueError(
            f"action_masks must have one row (or None) per env: {len(ids)} for {list(ids)}, "
            f"got {len(rows)}"
        )
    masks = np.ones((len(ids), mask_size(space)), dtype=np.bool_)
    for i, (row, env_id) in enumerate(zip(rows, ids, strict=True)):
        if row is not None:
            masks[i] = check_action_mask(
                space, row, subject=f"action_masks[{env_id!r}]", layout="flat"
            )
    return masks


def refuse_action_dtypes(
    space: spaces.Space[Any], ordered: list[PolicyResponse], actions: list[np.ndarray]
) -> None:
    """Raise for actions of a kind the action space does not take, or of mixed dtypes.

    For ``SB3PolicyAdapter.env_actions``, once its fast check found something wrong.

    Args:
        space: The model's action space.
        ordered: The responses, in env order.
        actions: Their actions as arrays, in the same order.

    Raises:
        TypeError: an action is not numeric, or not an integer for a Discrete or
            MultiDiscrete space (gymnasium's ``contains`` needs an integer dtype there).
        ValueError: the actions have different dtypes (``np.stack`` would upcast them).
    """
    kinds = ACTION_KINDS.get(type(space), "biuf")
    for response, action in zip(ordered, actions, strict=True):
        if action.dtype.kind not in kinds:
            wanted = "integers" if kinds != "biuf" else "numbers"
            raise TypeError(
                f"action for env {response.env_id!r} must hold {wanted} for {space} (what "
                f"VecEnv.step passes to the env), got {type(response.action).__name__} "
                f"{response.action!r} of dtype {action.dtype}"
            )
    raise ValueError(
        "actions have different dtypes (stacking would convert them silently): "
        + ", ".join(f"{r.env_id!r}: {a.dtype}" for r, a in zip(ordered, actions, strict=True))
    )
