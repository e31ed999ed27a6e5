"""The registry of circuit parts: what a part adds to a description, and how it is encoded.

As Nengo's ``Builder.register`` maps a description type to its build function, a :class:`Part`
names one piece of the thalamo-cortical circuit and carries both halves of it: :meth:`Part.build`
adds its populations and projections to a :class:`ctmhsa.circuits.graph.Circuit` (a description;
nothing is allocated), and :meth:`Part.values` writes its weights, biases and rates into the
encoding's :class:`ctmhsa.circuits.values.CircuitValues`. A new part is one class in one module,
registered with :func:`register_part`; :func:`ctmhsa.circuits.builders.build` builds it when its
name is in ``parts=``, and :func:`ctmhsa.mapping.encode.encode` encodes every part the circuit
records in ``meta.parts``.

Registered: the attention areas of a head (``"quadratic"``, Algorithm 1's microcolumns;
``"linear"``, the key-value memory; ``"memory"``, the memory over a stream), whose builders and
facts are registered in :mod:`ctmhsa.circuits.builders` and whose values, decoding and noise in
:mod:`ctmhsa.mapping` (:func:`register_hook`: the circuit layer never imports the mapping layer).
A user's part does both in one class (tests/circuits/test_parts.py); a user's attention area
too (tests/circuits/test_toy_area.py). An area's ``stream`` fact means the key-value memory's
timing (its write gate, :mod:`ctmhsa.circuits.kvmemory`): a stream area of another kind would
bring its own.
"""

from __future__ import annotations

__all__ = ["Part", "PARTS", "register_part", "register_values", "register_hook", "get_part", "area_hook", "areas",
           "get_area", "part_job"]


class Part:
    """One registered piece of a circuit (subclass it and register with :func:`register_part`).

    Attributes
    ----------
    name : str
        The registry name (set by :func:`register_part`).
    """

    name = ""
    populations: tuple = ()
    """An attention area's own populations (the names ``P`` may give copies to)."""
    no_causal = ""
    """An attention area without a causal variant: why (the ``causal=True`` refusal), else empty."""

    # An attention area (``circuit=``) carries its own facts, read by the options, the builder
    # and the read-out instead of lists of circuit names (as Nengo's neuron types carry theirs).
    area = False
    """An attention area: a head's circuit, chosen by ``circuit=`` (else a further part, ``parts=``)."""
    stream = False
    """One token per presentation, a state kept between them (``ctmhsa.circuits.kvmemory``)."""
    apical = False
    """Its divisive interneurons can shunt the apical dendrites too (``apical_inhibition``)."""
    normalize = True
    """Its default for ``normalize`` (the revised paper's memory is unnormalised)."""
    stages: tuple = ()
    """The stages it decodes and is compared on (``Z``, ``z``: only where normalised)."""
    levels: tuple = ()
    """The fidelity levels it is built at (empty: every registered level)."""
    two_point_laws = False
    """Its L5 cells take the two-point-neuron laws (``law=``) other than the product."""
    dale = False
    """Dale's followers are built for it (``dale=True``)."""
    integrators = False
    """Its somata may be perfect integrators (``firing=`` of an integrating mode)."""
    lif_max_dt = None
    """The largest step (s) its lif cells allow where it is below the level's own
    (:func:`ctmhsa.sims.options.max_dt`; the default step then takes it); None: the level's."""

    def reference(self, arrays: dict, phi: str, causal: bool, normalize: bool, forget: float = 1.0) -> dict:
        """The exact stages it is compared with (``arrays``: ``X, WQ, WK, WV, WO`` and ``Y``,
        ``WS``; ``forget``: a stream area's λ per token). For comparison only: nothing of them
        enters the circuit. By default the function registered as hook ``"reference"``."""
        fn = self.hooks.get("reference")
        if fn is None:
            raise ValueError(f"circuit: the area {self.name!r} has no reference registered "
                             f"(register_hook({self.name!r}, 'reference'))")
        return fn(arrays, phi=phi, causal=causal, normalize=normalize, forget=forget)

    def check_options(self, options) -> None:
        """Refuse what does not apply to this area in ``options``
        (:class:`ctmhsa.sims.options.CircuitOptions`, read by attribute); by default nothing more
        than the facts above."""

    def build(self, circuit, ctx: dict):
        """Add this part's populations and projections to ``circuit``.

        Parameters
        ----------
        circuit : ctmhsa.circuits.graph.Circuit
            The description being built; ``circuit.meta`` holds its sizes (``n, m, H, dk, dv, de``).
        ctx : dict
            The builder's context: ``pop(name, cell_type, axes, sizes, *args, **kw)`` adds a
            population (with its population-coding copies), ``kv`` the key/value nucleus, ``pair``
            the ON/OFF axes, and what the attention parts return (``pt_source``).
        """

    hooks: dict
    """Functions registered by the mapping layer (:func:`register_hook`): ``"values"`` (what
    :meth:`values` calls), and for an attention area ``"decode"`` (its stages from the
    observables), ``"noise"`` (their spike-count variances), ``"pool_cells"`` (the cells its
    interneurons pool per macrocolumn) and ``"pooled_drive"`` (the pooled drive of given
    features)."""

    def values(self, circuit, vals, gains, ctx: dict):
        """Write this part's values into ``vals`` (:class:`ctmhsa.circuits.values.CircuitValues`)
        from the weights and the declared input range in ``ctx`` (never from the tokens' stages).
        Returns the (possibly rescaled) ``gains`` and ``R_set`` where the part sets them, else ``None``.
        By default the function registered for the part by :func:`register_values`."""
        fn = self.hooks.get("values")
        return None if fn is None else fn(circuit, vals, gains, ctx)


