"""The package lives in one namespace: the layers install as ``ctmhsa.circuits``, ``ctmhsa.neurons``,
... and nothing else reaches the top level of a user's environment; ``import ctmhsa`` is the front
door."""

import ast
import pathlib
import subprocess
import sys
from importlib import metadata

import pytest

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = pathlib.Path(__file__).resolve().parents[1]
LAYERS = ("circuits", "neurons", "mapping", "sims", "figures")

pytestmark = pytest.mark.codegen_independent


def _top_levels_of_distribution() -> set[str]:
    """Top-level importable names the installed ``ctmhsa`` distribution puts in site-packages."""
    # the installed one, not the build's ctmhsa.egg-info a checkout on sys.path may hold
    path = [p for p in sys.path if pathlib.Path(p or ".").resolve() != ROOT]
    dist = next(iter(metadata.distributions(name="ctmhsa", path=path)), None)
    if dist is None:
        raise metadata.PackageNotFoundError("ctmhsa")
    files = [str(f) for f in (dist.files or [])]
    finders = [f for f in files if f.startswith("__editable__") and f.endswith("_finder.py")]
    if finders:
        # an editable install: its import hook maps names to source folders
        text = pathlib.Path(dist.locate_file(finders[0])).read_text()
        mapping = ast.literal_eval(text.split("MAPPING: dict[str, str] = ", 1)[1].splitlines()[0])
        return {name.split(".")[0] for name in mapping}
    return {f.split("/")[0].removesuffix(".py") for f in files
            if not f.startswith(("..", "__editable__", "__pycache__")) and ".dist-info" not in f.split("/")[0]}


@pytest.mark.smoke
def test_installed_distribution_has_one_top_level_package():
    try:
        tops = _top_levels_of_distribution()
    except metadata.PackageNotFoundError:
        pytest.fail("ctmhsa is not installed: run the README's test command (pip install \".[test]\")")
    assert tops == {"ctmhsa"}, f"top-level names installed besides ctmhsa: {sorted(tops - {'ctmhsa'})}"


def test_pyproject_maps_every_layer_into_the_namespace():
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert all(p == "ctmhsa" or p.startswith("ctmhsa.") for p in conf["packages"])
    assert {f"ctmhsa.{layer}": layer for layer in LAYERS}.items() <= conf["package-dir"].items()
    # every subpackage folder of a layer is packaged (a forgotten one would be missing from a wheel)
    found = {"ctmhsa." + ".".join(p.parent.relative_to(ROOT).parts) for layer in LAYERS
             for p in (ROOT / layer).rglob("__init__.py")}
    assert found <= set(conf["packages"]), sorted(found - set(conf["packages"]))


def test_no_module_imports_a_layer_outside_the_namespace():
    bad = []
    for layer in LAYERS + ("tests", "ctmhsa"):
        for path in (ROOT / layer).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = ([node.module] if isinstance(node, ast.ImportFrom) and not node.level else
                         [a.name for a in node.names] if isinstance(node, ast.Import) else [])
                bad += [f"{path.relative_to(ROOT)}: {n}" for n in names if n and n.split(".")[0] in LAYERS]
    assert not bad, bad


def test_front_door_is_lazy_and_complete():
    """``import ctmhsa`` and the numpy-only reference import no Brian2; the front door's names
    are the simulator's."""
    code = ("import sys, ctmhsa, ctmhsa.maths.reference as r; assert 'brian2' not in sys.modules; "
            "assert ctmhsa.linear_mhsa is r.linear_mhsa; from ctmhsa.sims import simulate_mhsa, load; "
            "assert ctmhsa.simulate_mhsa is simulate_mhsa and ctmhsa.load is load; "
            "assert callable(ctmhsa.build_mhsa) and callable(ctmhsa.train_mhsa); "
            "print(ctmhsa.__version__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == metadata.version("ctmhsa")
    import ctmhsa

    with pytest.raises(AttributeError, match="nope"):
        ctmhsa.nope  # noqa: B018
    assert set(ctmhsa.__all__) <= set(dir(ctmhsa))
