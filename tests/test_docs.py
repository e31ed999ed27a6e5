"""The documentation: the README is a short user guide whose two commands CI runs, the docs cite
no internal or git-ignored files, the API reference builds without a warning, and the
citation/licence/changelog files are there and agree with the package."""

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DOCS = sorted((ROOT / "docs").glob("*.md"))
INTERNAL = re.compile(r"issue[- ]?\d|SPEC\b|§|DESIGN\.md|seed 00\d")

pytestmark = pytest.mark.codegen_independent


def _blocks(text, lang):
    return re.findall(rf"```{lang}\n(.*?)```", text, re.S)


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
    for section in ("## Two commands", "tutorial", "## API in ten lines", "## Command line", "## How to cite"):
        assert section in README, section


def test_readme_python_compiles():
    for k, code in enumerate(_blocks(README, "python")):
        compile(code, f"README block {k}", "exec")


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


def test_citation_license_changelog():
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    cff = (ROOT / "CITATION.cff").read_text()
    assert "cff-version: 1.2.0" in cff and f"version: {version}" in cff
    assert 'title: "Multihead self-attention in cortico-thalamic circuits"' in cff
    assert "family-names: Granier" in cff and "family-names: Senn" in cff and "year: 2025" in cff
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert f"## {version}" in (ROOT / "CHANGELOG.md").read_text()


@pytest.mark.long   # 12 s: Sphinx
def test_api_reference_builds_without_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("numpydoc")
    out = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                          str(ROOT / "docs" / "api"), str(tmp_path / "html")], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-3000:]
    page = (tmp_path / "html" / "simulator.html").read_text()
    assert "simulate_mhsa" in page and "RunOptions" in page
    assert "load_attention" in (tmp_path / "html" / "maths.html").read_text()
