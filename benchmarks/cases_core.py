"""Items 1-5 of the performance issue: build, conversions, a big tensor, pickling.

Every case has a ``floor`` bench: the least code that does the same work by hand (a bare
``SimpleNamespace`` plus ``dict(vars(...))`` for building, the raw per-tensor torch calls for
conversions, a plain dict for pickling). The anchors are ``tensordict.TensorDict`` and
Tianshou's ``Batch`` doing the same work through their own API; an anchor whose library is not
importable in this interpreter gets a skipped row (the runner measures it in the anchor
interpreter instead when one is given).

Tensors are built once, outside the timed loop; in-place conversions (``numpy()``, ``cpu()``,
``Batch.to_numpy_()``) get a fresh container per operation, built by ``prepare`` (not timed).
"""

from __future__ import annotations

import importlib.util
import pickle
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from benchmarks._harness import Bench, skipped

#: (case id, item, title, what the floor is) for items 1-5.
CASES: tuple[tuple[str, int, str, str], ...] = (
    (
        "1.build",
        1,
        "build a 4-field response + to_dict()",
        "SimpleNamespace(env_id=..., 4 fields) + dict(vars(ns))",
    ),
    ("2.numpy", 2, "numpy() of the 4-field response", "4 x t.detach().cpu().numpy()"),
    ("2.cpu", 2, "cpu() of the 4-field response", "4 x t.cpu()"),
    (
        "3.build",
        3,
        "build a response holding a dict of 16 per-agent tensors + to_dict()",
        "SimpleNamespace(env_id=..., action=dict) + dict(vars(ns))",
    ),
    (
        "3.numpy",
        3,
        "numpy() of the 16-agent nested response",
        "{k: t.detach().cpu().numpy() for k, t in d.items()}",
    ),
    ("3.cpu", 3, "cpu() of the 16-agent nested response", "{k: t.cpu() for k, t in d.items()}"),
    ("4.cpu", 4, "cpu() of one 64 MB float32 CPU tensor field", "t.cpu()"),
    ("4.numpy", 4, "numpy() of one 64 MB float32 CPU tensor field", "t.detach().cpu().numpy()"),
    (
        "4.numpy_bf16",
        4,
        "numpy() of one 64 MB bfloat16 tensor field (widened to float32: a real copy)",
        "t.detach().cpu().float().numpy()",
    ),
    (
        "5.pickle_tensors",
        5,
        "pickle protocol 5 dumps+loads, 4-field response of CPU tensors",
        "a plain dict of the same tensors",
    ),
    (
        "5.pickle_numpy",
        5,
        "pickle protocol 5 dumps+loads, 4-field response of numpy arrays",
        "a plain dict of the same arrays",
    ),
    (
        "5.pickle_64mb",
        5,
        "pickle protocol 5 dumps+loads, one 64 MB numpy field",
        "a plain dict of the same array",
    ),
    (
        "5.pickle_64mb_tensor",
        5,
        "pickle protocol 5 dumps+loads, one 64 MB CPU tensor field",
        "a plain dict of the same tensor",
    ),
    (
        "5.pickle_tensors_oob",
        5,
        "pickle protocol 5 with buffer_callback (out of band), 4-field response of CPU tensors",
        "a plain dict of the same tensors, same call",
    ),
    (
        "5.ray_64mb_tensor",
        5,
        "ray.get(ray.put(x)) through a local Ray object store, one 64 MB CPU tensor field",
        "a plain dict of the same tensor",
    ),
)

#: Which implementations each case compares (the floor always).
CASE_IMPLS: dict[str, tuple[str, ...]] = {
    "1.build": ("floor", "dict", "py_init", "rlightning", "tensordict", "batch"),
    "2.numpy": ("floor", "rlightning", "tensordict", "batch"),
    "2.cpu": ("floor", "rlightning", "tensordict", "batch"),
    "3.build": ("floor", "py_init", "rlightning", "tensordict", "batch"),
    "3.numpy": ("floor", "rlightning", "pytree", "tensordict", "batch"),
    "3.cpu": ("floor", "rlightning", "pytree", "tensordict", "batch"),
    "4.cpu": ("floor", "rlightning"),
    "4.numpy": ("floor", "rlightning"),
    "4.numpy_bf16": ("floor", "rlightning"),
    "5.pickle_tensors": ("floor", "rlightning", "tensordict", "batch"),
    "5.pickle_numpy": ("floor", "rlightning"),
    "5.pickle_64mb": ("floor", "rlightning"),
    "5.pickle_64mb_tensor": ("floor", "rlightning"),
    "5.pickle_tensors_oob": ("floor", "rlightning"),
    "5.ray_64mb_tensor": ("floor", "rlightning"),
}

