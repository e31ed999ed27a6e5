"""Transformer models as circuits (:func:`ctmhsa.simulate_model`): the rate level equals an
independent transcription of the block maths, the escape level spikes its way to the output
within its floors, streams, the model file and the CLI, and refusals before any network."""

import contextlib
import io
import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import ctmhsa
from ctmhsa.maths.inputs import InputRange
from ctmhsa.maths.model import Block, MLPWeights, Model
from ctmhsa.mapping.operating import OperatingRangeError
from ctmhsa.maths.stages import BLOCK_STAGES

pytestmark = pytest.mark.brian2

TOL = 1e-3   # relative to the largest entry


# ------------------------------------------------------------------------------------------
# the maths, transcribed from its statement (nothing from the package)
# ------------------------------------------------------------------------------------------

def _N(x):
    return x / np.abs(x).mean(axis=-1, keepdims=True)


def _elu1(z):
    return np.where(z > 0, z + 1.0, np.exp(np.minimum(z, 0.0)))


def forward(X, arrays, L, readout=True):
    """``H = X + MHSA(N(X))``, ``X = H + W2 relu(W1 N(H) + b1) + b2`` per block; logits
    ``R N(mean_i X_i) + c``. ``arrays``: the model file's keys."""
    for l in range(L):
        a = lambda k: arrays[f"blocks.{l}.{k}"]
        xn = _N(X)
        att = np.zeros_like(X)
        for h in range(a("attn.WQ").shape[0]):
            fq, fk = _elu1(xn @ a("attn.WQ")[h].T), _elu1(xn @ a("attn.WK")[h].T)
            A = fq @ fk.T
            A = A / A.sum(axis=1, keepdims=True)
            att += (A @ (xn @ a("attn.WV")[h].T)) @ a("attn.WO")[h].T
        H = X + att
        X = H + np.maximum(_N(H) @ a("mlp.W1").T + a("mlp.b1"), 0.0) @ a("mlp.W2").T + a("mlp.b2") \
            if f"blocks.{l}.mlp.W1" in arrays else H
    logits = _N(X.mean(axis=0)) @ arrays["readout.W"].T + arrays["readout.b"] if readout else None
    return X, logits


def random_arrays(seed, L=2, H=2, dk=3, dv=3, de=5, dh=6, classes=3, mlp=None, scale=1.0):
    """A model in the file layout (keys exactly as documented)."""
    g = np.random.default_rng(seed)
    s = scale / np.sqrt(de)
    out = {}
    for l in range(L):
        p = f"blocks.{l}."
        out[p + "attn.WQ"] = g.normal(0, s, (H, dk, de))
        out[p + "attn.WK"] = g.normal(0, s, (H, dk, de))
        out[p + "attn.WV"] = g.normal(0, s, (H, dv, de))
        out[p + "attn.WO"] = g.normal(0, scale / np.sqrt(H * dv), (H, de, dv))
        if mlp is None or l in mlp:
            out[p + "mlp.W1"] = g.normal(0, 1 / np.sqrt(de), (dh, de))
            out[p + "mlp.b1"] = g.normal(0, 0.3, dh)
            out[p + "mlp.W2"] = g.normal(0, 1 / np.sqrt(dh), (de, dh))
            out[p + "mlp.b2"] = g.normal(0, 0.3, de)
    if classes:
        out["readout.W"] = g.normal(0, 1 / np.sqrt(de), (classes, de))
        out["readout.b"] = g.normal(0, 0.3, classes)
    return out


def assert_close(got, want, what):
    tol = TOL * float(np.abs(want).max())
    err = float(np.abs(np.asarray(got) - want).max())
    assert err <= tol, f"{what}: max |error| {err:.3g} > {tol:.3g}"


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("model") / "two_blocks.npz"
    arrays = random_arrays(7)
    np.savez(path, **arrays)
    return str(path), arrays


# the rate level's largest step (max_dt, 10 ms cells over 2): its fixed point, which these tests
# compare, is the ODE's at any stable step (measured: the same error to 1e-14 at 2 ms); the
# default step runs in rate_run
RATE_DT = 5e-3


