"""Faults of the calibration caches (issue 46 item 3): a cache file verifies its values (a
checksum, not only the key); an unusable one is named in a warning and replaced by the shipped
calibration or a new measurement, never used and never a traceback. An unusable
``CTMHSA_CACHE`` is refused naming it. Nothing is measured here: the shipped calibrations stand
in, and the measurements are monkeypatched."""

import json
import os
import warnings

import numpy as np
import pytest

import ctmhsa.neurons.conductance as C
from ctmhsa.neurons import backend
from ctmhsa.neurons.backend import SHIPPED_CALIBRATIONS, cache_dir, cached_json, json_checksum

pytestmark = pytest.mark.codegen_independent

KEY = "4f72bfcfe70dfaed"          # the default lif soma at dt = 0.5 ms (shipped)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private, empty cache, and no measurement allowed."""
    monkeypatch.setenv("CTMHSA_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(C, "fi_curve", lambda *a, **k: pytest.fail("measured a shipped calibration"))
    return tmp_path / "cache" / "calibration"


def shipped() -> dict:
    with open(os.path.join(SHIPPED_CALIBRATIONS, f"soma-{KEY}.json")) as fh:
        return json.load(fh)


def tampered_gain():
    cal = shipped()
    cal["I_gain"] *= 3                   # the old checksum kept: the values no longer match it
    return json.dumps(cal)


def nan_rheobase():
    cal = shipped()
    cal["I_rh"] = float("nan")
    return json.dumps(cal)


def test_shipped_calibrations_carry_the_checksum_of_their_values():
    for name in os.listdir(SHIPPED_CALIBRATIONS):
        with open(os.path.join(SHIPPED_CALIBRATIONS, name)) as fh:
            cal = json.load(fh)
        assert cal["checksum"] == json_checksum(cal), name
        assert name == f"soma-{cal['key']}.json"


@pytest.mark.parametrize("case, content, why", [
    ("K01", lambda: "[]", "holds a JSON list"),
    ("K02", lambda: "null", "holds a JSON NoneType"),
    ("K03", lambda: json.dumps(shipped())[:900], "not readable JSON"),
    ("K04", lambda: json.dumps({"key": KEY}), "has no checksum"),
    ("K05", tampered_gain, "do not match their checksum"),
    ("K06", nan_rheobase, "do not match their checksum"),
    ("key", lambda: json.dumps(dict(shipped(), key="0" * 16)), "stores the key '0000000000000000'"),
])
def test_an_unusable_cache_file_is_named_and_the_shipped_calibration_used(cache, case, content, why):
    cache.mkdir(parents=True)
    path = cache / f"soma-{KEY}.json"
    path.write_text(content())
    expected = {k: v for k, v in shipped().items() if k != "checksum"}
    with pytest.warns(RuntimeWarning, match=rf"calibration cache '{path}' is unusable \(.*{why}.*\); "
                                            "discarded, the shipped calibration is used"):
        cal = C.calibration_of("default", 5e-4)
    assert cal == expected
    assert not path.exists()                                 # discarded: the warning comes once
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert C.lif_drive(5e-4)["I_gain"] == expected["I_gain"]   # what a lif run is given


def test_a_bad_file_is_measured_again_once_and_the_new_one_verified(cache):
    """No shipped calibration for this key: the bad file is measured anew (once), the new file
    stores its checksum and is read back without a warning or a measurement."""
    calls = []

    def measure():
        calls.append(1)
        return dict(I_rh=1e-9, I_gain=2e-11, rate=[0.0, 1.5, float("nan")])

    cache.mkdir(parents=True)
    path = cache / "test-abc.json"
    path.write_text(json.dumps(dict(measure(), I_gain=6e-11, key="abc", checksum="0" * 64)))
    calls.clear()
    with pytest.warns(RuntimeWarning, match=rf"'{path}' is unusable.*checksum.*measuring it anew"):
        first = cached_json("test", "abc", measure)
    assert calls == [1] and first["I_gain"] == 2e-11 and "checksum" not in first
    stored = json.loads(path.read_text())
    assert stored["checksum"] == json_checksum(stored)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = cached_json("test", "abc", measure)
    assert calls == [1] and again["I_rh"] == first["I_rh"] and np.isnan(again["rate"][2])


def test_a_damaged_shipped_calibration_is_named_and_measured(cache, tmp_path, monkeypatch):
    ship = tmp_path / "shipped"
    ship.mkdir()
    (ship / "test-abc.json").write_text(json.dumps(dict(I_rh=1.0, key="abc", checksum="0" * 64)))
    monkeypatch.setattr(backend, "SHIPPED_CALIBRATIONS", str(ship))
    with pytest.warns(RuntimeWarning, match=r"shipped calibration .*test-abc.json' is unusable.*measuring it anew"):
        assert cached_json("test", "abc", lambda: dict(I_rh=2.0))["I_rh"] == 2.0


# CTMHSA_CACHE itself -------------------------------------------------------------------------

def test_cache_pointing_at_a_file_is_refused_naming_it(tmp_path, monkeypatch):        # K07
    target = tmp_path / "cachefile"
    target.write_text("x")
    monkeypatch.setenv("CTMHSA_CACHE", str(target))
    with pytest.raises(ValueError, match=rf"^CTMHSA_CACHE: '{target}' is a file, not a directory; point "
                                         "CTMHSA_CACHE at a writable directory"):
        cache_dir()
    assert target.read_text() == "x"


@pytest.mark.parametrize("parent", ["missing", "a_file"])
def test_cache_that_cannot_be_created_is_refused_naming_it(tmp_path, monkeypatch, parent):     # K08
    (tmp_path / "a_file").write_text("x")
    target = tmp_path / parent / "sub" / "cache" if parent == "a_file" else "/proc/1/nope"
    monkeypatch.setenv("CTMHSA_CACHE", str(target))
    with pytest.raises(ValueError, match=rf"^CTMHSA_CACHE: '{target}' cannot be created \(.*\); point "
                                         "CTMHSA_CACHE at a writable directory"):
        cache_dir()


def test_a_missing_cache_directory_is_created(tmp_path, monkeypatch):
    monkeypatch.setenv("CTMHSA_CACHE", str(tmp_path / "new" / "cache"))
    assert cache_dir() == str(tmp_path / "new" / "cache") and os.path.isdir(cache_dir())


def test_the_cli_refuses_an_unusable_cache_with_one_line(tmp_path, monkeypatch, capsys):
    from ctmhsa.sims.cli import main

    (tmp_path / "cachefile").write_text("x")
    monkeypatch.setenv("CTMHSA_CACHE", str(tmp_path / "cachefile"))
    rc = main(["run", "--neuron", "rate", "--quiet", "--no-summary", "--out", str(tmp_path / "out"),
               "--codegen", "numpy"])
    assert rc == 2 and "CTMHSA_CACHE" in capsys.readouterr().err


def test_a_transfer_table_altered_in_the_cache_is_measured_again(cache, monkeypatch):
    """The lookup tables of :func:`ctmhsa.neurons.calibration.calibrate` carry a checksum too:
    rates changed in the file (the key kept) are detected, named and measured again."""
    import ctmhsa.neurons.calibration as K

    calls = []
    monkeypatch.setattr(K, "_measure", lambda *a: calls.append(1) or np.array([5.0, 9.0, 20.0, 41.0]))
    proto = K.Protocol(grid=(0.5, 1.0, 2.0, 4.0))
    first = K.calibrate("l5it", "lif", protocol=proto)
    assert calls == [1] and K.calibrate("l5it", "lif", protocol=proto).meta["from_cache"] is True
    with np.load(first.meta["path"]) as z:
        arrays = {k: z[k] for k in z.files}
    np.savez(first.meta["path"], **dict(arrays, raw_rate=arrays["raw_rate"] * 3))
    with pytest.warns(RuntimeWarning, match=rf"calibration cache {first.meta['path']} is unusable "
                                            r"\(its values do not match their checksum\); recalibrating"):
        again = K.calibrate("l5it", "lif", protocol=proto)
    assert calls == [1, 1] and again.meta["from_cache"] is False
    np.testing.assert_array_equal(again.raw_rate, first.raw_rate)
