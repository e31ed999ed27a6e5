"""Folding identical deterministic compartments (ctmhsa.circuits.fold) is exact: same spikes, same stages."""

import numpy as np
import pytest

from ctmhsa.circuits.builders import build, pathway
from ctmhsa.circuits.fold import class_values, fold_classes, split_equations
from ctmhsa.circuits.fold import fold_plan, simulated_pairs
from ctmhsa.sims import simulate_mhsa
from conftest import random_problem


@pytest.mark.codegen_independent
def test_fold_classes_of_algorithm_1():
    n, dk, dv, de = 3, 2, 4, 5
    c = pathway(n, dk, dv, de, H=2)
    l23 = c.populations["l23"]        # axes (head, i, j, c)
    # query dendrite and shunted soma: one per (head, i, c), shared by every microcolumn j
    cls, reps = fold_classes(c, "l23", ("basal", "soma"), ["core_q", "shunt"])
    assert len(reps) == 2 * n * dk
    key = l23.axis("head") * 100 + l23.axis("i") * 10 + l23.axis("c")
    assert all(len(set(key[cls == k])) == 1 for k in range(len(reps)))
    # key dendrite: one per (head, j, c), shared by every macrocolumn i
    cls, reps = fold_classes(c, "l23", ("apical",), ["matrix_k"])
    key = l23.axis("head") * 100 + l23.axis("j") * 10 + l23.axis("c")
    assert len(reps) == 2 * n * dk and all(len(set(key[cls == k])) == 1 for k in range(len(reps)))
    # attention dendrite of L5 IT: one per microcolumn (head, i, j), shared by its dv ON/OFF cells
    cls, reps = fold_classes(c, "l5it", ("apical",), ["attention"])
    assert len(reps) == 2 * n * n
    # L5 PT: every cell sums its own microcolumns: nothing to share
    cls, reps = fold_classes(c, "l5pt", ("soma",), ["it_pt"])
    assert len(reps) == c.populations["l5pt"].N
    assert np.array_equal(reps, np.unique(reps)) and np.array_equal(cls[reps], np.arange(len(reps)))


@pytest.mark.codegen_independent
def test_causal_mask_splits_classes():
    # with a causal mask macrocolumn i has only microcolumns j <= i: their query dendrites are
    # still shared, and absent cells do not join any class
    c = build(3, 2, 2, 2, causal=True)
    cls, reps = fold_classes(c, "l23", ("basal", "soma"), ["core_q", "shunt"])
    assert len(reps) == 3 * 2


def _inputs_by_cell(c, pop, compartments):
    """Brute force: every cell's sorted list of (projection, pre cell, weight index)."""
    rows = {k: [] for k in range(c.populations[pop].N)}
    for name, proj in sorted(c.projections.items()):
        if proj.target != pop or proj.compartment not in compartments:
            continue
        i, j = c.pairs(proj)
        w = c.weight_indices(proj, i, j)
        for k in range(len(i)):
            rows[int(j[k])].append((name, int(i[k])) + tuple(int(x[k]) for x in w))
    return {k: tuple(sorted(v)) for k, v in rows.items()}


VARIANTS = [dict(), dict(causal=True), dict(m=2, cross=True), dict(P=2), dict(normalize=False),
            dict(skip=True), dict(circuit="linear"), dict(circuit="linear", m=2, cross=True)]


@pytest.mark.codegen_independent
@pytest.mark.parametrize("kw", VARIANTS, ids=lambda kw: "-".join(f"{k}={v}" for k, v in kw.items()) or "default")
def test_fold_classes_are_exactly_the_cells_with_identical_input(kw):
    # the rule-based classes against the synapse lists themselves: within a class every cell
    # receives the same synapses with the same weight entries, and no two classes do
    c = build(3, 2, 3, 2, H=2, **kw)
    plan = fold_plan(c, "escape")
    assert plan, "something folds in every variant"
    for pop, folds in plan.items():
        for f, cls, reps in folds:
            sig = _inputs_by_cell(c, pop, f.compartments)
            for cell, k in enumerate(cls):
                assert sig[cell] == sig[int(reps[k])], (pop, f.name, cell)
            assert len({sig[int(r)] for r in reps}) == len(reps), (pop, f.name)
            # the simulated synapses are the representatives' own
            for name, proj in c.projections.items():
                if proj.target == pop and proj.compartment in f.compartments:
                    i, j, post, g = simulated_pairs(c, proj, plan)
                    assert g is f and np.array_equal(post, cls[j]) and set(j) == set(reps.tolist())


