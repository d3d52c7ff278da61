"""The CUDA side of items 2 and 4: device copies through a response against raw torch.

Run where a CUDA GPU is visible; elsewhere every row is present and says so. Every operation
ends with ``torch.cuda.synchronize()`` (raw and rlightning alike), so the time includes the copy
itself, not only its launch.

* ``2.cuda_numpy`` / ``2.cuda_cpu``: the 4-field response (action int64[1], log_prob
  float32[1], value float32[1], hidden float32[256]) on the GPU, ``numpy()`` / ``cpu()``,
  against the raw per-tensor calls.
* ``4.cuda_cpu``: one 64 MB float32 field, GPU to CPU (pageable memory), ``cpu()`` against
  ``t.cpu()``.
* ``4.cuda_cpu_nb``: the same with ``to("cpu", non_blocking=True)`` against
  ``t.to("cpu", non_blocking=True)``.
* ``4.cuda_h2d_pinned``: one 64 MB float32 field in pinned CPU memory, CPU to GPU with
  ``to("cuda", non_blocking=True)`` against ``t.to("cuda", non_blocking=True)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from benchmarks._harness import Bench, skipped

CASES: tuple[tuple[str, int, str, str], ...] = (
    (
        "2.cuda_numpy",
        2,
        "numpy() of the 4-field response on a CUDA GPU",
        "4 x t.detach().cpu().numpy()",
    ),
    ("2.cuda_cpu", 2, "cpu() of the 4-field response on a CUDA GPU", "4 x t.cpu()"),
    ("4.cuda_cpu", 4, "cpu() of one 64 MB float32 CUDA tensor field", "t.cpu()"),
    (
        "4.cuda_cpu_nb",
        4,
        'to("cpu", non_blocking=True) of one 64 MB float32 CUDA tensor field, then synchronize',
        't.to("cpu", non_blocking=True)',
    ),
    (
        "4.cuda_h2d_pinned",
        4,
        'to("cuda", non_blocking=True) of one 64 MB float32 pinned CPU tensor field, then '
        "synchronize",
        't.to("cuda", non_blocking=True)',
    ),
)

CASE_IMPLS: dict[str, tuple[str, ...]] = {case: ("floor", "rlightning") for case, *_ in CASES}

_BIG_ELEMENTS = 64 * 2**20 // 4


def gpu_name() -> str | None:
    """The visible GPU's name, or None when torch sees no CUDA device."""
    if not torch.cuda.is_available():
        return None
    return str(torch.cuda.get_device_name(0))


def _fields(case: str) -> dict[str, torch.Tensor]:
    if case.startswith("2."):
        return {
            "action": torch.zeros(1, dtype=torch.int64, device="cuda"),
            "log_prob": torch.zeros(1, dtype=torch.float32, device="cuda"),
            "value": torch.zeros(1, dtype=torch.float32, device="cuda"),
            "hidden": torch.zeros(256, dtype=torch.float32, device="cuda"),
        }
    if case == "4.cuda_h2d_pinned":
        return {"action": torch.zeros(_BIG_ELEMENTS, dtype=torch.float32).pin_memory()}
    return {"action": torch.zeros(_BIG_ELEMENTS, dtype=torch.float32, device="cuda")}


def _floor_op(case: str) -> Callable[[torch.Tensor], Any]:
    if case == "2.cuda_numpy":
        return lambda t: t.detach().cpu().numpy()
    if case in ("2.cuda_cpu", "4.cuda_cpu"):
        return lambda t: t.cpu()
    if case == "4.cuda_cpu_nb":
        return lambda t: t.to("cpu", non_blocking=True)
    return lambda t: t.to("cuda", non_blocking=True)


def _response_op(case: str) -> Callable[[Any], Any]:
    if case == "2.cuda_numpy":
        return lambda r: r.numpy()
    if case in ("2.cuda_cpu", "4.cuda_cpu"):
        return lambda r: r.cpu()
    if case == "4.cuda_cpu_nb":
        return lambda r: r.to("cpu", non_blocking=True)
    return lambda r: r.to("cuda", non_blocking=True)


def cuda_benches(case: str, impls: tuple[str, ...]) -> list[Bench]:
    """Benches of one CUDA case (skipped rows when no CUDA GPU is visible).

    Args:
        case: A case id from :data:`CASES`.
        impls: ``("floor", "rlightning")`` or a subset.

    Returns:
        One bench per implementation.
    """
    if not torch.cuda.is_available():
        reason = "no CUDA GPU visible (torch.cuda.is_available() is False)"
        return [skipped(case, impl, reason) for impl in impls]
    from rlightning import PolicyResponse

    fields = _fields(case)
    big = case.startswith("4.")
    synchronize = torch.cuda.synchronize
    benches = []
    for impl in impls:
        prepare: Callable[[int], list[Any]]
        run: Callable[[Any], object]
        if impl == "floor":
            op = _floor_op(case)
            tensors = tuple(fields.values())

            def prepare(n: int, tensors: tuple[torch.Tensor, ...] = tensors) -> list[Any]:
                return [tensors] * n

            def run(items: list[Any], op: Callable[[torch.Tensor], Any] = op) -> None:
                for ts in items:
                    for t in ts:
                        op(t)
                    synchronize()

        else:
            response_op = _response_op(case)

            def prepare(n: int) -> list[Any]:
                return [PolicyResponse("env-0", **fields) for _ in range(n)]

            def run(items: list[Any], op: Callable[[Any], Any] = response_op) -> None:
                for r in items:
                    op(r)
                    synchronize()

        benches.append(
            Bench(case=case, impl=impl, prepare=prepare, run=run, max_n=4 if big else 20_000)
        )
    return benches
