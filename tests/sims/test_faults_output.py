"""Faults at the output and in configurations (issues 27, 28): writing results never deletes what
the project did not write; an unusable output location is refused before anything is simulated;
JSON is strict; configuration errors name the setting; one rule for relative output paths; NWB
metadata that nwbinspector accepts; ``ctmhsa run`` size and thread flags."""

import json
import os
import shutil
from collections import namedtuple

import numpy as np
import pytest

from ctmhsa.sims.cli import main

TINY_RATE = "[problem]\nn = 2\nH = 1\ndk = 2\ndv = 2\nde = 2\n[circuit]\nneuron = 'rate'\n[run]\nduration = 0.5\n"
"""A rate-level run of a second or less."""

TINY_TRAIN = "[problem]\nn = 2\nH = 1\ndk = 2\ndv = 2\nde = 2\n[train]\nlevels = ['rate']\nsteps = 1\n"


class Simulated(Exception):
    """Raised by the stand-in for the simulation: the command got as far as simulating."""


@pytest.fixture
def no_simulation(monkeypatch):
    """Replace the simulation of ``ctmhsa run`` and the training of ``ctmhsa train`` by a
    stand-in that records its arguments and raises :class:`Simulated`."""
    import ctmhsa.sims.cli as cli
    import ctmhsa.sims.train as train

    calls = []

    def stand_in(*args, **kwargs):
        calls.append((args, kwargs))
        raise Simulated

    monkeypatch.setattr(cli, "simulate_mhsa", stand_in)
    monkeypatch.setattr(train, "train_mhsa", stand_in)
    return calls


def _config(path, text=TINY_RATE):
    path.write_text(text)
    return str(path)


def _refused(capsys, *words, code=2):
    """The error line of a refused command: one line, no traceback, naming ``words``."""
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.startswith("ctmhsa: error: "), err
    for w in words:
        assert w in err, (w, err)
    return err


@pytest.fixture(scope="module")
def rate_result():
    from ctmhsa.sims import simulate_mhsa
    from ctmhsa.sims.config import problem_inputs

    x = problem_inputs(n=2, H=1, dk=2, dv=2, de=2)
    return simulate_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], neuron="rate", duration=0.5, codegen="numpy")


# --- 1. data loss --------------------------------------------------------------------------

@pytest.mark.codegen_independent
def test_run_out_refuses_an_existing_file(tmp_path, capsys, no_simulation):
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    assert main(["run", _config(tmp_path / "c.toml"), "--out", str(notes), "--quiet"]) == 2
    _refused(capsys, "--out", str(notes), "existing file")
    assert notes.read_text() == "my notes" and not no_simulation          # refused before simulating


@pytest.mark.codegen_independent
def test_run_out_refuses_a_directory_with_other_files(tmp_path, capsys, no_simulation):
    thesis = tmp_path / "thesis"
    (thesis / "figs").mkdir(parents=True)
    (thesis / "chapter1.tex").write_text("\\chapter{One}")
    assert main(["run", _config(tmp_path / "c.toml"), "--out", str(thesis), "--quiet"]) == 2
    _refused(capsys, "--out", str(thesis), "chapter1.tex", "not a results directory")
    assert sorted(os.listdir(thesis)) == ["chapter1.tex", "figs"] and not no_simulation


@pytest.mark.codegen_independent
def test_run_out_dot_refuses_the_working_directory(tmp_path, capsys, monkeypatch, no_simulation):
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "main.py").write_text("print('hi')\n")
    (project / "data.csv").write_text("a,b\n1,2\n")
    monkeypatch.chdir(project)
    assert main(["run", _config(tmp_path / "c.toml"), "--out", ".", "--quiet"]) == 2
    _refused(capsys, "--out", str(project))
    assert (project / "src" / "main.py").exists() and (project / "data.csv").exists() and not no_simulation
    # an empty working directory is no better: replacing it would pull the directory from under the shell
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.chdir(empty)
    assert main(["run", _config(tmp_path / "c.toml"), "--out", ".", "--quiet"]) == 2
    _refused(capsys, "working directory")


@pytest.mark.codegen_independent
def test_train_out_refuses_a_directory_with_other_files(tmp_path, capsys, no_simulation):
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "draft.md").write_text("draft")
    assert main(["train", _config(tmp_path / "t.toml", TINY_TRAIN), "--out", str(thesis), "--quiet"]) == 2
    _refused(capsys, "--out", str(thesis), "draft.md")
    assert os.listdir(thesis) == ["draft.md"] and not no_simulation


