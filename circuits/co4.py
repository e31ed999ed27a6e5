"""The Co4 attention area (``circuit="co4"``; Adeel, "Beyond Attention", seed 003): a rival theory
of cortical attention built from the same two-point neurons, as one registered area.

Per head, three populations of two-point neurons whose rate is the Cooperation Equation of their
basal receptive field ``R`` and apical context ``C`` (the seed's eq. 1, cell type
``"cooperation"``: ``rho_coop ReLU6(R² + 2R + C(1 + |R|))``) form the triadic loops, one cell per
(latent l, token j, dimension f), each modulating one of question, clue and hypothesis by the
mean of the other two (the choices where the seed is silent: docs/co4.md)::

    nucleus1     relay        (token=L, e, sign)     core relays: the latent queries (constant rates)
    nucleus1_kv  relay        (token=n, e, sign)     matrix relays of the tokens (clues)
    nucleus1_v   relay        (token=n, e, sign)     matrix relays of the tokens (hypotheses)
    coop_q       cooperation  (head, i=L, j=n, f)    basal: q_lf = WQ x_l, apical: (k_jf + v_jf)/2
    coop_k       cooperation  (head, i=L, j=n, f)    basal: k_jf,           apical: (q_lf + v_jf)/2
    coop_v       cooperation  (head, i=L, j=n, c)    basal: v_jc,           apical: (q_lc + k_jc)/2

The seed then averages ("after this interaction, they are averaged ... a simple attention map of
O(L×N)"): the modulated question ``q_m,l = mean_j``, clue ``k_m,j`` and hypothesis ``v_m,j = mean_l``
are the summed inputs of the linear key-value-memory circuit's cells (``ctmhsa.circuits.builders``,
``circuit="linear"``) in place of the relays' ``WQ x``, ``WK y``, ``WV y``::

    km_write(_z)  coop_k -> outer(_z).apical     mean over l: φ(k_m,jf) on the outer-product cells
    vm_write      coop_v -> outer.basal (±)      mean over l: ±v_m,jc
    qm_read(_z)   coop_q -> readout(_z).basal    mean over j: φ(q_m,lf) on the read-out cells

and the rest is that circuit's: the memory ``S = Σ_j v_m,j φ(k_m,j)ᵀ`` (and ``z``), the read-out by
the latents' modulated questions, the interneurons' division (normalised, the default), L5 PT and
nucleus 2 through ``W_O``. So the two theories share their attention and cells and differ in the
loops: ``ctmhsa.maths.co4.co4_attention`` is the reference. The latents are the queries' rows
(``X``, shape (L, de)) and the tokens the keys' and values' (``Y``): a Co4 block is the latents'
cross-attention over the tokens.

Every triad cell's basal and apical inputs come from different relay sets (q: core, k: matrix,
v: the values' matrix set), so that at the spiking levels ``R`` and ``C`` of one cell share no
relay spike (the covariance of a product's factors is a bias that does not fall with the window;
docs/design.md). Neurons per head: ``3 L n d`` triad cells plus the linear circuit's.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ctmhsa.neurons.laws import law_expression
from ctmhsa.neurons.models import MODELS, _escape, _two_compartment, register

from .builders import _area_args, _key_value_memory
from .graph import Projection
from .parts import Part, register_part
from .roles import register_role

__all__ = ["TRIAD", "LATENT_RELAY", "CELL_TYPE", "Co4Area", "add_triad", "attention_inputs", "triad_weights", "triad_memory"]

CELL_TYPE = "cooperation"
"""The triad cells' type: a two-point neuron following the seed's Cooperation Equation."""

TRIAD = {"coop_q": register_role("modulated_question", "two-point neurons: a latent's question (basal) "
                                                       "modulated by a token's clue and hypothesis (apical)"),
         "coop_k": register_role("modulated_clue", "two-point neurons: a token's clue (basal) modulated by a "
                                                   "latent's question and the token's hypothesis (apical)"),
         "coop_v": register_role("modulated_hypothesis", "two-point neurons: a token's hypothesis (basal) "
                                                         "modulated by a latent's question and the token's clue "
                                                         "(apical)")}
"""Triad population -> its role."""

LATENT_RELAY = register_role("latent_relay", "relays that carry a Co4 model's learned latent queries at constant "
                                             "rates", external=True)


@register("rate", CELL_TYPE)
def _rate_cooperation():
    # basal: the receptive field R (signed potential u R), apical: the context C (signed, u C);
    # the soma follows the basal potential and fires rho ReLU6(R² + 2R + C(1 + |R|)) (seed 003, eq. 1)
    return _two_compartment(shunted=False, gain=law_expression("co4"), apical_bias=False)


# At the escape level the cells are not folded: their rates feed compartments whose phi is
# corrected for its inputs' shot noise (the outer-product cells' apical, the read-out cells'
# basal dendrites), which reads every presynaptic cell's intensity, and a folded cell's intensity
# lives in its class's group
MODELS[("escape", CELL_TYPE)] = dataclasses.replace(_escape(MODELS[("rate", CELL_TYPE)]), folds=())

# (receptive field, its relays and weights; the two context halves, each (relays, weights)):
# the field's feature axis is "f" for questions and clues, "c" for hypotheses (the outer-product
# cells' value axis), so that their averages match the linear circuit's cells
_LOOPS = (
    ("coop_q", "f", ("nucleus1", "WQ"), (("nucleus1_kv", "WK"), ("nucleus1_v", "WV"))),
    ("coop_k", "f", ("nucleus1_kv", "WK"), (("nucleus1", "WQ"), ("nucleus1_v", "WV"))),
    ("coop_v", "c", ("nucleus1_v", "WV"), (("nucleus1", "WQ"), ("nucleus1_kv", "WK"))),
)
_TOKEN = {"nucleus1": "i", "nucleus1_kv": "j", "nucleus1_v": "j"}   # which triad axis a relay set's token is


def add_triad(c, ctx) -> None:
    """The triad's populations and their relay inputs (module docstring): per loop, a basal
    projection ``<pop>_rf`` and two apical ones ``<pop>_ctx_q|k|v`` (each half of the context)."""
    m, pair = c.meta, ctx["pair"]
    pre_s = tuple(f"pre.{a}" for a in pair[0])
    ctx["pop"]("nucleus1_v", "relay", ("token", "e") + pair[0], (m.m, m.de) + pair[1], area="thalamus",
               role="value_relay")
    for name, axis, (rf, w_rf), halves in _LOOPS:
        ctx["pop"](name, CELL_TYPE, ("head", "i", "j", axis), (m.H, m.n, m.m, m.dk), ("basal", "apical"),
                   role=TRIAD[name])
        index = ("post.head", f"post.{axis}", "pre.e") + pre_s
        pathway = lambda relays: "core" if relays == "nucleus1" else "matrix"   # noqa: E731
        c.add_projection(Projection(f"{name}_rf", rf, name, "basal", (("token", _TOKEN[rf]),), w_rf, index,
                                    pathway(rf)))
        for relays, w in halves:
            c.add_projection(Projection(f"{name}_ctx_{w[1].lower()}", relays, name, "apical",
                                        (("token", _TOKEN[relays]),), w, index, pathway(relays)))


def attention_inputs(c, ctx) -> dict:
    """The linear circuit's inputs taken from the triad's averages (the module docstring's
    ``km_write``, ``vm_write``, ``qm_read`` and their ``_z`` twins), by the linear circuit's input:
    ``"k"``, ``"v"``, ``"q"``, ``"kz"``, ``"qz"`` -> a function of the target population giving
    the projection."""
    sign_w = ctx["sign_w"]
    return {
        "k": lambda tgt: Projection("km_write", "coop_k", tgt, "apical", (("head", "head"), ("j", "j"), ("f", "f"))),
        "kz": lambda tgt: Projection("km_write_z", "coop_k", tgt, "apical", (("head", "head"), ("j", "j"), ("f", "f"))),
        "v": lambda tgt: Projection("vm_write", "coop_v", tgt, "basal", (("head", "head"), ("j", "j"), ("c", "c")),
                                    "ones", sign_w),
        "q": lambda tgt: Projection("qm_read", "coop_q", tgt, "basal", (("head", "head"), ("i", "i"), ("f", "f"))),
        "qz": lambda tgt: Projection("qm_read_z", "coop_q", tgt, "basal", (("head", "head"), ("i", "i"), ("f", "f"))),
    }


def triad_weights(WQ, WK, WV) -> dict:
    """The triad's relay weights per unit of ``u / rho_in``: each receptive field its own
    projection's, each context half half of its own (the context is the two halves' mean)."""
    W = {"WQ": np.asarray(WQ, float), "WK": np.asarray(WK, float), "WV": np.asarray(WV, float)}
    out = {}
    for name, _, (_, w_rf), halves in _LOOPS:
        out[f"{name}_rf"] = W[w_rf]
        for _, w in halves:
            out[f"{name}_ctx_{w[1].lower()}"] = 0.5 * W[w]
    return out


@register_part("co4")
class Co4Area(Part):
    """The Co4 area (module docstring; values, decoding and drive registered by
    :mod:`ctmhsa.mapping.triad`): the triad of cooperation cells, then the linear circuit's memory
    and read-out fed by the triad's averages."""

    populations = ("nucleus1_v",) + tuple(TRIAD) + ("outer", "outer_z", "memory", "memory_z", "readout", "readout_z")
    area = integrators = dale = True    # dale: its signed relay and hypothesis projections get followers
    normalize = True        # the seed normalises its attention (a softmax)
    stages = ("q", "k", "v", "q_m", "k_m", "v_m", "S", "z", "Z", "v_tilde", "x_tilde")
    levels = ("rate", "escape")
    no_causal = ("the Co4 block's latents attend to every token (the seed's permutation-invariant "
                 "latent attention); it has no causal variant")

    def check_options(self, co):
        for name, ok, why in (
                ("law", "product", "its L5 read-out cells multiply; the triad's cells follow the seed's "
                                   "Cooperation Equation by construction"),
                ("signed", "onoff", "its signed quantities use the on/off code")):
            value = getattr(co, name)
            if not isinstance(value, str) or value != ok:
                raise ValueError(f"{name}: {value!r} does not apply to circuit='co4' ({why}); leave it at {ok!r}")

    def build(self, c, ctx):
        if c.meta.dk != c.meta.dv:
            raise ValueError(f"dv: the triadic loops are elementwise, so questions, clues and hypotheses share one "
                             f"width (WQ, WK, WV of one shape); got dk = {c.meta.dk}, dv = {c.meta.dv}")
        if not c.meta.cross:
            raise ValueError("Y: the Co4 area's queries are its latents (X, L rows) and its keys and values the "
                             "tokens (Y); give both (cross-attention)")
        add_triad(c, ctx)
        return _key_value_memory(*_area_args(c, ctx), inputs=attention_inputs(c, ctx))

    def reference(self, arrays, phi, causal, normalize, forget=1.0):
        from ctmhsa.maths.co4 import co4_attention

        st = co4_attention(arrays["X"], arrays["WQ"], arrays["WK"], arrays["WV"], arrays["WO"], Y=arrays.get("Y"),
                           phi=phi, normalize=normalize)
        st.update(triad_memory(st["k_m"], st["v_m"], phi))
        return {k: st[k] for k in self.stages}


def triad_memory(k_m, v_m, phi: str) -> dict:
    """The key-value memory the triad's averages write: ``S = Σ_j φ(k_m,j) v_m,jᵀ`` ``(H, d, d)``
    and ``z = Σ_j φ(k_m,j)`` ``(H, d)`` (what the linear circuit's memory cells hold)."""
    from ctmhsa.maths.reference import FEATURE_MAPS

    fk = FEATURE_MAPS[phi][0](np.asarray(k_m, float))
    return dict(S=np.einsum("hmc,hmd->hcd", fk, np.asarray(v_m, float)), z=fk.sum(axis=1))
