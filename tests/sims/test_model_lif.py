"""Models at the lif level: conductance-based cortical somata in a model's circuit, their
baselines cancelled at every target and removed before decoding, the rate table keeping them."""

from dataclasses import replace

import numpy as np
import pytest

from ctmhsa.maths.model import load_model
from ctmhsa.neurons.conductance import lif_drive
from ctmhsa.neurons.models import get_model
from ctmhsa.neurons.params import lif_soma
from ctmhsa.sims.benchmarks.language import RECALL_CALIBRATION
from ctmhsa.sims.model import simulate_model
from ctmhsa.sims.recall import recall_accuracy, recall_sequences
from test_model_standalone import _model, _tokens


@pytest.mark.codegen_independent
def test_every_model_cell_type_has_a_lif_model():
    # the transformer blocks' cortical cells are lif somata; thalamic relays the escape level's
    for ct in ("l6ct", "decoder", "l5pt", "l23", "l5it", "memory"):
        assert get_model("lif", ct).lif_soma, ct
    assert get_model("lif", "relay_norm") is get_model("escape", "relay_norm")
    # the class cells follow a presentation: the memory cells' fast coupling
    assert lif_soma("decoder") is lif_soma("kv_memory")
    assert lif_soma("decoder").params.tau_c < lif_soma("default").params.tau_c
    # the MLP's hidden cells (L6 CT) fire sparsely: L5's cell, its calibration and its 1 Hz baseline,
    # with a coupling fast enough to follow a presentation
    l6, l5 = lif_soma("l6ct"), lif_soma("l5it")
    assert l6.r_base == l5.r_base == 1.0 and l6.params.tau_c < l5.params.tau_c and l6.prefix != l5.prefix
    assert replace(l6.params, tau_c=l5.params.tau_c, tau_c_start=l5.params.tau_c_start) == l5.params


@pytest.mark.brian2
def test_a_causal_model_recalls_at_the_lif_level():
    """The recall model at lif, 0.5 s per token (2 pairs, held-out seed 3): every query answered as
    the float model answers it, the logits near it (measured NRMSE 0.19), the decoders reading
    rates above the somata's baselines while the rate table keeps every spike."""
    model = load_model("recall")
    seqs = recall_sequences(1, pairs=2, seed=3)
    cal = recall_sequences(**RECALL_CALIBRATION).inputs
    res = simulate_model(model, seqs.inputs[0], neuron="lif", presentation=0.5, calibration=cal, seed=1,
                         report=None)
    z, ref = np.asarray(res.logits), np.asarray(res.reference_logits)
    assert recall_accuracy(z[None], seqs.targets, seqs.mask) == recall_accuracy(ref[None], seqs.targets, seqs.mask) == 1.0
    assert res.metrics["logits"]["nrmse"] < 0.35
    base = lif_drive(res.config["dt"], "kv_memory")["r_base"]
    memory = [p["name"] for p in res.config["circuit"]["populations"] if p["cell_type"] == "kv_memory"]
    assert memory and all(np.mean(res.rates[p]) > 0.8 * base for p in memory)   # baselines counted


@pytest.mark.brian2
def test_a_transformer_block_at_the_lif_level_reads_its_stages_above_the_baselines():
    """One block with an MLP and a read-out (tests/sims/test_model_standalone.py's model), one token
    set, 4 s at lif: every stage within 2x its count-noise floor (measured 0.2-1.6x over spike
    seeds 3-5 at 0.5 and 1 ms), Z within 3x (1.2-2.7x: the interneurons' loop of 2-token
    macrocolumns held at the pooled floor, whose pulses the floor leaves out), the logits within
    2x theirs (0.036-0.215 over spike seeds 3-13, floor 0.13, with the TRN's own shunt and with
    the attention's: a bound of 0.1 passed at seed 3 alone). The MLP's hidden cells fire their
    baseline where the relu is 0: read without removing it (at 20 Hz, before version 0.15's L6 CT
    soma), hidden was 0.435 against a floor of 0.073."""
    res = simulate_model(_model(), _tokens(5), neuron="lif", duration=4.0, seed=3, report=None)
    for stage, m in res.metrics["blocks"][0].items():
        assert m["nrmse"] <= (3.0 if stage == "Z" else 2.0) * m["floor"], (stage, m["nrmse"], m["floor"])
    logits = res.metrics["logits"]
    assert logits["nrmse"] <= 2.0 * logits["floor"], logits