@pytest.mark.brian2
def test_write_result_replaces_only_its_own_results_directories(tmp_path, rate_result):
    from ctmhsa.sims.io import write_result

    out = tmp_path / "run"
    assert write_result(rate_result, str(out)) == str(out)
    write_result(rate_result, str(out))                     # its own: replaced
    empty = tmp_path / "empty"
    empty.mkdir()
    write_result(rate_result, str(empty))                   # an empty directory may be used
    (out / "my_analysis.ipynb").write_text("{}")            # a file the project did not write
    with pytest.raises(ValueError, match=r"path: .*run.* my_analysis.ipynb"):
        write_result(rate_result, str(out))
    assert (out / "my_analysis.ipynb").exists()
    notes = tmp_path / "notes.txt"
    notes.write_text("keep")
    with pytest.raises(ValueError, match="existing file"):
        write_result(rate_result, str(notes))
    assert notes.read_text() == "keep"
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")]     # no temporaries left

    from ctmhsa.sims.io import MARKER, OutputError, is_results_dir

    assert is_results_dir(empty) and not is_results_dir(out) and MARKER in os.listdir(empty)
    assert json.loads((empty / MARKER).read_text())["kind"] == "run"
    assert issubclass(OutputError, ValueError)
    legacy = tmp_path / "legacy"                             # written before the marker existed
    legacy.mkdir()
    for f in ("provenance.json", "metrics.json", "summary.png"):
        (legacy / f).write_text("{}")
    write_result(rate_result, str(legacy))
    assert is_results_dir(legacy) and MARKER in os.listdir(legacy)


@pytest.mark.brian2
def test_stale_temporaries_removed_are_only_the_projects(tmp_path, rate_result):
    from ctmhsa.sims.io import write_result

    ours = tmp_path / ".run.tmp-killed"                      # a killed writer's directory
    ours.mkdir()
    (ours / ".ctmhsa-results").write_text('{"format": 1, "kind": "run", "files": []}')
    (ours / "stages.npz").write_bytes(b"partial")
    theirs = tmp_path / ".run.tmp-mine"                     # a user's directory with that name
    theirs.mkdir()
    (theirs / "thesis.tex").write_text("years of work")
    write_result(rate_result, str(tmp_path / "run"))
    assert not ours.exists()
    assert (theirs / "thesis.tex").read_text() == "years of work"


# --- 2. the output location, checked before simulating ---------------------------------------

@pytest.mark.codegen_independent
def test_run_refuses_an_output_location_it_cannot_create(tmp_path, capsys, no_simulation):
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    assert main(["run", _config(tmp_path / "c.toml"), "--out", str(blocker / "results"), "--quiet"]) == 2
    _refused(capsys, "--out", str(blocker))
    assert not no_simulation


@pytest.mark.codegen_independent
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only directories")
def test_run_refuses_a_read_only_location(tmp_path, capsys, no_simulation):
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        assert main(["run", _config(tmp_path / "c.toml"), "--out", str(ro / "res"), "--quiet"]) == 2
    finally:
        ro.chmod(0o755)
    _refused(capsys, "--out", str(ro), "read-only")
    assert not no_simulation


