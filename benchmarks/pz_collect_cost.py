"""Instructions per agent-step of a shared-PPO rollout: SharedRolloutCollector vs SB3's own.

Issue 19 asks that collecting a shared-policy rollout through
``rlightning_pettingzoo.SharedRolloutCollector`` costs at most 1.1x SB3's ``collect_rollouts``
over a VecEnv of the agents (``benchmarks.agents_vec_env.AgentsVecEnv``, one slot per agent of
each copy: what SuperSuit's ``pettingzoo_env_to_vec_env_v1`` + ``concat_vec_envs_v1`` give SB3),
counted with callgrind, per agent-step.

What is counted. mpe2's ``simple_spread_v3`` (``max_cycles=25``), 8 copies x 3 agents (24 buffer
columns), two PPO models built alike (``seed=0``, ``n_steps`` rows per column), each prepared as
``learn()`` prepares it:

* ``collect_rollouts``: ``model.collect_rollouts`` over ``AgentsVecEnv`` (``n_steps`` forward
  passes over the 24 slots, ``env.step`` of each copy, ``RolloutBuffer.add``, GAE);
* ``rlightning``: ``SharedRolloutCollector(model, [make] * 8, seeds=[0..7]).collect()``: the
  same rollout (every agent stays: one agent per column), every action checked against
  ``env.agents`` and the spaces, the rows through ``add_rollout_step`` and ``finish_rollout``.

After the warm-up (two rollouts each, torch's global RNG seeded alike before each) the worker
checks that the two buffers hold the same observations, actions, episode starts and rewards
(exactly) and values (to float tolerance): both rows count the same work. Regions are delimited
as in :mod:`benchmarks.callgrind`; each is counted twice (two rounds), the figure is the mean.

Usage (from the repository root)::

    python -m benchmarks.pz_collect_cost                  # 2 rollouts of 32 rows, counted
    python -m benchmarks.pz_collect_cost --smoke --native # 1 rollout of 8 rows, not counted
    python -m benchmarks.pz_collect_cost --merge benchmarks/results.json   # and re-render docs

``tox -e bench`` (``benchmarks.run --callgrind``) counts it after :mod:`benchmarks.loop_cost`.
"""

from __future__ import annotations

import argparse
import gc
import json
import operator
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.callgrind import (
    VALGRIND_MISSING,
    _dump,
    _instrumentation_on,
    run_worker,
    valgrind_path,
)

N_COPIES = 8
N_STEPS = 32
N_STEPS_SMOKE = 8
ITERATIONS = 2
ITERATIONS_SMOKE = 1
#: The issue's limit: the collector's instructions over SB3's, as a fraction.
LIMIT = 0.10
IMPLS = ("collect_rollouts", "rlightning")
CASE = "19.pz_collect"


