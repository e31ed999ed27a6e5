"""Transformer models on cpp_standalone: one compiled project per model shape, the tokens (the
input relays' rates, or a stream's rate table) run arguments; decoded as on the runtime device."""

import os
import warnings

import numpy as np
import pytest

import ctmhsa
from ctmhsa.maths.model import Model
from ctmhsa.neurons.backend import cache_dir
from ctmhsa.sims import options as sims_options
from ctmhsa.sims.options import check_applies

# one block, one head: the smallest model with every stage (MLP, read-out)
KW = dict(neuron="escape", warmup=0.25, seed=3, P=2, record_spikes=("classes",))


def _model():
    """One block of one head (dk = dv = 2, de = 3), an MLP of 3 hidden units and 2 classes, in the
    model file's layout (as tests/sims/test_transformer_model.py's ``random_arrays(1, L=1, H=1,
    dk=2, dv=2, de=3, dh=3, classes=2)``)."""
    g, de, dh = np.random.default_rng(1), 3, 3
    s = 1 / np.sqrt(de)
    shapes = {"attn.WQ": ((1, 2, de), s), "attn.WK": ((1, 2, de), s), "attn.WV": ((1, 2, de), s),
              "attn.WO": ((1, de, 2), 1 / np.sqrt(2)), "mlp.W1": ((dh, de), s), "mlp.b1": ((dh,), 0.3),
              "mlp.W2": ((de, dh), 1 / np.sqrt(dh)), "mlp.b2": ((de,), 0.3)}
    arrays = {f"blocks.0.{k}": g.normal(0, sd, shape) for k, (shape, sd) in shapes.items()}
    arrays.update({"readout.W": g.normal(0, s, (2, de)), "readout.b": g.normal(0, 0.3, 2)})
    return Model.from_state_dict(arrays)


def _tokens(seed, shape=(2, 3)):
    return np.random.default_rng(seed).normal(size=shape)


def _projects() -> dict:
    """Compiled standalone projects of this cache: key -> the binary's modification time (ns)."""
    root = os.path.join(cache_dir(), "standalone")
    return {p: os.stat(os.path.join(root, p, "main")).st_mtime_ns for p in os.listdir(root)
            if os.path.isfile(os.path.join(root, p, "main"))} if os.path.isdir(root) else {}


def _same_structure(sa, rt):
    assert sa.output.shape == rt.output.shape and sa.logits.shape == rt.logits.shape
    assert [sorted(b) for b in sa.blocks] == [sorted(b) for b in rt.blocks]
    assert [{k: np.shape(v) for k, v in b.items()} for b in sa.blocks] == \
        [{k: np.shape(v) for k, v in b.items()} for b in rt.blocks]
    assert sa.metrics.keys() == rt.metrics.keys() and sa.rates.keys() == rt.rates.keys()
    assert sa.spikes.keys() == rt.spikes.keys()
    assert sa.config["device"] == "cpp_standalone" and rt.config["device"] == "runtime"


@pytest.mark.codegen_independent
def test_a_model_runs_on_the_devices_that_read_it_after_the_run(monkeypatch):
    """device and threads apply to a model; a device that does not run one (cuda_standalone,
    whose binary is not read back per presentation) is refused before anything is built."""
    check_applies("model", dict(device="cpp_standalone", threads=2))
    monkeypatch.setattr(sims_options, "check_device", lambda name: None)   # (brian2cuda need not be installed)
    with pytest.raises(ValueError, match=r"^device: a model runs on 'runtime' or 'cpp_standalone', got "
                                         r"'cuda_standalone'"):
        ctmhsa.simulate_model(_model(), _tokens(0), device="cuda_standalone", **KW)


@pytest.fixture(scope="module")
def first():
    """One token set on cpp_standalone (compiles the model's project once: ~1-6 min)."""
    X = _tokens(0)
    return X, ctmhsa.simulate_model(_model(), X, device="cpp_standalone", duration=0.3, **KW)


@pytest.mark.long
@pytest.mark.standalone
def test_a_compiled_model_spikes_as_the_runtime_model(first):
    X, sa = first
    rt = ctmhsa.simulate_model(_model(), X, duration=0.3, codegen="numpy", **KW)
    _same_structure(sa, rt)
    # the same seed draws the same numbers on both devices here: the same spikes; a spike changed
    # (compiler, machine) leaves the output within its noise floor
    (_, t_sa), (_, t_rt) = sa.spikes["classes"], rt.spikes["classes"]
    assert abs(len(t_sa) - len(t_rt)) <= 0.2 * len(t_rt) and t_sa.max() < 0.25 + 0.3
    floor = rt.metrics["output"]["floor"]
    assert np.abs(sa.output - rt.output).max() <= 4 * floor * np.abs(rt.reference).max() + 1e-12
    assert sa.metrics["output"]["r"] > 0.9 and abs(sa.metrics["output"]["r"] - rt.metrics["output"]["r"]) < 0.05


