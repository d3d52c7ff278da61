"""Instructions per call of the SB3 adapter (item 6), counted with valgrind's callgrind.

Time on a shared machine moves with other people's load; instruction counts do not. This
module counts the instructions of item 6's calls (:func:`benchmarks.cases_adapters.sb3_call`,
the same functions the timed rows run): ``SB3PolicyAdapter.predict`` against SB3's
``model.predict``, and ``SB3PolicyAdapter.act`` against the raw step of SB3's
``collect_rollouts`` (``obs_as_tensor``, the forward under ``torch.no_grad()``,
``.cpu().numpy()``, the Box clip, the Discrete reshape), for CartPole PPO at ``n_envs`` 1 and 64.

How it counts. One process per ``n_envs`` runs under ``valgrind --tool=callgrind`` with
collection off. Every measured region is a loop of ``R`` calls run inside ``operator.call``
(whose C function, ``_operator_call``, is callgrind's ``--toggle-collect`` marker: instructions
are counted only while it is on the stack), followed by ``_operator._compare_digest`` (the
``--dump-before`` marker: callgrind writes the region's counts to a file of their own and
starts again from zero). The instructions per call are the count of the loop of ``R`` calls
minus the count of the same loop of 0 calls (what entering the region costs), over ``R``.
Every implementation is warmed up first (CPython 3.11 specialises bytecode on its first runs),
the garbage collector is off inside a region (as in the timed rows), glibc's malloc runs without
fast bins (``GLIBC_TUNABLES=glibc.malloc.mxfast=0``: its ``malloc_consolidate`` otherwise lands
in one region and not another, by the heap's history), and every region is measured twice so the
results file shows how far two counts of the same work differ.

Where the overhead goes (the profile): each Python function of ``rlightning_sb3`` and
``rlightning`` that one adapter call runs (found with ``sys.setprofile`` before counting) is
wrapped, one at a time, so that its calls run inside ``operator.call``; a region of adapter
calls then counts only that function's instructions, callees included (inclusive). The
wrapper's own cost (``operator.call`` entering the function) is measured on an empty function
and subtracted. Functions reached only through a binding this cannot patch (a closure, a
bound method stored on an object) are listed as not measured.

Usage (from the repository root)::

    python -m benchmarks.callgrind                    # R=300, n_envs 1 and 64, with the profile
    python -m benchmarks.callgrind --smoke            # R=5, n_envs=1: the code path, seconds
    python -m benchmarks.callgrind --merge benchmarks/results.json   # and re-render the docs
    python -m benchmarks.callgrind --section counts.json --merge benchmarks/results.json

Without valgrind the full mode stops with an error saying how to install it; ``--smoke`` then
runs the worker without valgrind (every region, no counts) so the code path is still tested.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import operator
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FunctionType, ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

KINDS = ("predict", "act")
#: What is counted per kind: the floor, rlightning, and for ``act`` the reference row
#: ``bare_batch`` (the floor plus one stacked response, nothing checked: the least an adapter
#: answering with responses can do; not a target).
IMPLS: dict[str, tuple[str, ...]] = {
    "predict": ("floor", "rlightning"),
    "act": ("floor", "bare_batch", "rlightning"),
}
N_ENVS = (1, 64)
CALLS_FULL = 300
CALLS_SMOKE = 5
#: Adapter calls per region of the profile (counts are exact, so a few calls suffice).
CALLS_PROFILE = 20
CALLS_PROFILE_SMOKE = 2
#: Overhead limits over the floor, as a fraction of the floor's instructions.
LIMITS: dict[tuple[str, int], float] = {
    ("predict", 1): 0.02,
    ("predict", 64): 0.01,
    ("act", 1): 0.03,
    ("act", 64): 0.015,
}
#: C functions of CPython's built-in ``_operator`` module used as markers (see the docstring).
TOGGLE = "_operator_call"
DUMP = "_operator__compare_digest"
VALGRIND_MISSING = (
    "valgrind is not installed: the instruction counts of item 6 need valgrind's callgrind "
    "(Debian/Ubuntu: apt-get install -y valgrind). Install it, or run the time rows alone "
    "with `python -m benchmarks.run` (without --callgrind)."
)
_PACKAGES = ("rlightning_sb3", "rlightning")


def valgrind_path() -> str | None:
    """The ``valgrind`` executable on PATH, or None."""
    return shutil.which("valgrind")


# ------------------------------------------------------------------------- worker (in valgrind)
def _dump() -> None:
    """End a region: callgrind writes the counts since the last dump to a file of their own."""
    import _operator

    _operator._compare_digest(b"", b"")


def _loop(call: Callable[[Any], object], obs: Any, calls: int) -> None:
    for _ in range(calls):
        call(obs)


def _region(call: Callable[[Any], object], obs: Any, calls: int, counted: bool = True) -> None:
    """One region: ``calls`` calls of ``call(obs)``, then a dump.

    ``counted`` runs the whole loop inside the toggle marker; otherwise only what runs inside a
    marker of its own (a wrapped function, see :func:`_counted`) is counted. The markers toggle,
    so a marker inside a counted loop would switch counting off.
    """
    gc.collect()
    gc.disable()
    try:
        if counted:
            operator.call(_loop, call, obs, calls)
        else:
            _loop(call, obs, calls)
    finally:
        gc.enable()
    _dump()


def _instrumentation_on() -> None:
    """Switch callgrind's instrumentation on (the run starts with it off: imports are slow)."""
    tool = shutil.which("callgrind_control")
    if tool is None:
        raise RuntimeError("callgrind_control (part of valgrind) is not on PATH")
    subprocess.run([tool, "-i", "on", str(os.getpid())], check=True, capture_output=True)


