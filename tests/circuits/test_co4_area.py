"""The Co4 area (``circuit="co4"``): the triad of cooperation cells feeding the linear circuit's
memory and read-out, checked against ``ctmhsa.maths.co4.co4_attention`` at the rate level on
hypothesis-random instances, and its refusals."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ctmhsa import simulate_mhsa
from ctmhsa.maths.co4 import co4_attention
from ctmhsa.mapping.operating import OperatingRangeError

pytestmark = pytest.mark.codegen_independent


def _problem(L, n, H, d, de, scale, seed):
    rng = np.random.default_rng(seed)
    X, Y = rng.normal(size=(L, de)), rng.normal(size=(n, de))
    W = [scale * rng.normal(size=(H, d, de)) / np.sqrt(de) for _ in range(3)]
    return X, Y, (*W, scale * rng.normal(size=(H, de, d)) / np.sqrt(d))


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(L=st.integers(1, 3), n=st.integers(1, 4), H=st.integers(1, 2), d=st.integers(1, 3), de=st.integers(1, 4),
       scale=st.sampled_from([0.03, 0.3, 1.0, 3.0]), normalize=st.booleans(),
       phi=st.sampled_from(["elu1", "softplus", "exp"]), dale=st.booleans(), seed=st.integers(0, 2 ** 16))
def test_rate_level_equals_the_co4_reference(L, n, H, d, de, scale, normalize, phi, dale, seed):
    X, Y, W = _problem(L, n, H, d, de, scale, seed)
    try:
        res = simulate_mhsa(X, *W, Y=Y, circuit="co4", neuron="rate", duration=0.6, normalize=normalize, phi=phi,
                            dale=dale)
    except OperatingRangeError:      # a refusal, before building, of a division out of range: never silent
        assert normalize
        return
    ref = co4_attention(X, *W, Y=Y, phi=phi, normalize=normalize)
    # the reference the result carries is the maths layer's, computed here independently
    np.testing.assert_allclose(res.reference, ref["x_tilde"], rtol=1e-12, atol=1e-14)
    for stage in ("q", "k", "v", "q_m", "k_m", "v_m", "v_tilde", "x_tilde"):
        got, want = res.stages[stage], ref[stage]
        tol = 1e-6 * max(np.abs(want).max(), 1e-12)
        np.testing.assert_allclose(got, want, rtol=0, atol=tol, err_msg=stage)


def test_the_triad_cells_are_the_cooperation_equation():
    """Every triad cell's rate is rho_coop ReLU6(R² + 2R + C(1 + |R|)) of its own R and C, the
    seed's mean contexts: checked cell by cell on one instance, with the clipping at 0 and 6 used."""
    from ctmhsa.maths.co4 import cooperation
    from ctmhsa.maths.codes import DEFAULT_GAINS

    X, Y, W = _problem(2, 3, 1, 2, 3, 1.5, 7)
    res = simulate_mhsa(X, *W, Y=Y, circuit="co4", neuron="rate", duration=0.6)
    ref = co4_attention(X, *W, Y=Y)
    q, k, v = ref["q"][0], ref["k"][0], ref["v"][0]
    rho = DEFAULT_GAINS.rho_coop
    expect = {"coop_q": cooperation(q[:, None], (k + v)[None] / 2),
              "coop_k": cooperation(k[None], (q[:, None] + v[None]) / 2),
              "coop_v": cooperation(v[None], (q[:, None] + k[None]) / 2)}
    clipped = 0
    for name, g in expect.items():
        rates = res.rates[name][0]                       # (L, n, d)
        np.testing.assert_allclose(rates, rho * g, rtol=1e-6, atol=1e-9, err_msg=name)
        clipped += int(np.sum((g == 0) | (g == 6)))
    assert clipped > 0          # the instance reaches the law's clipping


@pytest.mark.parametrize("kw, match", [
    (dict(causal=True), "causal: the Co4 block's latents attend to every token"),
    (dict(signed="offset"), "signed: 'offset' does not apply to circuit='co4'"),
    (dict(law="co4"), "law: the co4 circuit"),
    (dict(Y=None), "Y: the Co4 area's queries are its latents"),
    (dict(neuron="lif"), "neuron: the co4 circuit is built at the rate and escape levels"),
])
def test_what_the_co4_area_does_not_build_is_refused(kw, match):
    X, Y, W = _problem(2, 3, 1, 2, 3, 1.0, 1)
    args = {"Y": Y, "neuron": "rate", "duration": 0.3, **kw}
    with pytest.raises(ValueError, match=match):
        simulate_mhsa(X, *W, circuit="co4", **args)


