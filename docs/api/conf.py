"""Sphinx configuration of the ctmhsa API reference (built from the docstrings, numpydoc style).

Build: ``python -m sphinx -W -b html docs/api docs/api/_build/html`` (``-W``: a warning fails the
build; ``tests/test_docs.py`` runs it in the default test suite: about 6 s).
"""

import importlib
import os
import sys
from importlib import metadata

# The package's layers are the repository's top-level folders, installed as ctmhsa.circuits, ...
# From a checkout that was never installed, ``import ctmhsa`` finds them beside itself (see
# ctmhsa/__init__.py) once the repository root is importable.
ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

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


def _documented_name(target: str, module: str | None) -> str | None:
    """Where the object a cross-reference names is documented: ``ctmhsa.sims.simulate_mhsa`` (a
    re-export of the front door or of a layer package) is documented as
    ``ctmhsa.sims.simulate.simulate_mhsa``; an unqualified name is looked up in the module whose
    docstring cites it."""
    names = [target] if "." in target or not module else [f"{module}.{target}", target]
    for name in names:
        parts = name.split(".")
        for k in range(len(parts) - 1, 0, -1):
            try:
                obj = importlib.import_module(".".join(parts[:k]))
            except ImportError:
                continue
            owner = ".".join(parts[:k])
            try:
                for attr in parts[k:]:
                    owner, obj = f"{owner}.{attr}", getattr(obj, attr)
            except AttributeError:
                break
            mod, qual = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
            if isinstance(mod, str) and isinstance(qual, str) and mod.startswith("ctmhsa"):
                return f"{mod}.{qual}"
            return owner
    return None


def _resolve_reexports(app, env, node, contnode):
    """A ``py`` cross-reference that names an object by a re-exporting module (or unqualified)
    resolves to where the object is documented; anything else stays unresolved."""
    if node.get("refdomain") != "py":
        return None
    name = _documented_name(node["reftarget"], node.get("py:module"))
    if not name or name == node["reftarget"]:
        return None
    py = env.get_domain("py")
    for role in (node["reftype"], "obj"):
        ref = py.resolve_xref(env, node["refdoc"], app.builder, role, name, node, contnode)
        if ref is not None:
            return ref
    return None


def setup(app):
    app.connect("missing-reference", _resolve_reexports)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
