"""Write ``docs/compatibility.md`` from ``tox.ini`` and the distributions' ``pyproject.toml``.

For each distribution and each dependency it declares (Python included, extras marked), the page
gives the declared range, every version a tox environment pins for it, and the environments that
install it unpinned (there pip takes the newest release the range allows). The environments read
are those CI runs: tox's ``env_list`` and the ``versions`` label, keeping those whose commands run
pytest. An environment tests a distribution when its ``deps`` install ``packages/<name>``.

Run ``python scripts/compat_table.py`` after changing tox.ini or a pyproject;
``tests/test_compatibility_page.py`` fails while the committed page differs from what this writes.
``python scripts/compat_table.py --check`` exits 1 instead of writing when the page is stale.

Only the tox syntax that tox.ini uses is understood (``{[section]key}`` substitutions, ``{a,b}``
section names, ``factor:`` line conditions, ``{tox_root}``); anything else raises ``ValueError``
rather than giving a wrong table.
"""

from __future__ import annotations

import argparse
import configparser
import itertools
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import tomllib
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PAGE = Path("docs") / "compatibility.md"
DISTRIBUTIONS = {
    "core": "rlightning-core",
    "sb3": "rlightning-sb3",
    "pettingzoo": "rlightning-pettingzoo",
    "ray": "rlightning-ray",
}
#: The Python an environment without ``base_python`` runs on: the one CI runs tox with
#: (``python3`` on the CI machines, 3.11; tests/test_compatibility_page.py checks it).
DEFAULT_PYTHON = "3.11"

_SUBSTITUTION = re.compile(r"\{\[([^\]]+)\]([^}]+)\}")
_ANY_BRACE = re.compile(r"\{[^}]*\}")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;,]+)$")
_PACKAGE = re.compile(r"^\{tox_root\}/packages/([a-z0-9]+)(?:\[([a-z0-9,]+)\])?$")


@dataclass
class ToxEnv:
    """One tox environment as far as the table needs it."""

    name: str
    python: str
    pins: dict[str, str] = field(default_factory=dict)
    unpinned: set[str] = field(default_factory=set)
    packages: dict[str, set[str]] = field(default_factory=dict)


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _expand_section_name(name: str) -> Iterator[str]:
    """``torch-{cpu,cuda}`` -> ``torch-cpu``, ``torch-cuda``."""
    parts = re.split(r"(\{[^}]*\})", name)
    choices = [p[1:-1].split(",") if p.startswith("{") else [p] for p in parts]
    for combo in itertools.product(*choices):
        yield "".join(combo)


