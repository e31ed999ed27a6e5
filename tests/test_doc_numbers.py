"""The figures quoted in the README and the guides agree with the JSON that measured them
(docs/numbers.toml, docs/measured/; ctmhsa.sims.benchmarks.docnumbers), and the check fails when
a quoted figure is edited."""

import importlib.util
import json
import pathlib
import re
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# loaded from its file: importing ctmhsa.sims would import Brian2 (seconds), and the check is stdlib only
_spec = importlib.util.spec_from_file_location("docnumbers", ROOT / "sims" / "benchmarks" / "docnumbers.py")
dn = sys.modules.setdefault("docnumbers", importlib.util.module_from_spec(_spec))   # dataclasses look it up
_spec.loader.exec_module(dn)
CLAIMS = dn.load_claims(str(ROOT))
OUTCOMES, FILES = dn.check_all(str(ROOT))

pytestmark = pytest.mark.codegen_independent


@pytest.mark.parametrize("outcome", OUTCOMES, ids=lambda o: o.claim.id)
def test_quoted_figure_agrees_with_its_measurement(outcome):
    assert outcome.ok is not False, f"{outcome.claim.doc}: {outcome.why}: quoted {outcome.quoted}, " \
                                    f"measured {outcome.measured} ± {outcome.tolerance}"


def test_every_measured_json_states_its_load_and_cold_or_warm():
    assert FILES, "docs/measured holds no JSON"
    assert {n: why for n, why in FILES.items() if why} == {}
    used = {c.json for c in CLAIMS if not c.unchecked}
    assert used <= set(FILES)
    assert set(FILES) <= used, f"unused JSON in docs/measured: {set(FILES) - used}"


def test_registry_covers_the_default_run_and_the_robustness_table():
    checked = {(c.doc, c.json) for c in CLAIMS if not c.unchecked}
    assert ("README.md", "default_run.json") in checked
    assert ("docs/cli.md", "default_run.json") in checked
    assert ("docs/operating_range.md", "robustness_80.json") in checked
    times = [c for c in CLAIMS if c.state]
    assert times and all(c.state in ("cold", "warm") for c in times)


def _checked(doc: str):
    """The first checked claim of ``doc``, its text and its JSON."""
    claim = next(c for c in CLAIMS if c.doc == doc and not c.unchecked and not c.exact)
    text = (ROOT / claim.doc).read_text(encoding="utf-8")
    data = json.loads((ROOT / dn.MEASURED / claim.json).read_text())
    return claim, text, data


def test_an_edited_figure_fails():
    claim, text, data = _checked("README.md")
    assert dn.check_claim(claim, text, data).ok
    m = re.search(claim.pattern, text)
    start, end = m.span(1)
    value, half = dn.parse_number(m.group(1))
    for wrong in (value * 1.5 + 10 * half, value * 0.5 - 10 * half):
        edited = text[:start] + f"{wrong:.{max(0, len(m.group(1).partition('.')[2]))}f}" + text[end:]
        out = dn.check_claim(claim, edited, data)
        assert out.ok is False, (wrong, out)


def test_an_edited_count_fails_exactly():
    claim = next(c for c in CLAIMS if c.exact and not c.unchecked)
    text = (ROOT / claim.doc).read_text(encoding="utf-8")
    data = json.loads((ROOT / dn.MEASURED / claim.json).read_text())
    m = re.search(claim.pattern, text)
    value, _ = dn.parse_number(m.group(1))
    edited = text[:m.start(1)] + f"{int(value) + 1:,}" + text[m.end(1):]
    assert dn.check_claim(claim, text, data).ok
    assert dn.check_claim(claim, edited, data).ok is False


def test_a_figure_quoted_twice_or_removed_fails():
    claim, text, data = _checked("README.md")
    sentence = re.search(claim.pattern, text).group(0)
    assert "2 times" in dn.check_claim(claim, text + "\n" + sentence, data).why
    assert dn.check_claim(claim, text.replace(sentence, ""), data).ok is False


def test_a_time_must_say_its_load_and_state():
    claim = next(c for c in CLAIMS if c.state and not c.unchecked)
    text = (ROOT / claim.doc).read_text(encoding="utf-8")
    data = json.loads((ROOT / dn.MEASURED / claim.json).read_text())
    assert dn.check_claim(claim, text, data).ok
    other = "cold" if claim.state == "warm" else "warm"
    assert dn.check_claim(claim, text, dict(data, cache=other)).ok is False


def test_parse_number_reads_separators_and_rounding():
    assert dn.parse_number("11,373,227") == (11373227.0, 0.5)
    assert dn.parse_number("0.21") == pytest.approx((0.21, 0.005))
    assert dn.parse_number("1.4e-13") == pytest.approx((1.4e-13, 5e-15))
    assert dn.parse_number("4\u202f320")[0] == 4320


def test_lookup_filters_and_counts():
    data = {"rows": [{"outcome": "exact", "scale": 1.0}, {"outcome": "exact", "scale": 3.0},
                     {"outcome": "refused", "scale": 0.5}], "a": {"b": [1, 2]}}
    assert dn.lookup(data, "rows[outcome=exact].count") == 2
    assert dn.lookup(data, "rows[outcome=exact,scale<=2].count") == 1
    assert dn.lookup(data, "a.b.1") == 2
    with pytest.raises(KeyError):
        dn.lookup(data, "a.c")


def test_a_json_without_load_or_state_is_named():
    assert dn.check_json({"machine": {"before": {"load_average": [1, 1, 1]},
                                      "after": {"load_average": [1, 1, 1]}}, "cache": "warm"}) == []
    assert len(dn.check_json({"cache": "tepid"})) == 2


def test_cli_prints_the_table_of_claims(capsys):
    assert dn.main(["--root", str(ROOT)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:6] == ["claim", "doc", "quoted", "measured", "tolerance", "ok"]
    assert all(c.id in out for c in CLAIMS)
    assert re.search(r"^\d+ ok, 0 failed, \d+ unchecked$", out, re.M)
