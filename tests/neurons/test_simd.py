"""The lif somata's vectorisable state update (ctmhsa.neurons.simd): Brian2's exponential Euler
everywhere, and on cpp_standalone a loop GCC may vectorise with an exp in arithmetic alone."""

import numpy as np
import pytest
import brian2 as b2

from ctmhsa.devices.standalone import standalone_device
from ctmhsa.neurons.models import get_model
from ctmhsa.neurons.params import SIMD_METHOD
from ctmhsa.neurons.simd import CounterDraws, SimdStateUpdateCodeObject, counter_draws, urand

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


@pytest.mark.codegen_independent
def test_counter_draws_replace_each_rand_by_its_own_numbered_hash_of_the_steps_key():
    code = "g_e = a + (rand() - 0.5)\ng_i = b + (rand() - 0.5)*c"
    assert counter_draws(code) == ("draw_key = rand()\ng_e = a + (urand(draw_key, i, 1) - 0.5)\n"
                                   "g_i = b + (urand(draw_key, i, 2) - 0.5)*c")


@pytest.mark.codegen_independent
def test_urand_is_uniform_and_independent_across_cells_draws_and_keys():
    """10,000 cells x 200 keys x 2 draws: mean, variance, the cells' lag-1 correlation along the
    keys (steps), and the correlation of a cell's two draws and of neighbouring cells, each within
    4 standard errors of a uniform's; 1,000 bins flat by chi-square."""
    keys = np.random.default_rng(7).random(200)[:, None]
    cells = np.arange(10_000)[None, :]
    u1, u2 = urand(keys, cells, 1), urand(keys, cells, 2)
    n = u1.size
    assert abs(u1.mean() - 0.5) < 4 * np.sqrt(1 / 12 / n)
    assert abs(u1.var() - 1 / 12) < 4 * np.sqrt(1 / 180 / n)
    z = (u1 - 0.5) * np.sqrt(12)
    se = 4 / np.sqrt(n)
    for a, b in ((z[1:], z[:-1]), (z, (u2 - 0.5) * np.sqrt(12)), (z[:, 1:], z[:, :-1])):
        assert abs(np.mean(a * b)) < se
    counts = np.bincount((u1.ravel() * 1000).astype(int), minlength=1000)
    chi2 = ((counts - n / 1000) ** 2 / (n / 1000)).sum()
    assert chi2 < 999 + 4 * np.sqrt(2 * 999)


@pytest.mark.standalone
def test_the_lif_background_on_cpp_standalone_is_the_ou_process_with_counter_draws(tmp_path):
    """On cpp_standalone a lif soma's background code draws by :func:`urand`: the compiled hash
    equals numpy's bit for bit, and the conductances keep the Ornstein-Uhlenbeck process's mean,
    standard deviation and one-step autocorrelation (2,000 cells x 2,000 steps, within 4
    standard errors), with no correlation between cells."""
    from ctmhsa.neurons.models import SOMA_BACKGROUND
    from ctmhsa.neurons.params import DEFAULT_SOMA

    ns = DEFAULT_SOMA.namespace()
    g0, sigma, tau = (float(ns[k]) for k in ("s_ge0", "s_se", "s_te"))
    n_cells, n_steps = 2000, 2000
    with standalone_device(str(tmp_path), 0):
        g = b2.NeuronGroup(n_cells, "g_e : siemens\ng_i : siemens\ndraw_key : 1 (shared)", namespace=ns,
                           name="somata")
        g.g_e, g.g_i = ns["s_ge0"], ns["s_gi0"]
        runner = CounterDraws.install(g, SOMA_BACKGROUND, g.clock, when="groups", order=1, name="somata_regular")
        keys = b2.StateMonitor(g, "draw_key", record=[0], name="keys", when="end")
        ge = b2.StateMonitor(g, "g_e", record=True, name="ge", when="end")
        b2.Network(g, keys, ge).run(n_steps * b2.defaultclock.dt)
        b2.get_device().build(directory=str(tmp_path), compile=True, run=True, with_output=False)
        assert isinstance(runner.codeobj, SimdStateUpdateCodeObject)
        k, x = np.asarray(keys.draw_key[0]), np.asarray(ge.g_e_[:])   # x: (cells, steps), after each step
    # the first step's conductances follow from the start value and the step's first draws
    a = np.exp(-float(b2.defaultclock.dt) / tau)
    b = sigma * np.sqrt(1 - a ** 2) * np.sqrt(12)
    np.testing.assert_allclose(x[:, 0], g0 + b * (urand(k[0], np.arange(n_cells), 1) - 0.5), rtol=1e-12)
    x = x[:, 200:]   # stationary (tau_e is a few steps)
    n_eff = x.size * (1 - a) / (1 + a)
    assert abs(x.mean() - g0) < 4 * sigma / np.sqrt(n_eff)
    assert abs(x.std() / sigma - 1) < 4 / np.sqrt(2 * n_eff)
    d = x - g0
    assert abs(np.mean(d[:, 1:] * d[:, :-1]) / np.mean(d * d) - a) < 4 / np.sqrt(n_eff)
    assert abs(np.mean(d[1:] * d[:-1]) / np.mean(d * d)) < 4 / np.sqrt(n_eff)   # neighbouring cells
