"""Every Python snippet of the READMEs runs as written (the root one and each distribution's).

Each ```python block is executed in a fresh namespace, in order within its file, the way a new
user would paste it. A snippet that needs something the environment lacks (torch, SB3, mpe2)
skips, naming what is missing.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
READMES = [
    ROOT / "README.md",
    ROOT / "packages" / "core" / "README.md",
    ROOT / "packages" / "sb3" / "README.md",
    ROOT / "packages" / "pettingzoo" / "README.md",
]
_BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def _snippets() -> list[tuple[str, str]]:
    out = []
    for readme in READMES:
        for i, code in enumerate(_BLOCK.findall(readme.read_text(encoding="utf-8"))):
            out.append((f"{readme.relative_to(ROOT)}#{i}", code))
    return out


SNIPPETS = _snippets()


def test_every_readme_has_a_snippet() -> None:
    names = {name.split("#")[0] for name, _ in SNIPPETS}
    assert names == {str(r.relative_to(ROOT)) for r in READMES}


@pytest.mark.parametrize(("name", "code"), SNIPPETS, ids=[name for name, _ in SNIPPETS])
def test_readme_snippet_runs(name: str, code: str) -> None:
    for module in re.findall(r"^(?:from|import) ([a-zA-Z0-9_]+)", code, re.M):
        pytest.importorskip(module, reason=f"{name} imports {module}, not installed here")
    exec(compile(code, name, "exec"), {"__name__": "__readme__"})