def _rl_code(code: Any) -> bool:
    name = code.co_filename.replace(os.sep, "/")
    return any(f"/{package}/" in name for package in _PACKAGES)


def _called_functions(call: Callable[[Any], object], obs: Any) -> dict[Any, int]:
    """Code objects of rlightning's Python functions one ``call(obs)`` runs, with call counts."""
    counts: dict[Any, int] = {}

    def profile(frame: Any, event: str, _arg: Any) -> None:
        if event == "call" and _rl_code(frame.f_code):
            counts[frame.f_code] = counts.get(frame.f_code, 0) + 1

    sys.setprofile(profile)
    try:
        call(obs)
    finally:
        sys.setprofile(None)
    return counts


def _bindings(code: Any) -> list[tuple[Any, str, str]]:
    """Where the function with ``code`` can be replaced: (module or class, name, kind) triples.

    ``kind`` is ``"function"`` (a module global or a plain method), ``"staticmethod"``,
    ``"classmethod"`` or ``"property"`` (its getter).
    """
    found: list[tuple[Any, str, str]] = []
    owners: list[Any] = []
    seen: set[int] = set()
    for name, module in list(sys.modules.items()):
        if not isinstance(module, ModuleType) or name.split(".")[0] not in _PACKAGES:
            continue
        owners.append(module)
        for value in list(vars(module).values()):
            if (
                isinstance(value, type)
                and value.__module__.split(".")[0] in _PACKAGES
                and id(value) not in seen
            ):
                seen.add(id(value))
                owners.append(value)
    for owner in owners:
        for name, value in list(vars(owner).items()):
            inner = value.fget if isinstance(value, property) else getattr(value, "__func__", value)
            if getattr(inner, "__code__", None) is not code:
                continue
            if isinstance(value, FunctionType):
                found.append((owner, name, "function"))
            elif isinstance(value, staticmethod):
                found.append((owner, name, "staticmethod"))
            elif isinstance(value, classmethod):
                found.append((owner, name, "classmethod"))
            elif isinstance(value, property):
                found.append((owner, name, "property"))
    return found


def _counted(function: Callable[..., Any], tally: list[int]) -> Callable[..., Any]:
    """``function``, its top-level calls run inside ``operator.call`` (counted) and tallied."""
    opcall = operator.call
    depth = [0]

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if depth[0]:  # recursion: the outer call's region already counts it
            return function(*args, **kwargs)
        depth[0] += 1
        tally[0] += 1
        try:
            return opcall(function, *args, **kwargs)
        finally:
            depth[0] -= 1

    return wrapper


@contextlib.contextmanager
def _wrapped(code: Any, tally: list[int]) -> Iterator[int]:
    """Replace every binding of the function with ``code`` by a counted wrapper; yield how many."""
    undo: list[tuple[Any, str, Any]] = []
    try:
        for owner, name, kind in _bindings(code):
            original = vars(owner)[name]
            if kind == "function":
                new: Any = _counted(original, tally)
            elif kind == "staticmethod":
                new = staticmethod(_counted(original.__func__, tally))
            elif kind == "classmethod":
                new = classmethod(_counted(original.__func__, tally))
            else:
                new = property(_counted(original.fget, tally), original.fset, original.fdel)
            setattr(owner, name, new)
            undo.append((owner, name, original))
        yield len(undo)
    finally:
        for owner, name, original in reversed(undo):
            setattr(owner, name, original)


def _function_name(code: Any) -> str:
    path = code.co_filename.replace(os.sep, "/")
    for package in _PACKAGES:
        marker = f"/{package}/"
        if marker in path:
            module = package + "." + path.split(marker, 1)[1].removesuffix(".py").replace("/", ".")
            return f"{module.removesuffix('.__init__')}.{code.co_qualname}"
    return str(code.co_qualname)