@pytest.mark.codegen_independent
def test_split_equations_refuses_an_inexact_fold():
    eqs = "dV/dt = (I - V)/tau : volt\nI = in_a : volt\nin_a : volt\ndW/dt = (V - W)/tau : volt"
    folded, cells, _ = split_equations(eqs, {"V", "I", "in_a"}, ("V",))
    assert set(folded.names) == {"V", "I", "in_a"} and set(cells.names) == {"W", "V"}
    folded, cells, updates = split_equations(eqs + "\nf = exp(V/volt) : 1\ng = f*W/volt : 1",
                                             {"V", "I", "in_a"}, ("V",), cached=("f",))
    assert updates == {"f": "f = exp(V/volt)"} and "f" in cells.names and "g" in cells.names
    assert folded["f"].type == "parameter"
    with pytest.raises(ValueError, match="W depends on"):
        split_equations(eqs, {"W"}, ("W",))


@pytest.mark.codegen_independent
def test_cached_updates_come_in_one_order_whatever_the_string_hashing():
    """A fold's cached subexpressions are updated in their declared order, each after those it
    reads, the same in every process: Brian2's own order broke ties by set order, which changed
    with PYTHONHASHSEED, and a cached standalone project then compiled again (version 0.15)."""
    import json
    import subprocess
    import sys

    code = ("import json\nfrom ctmhsa.circuits.fold import split_equations\n"
            "eqs = 'dV/dt = -V/tau : volt\\na = exp(V/volt) : 1\\nb = V/volt + 1 : 1\\nc = a*b : 1\\n"
            "d = 2*V/volt : 1'\n"
            "print(json.dumps(list(split_equations(eqs, {'V', 'a', 'b'}, ('V',), cached=('d', 'c', 'b', 'a'))[2])))")
    orders = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={**__import__("os").environ, "PYTHONHASHSEED": str(h)}).stdout
              for h in range(6)}
    assert len(orders) == 1 and json.loads(orders.pop()) == ["d", "b", "a", "c"]   # c after a and b


@pytest.mark.codegen_independent
def test_class_values_requires_equal_values_within_a_class():
    cls, reps = np.array([0, 0, 1]), np.array([0, 2])
    np.testing.assert_array_equal(class_values([1.0, 1.0, 2.0], cls, reps, "b"), [1.0, 2.0])
    with pytest.raises(ValueError, match="b: cell 1 has 3.0"):
        class_values([1.0, 3.0, 2.0], cls, reps, "b")


def _same_spikes(a, b):
    assert set(a.spikes) == set(b.spikes)
    for p in a.spikes:
        for k in (0, 1):
            np.testing.assert_array_equal(a.spikes[p][k], b.spikes[p][k], err_msg=p)
    for st in a.stages:
        np.testing.assert_array_equal(a.stages[st], b.stages[st], err_msg=st)


@pytest.mark.brian2
@pytest.mark.parametrize("neuron, circuit, extra", [("escape", "quadratic", {}),
                                                    pytest.param("lif", "quadratic", {}, marks=pytest.mark.long),
                                                    ("escape", "linear", {}),
                                                    # interneurons folded with their phases spread
                                                    ("escape", "quadratic", dict(firing="population", P=2))])
def test_folded_and_unfolded_runs_give_the_same_spikes(neuron, circuit, extra):
    X, _, WQ, WK, WV, WO = random_problem(seed=5, n=3, H=2, dk=2, dv=3, de=3)
    kw = dict(neuron=neuron, duration=0.3, warmup=0.1, seed=2, record_spikes=True, codegen="numpy",
              circuit=circuit, **extra)
    a = simulate_mhsa(X, WQ, WK, WV, WO, fold=True, **kw)
    b = simulate_mhsa(X, WQ, WK, WV, WO, fold=False, **kw)
    assert a.config["fold"] and not b.config["fold"]
    assert sum(len(a.spikes[p][0]) for p in a.spikes) > 100
    _same_spikes(a, b)


