"""The numbers quoted in the README and the guides, checked against the JSON that measured them.

``docs/numbers.toml`` registers every quoted figure that a benchmark or a command can produce: the
doc, a regular expression that finds the figure in its sentence (it must match exactly once),
the JSON file of ``docs/measured/`` that holds the measurement, its key path, the tolerance, and
for times whether the figure is cold (first run: caches empty) or warm. A figure whose benchmark
is too slow to run for the docs is registered ``unchecked`` with the command that would back it:
it is reported, not failed. Every JSON of ``docs/measured/`` states the load average it ran under
(``machine``, as :func:`ctmhsa.sims.benchmarks.run_benchmark` writes it) and ``cache``
(``"cold"`` or ``"warm"``).

``python -m ctmhsa.sims.benchmarks.docnumbers`` prints the table of claims (exit 1 if one
disagrees); ``... record-run`` times the default run (``ctmhsa run``) in fresh processes and
writes its JSON; ``... adopt BENCH.json`` copies a benchmark's JSON into ``docs/measured/``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from dataclasses import dataclass

__all__ = ["Claim", "Outcome", "load_claims", "parse_number", "lookup", "check_claim", "check_json",
           "check_all", "format_table", "main"]

#: the repository root of a source checkout (docs/ beside sims/)
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REGISTRY = os.path.join("docs", "numbers.toml")
MEASURED = os.path.join("docs", "measured")
STATES = ("cold", "warm")


@dataclass(frozen=True)
class Claim:
    """One quoted figure (an entry ``[[claim]]`` of ``docs/numbers.toml``).

    ``pattern`` has one capture group per quoted number (two for a range "27–31"), ``key`` one
    JSON key path per group (``a.b.0.c``). The tolerance is the quoted rounding (half a unit of
    its last digit) plus ``rel`` (relative to the measured value) and ``abs``; ``exact`` asks for
    equality (counts). ``scale`` multiplies the measured value into the quoted unit (bytes to MB:
    1e-6). ``within_repeats``: a key ``X.median`` agrees anywhere in ``X.min``-``X.max`` (plus
    the tolerance). ``state`` is ``cold`` or ``warm`` for a time, whose matched text must also
    name the load and that state.
    """

    id: str
    doc: str
    pattern: str
    json: str = ""
    key: tuple = ()
    rel: float = 0.0
    abs: float = 0.0
    exact: bool = False
    scale: float = 1.0
    state: str = ""
    within_repeats: bool = False
    unchecked: str = ""

    @classmethod
    def from_entry(cls, entry: dict) -> "Claim":
        entry = dict(entry)
        key = entry.pop("key", ())
        entry["key"] = (key,) if isinstance(key, str) else tuple(key)
        unknown = set(entry) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"{REGISTRY}: claim {entry.get('id')!r}: unknown keys {sorted(unknown)}")
        claim = cls(**entry)
        groups = re.compile(claim.pattern).groups
        if not claim.unchecked and (not claim.json or len(claim.key) != groups or groups == 0):
            raise ValueError(f"{REGISTRY}: claim {claim.id!r}: needs json and one key per capture group "
                             f"({groups} groups, {len(claim.key)} keys)")
        if claim.state and claim.state not in STATES:
            raise ValueError(f"{REGISTRY}: claim {claim.id!r}: state must be one of {STATES}")
        return claim


@dataclass(frozen=True)
class Outcome:
    """The check of one claim: ``ok`` is True, False, or None for an unchecked claim."""

    claim: Claim
    quoted: tuple
    measured: tuple
    tolerance: tuple
    ok: bool | None
    why: str = ""


def load_claims(root: str = ROOT) -> list[Claim]:
    """The claims of ``docs/numbers.toml`` under ``root``."""
    with open(os.path.join(root, REGISTRY), "rb") as fh:
        claims = [Claim.from_entry(e) for e in tomllib.load(fh)["claim"]]
    ids = [c.id for c in claims]
    if len(set(ids)) != len(ids):
        raise ValueError(f"{REGISTRY}: duplicate ids {sorted({i for i in ids if ids.count(i) > 1})}")
    return claims


def parse_number(text: str) -> tuple[float, float]:
    """A quoted number and half a unit of its last digit: ``"11,373,227"`` -> (11373227, 0.5),
    ``"0.21"`` -> (0.21, 0.005), ``"1.4e-13"`` -> (1.4e-13, 5e-15); thousands separators
    (comma, thin or no-break space) and a Unicode minus are read."""
    s = re.sub(r"[,\u2009\u202f\u00a0 ]", "", text.strip()).replace("\u2212", "-")
    mantissa, _, exponent = s.lower().partition("e")
    decimals = len(mantissa.partition(".")[2])
    half = 0.5 * 10.0 ** (-decimals + (int(exponent) if exponent else 0))
    return float(s), half


_PART = re.compile(r"[^.\[]+(?:\[[^\]]*\])?")
_COND = re.compile(r"(\w+)(<=|>=|=|<|>)(.+)")
_OPS = {"=": lambda a, b: a == b, "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b,
        "<": lambda a, b: a < b, ">": lambda a, b: a > b}


def _filter(rows: list, conditions: str) -> list:
    """The rows (dicts) meeting every ``field<op>value`` of ``conditions`` (comma-separated)."""
    for cond in conditions.split(","):
        field, op, want = _COND.fullmatch(cond.strip()).groups()
        try:
            want = float(want)
        except ValueError:
            pass
        rows = [r for r in rows if _OPS[op](r[field], want)]
    return rows


def lookup(data, key: str):
    """The value at a dotted key path: ``"wall_s.median"``; list indices as numbers (``"a.0"``);
    ``rows[outcome=exact,scale<=2]`` keeps the rows of a list meeting every condition and
    ``.count`` counts them (a derived figure computed from the rows the benchmark wrote)."""
    value = data
    for part in _PART.findall(key):
        name, _, cond = part.partition("[")
        if isinstance(value, list) and name == "count":
            value = len(value)
        elif isinstance(value, list) and name.isdigit():
            value = value[int(name)]
        elif isinstance(value, dict) and name in value:
            value = value[name]
        else:
            raise KeyError(f"no key {name!r} (path {key!r})")
        if cond:
            value = _filter(value, cond.rstrip("]"))
    return value


def check_claim(claim: Claim, text: str, data: dict | None) -> Outcome:
    """Check one claim against a doc's text and its JSON (``data``; None for an unchecked claim).

    The pattern must match the text exactly once; each captured number must agree with the
    measured value within the quoted rounding plus the claim's tolerance (exactly, for
    ``exact``; ``within_repeats``: anywhere in ``X.min``-``X.max`` of its key ``X.median``); a
    time's matched text must name the load and its cold/warm state, and so must the JSON.
    """
    matches = list(re.finditer(claim.pattern, text))
    if len(matches) != 1:
        return Outcome(claim, (), (), (), False, f"pattern matches {len(matches)} times, expected once")
    m = matches[0]
    quoted = tuple(parse_number(g) for g in m.groups())
    if claim.unchecked:
        return Outcome(claim, tuple(q for q, _ in quoted), (), (), None, claim.unchecked)
    if claim.state:
        said = m.group(0)
        if "load" not in said or claim.state not in said:
            return Outcome(claim, tuple(q for q, _ in quoted), (), (), False,
                           f"a time must say its load and that it is {claim.state} in the matched text")
        if data.get("cache") != claim.state:
            return Outcome(claim, tuple(q for q, _ in quoted), (), (), False,
                           f"the doc says {claim.state}, {claim.json} says {data.get('cache')!r}")
    measured, tolerance, ok = [], [], True
    for (q, half), key in zip(quoted, claim.key):
        try:
            value = lookup(data, key) * claim.scale
        except (KeyError, IndexError, TypeError) as err:
            return Outcome(claim, tuple(q for q, _ in quoted), (), (), False, f"{claim.json}: {err}")
        tol = 0.0 if claim.exact else half + claim.rel * abs(value) + claim.abs
        lo = hi = value
        if claim.within_repeats:        # a figure of repeats: anywhere in their range (+ tol) agrees
            spread = lookup(data, key.rpartition(".")[0])
            lo, hi = spread["min"] * claim.scale, spread["max"] * claim.scale
        measured.append(value)
        tolerance.append(tol)
        ok &= (q == value) if claim.exact else lo - tol <= q <= hi + tol
    return Outcome(claim, tuple(q for q, _ in quoted), tuple(measured), tuple(tolerance), ok,
                   "" if ok else "quoted and measured disagree beyond the tolerance")


def check_json(data: dict) -> list[str]:
    """What a JSON of ``docs/measured/`` lacks: its load average and its cold/warm state."""
    problems = []
    machine = data.get("machine") if isinstance(data, dict) else None
    if not (isinstance(machine, dict)
            and all(len(machine.get(w, {}).get("load_average", [])) == 3 for w in ("before", "after"))):
        problems.append("no load average before and after (key machine)")
    if not isinstance(data, dict) or data.get("cache") not in STATES:
        problems.append(f"no cache state (key cache: one of {STATES})")
    return problems


def check_all(root: str = ROOT) -> tuple[list[Outcome], dict]:
    """Check every claim of the registry and every JSON of ``docs/measured/`` under ``root``:
    the outcomes, and per JSON file what it lacks (empty lists when complete)."""
    measured_dir = os.path.join(root, MEASURED)
    files = {}
    for name in sorted(os.listdir(measured_dir)):
        if name.endswith(".json"):
            with open(os.path.join(measured_dir, name)) as fh:
                files[name] = json.load(fh)
    texts, outcomes = {}, []
    for claim in load_claims(root):
        if claim.doc not in texts:
            with open(os.path.join(root, claim.doc), encoding="utf-8") as fh:
                texts[claim.doc] = fh.read()
        if not claim.unchecked and claim.json not in files:
            outcomes.append(Outcome(claim, (), (), (), False, f"{MEASURED}/{claim.json} does not exist"))
            continue
        outcomes.append(check_claim(claim, texts[claim.doc], files.get(claim.json)))
    return outcomes, {name: check_json(data) for name, data in files.items()}


def _fmt(values) -> str:
    def one(v):
        return f"{v:,.0f}" if v == int(v) and abs(v) >= 1e4 else f"{v:.4g}"
    return "–".join(one(v) for v in values) if values else "-"


def format_table(outcomes: list[Outcome]) -> str:
    """The claims as a table: id, doc, quoted, measured, tolerance, ok (``unchecked``: why)."""
    rows = [("claim", "doc", "quoted", "measured", "tolerance", "ok")]
    for o in outcomes:
        status = "unchecked" if o.ok is None else ("ok" if o.ok else "FAIL")
        tol = "exact" if o.claim.exact and o.measured else "±" + _fmt(o.tolerance) if o.tolerance else "-"
        if o.claim.within_repeats and o.measured:
            tol = f"repeats' range {tol}"
        rows.append((o.claim.id, o.claim.doc, _fmt(o.quoted), _fmt(o.measured), tol,
                     status + (f": {o.why}" if o.why else "")))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r[:5], widths)) + "  " + r[5] for r in rows)


# --- producing the JSON -------------------------------------------------------------------------

def _spread(values) -> dict:
    return dict(min=min(values), median=statistics.median(values), max=max(values))


def record_run(repeats: int, cache: str, argv=(), previous: dict | None = None) -> dict:
    """Run ``ctmhsa run`` (the default run unless ``argv`` says more) ``repeats`` times, each a
    fresh process writing to a temporary directory, and gather what the docs quote (see
    :func:`summarise`); ``previous``: a JSON of this function whose repeats are kept."""
    from ctmhsa.sims.benchmarks.common import machine_state

    command = " ".join(["ctmhsa", "run", *argv])
    if previous and (previous.get("command"), previous.get("cache")) != (command, cache):
        raise ValueError(f"cannot add {cache} runs of {command!r} to {previous.get('cache')} runs of "
                         f"{previous.get('command')!r}")
    runs = list(previous["repeats"]) if previous else []
    with tempfile.TemporaryDirectory() as tmp:
        for k in range(repeats):
            out = os.path.join(tmp, f"run{k}")
            before = machine_state()
            t0 = time.perf_counter()
            # the console script `ctmhsa` is this module (a fresh interpreter, as a user starts it)
            subprocess.run([sys.executable, "-m", "ctmhsa.sims.cli", "run", *argv, "--quiet", "--out", out],
                           check=True)
            wall = time.perf_counter() - t0
            after = machine_state()
            sizes = {f: os.path.getsize(os.path.join(out, f)) for f in sorted(os.listdir(out))}
            du = int(subprocess.run(["du", "-sb", out], capture_output=True, text=True, check=True)
                     .stdout.split()[0])     # what a user measures: the files and the directory itself
            with open(os.path.join(out, "provenance.json")) as fh:
                prov = json.load(fh)
            with open(os.path.join(out, "metrics.json")) as fh:
                metrics = json.load(fh)
            runs.append(dict(wall_s=wall, timings=prov["timings"], bytes_written=du,
                             files=sizes, machine=dict(before=before, after=after),
                             counts={k: prov["counts"][k] for k in ("neurons", "synapses")},
                             rates_hz={r["population"]: r["mean"] for r in prov["diagnostics"]["rates"]},
                             metrics={s: dict(nrmse=m["nrmse"], noise_floor=m["noise_floor"],
                                              ratio=m["nrmse"] / m["noise_floor"], r=m["r"])
                                      for s, m in metrics.items()}))
    return summarise(runs, cache, command, argv)


def summarise(runs: list, cache: str, command: str, argv=()) -> dict:
    """The JSON of :func:`record_run` from its repeats: wall time of the whole command and the
    simulation's own (``timings.run``) over the repeats (min, median, max), the 1-minute load
    average over every reading, bytes written and the output-space estimate
    (:func:`ctmhsa.sims.io.estimate_result_bytes`, default run only), counts, every stage's NRMSE,
    floor and their ratio, population rates (seeded: the same in every repeat, checked)."""
    first = runs[0]
    ratios = [m["ratio"] for m in first["metrics"].values()]
    loads = [r["machine"][w]["load_average"][0] for r in runs for w in ("before", "after")]
    data = dict(benchmark="default_run", command=command, cache=cache, repeats=runs,
                wall_s=_spread([r["wall_s"] for r in runs]),
                simulation_s=_spread([r["timings"]["run"] for r in runs]),
                load_average_1min=dict(min=min(loads), max=max(loads)),
                bytes_written=_spread([r["bytes_written"] for r in runs]),
                spikes_nwb_bytes=first["files"].get("spikes.nwb", 0),
                counts=first["counts"], metrics=first["metrics"], ratio_range=[min(ratios), max(ratios)],
                rates_hz=first["rates_hz"],
                same_in_every_repeat=all([r[k] for k in ("metrics", "counts", "rates_hz")] ==
                                         [first[k] for k in ("metrics", "counts", "rates_hz")] for r in runs),
                machine=dict(before=runs[0]["machine"]["before"], after=runs[-1]["machine"]["after"]))
    if not argv:
        from ctmhsa.sims.config import load_config, options
        from ctmhsa.sims.io import estimate_result_bytes

        co, ro = options(cfg := load_config(None))
        p = cfg["problem"]
        circ = co.as_built(co.describe(p["n"], p["dk"], p["dv"], p["de"], H=p["H"]))
        rr = ro.resolved(co.neuron)
        data["estimate_bytes"] = estimate_result_bytes(circ, co.neuron, rr.duration, rr.warmup,
                                                       ro.record_spikes)
    return data


def _strip(value, limit: int):
    """``value`` with every list longer than ``limit`` replaced by a note of its length."""
    if isinstance(value, dict):
        return {k: _strip(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        if len(value) > limit:
            return f"<{len(value)} items stripped>"
        return [_strip(v, limit) for v in value]
    return value


def adopt(path: str, cache: str, limit: int = 64) -> dict:
    """A benchmark's JSON (with its ``machine`` entry) for ``docs/measured/``: long lists
    stripped (their length noted), the cache state added."""
    with open(path) as fh:
        data = json.load(fh)
    if "machine" not in data:
        raise ValueError(f"{path}: no machine entry (load average); run it with `ctmhsa bench NAME`")
    data = _strip(data, limit)
    data["cache"] = cache
    return data


def _write(data: dict, out: str) -> None:
    from ctmhsa.sims.io import atomic_write_json

    atomic_write_json(out, data)
    print(f"wrote {out}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m ctmhsa.sims.benchmarks.docnumbers",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=ROOT, help="repository root holding docs/ (default this checkout)")
    sub = parser.add_subparsers(dest="cmd")
    rec = sub.add_parser("record-run", help="time `ctmhsa run` in fresh processes; write its JSON")
    rec.add_argument("--repeats", type=int, default=3)
    rec.add_argument("--cache", choices=STATES, default="warm")
    rec.add_argument("--out", help=f"JSON file (default ROOT/{MEASURED}/default_run.json)")
    rec.add_argument("--append", action="store_true", help="keep the repeats already in --out")
    ado = sub.add_parser("adopt", help="copy a benchmark's JSON into docs/measured (long lists stripped)")
    ado.add_argument("bench_json")
    ado.add_argument("--cache", choices=STATES, required=True)
    ado.add_argument("--out", required=True)
    ado.add_argument("--limit", type=int, default=64, help="longest list kept (default 64)")
    args = parser.parse_args(argv)
    if args.cmd == "record-run":
        args.out = args.out or os.path.join(args.root, MEASURED, "default_run.json")
        previous = None
        if args.append and os.path.exists(args.out):
            with open(args.out) as fh:
                previous = json.load(fh)
        _write(record_run(args.repeats, args.cache, previous=previous), args.out)
        return 0
    if args.cmd == "adopt":
        _write(adopt(args.bench_json, args.cache, args.limit), args.out)
        return 0
    outcomes, files = check_all(args.root)
    print(format_table(outcomes))
    bad_files = {name: why for name, why in files.items() if why}
    for name, why in bad_files.items():
        print(f"{MEASURED}/{name}: {'; '.join(why)}")
    failed = [o for o in outcomes if o.ok is False]
    unchecked = sum(o.ok is None for o in outcomes)
    print(f"{len(outcomes) - len(failed) - unchecked} ok, {len(failed)} failed, {unchecked} unchecked")
    return 1 if failed or bad_files else 0


if __name__ == "__main__":
    sys.exit(main())
