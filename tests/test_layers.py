"""The layers of docs/design.md: one direction of dependency, no import cycle, checked on the
whole import graph (what a module reaches through others, not only what it names)."""

import ast
import pathlib

import networkx as nx
import pytest
from conftest import LAYERS

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = LAYERS
# a package may import the packages below it (maths: nothing of the project)
ALLOWED = {
    "maths": set(),
    "neurons": {"maths"},
    "devices": {"maths", "neurons"},
    "circuits": {"maths", "neurons", "devices"},
    "mapping": {"maths", "neurons", "devices", "circuits"},
    "sims": {"maths", "neurons", "devices", "circuits", "mapping"},
    "figures": {"maths", "neurons", "devices", "circuits", "mapping", "sims"},
}


def _module(path: pathlib.Path) -> str:
    """Installed module name of a source file: ``circuits/fold.py`` is ``ctmhsa.circuits.fold``."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(("ctmhsa",) + (parts[:-1] if parts[-1] == "__init__" else parts))


def _package(module: str) -> str:
    """The layer of a module: ``ctmhsa.circuits.fold`` is ``circuits``."""
    return module.split(".")[1]


def import_graph() -> nx.DiGraph:
    """Module -> project modules it imports (anywhere in the file, lazily or not)."""
    g = nx.DiGraph()
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            mod = _module(path)
            g.add_node(mod)
            base = mod if path.name == "__init__.py" else mod.rsplit(".", 1)[0]
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom):
                    if node.level:
                        up = base.split(".")[: len(base.split(".")) - node.level + 1]
                        target = ".".join(up + ([node.module] if node.module else []))
                    else:
                        target = node.module
                    names = [target] + [f"{target}.{a.name}" for a in node.names]
                elif isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                else:
                    continue
                for t in names:
                    if t and t.startswith("ctmhsa.") and _package(t) in PACKAGES and t != mod:
                        g.add_edge(mod, t)
    # keep edges to modules (a name imported from a module is not a module)
    mods = {n for n in g if (ROOT / (n.split(".", 1)[1].replace(".", "/") + ".py")).exists()
            or (ROOT / n.split(".", 1)[1].replace(".", "/") / "__init__.py").exists()}
    return g.subgraph(mods).copy()


# the command line composes every layer: ``ctmhsa figures`` draws after sims produced the data
ENTRY_POINTS = {"ctmhsa.sims.cli"}


@pytest.mark.codegen_independent
def test_layers_point_down():
    """Every module, through every chain of imports, reaches only its own layer and those below
    (the command line, which composes every layer, aside)."""
    g = import_graph()
    g.remove_nodes_from(ENTRY_POINTS)
    bad = sorted((a, b) for a in g for b in nx.descendants(g, a)
                 if _package(a) != _package(b) and _package(b) not in ALLOWED[_package(a)])
    assert not bad, f"imports against docs/design.md's layers: {bad[:20]}"


@pytest.mark.codegen_independent
def test_the_maths_is_numpy_only():
    """``ctmhsa.maths`` imports nothing of the project's other layers, nor Brian2 or scipy."""
    g = import_graph()
    maths = [n for n in g if _package(n) == "maths"]
    assert len(maths) >= 9
    assert not [(a, b) for a in maths for b in nx.descendants(g, a) if _package(b) != "maths"]
    for path in (ROOT / "maths").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else []
            assert not [n for n in names if n.split(".")[0] in ("brian2", "scipy", "matplotlib")], (path, names)


@pytest.mark.codegen_independent
def test_no_import_cycle():
    g = import_graph()
    # a package's __init__ re-exports its modules; cycles through it are not real
    g.remove_nodes_from([n for n in list(g) if n.count(".") == 1])
    assert list(nx.simple_cycles(g)) == []


@pytest.mark.codegen_independent
def test_mapping_never_imports_the_brian2_builder_and_figures_only_read():
    g = import_graph()
    reach = {a: nx.descendants(g, a) for a in g}
    builders = {"ctmhsa.circuits.instantiate", "ctmhsa.devices.standalone"}
    assert not [(a, b) for a in g if _package(a) == "mapping" for b in reach[a] & builders]
    assert not list(g.successors("ctmhsa.maths.reference"))
    simulating = {f"ctmhsa.sims.{m}" for m in ("simulate", "build", "runners", "distributed", "sweep")} | builders
    assert not [(a, b) for a in g if _package(a) == "figures" for b in reach[a]
                if b in simulating or b.startswith("ctmhsa.sims.benchmarks")]
