"""Run configurations (TOML): schema, defaults, validation and the inputs they describe.

A configuration has four tables; ``[circuit]`` and ``[run]`` are the fields of
:class:`ctmhsa.sims.options.CircuitOptions` and :class:`ctmhsa.sims.options.RunOptions` (defaults there)::

    [problem]      # what to compute: sizes, where tokens/weights come from, the attention variant
    n = 4          # query tokens (macrocolumns per area)
    m = 4          # key/value tokens (cross-attention when it differs or cross = true)
    H = 2          # heads (cortical areas)
    dk = 4
    dv = 4
    de = 6
    cross = false
    causal = false
    normalize = true     # false: the unnormalised variant (no interneurons)
    inputs = "random"    # or a path to an .npz with X, WQ, WK, WV, WO (and Y); with
                         # weights: an .npz with the tokens X (and Y) only
    input_seed = 0       # seed of the random tokens and weights
    weight_scale = 1.0   # random query/key/value weights ~ N(0, weight_scale² / de)
    weights = "model.safetensors"  # optional: a trained layer's projections (ctmhsa.maths.weights)
    layer = 0            # which attention layer of the weights file (number or key prefix)
    heads = [0, 1]       # which of its heads (default all)
    n_heads = 12         # heads of the layer (default: config.json beside the weights)
    layout = "auto"      # "mha", "bert" or "gpt2" key layout
    fold_bias = true     # in-projection biases made exact by a constant token coordinate

    [circuit]      # what is built (ctmhsa.sims.options.CircuitOptions)
    neuron = "rate"
    phi = "elu1"
    P = 1                # neurons per dimension, or per population: P = {l5pt = 10, nucleus2 = 10}
    n_inh = 30           # divisive interneurons per macrocolumn
    signed = "onoff"     # code of the signed read-outs: "onoff" (default) or "offset"
    circuit = "quadratic"  # Algorithm 1, or "linear": the key-value-memory circuit
    law = "product"      # L5 IT soma: Algorithm 1's product, or "co4", "tm1".."tm4" (ctmhsa.neurons.laws)
    fold = true          # simulate identical deterministic compartments once (exact; ctmhsa.circuits.fold)

    [run]          # how it runs (ctmhsa.sims.options.RunOptions)
    duration = 1.0       # s of biological time (spiking levels: the measurement window)
    dt = 0.001           # s (optional; level default)
    warmup = 0.5         # s discarded before the window (optional; spiking levels)
    seed = 0
    codegen = "auto"
    device = "runtime"   # or "cpp_standalone" (compiled once per network shape, cached)
    threads = 2          # OpenMP threads of cpp_standalone (optional; default 1, no OpenMP)

    [output]
    dir = "results/default"   # relative: to the configuration file's directory (as inputs)

A ``[simulation]`` table (the single table of earlier versions) is still read: each of its keys
goes to ``[circuit]`` or ``[run]``, where it belongs. The options are validated when the file is
read, with the messages of :mod:`ctmhsa.sims.options`.

Unknown keys are errors (a typo must not silently fall back to a default).

Paths: relative ``inputs``, ``weights`` and ``[output] dir`` are resolved against the directory
of the configuration file (:func:`output_dir`); the shipped configurations resolve them against
the working directory. A path given on the command line (``--out``, ``--tokens``, ``--weights``)
is resolved against the working directory.

Sizes: with random inputs the sizes are the ``[problem]`` values (defaults above). When tokens or
weights come from files, a size the configuration leaves out is taken from the arrays, and a
size it states must agree with them: :func:`make_inputs` refuses a disagreement with a
``ValueError`` naming the key, before anything is built. :func:`sizes_of` gives the real sizes,
which ``ctmhsa run`` saves in the results directory's ``config.toml``.
"""

from __future__ import annotations

import copy
import math
import os
import sys
from dataclasses import fields
from importlib import resources

import numpy as np

from ctmhsa.maths.weights import load_attention, read_npz, real_array

from .options import CircuitOptions, RunOptions

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

__all__ = ["DEFAULTS", "SIZE_KEYS", "options", "load_config", "read_config", "resolve_config", "sizes_from_files", "make_inputs",
           "read_arrays", "sizes_of", "problem_inputs", "tables_of", "dumps_toml", "default_config_path", "output_dir",
           "check_output_dir"]

SIZE_KEYS = ("n", "m", "H", "dk", "dv", "de")

