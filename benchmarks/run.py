"""Run every benchmark side by side, write ``benchmarks/results.json`` and ``docs/performance.md``.

Usage (from the repository root)::

    python -m benchmarks.run                     # full run: results.json, docs page and chart
    python -m benchmarks.run --smoke --out X     # seconds: every row, few repeats, no docs
    python -m benchmarks.run --render-only       # rewrite the docs from benchmarks/results.json
    python -m benchmarks.run --callgrind         # also item 6's instruction counts (valgrind)
    python -m benchmarks.run --cases 1.build --update   # re-measure cases into results.json
    python -m benchmarks.run --anchor-python /path/to/venv/bin/python

Anchors whose library is not importable in this interpreter (Tianshou's ``Batch`` pins its own
dependencies) are measured in the same run by ``--anchor-python`` (or the environment variable
``RLIGHTNING_BENCH_ANCHOR_PYTHON``): that interpreter runs this module on the missing
implementations and the floors beside them, and its rows are merged into one table, marked
``"process": "anchors"``. Without an anchor interpreter their rows are present and say why they
were skipped. (Tianshou 2.0.1 installs beside gymnasium 1.4, so one environment with everything
installed measures all rows in one process; ``benchmarks/requirements-anchors.txt`` makes a
separate anchor environment where that is not so.)

``--callgrind`` adds item 6's instruction counts (``benchmarks.callgrind``: valgrind's
callgrind, adapter overhead over the floor in instructions, and where it goes); it stops with an
error when valgrind is not installed. ``--update`` re-measures only ``--cases`` and replaces
their rows in the existing results file (the page then says which rows were re-measured when).
Targets are evaluated again from the rows whenever the page is written, so ``--render-only``
shows the current targets.

Paths written into the results file and the page are relative to the repository (a path outside
it is shortened to its last parts).

Exit status: 0, or 1 when a row the results must have is missing (every case and
implementation has a row, measured or saying why it was skipped), or valgrind is missing for
``--callgrind``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: (repeats, seconds per round) for the full run and the smoke run.
FULL = (101, 0.0015)
SMOKE = (2, 0.0005)


def _specs() -> dict[str, tuple[int, str, str, tuple[str, ...]]]:
    from benchmarks import cases_adapters, cases_core, cases_cuda

    specs = {}
    for module in (cases_core, cases_cuda, cases_adapters):
        for case, item, title, floor in module.CASES:
            specs[case] = (item, title, floor, module.CASE_IMPLS[case])
    return specs


def expected_rows() -> list[tuple[str, str]]:
    """Every (case, impl) pair a results file must have a row for."""
    return [(case, impl) for case, (*_, impls) in _specs().items() for impl in impls]


def _benches(case: str, impls: tuple[str, ...]) -> list[Any]:
    from benchmarks import cases_adapters, cases_core, cases_cuda

    if case in cases_core.CASE_IMPLS:
        return cases_core.core_benches(case, impls)
    if case in cases_cuda.CASE_IMPLS:
        return cases_cuda.cuda_benches(case, impls)
    return cases_adapters.adapter_benches(case, impls)


def _unavailable_here(impl: str) -> str | None:
    from benchmarks.cases_core import impl_available

    return impl_available(impl)


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in (
        "torch",
        "numpy",
        "gymnasium",
        "tensordict",
        "tianshou",
        "stable-baselines3",
        "pettingzoo",
    ):
        with contextlib.suppress(metadata.PackageNotFoundError):
            out[dist] = metadata.version(dist)
    return out


def portable_path(path: str | Path) -> str:
    """``path`` relative to the repository, or its last parts when outside it (no absolute path).

    A path under ``site-packages`` keeps what follows ``site-packages``; a path into another
    checkout of this repository keeps its part inside the repository; any other keeps its last
    two parts (``bin/python3.11``).
    """
    resolved = Path(path).resolve() if Path(path).exists() else Path(path)
    with contextlib.suppress(ValueError):
        return resolved.relative_to(ROOT).as_posix() or "."
    parts = resolved.parts
    if "site-packages" in parts:
        return "site-packages/" + "/".join(parts[parts.index("site-packages") + 1 :])
    for i in range(1, len(parts) - 1):  # another checkout of this repository: its inner path
        inner = Path(*parts[i:])
        if len(inner.parts) > 1 and (ROOT / inner).exists():
            return inner.as_posix()
    return "/".join(parts[-2:])


def _sources() -> dict[str, str]:
    """Where each rlightning package was imported from, with its git commit (and "+dirty")."""
    import importlib

    out = {}
    for name in ("rlightning", "rlightning.testing", "rlightning_sb3", "rlightning_pettingzoo"):
        try:
            module = importlib.import_module(name)
        except Exception:  # not installed, or an adapter refusing this environment
            continue
        path = Path(str(module.__file__)).resolve()
        folder = path.parent
        commit = ""
        if shutil.which("git") is not None:  # without git the page names no commit
            git = ["git", "-C", str(folder)]
            head = subprocess.run(
                [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
            )
            dirty = subprocess.run(
                [*git, "status", "--porcelain", "--", "."],
                capture_output=True,
                text=True,
                check=False,
            )
            commit = head.stdout.strip()
            if commit and dirty.stdout.strip():
                commit += "+dirty"
        where = portable_path(path.parent)
        out[name] = f"{where} @ {commit}" if commit else where
    return out


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def measure_cases(
    cases: list[str], impls: set[str] | None, repeats: int, target_s: float, process: str
) -> list[dict[str, Any]]:
    """Measure ``cases`` in this process (only ``impls`` when given); rows in case order."""
    from benchmarks._harness import measure

    specs = _specs()
    rows: list[dict[str, Any]] = []
    for case in cases:
        item, title, floor, case_impls = specs[case]
        chosen = tuple(i for i in case_impls if impls is None or i in impls)
        if not chosen:
            continue
        for row in measure(_benches(case, chosen), repeats, target_s):
            row.update(
                item=item,
                title=title,
                floor=floor,
                role="floor" if row["impl"] == "floor" else "impl",
                process=process,
            )
            rows.append(row)
    return rows


def _run_anchors(
    python: str, cases: list[str], impls: set[str], smoke: bool, repeats: int, target_s: float
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    import rlightning

    src = str(Path(rlightning.__file__).resolve().parent.parent)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, str(ROOT), env.get("PYTHONPATH")]))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "rows.json"
        command = [
            python,
            "-m",
            "benchmarks.run",
            "--rows-json",
            str(out),
            "--cases",
            ",".join(cases),
            "--impls",
            ",".join(sorted(impls | {"floor"})),
            "--repeats",
            str(repeats),
            "--target-ms",
            str(target_s * 1e3),
        ]
        if smoke:
            command.append("--smoke")
        subprocess.run(command, cwd=ROOT, env=env, check=True)
        payload = json.loads(out.read_text())
    return payload["rows"], payload["meta"]


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure everything asked for and return the results document (rows, targets, meta)."""
    import torch

    from benchmarks.cases_cuda import gpu_name

    torch.set_num_threads(args.threads)
    repeats, target_s = SMOKE if args.smoke else FULL
    repeats = args.repeats or repeats
    target_s = args.target_ms / 1e3 if args.target_ms else target_s
    specs = _specs()
    cases = [c for c in specs if not args.cases or c in args.cases.split(",")]
    impls = set(args.impls.split(",")) if args.impls else None
    process = "anchors" if args.rows_json else "main"
    anchor_python: str | None = args.anchor_python or os.environ.get(
        "RLIGHTNING_BENCH_ANCHOR_PYTHON"
    )

    delegated: dict[str, set[str]] = {}  # case -> impls measured by the anchor interpreter
    if anchor_python and not args.rows_json:
        for case in cases:
            for impl in specs[case][3]:
                if (impls is None or impl in impls) and _unavailable_here(impl) is not None:
                    delegated.setdefault(case, set()).add(impl)

    started = time.time()
    instructions = None
    loop_cost = None
    pz_collect = None
    if args.callgrind and not args.rows_json:
        from benchmarks import callgrind

        instructions = callgrind.measure(smoke=args.smoke)  # first: fails fast without valgrind
        callgrind.print_instructions(instructions)
        from benchmarks import loop_cost as loop_cost_bench

        loop_cost = loop_cost_bench.measure(smoke=args.smoke)
        print(loop_cost_bench.table(loop_cost))
        from benchmarks import pz_collect_cost

        pz_collect = pz_collect_cost.measure(smoke=args.smoke)
        print(pz_collect_cost.table(pz_collect))
    rows = measure_cases(cases, impls, repeats, target_s, process)
    anchor_meta: dict[str, Any] | None = None
    if delegated and anchor_python:  # (delegated is only filled with an anchor interpreter)
        anchor_cases = list(delegated)
        anchor_impls = set().union(*delegated.values())
        anchor_rows, anchor_meta = _run_anchors(
            anchor_python, anchor_cases, anchor_impls, args.smoke, repeats, target_s
        )
        replaced = {(r["case"], r["impl"]) for r in anchor_rows if r["impl"] != "floor"}
        rows = [r for r in rows if (r["case"], r["impl"]) not in replaced]
        rows.extend(anchor_rows)
        order = {case: i for i, case in enumerate(cases)}
        rows.sort(key=lambda r: order[r["case"]])

    meta = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "mode": "smoke" if args.smoke else "full",
        "repeats": repeats,
        "round_target_s": target_s,
        "wall_s": round(time.time() - started, 1),
        "torch_threads": args.threads,
        "cpu": _cpu_name(),
        "gpu": gpu_name(),
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "executable": portable_path(sys.executable),
        "versions": _versions(),
        "sources": _sources(),
        "openblas_env": {k: v for k, v in os.environ.items() if k.startswith("OPENBLAS")},
        "command": "python -m benchmarks.run "
        + " ".join(portable_path(a) if os.path.isabs(a) else a for a in sys.argv[1:]),
    }
    if args.note:
        meta["note"] = args.note
    if anchor_meta is not None:
        meta["anchor_process"] = anchor_meta
    results: dict[str, Any] = {"meta": meta, "rows": rows}
    if instructions is not None:
        results["instructions"] = instructions
    if loop_cost is not None:
        results["loop_cost"] = loop_cost
    if pz_collect is not None:
        results["pz_collect_cost"] = pz_collect
    if not args.rows_json:
        from benchmarks.targets import evaluate

        results["targets"] = evaluate(rows, instructions, loop_cost, pz_collect)
    return results


