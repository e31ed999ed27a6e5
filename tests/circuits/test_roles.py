"""Populations by role (:mod:`ctmhsa.circuits.roles`): every shipped circuit declares what each
population carries, and code asks a circuit for "the salience cells" instead of knowing names."""

import pytest

from ctmhsa.circuits import dale, perturb
from ctmhsa.circuits.builders import build
from ctmhsa.circuits.graph import Circuit, Population
from ctmhsa.circuits.roles import ROLES, register_role
from ctmhsa.circuits.transformer import model_circuit

pytestmark = pytest.mark.codegen_independent


def _shipped():
    blocks = [dict(H=2, dk=2, dv=2, dh=3), dict(H=1, dk=2, dv=2, dh=0)]
    return {
        "quadratic": build(3, 2, 2, 3, H=2),
        "quadratic cross causal P": build(3, 2, 2, 3, H=1, m=3, cross=True, P=2),
        "linear": build(3, 2, 2, 3, H=2, circuit="linear"),
        "linear unnormalised": build(3, 2, 2, 3, H=1, circuit="linear", normalize=False),
        "memory": build(1, 2, 2, 3, H=1, circuit="memory", normalize=False),
        "dale": dale.apply(build(2, 2, 2, 2, H=1)),
        "transformer": model_circuit(3, 4, blocks, classes=2),
    }


def test_every_population_of_every_shipped_circuit_has_a_registered_role():
    for what, c in _shipped().items():
        missing = [n for n, p in c.populations.items() if p.role not in ROLES]
        assert not missing, (what, missing)


def test_a_circuit_names_its_populations_by_role():
    c = _shipped()["quadratic"]
    assert c.by_role("salience") == ("l23",) and c.by_role("head_output") == ("l5pt",)
    assert c.by_role("output_relay") == ("nucleus2",) and c.by_role("normaliser") == ("interneuron",)
    assert c.by_role("kv_memory") == ()
    lin = _shipped()["linear"]
    assert (lin.by_role("kv_write"), lin.by_role("kv_read"), lin.by_role("z_read")) == (("outer",), ("readout",),
                                                                                       ("readout_z",))
    model = _shipped()["transformer"]       # one set per block, in block order
    assert model.by_role("output_relay") == ("b0_nucleus2", "b1_nucleus2")
    assert model.by_role("mlp_hidden") == ("b0_hidden",) and model.by_role("classes") == ("classes",)
    assert set(_shipped()["dale"].by_role("follower"))
    with pytest.raises(ValueError, match="role: expected one of the registered roles"):
        c.by_role("l23")


def test_a_new_circuit_brings_its_own_names_and_roles():
    role = register_role("toy_gate", "a toy circuit's gating cells")
    try:
        c = Circuit("toy")
        c.add_population(Population("relays", "relay", ("e",), (3,), area="thalamus", role="query_relay"))
        c.add_population(Population("gates", "l23", ("e",), (3,), role=role))
        assert c.by_role("toy_gate") == ("gates",) and c.by_role("query_relay") == ("relays",)
        assert c.to_dict()["populations"][1]["role"] == "toy_gate"
    finally:
        del ROLES[role]
    with pytest.raises(ValueError, match="population gates: unknown role 'toy_gate'"):
        Population("gates", "l23", ("e",), (3,), role="toy_gate")
    with pytest.raises(ValueError, match="give its meaning"):
        register_role("toy_gate", "")


def test_a_drive_relay_is_a_drive():
    c = perturb.apply(build(2, 2, 2, 2, H=1), [perturb.Drive("l23", 5.0)])
    assert c.by_role("drive") == (perturb.drive_source("l23", "soma"),)