# ------------------------------------------------------------------------------------------
# rate level: exact
# ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def rate_run(model_file, tmp_path_factory):
    """The model file at the rate level (default step and duration), run once through the CLI
    (``run --model FILE --n 4``): the tokens and the result are caught on their way through
    simulate_model, so the maths test and the CLI test read the same run."""
    from ctmhsa.sims import model as sims_model
    from ctmhsa.sims.cli import main

    path, _ = model_file
    real, caught = sims_model.simulate_model, {}

    def spy(model, X, **kw):
        caught.update(model=model, X=X, res=real(model, X, **kw))
        return caught["res"]

    out, text = tmp_path_factory.mktemp("cli") / "res", io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(text):
        mp.setattr(sims_model, "simulate_model", spy)
        rc = main(["run", "--model", path, "--neuron", "rate", "--out", str(out), "--n", "4"])
    return dict(caught, rc=rc, text=text.getvalue(), out=out)


def test_two_block_file_at_the_rate_level_equals_the_maths(model_file, rate_run):
    path, arrays = model_file
    assert repr(ctmhsa.load_model(path)) == repr(rate_run["model"])
    X, res = rate_run["X"], rate_run["res"]
    assert X.shape == (4, 5)
    want, logits = forward(X, arrays, 2)
    assert_close(res.output, want, "output")
    assert_close(res.logits, logits, "logits")
    assert_close(res.reference, want, "reference")
    for l in range(2):          # every stage of every block, from its own cells
        for k in BLOCK_STAGES:
            if k in res.blocks[l] and k in res.reference_blocks[l]:
                assert_close(res.blocks[l][k], res.reference_blocks[l][k], f"block {l} {k}")
    assert res.diagnostics["settled"] < 1e-4
    assert res.counts["total"] == res.config["n_neurons"] > 0


RANDOM_MODELS = dict(seed=st.integers(0, 2**16), L=st.integers(1, 3), H=st.integers(1, 2), dk=st.integers(1, 3),
                     dv=st.integers(1, 3), de=st.integers(2, 4), dh=st.integers(1, 4), n=st.integers(1, 3),
                     scale=st.sampled_from([0.05, 0.3, 1.0, 3.0]), classes=st.integers(0, 2),
                     mlp=st.sets(st.integers(0, 2)))


def _random_model_equals_the_maths(seed, L, H, dk, dv, de, dh, n, scale, classes, mlp):
    arrays = random_arrays(seed, L, H, dk, dv, de, dh, classes, mlp={m for m in mlp if m < L}, scale=scale)
    model = Model.from_state_dict(arrays)
    X = np.random.default_rng(seed + 1).normal(size=(n, de))
    try:
        res = ctmhsa.simulate_model(model, X, neuron="rate", duration=0.7 * L,   # settles within 1e-5 of its output
                                    dt=RATE_DT)
    except OperatingRangeError as exc:   # a refusal names the block: never a silent wrong answer
        assert "block" in str(exc)
        return
    want, logits = forward(X, arrays, L, readout=bool(classes))
    assert_close(res.output, want, "output")
    if classes:
        assert_close(res.logits, logits, "logits")
    else:
        assert res.logits is None and res.reference_logits is None


# the default suite: a fixed draw of three (one to three blocks, MLPs, a readout; four took 19.5 s
# at load 1, against 14-72 s for five fresh draws); fresh draws, many more, under `long`
@settings(max_examples=3, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**RANDOM_MODELS)
def test_rate_level_equals_the_maths_on_random_models(seed, L, H, dk, dv, de, dh, n, scale, classes, mlp):
    _random_model_equals_the_maths(seed, L, H, dk, dv, de, dh, n, scale, classes, mlp)


@pytest.mark.long
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**RANDOM_MODELS)
def test_rate_level_equals_the_maths_on_many_fresh_random_models(seed, L, H, dk, dv, de, dh, n, scale, classes,
                                                                 mlp):
    _random_model_equals_the_maths(seed, L, H, dk, dv, de, dh, n, scale, classes, mlp)