_BIG_ELEMENTS = 64 * 2**20 // 4  # float32 elements in 64 MiB
_N_AGENTS = 16


def impl_available(impl: str) -> str | None:
    """Return None if ``impl`` can run in this interpreter, else the reason it cannot."""
    module = {"tensordict": "tensordict", "batch": "tianshou"}.get(impl)
    if module is None or importlib.util.find_spec(module) is not None:
        return None
    return f"{module} is not installed in this interpreter"


def _fields() -> dict[str, torch.Tensor]:
    return {
        "action": torch.zeros(1, dtype=torch.int64),
        "log_prob": torch.zeros(1, dtype=torch.float32),
        "value": torch.zeros(1, dtype=torch.float32),
        "hidden": torch.zeros(256, dtype=torch.float32),
    }


def _agents() -> dict[str, torch.Tensor]:
    return {f"agent_{i}": torch.zeros(8, dtype=torch.float32) for i in range(_N_AGENTS)}


def _payload_bytes(value: Any) -> int:
    if isinstance(value, dict):
        return sum(_payload_bytes(v) for v in value.values())
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    raise TypeError(type(value))


def _repeat(make: Callable[[], Any]) -> Callable[[int], list[Any]]:
    return lambda n: [make() for _ in range(n)]


def _same(obj: Any) -> Callable[[int], list[Any]]:
    return lambda n: [obj] * n


# ---------------------------------------------------------------------------------------- item 1
def _build_benches(case: str, fields: dict[str, Any], impl: str) -> Bench:
    from rlightning import MultiAgentPolicyResponse, PolicyResponse

    nested = case.startswith("3.")
    cls = MultiAgentPolicyResponse if nested else PolicyResponse
    prepare = _same(fields)
    run: Callable[[Any], object]  # each branch defines its own, typed for its items
    if impl == "floor":
        namespace = types.SimpleNamespace

        def run(items: list[dict[str, Any]]) -> None:
            for f in items:
                dict(vars(namespace(env_id="env-0", **f)))

    elif impl == "py_init":
        # Not an anchor: the structural floor of any class with a Python-level __init__ (the
        # fields stored, nothing checked), to show how much of rlightning's time is CPython's
        # class-call machinery rather than rlightning's own work.
        class PyInitNamespace(types.SimpleNamespace):
            def __init__(self, env_id: str | None, **data: Any) -> None:
                ns = self.__dict__
                ns["env_id"] = env_id
                ns.update(data)

        def run(items: list[dict[str, Any]]) -> None:
            for f in items:
                dict(vars(PyInitNamespace("env-0", **f)))

    elif impl == "dict":
        prepare = _same(tuple(fields.values()))

        def run(items: list[tuple[Any, ...]]) -> None:
            for a, b, c, d in items:
                {"action": a, "log_prob": b, "value": c, "hidden": d}  # noqa: B018

    elif impl == "rlightning":

        def run(items: list[dict[str, Any]]) -> None:
            for f in items:
                cls("env-0", **f).to_dict()

    elif impl == "tensordict":
        from tensordict import TensorDict

        def run(items: list[dict[str, Any]]) -> None:
            for f in items:
                TensorDict(f, batch_size=[]).to_dict()

    elif impl == "batch":
        from tianshou.data import Batch

        def run(items: list[dict[str, Any]]) -> None:
            for f in items:
                Batch(**f).to_dict()

    else:
        raise ValueError(impl)
    return Bench(case=case, impl=impl, prepare=prepare, run=run)