@pytest.mark.codegen_independent
def test_run_refuses_a_read_only_file_system(tmp_path, capsys, monkeypatch, no_simulation):
    """The same as root (who writes into 0555 directories): a file system that refuses writes."""
    import errno
    import tempfile

    def read_only(*args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    assert main(["run", _config(tmp_path / "c.toml"), "--out", str(tmp_path / "res"), "--quiet"]) == 2
    _refused(capsys, "--out", "read-only")
    assert not no_simulation


@pytest.mark.codegen_independent
def test_run_and_train_refuse_a_full_disk_before_simulating(tmp_path, capsys, monkeypatch, no_simulation):
    Usage = namedtuple("Usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: Usage(10**9, 10**9 - 2000, 2000))
    assert main(["run", _config(tmp_path / "c.toml"), "--out", str(tmp_path / "res"), "--quiet"]) == 2
    err = _refused(capsys, "--out", str(tmp_path / "res"), "MB", "0.0 MB free")
    assert "need about" in err
    assert main(["train", _config(tmp_path / "t.toml", TINY_TRAIN), "--out", str(tmp_path / "tr"), "--quiet"]) == 2
    _refused(capsys, "--out", "free")
    assert not no_simulation and not (tmp_path / "res").exists() and not (tmp_path / "tr").exists()


@pytest.mark.codegen_independent
def test_result_size_estimate_follows_the_run(tmp_path):
    from ctmhsa.sims.io import check_output, estimate_result_bytes
    from ctmhsa.sims.options import CircuitOptions

    circ = CircuitOptions().describe(8, 8, 8, 8, H=2)
    rate = estimate_result_bytes(circ, "rate", 1.0)
    short = estimate_result_bytes(circ, "escape", 1.0, 0.5, record_spikes=True)
    long = estimate_result_bytes(circ, "escape", 10.0, 0.5, record_spikes=True)
    some = estimate_result_bytes(circ, "escape", 10.0, 0.5, record_spikes=["l5pt"])
    assert 0 < rate < short < long and rate < some < long
    assert 5e6 < long < 50e6            # the default run writes 6.2 MB (compressed)
    assert check_output(tmp_path / "new" / "deep", rate) == str(tmp_path / "new" / "deep")
    assert not (tmp_path / "new").exists() and os.listdir(tmp_path) == []   # the probe is removed


# --- 3. strict JSON --------------------------------------------------------------------------

def _strict_load(path):
    def refuse(token):
        raise AssertionError(f"{path} holds {token}: not JSON")
    return json.loads(open(path).read(), parse_constant=refuse)


@pytest.mark.brian2
def test_json_is_strict_and_load_gives_nan_back(tmp_path, rate_result):
    from dataclasses import replace

    from ctmhsa.sims.io import atomic_write_json, load, write_result

    st, ref = dict(rate_result.stages), dict(rate_result.reference_stages)
    st["Z"] = ref["Z"] = np.ones_like(ref["Z"])                # constant: r = NaN in the metrics
    res = replace(rate_result, stages=st, reference_stages=ref,
                  diagnostics=dict(rate_result.diagnostics, convergence=float("nan"), spread=[1.0, float("inf")]),
                  timings=dict(rate_result.timings, compile=float("nan")))
    assert np.isnan(res.metrics()["Z"]["r"])
    path = write_result(res, str(tmp_path / "run"))
    met = _strict_load(os.path.join(path, "metrics.json"))
    assert met["Z"]["r"] is None
    prov = _strict_load(os.path.join(path, "provenance.json"))
    assert prov["diagnostics"]["convergence"] is None
    back = load(path)
    assert np.isnan(back.diagnostics["convergence"]) and np.isnan(back.timings["compile"])
    assert back.diagnostics["spread"] == [1.0, float("inf")]
    assert np.isnan(back.metrics()["Z"]["r"]) and back.metrics()["x_tilde"] == res.metrics()["x_tilde"]
    atomic_write_json(str(tmp_path / "a.json"), {"x": np.float64("nan"), "y": [np.inf, -np.inf], "z": np.arange(2)})
    assert _strict_load(tmp_path / "a.json") == {"x": None, "y": [None, None], "z": [0, 1]}


# --- 4. configuration errors name the setting ----------------------------------------------

@pytest.mark.codegen_independent
def test_config_path_that_is_a_directory(tmp_path, capsys, no_simulation):
    assert main(["run", str(tmp_path), "--quiet"]) == 2
    _refused(capsys, "config:", str(tmp_path), "is a directory")


@pytest.mark.codegen_independent
def test_config_that_is_not_utf8(tmp_path, capsys, no_simulation):
    cfg = tmp_path / "latin1.toml"
    cfg.write_bytes("[problem]\nn = 3   # Größe\n".encode("latin-1"))
    assert main(["run", str(cfg), "--quiet"]) == 2
    _refused(capsys, "config:", str(cfg), "UTF-8")


@pytest.mark.codegen_independent
def test_npy_file_under_an_npz_name(tmp_path, capsys, no_simulation):
    from ctmhsa.maths.weights import read_npz

    np.save(tmp_path / "x.npy", np.zeros((3, 4)))
    os.rename(tmp_path / "x.npy", tmp_path / "tokens.npz")
    with pytest.raises(ValueError, match=r"tokens: .*tokens.npz.* single .npy array of shape \(3, 4\)"):
        read_npz(tmp_path / "tokens.npz", "tokens")
    cfg = _config(tmp_path / "c.toml", "[problem]\ninputs = 'tokens.npz'\n")
    assert main(["run", cfg, "--quiet"]) == 2
    _refused(capsys, "problem.inputs", "tokens.npz", ".npy")
    assert not no_simulation


def _tables(base: str, table: str, key: str, value) -> str:
    """``base`` (TOML) with ``[table] key = value`` set."""
    import tomllib

    from ctmhsa.sims.config import dumps_toml

    raw = tomllib.loads(base)
    raw.setdefault(table, {})[key] = value
    return dumps_toml(raw)


@pytest.mark.codegen_independent
@pytest.mark.parametrize("table, key, value, words", [
    ("output", "dir", 5, ["output.dir", "5"]),
    ("output", "dir", "", ["output.dir"]),
    ("problem", "weight_scale", float("inf"), ["problem.weight_scale", "inf"]),
    ("problem", "weight_scale", float("nan"), ["problem.weight_scale"]),
    ("run", "record_spikes", ["nope"], ["run.record_spikes", "'nope'", "'l5pt'", "'nucleus2'"]),
])
def test_run_config_errors_name_the_setting(tmp_path, capsys, no_simulation, table, key, value, words):
    cfg = _config(tmp_path / "c.toml", _tables(TINY_RATE.replace("'rate'", "'escape'"), table, key, value))
    assert main(["run", cfg, "--quiet"]) == 2
    _refused(capsys, *words)
    assert not no_simulation


@pytest.mark.codegen_independent
def test_record_spikes_flag_names_the_unknown_population(tmp_path, capsys, no_simulation):
    assert main(["run", _config(tmp_path / "c.toml"), "--record-spikes", "l5pt", "nope", "--quiet"]) == 2
    err = _refused(capsys, "--record-spikes", "'nope'", "l23")
    assert "'l5pt'," in err.split("has")[-1]      # the valid ones listed
    assert not no_simulation


@pytest.mark.codegen_independent
@pytest.mark.parametrize("table, key, value, words", [
    ("run", "scheduler", "nonsense", ["run.scheduler", "'nonsense'", "'local'"]),
    ("run", "record_spikes", ["nope"], ["run.record_spikes", "'nope'"]),
    ("output", "dir", 5, ["output.dir"]),
])
def test_train_config_errors_name_the_setting(tmp_path, capsys, no_simulation, table, key, value, words):
    assert main(["train", _config(tmp_path / "t.toml", _tables(TINY_TRAIN, table, key, value)), "--quiet",
                 "--out", str(tmp_path / "o")]) == 2
    _refused(capsys, *words)
    assert not no_simulation


# --- 5. one rule for relative output paths -------------------------------------------------

@pytest.mark.brian2
def test_output_dir_is_relative_to_the_config_and_out_to_the_working_directory(tmp_path, monkeypatch):
    confs, work = tmp_path / "configs", tmp_path / "work"
    confs.mkdir()
    work.mkdir()
    monkeypatch.chdir(work)
    run_cfg = _config(confs / "run.toml", TINY_RATE + "[output]\ndir = 'out_run'\n")
    train_cfg = _config(confs / "train.toml", TINY_TRAIN + "[output]\ndir = 'out_train'\n")
    assert main(["run", run_cfg, "--quiet", "--no-summary"]) == 0
    assert main(["train", train_cfg, "--quiet", "--no-figure"]) == 0
    assert (confs / "out_run" / "provenance.json").exists() and (confs / "out_train" / "training.npz").exists()
    assert not os.listdir(work)
    assert main(["run", run_cfg, "--quiet", "--no-summary", "--out", "cli_run"]) == 0
    assert main(["train", train_cfg, "--quiet", "--no-figure", "--out", "cli_train"]) == 0
    assert sorted(os.listdir(work)) == ["cli_run", "cli_train"]
    import tomllib

    saved = tomllib.loads((confs / "out_run" / "config.toml").read_text())
    assert saved["output"]["dir"] == str(confs / "out_run")        # absolute: runs again from anywhere
    assert sorted(os.listdir(confs / "out_train")) == [".ctmhsa-results", "config.toml", "summary.json",
                                                       "training.npz"]


# --- 6. NWB metadata -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def escape_result():
    from ctmhsa.sims import simulate_mhsa
    from ctmhsa.sims.config import problem_inputs

    x = problem_inputs(n=2, H=1, dk=2, dv=2, de=2)
    return simulate_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], neuron="escape", duration=0.2, warmup=0.05,
                         codegen="numpy", record_spikes=True, seed=2)


