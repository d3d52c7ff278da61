"""Train one shared SB3 on-policy model on PettingZoo parallel envs whose agents die and join.

:class:`SharedRolloutCollector` steps ``n`` copies of a parallel env with one shared PPO/A2C
(parameter sharing) and fills the model's own ``RolloutBuffer`` through ``rlightning_sb3``'s
public helpers (:func:`rlightning_sb3.add_rollout_step`, :func:`rlightning_sb3.finish_rollout`):
SB3's rules (the time-limit bootstrap, GAE, callbacks, the logger) are SB3's, applied there.

What is stored is each agent's own trajectory, and nothing else: a dead agent, one that has not
joined yet, and one whose mask allows no action (it waits) have no row. The layout (see
``docs/pettingzoo.md``, "Training", and the private module ``_columns``): each buffer column is
a stream of agent-trajectory segments; ``episode_start`` is True where a segment begins inside
a column; an agent that terminates ends its segment with no bootstrap, one that is truncated
bootstraps ``gamma * V(final observation)`` as SB3 does for time limits, and where the rollout
cuts a trajectory the bootstrap is ``gamma * V(next observation)`` (the column's last value on a
column's last row). A RecurrentPPO's columns are assigned as its agents act (see
:class:`SharedRolloutCollector`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch as th
from stable_baselines3.common.on_policy_algorithm import OnPolicyAlgorithm

from rlightning import PolicyResponse, ResponseBatch
from rlightning.rules import check_flag
from rlightning_pettingzoo._columns import (
    Placed,
    Transition,
    pack,
    stack_agent_observations,
    stack_rows,
)
from rlightning_pettingzoo._lanes import RecurrentLanes
from rlightning_pettingzoo._sb3 import (
    adapter_for,
    refuse_unstarted,
    stack_named,
)
from rlightning_pettingzoo._stepping import _MAX_IDLE_ROUNDS, AgentStepper
from rlightning_sb3 import add_rollout_step, finish_rollout

__all__ = ["Segment", "SharedRolloutCollector"]


@dataclass(frozen=True)
class Segment:
    """One run of an agent's trajectory in one buffer column.

    Attributes:
        column: The buffer column (SB3's env index).
        start_row: The first row (SB3's step index).
        stop_row: One past the last row.
        env_index: The env copy (index into the collector's ``envs``).
        agent_id: The agent.
        env_steps: For each row, the copy's step counter when the agent acted there.
        end: How the segment ends: ``"terminated"`` (no bootstrap), ``"truncated"``
            (``gamma * V(final observation)``, SB3's time-limit bootstrap) or ``"cut"`` (the
            agent lives on; ``gamma * V(next observation)``).
    """

    column: int
    start_row: int
    stop_row: int
    env_index: int
    agent_id: Any
    env_steps: tuple[int, ...]
    end: str


class SharedRolloutCollector(AgentStepper):
    """Fill one shared on-policy model's ``RolloutBuffer`` from copies of a parallel env.

    Each call to :meth:`collect` is one rollout of ``OnPolicyAlgorithm.collect_rollouts``: it
    steps the copies until ``n_steps * n_envs`` agent-steps are taken (``model.n_steps`` and the
    model's ``n_envs``, the buffer's rows and columns), acting for every live agent of the
    stepped copies in one batched forward pass per round (copy order, then ``possible_agents``
    order: SB3's ``collect_rollouts`` over a VecEnv with one slot per agent would batch the
    same rows). Near a rollout's end only copies whose acting agents still fit are stepped
    (the others wait, untouched, for the next rollout); when none fits, one is stepped and the
    agent-steps that do not fit are dropped (:attr:`dropped`): acted and stepped, never stored.
    A copy whose agents are all gone is reset (``seeds`` at its first reset, then no seed).
    At the first :meth:`collect` of a training run that reset the model's env
    (:func:`rlightning_sb3.training_reset_run_id`: ``start_training(...,
    reset_num_timesteps=True)``) every copy is reset, as ``_setup_learn`` resets SB3's VecEnv
    (``docs/pettingzoo.md``, "A new training run"); a continuing run continues the episodes.

    Build the model with a VecEnv of ``n_envs`` slots of one agent's spaces (it sizes the
    buffer; it is never stepped here), call :func:`rlightning_sb3.start_training` first (its
    ``callback``, ``log_interval`` and ``progress_bar`` then act as in ``learn()``), and
    ``model.train()`` after each :meth:`collect`.

    A RecurrentPPO (sb3-contrib) keeps one LSTM state per (copy, agent), reset where the
    agent's trajectory starts (its first action, a join, after a reset) and where its run in a
    column starts below row 0; its columns are then assigned as the agents act (an agent keeps
    its column while it has room), so that every row the buffer flags ``episode_start`` (where
    SB3's GAE stops and sb3-contrib's training resets the LSTM) is a reset when it acted, and
    each row's ``lstm_states`` is the state its agent acted from (see ``docs/pettingzoo.md``).

    Args:
        model: A PPO, A2C, MaskablePPO (each row's mask is stored), RecurrentPPO or other
            ``OnPolicyAlgorithm``.
        env_fns: One function per env copy, each returning a PettingZoo ``ParallelEnv``.
        seeds: The seed of each copy's first reset (None: no seed).

    Raises:
        TypeError: ``model`` is not an on-policy SB3 model, or an env is not a
            ``ParallelEnv``.
        ValueError: ``env_fns`` is empty or ``seeds`` is not one per copy, or a possible
            agent observes channel-last images the model acts on but cannot store (a
            channel-first model without ``VecTransposeImage``).
    """

    def __init__(
        self,
        model: OnPolicyAlgorithm,
        env_fns: Sequence[Callable[[], Any]],
        *,
        seeds: Sequence[int | None] | None = None,
    ) -> None:
        if not isinstance(model, OnPolicyAlgorithm):
            raise TypeError(
                "SharedRolloutCollector needs an on-policy SB3 model (PPO, A2C, MaskablePPO), "
                f"got {type(model).__name__}"
            )
        self._recurrent = adapter_for(model).is_recurrent
        super().__init__(model, env_fns, seeds, "SharedRolloutCollector")
        # recurrent: each stored agent-step's column, chosen as it acts (_lanes)
        self._lanes = RecurrentLanes(int(model.rollout_buffer.n_envs))

    def collect(self, *, update_model: bool = True) -> list[Segment]:
        """Collect one full rollout into ``model.rollout_buffer`` and compute its advantages.

        Args:
            update_model: As in :func:`rlightning_sb3.add_rollout_step`: advance
                ``num_timesteps`` (by one per stored agent-step), record finished agent
                episodes for ``rollout/ep_rew_mean``, call the callback and dump the logger
                where ``learn()`` does (needs :func:`rlightning_sb3.start_training`); also
                records ``rollout/ep_rew_mean/<agent_id>`` (mean of the agent's last 100
                episode returns) before the dump.

        Returns:
            The buffer's segments, column by column, row by row. The buffer is filled
            (``reset`` first when full) and its ``returns`` and ``advantages`` computed; the
            envs are stepped.

        Raises:
            TypeError: ``update_model`` is not a bool (e.g. the string ``"no"``), before
                any step.
            ValueError: before any step, ``update_model`` and the model was not given
                :func:`rlightning_sb3.start_training`; an agent left without being terminated
                or truncated, was reported terminated or truncated but left in ``env.agents``,
                or has no observation; what the SB3 helpers and the adapter raise (spaces,
                masks).
            RuntimeError: no agent of any copy could act for many rounds in a row.
            rlightning_sb3.StopTraining: a callback's ``on_step`` returned False while the rows
                were added (the rows before it are in the buffer, as ``collect_rollouts``
                leaves them; the envs were stepped for the whole rollout): call
                :func:`rlightning_sb3.finish_training`.
        """
        model: Any = self.model
        update_model = check_flag(update_model, "update_model", "SharedRolloutCollector.collect")
        if update_model:  # before any step: add_rollout_step would refuse only at the end
            refuse_unstarted(model, "SharedRolloutCollector")
        self._start_run()  # a run that reset the model's env resets the copies (_stepper_base)
        buf = model.rollout_buffer
        n_rows, n_columns = int(buf.buffer_size), int(buf.n_envs)
        capacity = n_rows * n_columns
        streams: dict[tuple[int, Any], list[Transition]] = {}
        count, idle = 0, 0
        self.dropped = 0
        maskable = hasattr(buf, "action_masks")
        if self._recurrent:
            self._lanes.begin(n_rows)
        while count < capacity:
            plan = self._plan(capacity - count)
            keys = [(copy.index, agent) for copy in plan for agent in copy.acting]
            if not keys:
                idle += 1
                if idle > _MAX_IDLE_ROUNDS:
                    raise RuntimeError(
                        f"no agent of any env copy could act for {_MAX_IDLE_ROUNDS} rounds "
                        "(every live agent's mask allows no action)"
                    )
            else:
                idle = 0
            if not self._recurrent:
                rows = self._act(plan, keys)
                for copy in plan:
                    count += self._step(copy, rows, streams, maskable)
                continue
            kept = [(copy.index, a) for copy in plan for a in copy.acting[: copy.kept]]
            chosen = self._lanes.assign(kept, self._starting)
            starts = RecurrentLanes.starts(keys, chosen, self._starting)
            rows = self._act(plan, keys, starts)
            for copy in plan:
                count += self._step(copy, rows, streams, maskable)
            for key in kept:
                self._lanes.place(key, streams[key][-1])
        self._open.clear()  # the rollout cuts the trajectories still open
        if self._recurrent:
            placed = self._lanes.packed()
        else:
            order = sorted(streams, key=lambda s: (s[0], self._agent_rank(*s)))
            placed = pack([streams[s] for s in order], n_rows, n_columns)
        self._fill(placed, update_model)
        return _segments(placed, n_rows, n_columns)

    def _fill(self, placed: list[list[Placed]], update_model: bool) -> None:
        """Hand the rows to ``add_rollout_step``, then ``finish_rollout``."""
        _fill_rollout(self.model, placed, update_model, self.agent_returns)


def _fill_rollout(
    model: Any,
    placed: list[list[Placed]],
    update_model: bool,
    agent_returns: Mapping[Any, Sequence[float]],
) -> None:
    """Hand packed rows to ``add_rollout_step``, then ``finish_rollout``, for one model.

    ``agent_returns`` holds the agents whose ``rollout/ep_rew_mean/<agent_id>`` is recorded
    (with ``update_model``) before ``finish_rollout`` dumps the logger. A row's
    ``action_mask`` is handed over only to a ``MaskableRolloutBuffer``; a RecurrentPPO row's
    ``state`` and ``buffer_state`` are handed over as they are, and the last row's responses go
    to ``finish_rollout`` (each column's last values from its last agent's LSTM state).
    """
    buf = model.rollout_buffer
    maskable = hasattr(buf, "action_masks")
    recurrent = hasattr(buf, "hidden_states_pi")
    optional = (("action_mask",) if maskable else ()) + (
        ("state", "buffer_state") if recurrent else ()
    )
    n_columns = len(placed[0])
    env_ids = [f"column-{c}" for c in range(n_columns)]
    dones = np.zeros(n_columns, dtype=bool)
    new_observation: Any = None
    responses: Any = None
    trusted = not optional  # PPO/A2C: one stacked response per row (see _row_batch)
    for row in placed:
        if trusted:
            (observations, next_observations, rows, starts, reward_list, done_list, infos) = zip(
                *_row_items(row), strict=True
            )
            responses = _row_batch(env_ids, rows, starts)
        else:
            observations = tuple(p.transition.observation for p in row)
            next_observations = tuple(p.transition.next_observation for p in row)
            responses = [
                PolicyResponse(
                    env_ids[p.column],
                    action=p.transition.fields["action"],
                    buffer_action=p.transition.fields["buffer_action"],
                    value=th.as_tensor(p.transition.fields["value"]),
                    log_prob=th.as_tensor(p.transition.fields["log_prob"]),
                    episode_start=p.episode_start,
                    **{k: p.transition.fields[k] for k in optional},
                )
                for p in row
            ]
            reward_list = tuple(p.transition.reward for p in row)
            done_list = tuple(p.done for p in row)
            infos = tuple(p.info for p in row)
        try:
            observation = stack_agent_observations(observations)
            new_observation = stack_agent_observations(next_observations)
        except ValueError:  # a misshapen (final) observation: name its agent
            cells = [p.transition for p in row]
            stack_named(model, cells, "observation", stack_agent_observations)
            stack_named(model, cells, "next_observation", stack_agent_observations)
            raise
        rewards = np.array(reward_list, dtype=np.float32)
        dones = np.array(done_list, dtype=bool)
        add_rollout_step(
            model,
            observation,
            responses,
            rewards,
            dones,
            list(infos),
            env_ids=env_ids,
            update_model=update_model,
            new_observation=new_observation,
        )
    last_dones = np.asarray([p.transition.end is not None for p in placed[-1]], dtype=bool)
    if update_model:
        for agent, returns in agent_returns.items():
            if returns:
                model.logger.record(f"rollout/ep_rew_mean/{agent}", float(np.mean(returns)))
    finish_rollout(
        model,
        new_observation,
        last_dones,
        env_ids=env_ids,
        update_model=update_model,
        responses=responses if recurrent else None,
    )


def _row_items(row: list[Placed]) -> list[tuple[Any, ...]]:
    """Per cell of a row: observation, next observation, fields, start, reward, done, info."""
    return [
        (
            (t := p.transition).observation,
            t.next_observation,
            t.fields,
            p.episode_start,
            t.reward,
            p.done,
            p.info,
        )
        for p in row
    ]


def _row_batch(
    env_ids: list[str], rows: Sequence[dict[str, Any]], starts: Sequence[bool]
) -> ResponseBatch[PolicyResponse]:
    """One buffer row's responses as the trusted stacked batch ``SB3PolicyAdapter.act`` makes.

    For a PPO/A2C row (no mask, no LSTM state): the fields ``act`` gives, each stacked over the
    row's cells in column order, as ``add_rollout_step`` stacks per-env responses (``np.stack``
    of the actions, ``torch.stack`` of the 0-d values and log-probabilities; ``stack_rows`` and
    ``torch.from_numpy`` of the stacked scalars give the same arrays and tensors). ``env_ids``
    are unique and every field has one row per id (the batch's ``is_trusted`` promise): the
    collector built both, so ``add_rollout_step`` reads the stacked fields without splitting.
    """
    actions, buffer_actions, values, log_probs = zip(
        *[(f["action"], f["buffer_action"], f["value"], f["log_prob"]) for f in rows],
        strict=True,
    )
    return ResponseBatch.trusted_from_fields(
        PolicyResponse,
        {
            "env_id": None,
            "env_ids": env_ids,
            "action": stack_rows(actions),
            "buffer_action": stack_rows(buffer_actions),
            "value": th.from_numpy(stack_rows(values)),
            "log_prob": th.from_numpy(stack_rows(log_probs)),
            "episode_start": np.array(starts, dtype=bool),
        },
    )


def _segments(placed: list[list[Placed]], n_rows: int, n_columns: int) -> list[Segment]:
    """The segments of a packed rollout, column by column."""
    out: list[Segment] = []
    for column in range(n_columns):
        run: list[Placed] = []
        for row in range(n_rows):
            p = placed[row][column]
            if run and p.episode_start:
                out.append(_segment(run, n_rows))
                run = []
            run.append(p)
        out.append(_segment(run, n_rows))
    return out


def _segment(run: list[Placed], n_rows: int) -> Segment:
    last = run[-1]
    t = last.transition
    return Segment(
        column=last.column,
        start_row=run[0].row,
        stop_row=last.row + 1,
        env_index=t.env_index,
        agent_id=t.agent_id,
        env_steps=tuple(p.transition.env_step for p in run),
        end="cut" if t.end is None else t.end,
    )
