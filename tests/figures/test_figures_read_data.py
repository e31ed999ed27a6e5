"""Figures draw from results files and circuit descriptions only (issue 48, item 4): no figure
module loads, directly or through what it imports (at module level or inside a function), the
builder, the runners, the compile plumbing or Brian2."""

import ast
import json
import os
import subprocess
import sys

import pytest

FORBIDDEN = ("ctmhsa.sims.build", "ctmhsa.sims.simulate", "ctmhsa.sims.runners", "ctmhsa.sims.distributed",
             "ctmhsa.circuits.instantiate", "ctmhsa.devices.standalone", "brian2")


def _imports(path: str, package: str) -> list:
    """Every import statement of the module at ``path`` (nested ones too) as ``(module, names)``:
    ``names`` is None for ``import module``, the imported names for ``from module import ...``."""
    out = []
    for node in ast.walk(ast.parse(open(path).read())):
        if isinstance(node, ast.Import):
            out += [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module != "__future__":
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module) if p)
            out.append((module, [a.name for a in node.names]))
    return out


@pytest.mark.codegen_independent
def test_no_figure_module_loads_the_simulator():
    import ctmhsa
    from ctmhsa import figures

    where = os.path.dirname(figures.__file__)
    names = sorted(n[:-3] for n in os.listdir(where) if n.endswith(".py") and n != "__init__.py")
    statements = [s for n in names for s in _imports(os.path.join(where, f"{n}.py"), "ctmhsa.figures")]
    # One fresh interpreter: every figure module, then every import any of them runs lazily.
    code = ("import importlib, json, sys\n"
            f"for n in {names!r}:\n    importlib.import_module('ctmhsa.figures.' + n)\n"
            f"for m, names in {statements!r}:\n    __import__(m, fromlist=names or [])\n"
            f"print(json.dumps([f for f in {FORBIDDEN!r} if f in sys.modules]))\n")
    root = os.path.dirname(os.path.dirname(os.path.abspath(ctmhsa.__file__)))   # this checkout's package
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([root, os.environ.get("PYTHONPATH", "")]),
           "MPLBACKEND": "Agg"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.splitlines()[-1]) == []
