"""Shared fixtures: seeded random attention problems; every test must carry a category marker."""

import ast
import os
import sys

import numpy as np
import pytest

# the package's layers (folders at the repository's root), lowest first (tests/test_layers.py)
LAYERS = ("maths", "neurons", "devices", "circuits", "mapping", "sims", "figures")

# pyproject.toml's markers that say what a test needs (long and smoke are not categories)
CATEGORIES = ("codegen_independent", "brian2", "standalone", "distributed")


def uncategorised(items):
    """Node ids of the ``items`` that carry none of the ``CATEGORIES`` (a module's ``pytestmark``
    counts)."""
    return [it.nodeid for it in items if not any(m.name in CATEGORIES for m in it.iter_markers())]


def _no_category(nodeids):
    return (f"{len(nodeids)} test(s) carry none of the category markers {', '.join(CATEGORIES)} "
            f"(pyproject.toml): " + ", ".join(nodeids))


def pytest_configure(config):
    """Import Brian2 on the main thread: pytest-xdist's controller imports the module of a
    warning a worker reports (NoiseFloorWarning, StandaloneCacheWarning: modules that import
    Brian2) in a thread, and Brian2's first import sets a signal handler, which only the main
    thread may (an INTERNALERROR, found in version 0.15)."""
    import brian2  # noqa: F401


def pytest_collection_modifyitems(config, items):
    """Refuse the collection if a test has no category: ``-m`` selects by category, so an unmarked
    test would silently drop out of every selection (runs before ``-m`` deselects). A pytest-xdist
    worker cannot report a UsageError (it crashes unexplained): there each such test fails instead."""
    missing = uncategorised(items)
    if missing and not hasattr(config, "workerinput"):
        raise pytest.UsageError(_no_category(missing))


def pytest_runtest_setup(item):
    """The same check per test, for pytest-xdist's workers."""
    if uncategorised([item]):
        pytest.fail(_no_category([item.nodeid]), pytrace=False)


@pytest.fixture(autouse=True)
def brian2_globals():
    """Brian2's process-wide state (the default clock's step, the code-generation target) as each
    test found it: a test that sets ``defaultclock.dt`` must not change the next test's clock on
    the same pytest-xdist worker (which tests share a worker depends on the machine)."""
    b2 = sys.modules.get("brian2")
    saved = None if b2 is None else (b2.defaultclock.dt_, b2.prefs.codegen.target)
    yield
    b2 = sys.modules.get("brian2")
    if b2 is None:
        return
    dt, target = saved if saved is not None else (1e-4, "auto")
    b2.defaultclock.dt_ = dt
    b2.prefs.codegen.target = target


def random_problem(seed=0, n=4, m=None, H=2, dk=3, dv=4, de=5, scale=1.0, batch=None):
    """Tokens and weights with unit-variance projections (weights scaled by 1/sqrt(de))."""
    rng = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)
    X = rng.normal(size=lead + (n, de))
    Y = None if m is None else rng.normal(size=lead + (m, de))
    s = scale / np.sqrt(de)
    WQ = rng.normal(size=(H, dk, de)) * s
    WK = rng.normal(size=(H, dk, de)) * s
    WV = rng.normal(size=(H, dv, de)) * s
    WO = rng.normal(size=(H, de, dv)) / np.sqrt(dv)
    return X, Y, WQ, WK, WV, WO


@pytest.fixture
def problem():
    return random_problem


@pytest.fixture(scope="module")
def problem2():
    """A two-head problem (n = 3, dk = dv = 3, de = 4) shared by the device and dask tests."""
    X, _, WQ, WK, WV, WO = random_problem(seed=3, n=3, H=2, dk=3, dv=3, de=4)
    return X, WQ, WK, WV, WO


@pytest.fixture
def no_build(monkeypatch):
    """Any attempt to build a Brian2 network is a failure (validation must refuse first)."""
    def boom(*a, **k):
        raise AssertionError("a network was built before validation failed")
    monkeypatch.setattr("ctmhsa.sims.runners.instantiate", boom)


def processes_in(root):
    """``(pid, command line)`` of every process working in ``root`` or naming it."""
    out = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:   # gone, or a zombie
            continue
        if cwd.startswith(root) or root in cmd:
            out.append((int(pid), cmd))
    return out


def name_comparisons(source: str, names) -> list[tuple[int, str]]:
    """Line and text of every comparison of a value with one of ``names`` in ``source``:
    ``x == "rate"``, ``x != "product"``, ``x in ("escape", "lif")``; a key test such as
    ``"rate" in obs`` is not one (the registries' tests count them: issue 48)."""
    def named(node):
        return isinstance(node, ast.Constant) and node.value in names

    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:]):
            if isinstance(op, (ast.Eq, ast.NotEq)) and (named(left) or named(right)):
                found.append((node.lineno, ast.get_source_segment(source, node)))
            elif isinstance(op, (ast.In, ast.NotIn)) and isinstance(right, (ast.Tuple, ast.List, ast.Set)) \
                    and any(named(e) for e in right.elts):
                found.append((node.lineno, ast.get_source_segment(source, node)))
    return found
