"""Faults of writing and reading results (issue 46 item 2): a writer killed at any step of the final
move leaves the old or the new results readable; concurrent writers of one directory both succeed;
a damaged results directory is refused naming the directory, the file and what is wrong;
``write_nwb`` never overwrites a user's file; a spiking stream is written and read back; a
sweep's key sees every entry of an array nested in a list."""

import gc
import json
import multiprocessing
import os
import signal
import time
import warnings
import zipfile
from types import SimpleNamespace

import numpy as np
import pytest

from ctmhsa.sims import io
from ctmhsa.sims.io import OutputError, load, write_result
from ctmhsa.sims.result import SimulationResult

FORK = multiprocessing.get_context("fork") if "fork" in multiprocessing.get_all_start_methods() else None
needs_fork = pytest.mark.skipif(FORK is None, reason="the writers are forked processes")


def _result(value: float) -> SimulationResult:
    """A small rate-level result made by hand (nothing simulated): every stage holds ``value``."""
    x = np.full((2, 2), value)
    return SimulationResult(x_tilde=x, reference=x, stages={"x_tilde": x}, reference_stages={"x_tilde": x},
                            rates={"nucleus2": np.ones((2, 2))}, spikes={}, level="rate",
                            config={"duration": 0.5}, counts={"neurons": 4})


def _value(path) -> float:
    return float(load(path).x_tilde[0, 0])


def _leftovers(parent) -> list:
    return sorted(n for n in os.listdir(parent) if n.startswith("."))


# --- 1. a writer killed while replacing the results (F04, F04b) -----------------------------

def _write_killed_at(path, k, exchange):
    """Write the new results (2.0) over ``path``, SIGKILLing this process before its k-th rename,
    replace, swap or tree removal (child process)."""
    import shutil

    calls = [0]

    def step(fn):
        def wrapped(*a, **kw):
            if calls[0] == k:
                os.kill(os.getpid(), signal.SIGKILL)
            calls[0] += 1
            return fn(*a, **kw)
        return wrapped

    os.rename, os.replace, shutil.rmtree = step(os.rename), step(os.replace), step(shutil.rmtree)
    io._exchange = step(io._exchange if exchange else (lambda a, b: False))
    write_result(_result(2.0), path, config={})


@needs_fork
@pytest.mark.codegen_independent
@pytest.mark.parametrize("exchange", [True, False], ids=["swap", "two-renames"])
def test_a_writer_killed_at_any_step_leaves_old_or_new_results(tmp_path, exchange):
    """F04: killed between the two renames, the old code left no results at ``path`` (the old
    ones moved aside, the new ones in a temporary), and the next writer deleted both (F04b)."""
    if exchange and io._renameat2() is None:
        pytest.skip("no renameat2 here")
    io.git_commit()                              # cached before forking: the children run no git
    path = str(tmp_path / "run")
    absent = 0
    for k in range(20):
        write_result(_result(1.0), path, config={})
        assert _leftovers(tmp_path) == []
        child = FORK.Process(target=_write_killed_at, args=(path, k, exchange))
        child.start()
        child.join(60)
        if child.exitcode == 0:                  # no step left to kill at: written
            assert _value(path) == 2.0
            break
        assert child.exitcode == -signal.SIGKILL
        if not os.path.exists(path):
            absent += 1
            assert not exchange, f"step {k}: the swap left no results at path"
        assert _value(path) in (1.0, 2.0), k     # load puts an orphan back
        write_result(_result(3.0), path, config={})     # the next writer (F04b)
        assert _value(path) == 3.0 and _leftovers(tmp_path) == [], (k, _leftovers(tmp_path))
    else:
        pytest.fail("the writer never completed")
    assert k >= 2
    if not exchange:
        assert absent >= 1          # the step between the two renames was reached


@pytest.mark.codegen_independent
def test_the_next_writer_puts_back_a_killed_writers_results(tmp_path):
    """F04b: the orphan is restored (not deleted) by the next writer too, before it writes."""
    path = str(tmp_path / "run")
    write_result(_result(1.0), path, config={})
    old = tmp_path / ".run.old-killed"
    old.mkdir()
    os.rename(path, old / "x")                  # as the fallback leaves it when killed between renames
    with pytest.raises(RuntimeError, match="fails"), io.results_directory(path):   # the next writer
        assert _value(path) == 1.0              # put back before it writes
        raise RuntimeError("the writer fails")
    assert _value(path) == 1.0 and _leftovers(tmp_path) == []


