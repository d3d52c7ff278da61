"""How agent trajectories are laid out in the fixed columns of an SB3 rollout buffer.

SB3's ``RolloutBuffer`` has ``n_envs`` columns of ``n_steps`` rows, and the number of live agents
varies. Each column here is a stream of agent-trajectory *segments*: the transitions of one
(env copy, agent) *slot* in one rollout, in time order, are one stream; the streams, in slot
order, are read into the columns column by column (column 0's rows 0..n-1, then column 1's, ...).
A segment ends where its agent's episode ends (terminated: no bootstrap; truncated: SB3's
time-limit bootstrap) or where the rollout cuts the agent's trajectory (the agent lives on: the
bootstrap is ``gamma * V(its next observation)``, from the column's last value when the cut falls
on a column's last row, from SB3's time-limit bootstrap otherwise; both give SB3's GAE the same
advantage and return). A new segment in a column's row ``r > 0`` has ``episode_start`` True, so
SB3's GAE never runs from one segment into another. Nothing here knows SB3: the module only
decides rows, flags and infos, which ``collector`` hands to ``rlightning_sb3``'s helpers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Placed", "Transition", "pack"]


@dataclass
class Transition:
    """One agent's step, from the observation it acted on to the one it acts on next.

    Attributes:
        env_index: The env copy.
        agent_id: The agent.
        env_step: The copy's step counter when the agent acted (counts every ``env.step`` of
            the copy since the collector began).
        observation: What the agent acted on.
        fields: The policy's row: ``action``, ``buffer_action``, ``value``, ``log_prob`` (and
            ``action_mask`` for a MaskablePPO).
        episode_start: The agent's episode (or life: a joining agent) starts at this step.
        reward: The rewards the agent got from this step up to its next action (summed while it
            waits).
        end: ``"terminated"``, ``"truncated"`` or None (the agent lives on).
        next_observation: The observation after the step: the final one where it ended,
            otherwise the one it acts on next.
        episode: Monitor's ``{"r", "l", "t"}`` of the agent's episode where it ended here.
        cut: The collector cuts the agent's trajectory after this transition (a recurrent
            collector's agent changed columns mid-column; see ``collector``): the segment ends
            here as where the rollout cuts it.
    """

    env_index: int
    agent_id: Any
    env_step: int
    observation: Any
    fields: dict[str, Any]
    episode_start: bool
    reward: float = 0.0
    end: str | None = None
    next_observation: Any = None
    episode: dict[str, float] | None = field(default=None)
    cut: bool = False


@dataclass
class Placed:
    """A transition in its buffer cell, with what SB3's helpers are given for it.

    Attributes:
        transition: The transition.
        column: The buffer column (SB3's env index).
        row: The buffer row (SB3's step index).
        episode_start: What the buffer stores as ``episode_start``.
        done: The ``dones`` entry given to ``add_rollout_step``: the segment ends here, except
            a cut on the column's last row (bootstrapped by ``finish_rollout``'s last values).
        info: The info given to ``add_rollout_step``: ``terminal_observation`` and
            ``TimeLimit.truncated`` where ``done`` (True for a truncation and for a cut), and
            ``episode`` where the agent's episode ended.
        cut: The rollout cuts the agent's trajectory after this transition (it lives on).
    """

    transition: Transition
    column: int
    row: int
    episode_start: bool
    done: bool
    info: dict[str, Any]
    cut: bool


def pack(
    streams: Sequence[Sequence[Transition]], n_rows: int, n_columns: int
) -> list[list[Placed]]:
    """Lay the slots' streams into ``n_columns`` columns of ``n_rows`` rows.

    Args:
        streams: One stream per slot, in slot order; each in time order. Together they hold
            exactly ``n_rows * n_columns`` transitions.
        n_rows: The buffer's ``buffer_size`` (``n_steps``).
        n_columns: The buffer's ``n_envs``.

    Returns:
        ``rows[r][c]``: the transition of column ``c``, row ``r``.

    Raises:
        ValueError: the streams do not hold ``n_rows * n_columns`` transitions.
    """
    flat: list[tuple[Transition, bool]] = []
    for stream in streams:
        for k, transition in enumerate(stream):
            last = k == len(stream) - 1 or transition.cut
            flat.append((transition, last and transition.end is None))
    if len(flat) != n_rows * n_columns:
        raise ValueError(
            f"the streams hold {len(flat)} transitions, the buffer {n_rows} x {n_columns} "
            "cells (internal error: the collector must fill every cell)"
        )
    rows: list[list[Placed]] = [[] for _ in range(n_rows)]
    for k, (transition, cut) in enumerate(flat):
        column, row = divmod(k, n_rows)
        start = transition.episode_start
        if row > 0:
            previous, previous_cut = flat[k - 1]
            continues = (
                previous.env_index == transition.env_index
                and previous.agent_id == transition.agent_id
                and previous.end is None
                and not previous_cut
            )
            start = start or not continues
        last_row = row == n_rows - 1
        done = transition.end is not None or (cut and not last_row)
        info: dict[str, Any] = {}
        if done:
            info["terminal_observation"] = transition.next_observation
            info["TimeLimit.truncated"] = transition.end != "terminated"
        if transition.episode is not None:
            info["episode"] = dict(transition.episode)
        rows[row].append(Placed(transition, column, row, start, done, info, cut))
    return rows


def owned(observation: Any) -> Any:
    """A copy of one agent's observation that the env can no longer change.

    Envs may return (or keep returning) the same array objects and write the next step's values
    into them in place; a transition keeps its observation until the rollout is filled, so it
    keeps a copy, as SB3's ``DummyVecEnv`` copies each observation into its own buffer when the
    env returns it. Arrays are copied; dicts and tuples (``Dict``/``Tuple`` spaces) member by
    member; other values (Python ints and floats) are immutable and kept.
    """
    if isinstance(observation, np.ndarray):
        return observation.copy()
    if isinstance(observation, dict):
        return {key: owned(value) for key, value in observation.items()}
    if isinstance(observation, tuple):
        return tuple(owned(value) for value in observation)
    return observation