def test_hidden_gain_keeps_a_nearly_dead_mlps_active_cells_in_range():
    # one hidden unit of six active: a mean of 8 Hz over all would put its 99th percentile on the
    # calibration set at about 200 Hz; the gain is capped so that it fires HIDDEN_PEAK_RATE
    from ctmhsa.circuits.transformer import model_circuit
    from ctmhsa.mapping.blocks import HIDDEN_MEAN_RATE, HIDDEN_PEAK_RATE, drawn_tokens, encode_model, model_sizes

    arrays = random_arrays(5, L=1, classes=0)
    arrays["blocks.0.mlp.b1"][1:] = -50.0
    model = Model.from_state_dict(arrays)
    rng = InputRange(norm=5.0, std=1.0)
    X = np.random.default_rng(0).normal(size=(3, 5))
    enc = encode_model(model_circuit(3, 5, model_sizes(model), P=1), model, X, input_range=rng)
    rho = enc.values.params["b0_hidden"]["rho"]
    hidden = ctmhsa.transformer_forward(drawn_tokens(rng, 5, 3), model, stages=True)["blocks"][0]["hidden"]
    assert np.all(hidden[..., 1:] == 0) and np.any(hidden[..., 0] > 0)
    assert rho * np.quantile(hidden[hidden > 0], 0.99) == pytest.approx(HIDDEN_PEAK_RATE, rel=1e-9)
    assert rho * hidden.mean() < HIDDEN_MEAN_RATE


def test_stream_at_the_rate_level_equals_each_set():
    arrays = random_arrays(3, L=1, classes=0)
    model = Model.from_state_dict(arrays)
    X = np.random.default_rng(2).normal(size=(3, 4, 5))
    res = ctmhsa.simulate_model(model, X, neuron="rate", presentation=1.0, dt=RATE_DT)
    assert res.output.shape == (3, 4, 5)
    for t in range(3):
        assert_close(res.output[t], forward(X[t], arrays, 1, readout=False)[0], f"presentation {t}")
    assert len(res.metrics["presentations"]) == 3


# ------------------------------------------------------------------------------------------
# escape level: spikes
# ------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def escape_run(model_file):
    path, arrays = model_file
    X = np.random.default_rng(1).normal(size=(4, 5))
    # a 1 s window, within the 2 s the docs measure: r 0.967 and the output at 1.36x its floor
    # (2 s: 0.992 and 0.99x; seeds 4, 5 at 1 s: r 0.996, 0.976), in 1.5 s simulated instead of 2.5
    return ctmhsa.simulate_model(path, X, neuron="escape", duration=1.0, seed=3), X, arrays


def test_escape_two_blocks_output_within_2_s(escape_run):
    res, X, arrays = escape_run
    want, logits = forward(X, arrays, 2)
    r = np.corrcoef(res.output.ravel(), want.ravel())[0, 1]
    assert r >= 0.95, f"output r = {r:.3f}"
    assert res.metrics["output"]["r"] >= 0.95
    # every block reports every stage against its floor, and none is far above it
    for l, st in enumerate(res.metrics["blocks"]):
        assert {"x", "x_norm", "q", "k", "v", "s", "kappa", "y", "v_tilde", "h", "h_norm", "hidden", "out"} <= set(st)
        for k, m in st.items():
            if k != "Z":    # the normaliser is decoded through the division: no floor model
                assert m["nrmse"] <= 3.0 * m["floor"], f"block {l} {k}: {m['nrmse']:.3f} vs floor {m['floor']:.3f}"
    assert res.metrics["output"]["nrmse"] <= 2.0 * res.metrics["output"]["floor"]
    sat = {p: v for p, v in res.diagnostics["range"].items() if v.get("saturated") or v.get("silent_interneurons")}
    assert not sat, sat


@pytest.mark.long   # 16-19 s; determinism of one pathway stays in test_spiking_circuit
def test_escape_same_seed_same_spikes(model_file):
    path, _ = model_file
    X = np.random.default_rng(1).normal(size=(4, 5))
    a, b = (ctmhsa.simulate_model(path, X, neuron="escape", duration=0.1, warmup=0.1, seed=5,
                                  record_spikes=("b1_out",)) for _ in range(2))
    ia, ta = a.spikes["b1_out"]
    ib, tb = b.spikes["b1_out"]
    assert len(ia) > 0 and np.array_equal(ia, ib) and np.array_equal(ta, tb)


