"""Every Python snippet of the docs (``docs/*.md``) runs as written, each on its own.

Each ```python block runs in a fresh namespace (``_snippets.py``, shared with the README test), so
a snippet must be self-contained or be marked, right before it, with
``<!-- snippet: skip REASON -->``: for a block that needs a saved model or trains for minutes. A
marker must give its reason, and few blocks may be marked. A block that imports something not
installed here skips, naming it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if str(Path(__file__).resolve().parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the shared _snippets helper
from _snippets import ROOT, Snippet, run_snippet, snippets

PAGES = sorted((ROOT / "docs").glob("*.md"))

#: Most blocks that may be skipped over all pages: skipping is for the few that cannot run fast.
MAX_SKIPPED = 5


SNIPPETS = [snippet for page in PAGES for snippet in snippets(page)]


def test_snippets_are_found_and_few_are_skipped() -> None:
    pages = {snippet.name.split("#")[0] for snippet in SNIPPETS}
    assert {"docs/core.md", "docs/index.md", "docs/pettingzoo.md", "docs/transport.md"} <= pages
    skipped = [snippet.name for snippet in SNIPPETS if snippet.skip is not None]
    assert len(skipped) <= MAX_SKIPPED, skipped


def test_every_skip_marker_gives_its_reason() -> None:
    unexplained = [snippet.name for snippet in SNIPPETS if snippet.skip == ""]
    assert unexplained == [], f"<!-- snippet: skip --> without a reason before {unexplained}"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.name for s in SNIPPETS])
def test_docs_snippet_runs(
    snippet: Snippet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a snippet that writes a file writes it here
    run_snippet(snippet)
