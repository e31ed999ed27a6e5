"""The key-value memory over a stream (``circuit="memory"``; Granier & Senn, arXiv 2504.06354v3).

Tokens arrive one per presentation. Per head, L2/3 holds a key-value memory ``M`` (dv x dk) in
the persistent activity of integrator cells, written by the current token's keys and values,
which the matrix thalamic projection carries; L5 cells encode the current query (core projection)
and are gain-modulated through their apical dendrites by the memory, giving ``ṽ_t = M_t φ(q_t)``;
L5 PT drives the higher-order nucleus through ``W_O`` as in the other circuits. The populations
are those of the linear key-value-memory circuit (``ctmhsa.circuits.builders._key_value_memory``)
for one token slot (``n = m = 1``; the part ``"memory"``, :class:`ctmhsa.circuits.builders.StreamMemory`),
with three changes::

    memory(_z)   kv_memory   (head, f, c, sign)   integrators: hold M (z) between writes, keep λ per write
    nucleus_gate relay       (g=1)                a declared timing signal: fires during the write
                                                  window of every presentation (the write gate)
    gate(_z)     nucleus_gate -> memory(_z).gate  opens the integrators' input
    bypass(_z)   outer(_z) -> readout(_z).apical  the current token's product, beside the memory

The timing of one presentation of token t (the relays switch ``WRITE_WINDOW`` after each
presentation boundary, see :mod:`ctmhsa.mapping.kvmemory`): the write cells and L5 settle on
token t while the integrators hold ``M_{t-1}`` still and L5's apical dendrites sum λ times it
with the write cells' ``v_t φ(k_t)ᵀ`` (the bypass): ``M_t``. The state is read at the end of that stretch; the gate then
opens for ``WRITE_WINDOW``: the integrators keep λ of themselves and add the write cells' settled
product (the write does not see their transient, and no gain is set from the tokens). The
forgetting thus acts at each write, λ = exp(-P/tau_mem) per token as a leak of 1/tau_mem would
over a presentation P, while the memory holds still between writes, so that L5 reads a constant
memory (a memory decaying under the read-out would be read late by every cell after it: 1.7 %
of ṽ at tau_mem = 1 s, measured). Neurons per head: those of the linear circuit at n = m = 1
(O(dk dv)), whatever the stream's length.

The escape level (unnormalised): the same timing, the integrators escape cells whose state
integrates their write cells' spikes while the gate is open; the gate relay fires in every step
of the window (p = 1) so that the gate is exactly open or shut (:class:`_GatedModel`). Population
coding (``P``) lowers the count noise; measured against the reference and the noise floor in
docs/memory.md ("Escape level").

Perturbations (:mod:`ctmhsa.circuits.perturb`, rate level) act as in the other circuits: a
``Silence("memory")`` zeroes the integrators' output seen by L5 (the recall synapses) while
their state, and the writes into it, run on, so L5 then reads the current token's product alone
(the bypass) and the whole context returns when the silence stops; a ``Silence("outer")``
across a write window removes that token from the memory for good. Token t's times on the
network clock: :func:`ctmhsa.mapping.kvmemory.token_times`.
"""

from __future__ import annotations

from dataclasses import dataclass

from ctmhsa.neurons.models import MODELS, CellModel, _escape, _lif, register

from .graph import Projection
from .roles import register_role

WRITE_GATE = register_role("write_gate", "a declared timing signal that opens the memory's integrators "
                                         "during each token's write", external=True)

__all__ = ["WRITE_WINDOW", "CELL", "GATE_CLOSE", "add_gate_and_bypass"]

WRITE_WINDOW = 0.02
"""Length (s) of the write gate after each token is read: a declared timing signal (a burst of
the gating input, e.g. cholinergic or matrix-thalamic, locked to the presentation), never
computed from the data. A whole number of steps at every level's default step (1 ms) and at
0.5 ms."""