def test_result_saved_atomically_and_never_over_a_users_folder(escape_run, tmp_path):
    res, _, _ = escape_run
    out = res.save(tmp_path / "run")
    with np.load(os.path.join(out, "stages.npz")) as f:
        assert "blocks.1.hidden" in f.files and "reference.blocks.0.q" in f.files
    assert json.load(open(os.path.join(out, "metrics.json")))["output"]["r"] > 0.9
    back = ctmhsa.ModelResult.load(out)
    assert np.array_equal(back.output, res.output) and np.array_equal(back.blocks[1]["hidden"], res.blocks[1]["hidden"])
    assert back.metrics["output"]["r"] == pytest.approx(res.metrics["output"]["r"])
    # the rate table: every population, its cell type (TRN pools are interneurons), kept on disk
    table = {r["population"]: r for r in res.rate_table()}
    assert table["b0_trn_q"]["cell_type"] == "interneuron" and table["b1_hidden"]["cell_type"] == "l6ct"
    assert [r["mean"] for r in back.rate_table()] == pytest.approx([r["mean"] for r in res.rate_table()])
    from pynwb import NWBHDF5IO
    with NWBHDF5IO(os.path.join(out, "spikes.nwb"), "r") as io:
        units = io.read().units.to_dataframe()
    assert len(units) == res.counts["total"] and set(units.population) >= {"b1_hidden", "classes", "b0_trn_q"}
    res.save(out)          # its own results directory: replaced
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep")
    with pytest.raises(ValueError, match="mine"):
        res.save(user)
    assert (user / "notes.txt").read_text() == "keep"


# ------------------------------------------------------------------------------------------
# refusals, before any network
# ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("kw, match", [
    (dict(causal=True), "causal"),
    (dict(circuit="linear"), "circuit"),
    (dict(device="cuda_standalone"), "device"),
    (dict(P={"l23": 2}), "P"),
    (dict(neuron="lif2"), "neuron: expected one of"),
])
def test_options_that_do_not_apply_are_refused(kw, match):
    model = Model.from_state_dict(random_arrays(1, L=1, classes=0))
    with pytest.raises(ValueError, match=match):
        ctmhsa.simulate_model(model, np.ones((2, 5)), **kw)


def test_bad_model_and_tokens_are_refused():
    model = Model.from_state_dict(random_arrays(1, L=1, classes=0))
    with pytest.raises(ValueError, match="max_runtime"):
        ctmhsa.simulate_model(model, np.ones((2, 5)), duration=1e4, max_runtime=10)
    with pytest.raises(TypeError, match="model"):
        ctmhsa.simulate_model({"blocks.0.attn.WQ": 1}, np.ones((2, 5)))
    with pytest.raises(ValueError, match="de=5"):
        ctmhsa.simulate_model(model, np.ones((2, 4)))
    with pytest.raises(ValueError, match="mean \\|x\\| = 0"):
        ctmhsa.simulate_model(model, np.zeros((2, 5)))


def test_tokens_outside_the_declared_range_are_refused():
    model = Model.from_state_dict(random_arrays(1, L=1, classes=0))
    X = np.random.default_rng(0).normal(size=(3, 5))
    with pytest.raises(ValueError, match="declared input range"):
        ctmhsa.simulate_model(model, 10 * X, neuron="rate", input_range=InputRange(norm=5.0, std=1.0))
    # a token far smaller than the range: its normalisation needs a division the TRN cannot exert
    small = X.copy()
    small[1] *= 1e-4
    with pytest.raises(OperatingRangeError, match="TRN"):
        ctmhsa.simulate_model(model, small, neuron="rate", input_range=InputRange(norm=5.0, std=1.0))


