"""Sphinx configuration: furo theme, autodoc + napoleon (Google style), MyST markdown pages."""

from __future__ import annotations

from typing import Any

project = "rlightning"
author = "rlightning developers"
copyright = "2026, rlightning developers"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.viewcode",
    "sphinx.ext.intersphinx",
    "myst_parser",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "rlightning"
html_static_path = ["_static"]

napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
myst_heading_anchors = 3
# intersphinx needs the network, which CI does not have: cross-project links stay plain text.
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}


def _follow_moved_class(app: object, modname: str, fullname: str) -> str | None:
    """Point viewcode's [source] links of MultiAgentPolicyResponse at the module defining it.

    The class is documented under its public path, ``rlightning.types.policy_response``, and
    defined in ``rlightning.types._multi_agent``.
    """
    if modname == "rlightning.types.policy_response" and fullname.startswith(
        "MultiAgentPolicyResponse"
    ):
        return "rlightning.types._multi_agent"
    return None


def setup(app: Any) -> None:
    """Sphinx hook: connect :func:`_follow_moved_class`."""
    app.connect("viewcode-follow-imported", _follow_moved_class)
