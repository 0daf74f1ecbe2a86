"""Sphinx configuration of the documentation site (docs/README.md: how to build it, and why Sphinx).

The pages are Markdown (MyST). The reference pages of the CLI, the config and report.json are written here, before
Sphinx reads the sources, by :mod:`pipelines.app.reference` from the argument parser, the typed config and the
report's declared fields: they are never edited by hand and cannot drift from the code.
"""

from __future__ import annotations

from pathlib import Path

from pipelines.app import reference  # the project installed with its docs extra: pip install -e ".[docs]"

DOCS = Path(__file__).resolve().parent
if (DOCS / "reference").is_dir():  # the site's, not a test's sources of two pages (tests/docs/test_site.py)
    reference.write_pages(DOCS / "reference")

project = "ltr-curriculum"
author = "the ltr-curriculum authors"
copyright = "2026, the ltr-curriculum authors"
extensions = ["myst_parser", "sphinx.ext.autodoc"]  # no napoleon: it reads "text: more" as "type: text"
source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "README.md", "research", "**/.ipynb_checkpoints"]
myst_enable_extensions = ["deflist", "colon_fence"]
myst_heading_anchors = 4  # [text](page.md#a-heading) links, checked by the strict build
html_theme = "furo"
html_title = "ltr-curriculum"
html_static_path = ["_static"]
html_css_files = ["ltr.css"]
html_last_updated_fmt = None
# autodoc: the plug-in API and the results API, from their docstrings
autodoc_default_options = {"member-order": "bysource"}  # each page names the members it shows
autodoc_typehints = "description"
# The strict build is -W (every warning an error), not -n: the API pages' docstrings name modules of ours that the
# site does not document (udfs.objectives.registry, pipelines.core.keys...), which -n would report as broken.
nitpicky = False
smartquotes = False  # `--master` stays two hyphens, quotes stay as typed
