"""In-silico experiments (``ctmhsa experiment NAME``): the protocols' numbers at the rate level,
where they are exact, and the results directory at the escape level."""

import json
import os

import numpy as np
import pytest

from ctmhsa.sims.cli import main
from ctmhsa.sims.experiments import EXPERIMENTS, run_experiment
from ctmhsa.sims.io import OutputError

SMALL = dict(n=3, H=1, dk=3, dv=3, de=3)


def _rate(name, **kw):
    return run_experiment(name, neuron="rate", duration=0.4, problem=SMALL, codegen="numpy", **kw)


@pytest.mark.brian2
@pytest.mark.long   # 12 runs, 10-18 s
def test_photoinhibition_rate_level():
    doc = _rate("photoinhibition")
    assert len(doc["rows"]) == 12          # the time course needs spikes: skipped at the rate level
    s = doc["summary"]
    assert s["gain"]["control"]["l5it"] > 0
    assert s["gain_ratio"]["all L2/3 silenced"] == {"l5it": 0.0, "l5pt": 0.0}
    # the interneurons restore the pool with half of L2/3 silent, at a lower rate of their own
    assert abs(s["pooled_over_set_point"]["half of L2/3 silenced"] - 1) < 1e-3
    assert s["interneuron_rate"]["half of L2/3 silenced"] < 0.8 * s["interneuron_rate"]["control"]
    assert len(doc["predictions"]) == 2


@pytest.mark.brian2
@pytest.mark.long   # 19 s serial (rate level; the CLI test below runs a lesion at escape)
def test_interneuron_silencing_loses_normalisation():
    doc = _rate("interneurons")
    c, s = doc["summary"]["control"], doc["summary"]["interneurons silenced"]
    assert np.allclose(c["pooled_over_set_point"], 1, atol=1e-3)      # divided by the drive
    assert min(s["pooled_over_set_point"]) > 2                        # following it
    assert max(c["x_tilde_nrmse"]) < 1e-6 < 0.5 < min(s["x_tilde_nrmse"])
    assert all(d > 2 for d in doc["summary"]["division"])


@pytest.mark.brian2
@pytest.mark.long   # 12 s serial
def test_cutting_it_pt_scales_the_output_and_nothing_upstream():
    doc = _rate("it_pt")
    g = doc["summary"]["gain"]
    assert abs(g["v_tilde"][0] - 1) < 1e-6 and g["v_tilde"][-1] == 0 and g["x_tilde"][-1] == 0
    assert doc["summary"]["upstream_change"] == {"l23": 0.0, "l5it": 0.0}
    rows = [r for r in doc["rows"] if r["value"] in (0.0, 1.0)]
    assert rows[0]["rates"]["l5pt"] > 0 == rows[1]["rates"]["l5pt"]


@pytest.mark.brian2
@pytest.mark.long   # 15 runs, 12-25 s
def test_apical_drive_scales_the_slope_linearly():
    s = _rate("apical")["summary"]
    r = s["slope_ratio"]
    assert r[0] == 1 and r[1] > 1.1 and r[2] > r[1]
    # a product: the slope grows in proportion to the apical input
    assert abs((r[2] - 1) - 2 * (r[1] - 1)) < 1e-3 * (r[2] - 1)


@pytest.mark.brian2
def test_experiment_command_writes_json_nwb_and_figure(tmp_path, capsys):
    out = tmp_path / "cut"
    rc = main(["experiment", "it_pt", "--n", "2", "--H", "1", "--d", "2", "--duration", "0.2", "--warmup", "0.1",
               "--codegen", "numpy", "--out", str(out)])
    assert rc == 0
    files = set(os.listdir(out))
    assert {"experiment.json", "it_pt.png", "run00.nwb", "run04.nwb"} <= files
    doc = json.load(open(out / "experiment.json"))
    assert doc["experiment"] == "it_pt" and doc["neuron"] == "escape" and len(doc["rows"]) == 5
    assert "1 - f" in capsys.readouterr().out
    from pynwb import NWBHDF5IO

    with NWBHDF5IO(str(out / "run02.nwb"), "r") as io:
        epochs = io.read().epochs.to_dataframe()
    assert ["cut", "it_pt"] in [list(t) for t in epochs["tags"]]


@pytest.mark.codegen_independent
@pytest.mark.parametrize("kw, match", [
    (dict(name="nope"), "unknown 'nope'"), (dict(neuron="hh"), "neuron"), (dict(problem={"q": 1}), "unknown keys"),
    (dict(duration=0.01), "duration"), (dict(neuron="rate", warmup=0.2), "warmup"), (dict(seed=-1), "seed")])
def test_bad_arguments_are_refused_before_running(kw, match):
    name = kw.pop("name", "it_pt")
    with pytest.raises(ValueError, match=match):
        run_experiment(name, **kw)


@pytest.mark.codegen_independent
def test_a_users_file_is_never_replaced(tmp_path):
    mine = tmp_path / "notes.txt"
    mine.write_text("mine")
    with pytest.raises(OutputError):
        run_experiment("it_pt", out=str(mine), neuron="rate", problem=SMALL)
    assert mine.read_text() == "mine"


