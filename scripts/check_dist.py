"""Check the built artefacts of the three distributions, as a user and PyPI would see them.

Run by the ``dist`` tox environment, in three steps:

``build OUT``
    ``python -m build --sdist --wheel`` each of ``packages/{core,sb3,pettingzoo}`` into ``OUT``
    (six artefacts), then ``twine check --strict`` on all six, then checks each wheel: its
    ``*.dist-info/licenses/LICENSE`` (``license-files``), ``License-Expression: MIT``, a Markdown
    long description, ``py.typed``, every ``.py`` of ``src/<package>`` and nothing else (no
    tests, caches or bytecode); and each sdist: ``PKG-INFO``, ``pyproject.toml``, ``README.md``,
    ``LICENSE`` and ``src/<package>`` only. Last, each sdist is rebuilt into a wheel with
    ``pip wheel`` (PEP 517 from the unpacked sdist), and that wheel's ``RECORD`` (every file and
    its sha256) must equal the one of the wheel built from the checkout: the sdist is complete.
``install OUT``
    Uninstalls any installed rlightning distribution, then installs the three wheels with pip
    (``rlightning-core[torch]``, ``rlightning-sb3[contrib]``, ``rlightning-pettingzoo[sb3]``),
    dependencies resolved by pip as for a user, then ``pip check``.
``test [--helpers DIR] -- PYTEST_ARGS``
    Runs pytest from a fresh temporary directory outside the checkout, in a child interpreter
    started with ``-c`` (so neither the cwd's checkout nor ``scripts/`` is on ``sys.path``), with
    ``PYTHONPATH`` set to the ``--helpers`` folders only; after the run, every ``rlightning*``
    module the run imported must have been loaded from site-packages, none from ``packages/``,
    else the step fails.

Every failure exits non-zero with a message naming the artefact and what is wrong.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from email.parser import Parser
from pathlib import Path, PurePosixPath

ROOT = Path(__file__).resolve().parents[1]
#: folder under packages/ -> (distribution name, import package, wheel extra installed)
DISTRIBUTIONS = {
    "core": ("rlightning-core", "rlightning", "torch"),
    "sb3": ("rlightning-sb3", "rlightning_sb3", "contrib"),
    "pettingzoo": ("rlightning-pettingzoo", "rlightning_pettingzoo", "sb3"),
}
#: Path parts that must never ship in an artefact.
FORBIDDEN_PARTS = {
    "tests",
    "test",
    "__pycache__",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    ".hypothesis",
    ".tox",
    ".git",
}
FORBIDDEN_SUFFIXES = (".pyc", ".pyo", ".so", ".egg-info")

#: Run in the child interpreter by ``test``: pytest, then where every rlightning module came from.
_GUARD = """
import os, sys, sysconfig
from pathlib import Path
import pytest

code = pytest.main(sys.argv[1:])
sys.stdout.flush()
checkout = Path(os.environ["RLIGHTNING_DIST_CHECKOUT"]).resolve()
site = {Path(sysconfig.get_paths()[k]).resolve() for k in ("purelib", "platlib")}
owners = ("rlightning", "rlightning_sb3", "rlightning_pettingzoo")
loaded = {
    name: Path(module.__file__).resolve()
    for name, module in list(sys.modules.items())
    if name.split(".")[0] in owners and getattr(module, "__file__", None)
}
sources = checkout / "packages"
wrong = sorted(
    f"{name} from {path}" for name, path in loaded.items()
    if path.is_relative_to(sources) or not any(path.is_relative_to(s) for s in site)
)
missing = [o for o in owners if o not in loaded]
for owner in owners:
    if owner in loaded:
        print(f"check_dist: {owner} imported from {loaded[owner]}")
if wrong or missing:
    print(f"check_dist: FAIL: modules not from site-packages {sorted(site)}: {wrong};"
          f" never imported by the run: {missing}", file=sys.stderr)
    sys.exit(1)