CELL = ("kv_memory", ("soma", "gate"))
"""The integrators' cell type and compartments (the linear circuit's memory cells are followers)."""


@register("rate", "kv_memory")
def _rate_kv_memory():
    # L2/3 persistent activity: an integrator of its write cells' drive that holds its state
    # between writes. The gate (I_g = 1 while the gate relay fires, else 0) opens both its input
    # and its leak, so the memory forgets at each write (λ per token, as a leak of 1/tau_mem
    # would over a presentation) and holds still while L5 reads it. Forward Euler, so that the
    # leak per step is exactly 1 - leak dt (the encoder sets it from λ; leak = 0: no forgetting);
    # the rate is linear-rectified as the linear circuit's memory cells (ON/OFF pairs carry the sign).
    # tau_gate (= dt) is the escape level's gate current (_GatedModel); the rate level reads the gate's rate.
    return CellModel(
        equations="""
        dU/dt = I_g*(I_s/tau_w - leak*U) : volt
        r = rho*clip(U/u, 0, inf) : Hz
        tau_w : second (shared, constant)
        tau_gate : second (shared, constant)
        leak : Hz (shared, constant)
        rho : Hz (shared, constant)
        """,
        inputs={"soma": ("I_s", "volt"), "gate": ("I_g", "1")},
        parameters=("tau_w", "tau_gate", "leak", "rho"),
        observables=("U", "r"),
        method="euler",
    )


def _gate_inputs(eqs: str, gates, decay: str = "") -> str:
    """``eqs`` with each gate projection's current decaying over ``tau_gate`` (times ``decay``)
    and read as ``I_g`` = its spikes of the last step (weight dt: 1 per step of the window)."""
    for p in gates:
        for old, new in ((f"din_{p}/dt = -in_{p}/tau_syn : 1", f"din_{p}/dt = -{decay}in_{p}/tau_gate : 1"),
                         (f"I_g = in_{p} : 1", f"I_g = in_{p}/(k_syn*tau_gate) : 1")):
            if old not in eqs:
                raise ValueError(f"gate: the integrator's equations lack {old!r}")
            eqs = eqs.replace(old, new)
    return eqs


@dataclass(frozen=True)
class _GatedModel(CellModel):
    """The escape level's integrator: its gate input counts the gate relay's spikes of the last
    step (the relay fires in every step of the window, p = 1; a gate current that decays in one
    step, ``tau_gate = dt``), so the gate is exactly open or shut, as at the rate level, one step
    after the relay (:func:`ctmhsa.mapping.kvmemory.stream_tables`); its write input is the
    write cells' spikes through exponential synaptic currents, like every escape cell's."""

    def render(self, phi, projections_by_compartment, law="product"):
        eqs = _gate_inputs(CellModel.render(self, phi, projections_by_compartment, law),
                           projections_by_compartment.get("gate", []))
        # The cell is integrated by forward Euler (its leak per step exactly 1 - leak dt), which
        # decays its synaptic currents by 1 - dt/tau_syn per step, not exp(-dt/tau_syn) as the
        # spike increment k_syn assumes: the step-sampled mean current is then w r tau_syn k_syn,
        # 9.4 % below w r at dt = 1 ms and tau_syn = 5 ms (measured: the memory read 0.88-0.91 of
        # the reference). Dividing by k_syn tau_syn restores w r exactly.
        soma = projections_by_compartment.get("soma", [])
        if soma:
            total = " + ".join(f"in_{p}" for p in soma)
            eqs = eqs.replace(f"I_s = {total} : volt", f"I_s = ({total})/(k_syn*tau_syn) : volt")
        return eqs


MODELS[("escape", "kv_memory")] = _GatedModel(**vars(_escape(MODELS[("rate", "kv_memory")])))

GATE_CLOSE = 64.0
"""How many times faster than one step the lif integrators' gate current decays
(:class:`_LifGatedModel`): to ``exp(-64)`` of itself in one step, shut to 1e-27."""


