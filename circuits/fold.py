"""Folding: deterministic compartments with identical inputs are simulated once.

In Algorithm 1's circuit many compartments receive exactly the same synapses with exactly the
same weights: every macrocolumn's copy of token j's key dendrite (L2/3 apical, matrix
projection), every microcolumn's copy of macrocolumn i's query dendrite (L2/3 basal, core
projection, and its soma, shunted by the same interneurons), every macrocolumn's copy of token
j's value dendrite (L5 IT basal) and every L5 IT cell of a microcolumn's attention dendrite.
Their synaptic currents and potentials are deterministic functions of the same presynaptic
spikes, so their trajectories are identical, number for number. The builder simulates each such
class of compartments once and gives every cell a Brian2 *linked variable* to its class; each
cell keeps its own spike generation (its own random draws, threshold, reset), so spikes are
unchanged — the same seed gives the same spikes folded or not (tested on every level).

What may fold is declared by the cell model (:class:`ctmhsa.neurons.models.Fold`: the variables, the
compartments whose synaptic inputs drive them, and their parameters); which cells share a class
is derived from the circuit's structure alone: two cells are in one class when, for every
projection onto the folded compartments, they receive synapses from the same presynaptic cells
with the same weight indices (read off the projection's connection rule, see
:func:`fold_classes`). The weights themselves never enter (they are run arguments on the
standalone device), so the classes are a property of the shape. Folded parameters and initial
values must then be equal within a class; :func:`class_values` checks this for every run.
"""

from __future__ import annotations

import hashlib
import json

import numpy as np

from ctmhsa.neurons.models import get_model

__all__ = ["fold_classes", "split_equations", "class_values", "fold_plan", "simulated_pairs",
           "simulated_out_degree", "simulated_synapse_count"]


