"""Draw every figure as PNG + PDF with a caption file, from the data files of a data directory
only (written by :func:`ctmhsa.sims.figure_data.make_data`; ``ctmhsa figures`` runs both). Nothing here
simulates: results directories are read with :func:`ctmhsa.sims.io.load` or as plain files (a run's
raster with the circuit description its configuration records, :func:`ctmhsa.sims.nwb.circuit_of`), and
the circuit diagrams and the IT→PT matrix are drawn from circuit *descriptions*
(:mod:`ctmhsa.circuits.builders`), which allocate nothing; no Brian2 network is built or imported.

The data directory holds ``manifest.json`` (see :mod:`ctmhsa.sims.figure_data` for its contents).
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np

from ctmhsa.circuits.builders import build, macrocolumn, pathway
from ctmhsa.maths.stages import STAGE_TABLE
from ctmhsa.sims.io import load
from ctmhsa.sims.nwb import circuit_of
from ctmhsa.sims.progress import progress
from ctmhsa.neurons.levels import get_level

from .accuracy import plot_accuracy
from .diagrams import draw_head_cells, draw_pathway
from .panels import circuits_vs_n, counts_vs_n, error_scaling, fig2, laws, raster
from .style import plt
from .style import save as _save

__all__ = ["make_figures", "read_data", "accuracy_caption", "FIGURES", "MANIFEST"]

FIGURES = ("fig1b_head_cells", "fig1c_pathway", "fig4a_cross_attention", "fig2_cells",
           "accuracy_rate", "accuracy_escape", "accuracy_lif", "raster_escape", "error_scaling",
           "counts_vs_n", "quadratic_vs_linear", "two_point_laws")
"""Every figure :func:`make_figures` draws, by file name (``NAME.png``, ``NAME.pdf``, ``NAME.txt``)."""
MANIFEST = "manifest.json"   # written by ctmhsa.sims.figure_data.make_data
FROM_SIMULATIONS = ("fig2_cells", "accuracy_rate", "accuracy_escape", "accuracy_lif", "raster_escape",
                    "error_scaling", "quadratic_vs_linear", "two_point_laws")
"""Figures drawn from simulated data: marked QUICK when the data are (the diagrams and counts
are drawn from circuit descriptions, the same either way)."""


LIF_NOTE = (" At the lif level every pyramidal soma is a conductance-based adaptive integrate-and-fire "
            "cell in a high-conductance state firing a baseline (L2/3: 1 Hz, the others: 20 Hz); stages "
            "are decoded from the rate above it (docs/lif.md).")


K, V, X = (STAGE_TABLE[k].symbol for k in ("kappa", "v_tilde", "x_tilde"))
"""The symbols of κ, ṽ and x̃ (:mod:`ctmhsa.maths.stages`), as captions print them."""


def _at(key: str) -> str:
    """A stage as captions name it: its symbol and the cells it is read from (``ṽ (L5 PT)``)."""
    return f"{STAGE_TABLE[key].symbol} ({STAGE_TABLE[key].cells})"


LIF_SLOPES = (" Least-squares slope of decoded on exact: {V} {sv:.2f}, {X} {sx:.2f} (NRMSE {rv:.2f}x and "
              "{rx:.2f}x their floors).")
LIF_COMPRESSION = (" The L5 PT cells fire as their L5 IT input calls for ({V} decoded on the sum over microcolumns "
                   "of decoded y: slope {pt:.2f}){n2}. The slopes below 1 are already in the L5 IT read-out: "
                   "summed over microcolumns, decoded y gives {V} at slope {it:.2f} (y entry by entry: {sy:.2f}). "
                   "{ov} of {nv} {V} entries and {ox} of {nx} {X} entries lie outside ± 2 standard deviations of "
                   "their own count noise.")
"""The lif read-outs' slopes explained, in the caption of ``accuracy_lif`` when they are below 0.95:
the read-out somata's own slopes, the slope they inherit and the entries outside the noise band,
measured on the run drawn (:func:`_compression`)."""


def _size(c: dict) -> str:
    """A run's sizes as captions give them: ``one head, n = 8, d = 8``."""
    d = (f"d = {c['dk']}" if c["dk"] == c["dv"] == c["de"] else
         f"dk = {c['dk']}, dv = {c['dv']}, de = {c['de']}")
    heads = "one head" if c["H"] == 1 else f"{c['H']} heads"
    return f"{heads}, n = {c['n']}, {d}"


