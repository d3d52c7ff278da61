"""Sphinx configuration: furo theme, autodoc + napoleon (Google style), MyST markdown pages."""

from __future__ import annotations

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

napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": True}
myst_heading_anchors = 3
# intersphinx needs the network, which CI does not have: cross-project links stay plain text.
intersphinx_mapping: dict[str, tuple[str, str | None]] = {}
