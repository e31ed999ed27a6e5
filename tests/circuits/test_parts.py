"""A new part is one registry entry in one module (issue 29): here a dummy population of relays
that drives the L5 PT somata through one projection, built, encoded and simulated by the same path
as the pathway's own parts."""

import numpy as np
import pytest

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


def test_registered_part_is_built_encoded_and_simulated():
    X, WQ, WK, WV, WO = _problem()
    c = pathway(2, 2, 2, 3, parts=("test_dummy",))
    assert c.meta["parts"] == ["quadratic", "test_dummy"]
    assert "dummy" in c.populations and c.projections["dummy_pt"].target == "l5pt"
    plain = pathway(2, 2, 2, 3)
    enc, enc0 = encode(c, X, WQ, WK, WV, WO), encode(plain, X, WQ, WK, WV, WO)
    built, built0 = (instantiate(cc, "rate", e.values) for cc, e in ((c, enc), (plain, enc0)))
    for b in (built, built0):
        b.run(0.3)
    U, U0 = built.values("l5pt", "U"), built0.values("l5pt", "U")
    np.testing.assert_allclose(U - U0, 0.01, rtol=1e-3)     # the dummy's drive, nothing else changed


def test_unknown_part_is_refused():
    with pytest.raises(ValueError, match="no part named 'nope'; registered parts are"):
        pathway(2, 2, 2, 3, parts=("nope",))
    with pytest.raises(TypeError, match="subclass of ctmhsa.circuits.parts.Part"):
        register_part("bad")(object)


def test_attention_areas_are_registered_parts():
    assert {"quadratic", "linear"} <= set(PARTS)
    assert pathway(2, 2, 2, 3, circuit="linear").meta["parts"] == ["linear"]