def worker(n_envs: int, calls: int, profile_steps: int, out: Path, instr_on: bool) -> None:
    """Run every region of one ``n_envs`` (under callgrind) and write their names to ``out``.

    Regions, in order (callgrind's dump files ``.1``, ``.2``, ... follow the same order): for
    each round (2), kind and implementation, a loop of ``calls`` calls and a loop of 0 calls;
    then, when ``profile_steps`` > 0, a calibration region (``profile_steps`` x 50 calls of an
    empty function through the wrapper) and one region of ``profile_steps`` adapter calls per
    rlightning function per kind, each after a ``"warm-up"`` region (calls through the
    wrapper, which are counted) that the driver leaves out.
    """
    import torch

    from benchmarks import cases_adapters

    torch.set_num_threads(1)
    obs = cases_adapters.sb3_observation(n_envs)
    steps = {
        (kind, impl): cases_adapters.sb3_call(kind, impl, n_envs)
        for kind in KINDS
        for impl in IMPLS[kind]
    }
    for step in steps.values():  # warm up: bytecode specialisation, caches, lazy imports
        for _ in range(20):
            step(obs)
    found: dict[str, dict[Any, int]] = {}
    if profile_steps:
        for kind in KINDS:
            found[kind] = _called_functions(steps[(kind, "rlightning")], obs)
    if instr_on:
        _instrumentation_on()
    regions: list[dict[str, Any]] = []
    for round_ in range(2):
        for kind in KINDS:
            for impl in IMPLS[kind]:
                for n in (calls, 0):
                    _region(steps[(kind, impl)], obs, n)
                    regions.append(
                        {"round": round_, "kind": kind, "impl": impl, "calls": n, "role": "count"}
                    )
    if profile_steps:
        tally = [0]
        empty = _counted(lambda *a, **k: None, tally)
        n_empty = profile_steps * 50

        def empties(_obs: Any) -> None:
            for _ in range(n_empty):
                empty(_obs, n_envs)  # positional, as the adapter's own calls mostly are

        empties(obs)  # warm-up: counted, so it gets a region of its own (left out)
        _dump()
        regions.append({"role": "warm-up"})
        tally[0] = 0
        _region(empties, obs, 1, counted=False)
        regions.append({"role": "calibration", "wrapped_calls": tally[0]})
        for kind in KINDS:
            for code, per_call in sorted(found[kind].items(), key=lambda kv: _function_name(kv[0])):
                tally = [0]
                entry: dict[str, Any] = {
                    "role": "profile",
                    "kind": kind,
                    "function": _function_name(code),
                    "calls_per_step": per_call,
                    "steps": profile_steps,
                }
                with _wrapped(code, tally) as bindings:
                    from rlightning_sb3 import SB3PolicyAdapter

                    model = cases_adapters._model(n_envs)
                    method = getattr(SB3PolicyAdapter(model), kind)
                    env_ids = [f"env-{i}" for i in range(n_envs)]

                    def step(o: Any, method: Any = method, env_ids: Any = env_ids) -> object:
                        return method(o, env_ids=env_ids)

                    for _ in range(5):
                        step(obs)
                    _dump()  # the warm-up ran inside the wrapper: counted, left out
                    regions.append({"role": "warm-up"})
                    tally[0] = 0
                    _region(step, obs, profile_steps, counted=False)
                entry.update(bindings=bindings, wrapped_calls=tally[0])
                regions.append(entry)
    out.write_text(json.dumps({"n_envs": n_envs, "calls": calls, "regions": regions}))


# ------------------------------------------------------------------------------------ driver
def _summary(path: Path) -> int:
    for line in path.read_text().splitlines():
        if line.startswith("summary:") or line.startswith("totals:"):
            return int(line.split(":", 1)[1].split()[0])
    raise ValueError(f"{path.name}: no summary line")


def _worker_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env.setdefault("PYTHONHASHSEED", "0")
    env.setdefault("OMP_NUM_THREADS", "1")
    # glibc's malloc without fast bins: otherwise malloc_consolidate runs whenever the heap's
    # history makes it, adding up to ~9k instructions per call to one region and not the next
    # (0.5% spread between two rounds of the same floor loop); without them the two rounds agree
    # to ~0.05%. The same setting for the floors and rlightning.
    env.setdefault("GLIBC_TUNABLES", "glibc.malloc.mxfast=0")
    return env


def callgrind_command(out_file: Path, command: list[str]) -> list[str]:
    """``command`` (a worker's) run under callgrind with this module's region markers.

    Collection is off at the start and toggled by ``TOGGLE``; each ``DUMP`` call writes a region
    file ``out_file.N``; the worker switches instrumentation on itself (``--instr-on``).

    Raises:
        RuntimeError: valgrind is not installed.
    """
    valgrind = valgrind_path()
    if valgrind is None:
        raise RuntimeError(VALGRIND_MISSING)
    return [
        valgrind,
        "--tool=callgrind",
        "--instr-atstart=no",
        "--collect-atstart=no",
        f"--toggle-collect={TOGGLE}",
        f"--dump-before={DUMP}",
        "--compress-strings=no",  # each region's file readable alone (callgrind_annotate)
        "--compress-pos=no",
        f"--callgrind-out-file={out_file}",
        *command,
        "--instr-on",
    ]


