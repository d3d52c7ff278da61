"""Breaker tests for ResponseBatch: concurrent first reads."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import numpy as np

from rlightning import PolicyResponse, ResponseBatch


class _SlowUnbind(PolicyResponse):
    """A stacked response whose unbind waits (up to 1 s) until a second thread unbinds too.

    Stands in for the microseconds a real unbind of a large batch takes, during which the GIL
    may pass to another thread reading the same batch. A batch that splits once (a lock) makes
    the second reader wait instead, the barrier times out and the test still finishes.
    """

    barrier = threading.Barrier(2, timeout=1.0)

    def unbind(self) -> Any:
        with contextlib.suppress(threading.BrokenBarrierError):
            self.barrier.wait()
        return super().unbind()


def test_concurrent_first_reads_share_one_split() -> None:
    _SlowUnbind.barrier.reset()
    stacked = _SlowUnbind(None, env_ids=["a", "b"], action=np.zeros((2, 1)))
    batch = ResponseBatch(stacked)
    got: list[Any] = [None, None]

    def read(k: int) -> None:
        got[k] = batch[0]

    threads = [threading.Thread(target=read, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    got[0].note = "set by thread 0"
    got[1].note = "set by thread 1"
    assert got[0] is got[1] is batch[0]
    assert batch[0].note == "set by thread 1"
