"""Circuit descriptions: structure, closed-form counts, connectivity rules."""

import networkx as nx
import numpy as np
import pytest

from ctmhsa.circuits import area, build, macrocolumn, microcolumn, pathway
from ctmhsa.circuits.builders import DEFAULT_N_INH
from ctmhsa.circuits.graph import Circuit, Population, Projection, connect_pairs

pytestmark = pytest.mark.codegen_independent

SIZES = [  # (n, m, H, dk, dv, de, cross)
    (2, 2, 1, 3, 2, 4, False),
    (5, 5, 3, 2, 4, 3, False),
    (3, 6, 2, 4, 3, 5, True),
    (33, 33, 1, 33, 33, 33, False),   # barrel cortex: counted, never allocated
]


def closed_form(n, m, H, dk, dv, de, cross, causal=False, n_inh=30):
    pairs = n * (n + 1) // 2 if causal else n * m          # microcolumns per area
    neurons = dict(nucleus1=2 * n * de, l23=H * pairs * dk, l5it=2 * H * pairs * dv,
                   interneuron=H * n * n_inh, l5pt=2 * H * n * dv, nucleus2=2 * n * de)   # ON/OFF
    neurons["nucleus1_kv"] = 2 * m * de      # keys' (matrix) relays, apart from the queries' (core)
    neurons["nucleus1_v"] = 2 * m * de       # the values' own relays of the key/value tokens
    synapses = dict(core_q=2 * H * pairs * dk * de, matrix_k=2 * H * pairs * dk * de,
                    matrix_v=4 * H * pairs * dv * de, pool=H * pairs * dk * n_inh,
                    shunt=H * pairs * dk * n_inh,
                    attention=2 * H * pairs * dk * dv, it_pt=4 * H * pairs * dv, pt_out=4 * H * n * dv * de)
    return neurons, synapses


@pytest.mark.parametrize("size", SIZES)
def test_counts_match_closed_form(size):
    n, m, H, dk, dv, de, cross = size
    c = pathway(n, dk, dv, de, H=H, m=m, cross=cross)
    neurons, synapses = closed_form(*size)
    assert {k: p.N for k, p in c.populations.items()} == neurons
    assert c.n_synapses(by_projection=True) == synapses
    assert c.n_neurons() == sum(neurons.values())
    if n < 33:  # the join agrees with the counting formula
        for name, proj in c.projections.items():
            i, j = c.pairs(proj)
            assert len(i) == synapses[name]
            assert len(set(zip(i.tolist(), j.tolist()))) == len(i)   # no duplicate synapse


def test_barrel_head_is_about_1e5_neurons():
    # paper: ~1e5 neurons per head (one cell per signed quantity: the offset code)
    assert 7e4 < pathway(33, 33, 33, 33, H=1, signed="offset").n_neurons() < 1e5
    c = pathway(33, 33, 33, 33, H=1)          # ON/OFF L5 IT pairs: 36k more cells
    assert 1e5 < c.n_neurons() < 1.2e5       # ON/OFF relays: +2,178 (+2 x 2,178 key and value relays)
    l23 = c.population("l23")
    assert l23.sizes == (1, 33, 33, 33)       # n^2 microcolumns x dk cells


@pytest.mark.parametrize("n", [2, 4, 7])
def test_causal_removes_future_microcolumns(n):
    c = pathway(n, 2, 3, 4, H=2, causal=True)
    neurons, synapses = closed_form(n, n, 2, 2, 3, 4, False, causal=True)
    assert {k: p.N for k, p in c.populations.items()} == neurons
    assert c.n_synapses(by_projection=True) == synapses
    l23 = c.population("l23")
    assert np.all(l23.axis("j") <= l23.axis("i"))


