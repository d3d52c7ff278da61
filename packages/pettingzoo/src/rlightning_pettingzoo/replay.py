"""Train one shared SB3 off-policy model (DQN, SAC, TD3) on PettingZoo agents that die and join.

:class:`SharedReplayCollector` steps ``n`` copies of a parallel env with one shared off-policy
model and fills the model's own ``ReplayBuffer`` through :func:`rlightning_sb3.add_replay_step`
(SB3's ``_store_transition`` and the bookkeeping of ``collect_rollouts``: ``num_timesteps``,
DQN's exploration rate and target updates, ``train_freq``, callbacks, the logger). A replay
buffer's cells are independent transitions, so the layout is simpler than the rollout
collector's: each agent's transition (its observation, action, the rewards up to its next
action, and the observation it acts on next, or its final one) is stored once it is complete, in
rows of the buffer's ``n_envs`` cells; nothing is stored for a dead, not-yet-joined or waiting
agent. An agent that terminates is ``done``; one that is truncated is ``done`` with
``TimeLimit.truncated``, which SB3's buffer (``handle_timeout_termination``) does not treat as
terminal.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from stable_baselines3.common.noise import VectorizedActionNoise
from stable_baselines3.common.off_policy_algorithm import OffPolicyAlgorithm

from rlightning import PolicyResponse
from rlightning_pettingzoo._columns import Transition
from rlightning_pettingzoo._noise import slot_noise
from rlightning_pettingzoo._sb3 import (
    adapter_for,
    refuse_episodic_columns,
    refuse_sequence_buffer,
    refuse_unstarted,
    stack_named,
    stack_observations,
)
from rlightning_pettingzoo._stepping import _MAX_IDLE_ROUNDS, AgentStepper
from rlightning_sb3 import add_replay_step, training_run_id

__all__ = ["SharedReplayCollector"]


class SharedReplayCollector(AgentStepper):
    """Fill one shared off-policy model's ``ReplayBuffer`` from copies of a parallel env.

    Each :meth:`collect` is one ``OffPolicyAlgorithm.collect_rollouts``: rounds of one batched
    forward pass for every acting agent of every copy (copy order, then ``possible_agents``
    order: the rows SB3 batches over a VecEnv with one slot per agent, with the same warm-up,
    epsilon and noise draws), each followed by one ``step`` of every copy; an agent's
    transition is complete when it acts again or ends, and complete transitions are added, in
    rows of ``n_envs``, with :func:`rlightning_sb3.add_replay_step` before the next round acts
    (as SB3 stores a step before sampling the next). It returns when a row ends a rollout of
    ``model.train_freq``; then train as ``learn()`` does (see ``docs/pettingzoo.md``). Complete
    transitions that do not fill a row wait for the next rows (off-policy: the policy that
    acted does not matter). A copy whose agents are all gone is reset.

    A model's ``action_noise`` (TD3, DDPG, SAC) gets one process per (copy, agent) slot of
    ``possible_agents`` (:mod:`rlightning_pettingzoo._noise`): drawn when the agent acts, reset
    after the step that ends its episode; for agents that all stay these are the draws of
    SB3's ``VectorizedActionNoise`` over one column per agent (``_setup_learn``,
    ``_sample_action``, ``collect_rollouts``' ``action_noise.reset(indices=[idx])``). The
    processes are the collector's: ``model.action_noise`` is theirs only while the model acts
    here; every process is reset when the model begins a new training run (a new
    :func:`rlightning_sb3.start_training`, or ``learn()``: :func:`rlightning_sb3.training_run_id`
    changed since the last :meth:`collect`), as ``_setup_learn`` resets SB3's at every
    ``learn()``, whatever ``reset_num_timesteps``. The envs are the collector's too: a new run
    that reset the model's env (:func:`rlightning_sb3.training_reset_run_id`: a
    ``start_training`` with ``reset_num_timesteps``) resets every copy at its first
    :meth:`collect`, as ``_setup_learn`` resets SB3's VecEnv (open transitions and episode
    returns dropped, complete transitions kept for the next rows); a continuing run continues
    them where the last rollout left them.

    Build the model with a VecEnv of ``n_envs`` slots of one agent's spaces (it sizes the
    buffer; never stepped here) and call :func:`rlightning_sb3.start_training` first.

    Args:
        model: A DQN, SAC, TD3 or other ``OffPolicyAlgorithm``.
        env_fns: One function per env copy, each returning a PettingZoo ``ParallelEnv``.
        seeds: The seed of each copy's first reset (None: no seed).

    Raises:
        TypeError: ``model`` is not an off-policy SB3 model, or an env is not a
            ``ParallelEnv``.
        ValueError: the buffer has ``optimize_memory_usage`` (it reads a cell's next
            observation from the next row, which here holds another transition), is an
            ``NStepReplayBuffer`` or ``HerReplayBuffer`` (``_sb3.refuse_sequence_buffer``),
            ``train_freq`` counts episodes and ``n_envs > 1`` (SB3's one-env rule,
            ``_sb3.refuse_episodic_columns``), ``env_fns`` is empty or ``seeds`` is not one
            per copy, or a possible agent observes channel-last images the model acts on but
            cannot store (a channel-first model without ``VecTransposeImage``).
    """

    def __init__(
        self,
        model: OffPolicyAlgorithm,
        env_fns: Sequence[Callable[[], Any]],
        *,
        seeds: Sequence[int | None] | None = None,
    ) -> None:
        if not isinstance(model, OffPolicyAlgorithm):
            raise TypeError(
                "SharedReplayCollector needs an off-policy SB3 model (DQN, SAC, TD3), "
                f"got {type(model).__name__}"
            )
        refuse_sequence_buffer(model, "SharedReplayCollector")
        refuse_episodic_columns(model, "SharedReplayCollector")
        adapter_for(model)
        super().__init__(model, env_fns, seeds, "SharedReplayCollector")
        self._noise = slot_noise(model, self._envs, self._row_prefix)
        self._ready: list[Transition] = []
        self._ended: list[Transition] = []

    def collect(self) -> int:
        """Collect one rollout of ``model.train_freq`` into ``model.replay_buffer``.

        Returns:
            The agent-steps stored (``n_envs`` per row). The buffer, the model's counters
            (``num_timesteps`` one per stored agent-step, exploration rate, target network,
            episode counts) and the envs are mutated; the callback and logger are called
            where ``collect_rollouts`` calls them.

        Raises:
            ValueError: before any step, ``start_training`` was not called; an agent left
                without being terminated or truncated, was reported terminated or truncated
                but left in ``env.agents``, or has no observation; with ``action_noise``, an
                acting agent is not in its copy's ``possible_agents`` (it has no noise
                process); what :func:`rlightning_sb3.add_replay_step` and the adapter raise
                (spaces, masks).
            RuntimeError: no agent of any copy could act for many rounds in a row.
            rlightning_sb3.StopTraining: a callback stopped training (before any step when
                it stopped an earlier rollout).
        """
        model: Any = self.model
        refuse_unstarted(model, "SharedReplayCollector")  # before any step
        if self._noise is not None:  # a new run: _setup_learn's action_noise.reset()
            self._noise.start_run(self._noise_run(model))
        self._start_run()  # a run that reset the model's env resets the copies (_stepper_base)
        n_columns = int(model.replay_buffer.n_envs)
        stored, idle = 0, 0
        while True:
            plan = self._plan(sys.maxsize)
            complete = self._ended  # ended at the last step
            for copy in plan:  # acting again: their open transitions are complete
                for agent in copy.acting:
                    open_ = self._open.pop((copy.index, agent), None)
                    if open_ is not None:
                        complete.append(open_)
            complete.sort(key=lambda t: (t.env_index, self._agent_rank(t.env_index, t.agent_id)))
            self._ready.extend(complete)
            self._ended = []
            while len(self._ready) >= n_columns:
                row, self._ready = self._ready[:n_columns], self._ready[n_columns:]
                stored += n_columns
                if self._add(row):
                    return stored
            keys = [(copy.index, agent) for copy in plan for agent in copy.acting]
            idle = 0 if keys else idle + 1
            if idle > _MAX_IDLE_ROUNDS:
                raise RuntimeError(
                    f"no agent of any env copy could act for {_MAX_IDLE_ROUNDS} rounds "
                    "(every live agent's mask allows no action)"
                )
            if self._noise is None:
                rows = self._act(plan, keys)
            else:
                with self._noise.drawing(keys):  # one process per slot
                    rows = self._act(plan, keys)
            for copy in plan:
                self._step(copy, rows, {}, False, self._ended)
            if self._noise is not None:  # after the step that ended them (collect_rollouts)
                self._noise.ended([(t.env_index, t.agent_id) for t in self._ended])

    @property
    def noise_processes(self) -> VectorizedActionNoise | None:
        """The per-slot action-noise processes, or None for a model without ``action_noise``.

        ``noise_processes.noises[k]`` is slot ``k``'s process, the slots in copy order, then
        ``possible_agents`` order (an Ornstein-Uhlenbeck process's state is its
        ``noise_prev``, shape the action's). The object the collector draws from: read it, do
        not draw from it or reset it (that changes the next rollout's noise).
        """
        return None if self._noise is None else self._noise.noise

    def _noise_run(self, model: Any) -> int | None:
        """The run that resets the noise processes: the model's own (a recorder: its learner's).

        Returns:
            :func:`rlightning_sb3.training_run_id` of ``model``, or None (no run).
        """
        return training_run_id(model)

    def _add(self, row: list[Transition]) -> bool:
        """One row of complete transitions, through ``add_replay_step``."""
        return _add_replay_row(self.model, row)


def _add_replay_row(model: Any, row: list[Transition]) -> bool:
    """One row of complete transitions into ``model``'s replay buffer (``add_replay_step``).

    Returns what :func:`rlightning_sb3.add_replay_step` returns: True where the row ends a
    rollout of ``model.train_freq``.
    """
    env_ids = [f"column-{c}" for c in range(len(row))]
    infos: list[dict[str, Any]] = []
    for t in row:
        info: dict[str, Any] = {}
        if t.end is not None:
            info["terminal_observation"] = t.next_observation
            info["TimeLimit.truncated"] = t.end == "truncated"
        if t.episode is not None:
            info["episode"] = dict(t.episode)
        infos.append(info)
    responses = [
        PolicyResponse(
            env_ids[c], action=t.fields["action"], buffer_action=t.fields["buffer_action"]
        )
        for c, t in enumerate(row)
    ]
    return add_replay_step(
        model,
        stack_named(model, row, "observation", stack_observations),
        responses,
        stack_named(model, row, "next_observation", stack_observations),
        np.asarray([t.reward for t in row], dtype=np.float32),
        np.asarray([t.end is not None for t in row], dtype=bool),
        infos,
        env_ids=env_ids,
    )
