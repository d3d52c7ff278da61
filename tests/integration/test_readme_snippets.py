"""Every Python snippet of the READMEs runs as written (the root one and each distribution's).

Each ```python block is executed in a fresh namespace, in order within its file, the way a new
user would paste it (``_snippets.py`` finds and runs them). A snippet that needs something the
environment lacks (torch, SB3, mpe2) skips, naming what is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared _snippets helper
from _snippets import ROOT, Snippet, run_snippet, snippets

READMES = [
    ROOT / "README.md",
    ROOT / "packages" / "core" / "README.md",
    ROOT / "packages" / "sb3" / "README.md",
    ROOT / "packages" / "pettingzoo" / "README.md",
]
SNIPPETS = [snippet for readme in READMES for snippet in snippets(readme)]


def test_every_readme_has_a_snippet_and_none_is_skipped() -> None:
    names = {snippet.name.split("#")[0] for snippet in SNIPPETS}
    assert names == {str(r.relative_to(ROOT)) for r in READMES}
    assert [s.name for s in SNIPPETS if s.skip is not None] == []


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.name for s in SNIPPETS])
def test_readme_snippet_runs(snippet: Snippet) -> None:
    run_snippet(snippet)
