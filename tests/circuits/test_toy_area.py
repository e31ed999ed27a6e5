"""A new attention circuit is one class and one registration: a toy area, written here and nowhere
else, is built, simulated at the rate level and compared with its own reference by the
unchanged front end (``simulate_mhsa(circuit=...)``).

The toy is *uniform attention*: every query attends to every key alike, ``ṽ_i = (1/m) Σ_j v_j``
(the limit of linear attention with a constant feature map; no keys, no queries). Its cells: one
value cell pair per (head, query, key token, dimension), driven by the matrix relays through WV;
L5 PT averages them over the key tokens. It brings its own population name (``value``), its own
values, decoding and reference, and facts that make the options refuse what it does not build.
"""

from __future__ import annotations

import numpy as np
import pytest

from ctmhsa import simulate_mhsa
from ctmhsa.circuits.graph import Projection
from ctmhsa.circuits.parts import PARTS, Part, areas, register_part
from ctmhsa.mapping.decode import per_dimension

pytestmark = pytest.mark.codegen_independent

NAME = "toy_uniform"


class UniformAttention(Part):
    """Uniform attention: value cells per (head, i, j, c), L5 PT their mean over j."""

    populations = ("value",)
    area = True
    normalize = False
    stages = ("v", "v_tilde", "x_tilde")
    levels = ("rate",)
    no_causal = "uniform attention has no causal variant in this toy"

    def build(self, c, ctx):
        m, pair = c.meta, ctx["pair"]
        ctx["pop"]("value", "memory", ("head", "i", "j", "c") + pair[0], (m.H, m.n, m.m, m.dv) + pair[1],
                   role="attention_value")
        c.add_projection(Projection("matrix_v", ctx["kv"], "value", "soma", (("token", "j"),), "WV",
                                    ctx["w_in"] + ctx["sign_w"], "matrix"))
        return "value", "value_pt"           # what drives L5 PT (the builder adds the projection)

    def check_options(self, co):
        if co.normalize:
            raise ValueError("normalize: uniform attention is normalised by construction; leave normalize out")

    def values(self, circuit, vals, gains, ctx):
        # value cells fire rho [±v]_+ (the encoder set matrix_v = u WV / rho_in); PT sums u v / m
        m = circuit.meta
        vals.params["value"] = {"b": 0.0, "rho": gains.rho_it}
        vals.weights["value_pt"] = np.full((m.H, m.n), ctx["u"] / (gains.rho_it * m.m))
        return gains, None

    def decode(self, circuit, encoding, obs):
        pop = circuit.populations["value"]
        U = per_dimension(pop, obs["value"]["U"])            # (H, n, m, dv, sign)
        return {"v": encoding.codes["v"].decode(0.5 * (U[..., 0] - U[..., 1]).mean(axis=1))}

    def reference(self, arrays, phi, causal, normalize, forget=1.0):
        Y = arrays["X"] if arrays.get("Y") is None else arrays["Y"]
        v = np.einsum("hce,je->hjc", arrays["WV"], Y)
        n = arrays["X"].shape[0]
        v_tilde = np.repeat(v.mean(axis=1, keepdims=True), n, axis=1)
        return dict(v=v, v_tilde=v_tilde, x_tilde=np.einsum("hec,hic->ie", arrays["WO"], v_tilde))


@pytest.fixture
def toy():
    register_part(NAME)(UniformAttention)
    yield NAME
    del PARTS[NAME]


def _problem(n=3, m=3, H=2, dk=2, dv=3, de=4, seed=5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, de))
    W = [rng.normal(size=s) / np.sqrt(de) for s in ((H, dk, de), (H, dk, de), (H, dv, de))]
    return X, (*W, rng.normal(size=(H, de, dv)) / np.sqrt(dv))


def test_a_new_area_is_one_class_and_one_registration(toy):
    assert toy in areas()
    X, W = _problem()
    res = simulate_mhsa(X, *W, circuit=toy, neuron="rate", duration=0.3)
    # its own reference, computed here from the arrays alone
    expect = np.einsum("hec,hc->e", W[3], np.einsum("hce,je->hc", W[2], X) / X.shape[0])
    np.testing.assert_allclose(res.reference, np.broadcast_to(expect, X.shape), rtol=1e-12)
    assert set(res.stages) >= {"v", "v_tilde", "x_tilde"}
    np.testing.assert_allclose(res.x_tilde, res.reference, atol=1e-6 * np.abs(expect).max())
    np.testing.assert_allclose(res.stages["v"], res.reference_stages["v"], atol=1e-6)
    assert res.metrics()["x_tilde"]["nrmse"] < 1e-6
    # its population, by name and by role, in the rate table
    assert res.rates["value"].shape == (2, 3, 3, 3, 2)


def test_the_options_take_the_areas_default_normalisation(toy):
    from ctmhsa.sims.options import CircuitOptions

    assert CircuitOptions(circuit=toy, neuron="rate").normalize is False   # the toy's own default
    assert CircuitOptions(circuit="memory").normalize is False           # the revised paper's memory
    assert CircuitOptions().normalize is True and CircuitOptions(circuit="memory", normalize=True).normalize


def test_the_new_areas_facts_refuse_what_it_does_not_build(toy):
    X, W = _problem()
    for kw, match in ((dict(neuron="escape"), "neuron: the toy_uniform circuit is built at the rate level"),
                      (dict(causal=True), "causal: uniform attention has no causal variant"),
                      (dict(normalize=True), "normalize: uniform attention"),
                      (dict(dale=True), "dale: Dale's law is built for circuit='quadratic'"),
                      (dict(law="co4"), "law: the toy_uniform circuit has no L5 IT cells"),
                      (dict(tau_mem=1.0), "tau_mem: ")):
        with pytest.raises(ValueError, match=match):
            simulate_mhsa(X, *W, circuit=toy, duration=0.3, **{"neuron": "rate", **kw})


def test_an_unregistered_area_is_refused_with_the_registered_ones():
    X, W = _problem()
    with pytest.raises(ValueError, match=r"circuit: expected one of \['quadratic', 'linear', 'memory'"):
        simulate_mhsa(X, *W, circuit=NAME, duration=0.3)
    assert NAME not in areas()


def test_no_module_branches_on_a_shipped_circuits_name():
    """Code asks an area for its facts; only benchmarks that choose a circuit, and a figure that
    picks rows of a results file, name one (issue 48: 11 such comparisons in 6 modules before)."""
    import pathlib

    from conftest import LAYERS, name_comparisons

    root = pathlib.Path(__file__).resolve().parents[2]
    allowed = {"sims/benchmarks/memory.py", "sims/benchmarks/robustness.py", "figures/panels.py"}
    found = []
    for pkg in LAYERS:
        for path in sorted((root / pkg).rglob("*.py")):
            rel = path.relative_to(root).as_posix()
            found += [f"{rel}:{n}" for n, text in name_comparisons(path.read_text(), ("quadratic", "linear", "memory"))
                      if "circuit" in text and rel not in allowed]
    assert found == []
