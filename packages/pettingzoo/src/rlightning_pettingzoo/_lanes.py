"""A recurrent model's buffer columns ("lanes"), assigned as its agents act.

For a feed-forward model the collectors lay each (copy, agent) slot's stream into the columns
afterwards (``_columns.pack`` in slot order). A recurrent model (sb3-contrib's RecurrentPPO)
needs more: every row the buffer flags ``episode_start`` (where SB3's GAE stops and
sb3-contrib's training resets the LSTM, ``RecurrentRolloutBuffer`` / ``create_sequencers``) must
be a reset of the LSTM when the agent acted there, and the rows of one run in a column must be
consecutive LSTM steps of one agent. Both the parallel collector
(:class:`~rlightning_pettingzoo.SharedRolloutCollector`) and the turn-based one
(:class:`~rlightning_pettingzoo.AECRolloutCollector`) therefore decide each stored step's
column, and whether its LSTM is reset, *before* the forward pass, with :class:`RecurrentLanes`.

The rule (``docs/pettingzoo.md``, "Recurrent: RecurrentPPO"): an agent keeps its column while
the column has room; otherwise it takes the lowest column with room whose agent has ended (or
that has none), else the lowest with room (whose agent, cut there, moves on). A step's
``episode_start`` is True where the agent's episode starts and where it begins a run in a
column below row 0; at row 0 a continuing agent keeps its state (sb3-contrib starts the
column's first sequence from the stored state). Nothing here knows SB3.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rlightning_pettingzoo._columns import Placed, Transition, pack

__all__ = ["RecurrentLanes"]

Slot = tuple[int, Any]


class RecurrentLanes:
    """Which buffer column each (copy, agent) slot's stored steps go to, across rollouts.

    Kept by a collector for its whole life (an agent keeps its column from one rollout to the
    next, so its LSTM state carries over at row 0); :meth:`begin` starts each rollout.

    Args:
        n_columns: The buffer's columns (``rollout_buffer.n_envs``).
    """

    def __init__(self, n_columns: int) -> None:
        self._owner: list[Slot | None] = [None] * n_columns  # each column's current slot
        self._lane_of: dict[Slot, int] = {}  # each slot's column
        self._n_rows = 0
        self._columns: list[list[Transition]] = [[] for _ in range(n_columns)]
        self._fills = [0] * n_columns
        self._chosen: dict[Slot, tuple[int, bool]] = {}

    def begin(self, n_rows: int) -> None:
        """Start a rollout of ``n_rows`` rows per column: every column empty.

        Args:
            n_rows: The buffer's ``buffer_size`` (``n_steps``).

        Returns:
            None; the per-rollout columns and fills are reset (the owners are kept).
        """
        self._n_rows = n_rows
        self._columns = [[] for _ in self._owner]
        self._fills = [0] * len(self._owner)
        self._chosen = {}

    def assign(self, keys: Sequence[Slot], starting: Sequence[set[Any]]) -> dict[Slot, bool]:
        """Give each stored step of a forward pass its column; whether its LSTM is reset.

        Args:
            keys: The (copy, agent) slots stored this pass, in batch order (each once).
            starting: Per copy, the agents whose episode starts at their next step (the
                collectors' ``_starting``; read, not changed).

        Returns:
            ``{slot: episode_start}``: the reset to act with and the flag the buffer stores.
            The columns chosen are kept for :meth:`place`; the fills are advanced.

        Raises:
            RuntimeError: no column has room (internal: the collectors store at most
                ``n_rows * n_columns`` steps per rollout).
        """
        taken: set[int] = set()  # columns given to another slot this pass
        fills, n_rows, owner = self._fills, self._n_rows, self._owner
        out: dict[Slot, bool] = {}
        for key in keys:
            real = key[1] in starting[key[0]]
            lane = self._lane_of.get(key)
            if lane is None or owner[lane] != key or fills[lane] >= n_rows:
                room = [c for c in range(len(fills)) if fills[c] < n_rows and c not in taken]
                if not room:
                    room = [c for c in range(len(fills)) if fills[c] < n_rows]
                if not room:
                    raise RuntimeError("internal: more steps stored than the buffer's cells")
                free = [c for c in room if owner[c] is None or _ended(self._columns[c])]
                lane = (free or room)[0]
                previous = owner[lane]
                if previous is not None and self._lane_of.get(previous) == lane:
                    del self._lane_of[previous]
                owner[lane] = key
                self._lane_of[key] = lane
                start = real or fills[lane] > 0
            else:
                start = real
            taken.add(lane)
            fills[lane] += 1
            self._chosen[key] = (lane, start)
            out[key] = start
        return out

    @staticmethod
    def starts(
        keys: Sequence[Slot], chosen: Mapping[Slot, bool], starting: Sequence[set[Any]]
    ) -> list[bool]:
        """Each acting slot's LSTM reset for the forward pass, in ``keys`` order.

        A stored step's reset is the one :meth:`assign` gave it (``chosen``); a step acted but
        not stored (not in ``chosen``) resets only where its agent's trajectory starts
        (``starting``), so its agent's next stored step acts from the state its own trajectory
        reached.

        Args:
            keys: Every (copy, agent) slot acting in the pass, in batch order.
            chosen: :meth:`assign`'s answer for the stored ones (several lanes' answers merged,
                for a group collector).
            starting: Per copy, the agents whose episode starts at their next step (read).

        Returns:
            One bool per key.
        """
        return [chosen[k] if k in chosen else k[1] in starting[k[0]] for k in keys]

    def place(self, key: Slot, transition: Transition) -> None:
        """Put the stored step of ``key`` (its :meth:`assign`-ed one) into its column.

        Args:
            key: The slot, as given to :meth:`assign`.
            transition: Its transition; its ``episode_start`` is set to the assigned flag.

        Returns:
            None; the column's previous transition is marked ``cut`` where it was another
            slot's, still open (that agent acts on in another column).
        """
        lane, start = self._chosen.pop(key)
        transition.episode_start = start
        column = self._columns[lane]
        if column and column[-1].end is None and _slot(column[-1]) != key:
            column[-1].cut = True
        column.append(transition)

    def packed(self) -> list[list[Placed]]:
        """The rollout's rows, column by column as placed (``_columns.pack``).

        Returns:
            ``rows[r][c]`` as :func:`rlightning_pettingzoo._columns.pack` gives them.

        Raises:
            ValueError: the columns do not hold ``n_rows * n_columns`` transitions.
            AssertionError: a cell's ``episode_start`` is not its transition's (internal).
        """
        placed = pack(self._columns, self._n_rows, len(self._columns))
        for row in placed:
            for p in row:
                assert p.episode_start == p.transition.episode_start, "internal: lanes"
        return placed


def _slot(transition: Transition) -> Slot:
    return (transition.env_index, transition.agent_id)


def _ended(column: list[Transition]) -> bool:
    """The column's last step ended its agent's episode (the column is free)."""
    return bool(column) and column[-1].end is not None