print(f"check_dist: {len(loaded)} rlightning modules, all from site-packages")
sys.exit(code)
"""


class DistError(Exception):
    """An artefact is not what it must be."""


def _run(*args: str | Path, cwd: Path | None = None) -> None:
    printable = " ".join(str(a) for a in args)
    print(f"check_dist: $ {printable}", flush=True)
    result = subprocess.run([str(a) for a in args], cwd=cwd, check=False)
    if result.returncode != 0:
        raise DistError(f"`{printable}` exited with {result.returncode}")


def _artefacts(out: Path, folder: str) -> tuple[Path, Path]:
    """The one wheel and the one sdist of ``folder`` in ``out``."""
    stem = DISTRIBUTIONS[folder][0].replace("-", "_")
    wheels = sorted(out.glob(f"{stem}-*.whl"))
    sdists = sorted(out.glob(f"{stem}-*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        raise DistError(f"expected one wheel and one sdist of {stem} in {out}: {wheels + sdists}")
    return wheels[0], sdists[0]


def _forbidden(name: str) -> bool:
    path = PurePosixPath(name)
    return bool(FORBIDDEN_PARTS & set(path.parts[:-1])) or any(
        part.endswith(FORBIDDEN_SUFFIXES) for part in path.parts
    )


def _check_wheel(wheel: Path, folder: str) -> None:
    package = DISTRIBUTIONS[folder][1]
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        info = {n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")}
        if len(info) != 1:
            raise DistError(f"{wheel.name}: expected one .dist-info folder, found {sorted(info)}")
        dist_info = info.pop()
        metadata = Parser().parsestr(archive.read(f"{dist_info}/METADATA").decode())
    problems = []
    if f"{dist_info}/licenses/LICENSE" not in names:
        problems.append(f"no {dist_info}/licenses/LICENSE (license-files)")
    if metadata.get("License-Expression") != "MIT" or "LICENSE" not in metadata.get_all(
        "License-File", []
    ):
        problems.append(
            f"License-Expression {metadata.get('License-Expression')!r}, License-File "
            f"{metadata.get_all('License-File')!r}; expected 'MIT' and 'LICENSE'"
        )
    if metadata.get("Description-Content-Type") != "text/markdown":
        problems.append(
            f"Description-Content-Type {metadata.get('Description-Content-Type')!r}, "
            "expected 'text/markdown'"
        )
    if len(metadata.get_payload() or "") < 500:
        problems.append("the long description (the PyPI page) is under 500 characters")
    if f"{package}/py.typed" not in names:
        problems.append(f"no {package}/py.typed")
    src = ROOT / "packages" / folder / "src"
    expected = {p.relative_to(src).as_posix() for p in (src / package).rglob("*.py")}
    expected.add(f"{package}/py.typed")
    shipped = {n for n in names if not n.startswith(f"{dist_info}/")}
    if shipped - expected:
        problems.append(f"files not in src/{package}: {sorted(shipped - expected)}")
    if expected - shipped:
        problems.append(f"files of src/{package} missing: {sorted(expected - shipped)}")
    bad = sorted(n for n in names if _forbidden(n))
    if bad:
        problems.append(f"tests, caches or bytecode shipped: {bad}")
    if problems:
        raise DistError(f"{wheel.name}: " + "; ".join(problems))
    print(f"check_dist: {wheel.name}: LICENSE, MIT, Markdown page, py.typed, {len(shipped)} files")


def _check_sdist(sdist: Path, folder: str) -> None:
    package = DISTRIBUTIONS[folder][1]
    with tarfile.open(sdist) as archive:
        names = [m.name for m in archive.getmembers() if m.isfile()]
    top = {n.split("/")[0] for n in names}
    if len(top) != 1:
        raise DistError(f"{sdist.name}: expected one top folder, found {sorted(top)}")
    relative = {n.split("/", 1)[1] for n in names}
    required = {"PKG-INFO", "pyproject.toml", "README.md", "LICENSE", f"src/{package}/py.typed"}
    allowed_top = {"PKG-INFO", "pyproject.toml", "README.md", "LICENSE", ".gitignore"}
    problems = []
    if required - relative:
        problems.append(f"missing {sorted(required - relative)}")
    extra = sorted(n for n in relative if n not in allowed_top and not n.startswith("src/"))
    if extra:
        problems.append(f"unexpected files {extra}")
    bad = sorted(n for n in relative if _forbidden(n))
    if bad:
        problems.append(f"tests, caches or bytecode shipped: {bad}")
    if problems:
        raise DistError(f"{sdist.name}: " + "; ".join(problems))
    print(f"check_dist: {sdist.name}: {len(relative)} files, LICENSE and README included")


def _record(wheel: Path) -> dict[str, str]:
    """``{path: sha256}`` of every file in ``wheel`` except its RECORD, hashed here."""
    with zipfile.ZipFile(wheel) as archive:
        return {
            name: hashlib.sha256(archive.read(name)).hexdigest()
            for name in archive.namelist()
            if not name.endswith(".dist-info/RECORD")
        }


def build(out: Path) -> None:
    """Build, twine-check and inspect the six artefacts; rebuild each sdist into a wheel."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    for folder in DISTRIBUTIONS:
        _run(sys.executable, "-m", "build", "--sdist", "--wheel", "--outdir", out,
             ROOT / "packages" / folder)  # fmt: skip
    artefacts = [a for folder in DISTRIBUTIONS for a in _artefacts(out, folder)]
    if len(list(out.iterdir())) != 6:
        raise DistError(f"expected six artefacts in {out}, found {sorted(out.iterdir())}")
    _run(sys.executable, "-m", "twine", "check", "--strict", *artefacts)
    from_sdist = out.parent / f"{out.name}-from-sdist"
    if from_sdist.exists():
        shutil.rmtree(from_sdist)
    for folder in DISTRIBUTIONS:
        wheel, sdist = _artefacts(out, folder)
        _check_wheel(wheel, folder)
        _check_sdist(sdist, folder)
        _run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--quiet",
             "--wheel-dir", from_sdist, sdist)  # fmt: skip
        rebuilt = from_sdist / wheel.name
        if not rebuilt.exists():
            raise DistError(f"pip wheel {sdist.name} wrote no {wheel.name} in {from_sdist}")
        ours, theirs = _record(wheel), _record(rebuilt)
        if ours != theirs:
            differ = sorted(n for n in ours.keys() | theirs.keys() if ours.get(n) != theirs.get(n))
            raise DistError(
                f"{sdist.name} is incomplete: the wheel built from it differs from {wheel.name} "
                f"in {differ}"
            )
        print(f"check_dist: {sdist.name} -> {wheel.name} identical to the checkout's wheel")


