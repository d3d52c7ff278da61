"""Instructions of one training iteration through responses against SB3's own (issue 20).

The issue "Scale-out faster than RLlib" asks that an in-process training iteration through
responses -- ``SB3PolicyAdapter.act`` + ``add_rollout_step`` + ``finish_rollout``, the env steps
included -- costs at most 1.03x the instructions of SB3's ``collect_rollouts`` on the same envs
and model, counted with callgrind at ``n_envs`` 1 and 8.

What is counted. Two PPO models on CartPole-v1, built the same way (``make_vec_env(...,
seed=0)``, ``seed=0``, ``n_steps`` steps per rollout), each prepared as ``learn()`` prepares it:

* ``collect_rollouts``: one iteration of ``OnPolicyAlgorithm.learn``'s loop without ``train()``:
  ``collect_rollouts`` (``n_steps`` env steps, each a forward pass, ``env.step``, the callback,
  ``RolloutBuffer.add``; then ``compute_returns_and_advantage``), then the loop's
  bookkeeping (``iteration += 1``, ``_update_current_progress_remaining``, ``dump_logs`` at
  ``log_interval=1``, which ``finish_rollout`` also does);
* ``rlightning``: the loop of docs/sb3.md "Training": ``n_steps`` times ``act``,
  ``env.step(adapter.env_actions(...))`` and ``add_rollout_step(..., new_observation=...)``,
  then ``finish_rollout``.

After the warm-up (two iterations each, torch's global RNG seeded alike before each) the
worker checks that the two rollout buffers hold the same observations, actions, episode starts
and rewards (exactly) and values (to float tolerance): the two rows count the same work. Regions
are delimited as in :mod:`benchmarks.callgrind` (its markers, its malloc setting); each is
counted twice, and the figure is the mean.

Usage (from the repository root)::

    python -m benchmarks.loop_cost                   # n_envs 1 and 8, 4 iterations of 32 steps
    python -m benchmarks.loop_cost --smoke           # n_envs 1, 1 iteration of 8 steps
    python -m benchmarks.loop_cost --merge benchmarks/results.json   # and re-render the docs

Without valgrind the full mode stops with an error; ``--smoke`` then runs the regions without
counting them.
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
    ROOT,
    VALGRIND_MISSING,
    _dump,
    _instrumentation_on,
    run_worker,
    valgrind_path,
)

N_ENVS = (1, 8)
N_STEPS = 32
N_STEPS_SMOKE = 8
ITERATIONS = 4
ITERATIONS_SMOKE = 1
#: The issue's limit: the response loop's instructions over SB3's, as a fraction.
LIMIT = 0.03
IMPLS = ("collect_rollouts", "rlightning")


def iterations(n_envs: int, n_steps: int) -> dict[str, Callable[[], None]]:
    """The two training iterations (module docstring), each on a model of its own.

    Args:
        n_envs: Envs of each model's ``make_vec_env`` VecEnv.
        n_steps: The models' ``n_steps`` (steps per rollout).

    Returns:
        ``{"collect_rollouts": ..., "rlightning": ...}``: callables of no argument, each running
        one iteration (and mutating its model, env and buffer).
    """
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    from rlightning_sb3 import SB3PolicyAdapter, add_rollout_step, finish_rollout, start_training

    def model() -> Any:
        env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=0)
        return PPO(
            "MlpPolicy", env, n_steps=n_steps, batch_size=n_steps * n_envs, seed=0, device="cpu"
        )

    total = 10**9
    sb3 = model()
    _total, callback = sb3._setup_learn(total, None)
    callback.on_training_start(locals(), globals())
    iteration = [0]

    def sb3_iteration() -> None:
        sb3.collect_rollouts(sb3.env, callback, sb3.rollout_buffer, n_rollout_steps=n_steps)
        iteration[0] += 1
        sb3._update_current_progress_remaining(sb3.num_timesteps, total)
        sb3.dump_logs(iteration[0])

    ours = model()
    adapter = SB3PolicyAdapter(ours)
    env = ours.get_env()
    env_ids = [f"env-{i}" for i in range(n_envs)]
    state = {"obs": start_training(ours, total)}
    state["starts"] = adapter.load_training_state(env_ids)

    def our_iteration() -> None:
        obs, starts = state["obs"], state["starts"]
        responses: Any = None
        dones: Any = None
        for _ in range(n_steps):
            responses = adapter.act(obs, env_ids, episode_start=starts)
            new_obs, rewards, dones, infos = env.step(adapter.env_actions(responses, env_ids))
            add_rollout_step(
                ours,
                obs,
                responses,
                rewards,
                dones,
                infos,
                env_ids=env_ids,
                new_observation=new_obs,
            )
            obs, starts = new_obs, dones
        finish_rollout(ours, obs, dones, responses=responses, env_ids=env_ids)
        state["obs"], state["starts"] = obs, dones

    def same_work() -> None:
        import numpy as np

        a, b = sb3.rollout_buffer, ours.rollout_buffer
        for name in ("observations", "actions", "episode_starts", "rewards"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
        np.testing.assert_allclose(a.values, b.values, rtol=1e-5, atol=1e-6)

    our_iteration.same_work = same_work  # type: ignore[attr-defined]
    return {"collect_rollouts": sb3_iteration, "rlightning": our_iteration}


def _loop(call: Callable[[], None], n: int) -> None:
    for _ in range(n):
        call()


def worker(n_envs: int, n_steps: int, calls: int, out: Path, instr_on: bool) -> None:
    """Run the regions of one ``n_envs`` (under callgrind) and write their names to ``out``.

    Regions, in order (callgrind's dump files ``.1``, ``.2``, ...): for each round (2) and
    implementation, a loop of ``calls`` iterations and a loop of 0.
    """
    import torch

    torch.set_num_threads(1)
    from stable_baselines3.common.utils import set_random_seed

    impls = iterations(n_envs, n_steps)
    for i in range(2):  # warm up (bytecode specialisation, lazy imports), the same iterations:
        for call in impls.values():  # both models draw from torch's global RNG, seeded alike
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
    out.write_text(
        json.dumps({"n_envs": n_envs, "n_steps": n_steps, "calls": calls, "regions": regions})
    )


def run_one(n_envs: int, n_steps: int, calls: int, use_valgrind: bool) -> dict[str, Any]:
    """Run the worker for ``n_envs`` (under callgrind when ``use_valgrind``); regions + counts.

    Raises:
        RuntimeError: valgrind is missing (with ``use_valgrind``) or the worker failed.
    """
    args = ["--n-envs", str(n_envs), "--n-steps", str(n_steps), "--calls", str(calls)]
    return run_worker("benchmarks.loop_cost", args, n_envs, use_valgrind)


def summarise(payload: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per implementation: instructions per env step (per round and mean), ratio."""
    regions, n_envs = payload["regions"], payload["n_envs"]
    steps = payload["calls"] * payload["n_steps"]
    rows: list[dict[str, Any]] = []
    measured = all("ir" in r for r in regions)
    per_round: dict[str, list[float]] = {}
    for impl in IMPLS:
        row: dict[str, Any] = {
            "case": f"20.loop_n{n_envs}",
            "impl": impl,
            "n_envs": n_envs,
            "n_steps": payload["n_steps"],
            "iterations": payload["calls"],
        }
        if not measured:
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
            counts.append((full - empty) / steps)
        per_round[impl] = counts
        row.update(status="ok", ir_per_step=sum(counts) / 2, ir_per_step_rounds=counts, wall_s=None)
        if impl != "collect_rollouts":
            floor = per_round["collect_rollouts"]
            row["ratio_rounds"] = [a / b for a, b in zip(counts, floor, strict=True)]
            row["ratio"] = row["ir_per_step"] / (sum(floor) / 2)
        rows.append(row)
    return rows


def measure(smoke: bool = False, native: bool = False) -> dict[str, Any]:
    """Count both iterations for every ``n_envs``: the ``loop_cost`` section of a results file.

    Args:
        smoke: ``n_envs=1``, one iteration of 8 steps.
        native: Run the regions without valgrind (nothing counted; the rows say why): the code
            path alone, in seconds (the test suite's smoke test).

    Raises:
        RuntimeError: valgrind is missing (full mode), or a worker failed.
    """
    use_valgrind = valgrind_path() is not None and not native
    if not use_valgrind and not (smoke or native):
        raise RuntimeError(VALGRIND_MISSING)
    n_steps = N_STEPS_SMOKE if smoke else N_STEPS
    calls = ITERATIONS_SMOKE if smoke else ITERATIONS
    rows: list[dict[str, Any]] = []
    wall = 0.0
    for n_envs in (1,) if smoke else N_ENVS:
        payload = run_one(n_envs, n_steps, calls, use_valgrind)
        rows += summarise(payload)
        wall += payload["wall_s"]
    return {
        "meta": {
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "mode": ("smoke" if smoke else "full") + (" (native, not counted)" if native else ""),
            "n_steps": n_steps,
            "iterations": calls,
            "python": sys.version.split()[0],
            "wall_s": round(wall, 1),
        },
        "rows": rows,
    }


def targets(section: dict[str, Any] | None) -> list[dict[str, Any]]:
    """The issue's targets (``<= 1.03x`` at ``n_envs`` 1 and 8) from a ``loop_cost`` section."""
    out = []
    for n_envs in N_ENVS:
        row = None
        if section is not None:
            row = next(
                (
                    r
                    for r in section["rows"]
                    if r["n_envs"] == n_envs and r["impl"] == "rlightning" and r["status"] == "ok"
                ),
                None,
            )
        value = None if row is None else float(row["ratio"])
        out.append(
            {
                "item": 20,
                "case": f"20.loop_n{n_envs}",
                "target": "a training iteration through responses <= "
                f"{1 + LIMIT:.2f}x SB3's collect_rollouts, counted with callgrind, at "
                f"n_envs={n_envs}",
                "value": value,
                "limit": 1 + LIMIT,
                "unit": "x",
                "met": None if value is None else bool(value <= 1 + LIMIT),
            }
        )
    return out


def table(section: dict[str, Any] | None) -> str:
    """The markdown table of a ``loop_cost`` section (for docs/performance.md)."""
    if not section:
        return (
            "Training iteration (issue 20): not measured in this run (`python -m "
            "benchmarks.loop_cost --merge benchmarks/results.json`, needs valgrind)."
        )
    meta = section["meta"]
    lines = [
        f"A training iteration through responses against SB3's own (issue 20), counted with "
        f"callgrind (Python {meta['python']}, {meta['date_utc']}, {meta['mode']} mode): CartPole "
        f"PPO, {meta['iterations']} iterations of {meta['n_steps']} steps, env steps included "
        "(`python -m benchmarks.loop_cost`; what each row runs is in its docstring).",
        "",
        "| case | implementation | instructions per env step | ratio | each round |",
        "|---|---|---:|---:|---:|",
    ]
    for row in section["rows"]:
        if row["status"] != "ok":
            lines.append(f"| `{row['case']}` | {row['impl']} | skipped: {row['reason']} | | |")
            continue
        ratio = f"{row['ratio']:.4f}x" if "ratio" in row else ""
        rounds = " / ".join(f"{v:.4f}x" for v in row.get("ratio_rounds", []))
        lines.append(
            f"| `{row['case']}` | {row['impl']} | {row['ir_per_step']:,.0f} | {ratio} | {rounds} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="n_envs=1, 1 iteration of 8 steps")
    parser.add_argument(
        "--native", action="store_true", help="run the regions without valgrind (no counts)"
    )
    parser.add_argument("--out", type=Path, help="write the loop_cost section here (JSON)")
    parser.add_argument("--merge", type=Path, help="results file to merge into (and render)")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--n-envs", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--n-steps", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--regions", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--instr-on", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.n_envs, args.n_steps, args.calls, args.regions, args.instr_on)
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
        from benchmarks.report import write_docs
        from benchmarks.targets import evaluate

        results = json.loads(args.merge.read_text())
        results["loop_cost"] = section
        results["targets"] = evaluate(
            results["rows"],
            results.get("instructions"),
            results["loop_cost"],
            results.get("pz_collect_cost"),
        )
        args.merge.write_text(json.dumps(results, indent=1) + "\n")
        baseline_path = ROOT / "benchmarks" / "baseline_skeleton.json"
        baseline = json.loads(baseline_path.read_text()) if baseline_path.exists() else None
        write_docs(results, ROOT / "docs", baseline)
        print(f"merged into {args.merge} and rewrote docs/performance.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