def run_worker(
    module: str,
    worker_args: list[str],
    n_envs: int,
    use_valgrind: bool,
    on_dump: Callable[[dict[str, Any], Path], None] | None = None,
) -> dict[str, Any]:
    """Run ``python -m module --worker ...`` (under callgrind when ``use_valgrind``).

    The worker writes its regions' names to the file given as ``--regions``; under callgrind
    each region's dump file gives it ``"ir"`` (its instruction count), and ``on_dump(region,
    dump_path)`` is called while the dump file still exists.

    Returns:
        The worker's payload (``regions``, ...) plus ``wall_s``.

    Raises:
        RuntimeError: valgrind is missing (with ``use_valgrind``), the worker failed, or the
            dump files do not match the regions.
    """
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        names = folder / "regions.json"
        command = [sys.executable, "-m", module, "--worker", *worker_args]
        command += ["--regions", str(names)]
        if use_valgrind:
            command = callgrind_command(folder / "cg.out", command)
        started = time.time()
        proc = subprocess.run(
            command, cwd=ROOT, env=_worker_env(), capture_output=True, text=True, check=False
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"the {module} worker for n_envs={n_envs} failed ({proc.returncode}):\n"
                + proc.stdout[-2000:]
                + proc.stderr[-4000:]
            )
        payload: dict[str, Any] = json.loads(names.read_text())
        payload["wall_s"] = round(time.time() - started, 1)
        if use_valgrind:
            dumps = sorted(folder.glob("cg.out.*"), key=lambda p: int(p.name.rsplit(".", 1)[1]))
            if len(dumps) != len(payload["regions"]):
                raise RuntimeError(
                    f"callgrind wrote {len(dumps)} region files for {len(payload['regions'])} "
                    f"regions (n_envs={n_envs}): is `{DUMP}` or `{TOGGLE}` called by other code, "
                    "or does this interpreter's libpython lack their symbols?"
                )
            for region, dump in zip(payload["regions"], dumps, strict=True):
                region["ir"] = _summary(dump)
                if on_dump is not None:
                    on_dump(region, dump)
    return payload


def run_one(
    n_envs: int, calls: int, profile_steps: int, use_valgrind: bool, keep: Path | None = None
) -> dict[str, Any]:
    """Run the worker for ``n_envs`` (under callgrind when ``use_valgrind``); regions + counts."""

    def kept(region: dict[str, Any], dump: Path) -> None:
        if keep is not None and region.get("role") == "count" and region["round"] == 0:
            keep.mkdir(parents=True, exist_ok=True)
            name = f"n{n_envs}_{region['kind']}_{region['impl']}_{region['calls']}.out"
            shutil.copy(dump, keep / name)

    args = ["--n-envs", str(n_envs), "--calls", str(calls)]
    args += ["--profile-steps", str(profile_steps)]
    return run_worker("benchmarks.callgrind", args, n_envs, use_valgrind, kept)


def _per_call(regions: list[dict[str, Any]], kind: str, impl: str, calls: int) -> list[float]:
    per_round = []
    for round_ in (0, 1):
        full = next(
            r
            for r in regions
            if r.get("role") == "count"
            and r["round"] == round_
            and r["kind"] == kind
            and r["impl"] == impl
            and r["calls"] == calls
        )
        empty = next(
            r
            for r in regions
            if r.get("role") == "count"
            and r["round"] == round_
            and r["kind"] == kind
            and r["impl"] == impl
            and r["calls"] == 0
        )
        per_round.append((full["ir"] - empty["ir"]) / calls)
    return per_round


def summarise(payload: dict[str, Any]) -> dict[str, Any]:
    """Rows (instructions per call, overhead over the floor) and the profile of one worker run."""
    regions, n_envs, calls = payload["regions"], payload["n_envs"], payload["calls"]
    measured = all("ir" in r for r in regions)
    rows: list[dict[str, Any]] = []
    profile: list[dict[str, Any]] = []
    floors: dict[str, float] = {}
    for kind in KINDS:
        for impl in IMPLS[kind]:
            row: dict[str, Any] = {
                "case": f"6.{kind}_n{n_envs}",
                "kind": kind,
                "n_envs": n_envs,
                "impl": impl,
                "calls": calls,
            }
            if not measured:
                row.update(
                    status="skipped",
                    reason="valgrind is not installed: the regions ran without being counted",
                )
            else:
                rounds = _per_call(regions, kind, impl, calls)
                # Two counts of the same work differ a little (the allocators' state: pymalloc's
                # pools, glibc's malloc_consolidate): the figure is their mean.
                mean = sum(rounds) / len(rounds)
                row.update(
                    status="ok",
                    ir_per_call=mean,
                    ir_per_call_rounds=rounds,
                    ir_spread=abs(rounds[1] - rounds[0]) / mean,
                )
                if impl == "floor":
                    floors[kind] = mean
                else:
                    row["overhead"] = mean / floors[kind] - 1.0
                    row["overhead_rounds"] = [
                        a / b - 1.0
                        for a, b in zip(
                            rounds, _per_call(regions, kind, "floor", calls), strict=True
                        )
                    ]
            rows.append(row)
    calibration = next((r for r in regions if r.get("role") == "calibration"), None)
    if measured and calibration is not None:
        per_wrap = calibration["ir"] / calibration["wrapped_calls"]
        for region in regions:
            if region.get("role") != "profile":
                continue
            entry = {k: region[k] for k in ("kind", "function", "calls_per_step", "bindings")}
            entry["n_envs"] = n_envs
            if region["wrapped_calls"] == 0:
                entry.update(status="not measured", reason="no binding this could wrap was called")
            else:
                inclusive = (region["ir"] - region["wrapped_calls"] * per_wrap) / region["steps"]
                entry.update(
                    status="ok",
                    ir_per_step=inclusive,
                    wrapped_calls_per_step=region["wrapped_calls"] / region["steps"],
                    of_floor=inclusive / floors[region["kind"]],
                )
            profile.append(entry)
        profile.sort(key=lambda e: (e["kind"], -e.get("ir_per_step", -1.0)))
    return {"rows": rows, "profile": profile, "wall_s": payload["wall_s"]}