@dataclass(frozen=True)
class _LifGatedModel(CellModel):
    """The lif level's integrator: the escape level's gated state ``U`` driving a conductance-based
    soma (:func:`ctmhsa.neurons.models._lif`, the ``kv_memory`` soma type: a 10 ms coupling).
    The lif cells are integrated by exponential Euler, which divides by a variable's own
    coefficient (0/0 for a leak gated shut) and integrates the synaptic currents exactly (so
    the write needs no Euler correction, unlike :class:`_GatedModel`). So ``U`` only integrates
    its write while the gate is open, ``U <- U + dt I_g (I_s + b_w) / tau_w``, and each spike of
    the gate relay applies the leak, ``U <- (1 - leak dt)^(w / tau_gate) U`` (:attr:`CellModel.on_spike`:
    the gating input shunts the persistent activity; the exponent is a synapse's share of the
    gate, 1 for one gate cell, 1/P for each of P copies, whose weights are dt/P): the escape level's steps, in another order
    with the same constants (:func:`ctmhsa.mapping.kvmemory.integrator_constants`: a leak in
    the step before each write). ``b_w`` cancels the write cells' baseline where the ON/OFF
    pairs do not (the normaliser's ``z``; :mod:`ctmhsa.mapping.baseline`). The gate current decays :data:`GATE_CLOSE` times faster
    than a step, so the gate is exactly open (1) in the step after each spike of the gate relay
    and shut otherwise, as at the escape level."""

    def render(self, phi, projections_by_compartment, law="product"):
        return _gate_inputs(CellModel.render(self, phi, projections_by_compartment, law),
                            projections_by_compartment.get("gate", []), f"{GATE_CLOSE!r}*")


def _lif_kv_memory() -> CellModel:
    model = _lif(MODELS[("rate", "kv_memory")], cell_type="kv_memory")
    euler = "dU/dt = I_g*(I_s/tau_w - leak*U) : volt"
    assert euler in model.equations
    eqs = model.equations.replace(euler, "dU/dt = I_g*(I_s + b_w)/tau_w : volt\nb_w : volt")
    return _LifGatedModel(**{**vars(model), "equations": eqs, "parameters": model.parameters + ("b_w",),
                             "on_spike": {"gate": "U_post = U_post*(1 - leak_post*dt)**(w/tau_gate_post)"}})


MODELS[("lif", "kv_memory")] = _lif_kv_memory()


@register("rate", "gate")
def _rate_gate():
    # the write gate: a timing signal locked to the presentation, at 1/dt in its window, else 0
    # (ctmhsa.mapping.kvmemory); at the escape level a relay that fires in every step of it
    return MODELS[("rate", "relay")]


MODELS[("escape", "gate")] = MODELS[("escape", "relay")]
MODELS[("lif", "gate")] = MODELS[("lif", "relay")]


def add_gate_and_bypass(c, ctx) -> None:
    """The memory circuit's own populations and projections, added to the linear circuit's at
    one token slot (built by :class:`ctmhsa.circuits.builders.StreamMemory`): the gate relay and
    its synapses onto the integrators, and the bypass from the write cells to L5's apical dendrites."""
    pre_s = tuple(f"pre.{a}" for a in ctx["pair"][0])
    ctx["pop"]("nucleus_gate", "gate", ("g",), (1,), area="thalamus", role=WRITE_GATE)
    c.add_projection(Projection("gate", "nucleus_gate", "memory", "gate", (), "ones", ()))
    c.add_projection(Projection("bypass", "outer", "readout", "apical",
                                (("head", "head"), ("f", "f"), ("c", "c")), "ones", pre_s + ctx["sign_w"]))
    if "memory_z" in c.populations:
        c.add_projection(Projection("gate_z", "nucleus_gate", "memory_z", "gate", (), "ones", ()))
        c.add_projection(Projection("bypass_z", "outer_z", "readout_z", "apical", (("head", "head"), ("f", "f"))))
