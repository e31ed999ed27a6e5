"""Sphinx configuration of the ctmhsa API reference (built from the docstrings, numpydoc style).

Build: ``python -m sphinx -W -b html docs/api docs/api/_build/html`` (``-W``: a warning fails the
build; ``tests/test_docs.py`` runs it).
"""

import os
import sys
from importlib import metadata

sys.path.insert(0, os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))

project = "ctmhsa"
author = "ctmhsa developers"
copyright = "2025, ctmhsa developers"
try:
    release = metadata.version("ctmhsa")
except metadata.PackageNotFoundError:  # pragma: no cover - a source tree without install
    release = "unknown"
version = release

extensions = ["sphinx.ext.autodoc", "sphinx.ext.mathjax", "numpydoc"]
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False,
                           "member-order": "bysource"}
autodoc_typehints = "none"            # signatures as written; types are in the docstrings
autodoc_mock_imports = []
numpydoc_show_class_members = False   # attributes are documented in the class docstrings
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path = []
suppress_warnings = []
# absolute values written |v| in docstrings read as reStructuredText substitutions: print them
rst_prolog = "\n".join(f".. |{s}| replace:: \\|{s}\\|" for s in ("v", "x̃"))
nitpicky = False
