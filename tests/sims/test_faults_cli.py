"""Faults of the command line (issue 46): every flag of ``ctmhsa run`` applies to the kind of run
(one token set, a stream of sets, a transformer model) or is refused naming it; bad model and
token files, a model that cannot read the digits and a presentation too short to settle are one
line each, before anything is built; Ctrl+C ends a run with one line and exit status 130."""

import json
import os
import signal

import numpy as np
import pytest

import ctmhsa
from ctmhsa.sims.cli import main


class Simulated(Exception):
    """Raised by the stand-ins of the simulation: the command got that far."""


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The issue's small model ($P: one block, H = 1, dk = dv = 2, de = 3) and token files, good and bad."""
    d = tmp_path_factory.mktemp("cli")
    r = np.random.default_rng(0)
    X = r.normal(size=(3, 3)) * .6
    W = [r.normal(size=s) / 2 for s in [(1, 2, 3)] * 3 + [(1, 3, 2)]]
    ctmhsa.Model.from_arrays(*W).save(d / "good.npz")
    raw = (d / "good.npz").read_bytes()
    (d / "trunc.npz").write_bytes(raw[:len(raw) // 2])
    np.savez(d / "tok.npz", X=X)
    np.savez(d / "tokc.npz", X=X + 1j)
    np.savez(d / "tokobj.npz", X=np.array([X, "a"], dtype=object))
    np.save(d / "tok.npy", X)
    raw = (d / "tok.npz").read_bytes()
    (d / "toktrunc.npz").write_bytes(raw[:len(raw) // 2])
    np.savez(d / "toks.npz", X=np.stack([X, X[::-1]]))
    # a full inputs file (tokens and weights) whose tokens are a stream of two sets
    np.savez(d / "stream_inputs.npz", X=np.stack([X, X[::-1]]), WQ=W[0], WK=W[1], WV=W[2], WO=W[3])
    # full inputs files with bad tokens
    np.savez(d / "inc.npz", X=X + 1j, WQ=W[0], WK=W[1], WV=W[2], WO=W[3])
    np.savez(d / "inobj.npz", X=np.array([X, "a"], dtype=object), WQ=W[0], WK=W[1], WV=W[2], WO=W[3])
    return d


def _refused(capsys, *words, code=2, rc=None):
    """The error line of a refused command: one line, no traceback, naming ``words``."""
    err = capsys.readouterr().err
    assert rc == code, (rc, err)
    assert "Traceback" not in err and err.startswith("ctmhsa: error: ") and err.count("\n") == 1, err
    for w in words:
        assert w in err, (w, err)
    return err


def _run_model(files, *flags):
    return main(["run", "--model", str(files / "good.npz"), "--neuron", "rate", "--quiet", "--codegen", "numpy",
                 "--out", str(files / "out"), *flags])


# bad model files (C14, C29) ---------------------------------------------------------------------

@pytest.mark.codegen_independent
@pytest.mark.parametrize("model, words", [("trunc.npz", ["trunc.npz", "not a readable .npz"]),
                                          ("missing.npz", ["missing.npz", "does not exist"]),
                                          ("digits_test", ["digits_test", "not a model"])])
def test_a_bad_model_is_one_line_naming_the_flag(files, capsys, no_build, model, words):
    path = str(files / model) if model.endswith(".npz") else model
    _refused(capsys, "--model: ", *words, rc=main(["run", "--model", path, "--neuron", "rate", "--quiet",
                                                    "--out", str(files / "o")]))


# every flag of `run --model`: applied or refused (C21-C24) ----------------------------------------

@pytest.mark.codegen_independent
@pytest.mark.parametrize("flags, words", [
    (["--device", "cuda_standalone"], ["device: ", "cuda_standalone"]),   # no brian2cuda, or no model on it
    (["--checkpoints", "0.1"], ["--checkpoints: "]),
    (["--threads", "2"], ["--threads: "]),
    (["--weights", "w.safetensors"], ["--weights: ", "model file carries its own weights"]),
    (["--layer", "0"], ["--layer: "]),
    (["--heads", "0"], ["--heads: "]),
    (["--n-heads", "2"], ["--n-heads: "]),
    (["--layout", "bert"], ["--layout: "]),
    (["--de", "3"], ["--de: ", "model file decides"]),
    (["--H", "1"], ["--H: "]),
    (["--presentation", "0.2"], ["--presentation: ", "stream"]),      # one set of tokens
    (["--tokens", "toks.npz", "--duration", "1"], ["--duration: ", "stream"]),
    (["--tokens", "tok.npz", "--n", "4"], ["--n: 4 disagrees with --tokens"]),
    (["--record-spikes", "l23"], ["--record-spikes: ", "rate level has no spikes"]),
])
def test_run_model_refuses_a_flag_that_does_not_apply(files, capsys, no_build, flags, words):
    flags = [str(files / f) if f.endswith(".npz") else f for f in flags]
    _refused(capsys, *words, rc=_run_model(files, *flags))


@pytest.mark.codegen_independent
def test_run_model_hands_device_and_threads_on(files, capsys, monkeypatch):
    """A model runs on cpp_standalone: the flags reach simulate_model (they were accepted and dropped)."""
    seen = {}

    def stop(model, X, **kw):
        seen.update(kw)
        raise ValueError("stopped before building")

    monkeypatch.setattr("ctmhsa.sims.model.simulate_model", stop)
    _refused(capsys, "stopped before building", rc=_run_model(files, "--device", "cpp_standalone", "--threads", "2"))
    assert seen["device"] == "cpp_standalone" and seen["threads"] == 2


@pytest.mark.codegen_independent
def test_run_model_refuses_a_configuration_file(files, capsys, no_build, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[run]\nduration = 2.0\n")
    rc = main(["run", str(cfg), "--model", str(files / "good.npz"), "--neuron", "rate", "--quiet"])
    _refused(capsys, "config: ", "c.toml", "--model", rc=rc)


@pytest.mark.codegen_independent
def test_run_model_records_the_spikes_asked_for(files, monkeypatch):
    """C21: ``--record-spikes l23`` reaches simulate_model (every block's L2/3) instead of vanishing."""
    calls = []

    def stand_in(model, X, **kw):
        calls.append(kw)
        raise Simulated
    monkeypatch.setattr("ctmhsa.sims.model.simulate_model", stand_in)
    for flags, want in [(["--record-spikes", "l23"], ["l23"]), (["--record-spikes"], True),
                        (["--record-spikes", "l23", "--no-record-spikes"], None), ([], None)]:
        with pytest.raises(Simulated):
            main(["run", "--model", str(files / "good.npz"), "--neuron", "escape", "--quiet", "--duration", "0.2",
                  "--out", str(files / "o"), *flags])
        assert calls[-1].get("record_spikes") == want, flags


# token files (C28, C49, C50, C52), for --tokens and for problem.inputs ----------------------------

BAD_TOKENS = [("tokc.npz", "complex128"), ("toktrunc.npz", "not a readable .npz"), ("tok.npy", "single .npy array"),
              ("tokobj.npz", "object (pickled) array"), ("missing.npz", "does not exist")]


@pytest.mark.codegen_independent
@pytest.mark.parametrize("name, what", BAD_TOKENS)
def test_bad_tokens_are_one_line_naming_the_flag_and_file(files, capsys, no_build, name, what):
    _refused(capsys, "--tokens: ", name, what, rc=_run_model(files, "--tokens", str(files / name)))


@pytest.mark.codegen_independent
@pytest.mark.parametrize("name, what", [("inc.npz", "complex128"), ("inobj.npz", "object (pickled) array")] + BAD_TOKENS[1:3]
                         + BAD_TOKENS[4:])
def test_bad_inputs_files_of_a_configuration_too(files, capsys, no_build, tmp_path, name, what):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[problem]\ninputs = '{files / name}'\n[circuit]\nneuron = 'rate'\n")
    _refused(capsys, "problem.inputs", name, what, rc=main(["run", str(cfg), "--quiet", "--out", str(tmp_path / "o")]))


@pytest.mark.codegen_independent
def test_complex_tokens_never_lose_their_imaginary_part(tmp_path):
    from ctmhsa.sims.config import read_arrays

    np.savez(tmp_path / "tokc.npz", X=np.ones((2, 2)) * 1j)
    with pytest.raises(ValueError, match=r"^where: .*tokc.npz'?: array X has dtype complex128.*imaginary"):
        read_arrays(tmp_path / "tokc.npz", "where", ("X",))


# streams of token sets through one attention pathway ------------------------------------------------

@pytest.mark.codegen_independent
@pytest.mark.parametrize("flags, words", [(["--presentation", "0.2"], ["--presentation: ", "one token set"])])
def test_a_set_refuses_stream_flags(files, capsys, no_build, tmp_path, flags, words):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[problem]\nn = 3\nH = 1\ndk = 2\ndv = 2\nde = 3\n[circuit]\nneuron = 'rate'\n")
    _refused(capsys, *words, rc=main(["run", str(cfg), "--quiet", "--out", str(tmp_path / "o"), *flags]))


@pytest.mark.codegen_independent
@pytest.mark.parametrize("flags, words", [(["--duration", "1"], ["--duration: ", "T x presentation"]),
                                          (["--checkpoints", "0.1"], ["--checkpoints: "])])
def test_a_stream_refuses_set_flags(files, capsys, no_build, tmp_path, flags, words):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[problem]\ninputs = '{files / 'stream_inputs.npz'}'\n[circuit]\nneuron = 'rate'\n")
    _refused(capsys, *words, rc=main(["run", str(cfg), "--quiet", "--out", str(tmp_path / "o"), *flags]))


@pytest.mark.brian2
def test_a_stream_of_token_sets_runs_from_the_command_line(files, tmp_path):
    """A stream X (T, n, de) was refused by `ctmhsa run` though simulate_mhsa runs it."""
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[problem]\ninputs = '{files / 'stream_inputs.npz'}'\n[circuit]\nneuron = 'rate'\n"
                   "[run]\ncodegen = 'numpy'\n")
    assert main(["run", str(cfg), "--quiet", "--no-summary", "--presentation", "0.2", "--out", str(tmp_path / "o")]) == 0
    res = ctmhsa.load(str(tmp_path / "o"))
    assert res.config["presentation"] == 0.2 and np.shape(res.stages["x_tilde"])[0] == 2


# digits (C33, C55) ----------------------------------------------------------------------------------

@pytest.mark.codegen_independent
def test_digits_refuses_a_model_that_does_not_take_the_patches(files, capsys, no_build):
    rc = main(["digits", "--model", str(files / "good.npz"), "--neuron", "rate", "--images", "1", "--quiet",
               "--out", str(files / "d")])
    _refused(capsys, "--model: ", "good.npz", "16 tokens of 4 pixels", "10 classes", "de = 3", "no read-out", rc=rc)


@pytest.mark.codegen_independent
def test_digits_refuses_a_presentation_too_short_to_settle(files, capsys, no_build):
    rc = main(["digits", "--presentation", "0.005", "--neuron", "rate", "--images", "2", "--quiet", "--no-figure",
               "--out", str(files / "d")])
    _refused(capsys, "--presentation: ", "0.005", rc=rc)


@pytest.mark.codegen_independent
@pytest.mark.parametrize("bad", ["nan", "-1", "0"])
def test_digits_refuses_a_presentation_that_is_not_positive(files, capsys, no_build, bad):
    rc = main(["digits", "--presentation", bad, "--neuron", "rate", "--images", "2", "--quiet", "--no-figure",
               "--out", str(files / "d")])
    _refused(capsys, "--presentation: ", rc=rc)


@pytest.mark.codegen_independent
@pytest.mark.parametrize("flags, flag", [(["--rate-presentation", "-1"], "--rate-presentation: "),
                                         (["--rate-presentation", "nan"], "--rate-presentation: "),
                                         (["--presentations", "0.2", "inf"], "--presentations: ")])
def test_bench_digits_refuses_bad_presentations_before_building(files, capsys, no_build, flags, flag):
    rc = main(["bench", "digits", "--images", "2", *flags, "--out", str(files / "b.json")])
    _refused(capsys, flag, rc=rc)


@pytest.mark.codegen_independent
@pytest.mark.parametrize("flags, words", [(["--start", "497"], ["--start: ", "0..496", "497"]),
                                          (["--start", "490", "--images", "8"], ["--images: ", "1..7 from --start 490"])])
def test_digits_refuses_a_part_outside_the_test_set(files, capsys, no_build, flags, words):
    rc = main(["digits", "--neuron", "rate", *flags, "--quiet", "--no-figure", "--out", str(files / "d")])
    _refused(capsys, *words, rc=rc)
    with pytest.raises(SystemExit) as exc:   # the parser's own refusal of a negative index
        main(["digits", "--start", "-1", "--quiet", "--out", str(files / "d")])
    assert exc.value.code == 2 and "argument --start: expected an integer >= 0, got -1" in capsys.readouterr().err


@pytest.mark.codegen_independent
def test_digits_start_and_skip_stream_that_part_of_the_test_set(files, capsys, monkeypatch):
    """``--start 5 --images 3`` streams test images 5-7, ``--start 494`` the last three, and
    ``--start 50 --images 10 --skip 58 56`` test images 50-59 but 56 and 58, in order."""
    from ctmhsa.sims import classify as classify_module
    from ctmhsa.sims.digits import test_set

    shown = []

    def stop(model, images, labels, **kw):
        shown.append((images, labels))
        raise ValueError("stopped before building")

    monkeypatch.setattr(classify_module, "classify", stop)
    images, labels = test_set()
    for flags, part in ((["--start", "5", "--images", "3"], slice(5, 8)), (["--start", "494"], slice(494, 497)),
                        (["--start", "50", "--images", "10", "--skip", "58", "56"], [50, 51, 52, 53, 54, 55, 57, 59])):
        rc = main(["digits", "--neuron", "rate", *flags, "--quiet", "--no-figure", "--out", str(files / "d")])
        _refused(capsys, "stopped before building", rc=rc)
        np.testing.assert_array_equal(shown[-1][0], images[part])
        np.testing.assert_array_equal(shown[-1][1], labels[part])


@pytest.mark.codegen_independent
@pytest.mark.parametrize("flags, words", [
    (["--start", "50", "--images", "10", "--skip", "60"], ["--skip: ", "test image 60", "(50-59)"]),
    (["--skip", "3", "3"], ["--skip: ", "test image 3 named twice"]),
    (["--start", "5", "--images", "2", "--skip", "5", "6"], ["--skip: ", "leaves none of the 2"])])
def test_digits_refuses_a_skip_outside_the_images_run(files, capsys, no_build, flags, words):
    rc = main(["digits", "--neuron", "rate", *flags, "--quiet", "--no-figure", "--out", str(files / "d")])
    _refused(capsys, *words, rc=rc)


@pytest.mark.codegen_independent
def test_digits_names_the_test_image_its_circuit_cannot_divide(files, capsys, no_build):
    # test image 56's drive lies below every training image's: at lif it needs a division of 2.95 of
    # 3.04-82; the refusal names the test image (not its place in the part shown) and the flags
    rc = main(["digits", "--neuron", "lif", "--presentation", "0.5", "--start", "50", "--images", "10", "--quiet",
               "--no-figure", "--out", str(files / "d")])
    _refused(capsys, "(N(X) of test image 56)", "needs a division of 2.951", "(3.04-82)",
             "leave this test image out (--skip)", rc=rc)
    rc = main(["digits", "--neuron", "lif", "--presentation", "0.5", "--start", "50", "--images", "10", "--skip",
               "51", "53", "--quiet", "--no-figure", "--out", str(files / "d")])   # named by its index, not its place
    _refused(capsys, "(N(X) of test image 56)", rc=rc)


@pytest.mark.codegen_independent
def test_digits_names_its_own_remedy_for_a_stream_too_long_for_the_memory(files, capsys, no_build, monkeypatch):
    # 496 test images at the lif level keep about 12.5 GiB (32 copies, compiled) until the stream ends
    monkeypatch.setattr("ctmhsa.sims.model.available_memory", lambda: 4 * 2**30)
    rc = main(["digits", "--neuron", "lif", "--presentation", "0.5", "--skip", "56", "--device", "cpp_standalone",
               "--quiet", "--no-figure", "--out", str(files / "d")])
    _refused(capsys, "max_memory: ", "a stream of 496 presentations keeps",
             "run fewer test images at a time (--start, --images) or fewer copies (--P)", rc=rc)


@pytest.mark.codegen_independent
def test_digits_at_lif_refuses_the_default_presentation(files, capsys, no_build):
    # the lif somata couple over 0.2 s: 0.2 s per image is refused before building, naming the flag
    rc = main(["digits", "--neuron", "lif", "--images", "2", "--quiet", "--no-figure", "--out", str(files / "d")])
    _refused(capsys, "--presentation: ", "0.2", rc=rc)


@pytest.mark.codegen_independent
@pytest.mark.parametrize("flags", [["--neuron", "lif", "--latency", "-0.1"], ["--neuron", "lif", "--latency", "0.5"],
                                   ["--neuron", "lif", "--latency", "nan"], ["--neuron", "rate", "--latency", "0.1"]])
def test_digits_refuses_a_latency_it_cannot_read(files, capsys, no_build, flags):
    # the class cells' delay: seconds in [0, presentation) at a spiking level, refused before building
    rc = main(["digits", "--presentation", "0.5", *flags, "--images", "2", "--quiet", "--no-figure",
               "--out", str(files / "d")])
    _refused(capsys, "--latency: ", rc=rc)


@pytest.mark.codegen_independent
def test_run_model_refuses_a_latency_on_one_token_set(files, capsys, no_build):
    _refused(capsys, "--latency: the decoding delays of a stream's presentations; X is one token set",
             rc=_run_model(files, "--latency", "l5pt=0.05"))


@pytest.mark.brian2
def test_run_model_reads_a_stream_with_a_latency(files, capsys):
    """A block's population named without its block is delayed in every block; the results
    directory records the delays."""
    out = files / "lat"
    rc = main(["run", "--model", str(files / "good.npz"), "--tokens", str(files / "toks.npz"), "--neuron", "escape",
               "--presentation", "0.2", "--latency", "l5pt=0.05", "--quiet", "--codegen", "numpy", "--seed", "1",
               "--out", str(out)])
    assert rc == 0, capsys.readouterr().err
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["latency"] == {"b0_l5pt": 0.05} and cfg["lag"] == pytest.approx(0.1)


@pytest.mark.codegen_independent
def test_run_refuses_a_latency_without_a_model_and_a_malformed_one(files, capsys, no_build):
    _refused(capsys, "--latency: the read-out delays of a model's stream (--model)",
             rc=main(["run", "--latency", "l5pt=0.05", "--quiet", "--out", str(files / "o")]))
    with pytest.raises(SystemExit):
        main(["run", "--model", str(files / "good.npz"), "--latency", "classes", "--quiet"])
    assert "expected POPULATION=SECONDS" in capsys.readouterr().err


# Ctrl+C (F05) ----------------------------------------------------------------------------------------

@pytest.mark.brian2
def test_ctrl_c_ends_a_run_in_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """Brian2 turned Ctrl+C into an early end of Network.run, which ctmhsa then misread as a fault
    (a RuntimeError with a traceback); now the command stops, says where, and exits 130."""
    import brian2 as b2

    h = signal.getsignal(signal.SIGINT)
    if getattr(h, "previous_handler", h) is signal.SIG_IGN:   # nohup, or a background job without job control
        pytest.skip("SIGINT is ignored in this process: no Ctrl+C reaches it, and the command leaves it so")

    def interrupted_run(*a, **k):   # a network that receives SIGINT at 5 ms of simulated time
        g = b2.NeuronGroup(1, "dv/dt = -v / (10*ms) : 1", codeobj_class=b2.NumpyCodeObject)

        @b2.network_operation(dt=1 * b2.ms)
        def ctrl_c(t):
            if t >= 5 * b2.ms:
                os.kill(os.getpid(), signal.SIGINT)
        b2.Network(g, ctrl_c).run(1 * b2.second)
        raise AssertionError("the run went on after Ctrl+C")

    monkeypatch.setattr("ctmhsa.sims.cli.simulate_mhsa", interrupted_run)
    cfg = tmp_path / "c.toml"
    cfg.write_text("[problem]\nn = 3\nH = 1\ndk = 2\ndv = 2\nde = 3\n[circuit]\nneuron = 'rate'\n")
    before = signal.getsignal(signal.SIGINT)
    assert main(["run", str(cfg), "--quiet", "--out", str(tmp_path / "OUT")]) == 130
    err = capsys.readouterr().err
    assert err.startswith("ctmhsa: interrupted after 0.00") and "s of simulated time; nothing written to" in err
    assert "OUT" in err and err.count("\n") == 1 and "Traceback" not in err
    assert sorted(os.listdir(tmp_path)) == ["c.toml"]
    assert signal.getsignal(signal.SIGINT) is before


@pytest.mark.codegen_independent
def test_a_parts_examples_carry_their_test_set_index():
    """The results of ``ctmhsa digits --start 5`` name their examples (the figure's ``#index``) by
    their index in the test set, not in the part shown."""
    from types import SimpleNamespace

    from ctmhsa.sims.benchmarks.digits import classification_row
    from ctmhsa.sims.digits import test_set

    images, labels = test_set()
    part = slice(5, 8)
    c = SimpleNamespace(summary=lambda: {}, confusion=np.zeros((10, 10), int), labels=labels[part],
                        predictions=labels[part], float_predictions=labels[part], scores=np.zeros((3, 10)),
                        float_scores=np.zeros((3, 10)))
    row = classification_row(c, 2, images[part], index=[5, 6, 7])
    assert [e["index"] for e in row["examples"]] == [5, 6]
    assert [e["label"] for e in row["examples"]] == labels[5:7].tolist()
    assert [e["index"] for e in classification_row(c, 2, images[part])["examples"]] == [0, 1]
