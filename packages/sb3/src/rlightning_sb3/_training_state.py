"""The model's training state between steps, as SB3's ``collect_rollouts`` leaves it.

``learn()`` continues from what the model holds: ``_last_obs`` (what the next step acts on),
``_last_episode_starts`` (on-policy: whether it starts an episode), RecurrentPPO's
``_last_lstm_states`` and, with ``VecNormalize``, ``_last_original_obs`` (the unnormalized
``_last_obs`` that ``OffPolicyAlgorithm._store_transition`` stores). The buffer helpers write
them here, in SB3's order:

* on-policy (``OnPolicyAlgorithm.collect_rollouts``, sb3-contrib's ``RecurrentPPO`` and
  ``MaskablePPO`` versions): a callback that stops training returns before the step is stored,
  leaving the step's own inputs (:func:`rollout_inputs`); after ``RolloutBuffer.add`` the model
  holds the step's outputs (:func:`rollout_outputs`);
* off-policy (``OffPolicyAlgorithm._store_transition``): after ``ReplayBuffer.add``,
  ``_last_obs = new_obs`` and ``_last_original_obs`` (:func:`replay_outputs`).

With ``VecNormalize`` (``model.get_vec_normalize_env()``), SB3's replay buffer stores the
original observations, rewards and terminal observations, read from the wrapper
(:func:`replay_transition`); the helpers read them there too, and refuse observations and
rewards that are not what the wrapper returned, since the originals would not be theirs.
"""

from __future__ import annotations

from collections.abc import Sequence
from copy import deepcopy
from typing import Any

import numpy as np
from stable_baselines3.common.base_class import BaseAlgorithm

from rlightning_sb3._buffer_checks import check_terminal
from rlightning_sb3._observations import as_arrays, native_arrays

__all__ = [
    "last_observation",
    "replay_outputs",
    "replay_transition",
    "rollout_inputs",
    "rollout_outputs",
]


def last_observation(observation: Any) -> Any:
    """``observation`` as the model keeps it in ``_last_obs`` (which ``obs_as_tensor`` reads).

    numpy arrays (a dict of them for a Dict space), as a VecEnv returns them; an array torch
    cannot view (a negative stride, a non-native byte order) is a native copy, a list an array.
    The same values: a ``learn()`` that continues from it computes what it would from the
    VecEnv's own array. The common case, a native array without a negative stride (what a
    VecEnv returns), is the array itself, found with three checks (this runs on every step).
    """
    if type(observation) is np.ndarray:
        strides = observation.strides
        if observation.dtype.isnative and (not strides or min(strides) >= 0):
            return observation
        return native_arrays(observation)
    return native_arrays(as_arrays(observation))


def rollout_inputs(model: Any, observation: Any, episode_starts: np.ndarray, states: Any) -> None:
    """Set what on-policy ``collect_rollouts`` holds while a step is collected.

    ``_last_obs`` is the step's observation, ``_last_episode_starts`` its episode starts and
    (RecurrentPPO, ``states`` not None) ``_last_lstm_states`` the LSTM states it started from:
    what the model keeps when a callback's ``on_step`` returns False at this step (SB3 returns
    before updating them).

    Args:
        model: The on-policy model (mutated: the three attributes).
        observation: The step's observation, ``(n_envs, *obs_shape)`` (dict for a Dict space).
        episode_starts: ``(n_envs,)`` bools, as stored.
        states: RecurrentPPO's ``RNNStates`` of ``(n_layers, n_envs, hidden)`` tensors the step
            started from (the buffer's ``lstm_states``), or None.
    """
    if observation is not model._last_obs:  # the loop's usual step: the last one's new_obs
        model._last_obs = last_observation(observation)
    model._last_episode_starts = episode_starts
    if states is not None:
        model._last_lstm_states = states