# fields with no TOML form (objects) or set in [problem]
_NOT_IN_TOML = {"params", "gains", "causal", "normalize", "report", "scheduler"}


def _option_defaults(cls) -> dict:
    return {f.name: list(f.default) if isinstance(f.default, tuple) else f.default   # TOML arrays
            for f in fields(cls) if f.name not in _NOT_IN_TOML}


DEFAULTS = {
    "problem": dict(n=4, m=None, H=2, dk=4, dv=4, de=6, cross=False, causal=False, normalize=True,
                    inputs="random", input_seed=0, weight_scale=1.0, weights=None, layer=None, heads=None,
                    n_heads=None, layout="auto", fold_bias=True),
    "circuit": _option_defaults(CircuitOptions),
    "run": _option_defaults(RunOptions),
    "output": dict(dir="results/default"),
}
LEGACY_TABLES = {"simulation": ("circuit", "run")}
"""Tables of earlier versions, read by spreading their keys over today's tables."""


def default_config_path() -> str:
    """Path of the shipped default configuration (a small two-head pathway)."""
    return str(resources.files("ctmhsa.sims.configs").joinpath("default.toml"))


def read_config(path: str | os.PathLike | None = None) -> dict:
    """The tables of a TOML configuration as written (not resolved); default: the shipped one."""
    if path is not None and (isinstance(path, bool) or not isinstance(path, (str, os.PathLike))):
        raise TypeError(f"config: expected the path of a TOML file, got {path!r}")
    path = default_config_path() if path is None else os.fspath(path)
    if os.path.isdir(path):
        raise ValueError(f"config: {path!r} is a directory; expected a TOML file (e.g. sims/configs/default.toml)")
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except FileNotFoundError:
        raise ValueError(f"config: file {path!r} does not exist") from None
    except UnicodeDecodeError as exc:   # TOML is UTF-8
        raise ValueError(f"config: {path!r} is not UTF-8 text (a TOML file must be): byte {exc.object[exc.start]:#04x} "
                         f"at position {exc.start} ({exc.reason})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"config: {path!r} is not valid TOML ({exc})") from None
    except OSError as exc:
        raise ValueError(f"config: cannot read {path!r} ({exc.strerror or exc})") from None


def load_config(path: str | os.PathLike | None = None) -> dict:
    """Read a TOML configuration and resolve it against :data:`DEFAULTS`."""
    path = default_config_path() if path is None else os.fspath(path)
    cfg = resolve_config(read_config(path))
    cfg["_source"] = os.path.abspath(path)
    return cfg


def sizes_from_files(inputs, weights) -> set:
    """The problem sizes that its files give: ``n, m`` (and, without a weights file, ``H, dk, dv,
    de``) from an inputs file, ``H, dk, dv, de`` from a weights file."""
    out = set()
    if inputs not in (None, "random"):
        out |= {"n", "m"} | (set() if weights is not None else {"H", "dk", "dv", "de"})
    if weights is not None:
        out |= {"H", "dk", "dv", "de"}
    return out


def resolve_config(raw: dict) -> dict:
    """Merge ``raw`` into the defaults, rejecting unknown tables and keys."""
    cfg = copy.deepcopy(DEFAULTS)
    # an older [simulation] table first: the explicit [circuit] and [run] keys win over it
    for table, values in sorted(raw.items(), key=lambda tv: tv[0] not in LEGACY_TABLES):
        if table not in DEFAULTS and table not in LEGACY_TABLES:
            raise ValueError(f"config: unknown table [{table}]; expected {sorted(DEFAULTS)}")
        if not isinstance(values, dict):
            raise ValueError(f"config: [{table}] must be a table")
        homes = LEGACY_TABLES.get(table, (table,))
        for key, val in values.items():
            home = next((t for t in homes if key in DEFAULTS[t]), None)
            if home is None:
                expected = sorted(k for t in homes for k in DEFAULTS[t])
                raise ValueError(f"config: unknown key {table}.{key}; expected one of {expected}")
            cfg[home][key] = val
    p = cfg["problem"]
    given = set(raw.get("problem", {}))
    for key in ("inputs", "layout"):
        if not isinstance(p[key], str):
            raise ValueError(f"config: problem.{key} must be a string, got {p[key]!r}")
    if p["weights"] is not None and not isinstance(p["weights"], str):
        raise ValueError(f"config: problem.weights must be a file path, got {p['weights']!r}")
    if p["layer"] is not None and (isinstance(p["layer"], bool) or not isinstance(p["layer"], (int, str))):
        raise ValueError(f"config: problem.layer must be a layer number or key prefix, got {p['layer']!r}")
    if p["heads"] is not None and (not isinstance(p["heads"], list) or not p["heads"] or
                                   not all(isinstance(h, int) and not isinstance(h, bool) and h >= 0
                                           for h in p["heads"])):
        raise ValueError(f"config: problem.heads must be a list of head indices, got {p['heads']!r}")
    if not isinstance(p["fold_bias"], bool):
        raise ValueError(f"config: problem.fold_bias must be true or false, got {p['fold_bias']!r}")
    if p["weights"] is None and any(p[k] is not None for k in ("layer", "heads", "n_heads")):
        raise ValueError("config: problem.layer, heads and n_heads select from a weights file; "
                         "set problem.weights")
    # sizes that files provide are read from them unless the configuration states them
    from_files = sizes_from_files(p["inputs"], p["weights"])
    for key in from_files - given:
        p[key] = None
    for key in ("n", "H", "dk", "dv", "de", "input_seed", "n_heads"):
        if p[key] is None and (key in from_files or key == "n_heads"):
            continue
        if isinstance(p[key], bool) or not isinstance(p[key], int) or p[key] < (0 if key == "input_seed" else 1):
            raise ValueError(f"config: problem.{key} must be a positive integer, got {p[key]!r}")
    if p["m"] is None and "m" not in from_files:
        p["m"] = p["n"]
    if p["m"] is not None and p["n"] is not None and p["m"] != p["n"]:
        p["cross"] = True
    ws = p["weight_scale"]
    if isinstance(ws, bool) or not isinstance(ws, (int, float)) or not (ws > 0 and math.isfinite(ws)):
        raise ValueError(f"config: problem.weight_scale must be > 0 and finite, got {ws!r}")
    check_output_dir(cfg["output"]["dir"])
    options(cfg)   # validates [circuit] and [run]
    return cfg


def check_output_dir(value, setting: str = "output.dir") -> None:
    """``[output] dir`` must be a non-empty path string (a ``ValueError`` naming ``setting``)."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"config: {setting} must be a directory path (a non-empty string), got {value!r}")


def output_dir(value: str, base: str | None, setting: str = "output.dir") -> str:
    """The absolute results directory of ``[output] dir``: a relative path is resolved against
    ``base``, the directory of the configuration file (like its input paths; the working
    directory for the shipped configurations), ``~`` expanded."""
    check_output_dir(value, setting)
    return os.path.abspath(_path(value, base))


def options(cfg: dict) -> tuple[CircuitOptions, RunOptions]:
    """The option objects a resolved configuration describes (``[problem]`` gives ``causal``
    and ``normalize``)."""
    p = cfg["problem"]
    return (CircuitOptions(**cfg["circuit"], causal=p["causal"], normalize=p["normalize"]),
            RunOptions(**cfg["run"]))


def tables_of(flat: dict) -> dict:
    """A result's flat configuration (``SimulationResult.config``) as the tables of a
    configuration file; keys no table has (``skip``, the ``params``/``gains`` dicts) stay in
    the provenance only."""
    out = {t: {} for t in ("problem", "circuit", "run")}
    for k, v in flat.items():
        home = next((t for t in out if k in DEFAULTS[t]), None)
        if home is not None and not (isinstance(v, dict) and k != "P"):
            out[home][k] = v
    return out


def problem_inputs(**problem) -> dict:
    """Tokens and weights of a ``[problem]`` table given as keywords (others default), e.g.
    ``problem_inputs(n=33, H=1, dk=33, dv=33, de=33)`` — what the benchmarks and figures use."""
    return make_inputs(resolve_config({"problem": problem})["problem"])


def _path(src: str, base_dir: str | None) -> str:
    """A path of a configuration file: ``~`` expanded, a relative one resolved against
    ``base_dir`` (the file's directory; ``None``: the working directory)."""
    src = os.path.expanduser(src)
    return src if os.path.isabs(src) or base_dir is None else os.path.join(base_dir, src)


def read_arrays(path, what: str, keys, required=("X",), hint: str = "") -> dict:
    """The arrays ``keys`` of the ``.npz`` at ``path`` that it holds (at least ``required``), as
    float arrays; everything else in the file is left unread.

    Parameters
    ----------
    path : str or path-like
        An ``.npz`` archive (``np.savez``).
    what : str
        The flag or setting the path came from (``"--tokens"``, ``"config: problem.inputs"``),
        named by every message.
    keys, required : sequence of str
        The arrays to read, and those that must be there.
    hint : str, optional
        Appended to the message of missing arrays: how to give them.

    Raises
    ------
    ValueError
        Naming ``what`` and the file: missing, a directory, not a readable ``.npz`` (truncated,
        a single ``.npy`` array), a required array absent, or an array that is not real numbers
        (complex, or objects: never unpickled).
    """
    arrays = read_npz(path, what)    # allow_pickle=False: an object array is refused, never unpickled
    where = f"{what}: {os.fspath(path)!r}"
    missing = sorted(set(required) - set(arrays))
    if missing:
        raise ValueError(f"{where} lacks arrays {missing} (it has {sorted(arrays)})" + (f"; {hint}" if hint else ""))
    return {k: real_array(arrays[k], f"{where}: array {k}") for k in keys if k in arrays}


def make_inputs(problem: dict, base_dir: str | None = None, names: dict | None = None,
                info: dict | None = None) -> dict:
    """Tokens and weights described by a ``[problem]`` table, checked against its sizes.

    ``inputs = "random"`` draws ``X ~ N(0, 1)``, ``WQ, WK, WV ~ N(0, weight_scale²/de)``,
    ``WO ~ N(0, 1/dv)`` (and ``Y`` for cross-attention) from ``input_seed``; a path loads an
    ``.npz`` with those arrays (relative paths are resolved against ``base_dir``;
    :func:`read_arrays`). With
    ``weights``, the projections of one layer of a trained model are read
    (:func:`ctmhsa.maths.weights.load_attention`; biases folded in with ``fold_bias``) and ``inputs``
    gives the tokens only (random tokens of the model's width when ``"random"``). ``names``
    maps ``"inputs"`` to the flag that set it for the messages (e.g. ``{"inputs": "--tokens"}``;
    default ``config: problem.inputs``). ``info``, a dict, receives where the arrays came from
    (what ``ctmhsa run`` prints): ``tokens`` and ``weights`` (``"random"`` or a path), and with a
    weights file ``layer``, ``heads``, ``n_heads``, ``layout``, ``de`` (the layer's width),
    ``has_bias``, ``folded`` (the biases folded into a constant coordinate: ``de + 1``) and
    ``output_bias`` (a non-zero output bias, which the circuit and its reference leave out).

    Raises
    ------
    ValueError
        A missing or incomplete file, or arrays whose sizes disagree with a size the table
        states (the message names the key, e.g. ``problem.de``).
    """
    rng = np.random.default_rng(problem["input_seed"])
    what = (names or {}).get("inputs", "config: problem.inputs")
    weights = problem.get("weights")
    src = problem["inputs"]
    if weights is not None:
        w = load_attention(_path(weights, base_dir), layer=problem.get("layer"), heads=problem.get("heads"),
                           n_heads=problem.get("n_heads"), layout=problem.get("layout", "auto"))
        if src == "random":
            n = problem["n"] if problem["n"] is not None else DEFAULTS["problem"]["n"]
            X = rng.normal(size=(n, w.de))
            Y = rng.normal(size=(problem["m"], w.de)) if problem["cross"] and problem["m"] else None
        else:
            path = _path(src, base_dir)
            tok = read_arrays(path, what, ("X", "Y"))
            for k, a in tok.items():
                if a.ndim not in (2, 3) or not np.all(np.isfinite(a)):
                    raise ValueError(f"{what}: {path!r}: {k} must hold finite tokens (tokens, de) or a stream of "
                                     f"token sets (T, tokens, de), got shape {a.shape}")
            X, Y = tok["X"], tok.get("Y")
            if X.shape[-1] != w.de:
                raise ValueError(f"{what}: {src!r} has tokens of width {X.shape[-1]} but the "
                                 f"weights' embedding has de = {w.de}")
        arrays = dict(X=X, Y=Y, **w.arrays())
        folded = problem.get("fold_bias", True) and w.has_bias
        if info is not None:
            info.update(tokens="random" if src == "random" else _path(src, base_dir), weights=w.source,
                        layer=w.layer, heads=list(w.heads), n_heads=w.n_heads, layout=w.layout, de=w.de,
                        has_bias=w.has_bias, folded=folded, output_bias=bool(np.any(w.bo)))
        if folded:
            # one constant coordinate per token, of every set of a stream too
            made = w.fold_biases(X.reshape(-1, X.shape[-1]))
            arrays.update(made, X=made["X"].reshape(X.shape[:-1] + (X.shape[-1] + 1,)))
            if Y is not None:
                arrays["Y"] = np.concatenate([Y, np.ones(Y.shape[:-1] + (1,))], -1)
    elif src == "random":
        if info is not None:
            info.update(tokens="random", weights="random")
        n, m, H, dk, dv, de = (problem[k] for k in SIZE_KEYS)
        s = problem["weight_scale"] / np.sqrt(de)
        X = rng.normal(size=(n, de))
        WQ = rng.normal(size=(H, dk, de)) * s
        WK = rng.normal(size=(H, dk, de)) * s
        WV = rng.normal(size=(H, dv, de)) * s
        WO = rng.normal(size=(H, de, dv)) / np.sqrt(dv)
        Y = rng.normal(size=(m, de)) if problem["cross"] else None
        return dict(X=X, WQ=WQ, WK=WK, WV=WV, WO=WO, Y=Y)
    else:
        path = _path(src, base_dir)
        # tokens alone are not enough: say what is missing and the two ways to give it
        how = "--weights FILE" if what.startswith("--") else "problem.weights = FILE"
        hint = (f"the weights must come with the tokens: a trained layer's ({how}), or WQ (H, dk, de), "
                "WK (H, dk, de), WV (H, dv, de) and WO (H, de, dv) saved in the .npz beside X")
        arrays = read_arrays(path, what, ("X", "WQ", "WK", "WV", "WO", "Y"), required=("X", "WQ", "WK", "WV", "WO"),
                             hint=hint)
        arrays.setdefault("Y", None)
        if info is not None:
            info.update(tokens=path, weights=path)
    arrays = {k: arrays[k] for k in ("X", "WQ", "WK", "WV", "WO", "Y")}
    try:
        got = sizes_of(arrays)
    except (ValueError, IndexError, TypeError) as exc:
        raise ValueError(f"{what}: the arrays do not have the shapes of attention inputs "
                         f"({exc})") from None
    where = {"n": "X", "m": "Y" if arrays["Y"] is not None else "X", "H": "WQ", "dk": "WQ", "dv": "WV", "de": "X"}
    for key in SIZE_KEYS:
        want = problem.get(key)
        if want is not None and want != got[key]:
            raise ValueError(f"config: problem.{key} = {want} but the inputs have {key} = {got[key]} "
                             f"({where[key]} has shape {tuple(np.shape(arrays[where[key]]))}); fix the "
                             f"configuration or leave problem.{key} out to take it from the inputs")
    return arrays


def sizes_of(inputs: dict) -> dict:
    """The sizes ``n, m, H, dk, dv, de`` of tokens and weights (``m = n`` without ``Y``); the
    tokens may be a stream of sets ``(T, n, de)``."""
    X, Y, WQ, WV = (np.asarray(inputs[k]) if inputs[k] is not None else None for k in ("X", "Y", "WQ", "WV"))
    if X.ndim not in (2, 3) or WQ.ndim != 3 or WV.ndim != 3:
        raise ValueError(f"X (n, de) or (T, n, de), WQ (H, dk, de), WV (H, dv, de) expected; got X {X.shape}, "
                         f"WQ {WQ.shape}, WV {WV.shape}")
    return dict(n=int(X.shape[-2]), m=int((X if Y is None else Y).shape[-2]), H=int(WQ.shape[0]),
                dk=int(WQ.shape[1]), dv=int(WV.shape[1]), de=int(X.shape[-1]))


def _toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (float, np.floating)):
        return repr(float(v)) if np.isfinite(v) else ("nan" if np.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(v, str):
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_toml_value(x)}" for k, x in v.items()) + "}"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def dumps_toml(cfg: dict) -> str:
    """Write a configuration (tables of scalars and lists; ``None`` values omitted) as TOML."""
    lines = []
    scalars = {k: v for k, v in cfg.items() if not isinstance(v, dict) and v is not None}
    for k, v in scalars.items():
        lines.append(f"{k} = {_toml_value(v)}")
    for table, values in cfg.items():
        if isinstance(values, dict):
            lines.append(f"\n[{table}]")
            for k, v in values.items():
                if v is not None:
                    lines.append(f"{k} = {_toml_value(v)}")
    return "\n".join(lines).lstrip("\n") + "\n"