class ToxIni:
    """The part of tox.ini the table reads."""

    def __init__(self, path: Path) -> None:
        self.ini = configparser.ConfigParser(interpolation=None)
        self.ini.read(path)
        self.root = path.parent
        self.sections: dict[str, str] = {}
        for section in self.ini.sections():
            if section.startswith("testenv:"):
                for env in _expand_section_name(section.removeprefix("testenv:")):
                    self.sections[env] = section

    def _raw(self, env: str, key: str) -> str | None:
        section = self.sections.get(env)
        if section is not None and self.ini.has_option(section, key):
            return self.ini.get(section, key)
        if self.ini.has_option("testenv", key):
            return self.ini.get("testenv", key)
        return None

    def _substitute(self, text: str, depth: int = 0) -> str:
        if depth > 10:
            raise ValueError(f"tox.ini: substitutions nested too deep in {text!r}")

        def replace(match: re.Match[str]) -> str:
            return self._substitute(self.ini.get(match.group(1), match.group(2)), depth + 1)

        return _SUBSTITUTION.sub(replace, text)

    def lines(self, env: str, key: str) -> list[str]:
        """The non-empty lines of ``key`` for ``env``, substituted and filtered by factor."""
        raw = self._raw(env, key)
        if raw is None:
            return []
        factors = set(env.split("-"))
        out = []
        for line in self._substitute(raw).splitlines():
            line = line.split(" #")[0].strip()
            if not line or line.startswith("#"):
                continue
            condition = re.match(r"^([a-z0-9]+):\s+(.*)$", line)
            if condition:
                if condition.group(1) not in factors:
                    continue
                line = condition.group(2)
            out.append(line)
        return out

    def tested_envs(self) -> list[str]:
        """Environments of ``env_list`` and the ``versions`` label that run pytest, in order."""
        names = [n.strip() for n in self.ini.get("tox", "env_list").split(",")]
        labels = self.ini.get("tox", "labels", fallback="")
        match = re.search(r"^\s*versions\s*=\s*(.+)$", labels, re.M)
        if match is None:
            raise ValueError("tox.ini: no `versions` label under [tox] labels")
        names += [n.strip() for n in match.group(1).split(",") if n.strip() not in names]
        return [n for n in names if any("pytest" in c for c in self.lines(n, "commands"))]

    def _requirement_lines(self, lines: list[str]) -> list[str]:
        """``lines`` with each ``-r {tox_root}/<file>`` replaced by that file's requirements."""
        out = []
        for line in lines:
            included = re.fullmatch(r"-r\s*\{tox_root\}/(\S+)", line)
            if included is None:
                out.append(line)
                continue
            for text in (self.root / included.group(1)).read_text(encoding="utf-8").splitlines():
                text = text.split(" #")[0].strip()
                if text and not text.startswith("#"):
                    out.append(text)
        return out

    def env(self, name: str) -> ToxEnv:
        """Python, pins, unpinned requirements and rlightning packages of environment ``name``."""
        base = self.lines(name, "base_python")
        python = DEFAULT_PYTHON
        if base:
            found = re.fullmatch(r"python(3\.\d+)", base[0])
            if found is None:
                raise ValueError(f"tox.ini [{name}]: cannot read base_python {base[0]!r}")
            python = found.group(1)
        env = ToxEnv(name, python)
        for line in self._requirement_lines(self.lines(name, "deps")):
            package = _PACKAGE.match(line)
            if package:
                extras = set(filter(None, (package.group(2) or "").split(",")))
                env.packages.setdefault(package.group(1), set()).update(extras)
                continue
            if _ANY_BRACE.search(line):
                raise ValueError(f"tox.ini [{name}]: cannot read the deps line {line!r}")
            pin = _PIN.match(line)
            if pin:
                env.pins[_normalise(pin.group(1))] = pin.group(2)
            else:
                env.unpinned.add(_normalise(Requirement(line).name))
        return env


@dataclass
class Row:
    """One declared dependency of a distribution (Python included)."""

    name: str
    extra: str | None
    declared: str


def _rows(meta: dict[str, object]) -> list[Row]:
    """Python, then every dependency and every extra's, each range as the pyproject spells it."""
    rows = [Row("python", None, str(meta["requires-python"]))]
    deps = meta.get("dependencies", [])
    extras = meta.get("optional-dependencies", {})
    assert isinstance(deps, list)
    assert isinstance(extras, dict)
    entries = [(d, None) for d in deps] + [(d, x) for x, ds in extras.items() for d in ds]
    for spec, extra in entries:
        requirement = Requirement(spec)
        declared = re.sub(r"^[A-Za-z0-9._-]+(\[[^\]]*\])?\s*", "", spec.split(";")[0]).strip()
        rows.append(Row(_normalise(requirement.name), extra, declared or "any"))
    return rows


def _installs_extra(env: ToxEnv, folder: str, extra: str, meta: dict[str, object]) -> bool:
    """Whether ``env`` installs ``packages/<folder>[extra]`` or every requirement of the extra."""
    if extra in env.packages.get(folder, set()):
        return True
    extras = meta.get("optional-dependencies", {})
    assert isinstance(extras, dict)
    names = [_normalise(Requirement(spec).name) for spec in extras[extra]]
    local = {DISTRIBUTIONS[folder] for folder in env.packages}
    return all(n in env.pins or n in env.unpinned or n in local for n in names)


def _tested(dependency: str, envs: list[ToxEnv]) -> tuple[str, str]:
    """The pinned versions (with their environments) and the unpinned environments."""
    if dependency == "python":
        versions: dict[str, list[str]] = {}
        for env in envs:
            versions.setdefault(env.python, []).append(env.name)
        pinned = sorted(versions.items(), key=lambda item: Version(item[0]))
        return "; ".join(f"{v} ({_names(e)})" for v, e in pinned) or "none", ""
    versions = {}
    for env in envs:
        if dependency in env.pins:
            versions.setdefault(env.pins[dependency], []).append(env.name)
    pinned = sorted(versions.items(), key=lambda item: Version(item[0]))
    unpinned = [e.name for e in envs if dependency not in e.pins]
    return "; ".join(f"{v} ({_names(e)})" for v, e in pinned) or "none", _names(unpinned)


