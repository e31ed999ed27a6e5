"""The stages of Algorithm 1 that the simulator decodes, in one table: their order, the symbol
each is printed with, their names and the cells each is read from.

Every place that names a stage takes it from here: the metrics of
:class:`ctmhsa.sims.result.SimulationResult` (in :data:`STAGE_ORDER`), the table ``ctmhsa run``
prints, every figure (panel titles, legends, captions) and the stage tables of ``docs/``. This
module imports nothing (no numpy, nothing of the project).

===========  ======  ====================  ========================================  =================
key          symbol  name                  long name                                 read from
===========  ======  ====================  ========================================  =================
``q``        q       query                 query                                     L2/3 basal
``k``        k       key                   key                                       L2/3 apical
``v``        v       value                 value                                     L5 IT basal
``q_m``      q_m     modulated question    question after the triadic loops (Co4)    cooperation cells
``k_m``      k_m     modulated clue        clue after the triadic loops (Co4)        cooperation cells
``v_m``      v_m     modulated hypothesis  hypothesis after the triadic loops (Co4)  cooperation cells
``s``        s       salience              salience                                  L2/3 soma
``kappa``    κ       attention             attention weight                          L2/3 soma
``S``        S       memory                key-value memory                          memory cells
``z``        z       key sum               key sum                                   memory cells
``Z``        Z       normaliser            normaliser                                L2/3 division
``y``        y       modulated value       attention-modulated value                 L5 IT soma
``v_tilde``  ṽ       context value         context-aware value                       L5 PT
``x_tilde``  x̃       output                attention output                          nucleus 2
===========  ======  ====================  ========================================  =================

``S`` and ``z`` are the key-value-memory circuit's (``circuit="linear"``), in place of ``s``,
``kappa`` and ``y``; ``q_m``, ``k_m`` and ``v_m`` the Co4 area's (``circuit="co4"``: the triadic
loops' averages, which that memory stores and reads).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["Stage", "STAGE_TABLE", "STAGE_ORDER", "CIRCUIT_STAGES", "STAGE_LABELS", "stage", "symbol", "title",
           "BLOCK_TABLE", "BLOCK_STAGES", "CO4_BLOCK_STAGES"]


class Stage(NamedTuple):
    """One stage: ``key`` (as in ``res.stages``, ``metrics.json``, ``stages.npz``), ``symbol``
    (as printed), ``name`` (short name), ``long`` (long name) and ``cells`` (where it is read)."""

    key: str
    symbol: str
    name: str
    long: str
    cells: str


STAGE_TABLE = {s.key: s for s in (
    Stage("q", "q", "query", "query", "L2/3 basal"),
    Stage("k", "k", "key", "key", "L2/3 apical"),
    Stage("v", "v", "value", "value", "L5 IT basal"),
    Stage("q_m", "q_m", "modulated question", "question after the triadic loops (Co4)", "cooperation cells"),
    Stage("k_m", "k_m", "modulated clue", "clue after the triadic loops (Co4)", "cooperation cells"),
    Stage("v_m", "v_m", "modulated hypothesis", "hypothesis after the triadic loops (Co4)", "cooperation cells"),
    Stage("s", "s", "salience", "salience", "L2/3 soma"),
    Stage("kappa", "κ", "attention", "attention weight", "L2/3 soma"),
    Stage("S", "S", "memory", "key-value memory", "memory cells"),
    Stage("z", "z", "key sum", "key sum", "memory cells"),
    Stage("Z", "Z", "normaliser", "normaliser", "L2/3 division"),
    Stage("y", "y", "modulated value", "attention-modulated value", "L5 IT soma"),
    Stage("v_tilde", "ṽ", "context value", "context-aware value", "L5 PT"),
    Stage("x_tilde", "x̃", "output", "attention output", "nucleus 2"),
)}
"""Every stage by key, in circuit order."""

BLOCK_TABLE = {s.key: s for s in (
    Stage("x", "x", "stream", "residual stream in", "stream relays"),
    Stage("x_norm", "N(x)", "normalised stream", "normalised stream", "TRN-shunted relays"),
    Stage("h", "h", "residual", "stream after attention, x + x̃", "nucleus 2"),
    Stage("h_norm", "N(h)", "normalised residual", "normalised residual", "MLP relays"),
    Stage("hidden", "a", "hidden", "MLP hidden units, relu(W1 N(h) + b1)", "L6 CT"),
    Stage("out", "x'", "block output", "stream out, h + W2 a + b2", "output nucleus"),
    Stage("latents_norm", "N(λ)", "normalised latents", "a Co4 model's latent queries, normalised", "query relays"),
)}
"""The stages a transformer block adds to its attention's (:mod:`ctmhsa.circuits.transformer`)."""

STAGE_ORDER = tuple(STAGE_TABLE)
"""Stages in circuit order (thalamus → L2/3 → interneurons → L5 IT → L5 PT → thalamus; the
linear circuit's memory S, z in place of s, κ, y)."""

_CO4 = ("q_m", "k_m", "v_m")
CIRCUIT_STAGES = {"quadratic": tuple(k for k in STAGE_ORDER if k not in ("S", "z") + _CO4),
                  "linear": tuple(k for k in STAGE_ORDER if k not in ("s", "kappa", "y") + _CO4)}
"""The stages each circuit computes and compares (the linear circuit's memory S, z in place of
s, κ, y; the Co4 area's modulated question, clue and hypothesis are its own)."""

BLOCK_STAGES = ("x", "x_norm", "q", "k", "v", "s", "kappa", "Z", "y", "v_tilde", "x_tilde", "h", "h_norm",
                "hidden", "out")
"""Stages of one transformer block, in circuit order (``x_tilde`` only in the reference: the
circuit carries ``h = x + x̃`` in nucleus 2)."""

CO4_BLOCK_STAGES = ("latents_norm", "q_m", "k_m", "v_m", "S", "z")
"""What a Co4 model's block adds to them (``h = latents + x̃``; :mod:`ctmhsa.circuits.co4`)."""

STAGE_LABELS = {k: (s.symbol, f"{s.name}, {s.cells}") for k, s in STAGE_TABLE.items()}
"""Symbol of every stage and what it is, where it is read: ``(symbol, "name, cells")``, e.g.
``STAGE_LABELS["v_tilde"] == ("ṽ", "context value, L5 PT")``."""


def stage(key: str) -> Stage:
    """The :class:`Stage` of ``key`` (``KeyError`` naming the known keys if there is none)."""
    try:
        return STAGE_TABLE[key] if key in STAGE_TABLE else BLOCK_TABLE[key]
    except KeyError:
        raise KeyError(f"stage: unknown stage {key!r}; known: {', '.join(STAGE_ORDER + tuple(BLOCK_TABLE))}") from None


def symbol(key: str) -> str:
    """The symbol of stage ``key`` (``"κ"``, ``"ṽ"``, ``"x̃"``, ...)."""
    return stage(key).symbol


def title(key: str, long: bool = False) -> str:
    """A stage as a panel title or a legend names it: ``"ṽ: context value (L5 PT)"`` (``long``:
    ``"ṽ: context-aware value (L5 PT)"``)."""
    s = stage(key)
    return f"{s.symbol}: {s.long if long else s.name} ({s.cells})"
