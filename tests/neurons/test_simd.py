"""The lif somata's vectorisable state update (ctmhsa.neurons.simd): Brian2's exponential Euler
everywhere, and on cpp_standalone a loop GCC may vectorise with an exp in arithmetic alone."""

import numpy as np
import pytest
import brian2 as b2

from ctmhsa.devices.standalone import standalone_device
from ctmhsa.neurons.models import SIMD_METHOD, get_model
from ctmhsa.neurons.simd import SimdStateUpdateCodeObject

N = 257   # cells: not a multiple of any vector width, so the loop has a remainder

# a conductance membrane as the lif soma's: the exponential's argument -dt g/C spans the
# somata's range and beyond (g from 0 to 40 times the leak), and a refractory period freezes v
EQS = """
dv/dt = (g_L*(E_L - v) + g*(E_e - v))/C : volt (unless refractory)
g : siemens (constant)
"""
NS = dict(g_L=10 * b2.nS, E_L=-70 * b2.mV, E_e=0 * b2.mV, C=250 * b2.pF)


def _membrane(method):
    g = b2.NeuronGroup(N, EQS, threshold="v > -50*mV", reset="v = -60*mV", refractory=2 * b2.ms,
                       method=method, namespace=NS, name="membrane")
    g.v = -70 * b2.mV
    g.g = np.linspace(0, 400, N) * b2.nS
    return g


def _runtime_membrane():
    target = b2.prefs.codegen.target
    b2.prefs.codegen.target = "numpy"
    try:
        g = _membrane("exponential_euler")
        mon = b2.StateMonitor(g, "v", record=True)
        b2.Network(g, mon).run(40 * b2.defaultclock.dt)
    finally:
        b2.prefs.codegen.target = target
    return np.asarray(mon.v_[:])


@pytest.mark.brian2
def test_off_cpp_standalone_it_is_brians_exponential_euler():
    """On the runtime device the method's code is exponential Euler's, character for character
    (the same code, hence the same cached compiled modules and spikes as before it existed)."""
    ours = _membrane(SIMD_METHOD)
    theirs = _membrane("exponential_euler")
    for g in (ours, theirs):
        g.state_updater.update_abstract_code(run_namespace={})
    assert ours.state_updater.abstract_code == theirs.state_updater.abstract_code
    assert "vexp" not in ours.state_updater.abstract_code
    assert ours.state_updater.codeobj_class is None


@pytest.mark.codegen_independent
def test_every_lif_soma_uses_the_method_and_no_escape_cell_does():
    for cell in ("l23", "l5it", "l5pt", "relay_out", "memory", "kv_read", "kv_write", "l6ct", "decoder"):
        assert get_model("lif", cell).method == SIMD_METHOD, cell
    for cell in ("l23", "l5it", "relay", "interneuron"):
        assert get_model("escape", cell).method != SIMD_METHOD, cell


@pytest.mark.standalone
@pytest.mark.parametrize("threads", [0, pytest.param(2, marks=pytest.mark.long)])   # [2]: a second compile
def test_the_compiled_update_is_vectorisable_and_follows_the_exact_one(tmp_path, threads):
    """On cpp_standalone: the loop carries ``#pragma GCC ivdep`` (with OpenMP threads its
    ``simd`` clause) and calls ``_vexp``; the
    membrane it integrates stays within 1e-12 (relative) of numpy's exponential Euler over 40
    steps, refractory steps and spikes included. ``vexp`` itself is within 4e-15 of numpy's
    exp (relative) for |x| <= 50 (a soma's argument is about -0.4) and 5e-14 from -708 to 709
    (-ffast-math lets the compiler merge the two parts of ln 2 in the range reduction)."""
    v0 = _runtime_membrane()
    x = np.concatenate([np.linspace(-708, 709, 2001), np.linspace(-50, 50, 999)])
    with standalone_device(str(tmp_path), threads):
        g = _membrane(SIMD_METHOD)
        mon = b2.StateMonitor(g, "v", record=True)
        e = b2.NeuronGroup(x.size, "x : 1\ny : 1", name="exps")
        e.x = x
        e.run_regularly("y = vexp(x)", name="exps_eval")
        b2.Network(g, mon, e).run(40 * b2.defaultclock.dt)
        b2.get_device().build(directory=str(tmp_path), compile=True, run=True, with_output=False)
        assert isinstance(g.state_updater.codeobj, SimdStateUpdateCodeObject)
        code = open(tmp_path / "code_objects" / f"{g.state_updater.codeobj.name}.cpp").read()
        pragma = "#pragma omp parallel for simd" if threads > 1 else "#pragma GCC ivdep"
        assert pragma in code and "_vexp(" in code
        v, y = np.asarray(mon.v_[:]), np.asarray(e.y[:])
    np.testing.assert_allclose(v, v0, rtol=1e-12)
    assert np.isclose(v0, -60e-3).any()   # some cells spiked and were reset
    near = np.abs(x) <= 50
    np.testing.assert_allclose(y[near], np.exp(x[near]), rtol=4e-15, atol=0)
    np.testing.assert_allclose(y, np.exp(x), rtol=5e-14, atol=0)