def _names(envs: list[str]) -> str:
    return ", ".join(f"`{e}`" for e in envs)


def render(root: Path = ROOT) -> str:
    """The page, from ``root``'s tox.ini and pyprojects."""
    tox = ToxIni(root / "tox.ini")
    envs = [tox.env(name) for name in tox.tested_envs()]
    out = [
        "# Compatibility: supported and tested versions",
        "",
        "<!-- Generated by scripts/compat_table.py from tox.ini and packages/*/pyproject.toml;",
        "     do not edit by hand: run `python scripts/compat_table.py`. -->",
        "",
        "What each distribution declares (its `pyproject.toml`) and which versions the tox",
        "environments that CI runs (`tox` and `tox -m versions`) test it with. **Pinned** versions",
        "are installed exactly; in the **unpinned** environments pip installs the newest release",
        "the declared range allows (what a user gets on `pip install`).",
        "",
        "Each adapter checks its framework (stable-baselines3 and sb3-contrib, PettingZoo, Ray)",
        "when it is imported, with one verdict for all of them",
        "(`rlightning.rules.check_framework_version`, rule `framework-version`, by PEP 440 as pip",
        "orders versions):",
        "",
        "| installed version | verdict |",
        "|---|---|",
        "| from the lowest supported release to the highest tested one | imports |",
        "| a local build of such a release (`2.9.2+cu121`) | imports: it counts as its release |",
        "| a pre-release or dev release of the lowest release (`2.4.0rc1`), or an older one |"
        " `ImportError` naming the range and the `pip install` that fixes it |",
        "| newer than the highest tested release: a later minor or patch, a post-release, a"
        " pre-release of a later one, a new major beyond the declared cap (`3.0.0`, `3.0.0a1`) |"
        " imports with an `UntestedVersionWarning` naming the tested range |",
        "| not a PEP 440 version | `ImportError` |",
        "",
        "`UntestedVersionWarning` is one class, `rlightning.UntestedVersionWarning`, which every",
        'adapter re-exports under that name: `warnings.filterwarnings("ignore",',
        "category=rlightning.UntestedVersionWarning)` silences all of them. See",
        '[Design decisions](decisions.md), "Supported versions".',
        "",
        "| environment | Python | distributions tested |",
        "|---|---|---|",
    ]
    for env in envs:
        tested = ", ".join(
            DISTRIBUTIONS[p] + (f"[{','.join(sorted(x))}]" if x else "")
            for p, x in sorted(
                env.packages.items(), key=lambda kv: list(DISTRIBUTIONS).index(kv[0])
            )
        )
        out.append(f"| `{env.name}` | {env.python} | {tested} |")
    for folder, dist in DISTRIBUTIONS.items():
        meta = tomllib.loads((root / "packages" / folder / "pyproject.toml").read_text())["project"]
        testing = [e for e in envs if folder in e.packages]
        out += [
            "",
            f"## {dist} {meta['version']}",
            "",
            "| dependency | declared | pinned versions tested (environment) | unpinned in |",
            "|---|---|---|---|",
        ]
        for row in _rows(meta):
            shown = "Python" if row.name == "python" else row.name
            users = testing
            if row.extra is not None:
                shown += f" (extra `{row.extra}`)"
                users = [e for e in testing if _installs_extra(e, folder, row.extra, meta)]
            if row.name in DISTRIBUTIONS.values():
                envs_here = _names([e.name for e in users])
                pinned, unpinned = f"this checkout's {meta['version']} ({envs_here})", ""
            else:
                pinned, unpinned = _tested(row.name, users)
            out.append(f"| {shown} | `{row.declared}` | {pinned} | {unpinned or '-'} |")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line: write the page, or with ``--check`` exit 1 when it is stale."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    text = render()
    page = ROOT / PAGE
    if args.check:
        if not page.exists() or page.read_text() != text:
            print(f"{PAGE} is stale: run python scripts/compat_table.py", file=sys.stderr)
            return 1
        return 0
    page.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