# -------------------------------------------------------------------------------- items 2, 3, 4
def _convert_bench(case: str, fields: dict[str, Any], impl: str, max_n: int) -> Bench:
    from rlightning import MultiAgentPolicyResponse, PolicyResponse

    op = case.split(".", 1)[1]
    to_numpy = op.startswith("numpy")
    prepare: Callable[[int], list[Any]]
    run: Callable[[Any], object]  # each branch defines its own, typed for its items
    if impl == "floor":
        if case.startswith("3."):
            agents = fields["action"]
            prepare = _same(agents)
            if to_numpy:

                def run(items: list[dict[str, torch.Tensor]]) -> None:
                    for d in items:
                        {k: t.detach().cpu().numpy() for k, t in d.items()}

            else:

                def run(items: list[dict[str, torch.Tensor]]) -> None:
                    for d in items:
                        {k: t.cpu() for k, t in d.items()}

        elif case.startswith("2."):
            prepare = _same(tuple(fields.values()))
            if to_numpy:

                def run(items: list[tuple[torch.Tensor, ...]]) -> None:
                    for a, b, c, d in items:
                        a.detach().cpu().numpy()
                        b.detach().cpu().numpy()
                        c.detach().cpu().numpy()
                        d.detach().cpu().numpy()

            else:

                def run(items: list[tuple[torch.Tensor, ...]]) -> None:
                    for a, b, c, d in items:
                        a.cpu()
                        b.cpu()
                        c.cpu()
                        d.cpu()

        else:  # item 4: one big tensor
            prepare = _same(fields["action"])
            if op == "numpy_bf16":

                def run(items: list[torch.Tensor]) -> None:
                    for t in items:
                        t.detach().cpu().float().numpy()

            elif to_numpy:

                def run(items: list[torch.Tensor]) -> None:
                    for t in items:
                        t.detach().cpu().numpy()

            else:

                def run(items: list[torch.Tensor]) -> None:
                    for t in items:
                        t.cpu()

    elif impl == "rlightning":
        cls = MultiAgentPolicyResponse if case.startswith("3.") else PolicyResponse
        prepare = _repeat(lambda: cls("env-0", **fields))
        if to_numpy:

            def run(items: list[PolicyResponse]) -> None:
                for r in items:
                    r.numpy()

        else:

            def run(items: list[PolicyResponse]) -> None:
                for r in items:
                    r.cpu()

    elif impl == "pytree":
        # Not an anchor: a generic pytree walk (torch's own) doing rlightning's per-leaf work
        # over the same field dict, to check the claim in rlightning._tree that a hand-written
        # walk is cheaper for our small, shallow structures.
        from torch.utils._pytree import tree_map

        from rlightning._convert import tensor_to_numpy

        def cpu_leaf(x: Any) -> Any:
            return x if not isinstance(x, torch.Tensor) or x.is_cpu else x.cpu()

        def numpy_leaf(x: Any) -> Any:
            return tensor_to_numpy(x) if isinstance(x, torch.Tensor) else x

        leaf = numpy_leaf if to_numpy else cpu_leaf
        prepare = _same(fields)

        def run(items: list[dict[str, Any]]) -> None:
            for f in items:
                tree_map(leaf, f)

    elif impl == "tensordict":
        from tensordict import TensorDict

        prepare = _repeat(lambda: TensorDict(fields, batch_size=[]))
        if to_numpy:

            def run(items: list[TensorDict]) -> None:
                for td in items:
                    td.numpy()

        else:

            def run(items: list[TensorDict]) -> None:
                for td in items:
                    td.cpu()

    elif impl == "batch":
        from tianshou.data import Batch

        prepare = _repeat(lambda: Batch(**fields))
        if to_numpy:

            def run(items: list[Batch]) -> None:
                for b in items:
                    b.to_numpy_()

        else:

            def run(items: list[Batch]) -> None:
                for b in items:
                    b.to_torch_(device="cpu")

    else:
        raise ValueError(impl)
    return Bench(case=case, impl=impl, prepare=prepare, run=run, max_n=max_n)