@pytest.mark.brian2
def test_nwb_has_subject_session_metadata_and_resolution(tmp_path, escape_result):
    pynwb = pytest.importorskip("pynwb")
    from ctmhsa.sims.nwb import PAPER, SUBJECT, write_nwb

    path = write_nwb(escape_result, str(tmp_path / "spikes.nwb"))
    with pynwb.NWBHDF5IO(path, "r") as io:
        f = io.read()
        assert f.subject.subject_id == SUBJECT["subject_id"] == "ctmhsa-model"
        assert f.subject.species.endswith("NCBITaxon_32630")
        assert f.units.resolution == escape_result.config["dt"] > 0
        assert list(f.related_publications) == [PAPER] and "simulation" in list(f.keywords)
        assert f.session_description and f.experiment_description
        json.loads(f.notes)                           # strict JSON
        times = np.concatenate([np.asarray(t) for t in f.units.spike_times_index[:]])
    steps = times / escape_result.config["dt"]
    np.testing.assert_allclose(steps, np.round(steps), atol=1e-6)     # multiples of the resolution


@pytest.mark.brian2
def test_nwbinspector_finds_nothing_critical(tmp_path, escape_result):
    nwbinspector = pytest.importorskip("nwbinspector")
    from ctmhsa.sims.nwb import write_nwb

    path = write_nwb(escape_result, str(tmp_path / "spikes.nwb"))
    found = [(m.importance.name, m.check_function_name, m.message)
             for m in nwbinspector.inspect_nwbfile(nwbfile_path=path)]
    bad = [m for m in found if m[0] in ("CRITICAL", "BEST_PRACTICE_VIOLATION", "ERROR")]
    assert not bad, bad


