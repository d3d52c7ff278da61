"""The prose of ``docs/performance.md``; the figures are filled in from one run's results."""

from __future__ import annotations

from typing import Any

from benchmarks.report import ITEM_TITLES, fmt_time
from benchmarks.targets import find

HOW = """\
## How it is measured

* Every case is measured side by side in the same rounds: rlightning, the **floor** (the least
  code that does the same work by hand) and the anchors (`tensordict.TensorDict`, Tianshou's
  `Batch`). Each round runs each implementation `n` times back to back (`n` is calibrated so a
  round takes a millisecond or two) in a fresh random order, with the garbage collector off; the
  tables give the **median** time per operation over all rounds and the quartiles beside it.
* Ratios ("x floor", "rlightning / it") are the median over rounds of the ratio within each
  round: the two things compared ran a few milliseconds apart, so a burst of load from another
  process on the shared machine falls on both and cancels out. (A ratio of the two medians is
  close to it on a quiet machine; under bursty load it is not, and the paired one is the honest
  figure.)
* Inputs are built once, outside the timed loop. In-place conversions (`numpy()`, `cpu()`,
  `Batch.to_numpy_()`) get a fresh container per operation, built untimed; the same tensors are
  shared by all of them.
* Floors: building is a bare `types.SimpleNamespace(env_id=..., **fields)` plus
  `dict(vars(ns))`; conversions are the raw per-tensor calls written out
  (`t.detach().cpu().numpy()`, `t.cpu()`; for the 16-agent dict, a dict comprehension of them);
  pickling is a plain dict holding the same values. TensorDict and `Batch` carry no `env_id`.
* Three rows are references, not anchors: a `SimpleNamespace` subclass whose `__init__` is
  written in Python and only stores the fields (the cost of CPython's class call alone, see item
  1); `torch.utils._pytree.tree_map` doing rlightning's per-leaf work (the generic pytree walk
  that `rlightning._tree` chose not to use); and, for item 6's `act`, the floor plus one stacked
  `PolicyResponse` in a `ResponseBatch` with nothing checked, made with the adapter's cheaper
  torch calls (the least an adapter that answers with responses can do).
* Item 6 is also counted in instructions, which other processes on a shared machine cannot
  blur: `benchmarks/callgrind.py` runs the same calls under valgrind's callgrind, counts a loop of
  300 calls minus the same loop of 0 calls (collection switched on only inside the loop), and
  gives the adapter's instructions over the floor's. It then counts each rlightning function the
  adapter call runs on its own (callees included), to show where the overhead goes.
* torch runs with one thread (`torch.set_num_threads(1)`): the machine is shared, and every
  implementation gets the same.
* Tianshou's `Batch` is measured in the same process when Tianshou is installed beside
  rlightning (Tianshou 2.0.1 accepts gymnasium 1.4). Otherwise a second interpreter with its own
  virtual environment (`--anchor-python`, `benchmarks/requirements-anchors.txt`) measures it in
  the same run: its rows say "anchor interpreter", that interpreter measures the floors again
  beside it, and rlightning's ratio to `Batch` is taken through each interpreter's own floor
  (rlightning / its floor, over Batch / its floor).
* Item 5's Ray row needs `ray` (the `ray` extra); without it the row says so.
"""