# ---------------------------------------------------------------------------------------- item 5
def _pickle_bench(case: str, fields: dict[str, Any], impl: str) -> Bench:
    from rlightning import PolicyResponse

    if impl == "floor":
        obj: Any = dict(fields)
    elif impl == "rlightning":
        obj = PolicyResponse("env-0", **fields)
    elif impl == "tensordict":
        from tensordict import TensorDict

        obj = TensorDict(fields, batch_size=[])
    elif impl == "batch":
        from tianshou.data import Batch

        obj = Batch(**fields)
    else:
        raise ValueError(impl)
    if case == "5.ray_64mb_tensor":
        return _ray_bench(case, impl, obj, fields)
    payload = _payload_bytes(fields)
    dumps, loads = pickle.dumps, pickle.loads
    extra: dict[str, Any] = {}
    if case.endswith("_oob"):
        buffers: list[pickle.PickleBuffer] = []
        data = dumps(obj, protocol=5, buffer_callback=buffers.append)
        back = loads(data, buffers=buffers)
        out_of_band = sum(memoryview(b).nbytes for b in buffers)
        size = len(data) + out_of_band
        extra["out_of_band_bytes"] = out_of_band

        def run(items: list[Any]) -> None:
            for o in items:
                bufs: list[pickle.PickleBuffer] = []
                loads(dumps(o, protocol=5, buffer_callback=bufs.append), buffers=bufs)

    else:
        data = dumps(obj, protocol=5)
        back = loads(data)  # our own bytes
        size = len(data)

        def run(items: list[Any]) -> None:
            for o in items:
                loads(dumps(o, protocol=5))

    if type(back) is not type(obj):
        raise AssertionError(f"{impl}: pickle round trip changed the type to {type(back)}")
    big = payload > 2**20
    extra.update(size_bytes=size, payload_bytes=payload, overhead_bytes=size - payload)
    return Bench(
        case=case,
        impl=impl,
        prepare=_same(obj),
        run=run,
        max_n=8 if big else 100_000,
        extra=extra,
    )


_RAY_STARTED = False


def _ray_bench(case: str, impl: str, obj: Any, fields: dict[str, Any]) -> Bench:
    """``ray.get(ray.put(obj))`` on a local Ray (started once, 1 CPU, 512 MiB object store)."""
    global _RAY_STARTED
    if importlib.util.find_spec("ray") is None:
        return skipped(case, impl, "ray is not installed in this interpreter")
    import atexit
    import warnings

    import ray

    if not _RAY_STARTED:
        ray.init(
            address="local", num_cpus=1, include_dashboard=False, object_store_memory=512 * 2**20
        )
        atexit.register(ray.shutdown)
        _RAY_STARTED = True
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    ref = ray.put(obj)
    first, second = ray.get(ref), ray.get(ref)
    a = first["action"] if isinstance(first, dict) else first.action
    b = second["action"] if isinstance(second, dict) else second.action
    zero_copy = bool(a.data_ptr() == b.data_ptr())  # two reads share the object-store buffer
    del ref, first, second, a, b
    payload = _payload_bytes(fields)

    def run(items: list[Any]) -> None:
        for o in items:
            ray.get(ray.put(o))

    return Bench(
        case=case,
        impl=impl,
        prepare=_same(obj),
        run=run,
        max_n=4,
        extra={"zero_copy_get": zero_copy, "payload_bytes": payload},
    )


def _case_fields(case: str) -> dict[str, Any]:
    if case in ("1.build", "2.numpy", "2.cpu", "5.pickle_tensors"):
        return _fields()
    if case.startswith("3."):
        return {"action": _agents()}
    if case in ("4.cpu", "4.numpy"):
        return {"action": torch.zeros(_BIG_ELEMENTS, dtype=torch.float32)}
    if case == "4.numpy_bf16":
        return {"action": torch.zeros(2 * _BIG_ELEMENTS, dtype=torch.bfloat16)}
    if case == "5.pickle_numpy":
        return {k: v.numpy() for k, v in _fields().items()}
    if case == "5.pickle_64mb":
        return {"action": np.zeros(_BIG_ELEMENTS, dtype=np.float32)}
    if case in ("5.pickle_64mb_tensor", "5.ray_64mb_tensor"):
        return {"action": torch.zeros(_BIG_ELEMENTS, dtype=torch.float32)}
    if case == "5.pickle_tensors_oob":
        return _fields()
    raise ValueError(case)


def core_benches(case: str, impls: tuple[str, ...]) -> list[Bench]:
    """Benches of one case of items 1-5 for ``impls`` (skipped rows for unavailable ones).

    Args:
        case: A case id from :data:`CASES`.
        impls: Implementations to build, a subset of :data:`CASE_IMPLS` ``[case]``.

    Returns:
        One bench per implementation, in the order of ``impls``.
    """
    fields = _case_fields(case)
    big = case.startswith("4.")
    benches = []
    for impl in impls:
        reason = impl_available(impl)
        if reason is not None:
            benches.append(skipped(case, impl, reason))
        elif case.endswith(".build"):
            benches.append(_build_benches(case, fields, impl))
        elif case.startswith("5."):
            benches.append(_pickle_bench(case, fields, impl))
        else:
            max_n = 2 if case == "4.numpy_bf16" else (10_000 if big else 100_000)
            benches.append(_convert_bench(case, fields, impl, max_n))
    return benches
