"""What each population does in the computation: its role, declared where it is built.

A population's name is the builder's (``l23``, ``outer``, ``b0_nucleus2``...); its cell type
says which neuron model it runs; its **role** says which quantity of the maths it carries, in
the paper's terms, so that code reading a circuit (rate tables, spike files, figures) can ask
for "the salience cells" or "the output relays" of any circuit instead of knowing its names
(:meth:`ctmhsa.circuits.graph.Circuit.by_role`). A new circuit registers the roles it brings
(:func:`register_role`) beside its builder.
"""

from __future__ import annotations

__all__ = ["ROLES", "EXTERNAL", "register_role", "check_role"]

ROLES: dict[str, str] = {}
"""Registered roles: name -> what the population carries."""

EXTERNAL: set = set()
"""Roles of populations driven from outside the circuit (the tokens' relays, a drive, a timing
signal): the only ones that may receive no projection (:meth:`ctmhsa.circuits.graph.Circuit.check`)."""


def register_role(name: str, meaning: str, external: bool = False) -> str:
    """Register role ``name`` (a new circuit's), carrying ``meaning``; ``external``: its cells are
    driven from outside the circuit (they need no incoming projection). Returns ``name``."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"role: expected an identifier, got {name!r}")
    if not isinstance(meaning, str) or not meaning:
        raise ValueError(f"role {name!r}: give its meaning (what the population carries)")
    ROLES[name] = meaning
    (EXTERNAL.add if external else EXTERNAL.discard)(name)
    return name


def check_role(role: str, population: str) -> None:
    """Refuse a role that is not registered (``""``: none declared), naming the population."""
    if role and role not in ROLES:
        raise ValueError(f"population {population}: unknown role {role!r}; registered roles are {sorted(ROLES)} "
                         "(ctmhsa.circuits.roles.register_role adds one)")


for _name, _meaning in {
    # the pathway of Algorithm 1 (one head per area)
    "query_relay": "thalamic core relays: the tokens whose queries the areas compute (x_i)",
    "key_value_relay": "thalamic matrix relays: the tokens whose keys and values the areas compute (x_j)",
    "value_relay": "matrix relays of the values alone, where they have cells of their own",
    "salience": "L2/3 pyramidal cells: the salience s_ij of query i and key j (q·k over the pooled normaliser)",
    "attention_value": "L5 IT cells: attention times value, y_ij = κ_ij v_j",
    "head_output": "L5 PT cells: a head's output ṽ_i = Σ_j y_ij",
    "normaliser": "a macrocolumn's interneurons: the pooled normaliser that divides its cells",
    "output_relay": "higher-order thalamic relays: the layer's output x̃ = Σ_h W_O ṽ",
    # the key-value memory (the linear circuit and the stream memory)
    "kv_write": "cells writing one key-value outer product φ(k_j) v_jᵀ into the memory",
    "kv_memory": "cells holding the key-value memory M (summed or integrated writes)",
    "kv_read": "cells reading the memory with the current query, M φ(q_i)",
    "z_write": "cells writing the normaliser's keys φ(k_j)",
    "z_memory": "cells holding the normaliser's sum z = Σ_j φ(k_j)",
    "z_read": "cells reading the normaliser, Z_i = zᵀ φ(q_i)",
    # transformer blocks
    "input_relay": "relays of a model's input tokens (the stream entering the first block)",
    "relay_normaliser": "reticular (TRN) pools that divide a relay set by its mean (the blocks' normalisation)",
    "mlp_relay": "relays of the MLP's normalised input",
    "mlp_hidden": "L6 corticothalamic cells: the MLP's hidden units relu(W1 x + b1)",
    "block_output": "relays of a block's output (MLP added to its residual stream)",
    "readout_pool": "relays pooling the last block's tokens for the class read-out",
    "readout_relay": "the pooled stream, normalised, read by the class cells",
    "classes": "cells of the class scores (logits)",
    # added to a built circuit
    "follower": "inhibitory followers of a cell under Dale's law (they fire with its every spike)",
    "drive": "relays of an external drive (a perturbation)",
}.items():
    register_role(_name, _meaning, external=_name in ("query_relay", "key_value_relay", "value_relay", "input_relay",
                                                     "drive"))