PARTS: dict[str, Part] = {}
"""Registered parts by name."""


def register_part(name: str):
    """Class decorator registering a :class:`Part` subclass under ``name`` (an instance is kept)."""

    def deco(cls):
        if not (isinstance(cls, type) and issubclass(cls, Part)):
            raise TypeError(f"register_part({name!r}): expected a subclass of ctmhsa.circuits.parts.Part")
        part = cls()
        part.name = name
        part.hooks = dict(getattr(PARTS.get(name), "hooks", {}))   # (re-registration keeps the mapping's)
        PARTS[name] = part
        return cls

    return deco


def register_hook(name: str, hook: str):
    """Decorator registering ``fn`` as hook ``hook`` of part ``name`` (:attr:`Part.hooks`): the
    mapping layer encodes, decodes and predicts the noise of the parts the circuit layer
    describes (the circuit layer never imports the mapping layer), one entry per part and job."""

    def deco(fn):
        get_part(name).hooks[hook] = fn
        return fn

    return deco


def register_values(name: str):
    """Decorator registering ``fn(circuit, vals, gains, ctx)`` as the values of part ``name``
    (:func:`register_hook` with ``"values"``)."""
    return register_hook(name, "values")


def get_part(name: str) -> Part:
    """The registered part ``name`` (``ValueError`` listing the registered ones)."""
    try:
        return PARTS[name]
    except KeyError:
        raise ValueError(f"parts: no part named {name!r}; registered parts are {sorted(PARTS)}") from None


def areas() -> tuple:
    """The names of the registered attention areas (the values ``circuit=`` takes), in
    registration order."""
    return tuple(name for name, part in PARTS.items() if part.area)


def get_area(name) -> Part:
    """The registered attention area ``name`` (``ValueError`` naming ``circuit`` and listing them)."""
    part = PARTS.get(name) if isinstance(name, str) else None
    if part is None or not part.area:
        raise ValueError(f"circuit: expected one of {list(areas())}, got {name!r}")
    return part


def part_job(part: Part, job: str):
    """``part``'s function for ``job``: one registered for it (:func:`register_hook`), else a
    method of that name on the part; ``None`` where it has neither."""
    fn = part.hooks.get(job) or getattr(part, job, None)
    return fn if callable(fn) else None


def area_hook(circuit, hook: str):
    """Hook ``hook`` of the attention area ``circuit`` was built with (``circuit.meta.circuit``):
    the one place that dispatches on the area's kind. A function registered for it
    (:func:`register_hook`), else a method of that name on the part (a user's area may carry its
    own ``decode`` in its class); ``ValueError`` where it has neither."""
    part = get_part(circuit.meta.circuit)
    fn = part_job(part, hook)
    if fn is None:
        raise ValueError(f"parts: part {part.name!r} has no {hook!r} function registered "
                         f"(has {sorted(part.hooks)}); the module that defines it registers it when imported "
                         f"(the shipped parts': ctmhsa.mapping.encode, .decode, .noise, .operating and .kvmemory, "
                         f"all imported by ctmhsa.sims), or its class defines a method {hook!r}")
    return fn
