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
from rlightning_sb3 import training_reset_run_id

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

    Subclasses call :meth:`_make_envs`, then :meth:`_start_bookkeeping`, in their constructor,
    and :meth:`_start_run` at each ``collect()`` before any step.

    Attributes:
        dropped: What the last ``collect()`` acted but did not store (agent-steps; for the AEC
            collector, trained agents' turns).
        agent_returns: Per agent id, the returns of its last 100 finished episodes (all
            copies).
    """

    model: Any
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
        #: Per model of :meth:`_run_models`, the resetting run (``training_reset_run_id``) the
        #: copies were last reset for; None: none yet (the copies start fresh anyway).
        self._reset_runs: list[int | None] | None = None

    def _run_models(self) -> list[Any]:
        """The models whose training runs reset the copies: ``[model]`` (a hook: one per group).

        Returns:
            The collector's trained models (read, not changed).
        """
        return [self.model]

    def _reset_run_of(self, model: Any) -> int | None:
        """``model``'s latest resetting run (a hook: a recorder reads its learner's publish).

        Returns:
            :func:`rlightning_sb3.training_reset_run_id` of ``model``.
        """
        return training_reset_run_id(model)

    def _start_run(self) -> bool:
        """At a ``collect()``: reset every copy where a new training run reset the model's env.

        SB3's ``BaseAlgorithm._setup_learn`` resets the model's VecEnv when a run begins with
        ``reset_num_timesteps`` (or without a last observation): ``DummyVecEnv.reset`` resets
        every env (with the seeds given to ``VecEnv.seed``, which are used once: a second reset
        has none), ``VecMonitor.reset`` forgets the episodes' returns and lengths so far, and the
        first step starts every episode (``_last_episode_starts`` all True). The collector's
        copies are its own, so it does the same here, once per such run: when every model of
        :meth:`_run_models` began a resetting run (:meth:`_reset_run_of`, i.e.
        :func:`rlightning_sb3.training_reset_run_id`) that the copies were not reset for yet (a
        group collector's models share the copies: they are reset once all of them asked for
        it, see ``docs/decisions.md``), each copy is reset at its next round, as a fresh
        collector resets it (its seed where it was never reset, else none), after
        :meth:`_restart_copies` has taken what was due before its next live step (an AEC
        game's dead steps: episodes that ended, which ``VecMonitor`` recorded). The transitions
        still open (acted, not yet complete: SB3's buffer never holds them, as the episode is
        cut where it never stored a step) and the episodes' returns so far are dropped; the
        complete transitions a replay collector keeps for its next row stay (SB3 stored them
        in the run that collected them). Continuing runs (``reset_num_timesteps=False``), and
        models that never began a run, change nothing. Noise processes are reset by their own
        rule (every new run, ``_noise.SlotNoise.start_run``).

        Returns:
            Whether the copies were reset (mutated: the per-slot records, the copies' state).
        """
        current = [self._reset_run_of(model) for model in self._run_models()]
        known = self._reset_runs
        if known is None or len(known) != len(current):
            known = [None] * len(current)
        if not all(run is not None and run != old for run, old in zip(current, known, strict=True)):
            return False
        self._reset_runs = current
        self._restart_copies()
        self._open.clear()
        self._episode.clear()
        self._starting = [set() for _ in self._envs]
        return True

    def _restart_copies(self) -> None:
        """Take what is due before each copy's next live step, then mark every copy for a reset.

        A hook: the parallel collectors clear their copies' observations (a copy without
        them is reset at the next round); the AEC collectors step the dead steps due first.

        Raises:
            NotImplementedError: a collector that does not implement it.
        """
        raise NotImplementedError

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