def fold_classes(circuit, pop: str, compartments: tuple, projections: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Classes of cells of ``pop`` with identical synaptic input on ``compartments``.

    A projection connects every presynaptic cell whose matched axes equal the postsynaptic
    cell's (:func:`ctmhsa.circuits.graph.connect_pairs`), with a weight indexed by presynaptic and
    postsynaptic axes. So a cell's synapses on a projection — which presynaptic cells, which
    weight entries — are determined by its values on the projection's postsynaptic match axes
    and postsynaptic weight-index axes: cells that agree on those axes for every projection onto
    ``compartments`` receive identical input, whatever the weights. This needs the axes only
    (memory O(N), no synapse list).

    Parameters
    ----------
    circuit : Circuit
        The description.
    pop : str
        Target population.
    compartments : tuple of str
        The compartments folded together.
    projections : list of str
        Names of the projections onto those compartments.

    Returns
    -------
    cls : ndarray of int, shape (N,)
        Class of every cell, numbered in order of each class's first cell.
    reps : ndarray of int, shape (K,)
        The first cell of every class (its representative).
    """
    post = circuit.populations[pop]
    cols = []
    for pname in sorted(projections):
        proj = circuit.projections[pname]
        if proj.compartment not in compartments:
            continue
        cols += [post.axis(b) for _, b in proj.match]
        cols += [post.axis(sel.split(".", 1)[1]) for sel in proj.weight_index if sel.startswith("post.")]
    if not cols or post.N == 0:   # no input depends on the cell: all cells alike
        return np.zeros(post.N, np.int64), np.zeros(min(post.N, 1), np.int64)
    _, first, cls = np.unique(np.stack(cols, axis=1), axis=0, return_index=True, return_inverse=True)
    # renumber classes in order of their first cell
    rank = np.empty(len(first), np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(first))
    return rank[cls.ravel()], np.sort(first).astype(np.int64)


def split_equations(equations, moved: set[str], linked: tuple[str, ...], cached: tuple[str, ...] = ()):
    """Split Brian2 ``equations`` into a folded group's and the cells' remaining equations.

    Parameters
    ----------
    equations : str or brian2.Equations
        The cell's full equations.
    moved : set of str
        Names (state variables, subexpressions, parameters) that move to the folded group.
    linked : tuple of str
        Moved names the cells keep access to, as linked variables.
    cached : tuple of str
        Moved subexpressions that become parameters of the folded group (the caller updates them
        with the returned expressions); the cells link to them too.

    Returns
    -------
    folded, cells : brian2.Equations
        Equations of the folded group and of the cells.
    updates : dict
        ``cached`` name -> its expression (code to run in the folded group).

    Raises
    ------
    ValueError
        If a moved equation depends on a cell variable that does not move (the fold
        declaration would not be exact).
    """
    from brian2 import Equations
    from brian2.equations.equations import PARAMETER, SingleEquation

    eqs = equations if isinstance(equations, Equations) else Equations(equations)
    names = set(eqs.names)
    folded, cells, updates = [], [], {}
    for q in eqs.ordered:
        if q.varname in moved or q.varname in cached:
            needs = (q.identifiers if q.expr is not None else set()) & names
            if not needs <= moved:
                raise ValueError(f"fold: {q.varname} depends on {sorted(needs - moved)}, which do not fold with it")
            if q.varname in cached:
                if q.type != "subexpression":
                    raise ValueError(f"fold: cached {q.varname} is not a subexpression")
                updates[q.varname] = (f"{q.varname} = {q.expr.code}", q.identifiers & set(cached))
                q = SingleEquation(PARAMETER, q.varname, dimensions=q.dim, var_type=q.var_type)
            folded.append(q)
        else:
            cells.append(q)
    cells += [SingleEquation(PARAMETER, v, dimensions=eqs[v].dim, var_type=eqs[v].var_type, flags=["linked"])
              for v in (*linked, *cached)]
    return Equations(folded), Equations(cells), _in_order(updates, cached)


def _in_order(updates: dict, cached: tuple) -> dict:
    """``updates`` (name -> (code, the cached names it reads)) as name -> code, in the order of
    ``cached`` with each after what it reads. Brian2 orders subexpressions topologically but
    breaks ties by set order, which varies with Python's string hashing from process to process:
    the generated code then changed between runs of one cached standalone project and ``make``
    compiled it again (8-20 s a run, version 0.15)."""
    out, left = {}, [n for n in cached if n in updates]
    while left:
        name = next((n for n in left if updates[n][1] - {n} <= out.keys()), left[0])
        out[name] = updates[name][0]
        left.remove(name)
    return out


def class_values(value, cls: np.ndarray, reps: np.ndarray, what: str):
    """Values of a folded parameter per class (a scalar stays a scalar).

    Raises ``ValueError`` if cells of one class were given different values.
    """
    arr = np.asarray(value, dtype=float)
    if arr.ndim == 0:
        return arr
    per_class = arr[reps]
    if not np.array_equal(arr, per_class[cls]):
        bad = int(np.flatnonzero(arr != per_class[cls])[0])
        raise ValueError(f"{what}: cell {bad} has {float(arr[bad])!r} but shares its compartment with cell "
                         f"{int(reps[cls[bad]])} ({float(per_class[cls[bad]])!r}); pass fold=False to simulate "
                         f"every compartment separately")
    return per_class


def fold_plan(circuit, level: str) -> dict:
    """Population -> ``[(fold, cls, reps)]``: the folds of its cell model that share anything
    (fewer classes than cells; see :func:`ctmhsa.circuits.fold.fold_classes`).

    Spiking levels only: at the rate level outgoing synapses read the source's rate expression,
    and Brian2 synapses cannot read a group's linked variables.
    """
    key = hashlib.sha256(json.dumps(dict(c=circuit.to_dict(), level=level), sort_keys=True,
                                    default=str).encode()).hexdigest()
    if key not in _FOLD_PLANS:      # 0.15 s at barrel size, asked for three times per run
        if len(_FOLD_PLANS) >= 4:
            _FOLD_PLANS.pop(next(iter(_FOLD_PLANS)))
        _FOLD_PLANS[key] = _fold_plan(circuit, level)
    return _FOLD_PLANS[key]


_FOLD_PLANS: dict = {}


def _fold_plan(circuit, level: str) -> dict:
    incoming: dict[str, dict[str, list[str]]] = {name: {} for name in circuit.populations}
    for pname, proj in circuit.projections.items():
        incoming[proj.target].setdefault(proj.compartment, []).append(pname)
    plan = {}
    for name, pop in circuit.populations.items():
        model = get_model(level, pop.cell_type)
        if not model.spiking:
            continue
        for f in model.folds:
            projs = [p for comp in f.compartments for p in incoming[name].get(comp, [])]
            cls, reps = fold_classes(circuit, name, f.compartments, projs)
            if len(reps) < pop.N:
                plan.setdefault(name, []).append((f, cls, reps))
    return plan


def _fold_of(plan: dict, proj):
    """``(fold, cls, reps)`` of the fold that takes ``proj``'s synapses, or ``None``."""
    return next((p for p in plan.get(proj.target, []) if proj.compartment in p[0].compartments), None)


def simulated_pairs(circuit, proj, plan: dict):
    """Synapses Brian2 simulates for projection ``proj`` under fold ``plan``.

    Returns ``(i, j, post, fold)``: presynaptic cells, postsynaptic cells of the description,
    indices in the target group (the class when the compartment is folded: one synapse per class,
    the representative cell's) and the fold targeted (``None``: the population itself).
    """
    f = _fold_of(plan, proj)
    if f is None:
        i, j = circuit.pairs(proj)
        return i, j, j, None
    fold, cls, reps = f
    i, j = circuit.pairs(proj, post_cells=reps)
    return i, j, cls[j], fold


def simulated_out_degree(circuit, proj, plan: dict) -> np.ndarray:
    """Out-degree of every source cell of ``proj`` in the simulated network (from the axes)."""
    f = _fold_of(plan, proj)
    return circuit.out_degree(proj, post_cells=None if f is None else f[2])


def simulated_synapse_count(circuit, plan: dict) -> int:
    """Synapses Brian2 holds under fold ``plan`` (see :func:`simulated_pairs`), from the axes."""
    return sum(int(simulated_out_degree(circuit, proj, plan).sum()) for proj in circuit.projections.values())