def rollout_outputs(model: Any, new_observation: Any, dones: np.ndarray, states: Any) -> None:
    """Set what on-policy ``collect_rollouts`` holds after storing a step.

    ``_last_obs = new_obs``, ``_last_episode_starts = dones`` and (RecurrentPPO)
    ``_last_lstm_states`` the states after the step. Without ``new_observation`` (None), where
    the next observation is not known, ``_last_obs`` becomes None: a ``learn()`` (or
    ``start_training(reset_num_timesteps=False)``) made before the next step or
    :func:`~rlightning_sb3.finish_rollout` then resets the env (``_setup_learn``'s rule for a
    model without a last observation), never continuing from a stale one.

    Args:
        model: The on-policy model (mutated: the three attributes).
        new_observation: What ``env.step`` returned, or None.
        dones: ``(n_envs,)`` bools of the step.
        states: RecurrentPPO's ``RNNStates`` of ``(n_layers, n_envs, hidden)`` tensors after
            the step, or None.
    """
    model._last_obs = None if new_observation is None else last_observation(new_observation)
    model._last_episode_starts = dones
    if states is not None:
        model._last_lstm_states = states


def _equal(a: Any, b: Any) -> bool:
    """Whether two observations (arrays or dicts of arrays) hold the same values (NaN = NaN)."""
    if isinstance(a, dict) or isinstance(b, dict):
        if not (isinstance(a, dict) and isinstance(b, dict)) or set(a) != set(b):
            return False
        return all(_equal(a[key], b[key]) for key in a)
    x, y = np.asarray(a), np.asarray(b)
    if x.shape != y.shape:
        return False
    if x.dtype.kind in "fc" or y.dtype.kind in "fc":
        return bool(np.array_equal(x, y, equal_nan=True))
    return bool(np.array_equal(x, y))


def _refuse_not_returned(name: str, what: str, fix: str) -> None:
    raise ValueError(
        f"{name} is not what the model's VecNormalize returned {what}; SB3's replay buffer "
        f"stores the original (unnormalized) observations and rewards, which add_replay_step "
        f"reads from model.get_vec_normalize_env() as OffPolicyAlgorithm._store_transition "
        f"does, so it needs the VecNormalize's own outputs: {fix}"
    )