def test_wiring_semantics():
    n, H, dk, dv, de = 3, 2, 2, 3, 4
    c = pathway(n, dk, dv, de, H=H)
    nuc, l23, it, pt, inh, out = (c.population(p) for p in
                                  ("nucleus1", "l23", "l5it", "l5pt", "interneuron", "nucleus2"))
    i, j = c.pairs("core_q")           # queries: token i -> macrocolumn i (every microcolumn)
    assert np.all(nuc.axis("token")[i] == l23.axis("i")[j])
    i, j = c.pairs("matrix_k")         # keys: token j -> microcolumn j of every macrocolumn
    assert np.all(nuc.axis("token")[i] == l23.axis("j")[j])
    i, j = c.pairs("attention")        # A = ones inside one microcolumn
    for ax in ("head", "i", "j"):
        assert np.all(l23.axis(ax)[i] == it.axis(ax)[j])
    assert len(i) == H * n * n * dk * dv * 2      # each L2/3 cell -> ON and OFF L5 IT cells
    i, j = c.pairs("it_pt")            # PT c pools IT c over microcolumns
    assert np.all(it.axis("c")[i] == pt.axis("c")[j]) and np.all(it.axis("i")[i] == pt.axis("i")[j])
    w = c.weight_indices(c.projections["it_pt"], i, j)   # ON/OFF IT -> ON/OFF PT, sign = pre x post
    assert np.all(w[2] == it.axis("sign")[i]) and np.all(w[3] == pt.axis("sign")[j])
    i, j = c.pairs("pool")
    assert np.bincount(j).tolist() == [n * dk] * (H * n * DEFAULT_N_INH)
    i, j = c.pairs("pt_out")           # every head's PT of macrocolumn i -> token i of nucleus 2
    assert np.all(pt.axis("i")[i] == out.axis("token")[j])
    w = c.weight_indices(c.projections["pt_out"], i, j)
    assert np.all(w[0] == pt.axis("head")[i]) and np.all(w[1] == out.axis("e")[j])


def test_it_to_pt_only_and_no_pt_loop():
    c = pathway(2, 2, 2, 2, H=1)
    types = {k: p.cell_type for k, p in c.populations.items()}
    edges = [(types[s], types[t]) for s, t in c.graph.edges()]
    assert ("l5it", "l5pt") in edges and ("l5pt", "l5it") not in edges
    assert not any(s == "l5pt" and t == "relay" for s, t in edges)
    assert nx.has_path(c.graph, "nucleus1", "nucleus2")
    assert not nx.has_path(c.graph, "nucleus2", "nucleus1")
    # adding a forbidden projection is refused by check()
    c.add_projection(Projection("bad", "l5pt", "l5it", "soma", (("i", "i"),)))
    with pytest.raises(ValueError, match="IT -> PT-only"):
        c.check()
    c2 = pathway(2, 2, 2, 2)
    c2.add_projection(Projection("loop", "l5pt", "nucleus1", "soma", (("i", "token"),)))
    with pytest.raises(ValueError, match="back to its driving nucleus"):
        c2.check()


def test_levels_are_usable_alone():
    mc = microcolumn(4, 3, 5)
    assert mc.population("l23").N == 4 and mc.population("l5it").N == 2 * 3   # ON/OFF L5 IT
    assert "interneuron" not in mc.populations and "l5pt" not in mc.populations
    mac = macrocolumn(6, 4, 3, 5)
    assert mac.population("l23").N == 6 * 4 and mac.population("l5pt").N == 2 * 3
    assert mac.population("interneuron").N == DEFAULT_N_INH == 30
    assert macrocolumn(6, 4, 3, 5, n_inh=3).population("interneuron").N == 3
    ar = area(5, 2, 2, 3)
    assert ar.population("l23").sizes == (1, 5, 5, 2) and "nucleus2" not in ar.populations
    for c in (mc, mac, ar):
        c.check()


def test_description_is_plain_data_and_diffable():
    import json

    a = pathway(3, 2, 2, 4, H=2).to_dict()
    b = pathway(3, 2, 2, 4, H=2).to_dict()
    assert json.loads(json.dumps(a)) == a == b
    c = pathway(3, 2, 2, 4, H=2, causal=True).to_dict()
    assert c != a and c["n_synapses"] < a["n_synapses"]
    assert "l23" in pathway(2, 2, 2, 2).summary()


def test_connect_pairs_matches_brute_force():
    pre = Population("a", "relay", ("x", "y"), (3, 4))
    post = Population("b", "l5pt", ("p", "q", "r"), (2, 3, 4))
    i, j = connect_pairs(pre, post, (("x", "q"), ("y", "r")))
    brute = {(a, b) for a in range(pre.N) for b in range(post.N)
             if pre.index[a, 0] == post.index[b, 1] and pre.index[a, 1] == post.index[b, 2]}
    assert set(zip(i.tolist(), j.tolist())) == brute


