"""NWB export of a spiking run (read back with pynwb), progress bars and trained weights from the
command line."""

import json
import os
import subprocess

import numpy as np
import pytest

from ctmhsa.sims import load, simulate_mhsa
from ctmhsa.sims.config import problem_inputs

pynwb = pytest.importorskip("pynwb")


@pytest.fixture(scope="module")
def tiny_run():
    x = problem_inputs(n=3, H=2, dk=2, dv=2, de=3)
    return x, simulate_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], neuron="escape", duration=0.3,
                            warmup=0.1, codegen="numpy", record_spikes=True, seed=3)


@pytest.mark.brian2
@pytest.mark.smoke
def test_spiking_run_writes_nwb_that_pynwb_reads_back(tiny_run, tmp_path):
    from ctmhsa.sims.io import write_result
    from ctmhsa.sims.nwb import AXIS_DESCRIPTIONS, circuit_of

    _, res = tiny_run
    path = write_result(res, str(tmp_path / "run"))
    circ = circuit_of(res.config)
    with pynwb.NWBHDF5IO(os.path.join(path, "spikes.nwb"), "r") as io:
        f = io.read()
        units = f.units.to_dataframe()
        epochs = f.epochs.to_dataframe()
    assert len(units) == res.counts["neurons"] == sum(p.N for p in circ.populations.values())
    assert set(units.population) == set(circ.populations)
    assert list(epochs.tags) == [["warmup"], ["window"]]
    np.testing.assert_allclose(epochs[["start_time", "stop_time"]].to_numpy(), [[0, 0.1], [0.1, 0.4]])
    n_spikes = 0
    for name, pop in circ.populations.items():
        u = units[units.population == name]
        assert list(u.cell) == list(range(pop.N))
        assert set(u.role) == {pop.role} and pop.role     # what it carries (ctmhsa.circuits.roles)
        for a in AXIS_DESCRIPTIONS:
            if a in pop.axes:              # labelled by the population's own index axes
                np.testing.assert_array_equal(u[a].to_numpy(), pop.axis(a))
            elif a in units.columns:
                assert (u[a] == -1).all()
        np.testing.assert_allclose(u.rate.to_numpy(), res.rates[name][tuple(pop.index.T)])
        i, t = res.spikes[name]
        for cell in np.unique(i)[:5]:
            np.testing.assert_allclose(u.spike_times.iloc[cell], np.sort(t[i == cell]))
        n_spikes += sum(len(s) for s in u.spike_times)
        assert u.recorded.all()
    assert n_spikes == sum(len(i) for i, _ in res.spikes.values()) > 0
    # the head and query axes pick one macrocolumn's L2/3 cells
    l23 = units[(units.population == "l23") & (units["head"] == 1) & (units["i"] == 2)]
    assert len(l23) == 3 * 2 and set(l23.j) == {0, 1, 2}
    # ctmhsa.sims.load is unchanged: the same result comes back, spikes included
    back = load(path)
    for name, (i, t) in res.spikes.items():
        np.testing.assert_array_equal(back.spikes[name][0], i)
        np.testing.assert_array_equal(back.spikes[name][1], t)
    assert back.metrics() == res.metrics()


@pytest.mark.brian2
def test_nwb_without_recorded_spikes_still_lists_units_and_rates(tiny_run, tmp_path):
    from ctmhsa.sims.nwb import write_nwb

    _, res = tiny_run
    res2 = type(res)(**{**res.__dict__, "spikes": {"l5pt": res.spikes["l5pt"]}})
    write_nwb(res2, str(tmp_path / "s.nwb"))
    with pynwb.NWBHDF5IO(str(tmp_path / "s.nwb"), "r") as io:
        units = io.read().units.to_dataframe()
    assert units[units.population == "l5pt"].recorded.all()
    other = units[units.population != "l5pt"]
    assert not other.recorded.any() and all(len(s) == 0 for s in other.spike_times)
    assert np.isfinite(other.rate).all() and other.rate.max() > 0


@pytest.mark.brian2
def test_progress_bar_changes_no_spike(tiny_run):
    x, res = tiny_run
    again = simulate_mhsa(x["X"], x["WQ"], x["WK"], x["WV"], x["WO"], neuron="escape", duration=0.3,
                          warmup=0.1, codegen="numpy", record_spikes=True, seed=3, report="progress")
    for name, (i, t) in res.spikes.items():
        np.testing.assert_array_equal(again.spikes[name][0], i)
        np.testing.assert_array_equal(again.spikes[name][1], t)