# --- 2. two writers of one directory at once (FCC1) -----------------------------------------

def _write_meeting(path, value, barrier):
    """Write ``value`` to ``path``, waiting inside the write for the other writer (child process)."""
    write_result(_result(value), path, config={}, extra=lambda d: barrier.wait(timeout=30))


@needs_fork
@pytest.mark.codegen_independent
def test_two_concurrent_writers_of_one_directory_both_succeed(tmp_path):
    """FCC1: the second writer's clean-up deleted the first one's temporary directory mid-write."""
    io.git_commit()
    path = str(tmp_path / "cc")
    write_result(_result(0.0), path, config={})
    barrier = FORK.Barrier(2)
    first = FORK.Process(target=_write_meeting, args=(path, 1.0, barrier))
    first.start()
    deadline = time.monotonic() + 30
    while barrier.n_waiting < 1 and time.monotonic() < deadline:
        time.sleep(0.01)                        # the first one is inside its write, its temporary complete
    second = FORK.Process(target=_write_meeting, args=(path, 2.0, barrier))
    second.start()
    first.join(60)
    second.join(60)
    assert (first.exitcode, second.exitcode) == (0, 0)
    assert _value(path) in (1.0, 2.0)           # the last to finish wins, complete
    assert _leftovers(tmp_path) == []


@pytest.mark.codegen_independent
def test_a_live_writers_temporary_is_left_alone(tmp_path):
    """A temporary owned by a live writer (this process) is never removed as stale."""
    path = str(tmp_path / "run")
    with io.results_directory(path) as tmp:
        with io._target_lock(str(tmp_path), "run"):
            io._remove_stale(str(tmp_path), "run")
        assert os.path.isdir(tmp)
        write_result(_result(5.0), path, config={})      # another writer meanwhile
        assert os.path.isdir(tmp)
        np.savez(os.path.join(tmp, "x.npz"), x=np.zeros(1))
    assert sorted(os.listdir(path)) == [".ctmhsa-results", "x.npz"]


# --- 3. damaged results directories (R01-R13) -----------------------------------------------

def _npz_with_object_array(f):
    np.savez(f, x_tilde=np.array([{"a": 1}], dtype=object))     # would unpickle


def _text(name, text):
    return lambda d: (d / name).write_text(text)


def _provenance(change):
    def damage(d):
        doc = json.loads((d / "provenance.json").read_text())
        change(doc)
        (d / "provenance.json").write_text(json.dumps(doc))
    return damage


def _symlink_to_user_file(d):
    user = d.parent / "passwd"
    user.write_text("root:x:0:0:root:/root:/bin/bash\n")
    (d / "stages.npz").unlink()
    (d / "stages.npz").symlink_to(user)


DAMAGE = {
    "R01-truncated": ("stages.npz", "not an npz archive",
                      lambda d: (d / "stages.npz").write_bytes((d / "stages.npz").read_bytes()[:40])),
    "R02-bad-json": ("provenance.json", "not valid JSON", _text("provenance.json", "{bad json")),
    "R03-missing": ("stages.npz", "is missing", lambda d: (d / "stages.npz").unlink()),
    "R04-json-array": ("provenance.json", "expected a JSON object, got an array", _text("provenance.json", "[]")),
    "R05-pickle": ("stages.npz", "object array", lambda d: _npz_with_object_array(d / "stages.npz")),
    "R06-no-level": ("provenance.json", "'level'", _provenance(lambda doc: doc.pop("level"))),
    "R11-empty": ("rates.npz", "empty", _text("rates.npz", "")),
    "R12-symlink": ("stages.npz", "not an npz archive", _symlink_to_user_file),
    "no-x_tilde": ("reference.npz", "'x_tilde'", lambda d: np.savez(d / "reference.npz", y=np.zeros(2))),
    "listed-noise-missing": ("noise.npz", "is missing", lambda d: (d / "noise.npz").unlink()),
    "unpaired-spikes": ("spikes.npz", "'l23.t'", lambda d: np.savez(d / "spikes.npz", **{"l23.i": np.zeros(2)})),
    "bad-member": ("stages.npz", "truncated or damaged", lambda d: _corrupt_member(d / "stages.npz")),
    "config-not-object": ("provenance.json", "'config'", _provenance(lambda doc: doc.update(config=[1]))),
}


