"""``coupling``: the lif somata's dendro-somatic couplings by cell type, in place of their soma
types'; checked before anything is built, compiled in, refused where there is none."""

import brian2 as b2
import numpy as np
import pytest

import ctmhsa
from ctmhsa.devices.standalone import project_key
from ctmhsa.neurons.params import DEFAULT_PARAMS, LIF_SOMATA, check_coupling, coupling_namespace
from ctmhsa.sims.model import prepare_model_run
from ctmhsa.sims.options import CircuitOptions, RunOptions, check_run, max_dt

from test_model_standalone import _model, _tokens

FAST_L5 = {"l5it": 0.05, "l5pt": 0.05}


@pytest.mark.codegen_independent
@pytest.mark.parametrize("coupling, error, match", [
    ({"l5it": 0.05}, ValueError, r"^coupling: cell types \['l5it', 'l5pt'\] share one soma type \(constants s5_"),
    ({"l5it": 0.05, "l5pt": 0.1}, ValueError, r"^coupling: cell types \['l5it', 'l5pt'\] share one soma type"),
    ({"nope": 0.05}, ValueError, r"^coupling: 'nope' is not a lif soma cell type"),
    ({"default": 0.05}, ValueError, r"^coupling: 'default' is not a lif soma cell type"),
    ({"l23": 0.0}, ValueError, r"^coupling"),
    ({"l23": -0.1}, ValueError, r"^coupling"),
    ({"l23": 11.0}, ValueError, r"^coupling: the coupling of 'l23' must be seconds in \(0, 10\]"),
    ({"l23": float("nan")}, ValueError, r"^coupling"),
    ({"l23": "fast"}, (TypeError, ValueError), r"^coupling"),
    (0.05, TypeError, r"^coupling: expected a mapping cell type -> seconds"),
])
def test_a_bad_coupling_is_refused_naming_it(coupling, error, match):
    with pytest.raises(error, match=match):
        check_coupling(coupling)
    with pytest.raises(error, match=match):
        CircuitOptions(neuron="lif", coupling=coupling)


@pytest.mark.codegen_independent
def test_a_coupling_applies_at_the_lif_level_only():
    assert CircuitOptions(neuron="lif", coupling=FAST_L5).coupling == FAST_L5
    assert CircuitOptions(neuron="lif", coupling={}).coupling is None
    for level in ("rate", "escape"):
        with pytest.raises(ValueError, match=r"^coupling: the dendro-somatic coupling is the lif somata's"):
            CircuitOptions(neuron=level, coupling=FAST_L5)
    # the shared soma types' constants replaced, once per soma type
    ns = coupling_namespace(check_coupling({**FAST_L5, "kv_memory": 0.02, "decoder": 0.02}))
    assert ns == {"s5_tc": 0.05 * b2.second, LIF_SOMATA["kv_memory"].prefix + "tc": 0.02 * b2.second}
    # the coupling is integrated exactly over a step (exponential Euler): it bounds no step
    assert max_dt(CircuitOptions(neuron="lif", coupling={"l23": 1e-3})) == max_dt(CircuitOptions(neuron="lif"))
    with pytest.raises(ValueError, match=r"^scheduler: a split run builds every head on its worker"):
        check_run(CircuitOptions(neuron="lif", coupling=FAST_L5), RunOptions(scheduler="serial"))


@pytest.mark.codegen_independent
def test_a_coupling_is_compiled_in():
    """Another coupling is another standalone project (the constants are in its code)."""
    run = prepare_model_run(_model(), _tokens(2), "lif", None, None, None, dict(seed=3, P=2, device="cpp_standalone"))
    key = [project_key(run.circuit, "lif", "elu1", DEFAULT_PARAMS, 1e-3, (0.5, 1.0, 10), 1, coupling=c)
           for c in (None, FAST_L5, {"l5it": 0.1, "l5pt": 0.1})]
    assert len(set(key)) == 3


@pytest.mark.brian2
def test_a_models_l5_cells_take_the_coupling_given():
    """The built network's L5 somata read the coupling given; the other somata keep their own;
    the result's configuration records it."""
    run = prepare_model_run(_model(), _tokens(2), "lif", None, None, None,
                            dict(seed=3, P=2, codegen="numpy", coupling=FAST_L5, duration=0.5))
    built = run.runner.built
    assert run.co.coupling == FAST_L5
    ns = built.groups["b0_l5pt"].namespace
    assert float(ns["s5_tc"]) == pytest.approx(0.05)
    assert float(ns[LIF_SOMATA["l23"].prefix + "tc"]) == pytest.approx(LIF_SOMATA["l23"].params.tau_c)
    res = ctmhsa.simulate_model(_model(), _tokens(2), neuron="lif", seed=3, P=2, codegen="numpy", coupling=FAST_L5,
                                duration=0.3)
    assert res.config["coupling"] == FAST_L5 and np.all(np.isfinite(res.output))


@pytest.mark.codegen_independent
def test_a_cell_type_on_the_default_soma_type_is_refused(monkeypatch):
    """Its constants are every cell type's without a soma type of its own: not set by one name."""
    monkeypatch.setitem(LIF_SOMATA, "borrowed", LIF_SOMATA["default"])
    with pytest.raises(ValueError, match=r"^coupling: 'borrowed' has the default soma type"):
        check_coupling({"borrowed": 0.05})
