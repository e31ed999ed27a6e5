"""Every test carries a category marker (tests/conftest.py refuses a collection with one that
does not), so ``-m brian2`` and the like select the whole suite between them."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from conftest import CATEGORIES, pytest_collection_modifyitems, pytest_runtest_setup, uncategorised

pytestmark = pytest.mark.codegen_independent


class _Item:
    """What the hook reads of a collected test: its node id and its markers."""

    def __init__(self, nodeid, *marks):
        self.nodeid = nodeid
        self._marks = [getattr(pytest.mark, m).mark for m in marks]

    def iter_markers(self):
        return iter(self._marks)


def test_an_unmarked_test_is_named_and_refused():
    items = [_Item("t.py::test_a", "brian2"), _Item("t.py::test_b", "long"), _Item("t.py::test_c"),
             *(_Item(f"t.py::test_{c}", c, "smoke") for c in CATEGORIES)]
    assert uncategorised(items) == ["t.py::test_b", "t.py::test_c"]      # long is no category
    with pytest.raises(pytest.UsageError, match=r"2 test\(s\) .*: t\.py::test_b, t\.py::test_c$"):
        pytest_collection_modifyitems(None, items)
    pytest_collection_modifyitems(None, items[:1])                         # all marked: accepted


def test_under_xdist_the_unmarked_test_fails_instead():
    items = [_Item("t.py::test_a", "brian2"), _Item("t.py::test_b")]
    pytest_collection_modifyitems(SimpleNamespace(workerinput={}), items)   # a worker: collected
    pytest_runtest_setup(items[0])
    with pytest.raises(pytest.fail.Exception, match=r"1 test\(s\) .*: t\.py::test_b$"):
        pytest_runtest_setup(items[1])


def test_pytest_refuses_to_collect_an_unmarked_test(tmp_path):
    """End to end: a real pytest with the conftest as a plugin refuses, even under ``-m`` (the hook
    runs before ``-m`` deselects)."""
    (tmp_path / "test_new.py").write_text("import pytest\n\n\n@pytest.mark.brian2\ndef test_marked():\n"
                                          "    pass\n\n\ndef test_forgotten():\n    pass\n")
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-p", "conftest", "-m", "brian2", "--rootdir", str(tmp_path), str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, PYTHONPATH=os.path.dirname(__file__)))
    assert out.returncode == pytest.ExitCode.USAGE_ERROR, out.stdout + out.stderr
    assert "test_new.py::test_forgotten" in out.stderr and "test_marked" not in out.stderr
