"""The per-copy bookkeeping that every collector keeps: its env copies, seeds and agents' episodes.

Shared by the parallel collectors' :class:`~rlightning_pettingzoo._stepping.AgentStepper` and
:class:`~rlightning_pettingzoo.AECRolloutCollector`; what they do with it (who acts, what is
stored) is theirs.
"""

from __future__ import annotations

import itertools
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

from rlightning.rules import check_seeds
from rlightning_pettingzoo._columns import Transition
from rlightning_pettingzoo._envs import require_distinct

__all__ = ["CopyBookkeeping", "row_prefix"]

#: Numbers the collectors, for their row ids in a model's adapter (:func:`row_prefix`).
_COLLECTORS = itertools.count()


def row_prefix(caller: str) -> str:
    """A new collector's own prefix for its row ids in the model's (shared) adapter.

    ``rlightning_pettingzoo._sb3.sb3_rows`` puts it before each agent's row id, so a
    RecurrentPPO's per-agent LSTM states (carried by the adapter, one per row id) are never
    another collector's on the same model.

    Args:
        caller: The collector's name.

    Returns:
        ``"<caller>-<n>/"``, ``n`` counting the collectors made in this process.
    """
    return f"{caller}-{next(_COLLECTORS)}/"


class CopyBookkeeping:
    """A collector's env copies and, per (copy, agent) slot, its open transition and episode.

    Subclasses call :meth:`_make_envs`, then :meth:`_start_bookkeeping`, in their constructor.

    Attributes:
        dropped: What the last ``collect()`` acted but did not store (agent-steps; for the AEC
            collector, trained agents' turns).
        agent_returns: Per agent id, the returns of its last 100 finished episodes (all
            copies).
    """

    _envs: list[Any]
    _seeds: list[int | None]

    def _make_envs(
        self,
        env_fns: Sequence[Callable[[], Any]],
        caller: str,
        require: Callable[[Any, str], Any],
        kind: str,
    ) -> None:
        """Make one env per function, each checked by ``require`` and all distinct objects.

        Args:
            env_fns: One function per env copy.
            caller: The collector's name, for error messages.
            require: ``require(env, caller)`` returns the env or raises (``_envs.require_*``).
            kind: The env kind for the empty-list message (``"a ParallelEnv"``).

        Raises:
            ValueError: ``env_fns`` is empty, or two functions returned the same object.
            TypeError: an entry is not callable (an env given instead of its maker), or what
                ``require`` raises.
        """
        if not env_fns:
            raise ValueError(f"env_fns must hold at least one function making {kind}")
        for i, fn in enumerate(env_fns):
            if not callable(fn):
                raise TypeError(
                    f"{caller} env_fns[{i}] must be a function returning {kind} (e.g. "
                    f"simple_spread_v3.parallel_env, or lambda: env), got the "
                    f"{type(fn).__name__} object itself: pass its maker, one per copy"
                )
        self._envs = [require(fn(), caller) for fn in env_fns]
        require_distinct(self._envs, caller)

    def _start_bookkeeping(self, seeds: Sequence[int | None] | None, caller: str) -> None:
        """The seeds of the copies' first resets and the empty per-slot records.

        Args:
            seeds: One seed (an int >= 0, or None) per copy, or None (no seeds).
            caller: The collector's name, for error messages.

        Raises:
            TypeError: ``seeds`` is not a sequence, or a seed is a bool, float or str
                (:func:`rlightning.rules.check_seeds`, named by index): ``seed=True`` would
                otherwise reach ``reset`` as the seed 1.
            ValueError: ``seeds`` is not one per copy, or a seed is negative.
        """
        n = len(self._envs)
        seeds = [None] * n if seeds is None else check_seeds(seeds, f"{caller} seeds")
        if len(seeds) != n:
            raise ValueError(
                f"{caller}: seeds must hold one seed per env copy ({n}), got {len(seeds)}"
            )
        self._seeds = seeds
        self._starting: list[set[Any]] = [set() for _ in range(n)]
        self._open: dict[tuple[int, Any], Transition | None] = {}
        self._episode: dict[tuple[int, Any], list[float]] = {}
        self._steps = [0] * n
        self._rank: list[dict[Any, int]] = [{} for _ in range(n)]
        self._start_time = time.time()
        self.dropped = 0
        self.agent_returns: dict[Any, deque[float]] = {}

    @property
    def envs(self) -> list[Any]:
        """The env copies, in copy order (the collector's own objects, not copies)."""
        return list(self._envs)

    def _agent_rank(self, i: int, agent: Any) -> int:
        """The agent's place in copy ``i``'s ``possible_agents`` (others after them, as seen)."""
        ranks = self._rank[i]
        if agent not in ranks:
            possible = list(getattr(self._envs[i], "possible_agents", None) or [])
            ranks[agent] = (
                possible.index(agent) if agent in possible else len(possible) + len(ranks)
            )
        return ranks[agent]
