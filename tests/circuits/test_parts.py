"""A new part is one registry entry in one module (issue 29): here a dummy population of relays
that drives the L5 PT somata through one projection, built, encoded and simulated by the same path
as the pathway's own parts."""

import numpy as np
import pytest

from ctmhsa.maths.model import Block
from ctmhsa.circuits.builders import pathway
from ctmhsa.circuits.graph import Projection
from ctmhsa.circuits.instantiate import instantiate
from ctmhsa.circuits.parts import PARTS, Part, register_part
from ctmhsa.mapping.encode import encode


@register_part("test_dummy")
class Dummy(Part):
    """One relay per L5 PT cell at 10 Hz, adding 0.01 V to the PT soma."""

    def build(self, circuit, ctx):
        pt = circuit.populations["l5pt"]
        ctx["pop"]("dummy", "relay", pt.axes, pt.sizes, area="thalamus")
        circuit.add_projection(Projection("dummy_pt", "dummy", "l5pt", "soma", tuple((a, a) for a in pt.axes)))

    def values(self, circuit, vals, gains, ctx):
        vals.params["dummy"] = {"r_in": 10.0}
        vals.weights["dummy_pt"] = 0.01 / 10.0     # V s: 10 Hz x 1 mV s = 0.01 V


def _problem(seed=0, n=2, de=3, H=1, dk=2, dv=2):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(n, de)) / 2, rng.normal(size=(H, dk, de)) / 2, rng.normal(size=(H, dk, de)) / 2,
            rng.normal(size=(H, dv, de)), rng.normal(size=(H, de, dv)))


@pytest.mark.brian2
def test_registered_part_is_built_encoded_and_simulated():
    X, WQ, WK, WV, WO = _problem()
    w = Block.from_arrays(WQ, WK, WV, WO)
    c = pathway(2, 2, 2, 3, parts=("test_dummy",))
    assert c.meta.parts == ("quadratic", "test_dummy")
    assert "dummy" in c.populations and c.projections["dummy_pt"].target == "l5pt"
    plain = pathway(2, 2, 2, 3)
    enc, enc0 = encode(c, X, w), encode(plain, X, w)
    built, built0 = (instantiate(cc, "rate", e.values) for cc, e in ((c, enc), (plain, enc0)))
    for b in (built, built0):
        b.run(0.3)
    U, U0 = built.values("l5pt", "U"), built0.values("l5pt", "U")
    np.testing.assert_allclose(U - U0, 0.01, rtol=1e-3)     # the dummy's drive, nothing else changed


@pytest.mark.codegen_independent
def test_unknown_part_is_refused():
    with pytest.raises(ValueError, match="no part named 'nope'; registered parts are"):
        pathway(2, 2, 2, 3, parts=("nope",))
    with pytest.raises(TypeError, match="subclass of ctmhsa.circuits.parts.Part"):
        register_part("bad")(object)


@pytest.mark.codegen_independent
def test_attention_areas_are_registered_parts():
    assert {"quadratic", "linear"} <= set(PARTS)
    assert pathway(2, 2, 2, 3, circuit="linear").meta.parts == ("linear",)


@pytest.mark.codegen_independent
@pytest.mark.parametrize("kw", [dict(), dict(circuit="linear", signed="offset", skip=True),
                                dict(causal=True, P={"l23": 2}, n_inh=3)])
def test_meta_is_typed_and_rebuilds_the_circuit(kw):
    from ctmhsa.circuits.builders import build
    from ctmhsa.circuits.graph import CircuitMeta

    c = pathway(3, 2, 2, 3, H=2, **kw)
    assert isinstance(c.meta, CircuitMeta) and c.meta.H == 2 and c.meta.dk == 2
    assert build(**c.meta.build_args()).to_dict() == c.to_dict()
    one = build(**c.meta.build_args(H=1, with_nucleus2=False, name="head"))
    assert one.meta.H == 1 and "nucleus2" not in one.populations
    with pytest.raises(TypeError, match="unknown field"):
        CircuitMeta.from_dict({"heads": 2})


@pytest.mark.codegen_independent
def test_every_area_dispatch_goes_through_its_hooks():
    from ctmhsa.circuits.parts import area_hook
    import ctmhsa.mapping.noise  # noqa: F401 - registers the noise hooks

    for kind in ("quadratic", "linear"):
        c = pathway(2, 2, 2, 3, circuit=kind)
        for job in ("values", "decode", "noise", "pool_cells", "pooled_drive"):
            assert callable(area_hook(c, job))
    with pytest.raises(ValueError, match="no 'nothing' function"):
        area_hook(pathway(2, 2, 2, 3), "nothing")


@pytest.mark.codegen_independent
def test_block_head_is_one_head_of_the_block():
    X, WQ, WK, WV, WO = _problem(H=3)
    WS = np.ones((3, 2, 3))
    b = Block.from_arrays(WQ, WK, WV, WO, WS)
    h = b.head(1)
    assert h.H == 1 and np.array_equal(h.WQ[0], WQ[1]) and np.array_equal(h.WO[0], WO[1])
    assert np.array_equal(h.WS[0], WS[1]) and h.attn.heads == (1,)
    with pytest.raises(TypeError, match="weights: expected a ctmhsa.maths.model.Block"):
        encode(pathway(2, 2, 2, 3, H=3), X, (WQ, WK, WV, WO))