FAST = """\
## What makes the per-step path fast

Profiled with cProfile and by timing variants side by side (the tables above are the result):

* **Build** (`PolicyResponse.__init__`): `self` is positional-only, so CPython matches each
  keyword against `env_id` alone (about 430 instructions fewer per 4-field build, counted with
  callgrind); the `env_id` check is one `type(env_id) is not str` test inline (the full check
  runs only for other types); the reserved-name check is one `frozenset.isdisjoint` against
  the names computed once per class, read from a module global for the exact class; and the
  fields are merged into the instance dict with `|=`, which costs about 460 instructions less
  than the `.update()` method call (a method taking keywords, so CPython packs an argument
  tuple for it). `MultiAgentPolicyResponse.__init__` does the same inline instead of calling
  `super().__init__(env_id, **data)`, which would pack the keyword arguments into a new dict a
  second time; its `action` is a keyword parameter of its own, so the common response, a lone
  per-agent `action`, is bound without the `**data` dict and needs no reserved-name or
  partial-agent check (cheaper than the reference row's plain `__init__`).
* **`cpu()`** reads `tensor.is_cpu` (about 35 ns) instead of calling `tensor.cpu()` (about
  170 ns, which returns the same tensor after a dispatch), keeps a CPU tensor as the very same
  object, and keeps a container whose tensors are all on the CPU as the same object (no
  rebuild). That is why it beats the floor of raw `t.cpu()` calls.
* **`numpy()`** of a CPU tensor that needs no grad is one `tensor.numpy()` call (a view sharing
  the tensor's memory) instead of the three calls `detach().cpu().numpy()`. That call is simply
  tried on every tensor: the rare ones it refuses (requiring grad, on a device, a dtype numpy
  lacks, a conjugate bit) fall through at the cost of one exception to one
  `tensor.numpy(force=True)`, after widening a dtype numpy lacks (bfloat16, float8,
  complex32), which is cheaper than reading `requires_grad` and `is_cpu` on every tensor. A
  plain dict of per-agent tensors is converted in one inline loop.
* **Batches stay batched** (item 6): SB3's `act`/`predict` return a `ResponseBatch` holding one
  stacked response, and `env_actions` and the buffer helpers read its stacked fields, so a
  training step builds no per-env response (before: one `PolicyResponse` and two 0-d tensors per
  env, +78% over the floor at 64 envs). For on-policy models the NaN check is torch's own
  argument validation of the action distribution (the batch is scanned only when it raises, to
  name the envs): a numpy scan of every batch cost 5-10 us per step beside the forward pass.
* **`cpu()` of an all-CPU response** returns at once after one type check and one `is_cpu` per
  field (no walk, no call), which is why item 4's `cpu()` is at the floor of a raw `t.cpu()`.
* **Nothing looked up per call that can be cached**: `torch.Tensor` and the set of dtypes numpy
  lacks are cached at first use (never by importing torch), and leaves are dispatched by
  `type(x) is Tensor` / one set lookup rather than a recursive call per leaf
  (`rlightning._tree.map_tensors`). No field or leaf that needs no work is touched beyond one
  type check, and no container is rebuilt unless a tensor in it changed.
"""

CUDA_NOT_MEASURED = """\
## CUDA

Not measured: no GPU was visible to the run behind this page. The CUDA rows of items 2 and 4
(`2.cuda_*`, `4.cuda_*`: a response on the GPU through `numpy()`/`cpu()`, 64 MB device-to-host
copies plain and `non_blocking`, and a pinned host-to-device `non_blocking` copy, each against
raw torch) are measured by the same command on a machine with one, and this section then gives
the date and the GPU's name.
"""


def _cuda_section(results: dict[str, Any]) -> list[str]:
    meta = results["meta"]
    measured = [r for r in results["rows"] if "cuda" in r["case"] and r["status"] == "ok"]
    if not measured or not meta.get("gpu"):
        return [CUDA_NOT_MEASURED]
    return [
        "## CUDA",
        "",
        f"Measured on {meta['date_utc'][:10]} on an {meta['gpu']} (the `2.cuda_*` and "
        "`4.cuda_*` rows of the tables above): a response on the GPU through `numpy()` and "
        "`cpu()`, 64 MB device-to-host copies plain and `non_blocking`, and a pinned "
        "host-to-device `non_blocking` copy, each against raw torch, every operation followed "
        "by `torch.cuda.synchronize()`.",
        "",
    ]