@pytest.mark.brian2
def test_a_lif_stream_folded_and_unfolded_gives_the_same_spikes():
    """A stream's relays change their rates at each presentation, and with them the spike-noise
    variance the L2/3 compartments sum from them: folded, the lif somata read it a step late (and
    parted from the unfolded run) until the sum ran before the cells."""
    X, _, WQ, WK, WV, WO = random_problem(seed=5, n=3, H=2, dk=2, dv=3, de=3)
    kw = dict(neuron="lif", presentation=0.4, warmup=0.1, seed=2, record_spikes=True, codegen="numpy")
    a, b = (simulate_mhsa(np.stack([X, -X, 0.5 * X]), WQ, WK, WV, WO, fold=fold, **kw) for fold in (True, False))
    assert len(a.spikes["l23"][0]) > 1000
    _same_spikes(a, b)


@pytest.mark.brian2
def test_fold_argument_is_checked():
    X, _, WQ, WK, WV, WO = random_problem(seed=5, n=2, H=1, dk=2, dv=2, de=2)
    with pytest.raises(TypeError, match="fold: expected a bool"):
        simulate_mhsa(X, WQ, WK, WV, WO, fold="yes")


@pytest.mark.brian2
def test_a_models_linear_cells_fold_their_copies_and_keep_their_spikes():
    """The copies of a value of L5 PT, nucleus 2, the MLP's hidden cells and the read-out share
    one potential (one synapse per class): the synapses Brian2 holds fall, the spikes stay."""
    import pathlib
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "sims"))   # (the model tests' small model)
    from test_model_standalone import _model, _tokens
    from ctmhsa.circuits.fold import simulated_synapse_count
    from ctmhsa.sims.model import prepare_model_run, simulate_model

    model, X, P = _model(), _tokens(3), 3
    circuit = prepare_model_run(model, X, "escape", None, None, None, dict(P=P)).circuit
    plan = fold_plan(circuit, "escape")
    for name in ("b0_l5pt", "b0_nucleus2", "b0_hidden", "b0_out"):
        (fold, cls, reps), = [p for p in plan[name] if p[0].name == "soma"]
        assert fold.variables == ("U",) and len(reps) * P == circuit.populations[name].N, name
    assert simulated_synapse_count(circuit, plan) < simulated_synapse_count(circuit, {})
    kw = dict(neuron="escape", duration=0.3, warmup=0.1, seed=2, record_spikes=True, codegen="numpy", P=P)
    a, b = simulate_model(model, X, fold=True, **kw), simulate_model(model, X, fold=False, **kw)
    assert a.config["fold"] and not b.config["fold"]
    assert sum(len(a.spikes[p][0]) for p in a.spikes) > 1000
    for p in a.spikes:
        for k in (0, 1):
            np.testing.assert_array_equal(a.spikes[p][k], b.spikes[p][k], err_msg=p)
    np.testing.assert_array_equal(a.logits, b.logits)


@pytest.mark.brian2
def test_a_lif_model_folded_and_unfolded_gives_the_same_spikes():
    """A model's key and query relays (nucleus 1) are cells whose rates change, so the spike-noise
    variance its L2/3 compartments sum from them changes every step. Folded, Brian2 summed it
    after the L2/3 somata had integrated the step (a folded group is updated after its cells), so
    their salience read the step before's correction and the runs parted at 87 ms; now the sum
    and its cache come before the cells, as unfolded."""
    import pathlib
    import sys
    sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "sims"))
    from test_model_standalone import _model, _tokens
    from ctmhsa.sims.model import simulate_model

    kw = dict(neuron="lif", duration=0.3, warmup=0.1, seed=2, record_spikes=True, codegen="numpy", P=2)
    a, b = (simulate_model(_model(), _tokens(3), fold=fold, **kw) for fold in (True, False))
    assert a.config["fold"] and not b.config["fold"]
    assert len(a.spikes["b0_l23"][0]) > 300 and len(a.spikes["classes"][0]) > 100
    for p in a.spikes:
        for k in (0, 1):
            np.testing.assert_array_equal(a.spikes[p][k], b.spikes[p][k], err_msg=p)
    np.testing.assert_array_equal(a.logits, b.logits)