def _corrupt_member(f):
    """A zip archive whose member's compressed data is damaged (its directory intact)."""
    data = bytearray(f.read_bytes())
    with zipfile.ZipFile(f) as z:
        info = z.infolist()[0]
    off = info.header_offset                   # the local header's name and extra lengths
    start = off + 30 + int.from_bytes(data[off + 26:off + 28], "little") + int.from_bytes(data[off + 28:off + 30],
                                                                                          "little")
    data[start:start + 8] = b"\xff" * 8
    f.write_bytes(bytes(data))


@pytest.mark.codegen_independent
@pytest.mark.parametrize("case", list(DAMAGE))
def test_load_names_the_directory_and_the_damaged_file(tmp_path, case):
    name, words, damage = DAMAGE[case]
    d = tmp_path / "run"
    write_result(_result(1.0), str(d), config={})
    damage(d)
    with pytest.raises(ValueError) as err:
        load(str(d))
    msg = str(err.value)
    assert msg.startswith("path: ") and str(d) in msg and name in msg and words in msg, msg


@pytest.mark.codegen_independent
def test_load_of_no_path_and_of_a_models_directory(tmp_path):
    """R08, R09."""
    with pytest.raises(TypeError, match=r"^path: expected a results directory path .* got None"):
        load(None)
    d = _model_result().save(tmp_path / "model")
    with pytest.raises(ValueError, match=r"not a complete results directory.*ModelResult.load"):
        load(d)


class _no_unclosed_files(warnings.catch_warnings):
    """No file left open (a ``ResourceWarning`` when it is collected) inside the block."""

    def __init__(self):
        super().__init__(record=True)

    def __enter__(self):
        self.found = super().__enter__()
        warnings.simplefilter("always", ResourceWarning)
        return self.found

    def __exit__(self, *exc):
        gc.collect()
        unclosed = [str(w.message) for w in self.found if issubclass(w.category, ResourceWarning)]
        super().__exit__(*exc)
        assert not unclosed, unclosed


def _model_result():
    from ctmhsa.sims.model import ModelResult

    y = np.arange(4.0).reshape(2, 2)
    return ModelResult(output=y, reference=y, logits=None, reference_logits=None, blocks=[{"y": y}],
                       reference_blocks=[{"y": y}], metrics={"blocks": [{}]}, counts={}, rates={},
                       config={"blocks": [{}], "neuron": "rate"})


@pytest.mark.codegen_independent
@pytest.mark.parametrize("name, words, damage", [
    ("stages.npz", "not an npz archive", lambda d: (d / "stages.npz").write_bytes(b"PK\x03\x04trunc")),   # R13
    ("config.json", "not valid JSON", _text("config.json", "{")),
    ("metrics.json", "is missing", lambda d: (d / "metrics.json").unlink()),
    ("config.json", "'blocks'", _text("config.json", "{}")),
    ("rates.json", "expected a JSON array, got an object", _text("rates.json", "{}")),
])
def test_model_result_load_names_the_damaged_file(tmp_path, name, words, damage):
    from ctmhsa.sims.model import ModelResult

    d = tmp_path / "model"
    _model_result().save(d)
    with _no_unclosed_files():
        np.testing.assert_array_equal(ModelResult.load(d).blocks[0]["y"], np.arange(4.0).reshape(2, 2))
    damage(d)
    with pytest.raises(ValueError) as err:
        ModelResult.load(d)
    msg = str(err.value)
    assert msg.startswith("path: ") and str(d) in msg and name in msg and words in msg, msg
    with pytest.raises(TypeError, match="^path: "):
        ModelResult.load(None)


# --- 4. NWB: never a user's file (R19) ------------------------------------------------------

@pytest.mark.codegen_independent
def test_write_nwb_refuses_to_overwrite_a_file_it_did_not_write(tmp_path):
    from ctmhsa.sims.nwb import write_nwb

    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    spiking = SimpleNamespace(level="escape")           # refused before anything is read from it
    with pytest.raises(OutputError, match=r"^path: .*notes.txt.* not an NWB file written by ctmhsa"), \
            _no_unclosed_files():
        write_nwb(spiking, str(notes))
    assert notes.read_text() == "my notes"
    fake = tmp_path / "other.nwb"
    fake.write_bytes(b"\x89HDF\r\n\x1a\n" + bytes(100))
    with pytest.raises(OutputError, match="not an NWB file written by ctmhsa"):
        write_nwb(spiking, str(fake))
    with pytest.raises(OutputError, match="is a directory"):
        write_nwb(spiking, str(tmp_path))


