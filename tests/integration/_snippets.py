"""Find and run the Python code blocks of Markdown pages (shared by the README and docs tests).

A page's ```` ```python ```` blocks are run each in a fresh namespace, in page order, the way a
reader pastes one. A block right after an HTML comment ``<!-- snippet: skip REASON -->`` (blank
lines between allowed) is not run; the reason must be given. A block whose imports are not
installed here skips, naming the missing module.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.S | re.M)
_SKIP = re.compile(r"<!--\s*snippet:\s*skip\b(.*?)-->\s*\Z", re.S)
_IMPORT = re.compile(r"^(?:from|import) ([a-zA-Z0-9_]+)", re.M)


@dataclass(frozen=True)
class Snippet:
    """One ```` ```python ```` block of a page.

    Attributes:
        name: ``"<page relative to the repository>#<index of the block in the page>"``.
        code: The block's source.
        line: The page line the code starts on (1-based), for tracebacks.
        skip: None to run it; otherwise the ``<!-- snippet: skip ... -->`` reason ("" when the
            comment gives none, which the tests refuse).
    """

    name: str
    code: str
    line: int
    skip: str | None


def snippets(page: Path) -> list[Snippet]:
    """Return every ```` ```python ```` block of ``page``, in order.

    Args:
        page: A Markdown file inside the repository.

    Returns:
        The blocks, each named ``<page>#<i>``.
    """
    text = page.read_text(encoding="utf-8")
    found = []
    for i, match in enumerate(_BLOCK.finditer(text)):
        marker = _SKIP.search(text[: match.start()])
        skip = marker.group(1).strip() if marker else None
        line = text.count("\n", 0, match.start(1)) + 1
        found.append(Snippet(f"{page.relative_to(ROOT)}#{i}", match.group(1), line, skip))
    return found


def run_snippet(snippet: Snippet) -> dict[str, object]:
    """Run ``snippet`` in a fresh namespace, or skip it (a skip marker or a missing import).

    Line numbers in tracebacks are the page's: the code is compiled padded to its first line.

    Args:
        snippet: The block.

    Returns:
        The namespace it ran in.
    """
    if snippet.skip is not None:
        pytest.skip(f"{snippet.name}: marked <!-- snippet: skip {snippet.skip} -->")
    for module in _IMPORT.findall(snippet.code):
        pytest.importorskip(module, reason=f"{snippet.name} imports {module}, not installed here")
    namespace: dict[str, object] = {"__name__": "__snippet__"}
    page = snippet.name.split("#")[0]
    exec(compile("\n" * (snippet.line - 1) + snippet.code, page, "exec"), namespace)
    return namespace