def _spy(bar) -> list:
    """The times a progress bar is moved to, recorded as it moves."""
    seen, orig = [], bar.update_to
    bar.update_to = lambda t: (seen.append(t), orig(t))
    return seen


@pytest.mark.brian2
def test_run_progress_is_a_brian2_report_over_biological_time():
    import brian2 as b2

    from ctmhsa.sims.progress import RunProgress

    bar = RunProgress(0.05, "test")
    seen = _spy(bar)
    g = b2.NeuronGroup(1, "dv/dt = -v/(10*ms) : 1")
    net = b2.Network(g)
    net.run(20 * b2.ms, report=bar, namespace={})       # warm-up, then the window: one bar
    net.run(30 * b2.ms, report=bar, namespace={})
    bar.close()
    assert seen[0] == pytest.approx(0.0) and seen[-1] == pytest.approx(0.05)
    assert pytest.approx(0.02) in seen and bar.t == pytest.approx(0.05)
    with pytest.raises(ValueError, match="report: expected None, one of"):
        from ctmhsa.sims import RunOptions

        RunOptions(report="bar")


@pytest.mark.codegen_independent
def test_binary_progress_reads_brian2s_text_report():
    from ctmhsa.sims.progress import RunProgress, binary_progress

    bar = RunProgress(1.5, "binary")
    seen = _spy(bar)
    script = ("echo 'g++ -c objects.cpp'; echo 'Starting simulation at t=0.5 s for duration 1 s'; "
              "echo '0.25 s (25%) simulated in 1s, estimated 3s remaining.'; echo '1 s (100%) simulated in 4s'")
    with binary_progress(bar):
        subprocess.call(["sh", "-c", script])      # a child writing to file descriptor 1, as the binary does
    bar.close()
    assert seen == [0.5, 0.75, 1.5]


@pytest.mark.brian2
def test_cli_runs_a_trained_layer_from_a_safetensors_file(tmp_path, capsys):
    import tomllib

    st = pytest.importorskip("safetensors.numpy")
    from ctmhsa.sims.cli import main

    rng = np.random.default_rng(0)
    E = 6                                    # 3 heads of 2 features
    sd = {}
    for L in range(2):
        p = f"encoder.layer.{L}.attention."
        for name in ("self.query", "self.key", "self.value", "output.dense"):
            sd[f"{p}{name}.weight"] = (rng.normal(size=(E, E)) / np.sqrt(E)).astype(np.float32)
            sd[f"{p}{name}.bias"] = (0.1 * rng.normal(size=E)).astype(np.float32)
    st.save_file(sd, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"num_attention_heads": 3}))
    np.savez(tmp_path / "tokens.npz", X=rng.normal(size=(3, E)))
    out = tmp_path / "o"
    argv = ["run", "--weights", str(tmp_path / "model.safetensors"), "--layer", "1", "--heads", "2", "0",
            "--tokens", str(tmp_path / "tokens.npz"), "--neuron", "rate", "--duration", "1", "--out", str(out),
            "--no-summary", "--quiet"]
    assert main(argv) == 0
    saved = tomllib.loads((out / "config.toml").read_text())["problem"]
    assert saved["weights"] == str(tmp_path / "model.safetensors") and saved["layer"] == 1
    assert saved["heads"] == [2, 0]
    # two heads of dk = dv = 2; the biases folded in as a constant seventh coordinate
    assert {k: saved[k] for k in ("n", "H", "dk", "dv", "de")} == dict(n=3, H=2, dk=2, dv=2, de=E + 1)
    res = load(str(out))
    assert res.metrics()["x_tilde"]["max_rel_error"] < 1e-3
    # head 2 comes first: its queries are rows 4, 5 of the layer's query projection, bias folded in
    w = sd["encoder.layer.1.attention.self.query.weight"].astype(float)
    b = sd["encoder.layer.1.attention.self.query.bias"].astype(float)
    X = np.load(tmp_path / "tokens.npz")["X"]
    np.testing.assert_allclose(res.reference_stages["q"][0], X @ w[4:6].T + b[4:6], rtol=1e-12)
    # a missing number of heads is a clear error before anything is built
    os.remove(tmp_path / "config.json")
    assert main(argv) == 2
    assert "n_heads: a state dict does not record the number of heads" in capsys.readouterr().err