# --- 5. a spiking stream written, read back and swept (R21, W06) ----------------------------

@pytest.fixture(scope="module")
def escape_stream():
    """One tiny escape-level stream of two token sets (0.2 s each after a 0.1 s warm-up)."""
    from ctmhsa.sims import simulate_mhsa

    r = np.random.default_rng(0)
    S = r.normal(size=(2, 3, 3)) * .6
    W = [r.normal(size=s) / 2 for s in [(1, 2, 3)] * 3 + [(1, 3, 2)]]
    return simulate_mhsa(S, *W, neuron="escape", presentation=0.2, warmup=0.1, seed=1, codegen="numpy",
                         record_spikes=True)


def _same_presentations(a, b):
    assert json.dumps(a.presentation_metrics()) == json.dumps(b.presentation_metrics())


@pytest.mark.brian2
def test_a_spiking_stream_is_written_and_read_back(tmp_path, escape_stream):
    pynwb = pytest.importorskip("pynwb")
    from ctmhsa.sims.nwb import write_nwb

    path = write_result(escape_stream, str(tmp_path / "stream"))
    back = load(path)
    _same_presentations(escape_stream, back)
    for pop, (i, t) in escape_stream.spikes.items():
        np.testing.assert_array_equal(back.spikes[pop][1], t)
    with pynwb.NWBHDF5IO(os.path.join(path, "spikes.nwb"), "r") as f:
        nwb = f.read()
        units, epochs = nwb.units.to_dataframe(), nwb.epochs.to_dataframe()
    assert np.stack(units["rate"]).shape == (len(units), 2)              # one rate per presentation
    stored = np.stack(units[units.population == "nucleus2"]["rate"])
    for k, dense in enumerate(escape_stream.rates["nucleus2"]):
        np.testing.assert_array_equal(np.sort(stored[:, k]), np.sort(dense[np.isfinite(dense)]))
    assert sum("presentation" in t for t in epochs.tags) == 4
    again = write_nwb(escape_stream, os.path.join(path, "spikes.nwb"))    # its own file: replaced
    assert again.endswith("spikes.nwb") and not [n for n in os.listdir(path) if n.startswith(".tmp-")]


@pytest.mark.brian2
def test_a_sweep_writes_a_spiking_stream(tmp_path, monkeypatch, escape_stream):
    """W06 (the stream computed once by the fixture stands in for the sweep's run)."""
    from ctmhsa.sims import sweep as sweep_module

    monkeypatch.setattr(sweep_module, "_simulate_item", lambda kw: escape_stream)
    (path,) = sweep_module.sweep([dict(neuron="escape", presentation=0.2)], scheduler="serial",
                                 out_dir=str(tmp_path / "sw"))
    _same_presentations(escape_stream, load(path))


# --- 6. a sweep's key sees every entry (W04) ------------------------------------------------

@pytest.mark.codegen_independent
def test_sweep_keys_hash_arrays_at_any_depth():
    from ctmhsa.perturb import Silence
    from ctmhsa.sims.sweep import item_key

    a = np.zeros((1, 1001))
    b = a.copy()
    b[0, 500] = 1.0                              # elided by repr: '...'
    assert item_key(dict(WQ=[a])) != item_key(dict(WQ=[b]))
    assert item_key(dict(WQ={"h": (a,)})) != item_key(dict(WQ={"h": (b,)}))
    assert item_key(dict(WQ=[a])) != item_key(dict(WQ=[a.astype(np.float32)]))        # dtype
    assert item_key(dict(WQ=[a])) != item_key(dict(WQ=[a.reshape(1001, 1)]))          # shape
    assert item_key(dict(WQ=[a])) == item_key(dict(WQ=[a.copy()]))                    # contents only
    cells = np.arange(2000)
    other = cells.copy()
    other[1000] = 0
    assert (item_key(dict(perturbations=[Silence("l23", cells=cells)]))
            != item_key(dict(perturbations=[Silence("l23", cells=other)])))
    assert item_key(dict(X=a, seed=1)) == item_key(dict(seed=1, X=a.copy(), report="progress"))