def iterations(n_copies: int, n_steps: int) -> dict[str, Callable[[], None]]:
    """The two rollouts (module docstring), each on a PPO model of its own.

    Args:
        n_copies: Env copies (x3 agents = buffer columns).
        n_steps: The models' ``n_steps`` (rows per column).

    Returns:
        ``{"collect_rollouts": ..., "rlightning": ...}``: callables of no argument, each
        collecting one rollout (mutating its model, envs and buffer); ``rlightning`` carries
        ``same_work()``, which raises ``AssertionError`` unless the two buffers agree.
    """
    import numpy as np
    from stable_baselines3 import PPO
    from stable_baselines3.common.vec_env import DummyVecEnv

    from benchmarks.agents_vec_env import AgentsVecEnv
    from rlightning_pettingzoo import SharedRolloutCollector
    from rlightning_sb3 import start_training

    try:
        from mpe2 import simple_spread_v3
    except ImportError:  # PettingZoo before MPE moved to mpe2
        from pettingzoo.mpe import simple_spread_v3

    def make() -> Any:
        return simple_spread_v3.parallel_env(max_cycles=25)

    kwargs: dict[str, Any] = {"n_steps": n_steps, "seed": 0, "device": "cpu"}
    total = 10**9
    venv = AgentsVecEnv(make, n_copies)
    sb3 = PPO("MlpPolicy", venv, batch_size=n_steps * venv.num_envs, **kwargs)
    _total, callback = sb3._setup_learn(total, None)
    callback.on_training_start(locals(), globals())

    sb3_env = sb3.env  # the VecEnv learn() steps (venv itself: it is a VecEnv already)
    assert sb3_env is not None

    def sb3_rollout() -> None:
        sb3.collect_rollouts(sb3_env, callback, sb3.rollout_buffer, n_rollout_steps=n_steps)

    import gymnasium as gym

    space = make()
    agent = space.possible_agents[0]

    class Slot(gym.Env[Any, Any]):
        observation_space = space.observation_space(agent)
        action_space = space.action_space(agent)

        def reset(self, *, seed: int | None = None, options: Any = None) -> Any:
            return np.zeros(self.observation_space.shape or (), np.float32), {}

    ours = PPO(
        "MlpPolicy",
        DummyVecEnv([Slot] * venv.num_envs),
        batch_size=n_steps * venv.num_envs,
        **kwargs,
    )
    start_training(ours, total)
    collector = SharedRolloutCollector(ours, [make] * n_copies, seeds=list(range(n_copies)))

    def our_rollout() -> None:
        collector.collect()

    def same_work() -> None:
        a, b = sb3.rollout_buffer, ours.rollout_buffer
        for name in ("observations", "actions", "episode_starts", "rewards"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        np.testing.assert_allclose(a.values, b.values, rtol=1e-5, atol=1e-6)

    our_rollout.same_work = same_work  # type: ignore[attr-defined]
    return {"collect_rollouts": sb3_rollout, "rlightning": our_rollout}


def _loop(call: Callable[[], None], n: int) -> None:
    for _ in range(n):
        call()


def worker(n_copies: int, n_steps: int, calls: int, out: Path, instr_on: bool) -> None:
    """Run the regions (under callgrind) and write their names to ``out``.

    Regions, in order (callgrind's dump files ``.1``, ``.2``, ...): for each round (2) and
    implementation, a loop of ``calls`` rollouts and a loop of 0.
    """
    import torch

    torch.set_num_threads(1)
    from stable_baselines3.common.utils import set_random_seed

    impls = iterations(n_copies, n_steps)
    for i in range(2):  # warm up; both models draw from torch's global RNG, seeded alike
        for call in impls.values():
            set_random_seed(i)
            call()
    impls["rlightning"].same_work()  # type: ignore[attr-defined]
    if instr_on:
        _instrumentation_on()
    regions: list[dict[str, Any]] = []
    for round_ in range(2):
        for impl in IMPLS:
            for n in (calls, 0):
                gc.collect()
                gc.disable()
                try:
                    operator.call(_loop, impls[impl], n)
                finally:
                    gc.enable()
                _dump()
                regions.append({"round": round_, "impl": impl, "calls": n})
    payload = {"n_copies": n_copies, "n_steps": n_steps, "calls": calls, "regions": regions}
    out.write_text(json.dumps(payload))


def summarise(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per implementation: instructions per agent-step (per round and mean), ratio."""
    regions = payload["regions"]
    agent_steps = payload["calls"] * payload["n_steps"] * payload["n_copies"] * 3
    rows: list[dict[str, Any]] = []
    per_round: dict[str, list[float]] = {}
    for impl in IMPLS:
        row: dict[str, Any] = {
            "case": CASE,
            "impl": impl,
            "n_copies": payload["n_copies"],
            "n_steps": payload["n_steps"],
            "iterations": payload["calls"],
        }
        if not all("ir" in r for r in regions):
            row.update(
                status="skipped", reason="run without valgrind: the regions were not counted"
            )
            rows.append(row)
            continue
        counts = []
        for round_ in (0, 1):
            full, empty = (
                next(
                    r["ir"]
                    for r in regions
                    if r["round"] == round_ and r["impl"] == impl and r["calls"] == n
                )
                for n in (payload["calls"], 0)
            )
            counts.append((full - empty) / agent_steps)
        per_round[impl] = counts
        row.update(status="ok", ir_per_agent_step=sum(counts) / 2, ir_per_step_rounds=counts)
        if impl != "collect_rollouts":
            floor = per_round["collect_rollouts"]
            row["ratio_rounds"] = [a / b for a, b in zip(counts, floor, strict=True)]
            row["ratio"] = row["ir_per_agent_step"] / (sum(floor) / 2)
        rows.append(row)
    return rows


def measure(smoke: bool = False, native: bool = False) -> dict[str, Any]:
    """Count both rollouts: the ``pz_collect_cost`` section of a results file.

    Args:
        smoke: One rollout of 8 rows.
        native: Run the regions without valgrind (nothing counted; the rows say why).

    Raises:
        RuntimeError: valgrind is missing (full mode), or the worker failed.
    """
    use_valgrind = valgrind_path() is not None and not native
    if not use_valgrind and not (smoke or native):
        raise RuntimeError(VALGRIND_MISSING)
    n_steps = N_STEPS_SMOKE if smoke else N_STEPS
    calls = ITERATIONS_SMOKE if smoke else ITERATIONS
    args = ["--n-copies", str(N_COPIES), "--n-steps", str(n_steps), "--calls", str(calls)]
    payload = run_worker("benchmarks.pz_collect_cost", args, N_COPIES, use_valgrind)
    return {
        "meta": {
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "mode": ("smoke" if smoke else "full") + (" (native, not counted)" if native else ""),
            "n_copies": N_COPIES,
            "n_steps": n_steps,
            "iterations": calls,
            "python": sys.version.split()[0],
            "wall_s": payload["wall_s"],
        },
        "rows": summarise(payload),
    }


def targets(section: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The issue's target (``<= 1.1x``) from a ``pz_collect_cost`` section."""
    row = None
    if section is not None:
        row = next(
            (r for r in section["rows"] if r["impl"] == "rlightning" and r["status"] == "ok"),
            None,
        )
    value = None if row is None else float(row["ratio"])
    return [
        {
            "item": 19,
            "case": CASE,
            "target": f"a shared-PPO rollout through SharedRolloutCollector <= {1 + LIMIT:.1f}x "
            "SB3's collect_rollouts over a VecEnv of the agents, per agent-step, counted with "
            f"callgrind (simple_spread, {N_COPIES} copies x 3 agents)",
            "value": value,
            "limit": 1 + LIMIT,
            "unit": "x",
            "met": None if value is None else bool(value <= 1 + LIMIT),
        }
    ]


def table(section: dict[str, Any] | None) -> str:
    """The markdown table of a ``pz_collect_cost`` section (for docs/performance.md)."""
    if not section:
        return (
            "Shared-policy rollout (issue 19): not measured in this run (`python -m "
            "benchmarks.pz_collect_cost`, needs valgrind)."
        )
    meta = section["meta"]
    lines = [
        "A shared-PPO rollout through `SharedRolloutCollector` against SB3's `collect_rollouts` "
        f"over a VecEnv of the agents (issue 19), counted with callgrind (Python "
        f"{meta['python']}, {meta['date_utc']}, {meta['mode']} mode): simple_spread_v3, "
        f"{meta['n_copies']} copies x 3 agents, {meta['iterations']} rollouts of "
        f"{meta['n_steps']} rows, env steps included (`python -m benchmarks.pz_collect_cost`).",
        "",
        "| case | implementation | instructions per agent-step | ratio | each round |",
        "|---|---|---:|---:|---:|",
    ]
    for row in section["rows"]:
        if row["status"] != "ok":
            lines.append(f"| `{row['case']}` | {row['impl']} | skipped: {row['reason']} | | |")
            continue
        ratio = f"{row['ratio']:.4f}x" if "ratio" in row else ""
        rounds = " / ".join(f"{v:.4f}x" for v in row.get("ratio_rounds", []))
        lines.append(
            f"| `{row['case']}` | {row['impl']} | {row['ir_per_agent_step']:,.0f} | {ratio} "
            f"| {rounds} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="1 rollout of 8 rows")
    parser.add_argument(
        "--native", action="store_true", help="run the regions without valgrind (no counts)"
    )
    parser.add_argument("--out", type=Path, help="write the pz_collect_cost section here (JSON)")
    parser.add_argument("--merge", type=Path, help="results file to merge into (and render)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--n-copies", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--n-steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--regions", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--instr-on", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.n_copies, args.n_steps, args.calls, args.regions, args.instr_on)
        return 0
    try:
        section = measure(args.smoke, args.native)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(table(section))
    if args.out is not None:
        args.out.write_text(json.dumps(section, indent=1) + "\n")
    if args.merge is not None:
        merge(section, args.merge)
        print(f"merged into {args.merge} and rewrote docs/performance.md")
    return 0


def merge(section: dict[str, Any], results_path: Path) -> None:
    """Put ``section`` into the results file, re-check the targets, re-render the docs page.

    Mutates ``results_path`` (its ``pz_collect_cost`` and ``targets``) and rewrites
    ``docs/performance.md`` and its chart, as ``benchmarks.loop_cost --merge`` does.
    """
    from benchmarks.callgrind import ROOT
    from benchmarks.report import write_docs
    from benchmarks.targets import evaluate

    results = json.loads(results_path.read_text())
    results["pz_collect_cost"] = section
    results["targets"] = evaluate(
        results["rows"], results.get("instructions"), results.get("loop_cost"), section
    )
    results_path.write_text(json.dumps(results, indent=1) + "\n")
    baseline_path = ROOT / "benchmarks" / "baseline_skeleton.json"
    baseline = json.loads(baseline_path.read_text()) if baseline_path.exists() else None
    write_docs(results, ROOT / "docs", baseline)


if __name__ == "__main__":
    raise SystemExit(main())
