"""Instructions per env step of the Ray local mode's runner against its floor loop (issue 20).

``tox -e bench-ray`` times the local mode (``start_runners(..., policy=...)``: each
``EnvRunner`` acts with its own SB3 replica) against a "floor" row: the same actors running a
bare loop of ``DummyVecEnv.step`` and ``SB3PolicyAdapter.act`` with no fragments, stamps or
checks. On a noisy shared machine those times move with other people's load; instruction
counts do not. This driver counts, with valgrind's callgrind, the per-step cost of the two
loops in one process, on the same envs and model:

* ``floor``: ``benchmarks.ray_bench.FloorRunner.steps(n_steps)`` (the bench's floor row, the
  same code), its ``DummyVecEnv`` of ``k`` CartPole-v1 envs seeded ``0..k-1``;
* ``runner``: ``EnvRunner.sample(n_steps)`` of a local-mode runner (``policy=partial(
  SB3BatchPolicy, make_model)``, the bench's factory; the weights loaded as a publish loads
  them) over ``k`` CartPole-v1 envs seeded ``0..k-1``: the answers stamped and versioned, every
  check of the server mode, the fragment built. The runner is the actor's class itself, built
  in this process (:class:`InProcessRunner` only replaces the constructor's read of the Ray
  actor context: not restarted, a fixed incarnation); nothing crosses Ray.

Both models are the bench's ``make_model(k)`` (PPO ``MlpPolicy``, ``seed=0``). After the
warm-up (two fragments each, torch's global RNG seeded alike before each) the worker checks that
the two loops stand at the same observations (exactly): they did the same work, action for
action. Regions are delimited as in :mod:`benchmarks.callgrind` (its markers, its malloc
setting); each is counted twice, and the figure is the mean. The ratio ``runner / floor`` is
the instructions the runner spends per env step over the floor's: 1.0 would be a runner as
cheap as the bare loop (the bench's target is a local/floor steps-per-second ratio >= 0.9).

Usage (from the repository root)::

    python -m benchmarks.ray_runner_cost                  # k=4, 2 fragments of 32 steps
    python -m benchmarks.ray_runner_cost --smoke --native # 1 fragment of 8 steps, not counted
    python -m benchmarks.ray_runner_cost --write-docs     # and update docs/ray.md

``tox -e bench-ray`` runs it with ``--write-docs`` (needs valgrind: Debian/Ubuntu
``apt-get install -y valgrind``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from benchmarks.callgrind import RolloutCost

ENVS_PER_RUNNER = 4
N_STEPS = 32
N_STEPS_SMOKE = 8
FRAGMENTS = 2
FRAGMENTS_SMOKE = 1
#: The bench's local/floor target is >= 0.9x in steps per second: at most 1/0.9 the work.
LIMIT = 1 / 0.9 - 1
IMPLS = ("floor", "runner")
CASE = "20.ray_runner_local"
ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "ray.md"
START, END = "<!-- ray-runner-cost:start -->", "<!-- ray-runner-cost:end -->"


def iterations(k: int, n_steps: int) -> dict[str, Callable[[], None]]:
    """The two loops (module docstring), each with its own envs and model.

    Args:
        k: Envs of each loop.
        n_steps: Steps per env of each call.

    Returns:
        ``{"floor": ..., "runner": ...}``: callables of no argument, each running ``n_steps``
        steps of its ``k`` envs (mutating its envs and model); ``runner`` carries
        ``same_work()``, which raises ``AssertionError`` unless both loops' envs stand at the
        same observations.
    """
    from functools import partial

    import numpy as np

    from benchmarks.ray_bench import FloorRunner, cartpole, make_model
    from rlightning_ray.runner import EnvRunner
    from rlightning_ray.sb3 import SB3BatchPolicy, policy_weights

    class InProcessRunner(EnvRunner):
        """The actor's class, built in this process: no Ray actor context to read."""

        def _actor_identity(self) -> tuple[bool, str]:
            return False, "in-process"

    floor = FloorRunner(cartpole, k)
    floor.venv.seed(0)  # env i seeded i, as the runner's
    floor.obs = floor.venv.reset()
    runner = InProcessRunner(
        "runner-0",
        [cartpole] * k,
        None,
        seeds=list(range(k)),
        policy=partial(SB3BatchPolicy, partial(make_model, k)),
    )
    local = runner._local
    assert local is not None
    local.policy.set_weights(policy_weights(floor.adapter.model))  # the same weights

    def floor_loop() -> None:
        floor.steps(n_steps)

    def runner_loop() -> None:
        runner.sample(n_steps)

    def same_work() -> None:
        ours = runner.group.observe()
        np.testing.assert_array_equal(ours.observation, floor.obs, err_msg="observations")
        np.testing.assert_array_equal(ours.episode_start, floor.starts, err_msg="dones")

    runner_loop.same_work = same_work  # type: ignore[attr-defined]
    return {"floor": floor_loop, "runner": runner_loop}


