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

from rlightning.batch import reduce_in_band

__all__ = ["OnePickle", "Placed", "Transition", "pack", "stack_agent_observations", "stack_rows"]


class OnePickle:
    """Mixin: an instance pickles as one standard pickle (:func:`rlightning.batch.reduce_in_band`).

    For the recordings a Ray PettingZoo runner returns from an actor (``RecordedRollout``,
    ``RecordedReplay``): Ray's cloudpickle would call a Python hook for each of the rows' small
    objects; the standard pickler does not (simple_spread, 2 copies x 64 steps, 111 kB: returned
    from an actor 14.5 ms against 21.8 ms). Every value loads as from any pickle; numpy arrays
    under 64 KiB load writable with their own memory, larger ones read-only from Ray's object
    store; a row the standard pickler cannot save falls back to the caller's pickler.
    """

    __slots__ = ()

    def __reduce_ex__(self, protocol: Any) -> tuple[Any, ...]:
        """``reduce_in_band`` of the instance dict (a copy; nothing is mutated)."""
        return reduce_in_band(self, self.__dict__.copy(), protocol)


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
    total = sum(map(len, streams))
    if total != n_rows * n_columns:
        raise ValueError(
            f"the streams hold {total} transitions, the buffer {n_rows} x {n_columns} "
            "cells (internal error: the collector must fill every cell)"
        )
    # One pass over the streams in slot order: the k-th transition goes to column k // n_rows,
    # row k % n_rows. A cell continues the cell above when the same slot's previous transition
    # is there, still open and not cut (then its episode_start is the transition's own).
    rows: list[list[Placed]] = [[] for _ in range(n_rows)]
    k = 0
    previous: Transition | None = None  # the transition of the cell above (None at row 0)
    previous_cut = False
    last_row = n_rows - 1
    for stream in streams:
        last_k = len(stream) - 1
        for j, transition in enumerate(stream):
            cut = (j == last_k or transition.cut) and transition.end is None
            column, row = divmod(k, n_rows)
            start = transition.episode_start
            if row > 0 and not start:
                assert previous is not None
                start = not (
                    previous.env_index == transition.env_index
                    and previous.agent_id == transition.agent_id
                    and previous.end is None
                    and not previous_cut
                )
            done = transition.end is not None or (cut and row != last_row)
            info: dict[str, Any] = {}
            if done:
                info["terminal_observation"] = transition.next_observation
                info["TimeLimit.truncated"] = transition.end != "terminated"
            if transition.episode is not None:
                info["episode"] = dict(transition.episode)
            rows[row].append(Placed(transition, column, row, start, done, info, cut))
            previous, previous_cut = transition, cut
            k += 1
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


def _same_plain_arrays(rows: Sequence[Any]) -> bool:
    """Every row a plain ``np.ndarray`` (no subclass), one native dtype (no objects), one shape."""
    first = rows[0]
    if type(first) is not np.ndarray:
        return False
    dtype, shape = first.dtype, first.shape
    if dtype.hasobject or not dtype.isnative:  # np.stack returns native byte order
        return False
    for row in rows:
        if type(row) is not np.ndarray or row.dtype != dtype or row.shape != shape:
            return False
    if len(shape) > 1:  # np.stack keeps a Fortran-ordered memory layout, np.array does not
        return all(row.flags.c_contiguous for row in rows)
    return True


def _same_scalars(rows: Sequence[Any]) -> bool:
    """Every row a numpy scalar of one type (``np.float32``, ``np.int64``, ...; no objects)."""
    kind = type(rows[0])
    if not issubclass(kind, np.generic) or kind is np.object_:
        return False
    return all(type(row) is kind for row in rows)


def stack_rows(rows: Sequence[Any]) -> np.ndarray:
    """``np.stack(rows)``, the same array, at a third of its cost on the per-step path.

    Rows that are all plain ``np.ndarray`` of one dtype and shape, or all numpy scalars of one
    type (what SB3's batched outputs and a PettingZoo env's observations are), are stacked by
    ``np.array(rows)``: the same values, dtype (the rows' own), shape ``(len(rows),
    *row_shape)`` and C order as ``np.stack``, without its per-row ``expand_dims``. Anything
    else (subclasses, mixed dtypes or shapes, Python numbers, object arrays, no rows) goes to
    ``np.stack`` itself, with its result and its errors. ``tests/pettingzoo/test_columns.py``
    compares the two byte for byte.

    Args:
        rows: The rows, a sequence (list or tuple).

    Returns:
        A new array of shape ``(len(rows), *row_shape)``.

    Raises:
        ValueError: what ``np.stack`` raises (no rows, shapes that differ).
    """
    if rows and (_same_plain_arrays(rows) or _same_scalars(rows)):
        return np.array(rows)
    return np.stack(rows)


def stack_agent_observations(observations: Sequence[Any]) -> Any:
    """``rlightning_pettingzoo._sb3.stack_observations``, through :func:`stack_rows`.

    The same batch ``(n_agents, *obs_shape)`` (a dict of batches, key by key, for Dict
    observations) as ``np.stack([np.asarray(o) for o in observations])``: plain arrays of one
    dtype and shape (what ``owned`` keeps) are stacked at once; anything else is read with
    ``np.asarray`` first, as there.
    """
    first = observations[0]
    if isinstance(first, dict):
        return {key: _stack_read([o[key] for o in observations]) for key in first}
    return _stack_read(observations)


def _stack_read(values: Sequence[Any]) -> np.ndarray:
    """``np.stack([np.asarray(v) for v in values])`` (``np.asarray`` keeps plain arrays)."""
    if _same_plain_arrays(values):
        return np.array(values)
    return np.stack([np.asarray(v) for v in values])
