"""``Collector``: the driver's side -- asks every runner for a fragment, checks what comes back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rlightning_ray.checks import check_answer
from rlightning_ray.latency import LatencyReport, latency_report

__all__ = ["Collector"]


class Collector:
    """Gathers fragments from runners, in runner order, and keeps their latencies.

    Args:
        runners: :class:`~rlightning_ray.EnvRunner` actor handles; fragments come back in this
            order (the deterministic mode's buffer column order).
        max_staleness: Policy versions an answer may lag behind the newest published one.

    Attributes:
        env_ids: Every runner's env ids, concatenated in runner order (the buffer's columns).
        restarts: How many fragments came from a restarted runner so far.
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
        self.restarts = 0
        self._hops: list[Any] = []

    def sample(self, n_steps: int, current_version: int | None = None) -> list[Any]:
        """Ask every runner for ``n_steps`` steps (concurrently) and check the fragments.

        Args:
            n_steps: Steps per env.
            current_version: The newest published policy version (None: not checked).

        Returns:
            One :class:`~rlightning_ray.Fragment` per runner, in runner order
            (:class:`~rlightning_ray.pettingzoo.ParallelFragment` for PettingZoo runners).

        Raises:
            ValueError: a fragment is not its runner's (env ids), holds another number of
                steps, or an answer breaks :func:`~rlightning_ray.check_answer`'s rules.
        """
        import ray

        fragments: list[Any] = ray.get(
            [
                r.sample.remote(
                    n_steps, current_version=current_version, max_staleness=self.max_staleness
                )
                for r in self.runners
            ]
        )
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