def test_tokens_spread_beyond_the_attentions_division_range_are_normalised_by_the_trn():
    # a token 9x below the calibration's typical mean |x| needs a division 9x below the centre of
    # its TRN pool's range: inside 1 + g_trn r (2.4-271, 10.6x either side of the centre) but not
    # inside the attention interneurons' 1 + g_sh r (1.42-82, 7.6x): the TRN's own shunt widens it
    from ctmhsa.maths.codes import CodeGains, default_gains
    from ctmhsa.mapping.blocks import calibrate
    from ctmhsa.mapping.operating import division_bounds, trn_division_bounds

    g = CodeGains()
    lo, hi = trn_division_bounds(g)
    assert (lo, hi) == pytest.approx((1 + g.g_trn * g.r_trn_min, 1 + g.g_trn * g.r_inh_max))
    assert hi / lo > 100 > np.divide(*division_bounds(g)[::-1])
    # the same at the lif level, whose relays are escape cells (its r_inh_min is L2/3's)
    assert trn_division_bounds(default_gains("lif")) == pytest.approx((lo, hi))
    with pytest.raises(ValueError, match="r_trn_min"):
        CodeGains(r_trn_min=200.0)
    arrays = random_arrays(1, L=1, classes=0)
    model = Model.from_state_dict(arrays)
    rng = InputRange(norm=5.0, std=1.0)
    X = np.random.default_rng(0).normal(size=(3, 5))
    typical = calibrate(model, rng, 3)["blocks"][0]["x_mean_abs"]
    X[1] *= typical / 9 / np.abs(X[1]).mean()
    res = ctmhsa.simulate_model(model, X, neuron="rate", input_range=rng, dt=RATE_DT)
    assert_close(res.output, forward(X, arrays, 1, readout=False)[0], "output")
    with pytest.raises(OperatingRangeError, match="TRN"):
        ctmhsa.simulate_model(model, X, neuron="rate", input_range=rng, gains=CodeGains(g_trn=0.6))


def test_block_with_attention_biases_is_refused():
    arrays = random_arrays(1, L=1, classes=0)
    arrays["blocks.0.attn.bq"] = np.ones((2, 3))
    with pytest.raises(ValueError, match="bq"):
        ctmhsa.simulate_model(Model.from_state_dict(arrays), np.ones((2, 5)), neuron="rate")


def test_cli_runs_a_model_file(rate_run):
    out, text = rate_run["out"], rate_run["text"]
    assert rate_run["rc"] == 0
    assert "output" in text and "x'" in text
    assert json.load(open(out / "metrics.json"))["output"]["max_rel_error"] < TOL


@pytest.mark.codegen_independent
def test_a_stream_counts_what_it_keeps_against_max_memory(monkeypatch):
    """A stream's window values grow with it until its run ends: ``max_memory`` counts them, so a
    stream too long for the limit is refused before anything is built (one image of the
    digits circuit at the lif level, 32 copies: 27.0 MB estimated on the compiled device, about
    29 MB measured), naming the limit and the stream."""
    from test_model_standalone import _model
    from ctmhsa.circuits.fold import fold_plan, simulated_synapse_count
    from ctmhsa.circuits.memory import estimate_memory, stream_memory
    from ctmhsa.sims.model import prepare_model_run
    from ctmhsa.sims.options import N_CHUNKS

    model, X = _model(), np.random.default_rng(0).normal(size=(21, 2, 3))
    circuit = prepare_model_run(model, X[:1], "escape", 0.2, None, None, dict(P=3)).circuit
    plan = fold_plan(circuit, "escape")
    one = stream_memory(circuit, "escape", plan, 1, N_CHUNKS, compiled=False)
    assert one > 0 and stream_memory(circuit, "escape", plan, 7, N_CHUNKS, compiled=False) == 7 * one
    assert stream_memory(circuit, "escape", plan, 1, N_CHUNKS, compiled=True) < one   # no chunk counts kept
    assert one < stream_memory(circuit, "escape", {}, 1, N_CHUNKS, compiled=False)    # folded means per class
    assert stream_memory(circuit, "escape", plan, 0, N_CHUNKS, compiled=False) == 0
    limit = estimate_memory(circuit, simulated_synapse_count(circuit, plan)) + 20.5 * one
    prepare_model_run(model, X[:20], "escape", 0.2, None, None, dict(P=3, max_memory=limit))   # fits
    monkeypatch.setattr("ctmhsa.sims.runners.instantiate", None)   # nothing is built before the refusal
    with pytest.raises(ValueError, match=r"^max_memory: .* and a stream of 21 presentations keeps .* a shorter stream"):
        prepare_model_run(model, X, "escape", 0.2, None, None, dict(P=3, max_memory=limit))
