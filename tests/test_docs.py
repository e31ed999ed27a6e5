"""The documentation: the README is a short user guide whose two commands CI runs and whose python
snippets run as written, the docs cite no internal or git-ignored files, the API reference builds
without a warning, and the citation/licence/changelog files are there and agree with the package."""

import ast
import builtins
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
from conftest import LAYERS

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))
BUILT = "docs/api/_build/html"          # git-ignored
INTERNAL = re.compile(r"issue[- ]?\d|SPEC\b|§|DESIGN\.md|seed 00\d")


def _blocks(text, lang):
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


@pytest.mark.codegen_independent
def test_readme_is_a_short_guide_whose_two_commands_ci_runs():
    assert len(README.splitlines()) <= 250
    bash = _blocks(README, "bash")
    assert bash[0].strip() == "pip install . && ctmhsa run"
    test_command = "python -m pytest -n auto --dist loadscope"     # pytest-xdist: one worker per core
    assert bash[1].strip() == f'pip install ".[test]" && {test_command}'
    ci = (ROOT / ".ci" / "run").read_text()
    # .ci/run installs the test extra and runs exactly the README's test command
    assert 'python -m pip install -q ".[test]"' in ci
    assert [ln for ln in ci.splitlines() if "pytest" in ln and not ln.lstrip().startswith(("#", "echo"))] == \
        [test_command]
    assert "`python -m pytest -m smoke`" in README                  # the quick install check (pyproject's marker)
    for section in ("## Two commands", "tutorial", "## API in ten lines", "## Command line", "## How to cite"):
        assert section in README, section


