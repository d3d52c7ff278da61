"""Timing harness: interleaved rounds, medians, one JSON-ready row per measured thing.

Every benchmark is a :class:`Bench`: ``prepare(n)`` builds what ``n`` operations need (fresh
responses for in-place conversions, say) and is not timed; ``run(state)`` performs the ``n``
operations and is timed with :func:`time.perf_counter_ns`, garbage collection off. The time per
operation of one round is the elapsed time divided by ``n``.

All benches of one case (rlightning, the floor, the anchors) are measured in the same rounds, in
a fresh random order each round, so load from other processes on a shared machine falls on all of
them alike. The figure reported is the median over rounds, with the quartiles beside it; every
round's figure is kept (``samples_s``, in round order) so that a ratio between two benches can be
taken round by round (see :func:`paired_ratio`).
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Bench:
    """One measured thing: an implementation doing one case's work.

    Attributes:
        case: Case id shared by the benches compared side by side, e.g. ``"2.numpy"``.
        impl: Implementation id, e.g. ``"rlightning"``, ``"floor"``, ``"tensordict"``.
        prepare: Builds the state for ``n`` operations (not timed).
        run: Performs ``n`` operations on that state (timed).
        max_n: Upper bound on ``n`` (memory for fresh objects, or slow operations).
        per_divisor: The time per operation is divided by this (e.g. the number of agents for
            a per-agent figure).
        extra: Figures that are not times (pickle size, payload), copied into the row.
        skip_reason: When set, the bench is not run and its row says why.
    """

    case: str
    impl: str
    prepare: Callable[[int], Any] | None = None
    run: Callable[[Any], object] | None = None
    max_n: int = 100_000
    per_divisor: int = 1
    extra: dict[str, Any] = field(default_factory=dict)
    skip_reason: str | None = None

    @property
    def row_id(self) -> str:
        return f"{self.case}/{self.impl}"


def skipped(case: str, impl: str, reason: str) -> Bench:
    """A bench that is not run; its row carries ``reason``."""
    return Bench(case=case, impl=impl, skip_reason=reason)


def _time_once(bench: Bench, n: int) -> float:
    assert bench.prepare is not None
    assert bench.run is not None
    state = bench.prepare(n)
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = time.perf_counter_ns()
        bench.run(state)
        stop = time.perf_counter_ns()
    finally:
        if gc_was_enabled:
            gc.enable()
    del state
    return (stop - start) / 1e9


def _calibrate(bench: Bench, target_s: float) -> int:
    """Pick ``n`` so that one round of ``bench`` takes about ``target_s``."""
    n = 1
    _time_once(bench, 1)  # warm up: imports, caches, first-call paths
    while True:
        elapsed = _time_once(bench, n)
        if elapsed >= target_s / 5 or n >= bench.max_n:
            break
        n = min(bench.max_n, n * 10)
    if elapsed > 0:
        n = round(n * target_s / elapsed)
    return max(1, min(bench.max_n, n))


def measure(
    benches: Iterable[Bench], repeats: int, target_s: float, seed: int = 0
) -> list[dict[str, Any]]:
    """Measure ``benches`` side by side and return one row per bench.

    Args:
        benches: The benches of one case (or several), measured in interleaved rounds.
        repeats: Number of rounds; the reported figure is the median over them.
        target_s: Wall time of one round of one bench, in seconds (sets ``n``).
        seed: Seeds the shuffling of the order within each round.

    Returns:
        Rows with ``case``, ``impl``, ``status`` (``"ok"`` or ``"skipped"``), and for measured
        ones ``median_s``, ``q1_s``, ``q3_s`` (seconds per operation, divided by
        ``per_divisor``), ``n`` and ``repeats``.
    """
    benches = list(benches)
    sizes: dict[str, int] = {}
    for bench in benches:
        if bench.skip_reason is None:
            try:
                sizes[bench.row_id] = _calibrate(bench, target_s)
            except Exception as exc:  # a broken implementation gets a row saying so
                bench.skip_reason = f"raised {type(exc).__name__}: {exc}"
    live = [b for b in benches if b.skip_reason is None]
    samples: dict[str, list[float]] = {b.row_id: [] for b in live}
    order = list(live)
    rng = random.Random(seed)
    for _ in range(repeats):
        rng.shuffle(order)
        for bench in order:
            n = sizes[bench.row_id]
            samples[bench.row_id].append(_time_once(bench, n) / n / bench.per_divisor)
    rows = []
    for bench in benches:
        row: dict[str, Any] = {"case": bench.case, "impl": bench.impl, **bench.extra}
        if bench.skip_reason is not None:
            row.update(status="skipped", reason=bench.skip_reason)
        else:
            values = samples[bench.row_id]
            if len(values) >= 2:
                q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive")
            else:
                q1 = q3 = values[0]
            row.update(
                status="ok",
                median_s=statistics.median(values),
                q1_s=q1,
                q3_s=q3,
                n=sizes[bench.row_id],
                repeats=repeats,
                per_divisor=bench.per_divisor,
                samples_s=values,
            )
        rows.append(row)
    return rows


def paired_ratio(a: dict[str, Any], b: dict[str, Any]) -> float:
    """Median over rounds of ``a``'s time over ``b``'s in the same round.

    The two benches ran in the same rounds, a few milliseconds apart, so a burst of load from
    another process on a shared machine usually falls on both and cancels out of the ratio;
    it does not cancel out of a ratio of medians. Falls back to the ratio of medians when the
    rows do not have the same rounds (e.g. measured in different processes).

    Args:
        a: A measured row (numerator).
        b: A measured row of the same case (denominator).

    Returns:
        The ratio.
    """
    xs, ys = a.get("samples_s"), b.get("samples_s")
    if xs and ys and len(xs) == len(ys) and a.get("process") == b.get("process"):
        return float(statistics.median(x / y for x, y in zip(xs, ys, strict=True)))
    return float(a["median_s"]) / float(b["median_s"])