def install(out: Path) -> None:
    """Replace any installed rlightning distribution with the three wheels of ``out``."""
    names = [dist for dist, _, _ in DISTRIBUTIONS.values()]
    _run(sys.executable, "-m", "pip", "uninstall", "--yes", *names)
    wheels = [f"{_artefacts(out, f)[0]}[{extra}]" for f, (_, _, extra) in DISTRIBUTIONS.items()]
    _run(sys.executable, "-m", "pip", "install", *wheels)
    _run(sys.executable, "-m", "pip", "check")


def test(pytest_args: list[str], helpers: list[Path]) -> int:
    """Run pytest with ``pytest_args`` from a temporary directory outside the checkout.

    ``helpers`` (the checkout's root, for ``benchmarks.fuzz_wire``, which tests/core/test_wire.py
    imports) become the child's ``PYTHONPATH``; no rlightning module is importable from them
    (the distributions' sources lie under ``packages/*/src``), and the guard checks it.
    """
    with tempfile.TemporaryDirectory(prefix="rlightning-dist-") as tmp:
        where = Path(tmp).resolve()
        if where.is_relative_to(ROOT):
            raise DistError(f"the temporary directory {where} lies inside the checkout {ROOT}")
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        if helpers:
            env["PYTHONPATH"] = os.pathsep.join(str(h.resolve()) for h in helpers)
        env["RLIGHTNING_DIST_CHECKOUT"] = str(ROOT)
        command = [sys.executable, "-c", _GUARD, *pytest_args]
        print(f"check_dist: in {where}: python -m pytest {' '.join(pytest_args)}", flush=True)
        return subprocess.run(command, cwd=where, env=env, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    """Command line: ``build OUT``, ``install OUT`` or ``test [--helpers DIR] -- PYTEST_ARGS``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="step", required=True)
    for name in ("build", "install"):
        steps.add_parser(name).add_argument("out", type=Path, help="the artefacts' folder")
    tests = steps.add_parser("test")
    tests.add_argument(
        "--helpers", type=Path, action="append", default=[], help="put on PYTHONPATH"
    )
    tests.add_argument("pytest_args", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:
        if args.step == "build":
            build(args.out.resolve())
        elif args.step == "install":
            install(args.out.resolve())
        else:
            pytest_args = args.pytest_args
            if pytest_args[:1] == ["--"]:
                pytest_args = pytest_args[1:]
            return test(pytest_args, args.helpers)
    except DistError as error:
        print(f"check_dist: FAIL: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
