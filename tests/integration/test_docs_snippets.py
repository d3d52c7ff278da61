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

#: Blocks of pages this change may not edit (docs/sb3.md has another owner) that need a
#: ``<!-- snippet: skip ... -->`` marker they do not have yet: (page, a line of the block) -> the
#: reason. An entry whose line is no longer in an unmarked block of its page is an error (stale).
MARKERS_TO_ADD: dict[tuple[str, str], str] = {
    ("docs/sb3.md", 'model = PPO.load("ppo_cartpole")'): "needs a model saved as ppo_cartpole.zip",
    ("docs/sb3.md", "obs = start_training(model, total_timesteps=100_000)"): (
        "trains PPO for 100,000 steps (649 s measured on this 2-core machine, no output)"
    ),
    ("docs/sb3.md", "obs = start_training(model, total_timesteps=50_000)"): (
        "trains SAC for 50,000 steps (ten minutes or more on two CPU cores)"
    ),
    (
        "docs/sb3.md",
        "obs = start_training(model, 100_000, callback=[evaluation], progress_bar=True)",
    ): (
        "not self-contained: continues the on-policy loop above (its imports, model, adapter, env, "
        "env_ids) and trains until EvalCallback's reward threshold"
    ),
}
#: Most blocks that may be skipped over all pages: skipping is for the few that cannot run fast.
MAX_SKIPPED = 4
_PENDING = " (a marker still to add to the page)"


def _with_pending_markers(found: list[Snippet]) -> list[Snippet]:
    out = []
    for snippet in found:
        page = snippet.name.split("#")[0]
        for (where, line), reason in MARKERS_TO_ADD.items():
            if where == page and snippet.skip is None and line in snippet.code:
                snippet = Snippet(snippet.name, snippet.code, snippet.line, reason + _PENDING)
        out.append(snippet)
    return out


SNIPPETS = _with_pending_markers([snippet for page in PAGES for snippet in snippets(page)])


def test_snippets_are_found_and_few_are_skipped() -> None:
    pages = {snippet.name.split("#")[0] for snippet in SNIPPETS}
    assert {"docs/core.md", "docs/index.md", "docs/pettingzoo.md", "docs/transport.md"} <= pages
    skipped = [snippet.name for snippet in SNIPPETS if snippet.skip is not None]
    assert len(skipped) <= MAX_SKIPPED, skipped


def test_every_skip_marker_gives_its_reason() -> None:
    unexplained = [snippet.name for snippet in SNIPPETS if snippet.skip == ""]
    assert unexplained == [], f"<!-- snippet: skip --> without a reason before {unexplained}"


def test_pending_markers_are_not_stale() -> None:
    for page, line in MARKERS_TO_ADD:
        blocks = [s for s in SNIPPETS if s.name.startswith(f"{page}#") and line in s.code]
        assert blocks, f"{page}: no block holds {line!r} any more; drop its MARKERS_TO_ADD entry"
        # Applied to the unmarked block; once the page has its own marker, the entry is unused.
        assert all(s.skip is not None for s in blocks), f"{page}: {line!r}"


@pytest.mark.parametrize("snippet", SNIPPETS, ids=[s.name for s in SNIPPETS])
def test_docs_snippet_runs(
    snippet: Snippet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a snippet that writes a file writes it here
    run_snippet(snippet)
