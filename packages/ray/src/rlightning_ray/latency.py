"""Per-hop latency of the answers a collector gathered: p50 and p99 of each hop.

A step's answer is timed by four stamps, all ``time.time_ns()`` (nanoseconds since the epoch):
``ts_env_sent_ns`` (the runner sends the observation), ``ts_policy_recv_ns`` (the server's
``act`` receives it), ``ts_infer_start_ns`` (its batch's forward starts) and
``ts_policy_sent_ns`` (the forward is done, the answer leaves), plus the runner's own receive
time. Across machines the stamps come from different clocks: the transit hops then include the
clock offset between the nodes (NTP keeps it around a millisecond or less), the server hops do not.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

__all__ = ["HOPS", "HopStats", "LatencyReport", "latency_report"]

#: The hops, in the column order of ``Fragment.hops_ns``.
HOPS = ("env_to_server", "queue", "inference", "server_to_env")


@dataclass(frozen=True)
class HopStats:
    """One hop's latency over the steps of a report, in milliseconds.

    Attributes:
        p50_ms: The median.
        p99_ms: The 99th percentile (numpy's linear interpolation).
        mean_ms: The mean.
        count: Steps measured.
    """

    p50_ms: float
    p99_ms: float
    mean_ms: float
    count: int


@dataclass(frozen=True)
class LatencyReport:
    """p50/p99 of each hop (:data:`HOPS`) over the answers of one or more fragments.

    Attributes:
        hops: ``{hop name: HopStats}`` in :data:`HOPS` order.
    """

    hops: dict[str, HopStats]

    def table(self) -> str:
        """A Markdown table: one row per hop, p50 / p99 / mean in ms and the step count."""
        lines = ["| hop | p50 ms | p99 ms | mean ms | steps |", "|---|---|---|---|---|"]
        for name, s in self.hops.items():
            lines.append(
                f"| {name} | {s.p50_ms:.3f} | {s.p99_ms:.3f} | {s.mean_ms:.3f} | {s.count} |"
            )
        return "\n".join(lines)


def latency_report(hops_ns: Iterable[np.ndarray]) -> LatencyReport:
    """Summarise hop durations (``Fragment.hops_ns`` arrays) into p50/p99 per hop.

    Args:
        hops_ns: ``(n_steps, 4)`` int64 arrays of nanoseconds, columns in :data:`HOPS` order.

    Returns:
        The :class:`LatencyReport` of all their rows together (NaN statistics when there is no
        row).

    Raises:
        ValueError: an array is not ``(n, 4)``.

    Examples:
        >>> import numpy as np
        >>> report = latency_report([np.array([[1_000_000, 0, 2_000_000, 500_000]] * 3)])
        >>> report.hops["inference"]
        HopStats(p50_ms=2.0, p99_ms=2.0, mean_ms=2.0, count=3)
    """
    arrays = [np.asarray(a) for a in hops_ns]
    for a in arrays:
        if a.ndim != 2 or a.shape[1] != len(HOPS):
            raise ValueError(f"hops_ns arrays must be (n_steps, {len(HOPS)}); got {a.shape}")
    rows = np.concatenate(arrays) if arrays else np.zeros((0, len(HOPS)), np.int64)
    ms = rows.astype(np.float64) / 1e6
    stats = {}
    for col, name in enumerate(HOPS):
        column = ms[:, col]
        if column.size == 0:
            stats[name] = HopStats(float("nan"), float("nan"), float("nan"), 0)
        else:
            stats[name] = HopStats(
                float(np.percentile(column, 50)),
                float(np.percentile(column, 99)),
                float(column.mean()),
                int(column.size),
            )
    return LatencyReport(stats)