def _lsq(x, y) -> float:
    """Least-squares slope of ``y`` on ``x`` over their finite entries (NaN without a spread)."""
    x, y = np.asarray(x, float).ravel(), np.asarray(y, float).ravel()
    ok = np.isfinite(x) & np.isfinite(y)
    return float(np.polyfit(x[ok], y[ok], 1)[0]) if ok.sum() > 1 and np.ptp(x[ok]) > 0 else float("nan")


def _slope(res, key: str) -> float:
    """Least-squares slope of a stage's decoded values on its exact ones."""
    return _lsq(res.reference_stages[key], res.stages[key])


def _compression(res) -> dict:
    """Where the lif read-outs' slopes come from, measured on one run: ``pt``, the slope of decoded
    ṽ on the sum over microcolumns of decoded y (the L5 PT cells against their decoded input);
    ``n2``, decoded x̃ on decoded ṽ mapped as the reference maps it (nucleus 2 against its input;
    NaN where the reference does not determine that map); ``it`` and ``sy``, that sum on exact ṽ
    and decoded y on exact y; ``ov``/``nv`` and ``ox``/``nx``, the ṽ and x̃ entries outside ± 2
    standard deviations of their own count noise (``res.noise_variance``) and their numbers."""
    S = {k: np.asarray(res.stages[k], float) for k in ("y", "v_tilde", "x_tilde")}
    R = {k: np.asarray(res.reference_stages[k], float) for k in ("y", "v_tilde", "x_tilde")}
    y_sum = S["y"].sum(axis=2)      # y[h, i, j, :] summed over the microcolumns j: ṽ[h, i, :]
    out = dict(pt=_lsq(y_sum, S["v_tilde"]), it=_lsq(R["v_tilde"], y_sum), sy=_lsq(R["y"], S["y"]))
    # x̃ = ṽ (heads side by side) M; M from the reference where it determines it
    n = R["x_tilde"].shape[0]
    vt_r, vt_d = (np.moveaxis(v, 0, 1).reshape(n, -1) for v in (R["v_tilde"], S["v_tilde"]))
    M = np.linalg.lstsq(vt_r, R["x_tilde"], rcond=None)[0]
    exact = (np.linalg.matrix_rank(vt_r) == vt_r.shape[1]
             and np.allclose(vt_r @ M, R["x_tilde"], atol=1e-9 * max(1.0, np.abs(R["x_tilde"]).max())))
    out["n2"] = _lsq(vt_d @ M, S["x_tilde"]) if exact else float("nan")
    for key, tag in (("v_tilde", "v"), ("x_tilde", "x")):
        d, r = S[key].ravel(), R[key].ravel()
        var = np.asarray(res.noise_variance.get(key, np.full(d.shape, np.nan)), float).ravel()
        ok = np.isfinite(d) & np.isfinite(r) & np.isfinite(var) & (var > 0)
        out[f"o{tag}"] = int(np.sum(np.abs(d[ok] - r[ok]) > 2 * np.sqrt(var[ok])))
        out[f"n{tag}"] = int(ok.sum())
    return out