def _updated(
    previous: dict[str, Any], fresh: dict[str, Any], args: argparse.Namespace
) -> dict[str, Any]:
    """``previous`` with the rows of the cases in ``fresh`` replaced (and its instructions)."""
    cases = {row["case"] for row in fresh["rows"]}
    kept = [row for row in previous["rows"] if row["case"] not in cases]
    order = {case: i for i, case in enumerate(_specs())}
    rows = sorted(kept + fresh["rows"], key=lambda r: order.get(r["case"], len(order)))
    meta = dict(previous["meta"])
    updates = list(meta.get("updates", []))
    updates.append(
        {
            "date_utc": fresh["meta"]["date_utc"],
            "cases": sorted(cases, key=lambda c: order.get(c, len(order))),
            "command": fresh["meta"]["command"],
            "sources": fresh["meta"]["sources"],
            "instructions": "instructions" in fresh,
        }
    )
    meta["updates"] = updates
    meta["executable"] = portable_path(meta["executable"])
    if "anchor_process" in meta:
        anchors = dict(meta["anchor_process"])
        anchors["executable"] = portable_path(anchors["executable"])
        meta["anchor_process"] = anchors
    meta["sources"] = {
        name: portable_path(where.split(" @ ")[0])
        + (f" @ {where.split(' @ ')[1]}" if " @ " in where else "")
        for name, where in meta.get("sources", {}).items()
    }
    results = {**previous, "meta": meta, "rows": rows}
    if "instructions" in fresh:
        results["instructions"] = fresh["instructions"]
    if "loop_cost" in fresh:
        results["loop_cost"] = fresh["loop_cost"]
    if "pz_collect_cost" in fresh:
        results["pz_collect_cost"] = fresh["pz_collect_cost"]
    return results


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="few repeats, no docs (seconds)")
    parser.add_argument("--out", type=Path, help="results file (default benchmarks/results.json)")
    parser.add_argument("--docs", type=Path, help="docs folder to write performance.md/.png into")
    parser.add_argument("--no-docs", action="store_true", help="do not write the docs page")
    parser.add_argument("--anchor-python", help="interpreter with Tianshou for the anchor rows")
    parser.add_argument("--cases", help="comma-separated case ids (default: all)")
    parser.add_argument("--impls", help="comma-separated implementations (default: all)")
    parser.add_argument("--repeats", type=int, help="rounds per case (median over them)")
    parser.add_argument("--target-ms", type=float, help="milliseconds per round")
    parser.add_argument("--threads", type=int, default=1, help="torch.set_num_threads (default 1)")
    parser.add_argument("--note", help="a line of context for the docs page (e.g. code sources)")
    parser.add_argument(
        "--baseline",
        type=Path,
        default=ROOT / "benchmarks" / "baseline_skeleton.json",
        help="results of the code before optimisation, for the docs' before/after table",
    )
    parser.add_argument(
        "--render-only",
        action="store_true",
        help="measure nothing: rewrite the docs page and chart from the --out results file",
    )
    parser.add_argument(
        "--callgrind",
        action="store_true",
        help="also count item 6's instructions with valgrind's callgrind (needs valgrind)",
    )
    parser.add_argument(
        "--update",
        action="store_true",
        help="measure only --cases and replace their rows in the existing --out results file",
    )
    parser.add_argument("--rows-json", help=argparse.SUPPRESS)  # anchor-interpreter mode
    args = parser.parse_args(argv)

    out = args.out or (ROOT / "benchmarks" / "results.json")
    if args.render_only:
        results = json.loads(out.read_text())
    else:
        try:
            results = run(args)
        except RuntimeError as exc:  # valgrind missing for --callgrind, or its worker failing
            print(f"error: {exc}", file=sys.stderr)
            return 1
        if args.update:
            results = _updated(json.loads(out.read_text()), results, args)
    if not args.rows_json:
        from benchmarks.targets import evaluate

        results["targets"] = evaluate(
            results["rows"],
            results.get("instructions"),
            results.get("loop_cost"),
            results.get("pz_collect_cost"),
        )
    if args.rows_json:
        Path(args.rows_json).write_text(json.dumps(results))
        return 0
    have = {(row["case"], row["impl"]) for row in results["rows"]}
    missing = [pair for pair in expected_rows() if pair not in have]
    if missing and (args.update or not (args.cases or args.impls)):
        print(f"error: rows missing from the results: {missing}", file=sys.stderr)
        return 1
    if not args.render_only:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1) + "\n")
    from benchmarks.report import print_summary, write_docs

    print_summary(results)
    if not (args.smoke or args.no_docs) or args.docs:
        baseline = None
        if args.baseline is not None and args.baseline.exists():
            baseline = json.loads(args.baseline.read_text())
        write_docs(results, args.docs or (ROOT / "docs"), baseline)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