def _free_names(code):
    """Names a block reads but neither assigns nor imports (nor are builtins)."""
    nodes = list(ast.walk(ast.parse(code)))
    bound = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    bound |= {(n.asname or n.name).split(".")[0] for n in nodes if isinstance(n, ast.alias)}
    bound |= {n.arg for n in nodes if isinstance(n, ast.arg)}
    bound |= {n.name for n in nodes if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
    return {n.id for n in nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound - set(dir(builtins))


def _snippets(text):
    """The README's python blocks as scripts, in order, each a list of ``(section, block)``: each
    block its own script (a fresh namespace), except that a block using names it does not define
    continues the script before it, as a reader running them would (``ctmhsa.build_mhsa(X, ...)``)."""
    scripts, section = [], ""
    for heading, code in re.findall(r"^(## [^\n]*)$|^```python\n(.*?)```", text, re.M | re.S):
        if heading:
            section = heading
        elif scripts and _free_names(code):
            scripts[-1].append((section, code))
        else:
            scripts.append([(section, code)])
    return scripts


def _run_snippets(scripts, cwd, timeout):
    """Run each script in a fresh interpreter, one after another in ``cwd`` (a snippet may read
    what an earlier one wrote: the tutorial's NWB file)."""
    for k, script in enumerate(scripts):
        path = cwd / f"readme_snippet_{k}.py"
        path.write_text("".join(code for _, code in script))
        out = subprocess.run([sys.executable, path.name], cwd=cwd, capture_output=True, text=True,
                             timeout=timeout, env=dict(os.environ, MPLBACKEND="Agg"))
        assert out.returncode == 0, f"README snippet {k} ({script[0][0]}):\n{out.stderr[-3000:]}"


@pytest.mark.codegen_independent
def test_readme_snippets_are_grouped_by_namespace():
    scripts = ["".join(code for _, code in s) for s in _snippets(README)]
    assert "".join(scripts) == "".join(_blocks(README, "python"))
    for k, code in enumerate(scripts):
        compile(code, f"README snippet {k}", "exec")
        assert not _free_names(code), _free_names(code)                     # each runs on its own
    assert _free_names("import numpy as np\nres = f(np.ones(3), x=lambda a: a + b)") == {"f", "b"}
    two = "## A\n```python\nx = 1\n```\n## B\n```python\nprint(x)\n```\n```python\ny = 2\n```\n"
    assert _snippets(two) == [[("## A", "x = 1\n"), ("## B", "print(x)\n")], [("## B", "y = 2\n")]]


@pytest.mark.brian2
def test_readme_api_snippets_run(tmp_path):
    """The cheap snippets, in the default suite: the API in ten lines (the rate level, 1 s) and the
    Brian2 network built and run after (the escape level, 0.7 s)."""
    api = [[b for b in s if b[0] == "## API in ten lines"] for s in _snippets(README)]
    api = [s for s in api if s]                 # the blocks of that section, without what continues them
    assert len(api) == 1 and "build_mhsa" in api[0][-1][1]
    _run_snippets(api, tmp_path, timeout=120)


@pytest.mark.brian2
@pytest.mark.long    # 34 s on 2 busy cores: the tutorial's 5.5 s of spikes and the transformer's 2 s
def test_every_readme_snippet_runs(tmp_path):
    """Every snippet as written, in order; the transformer snippet reads ``model.npz``, the user's
    file: here one block in the layout its comment states, of the API snippet's width (de = 6)."""
    from ctmhsa.maths.model import Model

    g = np.random.default_rng(0)
    de, H, dk, dh, classes = 6, 2, 4, 5, 3
    shapes = {"attn.WQ": (H, dk, de), "attn.WK": (H, dk, de), "attn.WV": (H, dk, de), "attn.WO": (H, de, dk),
              "mlp.W1": (dh, de), "mlp.b1": (dh,), "mlp.W2": (de, dh), "mlp.b2": (de,)}
    state = {f"blocks.0.{k}": g.normal(size=s) / np.sqrt(s[-1]) for k, s in shapes.items()}
    state.update({"readout.W": g.normal(size=(classes, de)) / np.sqrt(de), "readout.b": np.zeros(classes)})
    Model.from_state_dict(state).save(str(tmp_path / "model.npz"))
    _run_snippets(_snippets(README), tmp_path, timeout=600)
    assert (tmp_path / "results" / "tutorial" / "summary.png").is_file()


@pytest.mark.codegen_independent
@pytest.mark.parametrize("path", [ROOT / "README.md", *DOCS], ids=lambda p: p.name)
def test_docs_cite_no_internal_reference_nor_ignored_file(path):
    text = path.read_text()
    assert not INTERNAL.findall(text), INTERNAL.findall(text)
    cited = set(re.findall(r"`((?:[\w.-]+/)+[\w.*-]+\.(?:json|npz|md|png|toml|py))`", text))
    cited |= set(re.findall(r"\]\(((?:\.\./)?[\w./-]+\.(?:png|md))\)", text))
    for rel in cited:
        target = (path.parent / rel) if rel.startswith("..") else ROOT / rel
        if "*" in rel or re.search(r"[A-Z]{3,}", rel):      # a pattern (bench_results/NAME.json)
            continue
        assert target.exists(), f"{path.name} cites {rel}, which does not exist"
        ignored = subprocess.run(["git", "-C", str(ROOT), "check-ignore", "-q", str(target)]).returncode == 0
        assert not ignored, f"{path.name} cites {rel}, which git ignores"


@pytest.mark.codegen_independent
def test_citation_license_changelog():
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    cff = (ROOT / "CITATION.cff").read_text()
    assert "cff-version: 1.2.0" in cff and f"version: {version}" in cff
    assert 'title: "Multihead self-attention in cortico-thalamic circuits"' in cff
    assert "family-names: Granier" in cff and "family-names: Senn" in cff and "year: 2025" in cff
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert f"## {version}" in (ROOT / "CHANGELOG.md").read_text()


@pytest.mark.codegen_independent
@pytest.mark.long   # 24 s (a Sphinx build); the docstrings' text is checked by the other doc tests
def test_api_reference_builds_without_warnings(tmp_path):
    """The docs site, by the README's Sphinx command, warnings as errors (html builder, one
    process): the guides (``docs/*.md``, myst-parser) and the API reference (``docs/api``), whose
    every page documents the ``ctmhsa.`` modules, and a reference to a name by the module that
    re-exports it (``ctmhsa.sims.simulate_mhsa``) links to where it is documented."""
    pytest.importorskip("sphinx")
    pytest.importorskip("numpydoc")
    pytest.importorskip("myst_parser")
    command = next(b.strip() for b in _blocks(README, "bash") if "sphinx" in b)
    assert command == f'pip install ".[docs]" && python -m sphinx -W -c docs/api -b html docs {BUILT}'
    out = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-j", "1", "-c",
                          str(ROOT / "docs" / "api"), "-b", "html", str(ROOT / "docs"), str(tmp_path / "html")],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    html = tmp_path / "html"
    page = (html / "api" / "simulator.html").read_text()
    assert 'id="ctmhsa.sims.simulate.simulate_mhsa"' in page and "RunOptions" in page
    assert 'id="module-ctmhsa.sims"' in page
    maths = (html / "api" / "maths.html").read_text()
    assert "load_attention" in maths and 'id="ctmhsa.maths.stages.STAGE_TABLE"' in maths
    assert 'url=api/index.html' in (html / "index.html").read_text()        # the start page
    index = (html / "api" / "index.html").read_text()
    assert 'id="module-ctmhsa"' in index
    # sims.result's docstring cites :func:`ctmhsa.sims.simulate_mhsa` (a re-export): it links
    assert 'href="simulator.html#ctmhsa.sims.simulate.simulate_mhsa"' in (html / "api" / "results.html").read_text()
    # every guide is a page of the site, listed on the start page, its figures copied beside it
    for guide in DOCS:
        assert (html / f"{guide.stem}.html").is_file() and f'href="../{guide.stem}.html"' in index, guide.name
    for png in re.findall(r"\]\(\.\./figures/gallery/([\w.-]+\.png)\)", (ROOT / "docs" / "figures.md").read_text()):
        assert (html / "_images" / png).is_file(), png
    # a link to a section of a guide lands on its anchor; the guides' tables are tables
    cortex = (html / "cortex.html").read_text()
    assert 'href="#the-standalone-cache"' in cortex and 'id="the-standalone-cache"' in cortex
    assert "<table" in (html / "results.html").read_text()


def _cited_docs(path: pathlib.Path) -> set:
    """The ``.md`` files a README/docs page cites (``docs/x.md``, or ``x.md`` beside it), or
    that a Python file's strings cite (``docs/x.md``: captions, messages, docstrings)."""
    text = path.read_text()
    cited = set(re.findall(r"(?<![\w/.-])(docs/[\w./-]*?\.md)\b", text))
    if path.suffix != ".py":
        cited |= {m for m in re.findall(r"(?<![\w/.-])([\w-]+\.md)\b", text)}
    return cited


SOURCES = [ROOT / "README.md", *DOCS, *sorted((ROOT / "docs" / "api").glob("*.rst")),
           *(p for layer in ("ctmhsa", *LAYERS)
             for p in sorted((ROOT / layer).rglob("*.py")))]


@pytest.mark.codegen_independent
@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_cited_doc_exists(path):
    """Every ``docs/*.md`` the README, the docs, the API pages and the package's strings (figure
    captions included) cite exists; a bare ``x.md`` in a page is a file beside it or at the root."""
    for rel in _cited_docs(path):
        here = [ROOT / rel] if "/" in rel else [path.parent / rel, ROOT / rel]
        assert any(p.is_file() for p in here), f"{path.name} cites {rel}, which does not exist"


@pytest.mark.codegen_independent
def test_cited_doc_check_can_fail(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("numbers in `docs/results.md`, in docs/benchmarks.md and in nowhere.md")
    assert _cited_docs(page) == {"docs/results.md", "docs/benchmarks.md", "nowhere.md"}
    with pytest.raises(AssertionError, match=r"cites (docs/benchmarks|nowhere)\.md, which does not exist"):
        test_every_cited_doc_exists(page)


@pytest.mark.codegen_independent
def test_stage_tables_of_the_docs_match_the_stage_table():
    """The stages' symbols and the cells each is read from, in docs/results.md's table and in the
    table of ctmhsa.maths.stages' docstring, are those of STAGE_TABLE."""
    from ctmhsa.maths import stages

    by_symbol = {s.symbol: s for s in stages.STAGE_TABLE.values()}
    text = (ROOT / "docs" / "results.md").read_text()
    table = text[text.index("| stage | read from |"):].split("\n\n")[0]
    rows = re.findall(r"^\| (\S+) \| ([^|]+?) \|", table, re.M)[1:]      # after the header
    assert len(rows) >= 9
    for sym, cells in rows:
        assert sym in by_symbol and by_symbol[sym].cells == cells, (sym, cells)
    doc = [ln.split() for ln in stages.__doc__.splitlines() if re.match(r"``\w+`` {2,}", ln)]
    assert [ln[0].strip("`") for ln in doc] == list(stages.STAGE_ORDER)
    for s in stages.STAGE_TABLE.values():
        line = next(ln for ln in stages.__doc__.splitlines() if ln.startswith(f"``{s.key}``"))
        assert [x.strip() for x in re.split(r" {2,}", line)] == [f"``{s.key}``", s.symbol, s.name, s.long, s.cells]