#: Why a target is missed, by case id prefix; shown only for targets this run missed.
MISSED: dict[str, str] = {
    "1.build": (
        "The target is build + `to_dict()` within 1.25x the reference row 'SimpleNamespace "
        "subclass, Python __init__, no checks' ({py_init}, {py_init_ratio} the floor; the 2x "
        "floor target was withdrawn, see decisions.md): that row is CPython's call of a class "
        "whose `__init__` is written in Python, with nothing checked. rlightning ({ours}, "
        "{ours_ratio} the reference) adds what the API requires on top: the `env_id` type check, "
        "the reserved-name check (one `frozenset.isdisjoint` over the field names, which "
        "iterates the keyword dict: ~1,100 instructions per 4-field build counted with "
        "callgrind) and a `to_dict()` method call that leaves `env_id` and the stamps out "
        "(~460 instructions more than the reference row's `dict(vars(ns))`); its cheaper "
        "call (positional-only `self`, `|=` instead of `.update()`) wins back about 900 of them."
    ),
    "3.build": (
        "Same cause as item 1; the nested response also checks that `action` is a dict of "
        "per-agent values (a lone `action` is bound as a keyword parameter of its own, which "
        "spares the reserved-name check)."
    ),
    "4.cpu": (
        "On the CPU, `cpu()` of a CPU tensor copies nothing, so there is no memory-bandwidth "
        "floor here, only call overhead: raw `t.cpu()` is one C call, `response.cpu()` a method "
        "call plus one type check and one `is_cpu` per field, tens of nanoseconds either way. "
        "The bandwidth case on the CPU is `4.numpy_bf16` (a real copy); the device copies are "
        "the `4.cuda_*` rows. The ratio of those tens of nanoseconds moves with the machine: "
        "full runs of unchanged code on this shared machine read 0.91x to 1.37x."
    ),
    "4.numpy": (
        "Zero-copy on the CPU, as `4.cpu`: the ratio measures fixed call overhead, not bandwidth."
    ),
    "5.": (
        "torch pickles each tensor through `torch.save` into bytes (with its storage "
        "metadata), which costs hundreds of bytes per small tensor and tens of microseconds. "
        "rlightning pickles plain CPU tensors as raw buffers (out of band with protocol 5); a "
        "tensor it leaves to torch (CUDA, sparse, quantized, a subclass) costs torch's size."
    ),
    "6.": (
        "`act` and `predict` answer a batch with one stacked response in a `ResponseBatch` "
        "(split into per-env responses only when one is read), so what is left is a fixed cost "
        "per call, whatever `n_envs`: the stacked `PolicyResponse` and `ResponseBatch`, "
        "`values.ravel()` (a torch call: about 6,200 instructions), and the input checks "
        "(observation form, env ids, episode starts, the eval-mode flags of the modules whose "
        "output depends on them). Against that, the adapter makes some of SB3's own per-step "
        "calls cheaper with the same tensors (`th.from_numpy`, `.numpy()`, autograd switched "
        "off without the `no_grad` object; `predict` without `set_training_mode` and "
        "`policy.device` on every call: see docs/decisions.md). The time rows move by a few "
        "percent between runs (a row's median can sit below its floor's while its paired "
        "ratio is above 1), the round-to-round noise of a forward pass of "
        "0.1-0.7 ms on this shared machine, which is why the instruction counts below decide."
    ),
    "7.": (
        "Per agent, gymnasium's `Space.sample` alone (the floor row) took {pz_floor} in this "
        "run (about 1.2 us on a quiet machine of this kind). The adapter costs {pz_ratio} the "
        "floor at 20 agents and more, so it meets 2 us per agent when the floor is under about "
        "1.6 us; at 2 agents the fixed cost of a call (building the `MultiAgentPolicyResponse`, "
        "about 0.4 us, and `to_parallel_actions`' checks of `env.agents`, about 0.7 us) is "
        "shared by only two agents."
    ),
    "3.numpy": (
        "Against TensorDict this sits at the 0.5x line (0.45x-0.51x across runs on this shared "
        "machine): the nested case is 16 small tensors, where both spend most of their time in "
        "the same 16 `Tensor.numpy()` calls."
    ),
}


def _meta_lines(meta: dict[str, Any]) -> list[str]:
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    lines = [
        f"* Run: {meta['date_utc']}, {meta['mode']} mode, {meta['repeats']} rounds per case, "
        f"about {meta['round_target_s'] * 1e3:g} ms per round, {meta['wall_s']} s in all; "
        f"`{meta['command']}`.",
        f"* Machine: {meta['cpu']}, {meta['cpu_count']} cores shared with other work; "
        f"{meta['platform']}; torch threads: {meta['torch_threads']}; "
        f"GPU: {meta.get('gpu') or 'none visible'}.",
        f"* Versions: {versions}.",
    ]
    for name, where in meta.get("sources", {}).items():
        lines.append(f"* Source of `{name}`: `{where}`.")
    if meta.get("note"):
        lines.append(f"* Note: {meta['note']}")
    for update in meta.get("updates", []):
        what = ", ".join(f"`{c}`" for c in update["cases"])
        if update.get("instructions"):
            what += " and the instruction counts"
        sources = "; ".join(f"`{k}` from `{v}`" for k, v in update.get("sources", {}).items())
        lines.append(
            f"* Re-measured on {update['date_utc']} (`{update['command']}`): {what}; "
            f"{sources}. The other rows are from the run above."
        )
    anchors = meta.get("anchor_process")
    if anchors is not None:
        other = ", ".join(f"{k} {v}" for k, v in anchors["versions"].items())
        lines.append(f"* Anchor interpreter: `{anchors['executable']}` ({other}).")
    if meta.get("openblas_env"):
        env = ", ".join(f"{k}={v}" for k, v in meta["openblas_env"].items())
        lines.append(f"* Environment: {env} (set on this machine; left as is).")
    return lines


INSTRUCTIONS_MISSED = (
    "the table under item 6 counts each rlightning function one adapter call runs, callees "
    "included. Apart from the function that runs the forward pass (the floor's own work is "
    "inside it), the costliest at n_envs=1 are: {profile}."
)


def _costliest(section: dict[str, Any] | None, n_envs: int = 1, top: int = 4) -> str:
    """The costliest profiled functions that do not contain the forward pass, per kind."""
    if not section or not section.get("profile"):
        return "(no profile in this run)"
    parts = []
    for kind in ("predict", "act"):
        entries = [
            e
            for e in section["profile"]
            if e["kind"] == kind and e["n_envs"] == n_envs and e["status"] == "ok"
        ]
        # A function holding the forward pass costs most of the floor; the rest is overhead.
        own = [e for e in entries if e["of_floor"] < 0.5][:top]
        listed = ", ".join(
            f"`{e['function'].rsplit('.', 1)[-1]}` {e['ir_per_step']:,.0f} ({e['of_floor']:.2%})"
            for e in own
        )
        parts.append(f"`{kind}`: {listed}")
    return "; ".join(parts)