def test_one_width_for_questions_clues_and_hypotheses():
    rng = np.random.default_rng(0)
    X, Y = rng.normal(size=(2, 3)), rng.normal(size=(3, 3))
    W = (rng.normal(size=(1, 2, 3)), rng.normal(size=(1, 2, 3)), rng.normal(size=(1, 3, 3)), rng.normal(size=(1, 3, 3)))
    with pytest.raises(ValueError, match="dv: the triadic loops are elementwise"):
        simulate_mhsa(X, *W, Y=Y, circuit="co4", neuron="rate", duration=0.3)


@pytest.mark.long
@pytest.mark.brian2
def test_escape_with_four_relays_per_dimension_is_at_its_floors():
    """At the escape level the cooperation law's kinks (its clip at 0 and 6, |R| at 0) turn the
    dendrites' shot noise into a bias (single cells: 8.7 % of the law's range at 80 Hz per unit);
    four relays per dimension divide that noise by four. Held-out instance (seed 11, never tuned
    on), 2 s window: every modulated stage and x̃ within 1.4 of its count-noise floor."""
    X, Y, W = _problem(4, 8, 2, 8, 16, 1.0, 11)
    res = simulate_mhsa(X, *W, Y=Y, circuit="co4", neuron="escape", duration=2.0, seed=1,
                        P={"nucleus1": 4, "nucleus1_kv": 4, "nucleus1_v": 4})
    for stage in ("q_m", "k_m", "v_m", "S", "x_tilde"):
        m = res.metrics()[stage]
        assert m["nrmse"] < 1.4 * m["noise_floor"], (stage, m)


def test_dale_gives_every_signed_projection_followers_and_keeps_the_stages():
    """Under Dale's law the relays' signed dendritic weights and the hypothesis cells' ON/OFF
    weights onto the outer-product cells come from excitatory cells (positive halves) and their
    feedforward inhibitory followers (negative halves); the build checks every cell's signs, and
    the rate level is unchanged."""
    from ctmhsa import build_mhsa
    from ctmhsa.circuits import dale

    X, Y, W = _problem(2, 3, 1, 2, 3, 1.0, 3)
    plain = simulate_mhsa(X, *W, Y=Y, circuit="co4", neuron="rate", duration=0.6)
    res = simulate_mhsa(X, *W, Y=Y, circuit="co4", neuron="rate", duration=0.6, dale=True)
    c = build_mhsa(X, *W, Y=Y, circuit="co4", neuron="rate", dale=True).circuit   # assign() checked the signs
    assert c.meta.dale and res.counts["neurons"] == c.n_neurons() > plain.counts["neurons"]
    for relays in ("nucleus1", "nucleus1_kv", "nucleus1_v"):
        assert relays + dale.FFI_SUFFIX in c.populations
    split = [p for p in c.projections.values() if p.source.endswith(dale.FFI_SUFFIX) and p.target in ("coop_q", "outer")]
    assert split and all(p.sign == "-" for p in split)
    for stage in ("q_m", "k_m", "v_m", "v_tilde", "x_tilde"):
        np.testing.assert_allclose(res.stages[stage], plain.stages[stage], rtol=1e-9, atol=1e-12, err_msg=stage)


def test_outer_product_and_memory_gains_keep_their_cells_in_range():
    """The triad's outputs reach 6 (its ReLU6), so the outer-product and memory cells could fire
    past an escape cell's one spike per step (a held-out instance's memory: 1,734 Hz). Their
    gains are lowered from token sets drawn from the declared range until those fire at most
    PEAK_RATE; the rate level stays exact, and small weights keep the default gains."""
    from ctmhsa.maths.codes import DEFAULT_GAINS
    from ctmhsa.mapping.kvmemory import MEMORY_PEAK_RATE as PEAK_RATE

    X, Y, W = _problem(3, 6, 2, 4, 8, 1.0, 23)
    res = simulate_mhsa(X, *W, Y=Y, circuit="co4", neuron="rate", duration=0.6)
    for name in ("outer", "memory"):
        assert np.nanmax(res.rates[name]) <= PEAK_RATE * (1 + 1e-6), name
    ref = co4_attention(X, *W, Y=Y)
    np.testing.assert_allclose(res.x_tilde, ref["x_tilde"], rtol=0, atol=1e-6 * np.abs(ref["x_tilde"]).max())
    from ctmhsa import build_mhsa

    gains = build_mhsa(X, *W, Y=Y, circuit="co4", neuron="rate", duration=0.6).encoding.consts["gains"]
    assert gains["rho_outer"] < DEFAULT_GAINS.rho_outer and gains["rho_memory"] < DEFAULT_GAINS.rho_memory
    X, Y, W = _problem(3, 6, 2, 4, 8, 0.03, 23)
    small = build_mhsa(X, *W, Y=Y, circuit="co4", neuron="rate", duration=0.6).encoding.consts["gains"]
    assert small["rho_outer"] == DEFAULT_GAINS.rho_outer and small["rho_memory"] == DEFAULT_GAINS.rho_memory