@pytest.mark.codegen_independent
def test_every_experiment_is_registered_with_its_protocol():
    from ctmhsa.sims.experiments import experiment

    for name in EXPERIMENTS:
        mod = experiment(name)
        assert mod.NAME == name and mod.SOURCE and mod.PROTOCOL and len(mod.SWEEP) == 2


@pytest.mark.brian2
def test_fingerprints_put_each_measure_beside_its_published_value():
    """Five runs at the rate level (exact): every cell type's rate against its published range,
    spikes per 0.2 s stimulus, the L2/3-silencing ratio and the apical gain, each verdict the one
    its numbers give; ISI CV undecided without spikes."""
    from ctmhsa.sims.experiments.fingerprints import RATES

    doc = _rate("fingerprints")
    rows = {r["condition"] + f" {r['value']:g}": r for r in doc["rows"]}
    assert len(doc["rows"]) == 5 and "rate_table" in rows["control 0"]
    table = {r["measure"]: r for r in doc["summary"]["table"]}
    control = rows["control 0"]["rates"]
    for cell_type, ((lo, hi), _) in RATES.items():
        if cell_type in control:
            r = table[f"{cell_type}: mean rate (Hz)"]
            assert r["circuit"] == pytest.approx(control[cell_type])
            assert r["agrees"] == (lo * (1 - 1e-9) <= r["circuit"] <= hi * (1 + 1e-9))
    stim = table["l5pt: spikes per cell in a 0.2 s stimulus (all spikes)"]
    assert stim["circuit"] == pytest.approx(0.2 * control["l5pt"]) and stim["agrees"] == (stim["circuit"] <= 1)
    assert table["l23: ISI CV"]["circuit"] is None and table["l23: ISI CV"]["agrees"] is None
    silenced = table["l5it: rate with every L2/3 cell silenced / control"]
    assert silenced["circuit"] == 0.0 and silenced["agrees"] is False      # abolished: the model's L5 needs L2/3
    gain = table["l5it: input-output slope with +50 Hz apical drive / without"]
    assert gain["circuit"] > 1.1 and gain["agrees"] is True
    assert doc["predictions"][0].startswith(f"{sum(r['agrees'] is True for r in table.values())} of {len(table)}")


@pytest.mark.codegen_independent
def test_fingerprints_count_the_lif_somata_evoked_spikes_above_their_baseline():
    """At the lif level the pyramidal somata fire a spontaneous baseline (1 Hz): a stimulus's
    evoked spikes are those above it, decided either way, as at the other levels (version 0.14
    left them undecided under a 20 Hz baseline)."""
    from ctmhsa.neurons.params import lif_soma
    from ctmhsa.sims.experiments.fingerprints import summarise

    def table(l5it):
        rates = dict(l23=4.5, l5it=l5it, l5pt=6.0, interneuron=28.0)
        return [dict(cell_type=ct, population=ct, mean=r, cells=1000, isi_cv=0.6) for ct, r in rates.items()], rates

    for level, l5it, base in (("lif", 5.5, lif_soma("l5it").r_base), ("lif", 8.0, lif_soma("l5it").r_base),
                              ("escape", 5.5, 0.0)):
        rt, rates = table(l5it)
        rows = [dict(condition="control", value=0.0, rate_table=rt, rates=rates),
                dict(condition="L2/3 silenced", value=0.0, rates=dict(rates, l5it=0.5, l5pt=1.0)),
                dict(condition="apical +0 Hz", value=100.0, rates=dict(rates, l5it=l5it + 10.0)),
                dict(condition="apical +50 Hz", value=0.0, rates=dict(rates, l5it=l5it + 5.0)),
                dict(condition="apical +50 Hz", value=100.0, rates=dict(rates, l5it=l5it + 30.0))]
        got = {r["measure"]: r for r in summarise(rows, dict(neuron=level, duration=2.0))["summary"]["table"]}
        what = f"above the {base:g} Hz baseline" if base else "all spikes"
        row = got[f"l5it: spikes per cell in a 0.2 s stimulus ({what})"]
        assert base == (1.0 if level == "lif" else 0.0)
        assert row["circuit"] == pytest.approx((l5it - base) * 0.2)
        assert row["agrees"] is ((l5it - base) * 0.2 <= 1.0)      # 0.9 agrees (lif), 1.4 and 1.1 do not
        # silencing L2/3 (L5 IT at 0.5 Hz): below the lif baseline it is abolished, not reduced
        ratio = got[f"l5it: rate{' above the baseline' if base else ''} with every L2/3 cell silenced / control"]
        assert ratio["circuit"] == pytest.approx((0.5 - base) / (l5it - base))
        assert ratio["agrees"] is (level == "escape")            # 0.09 (escape) reduced, < 0 (lif) abolished
    # a population under its baseline evokes no spike: that agrees with "at most one"
    rt, rates = table(0.5)
    rows[0].update(rate_table=rt, rates=rates)
    got = {r["measure"]: r for r in summarise(rows, dict(neuron="lif", duration=2.0))["summary"]["table"]}
    assert got["l5it: spikes per cell in a 0.2 s stimulus (above the 1 Hz baseline)"]["agrees"] is True