def _pz_values(rows: list[dict[str, Any]]) -> dict[str, str]:
    """Item 7's floor per agent (range over agent counts) and rlightning's ratio at 20+ agents."""
    from benchmarks.targets import ratio_to_floor

    floors, ratios = [], []
    for row in rows:
        if not row["case"].startswith("7.pz_n") or row.get("status") != "ok":
            continue
        if row["impl"] == "floor":
            floors.append(row["median_s"])
        elif row["impl"] == "rlightning" and int(row["case"].rsplit("_n", 1)[1]) >= 20:
            ratio = ratio_to_floor(rows, row)
            if ratio is not None:
                ratios.append(ratio)

    def span(values: list[str]) -> str:
        return values[0] if values[0] == values[-1] else f"{values[0]}-{values[-1]}"

    return {
        "pz_floor": span([fmt_time(v) for v in sorted(floors)]) + " per agent" if floors else "-",
        "pz_ratio": span([f"{r:.2f}x" for r in sorted(ratios)]) if ratios else "-",
    }


def _missed(results: dict[str, Any]) -> list[str]:
    rows = results["rows"]
    from benchmarks.targets import ratio_to_floor, ratio_to_impl

    py_init, ours = find(rows, "1.build", "py_init"), find(rows, "1.build", "rlightning")
    ours_ratio = ratio_to_impl(rows, "1.build", "rlightning", "py_init")
    values = {
        "ours_ratio": "-" if ours_ratio is None else f"{ours_ratio:.2f}x",
        "py_init": fmt_time(py_init["median_s"]) if py_init else "-",
        "py_init_ratio": f"{ratio_to_floor(rows, py_init):.2f}x" if py_init else "-",
        "ours": fmt_time(ours["median_s"]) if ours else "-",
        "gap": fmt_time(ours["median_s"] - py_init["median_s"]) if ours and py_init else "-",
    }
    values["profile"] = _costliest(results.get("instructions"))
    values.update(_pz_values(rows))
    lines: list[str] = []
    done: set[str] = set()
    for target in results.get("targets", []):
        if target["met"] is not False:
            continue
        if "instructions" in target["target"]:
            if "instructions" not in done:
                done.add("instructions")
                lines.append(f"* **Item 6, instructions**: {INSTRUCTIONS_MISSED.format(**values)}")
            continue
        for prefix, text in MISSED.items():
            if target["case"].startswith(prefix) and prefix not in done:
                done.add(prefix)
                label = f"`{prefix}`" if not prefix.endswith(".") else f"Item {prefix[:-1]}"
                lines.append(f"* **{label}**: {text.format(**values)}")
    unmeasured = sorted({t["case"] for t in results.get("targets", []) if t["met"] is None})
    if unmeasured:
        lines.append(
            "* **Not measured in this run** (their rows say why): "
            + ", ".join(f"`{c}`" for c in unmeasured)
            + "."
        )
    return lines or ["Every target was met in this run."]


def render(
    results: dict[str, Any],
    tables: dict[int, str],
    targets: str,
    before_after: str,
    baseline: dict[str, Any] | None,
) -> str:
    """Return the whole page for ``results`` with the per-item ``tables`` and ``targets``."""
    meta = results["meta"]
    parts = [
        "# Performance",
        "",
        "A policy response is built and converted on every environment step, so its overhead "
        "is measured against the floor of the raw torch/numpy calls and against the containers "
        "users would otherwise pick. This page is generated: `tox -e bench` "
        "(`python -m benchmarks.run`) rewrites it, `benchmarks/results.json` and the chart "
        "from one run.",
        "",
        *_meta_lines(meta),
        "",
        "## Targets",
        "",
        targets,
        "",
        "![time over the floor, per case and implementation](performance.png)",
        "",
        "### Targets missed, and why",
        "",
        *_missed(results),
        "",
        HOW,
        "## Results",
        "",
    ]
    for item, title in ITEM_TITLES.items():
        parts += [f"### {title}", "", tables[item], ""]
    parts += [FAST]
    if baseline is not None:
        parts += [
            "### Before and after",
            "",
            "rlightning before this work (the first skeleton, `benchmarks/baseline_skeleton.json`,"
            f" measured with the same harness on {baseline['meta']['date_utc']}) and now:",
            "",
            before_after,
            "",
        ]
    parts += _cuda_section(results)
    return "\n".join(parts)
