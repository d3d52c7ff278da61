"""One action-noise process per (copy, agent) slot, for the replay collectors (TD3, DDPG, SAC).

SB3's ``OffPolicyAlgorithm._setup_learn`` wraps ``model.action_noise`` in
``VectorizedActionNoise(noise, env.num_envs)`` (one deep copy of the base noise per VecEnv
column, reset), ``_sample_action`` adds ``action_noise()`` (every column's process drawn, in
column order, from numpy's global RNG) to the scaled action at every step, the warm-up's
uniform actions included, and ``collect_rollouts`` calls ``action_noise.reset(indices=[idx])``
right after the step that ended column ``idx``'s episode (stable_baselines3 2.x,
``common/off_policy_algorithm.py``, ``common/noise.py``).

Here a replay-buffer column holds any agent's transitions, so the processes are not the
columns': :class:`SlotNoise` keeps one process per (copy, agent) slot of ``possible_agents``
(a ``VectorizedActionNoise`` of the base noise, its processes bound, in slot order -- copy
order, then ``possible_agents`` order -- to the slots' row ids in the model's adapter). A slot's
process is drawn when its agent acts (the acting slots of one forward pass in slot order:
``SB3PolicyAdapter.act`` draws ``noises[j]()`` for a subset, ``noise()`` for all) and reset
right after the step that ends its agent's episode (terminated or truncated), so a re-joining
agent starts fresh. Every process is reset when the model begins a new training run
(:meth:`SlotNoise.start_run`, before a rollout's first draw: ``_setup_learn``'s
``action_noise.reset()`` at every ``learn()``, whatever ``reset_num_timesteps``; the run is
:func:`rlightning_sb3.training_run_id`, or the learner's ``ActingState.run_id`` for a replica).
For an env whose agents all stay, over the VecEnv of one column per slot, that is SB3's
``VectorizedActionNoise``, draw for draw.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from stable_baselines3.common.noise import ActionNoise, VectorizedActionNoise

from rlightning_pettingzoo._envs import describe_env
from rlightning_pettingzoo._sb3 import _row_ids
from rlightning_sb3 import bind_env_ids

__all__ = ["SlotNoise", "base_noise", "slot_noise"]


def base_noise(noise: ActionNoise | None) -> ActionNoise | None:
    """The noise each process copies: a ``VectorizedActionNoise``'s ``base_noise``, else itself.

    SB3's ``_setup_learn`` wraps a plain ``model.action_noise`` in ``VectorizedActionNoise(noise,
    n_envs)`` (one deep copy of it per env); unwrapped here, whether or not the model was
    started. Nothing is copied or mutated.
    """
    return noise.base_noise if isinstance(noise, VectorizedActionNoise) else noise


class SlotNoise:
    """The action-noise processes of one model's slots (see the module docstring).

    Args:
        model: The off-policy model; its ``action_noise`` (or, once SB3 vectorized it, its
            ``base_noise``) is the base noise each process deep-copies.
        slots: The model's ``(copy, agent)`` slots, in slot order.
        row_prefix: The collector's row-id prefix in the model's adapter (``_sb3.sb3_rows``).
        envs: The env copies (for error messages).

    Raises:
        ValueError: ``model`` has no ``action_noise`` (:func:`slot_noise` returns None then).
    """

    def __init__(
        self, model: Any, slots: Sequence[tuple[int, Any]], row_prefix: str, envs: Sequence[Any]
    ) -> None:
        base = base_noise(model.action_noise)
        if base is None:
            raise ValueError(
                f"{type(model).__name__} has no action_noise: build slot noise with slot_noise()"
            )
        self.model = model
        self.slots = list(slots)
        self._index = {slot: k for k, slot in enumerate(self.slots)}
        self._envs = envs
        #: The processes, ``noises[k]`` slot ``slots[k]``'s (each reset once built).
        self.noise = VectorizedActionNoise(base, len(self.slots))
        bind_env_ids(self.noise, _row_ids(self.slots, row_prefix))
        #: The training run the processes were last reset for (:meth:`start_run`).
        self.run_id: int | None = None

    def start_run(self, run_id: int | None) -> bool:
        """Reset every process when ``run_id`` is not the run they were last reset for.

        As ``BaseAlgorithm._setup_learn``'s ``action_noise.reset()`` at every ``learn()``
        (stable_baselines3 2.x ``common/base_class.py``; whatever ``reset_num_timesteps``): a
        new :func:`rlightning_sb3.start_training` begins with every Ornstein-Uhlenbeck process
        at its ``initial_noise``. Call it before a rollout's first draw. The first run seen
        resets too (a no-op: the processes are built reset).

        Args:
            run_id: The model's run (:func:`rlightning_sb3.training_run_id`, or the learner's
                ``ActingState.run_id``); None (no run known) changes nothing.

        Returns:
            Whether the processes were reset (``noise`` and :attr:`run_id` are mutated then).
        """
        if run_id is None or run_id == self.run_id:
            return False
        self.run_id = run_id
        self.noise.reset()
        return True

    @contextmanager
    def drawing(self, keys: Sequence[tuple[int, Any]]) -> Iterator[None]:
        """Within: ``model.action_noise`` is the slots' processes (the adapter draws from them).

        Restores the model's own noise on exit (``learn()`` and ``add_replay_step``'s
        per-column resets use that one; nothing here draws from it).

        Raises:
            ValueError: a key is not a slot (an agent outside its copy's ``possible_agents``).
        """
        unknown = [key for key in keys if key not in self._index]
        if unknown:
            i, agent = unknown[0]
            raise ValueError(
                f"agent {agent!r} of {describe_env(self._envs[i])} (copy {i}) is not in "
                "possible_agents: the action noise keeps one process per possible agent of each "
                "copy (PettingZoo: possible_agents lists every agent that may appear)"
            )
        model = self.model
        saved = model.action_noise
        model.action_noise = self.noise
        try:
            yield
        finally:
            model.action_noise = saved

    def ended(self, slots: Sequence[tuple[int, Any]]) -> None:
        """Reset the processes of ``slots`` whose agents' episodes just ended.

        As ``collect_rollouts``' ``action_noise.reset(indices=[idx])`` after the step that
        ended column ``idx``'s episode (an Ornstein-Uhlenbeck process back to its
        ``initial_noise``; a Gaussian one has no state). Unknown slots are skipped.
        """
        indices = [self._index[s] for s in slots if s in self._index]
        if indices:
            self.noise.reset(indices=indices)


def slot_noise(
    model: Any,
    envs: Sequence[Any],
    row_prefix: str,
    member: Any = None,
) -> SlotNoise | None:
    """The :class:`SlotNoise` of ``model`` over ``envs``' possible agents, or None without noise.

    Args:
        model: The off-policy model.
        envs: The env copies.
        row_prefix: The collector's row-id prefix for the model's adapter.
        member: ``member(agent) -> bool``: the agents the model acts for (a group); None: all.
    """
    if getattr(model, "action_noise", None) is None:
        return None
    slots = [
        (i, agent)
        for i, env in enumerate(envs)
        for agent in list(getattr(env, "possible_agents", None) or [])
        if member is None or member(agent)
    ]
    return SlotNoise(model, slots, row_prefix, envs) if slots else None
