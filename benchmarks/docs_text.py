"""The prose of ``docs/performance.md``; the figures are filled in from one run's results."""

from __future__ import annotations

from typing import Any

from benchmarks.report import ITEM_TITLES

HOW = """\
## How it is measured

* Every case is measured side by side in the same rounds: rlightning, the **floor** (the least
  code that does the same work by hand) and the anchors (`tensordict.TensorDict`, Tianshou's
  `Batch`). Each round runs each implementation `n` times back to back (`n` is calibrated so a
  round takes a few milliseconds) in a fresh random order, with the garbage collector off; the
  table gives the **median** time per operation over all rounds and the quartiles beside it.
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
* torch runs with one thread (`torch.set_num_threads(1)`): the machine is shared, and every
  implementation gets the same.
* Tianshou's `Batch` is measured by a second interpreter (its own virtual environment) in the
  same run when it is not installed beside rlightning: its rows say "anchor interpreter", that
  interpreter measures the floors again beside it, and rlightning's ratio to `Batch` is taken
  through each interpreter's own floor (rlightning / its floor, over Batch / its floor).
"""

CUDA = """\
## CUDA

Not measured yet: the machine that produced these figures has no GPU. The CUDA side (pinned
memory and `non_blocking` copies against raw torch) is to be added, with the date and the GPU's
name, from a run on a machine that has one.
"""


def _meta_lines(meta: dict[str, Any]) -> list[str]:
    versions = ", ".join(f"{k} {v}" for k, v in meta["versions"].items())
    lines = [
        f"* Run: {meta['date_utc']}, {meta['mode']} mode, {meta['repeats']} rounds per case, "
        f"about {meta['round_target_s'] * 1e3:g} ms per round, {meta['wall_s']} s in all.",
        f"* Machine: {meta['cpu']}, {meta['cpu_count']} cores shared with other work; "
        f"{meta['platform']}.",
        f"* Versions: {versions}.",
    ]
    anchors = meta.get("anchor_process")
    if anchors is not None:
        other = ", ".join(f"{k} {v}" for k, v in anchors["versions"].items())
        lines.append(f"* Anchor interpreter: `{anchors['executable']}` ({other}).")
    if meta.get("openblas_env"):
        env = ", ".join(f"{k}={v}" for k, v in meta["openblas_env"].items())
        lines.append(f"* Environment: {env} (set on this machine; left as is).")
    return lines


def render(results: dict[str, Any], tables: dict[int, str], targets: str) -> str:
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
        HOW,
        "## Results",
        "",
    ]
    for item, title in ITEM_TITLES.items():
        parts += [f"### {title}", "", tables[item], ""]
    parts += [CUDA]
    return "\n".join(parts)