@pytest.mark.parametrize("kw, match", [
    (dict(n=0), "n: expected an integer >= 1"),
    (dict(dk=2.5), "dk: expected an integer"),
    (dict(m=3), "m: 3 key tokens differ"),
    (dict(H=True), "H: expected an integer"),
])
def test_builder_validation(kw, match):
    args = dict(n=2, dk=2, dv=2, de=2)
    args.update(kw)
    with pytest.raises(ValueError, match=match):
        build(**args)


def test_graph_construction_errors():
    c = Circuit("t")
    c.add_population(Population("a", "relay", ("t",), (2,)))
    with pytest.raises(ValueError, match="already exists"):
        c.add_population(Population("a", "relay", ("t",), (2,)))
    with pytest.raises(ValueError, match="unknown population"):
        c.add_projection(Projection("p", "a", "zz", "soma", ()))
    c.add_population(Population("b", "l5pt", ("t",), (2,)))
    with pytest.raises(ValueError, match="no compartment 'apical'"):
        c.add_projection(Projection("p", "a", "b", "apical", ()))
    with pytest.raises(ValueError, match="axis sizes"):
        Population("z", "relay", ("t",), (0,))


def test_population_coding_copies_and_synapses():
    base = pathway(3, 2, 2, 4, H=1)
    c = pathway(3, 2, 2, 4, H=1, P={"l5pt": 4, "nucleus2": 3})
    assert c.population("l5pt").N == 4 * base.population("l5pt").N
    assert c.population("l5pt").axes[-1] == "p"
    syn, syn0 = c.n_synapses(by_projection=True), base.n_synapses(by_projection=True)
    assert syn["it_pt"] == 4 * syn0["it_pt"] and syn["pt_out"] == 12 * syn0["pt_out"]
    assert syn["core_q"] == syn0["core_q"]
    assert pathway(2, 2, 2, 2, P=2).n_neurons() == 2 * pathway(2, 2, 2, 2).n_neurons()
    with pytest.raises(ValueError, match=r"P: unknown population\(s\) \['l6'\]"):
        pathway(2, 2, 2, 2, P={"l6": 2})
    with pytest.raises(ValueError, match="P: expected an integer >= 1"):
        pathway(2, 2, 2, 2, P=0)


@pytest.mark.codegen_independent
def test_degrees_from_axes_match_the_synapse_lists():
    c = build(3, 2, 3, 2, H=2, causal=True, P=2)
    for proj in c.projections.values():
        i, j = c.pairs(proj)
        np.testing.assert_array_equal(c.out_degree(proj), np.bincount(i, minlength=c.populations[proj.source].N))
        np.testing.assert_array_equal(c.in_degree(proj), np.bincount(j, minlength=c.populations[proj.target].N))
        cells = np.arange(0, c.populations[proj.target].N, 3)
        i2, j2 = c.pairs(proj, post_cells=cells)
        np.testing.assert_array_equal(c.out_degree(proj, post_cells=cells),
                                      np.bincount(i2, minlength=c.populations[proj.source].N))
        assert set(j2.tolist()) <= set(cells.tolist())
    assert c.n_synapses() == sum(len(c.pairs(p)[0]) for p in c.projections.values())


def test_replay_table_holds_each_spike_in_its_step():
    from ctmhsa.circuits.instantiate import REPLAY_BITS, replay_table, unpack_replay

    dt = 1e-3
    cells, times = np.array([0, 2, 2, 1]), np.array([0.0, 0.003, 0.0049999, 0.006])   # step times, rounded
    table = unpack_replay(replay_table(cells, times, N=3, steps=8, dt=dt), 3)
    assert table.shape == (8, 3) and table.sum() == 4
    assert table[0, 0] == table[3, 2] == table[5, 2] == table[6, 1] == 1
    # packed: REPLAY_BITS cells to a column, every bit of a full column exact in a float64
    rng = np.random.default_rng(0)
    N, steps = 2 * REPLAY_BITS + 5, 40
    dense = rng.random((steps, N)) < 0.3
    dense[7] = True                     # a step where every cell spikes
    k, c = np.nonzero(dense)
    packed = replay_table(c, k * dt, N=N, steps=steps, dt=dt)
    assert packed.shape == (steps, 3)
    np.testing.assert_array_equal(unpack_replay(packed, N), dense.astype(float))
    with pytest.raises(ValueError, match="outside the table"):
        replay_table(cells, times, N=3, steps=6, dt=dt)
    with pytest.raises(ValueError, match="twice in one step"):
        replay_table(np.array([1, 1]), np.array([0.002, 0.002]), N=3, steps=8, dt=dt)