@pytest.mark.long
@pytest.mark.standalone
def test_one_project_runs_other_tokens_and_durations(first):
    X, sa = first
    before = _projects()
    res = ctmhsa.simulate_model(_model(), _tokens(1), device="cpp_standalone", duration=0.4, **KW)
    assert _projects() == before   # no new project, none linked again
    assert res.config["duration"] == 0.4 and not np.allclose(res.output, sa.output)
    assert res.metrics["output"]["r"] > 0.9
    again = ctmhsa.simulate_model(_model(), X, device="cpp_standalone", duration=0.3, **KW)
    np.testing.assert_array_equal(again.output, sa.output)   # the same seed: the same spikes
    np.testing.assert_array_equal(again.spikes["classes"][1], sa.spikes["classes"][1])


@pytest.mark.long
@pytest.mark.standalone
def test_a_compiled_model_stream_reads_as_the_runtime_stream():
    X = _tokens(2, (3, 2, 3))
    kw = dict(KW, presentation=0.2)
    sa = ctmhsa.simulate_model(_model(), X, device="cpp_standalone", **kw)
    rt = ctmhsa.simulate_model(_model(), X, codegen="numpy", **kw)
    _same_structure(sa, rt)
    assert sa.output.shape == X.shape and len(sa.metrics["presentations"]) == 3
    (_, t_sa), (_, t_rt) = sa.spikes["classes"], rt.spikes["classes"]
    assert t_sa.max() < 0.25 + 3 * 0.2 and abs(len(t_sa) - len(t_rt)) <= 0.2 * len(t_rt)
    # the stream's output follows the tokens (r 0.67-0.92 over spike seeds 1-6 of this two-copy
    # circuit; one presentation's r ranges 0.50-0.99), and each presentation reads as at runtime
    assert sa.metrics["output"]["r"] > 0.6
    for m_sa, m_rt in zip(sa.metrics["presentations"], rt.metrics["presentations"], strict=True):
        assert abs(m_sa["r"] - m_rt["r"]) < 0.1
    before = _projects()   # another stream of the same shape: the same project
    other = ctmhsa.simulate_model(_model(), _tokens(3, (4, 2, 3)), device="cpp_standalone", **kw)
    assert _projects() == before and other.output.shape == (4, 2, 3)


@pytest.mark.long
@pytest.mark.standalone
@pytest.mark.filterwarnings("ignore:duration:UserWarning")   # 0.3 s: not settled, on both devices alike
def test_a_compiled_rate_level_model_is_the_runtime_model():
    """The rate level is deterministic: the output and the settling check (the state at 90 % of
    the run, sampled by a monitor and read after it) as on the runtime device."""
    X = _tokens(0)
    kw = dict(neuron="rate", duration=0.3)
    sa, rt = (ctmhsa.simulate_model(_model(), X, device=d, **kw) for d in ("cpp_standalone", "runtime"))
    np.testing.assert_allclose(sa.output, rt.output, rtol=0, atol=1e-9 * np.abs(rt.output).max())
    np.testing.assert_allclose(sa.logits, rt.logits, rtol=0, atol=1e-9 * np.abs(rt.logits).max())
    np.testing.assert_allclose(sa.diagnostics["settled"], rt.diagnostics["settled"], rtol=1e-4)


@pytest.mark.brian2
def test_a_noise_dominated_model_run_warns():
    """A model's output read from a 0.1 s window with one copy per value is mostly count noise
    where its tokens differ little (1 + 0.1 N(0, 1): floor 1.35-1.85 of the output's spread over
    three spike seeds and two TRN shunts; with unit tokens it sat at 0.77-1.19, either side of
    the threshold); at 2 s it is not (0.38-0.40) and nothing warns."""
    from ctmhsa.mapping.noise import NoiseFloorWarning

    model, X = _model(), 1.0 + 0.1 * _tokens(4)
    kw = dict(neuron="escape", P=1, seed=1, codegen="numpy", calibration=np.stack([X, -X]))
    with pytest.warns(NoiseFloorWarning, match="model's output") as rec:
        ctmhsa.simulate_model(model, X, duration=0.1, **kw)
    # the warning points at the caller's line, not into the package
    assert [r.filename for r in rec if issubclass(r.category, NoiseFloorWarning)] == [__file__]
    with warnings.catch_warnings():
        warnings.simplefilter("error", NoiseFloorWarning)
        ctmhsa.simulate_model(model, X, duration=2.0, **kw)