BENCH = RolloutCost(
    module="benchmarks.ray_runner_cost",
    section="ray_runner_cost",
    doc=__doc__ or "",
    iterations=iterations,
    size_arg="k",
    sizes=(ENVS_PER_RUNNER,),
    smoke_sizes=(ENVS_PER_RUNNER,),
    n_steps=N_STEPS,
    n_steps_smoke=N_STEPS_SMOKE,
    calls=FRAGMENTS,
    calls_smoke=FRAGMENTS_SMOKE,
    units=lambda payload: payload["calls"] * payload["n_steps"] * payload["k"],  # env steps
    per_key="ir_per_step",
    ok_extra={},
    meta_size=True,
    case=lambda k: CASE,
    item=20,
    limit=LIMIT,
    target_text=lambda k: (
        f"a local-mode EnvRunner.sample over {k} CartPole envs <= {1 + LIMIT:.2f}x the "
        "instructions per env step of the bench's floor loop (DummyVecEnv.step + "
        "SB3PolicyAdapter.act), counted with callgrind"
    ),
    intro=lambda meta: (
        "The local mode's runner against its floor loop, counted with callgrind (Python "
        f"{meta['python']}, {meta['date_utc']}, {meta['mode']} mode): one `EnvRunner` "
        f"(local mode, SB3 PPO `MlpPolicy`) over {meta['k']} CartPole-v1 envs, "
        f"{meta['iterations']} fragments of {meta['n_steps']} steps, in one process (no Ray "
        "call), against the bench's floor loop (`DummyVecEnv.step` + `SB3PolicyAdapter.act`) "
        "on the same envs and model; env steps and inference included "
        "(`python -m benchmarks.ray_runner_cost`)."
    ),
    unit_header="instructions per env step",
    missing=(
        "Local-mode runner cost (issue 20): not measured in this run (`python -m "
        "benchmarks.ray_runner_cost`, needs valgrind)."
    ),
    smoke_help="1 fragment of 8 steps",
    impls=IMPLS,
)

#: The driver's parts (benchmarks.callgrind.RolloutCost).
summarise = BENCH.summarise
measure = BENCH.measure
targets = BENCH.targets
table = BENCH.table


def write_docs(text: str, docs: Path = DOCS) -> None:
    """Put ``text`` into ``docs`` between the ``ray-runner-cost`` markers (appended if absent)."""
    body = docs.read_text()
    if START in body and END in body:
        head, rest = body.split(START, 1)
        body = head + START + "\n" + text + "\n" + END + rest.split(END, 1)[1]
    else:
        body = body.rstrip("\n") + f"\n\n{START}\n{text}\n{END}\n"
    docs.write_text(body)


def main(argv: list[str] | None = None) -> int:
    """:meth:`RolloutCost.main <benchmarks.callgrind.RolloutCost.main>`, plus ``--write-docs``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--write-docs" not in args:
        return BENCH.main(args)
    args.remove("--write-docs")
    if "--worker" in args:
        return BENCH.main(args)
    try:
        section = BENCH.measure("--smoke" in args, "--native" in args)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    text = BENCH.table(section)
    print(text)
    write_docs(text)
    print(f"written to {DOCS.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