def accuracy_caption(level: str, results_dir: str) -> str:
    """The caption of the figure ``accuracy_<level>`` drawn from ``results_dir`` (its sizes, window,
    and at the lif level the read-outs' compression measured on it)."""
    res = load(results_dir)
    c = res.config
    size = _size(c)
    window = (f"{c['duration']:g} s simulated" if not get_level(level).spiking
              else f"{c['warmup']:g} s warm-up + {c['duration']:g} s window")
    band = ("" if not get_level(level).spiking else
            " Grey band: the exact value ± 2 standard deviations of each entry's spike-count noise "
            "(noise.npz): points well outside it are bias, not noise.")
    caption = (f"Decoded rates vs the exact reference (ctmhsa.maths.reference) for every stage, {level} "
               f"level, {size}, {window} (the barrel-size numbers are in docs/results.md"
               f"{' and docs/lif.md' if get_level(level).lif else ''}). Identity line grey; NRMSE"
               f"{', noise floor' if get_level(level).spiking else ''} and Pearson r in each panel." + band)
    if get_level(level).lif:
        met = res.metrics()
        ratio = {k: met[k]["nrmse"] / met[k]["noise_floor"] if met[k]["noise_floor"] > 0 else float("nan")
                 for k in ("v_tilde", "x_tilde")}
        sv, sx = _slope(res, "v_tilde"), _slope(res, "x_tilde")
        caption += LIF_NOTE + LIF_SLOPES.format(V=V, X=X, sv=sv, sx=sx, rv=ratio["v_tilde"], rx=ratio["x_tilde"])
        if min(sv, sx) < 0.95:
            c = _compression(res)
            n2 = (f", and nucleus 2 as its L5 PT input calls for ({X} decoded on W_O applied to decoded {V}: "
                  f"slope {c['n2']:.2f})"
                  if np.isfinite(c["n2"]) else "")
            caption += LIF_COMPRESSION.format(V=V, X=X, **{**c, "n2": n2})
    return caption


def read_data(data_dir: str) -> dict:
    """The data files of ``data_dir`` by role, as absolute paths, from its ``manifest.json``:
    ``accuracy_<level>``, ``time_escape``, ``readout`` ({P: dir}), ``circuits`` ({(circuit, n):
    dir}), ``laws`` ({law: dir}), ``fig2`` (npz) and ``circuit_counts`` (the parsed JSON)."""
    where = os.path.join(data_dir, MANIFEST)
    if not os.path.isfile(where):
        raise ValueError(f"data_dir: no {MANIFEST} in {data_dir!r}; produce the data first "
                         "(`ctmhsa figures`, or ctmhsa.sims.figure_data.make_data)")
    with open(where) as fh:
        man = json.load(fh)

    def at(rel):
        return os.path.join(data_dir, rel)

    out = {f"accuracy_{level}": at(p) for level, p in man["accuracy"].items()}
    out["quick"] = bool(man.get("quick", False))
    out["time_escape"] = at(man["time_escape"])
    out["readout"] = {int(r["P"]): at(r["path"]) for r in man["readout"]}
    out["circuits"] = {(r["circuit"], int(r["n"])): at(r["path"]) for r in man["circuits"]}
    out["laws"] = {law: at(p) for law, p in man["laws"].items()}
    out["fig2"] = {level: at(p) for level, p in man["fig2"].items()}
    with open(at(man["circuit_counts"])) as fh:
        out["circuit_counts"] = json.load(fh)
    return out


def _it_pt_matrix():
    c = macrocolumn(3, 2, 3, 2)
    i, j = c.pairs("it_pt")
    it, pt = c.population("l5it"), c.population("l5pt")
    sign = np.where(it.axis("sign")[i] == pt.axis("sign")[j], 1.0, -1.0) if "sign" in it.axes else np.ones(len(i))
    M = np.zeros((it.N, pt.N))
    M[i, j] = sign
    return M