def replay_transition(
    model: BaseAlgorithm,
    observation: Any,
    new_observation: Any,
    rewards: np.ndarray,
    dones: np.ndarray,
    infos: Sequence[dict[str, Any]],
    ids: Sequence[Any],
) -> tuple[Any, Any, np.ndarray, Any]:
    """What ``OffPolicyAlgorithm._store_transition`` hands to ``ReplayBuffer.add``.

    Without ``VecNormalize``: ``observation``, a deep copy of ``new_observation`` in which each
    done env's row is its ``infos[i]["terminal_observation"]`` (the VecEnv has already reset
    it), and ``rewards``. With a ``VecNormalize`` ``vn = model.get_vec_normalize_env()`` (SB3
    finds it under any other wrappers when the model is built), the originals: the model's
    ``_last_original_obs`` (the original of the observation the step acted on), a deep copy of
    ``vn.get_original_obs()`` in which each done env's row is ``vn.unnormalize_obs`` of its
    terminal observation (which ``VecNormalize`` normalizes in the infos), written in SB3's
    order (an array's row first gets the normalized terminal observation, cast to the row's
    dtype, then its unnormalized value; a Dict's keys get ``unnormalize_obs`` of the whole
    terminal observation), and ``vn.get_original_reward()``.

    The originals belong to the wrapper's last step, so with a ``VecNormalize`` the step must
    be that step: ``observation`` must equal the model's ``_last_obs`` (what
    :func:`~rlightning_sb3.start_training` returned, or the previous step's
    ``new_observation``), ``new_observation`` must equal ``vn.normalize_obs(
    vn.get_original_obs())`` and ``rewards`` ``vn.normalize_reward(vn.get_original_reward())``
    (what ``VecNormalize.step_wait`` returned, recomputed: the same values, bit for bit).
    Anything else (the originals themselves, as an older recipe passed them; the outputs of
    another env; a stale observation) is refused: the stored originals would not be its own.

    Args:
        model: The off-policy model (read, not changed).
        observation: The observation the step acted on.
        new_observation: What ``env.step`` returned (not modified).
        rewards: ``(n_envs,)`` rewards as checked (float).
        dones: ``(n_envs,)`` bools.
        infos: The step's ``n_envs`` info dicts (not modified).
        ids: The env ids in env order, for messages.

    Returns:
        ``(obs, next_obs, rewards, original_new_obs)`` for ``ReplayBuffer.add``, and what
        ``_last_original_obs`` becomes after the step (None without ``VecNormalize``).

    Raises:
        ValueError: a terminal observation does not have one observation's shape (the env
            named); or, with ``VecNormalize``, the inputs are not its outputs as above, or the
            model has no ``_last_original_obs`` (``start_training`` was not called).
    """
    vec_normalize = model.get_vec_normalize_env()
    if vec_normalize is None:
        next_obs = deepcopy(new_observation)
        for i, done in enumerate(dones):
            terminal = infos[i].get("terminal_observation")
            if done and terminal is not None:
                if isinstance(next_obs, dict):
                    for key in next_obs:
                        check_terminal(terminal[key], next_obs[key][i], ids[i], f"[{key!r}]")
                        next_obs[key][i] = terminal[key]
                else:
                    check_terminal(terminal, next_obs[i], ids[i], "")
                    next_obs[i] = terminal
        return observation, next_obs, rewards, None
    last = model._last_obs
    original_obs = model._last_original_obs
    if last is None or original_obs is None:
        raise ValueError(
            "the model has no original observation of the VecNormalize's last observation "
            "(_last_original_obs): call start_training(model, total_timesteps) before the loop"
        )
    if observation is not last and not _equal(observation, last):
        _refuse_not_returned(
            "observation",
            "before this step (the model's _last_obs)",
            "pass what start_training() returned, then each step's new observation from "
            "env.step, in order",
        )
    original_new = vec_normalize.get_original_obs()
    if not _equal(new_observation, vec_normalize.normalize_obs(original_new)):
        _refuse_not_returned(
            "new_observation",
            "at its last step",
            "pass the observation env.step returned, not env.get_original_obs(), and step the "
            "model's own env (model.get_env())",
        )
    original_reward = vec_normalize.get_original_reward()
    if not _equal(rewards, vec_normalize.normalize_reward(original_reward)):
        _refuse_not_returned(
            "rewards",
            "at its last step",
            "pass the rewards env.step returned, not env.get_original_reward()",
        )
    next_obs = deepcopy(original_new)
    for i, done in enumerate(dones):
        terminal = infos[i].get("terminal_observation")
        if done and terminal is not None:
            if isinstance(next_obs, dict):
                for key in next_obs:
                    check_terminal(terminal[key], next_obs[key][i], ids[i], f"[{key!r}]")
                unnormalized = vec_normalize.unnormalize_obs(terminal)
                for key in next_obs:
                    next_obs[key][i] = unnormalized[key]
            else:
                if next_obs.ndim < 2:  # SB3 itself would fail (next_obs[i, :]: IndexError)
                    raise ValueError(
                        f"env {ids[i]!r} ended an episode, but a terminal observation of "
                        f"observations shaped {next_obs.shape} (a Discrete observation space) "
                        f"cannot be unnormalized as OffPolicyAlgorithm._store_transition "
                        f"does with a VecNormalize (next_obs[i, :] needs a 2-d batch; SB3 "
                        f"raises IndexError): wrap the env so its observations are a Box"
                    )
                check_terminal(terminal, next_obs[i], ids[i], "")
                next_obs[i] = terminal
                next_obs[i] = vec_normalize.unnormalize_obs(next_obs[i, :])
    return original_obs, next_obs, original_reward, original_new


def replay_outputs(
    model: Any, observation: Any, last: Any, new_observation: Any, original_new: Any
) -> None:
    """Set what ``OffPolicyAlgorithm._store_transition`` leaves on the model.

    ``_last_obs = new_obs``; ``_last_original_obs`` is the original of it with ``VecNormalize``
    (``original_new``), else the observation the step acted on (SB3 assigns it ``_last_obs``
    before storing), as ``ReplayBuffer.add`` left it: ``DictReplayBuffer.add`` reshapes a
    Discrete key of the dict it is given to ``(n_envs, 1)`` in place, so for a dict it is read
    again after the step was stored.

    Args:
        model: The off-policy model (mutated: the two attributes).
        observation: The observation the step acted on, as given (and stored).
        last: ``observation`` as :func:`last_observation` kept it before it was stored (the
            model's ``_last_obs`` while the step was collected).
        new_observation: What ``env.step`` returned.
        original_new: ``vn.get_original_obs()`` of the step with ``VecNormalize``, else None.
    """
    if original_new is not None:
        model._last_original_obs = original_new
    elif type(observation) is dict:
        model._last_original_obs = last_observation(observation)
    else:
        model._last_original_obs = last
    model._last_obs = last_observation(new_observation)
