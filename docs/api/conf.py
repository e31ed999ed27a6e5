"""Sphinx configuration of the ctmhsa documentation site: the guides (``docs/*.md``, Markdown read
by myst-parser) and the API reference (``docs/api/*.rst``, built from the docstrings, numpydoc style).

The source directory is ``docs`` (so the guides stay where the README and each other link to them)
and this configuration lives in ``docs/api`` (``-c``); the site's start page is ``api/index``.
Build: ``python -m sphinx -W -c docs/api -b html docs docs/api/_build/html`` (``-W``: a warning
fails the build; ``tests/test_docs.py`` runs it in the default test suite).
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

extensions = ["sphinx.ext.autodoc", "sphinx.ext.mathjax", "numpydoc", "myst_parser"]
root_doc = "api/index"
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
# the guides link to each other's sections by their GitHub anchors (cortex.md#the-standalone-cache)
myst_heading_anchors = 3
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False,
                           "member-order": "bysource"}
autodoc_typehints = "none"            # signatures as written; types are in the docstrings
autodoc_mock_imports = []
numpydoc_show_class_members = False   # attributes are documented in the class docstrings
numpydoc_class_members_toctree = False
numpydoc_validation_checks = set()
exclude_patterns = ["_build", "api/_build"]
html_theme = "alabaster"
html_static_path = []
# the site starts at api/index.html; root/index.html sends the build folder's index.html there
html_extra_path = ["root"]
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


def _numpydoc_template_once():
    """numpydoc (1.11) compiles its docstring template anew for every documented object (a
    fifth of the build's time); compile it once. Its ``get_doc_object`` hook is what
    ``numpydoc.setup(app, get_doc_object_=...)`` replaces; if numpydoc's internals differ, keep its own."""
    from numpydoc import docscrape, docscrape_sphinx, numpydoc as extension

    own = docscrape_sphinx.get_doc_object
    if getattr(extension, "get_doc_object", None) is not own:
        return
    template = {}

    def get_doc_object(obj, what=None, doc=None, config=None, builder=None):
        if builder not in template:
            compiled = {}
            own(None, what="object", doc="", config=compiled, builder=builder)
            template[builder] = compiled["template"]
        config = {} if config is None else config
        config["template"] = template[builder]
        return docscrape.get_doc_object(obj, what=what, doc=doc, config=config,
                                        class_doc=docscrape_sphinx.SphinxClassDoc,
                                        func_doc=docscrape_sphinx.SphinxFunctionDoc,
                                        obj_doc=docscrape_sphinx.SphinxObjDoc)

    extension.get_doc_object = get_doc_object


def setup(app):
    app.connect("missing-reference", _resolve_reexports)
    _numpydoc_template_once()
    return {"parallel_read_safe": True, "parallel_write_safe": True}