def make_figures(out_dir: str, data_dir: str | None = None, gallery: str | None = None) -> list[str]:
    """Draw every figure of :data:`FIGURES` into ``out_dir`` from the data in ``data_dir``
    (default ``out_dir/data``; see :func:`read_data`); return the PNG paths."""
    data = read_data(data_dir or os.path.join(out_dir, "data"))
    quick = data["quick"]
    made = []

    bar = progress(total=len(FIGURES), desc="figures", unit="fig")

    def save(fig, out_dir, name, caption):
        bar.set_postfix_str(name)
        bar.update()
        return _save(fig, out_dir, name, caption, quick=quick and name in FROM_SIMULATIONS)

    def sizes(path):
        c = load(path).config
        return c, _size(c)

    head = build(3, 2, 2, 2, H=1, name="head")
    fig, ax = plt.subplots(figsize=(10, 5), constrained_layout=True)
    draw_head_cells(head, ax)
    ax.set_title(f"One head (n = 3 macrocolumns × 3 microcolumns, dk = dv = de = 2): "
                 f"{head.n_neurons()} cells, {head.n_synapses()} synapses, all drawn", fontsize=8)
    made += save(fig, out_dir, "fig1b_head_cells",
                 "Fig. 1b analogue drawn from the built circuit: every cell of one head placed by its "
                 "index axes (macrocolumn i, microcolumn j, cell c, ON/OFF sign) and every synapse of "
                 "circuit.pairs(): green core W_Q (thalamus -> L2/3 basal, queries), red matrix W_K / W_V "
                 "(-> L2/3 apical keys, L5 IT basal values), orange L2/3 -> L5 IT apical (attention), purple "
                 "normalisation (L2/3 -> interneurons -> L2/3 soma), grey L5 IT -> PT, blue W_O (PT -> "
                 "nucleus 2). Dashed boxes: macrocolumns.")[:1]
    for name, circ, title, cap in (
            ("fig1c_pathway", pathway(4, 4, 4, 4, H=3), "multihead pathway: nucleus 1 → 3 areas → nucleus 2",
             "Figs. 1c/3 analogue drawn from the built circuit graph: a three-head pathway (n = 4, "
             "d = 4). One node per population and head with its cell count, one arrow per projection "
             "and head labelled with its weight source and synapse count; colours as in the paper "
             "(green W_Q, red W_K/W_V, blue W_O, purple normalisation)."),
            ("fig4a_cross_attention", pathway(3, 3, 3, 3, H=2, m=2, cross=True),
             "cross-attention: queries from nucleus 1, keys and values from nucleus 1_kv",
             "Fig. 4a analogue drawn from the built circuit graph: cross-attention with 3 query "
             "tokens (nucleus 1, core projection, green) and 2 key/value tokens (nucleus1_kv, matrix "
             "projections, red); two heads; output to nucleus 2 (blue).")):
        fig, ax = plt.subplots(figsize=(8, 5), constrained_layout=True)
        ax.set_title(f"{title}: {circ.n_neurons():,} neurons, {circ.n_synapses():,} synapses", fontsize=8)
        draw_pathway(circ, ax)      # after the title: it places the labels in the laid-out axes
        made += save(fig, out_dir, name, cap)[:1]

    made += save(fig2(data["fig2"], _it_pt_matrix()), out_dir, "fig2_cells",
                 "Fig. 2 as in-silico experiments on the model cells, escape level (top row) and lif level "
                 "(bottom row: conductance-based adaptive integrate-and-fire somata, baselines dotted: L5 IT "
                 "20 Hz, L2/3 1 Hz): "
                 "(a) apical input multiplies the somatic f-I gain of an L5 IT cell; (b) silencing 70 % of "
                 "the L2/3 input to the apical tuft lowers that gain; (c) the mean rate of 4 target L2/3 cells "
                 "vs their own basal drive for three drives of the other 12 cells of their macrocolumn: "
                 "with interneurons (solid, left "
                 "axis) it follows R_set u_own / Σu above the baseline (black), i.e. the interneurons divide "
                 "by the pooled drive; without them (dashed, right axis) it grows with its own drive alone; "
                 "(d) the IT -> PT connection "
                 "matrix of a built macrocolumn (3 microcolumns, dv = 3, ON/OFF): each PT cell pools its "
                 "value dimension over microcolumns, ON with +, OFF with -.")[:1]
    for level in ("rate", "escape", "lif"):
        made += save(plot_accuracy(data[f"accuracy_{level}"]), out_dir, f"accuracy_{level}",
                     accuracy_caption(level, data[f"accuracy_{level}"]))[:1]
    circ = circuit_of(load(data["accuracy_escape"]).config)   # its configuration's description
    _, size = sizes(data["accuracy_escape"])
    made += save(raster(data["accuracy_escape"], circ), out_dir, "raster_escape",
                 "Spike raster of one macrocolumn (its L2/3 cells, interneurons, L5 IT ON/OFF cells and "
                 "L5 PT ON/OFF cells) and of the nucleus-2 relays of the same token (ON/OFF), escape level, "
                 f"{size}, warm-up included (from the accuracy_escape run). The dotted line marks the start of the "
                 "measurement window; a macrocolumn's interneurons fire together because they share one integral "
                 "loop (docs/physiology.md, \"Why the interneurons fire together\").")[:1]
    c, size = sizes(data["time_escape"])
    cp, _ = sizes(next(iter(data["readout"].values())))
    made += save(error_scaling({"escape": data["time_escape"]}, data["readout"]), out_dir, "error_scaling",
                 f"Error of the read-outs {_at('v_tilde')} and {_at('x_tilde')} and their predicted spike-count "
                 "noise floors, log-log: left, vs measurement window T from one run (checkpoints, "
                 f"{c['duration']:g} s window); right, vs copies P of L5 PT and nucleus 2 (population "
                 f"coding, {cp['duration']:g} s windows). Dotted: 1/sqrt(T) and 1/sqrt(P) through the first "
                 f"point. Pathway of {size}, escape level. P shrinks only the read-outs' own noise: the "
                 "noise they inherit from L5 IT and the thalamus stays.")[:1]
    made += save(counts_vs_n(data["circuit_counts"], [4, 8, 16, 33, 64]), out_dir,
                 "counts_vs_n", "Neurons and synapses of one head of the quadratic circuit (d = 33) vs "
                 "the number of tokens n, counted from circuit descriptions (nothing allocated); both grow "
                 "as n^2 (n^2 microcolumns).")[:1]
    c, _ = sizes(next(iter(data["circuits"].values())))
    ns = sorted({n for _, n in data["circuits"]})
    made += save(circuits_vs_n(data["circuits"], data["circuit_counts"]["rows"]), out_dir, "quadratic_vs_linear",
                 "Algorithm 1's quadratic circuit (orange) against the linear-time key-value-memory "
                 "circuit (blue, circuit='linear': outer-product cells write S = Σ_j phi(k_j) v_jᵀ and "
                 "z = Σ_j phi(k_j) once per head, each query macrocolumn reads them out). (a, b) neurons "
                 "and synapses of one head at d = 33 vs n, from circuit descriptions: the quadratic "
                 "circuit grows as n², the linear one as n and has fewer neurons from n ≈ 45 on (at n = 33 "
                 "it is larger: 2 n d² outer-product and read-out cells against n² (dk + 2 dv)). (c) build "
                 f"time and run time per biological second, (d) NRMSE of {V} and {X} against the exact "
                 "reference with their predicted spike-count noise floors (dotted), both measured at the "
                 f"escape level on one head of d = {c['dk']}, n = {', '.join(map(str, ns))} "
                 f"({c['duration']:g} s windows, numpy target; `ctmhsa bench circuits` measures barrel "
                 "dimensions).")[:1]
    _, size = sizes(data["laws"]["product"])
    made += save(laws(data["laws"]), out_dir, "two_point_laws",
                 "Two-point-neuron interaction laws on the L5 IT soma (Adeel, 'Beyond Attention', "
                 "eqs. 1-5: Co4 'cooperation' ReLU6(R² + 2R + C(1+|R|)) and TM1-TM4) against the product "
                 f"R C that Algorithm 1 needs (R: basal value, C: apical attention a {K}). (a) the laws at "
                 f"C = 1; (b) NRMSE of {V} and {X} against exact linear attention on the same head "
                 f"({size}, rate level, decoded as if the soma multiplied; the product is exact to "
                 f"rounding); (c) decoded vs exact {X}. Each law's rate-level output equals the prediction "
                 "of ctmhsa.neurons.laws.attention_under_law to rounding (tests).")[:1]
    bar.close()
    if gallery:
        os.makedirs(gallery, exist_ok=True)
        for p in made:
            shutil.copy(p, os.path.join(gallery, os.path.basename(p)))
    return made