def targets(instructions: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Item 6's instruction targets from an ``instructions`` section (None: not measured)."""
    out = []
    for (kind, n_envs), limit in LIMITS.items():
        row = None
        if instructions is not None:
            row = next(
                (
                    r
                    for r in instructions["rows"]
                    if r["kind"] == kind
                    and r["n_envs"] == n_envs
                    and r["impl"] == "rlightning"
                    and r["status"] == "ok"
                ),
                None,
            )
        value = None if row is None else float(row["overhead"])
        out.append(
            {
                "item": 6,
                "case": f"6.{kind}_n{n_envs}",
                "target": f"instructions (callgrind): adapter overhead <= {limit:.1%} at "
                f"n_envs={n_envs}",
                "value": value,
                "limit": limit,
                "unit": "fraction",
                "met": None if value is None else bool(value <= limit),
            }
        )
    return out


def measure(
    smoke: bool = False, n_envs: tuple[int, ...] | None = None, keep: Path | None = None
) -> dict[str, Any]:
    """Count instructions for every ``n_envs``; the ``instructions`` section of a results file.

    Raises:
        RuntimeError: valgrind is missing (full mode), or a worker failed.
    """
    use_valgrind = valgrind_path() is not None
    if not use_valgrind and not smoke:
        raise RuntimeError(VALGRIND_MISSING)
    calls = CALLS_SMOKE if smoke else CALLS_FULL
    chosen = n_envs or ((1,) if smoke else N_ENVS)
    rows: list[dict[str, Any]] = []
    profile: list[dict[str, Any]] = []
    wall = 0.0
    for n in chosen:
        steps = CALLS_PROFILE_SMOKE if smoke else CALLS_PROFILE
        part = summarise(run_one(n, calls, steps, use_valgrind, keep))
        rows += part["rows"]
        profile += part["profile"]
        wall += part["wall_s"]
    valgrind_version = ""
    if use_valgrind:
        valgrind_version = subprocess.run(
            ["valgrind", "--version"], capture_output=True, text=True, check=False
        ).stdout.strip()
    return {
        "meta": {
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "mode": "smoke" if smoke else "full",
            "calls": calls,
            "profile_steps": CALLS_PROFILE_SMOKE if smoke else CALLS_PROFILE,
            "valgrind": valgrind_version or None,
            "python": sys.version.split()[0],
            "wall_s": round(wall, 1),
        },
        "rows": rows,
        "profile": profile,
    }


def print_instructions(section: dict[str, Any]) -> None:
    """One line per instruction row and the ten costliest profiled functions per kind/n_envs."""
    print(f"{'case':<16} {'impl':<12} {'instructions/call':>18} {'overhead':>9} {'spread':>8}")
    for row in section["rows"]:
        if row["status"] != "ok":
            print(f"{row['case']:<16} {row['impl']:<12} skipped: {row['reason']}")
            continue
        overhead = f"{row['overhead']:+.2%}" if "overhead" in row else ""
        print(
            f"{row['case']:<16} {row['impl']:<12} {row['ir_per_call']:>18,.0f} {overhead:>9} "
            f"{row['ir_spread']:>8.4%}"
        )
    groups = sorted({(e["kind"], e["n_envs"]) for e in section.get("profile", [])})
    for kind, n_envs in groups:
        print(f"\nprofile, {kind} n_envs={n_envs} (inclusive instructions per adapter call):")
        entries = [e for e in section["profile"] if (e["kind"], e["n_envs"]) == (kind, n_envs)]
        for e in entries[:12]:
            if e["status"] == "ok":
                print(
                    f"  {e['ir_per_step']:>12,.0f}  {e['of_floor']:>7.2%}  "
                    f"x{e['wrapped_calls_per_step']:<4g} {e['function']}"
                )


def merge(section: dict[str, Any], results_path: Path) -> dict[str, Any]:
    """Write ``section`` into the results file and re-evaluate its targets."""
    from benchmarks.targets import evaluate

    results: dict[str, Any] = json.loads(results_path.read_text())
    results["instructions"] = section
    results["targets"] = evaluate(results["rows"], section, results.get("loop_cost"))
    results_path.write_text(json.dumps(results, indent=1) + "\n")
    return results


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point; see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help=f"R={CALLS_SMOKE}, n_envs=1")
    parser.add_argument("--n-envs", type=int, action="append", help="default: 1 and 64")
    parser.add_argument("--out", type=Path, help="write the instructions section here (JSON)")
    parser.add_argument("--merge", type=Path, help="results file to merge into (and render)")
    parser.add_argument("--keep", type=Path, help="keep the round-0 callgrind files here")
    parser.add_argument(
        "--section", type=Path, help="merge this --out file instead of counting again"
    )
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--calls", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--profile-steps", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--regions", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--instr-on", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker(args.n_envs[0], args.calls, args.profile_steps, args.regions, args.instr_on)
        return 0
    if args.section is not None:
        section = json.loads(args.section.read_text())
    else:
        try:
            section = measure(args.smoke, tuple(args.n_envs) if args.n_envs else None, args.keep)
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
    print_instructions(section)
    if args.out is not None:
        args.out.write_text(json.dumps(section, indent=1) + "\n")
        print(f"wrote {args.out}")
    if args.merge is not None:
        from benchmarks.report import write_docs

        results = merge(section, args.merge)
        baseline_path = ROOT / "benchmarks" / "baseline_skeleton.json"
        baseline = json.loads(baseline_path.read_text()) if baseline_path.exists() else None
        write_docs(results, ROOT / "docs", baseline)
        print(f"merged into {args.merge} and rewrote docs/performance.md")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


