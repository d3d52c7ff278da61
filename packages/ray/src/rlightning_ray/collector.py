"""``Collector``: the driver's side -- asks every runner for a fragment, checks what comes back."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from rlightning_ray.checks import check_answer
from rlightning_ray.latency import LatencyReport, latency_report

__all__ = ["Collector"]

_FAIL_POLL_S = 0.1  # how often a failed sample repeats fail_pending until every runner returned


def _cause(exc: BaseException) -> str:
    """``Type: message`` of what a remote call raised (a RayTaskError's own cause)."""
    cause = getattr(exc, "cause", None) or exc
    return f"{type(cause).__name__}: {cause}"


class Collector:
    """Gathers fragments from runners, in runner order, and keeps their latencies.

    Args:
        runners: :class:`~rlightning_ray.EnvRunner` actor handles; fragments come back in this
            order (the deterministic mode's buffer column order).
        max_staleness: Policy versions an answer may lag behind the newest published one.

    Raises:
        ValueError: no runner, a runner id or env id repeated (the same runner twice, or two
            ``start_runners`` calls naming theirs alike), or a server's deterministic ``order``
            names a runner id that is not here or misses one that is (sampling would hang).

    Attributes:
        env_ids: Every runner's env ids, concatenated in runner order (the buffer's columns).
        restarts: How many fragments came from a restarted runner so far.
        deterministic: Whether the runners' servers all batch in the deterministic mode
            (``order=``: every batch holds every runner's rows, in that order).
    """

    def __init__(self, runners: Sequence[Any], *, max_staleness: int = 0) -> None:
        import ray

        if not runners:
            raise ValueError("a Collector needs at least one runner, got none")
        self.runners = list(runners)
        self.max_staleness = max_staleness
        described = ray.get([r.describe.remote() for r in self.runners])
        self.runner_ids: list[str] = [d["runner_id"] for d in described]
        self.runner_env_ids: list[list[str]] = [list(d["env_ids"]) for d in described]
        self.env_ids: list[str] = [e for ids in self.runner_env_ids for e in ids]
        for kind, ids in (("runner", self.runner_ids), ("env", self.env_ids)):
            repeated = sorted({i for i in ids if ids.count(i) > 1})
            if repeated:
                raise ValueError(
                    f"a Collector needs distinct {kind} ids, got {repeated} more than once in "
                    f"{ids}: pass each runner once, and start all the runners in one "
                    f"start_runners call (separate calls name theirs alike: runner-0, env-0, ...)"
                )
        self.restarts = 0
        self._hops: list[Any] = []
        handles = [d["server"] for d in described if d.get("server") is not None]
        infos = ray.get([h.info.remote() for h in handles])
        self._servers: list[Any] = []  # one handle per distinct server actor
        self.deterministic = bool(infos) and all(i.get("order") is not None for i in infos)
        seen: set[str] = set()
        for handle, info in zip(handles, infos, strict=True):
            if info["actor_id"] not in seen:
                seen.add(info["actor_id"])
                self._servers.append(handle)
                self._check_order(info.get("order"))

    def _check_order(self, order: list[str] | None) -> None:
        """Refuse a deterministic ``order`` that is not exactly these runners (it would hang)."""
        if order is None:
            return
        unknown = [r for r in order if r not in self.runner_ids]
        missing = [r for r in self.runner_ids if r not in order]
        if unknown or missing:
            raise ValueError(
                f"the server's order {order} does not name exactly this collector's runners "
                f"{self.runner_ids}: order entries with no runner {unknown}, runners missing "
                f"from the order {missing} (a batch waits for every runner of the order, so "
                f"sampling would hang)"
            )

    def sample(
        self, n_steps: int, current_version: int | None = None, *, timeout_s: float | None = None
    ) -> list[Any]:
        """Ask every runner for ``n_steps`` steps (concurrently) and check the fragments.

        When a runner fails (an env raised, an answer was refused), the collector tells every
        server to fail the requests still waiting for a batch
        (:meth:`~rlightning_ray.PolicyServer.fail_pending`, repeated until every runner has
        returned): in the deterministic mode the other runners would otherwise wait forever for
        the failed runner's request. They raise promptly, naming the runner that failed, and
        their fragments are dropped; their envs keep the state they reached.

        Args:
            n_steps: Steps per env.
            current_version: The newest published policy version (None: not checked).
            timeout_s: Seconds to wait for all the fragments (None: no limit).

        Returns:
            One :class:`~rlightning_ray.Fragment` per runner, in runner order
            (:class:`~rlightning_ray.pettingzoo.ParallelFragment` for PettingZoo runners).

        Raises:
            RuntimeError: a runner failed; the message names it and its envs (and the runner's
                own message names the env that raised); the runner's error is the cause.
            TimeoutError: ``timeout_s`` passed first (names the runners still sampling).
            ValueError: a fragment is not its runner's (env ids), holds another number of
                steps, or an answer breaks :func:`~rlightning_ray.check_answer`'s rules.
        """
        import ray

        refs = [
            r.sample.remote(
                n_steps, current_version=current_version, max_staleness=self.max_staleness
            )
            for r in self.runners
        ]
        fragments: list[Any] = [None] * len(refs)
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        remaining = list(refs)
        failed: tuple[int, BaseException] | None = None
        while remaining:
            wait = None if failed is None else _FAIL_POLL_S
            if deadline is not None:
                left = max(0.0, deadline - time.monotonic())
                wait = left if wait is None else min(wait, left)
            ready, remaining = ray.wait(remaining, num_returns=1, timeout=wait)
            for ref in ready:
                i = refs.index(ref)
                try:
                    fragments[i] = ray.get(ref)
                except Exception as error:  # re-raised below, naming the runner
                    if failed is None:
                        failed = (i, error)
            if failed is not None and remaining:
                i, exc = failed
                reason = (
                    f"runner {self.runner_ids[i]!r} (envs {self.runner_env_ids[i]}) failed, so "
                    f"the collector failed the requests waiting for it: {_cause(exc)}"
                )
                ray.get([s.fail_pending.remote(reason) for s in self._servers])
            if remaining and deadline is not None and time.monotonic() >= deadline:
                late = [self.runner_ids[refs.index(r)] for r in remaining]
                raise TimeoutError(f"runners {late} returned no fragment within {timeout_s} s")
        if failed is not None:
            i, exc = failed
            raise RuntimeError(
                f"runner {self.runner_ids[i]!r} (envs {self.runner_env_ids[i]}) failed: "
                f"{_cause(exc)}"
            ) from exc
        for runner_id, env_ids, frag in zip(
            self.runner_ids, self.runner_env_ids, fragments, strict=True
        ):
            if frag.runner_id != runner_id or frag.env_ids != env_ids:
                raise ValueError(
                    f"runner {runner_id!r} (envs {env_ids}) returned the fragment of runner "
                    f"{frag.runner_id!r} (envs {frag.env_ids})"
                )
            if len(frag.answers) != n_steps:
                raise ValueError(
                    f"runner {runner_id!r} returned {len(frag.answers)} steps, asked {n_steps}"
                )
            for answer in frag.answers:
                check_answer(
                    answer,
                    env_ids,
                    runner_id=runner_id,
                    current_version=current_version,
                    max_staleness=self.max_staleness,
                )
            self.restarts += int(frag.restarted)
            self._hops.append(frag.hops_ns)
        return fragments

    def latency(self, *, reset: bool = False) -> LatencyReport:
        """p50/p99 of each hop over the fragments sampled so far (since the last ``reset``)."""
        report = latency_report(self._hops)
        if reset:
            self._hops = []
        return report