# --- 7. size and thread flags of ctmhsa run -----------------------------------------------

@pytest.mark.codegen_independent
def test_size_and_thread_flags_make_a_barrel_head_without_a_file(tmp_path, capsys, no_simulation):
    out = tmp_path / "barrel"
    with pytest.raises(Simulated):
        main(["run", "--n", "33", "--dk", "33", "--dv", "33", "--de", "33", "--H", "1", "--neuron", "rate",
              "--device", "cpp_standalone", "--threads", "3", "--out", str(out), "--quiet"])
    (args, kwargs), = no_simulation
    X, WQ, WK, WV, WO = args
    assert X.shape == (33, 33) and WQ.shape == WK.shape == WV.shape == (1, 33, 33) and WO.shape == (1, 33, 33)
    assert kwargs["run_options"].threads == 3 and kwargs["circuit_options"].neuron == "rate"


@pytest.mark.codegen_independent
@pytest.mark.parametrize("argv, err", [
    (["--H", "0"], "--H: expected an integer >= 1"),
    (["--threads", "-1"], "--threads: expected an integer >= 0"),
])
def test_size_flags_are_checked_by_the_parser(tmp_path, capsys, argv, err):
    with pytest.raises(SystemExit) as exc:
        main(["run", *argv])
    assert exc.value.code == 2 and err in capsys.readouterr().err


@pytest.mark.codegen_independent
def test_size_flags_that_contradict_the_inputs_file_are_refused(tmp_path, capsys, no_simulation):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "in.npz", X=rng.normal(size=(3, 4)), WQ=rng.normal(size=(1, 2, 4)),
             WK=rng.normal(size=(1, 2, 4)), WV=rng.normal(size=(1, 2, 4)), WO=rng.normal(size=(1, 4, 2)))
    cfg = _config(tmp_path / "c.toml", "[problem]\ninputs = 'in.npz'\n[circuit]\nneuron = 'rate'\n")
    assert main(["run", cfg, "--de", "6", "--quiet"]) == 2
    _refused(capsys, "--de", "6", "de = 4")
    assert main(["run", cfg, "--n", "5", "--quiet"]) == 2
    _refused(capsys, "--n", "n = 3")
    with pytest.raises(Simulated):         # agreeing flags are fine
        main(["run", cfg, "--de", "4", "--n", "3", "--quiet", "--out", str(tmp_path / "o")])


@pytest.mark.codegen_independent
def test_bench_out_replaces_only_a_benchmarks_json(tmp_path, capsys, monkeypatch):
    """``ctmhsa bench NAME --out`` used to overwrite any file (and traceback on a directory)."""
    from ctmhsa.sims.benchmarks import robustness

    ran = []
    monkeypatch.setattr(robustness, "main", lambda args: ran.append(args) or 0)
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    assert main(["bench", "robustness", "--out", str(notes)]) == 2
    _refused(capsys, "--out", str(notes))
    assert notes.read_text() == "my notes"
    assert main(["bench", "robustness", "--out", str(tmp_path)]) == 2
    _refused(capsys, "--out", "directory")
    quoted = tmp_path / "quoted.json"          # JSON, but a string that merely contains the word
    quoted.write_text('"my benchmark notes"')
    assert main(["bench", "robustness", "--out", str(quoted)]) == 2
    _refused(capsys, "--out", str(quoted))
    assert not ran
    previous = tmp_path / "rob.json"           # a benchmark's own JSON is replaced
    previous.write_text('{"benchmark": "robustness"}')
    assert main(["bench", "robustness", "--out", str(previous)]) == 0 and len(ran) == 1
    doc = json.loads(previous.read_text())
    assert set(doc["machine"]) == {"before", "after"} and len(doc["machine"]["before"]["load_average"]) == 3