# --------------------------------------------------------------------------------------------
# Rollout-cost benchmarks (issues 19 and 20): SB3's collect_rollouts against rlightning's loop
# --------------------------------------------------------------------------------------------

#: What the rows of a rollout-cost benchmark say when they ran without valgrind.
NOT_COUNTED = "run without valgrind: the regions were not counted"


def _rollout_loop(call: Callable[[], None], n: int) -> None:
    for _ in range(n):
        call()


class RolloutCost:
    """One rollout-cost benchmark: SB3's ``collect_rollouts`` against rlightning's, counted.

    The driver :mod:`benchmarks.loop_cost` (issue 20) and :mod:`benchmarks.pz_collect_cost`
    (issue 19) share: the worker's regions, the rows (instructions per unit and the ratio to
    SB3's), the section's ``meta``, the targets, the markdown table and the command line. Each
    module gives its own work (``iterations``), sizes and wording.

    Args:
        module: The benchmark's module (``python -m module --worker ...`` runs the worker).
        section: Its section in ``benchmarks/results.json``.
        doc: Its module docstring (the CLI's description is its first line).
        iterations: ``(size, n_steps) -> {impl: call}``, calls of no argument; the
            ``"rlightning"`` one carries ``same_work()``, which raises unless both buffers agree.
        size_arg: The size's name (``n_envs``, ``n_copies``): the worker's ``--size-arg`` flag,
            a key of the payload and of every row.
        sizes: The sizes counted in full mode (and those the targets name).
        smoke_sizes: Those of ``--smoke``.
        n_steps, n_steps_smoke, calls, calls_smoke: Rows per rollout and rollouts per region.
        units: ``payload -> units per rollout`` (env steps or agent-steps), the divisor.
        per_key: The rows' key of the mean count per unit (``ir_per_step``, ...).
        ok_extra: Keys added to every counted row, after the counts.
        meta_size: Put the (single) size into ``meta`` after ``mode``.
        case: ``size -> case name``.
        item: The issue number of the targets.
        limit: The ratio's allowed excess (``0.03``: ``<= 1.03x``).
        target_text: ``size -> the target's text``.
        intro: ``meta -> the table's first paragraph``.
        unit_header: The table's count column header.
        missing: The table's text when the section is missing.
        smoke_help: The ``--smoke`` flag's help.
        impls: The two implementations' names: the reference the ratio divides by (default
            SB3's ``collect_rollouts``), then the measured one (default ``rlightning``, which
            carries ``same_work()``).
    """

    IMPLS = ("collect_rollouts", "rlightning")

    def __init__(
        self,
        *,
        module: str,
        section: str,
        doc: str,
        iterations: Callable[[int, int], dict[str, Callable[[], None]]],
        size_arg: str,
        sizes: tuple[int, ...],
        smoke_sizes: tuple[int, ...],
        n_steps: int,
        n_steps_smoke: int,
        calls: int,
        calls_smoke: int,
        units: Callable[[dict[str, Any]], int],
        per_key: str,
        ok_extra: dict[str, Any],
        meta_size: bool,
        case: Callable[[int], str],
        item: int,
        limit: float,
        target_text: Callable[[int], str],
        intro: Callable[[dict[str, Any]], str],
        unit_header: str,
        missing: str,
        smoke_help: str,
        impls: tuple[str, str] = IMPLS,
    ) -> None:
        self.IMPLS = impls
        self.reference, self.measured = impls
        self.module, self.section, self.doc = module, section, doc
        self.iterations = iterations
        self.size_arg, self.sizes, self.smoke_sizes = size_arg, sizes, smoke_sizes
        self.n_steps, self.n_steps_smoke = n_steps, n_steps_smoke
        self.calls, self.calls_smoke = calls, calls_smoke
        self.units, self.per_key, self.ok_extra = units, per_key, ok_extra
        self.meta_size, self.case, self.item, self.limit = meta_size, case, item, limit
        self.target_text, self.intro = target_text, intro
        self.unit_header, self.missing, self.smoke_help = unit_header, missing, smoke_help

    def worker(self, size: int, n_steps: int, calls: int, out: Path, instr_on: bool) -> None:
        """Run the regions of one size (under callgrind) and write their names to ``out``.

        Regions, in order (callgrind's dump files ``.1``, ``.2``, ...): for each round (2) and
        implementation, a loop of ``calls`` rollouts and a loop of 0. Before them, two warm-up
        rollouts each (torch's global RNG seeded alike before each: both models draw from it)
        and ``same_work()``.
        """
        import torch

        torch.set_num_threads(1)
        from stable_baselines3.common.utils import set_random_seed

        impls = self.iterations(size, n_steps)
        for i in range(2):  # warm up (bytecode specialisation, lazy imports), the same work
            for call in impls.values():
                set_random_seed(i)
                call()
        impls[self.measured].same_work()  # type: ignore[attr-defined]
        if instr_on:
            _instrumentation_on()
        regions: list[dict[str, Any]] = []
        for round_ in range(2):
            for impl in self.IMPLS:
                for n in (calls, 0):
                    gc.collect()
                    gc.disable()
                    try:
                        operator.call(_rollout_loop, impls[impl], n)
                    finally:
                        gc.enable()
                    _dump()
                    regions.append({"round": round_, "impl": impl, "calls": n})
        payload = {self.size_arg: size, "n_steps": n_steps, "calls": calls, "regions": regions}
        out.write_text(json.dumps(payload))

    def run_one(self, size: int, n_steps: int, calls: int, use_valgrind: bool) -> dict[str, Any]:
        """Run the worker for ``size`` (under callgrind when ``use_valgrind``): its payload.

        Raises:
            RuntimeError: valgrind is missing (with ``use_valgrind``) or the worker failed.
        """
        flag = "--" + self.size_arg.replace("_", "-")
        args = [flag, str(size), "--n-steps", str(n_steps), "--calls", str(calls)]
        return run_worker(self.module, args, size, use_valgrind)

    def summarise(self, payload: dict[str, Any]) -> list[dict[str, Any]]:
        """One row per implementation: instructions per unit (per round and mean), ratio."""
        regions, size = payload["regions"], payload[self.size_arg]
        units = self.units(payload)
        measured = all("ir" in r for r in regions)
        rows: list[dict[str, Any]] = []
        per_round: dict[str, list[float]] = {}
        for impl in self.IMPLS:
            row: dict[str, Any] = {
                "case": self.case(size),
                "impl": impl,
                self.size_arg: size,
                "n_steps": payload["n_steps"],
                "iterations": payload["calls"],
            }
            if not measured:
                row.update(status="skipped", reason=NOT_COUNTED)
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
                counts.append((full - empty) / units)
            per_round[impl] = counts
            row["status"] = "ok"
            row[self.per_key] = sum(counts) / 2
            row["ir_per_step_rounds"] = counts
            row.update(self.ok_extra)
            if impl != self.reference:
                floor = per_round[self.reference]
                row["ratio_rounds"] = [a / b for a, b in zip(counts, floor, strict=True)]
                row["ratio"] = row[self.per_key] / (sum(floor) / 2)
            rows.append(row)
        return rows

    def measure(self, smoke: bool = False, native: bool = False) -> dict[str, Any]:
        """Count both implementations at every size: the benchmark's results section.

        Args:
            smoke: The smoke sizes, one short rollout.
            native: Run the regions without valgrind (nothing counted; the rows say why).

        Raises:
            RuntimeError: valgrind is missing (full mode), or a worker failed.
        """
        use_valgrind = valgrind_path() is not None and not native
        if not use_valgrind and not (smoke or native):
            raise RuntimeError(VALGRIND_MISSING)
        n_steps = self.n_steps_smoke if smoke else self.n_steps
        calls = self.calls_smoke if smoke else self.calls
        sizes = self.smoke_sizes if smoke else self.sizes
        rows: list[dict[str, Any]] = []
        wall = 0.0
        for size in sizes:
            payload = self.run_one(size, n_steps, calls, use_valgrind)
            rows += self.summarise(payload)
            wall += payload["wall_s"]
        meta: dict[str, Any] = {
            "date_utc": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
            "mode": ("smoke" if smoke else "full") + (" (native, not counted)" if native else ""),
        }
        if self.meta_size:
            (meta[self.size_arg],) = sizes
        meta.update(n_steps=n_steps, iterations=calls, python=sys.version.split()[0])
        meta["wall_s"] = round(wall, 1)
        return {"meta": meta, "rows": rows}

    def targets(self, section: dict[str, Any] | None) -> list[dict[str, Any]]:
        """The issue's targets (``<= 1 + limit`` times SB3's), one per full-mode size."""
        out = []
        for size in self.sizes:
            row = None
            if section is not None:
                row = next(
                    (
                        r
                        for r in section["rows"]
                        if r[self.size_arg] == size
                        and r["impl"] == self.measured
                        and r["status"] == "ok"
                    ),
                    None,
                )
            value = None if row is None else float(row["ratio"])
            out.append(
                {
                    "item": self.item,
                    "case": self.case(size),
                    "target": self.target_text(size),
                    "value": value,
                    "limit": 1 + self.limit,
                    "unit": "x",
                    "met": None if value is None else bool(value <= 1 + self.limit),
                }
            )
        return out

    def table(self, section: dict[str, Any] | None) -> str:
        """The markdown table of the section (for docs/performance.md)."""
        if not section:
            return self.missing
        lines = [
            self.intro(section["meta"]),
            "",
            f"| case | implementation | {self.unit_header} | ratio | each round |",
            "|---|---|---:|---:|---:|",
        ]
        for row in section["rows"]:
            if row["status"] != "ok":
                lines.append(f"| `{row['case']}` | {row['impl']} | skipped: {row['reason']} | | |")
                continue
            ratio = f"{row['ratio']:.4f}x" if "ratio" in row else ""
            rounds = " / ".join(f"{v:.4f}x" for v in row.get("ratio_rounds", []))
            lines.append(
                f"| `{row['case']}` | {row['impl']} | {row[self.per_key]:,.0f} | {ratio} "
                f"| {rounds} |"
            )
        return "\n".join(lines)

    def merge(self, section: dict[str, Any], results_path: Path) -> None:
        """Put ``section`` into the results file, re-check the targets, re-render the docs page.

        Mutates ``results_path`` (the section and ``targets``) and rewrites
        ``docs/performance.md`` and its chart.
        """
        from benchmarks.report import write_docs
        from benchmarks.targets import evaluate

        results = json.loads(results_path.read_text())
        results[self.section] = section
        results["targets"] = evaluate(
            results["rows"],
            results.get("instructions"),
            results.get("loop_cost"),
            results.get("pz_collect_cost"),
        )
        results_path.write_text(json.dumps(results, indent=1) + "\n")
        baseline_path = ROOT / "benchmarks" / "baseline_skeleton.json"
        baseline = json.loads(baseline_path.read_text()) if baseline_path.exists() else None
        write_docs(results, ROOT / "docs", baseline)

    def main(self, argv: list[str] | None = None) -> int:
        """Command-line entry point (``--smoke``, ``--native``, ``--out``, ``--merge``)."""
        parser = argparse.ArgumentParser(description=self.doc.split("\n")[0])
        parser.add_argument("--smoke", action="store_true", help=self.smoke_help)
        parser.add_argument(
            "--native", action="store_true", help="run the regions without valgrind (no counts)"
        )
        parser.add_argument(
            "--out", type=Path, help=f"write the {self.section} section here (JSON)"
        )
        parser.add_argument("--merge", type=Path, help="results file to merge into (and render)")
        parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
        flag = "--" + self.size_arg.replace("_", "-")
        parser.add_argument(flag, dest="size", type=int, help=argparse.SUPPRESS)
        parser.add_argument("--n-steps", type=int, help=argparse.SUPPRESS)
        parser.add_argument("--calls", type=int, help=argparse.SUPPRESS)
        parser.add_argument("--regions", type=Path, help=argparse.SUPPRESS)
        parser.add_argument("--instr-on", action="store_true", help=argparse.SUPPRESS)
        args = parser.parse_args(argv)
        if args.worker:
            self.worker(args.size, args.n_steps, args.calls, args.regions, args.instr_on)
            return 0
        try:
            section = self.measure(args.smoke, args.native)
        except RuntimeError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(self.table(section))
        if args.out is not None:
            args.out.write_text(json.dumps(section, indent=1) + "\n")
        if args.merge is not None:
            self.merge(section, args.merge)
            print(f"merged into {args.merge} and rewrote docs/performance.md")
        return 0
