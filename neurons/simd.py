"""Soma state updates the compiler can vectorise on ``cpp_standalone``.

A lif barrel head spent over half its run in two serial loops: the L2/3 and L5 somata's state
updates, one ``exp`` of the membrane's conductance per cell and step among them (``docs/lif.md``,
"Where the time went"). GCC vectorises neither, for two reasons, measured on the generated code
(GCC 12, ``-fopt-info-vec``):

- Brian2's code declares its array pointers ``__restrict`` as local variables, which GCC does
  not use to rule out aliasing; with the gathers of the folded compartments' values no run-time
  alias check is possible either.
- ``exp`` has a vector version (glibc's libmvec) only when ``__FAST_MATH__`` is defined, and
  Brian2 compiles with ``-ffast-math -fno-finite-math-only``, which leaves it undefined.

So the lif somata are integrated by ``exponential_euler_simd``
(:data:`ctmhsa.neurons.params.SIMD_METHOD`, registered with Brian2 on import), Brian2's
exponential Euler with two changes that apply on the ``cpp_standalone`` device alone (elsewhere
it is exactly ``exponential_euler``): the state update's loop is preceded by ``#pragma GCC ivdep``
(``templates/stateupdate_simd.cpp``; each iteration reads and writes its own cell's state and
reads folded compartments no state update of the loop writes), and every ``exp`` of the update
is :data:`VEXP`, an exponential written in arithmetic alone. Spikes stay deterministic for a
seed; they are not those of the runtime device (whose lif spikes differ from the compiled
device's anyway, by their random draws).

The somata's background conductances draw two uniforms per cell and step. Brian2's ``rand()``
is a call into a Mersenne twister (two 32-bit outputs per double), which no compiler vectorises:
with the state update vectorised, those draws were over a third of a lif barrel head's run. On
``cpp_standalone`` the somata's per-step code (:class:`CounterDraws`) therefore draws one key
per group and step from Brian2's seeded generator (``draw_key = rand()``, scalar code) and
each cell's uniforms from a hash of that key, its index and the draw's number (:data:`URAND`,
SplitMix64's mixing function; Steele, Lea & Flood 2014): arithmetic again, so the loop
vectorises, and the same draws whatever the number of threads. Elsewhere the code is run as
written, with ``rand()``.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
from brian2.core.functions import DEFAULT_FUNCTIONS, Function
from brian2.devices.cpp_standalone.codeobject import CPPStandaloneCodeObject
from brian2.devices.cpp_standalone.device import CPPStandaloneDevice
from brian2.devices.device import get_device
from brian2.groups.group import CodeRunner
from brian2.stateupdaters.base import StateUpdateMethod
from brian2.stateupdaters.exponential_euler import ExponentialEulerStateUpdater

from .params import DRAW_KEY, SIMD_METHOD
from .threshold import package_templater

__all__ = ["VEXP", "VEXP_CPP", "URAND", "URAND_CPP", "urand", "counter_draws",
           "CounterDraws", "SimdStateUpdateCodeObject", "SimdExponentialEuler"]

VEXP_CPP = """
// exp(x) in arithmetic alone, so that a loop calling it can be vectorised: x = n ln2 + r with
// |r| <= ln2/2 (ln2 in two parts, Cody-Waite), e^r by Cephes' Pade form
// 1 + 2 r P(r^2) / (Q(r^2) - r P(r^2)), and 2^n written into the exponent's bits. Relative
// error against libm's exp, compiled with -ffast-math (measured): 2.2e-16 on [-2, 0.5], 1.8e-15
// on [-50, 50], 2.4e-14 on [-708, 709] (the compiler may merge the two parts of ln2); exp(-708)
// below that range, exp(709) above.
static inline double _vexp(double x)
{
    const double xc = x < -708.0 ? -708.0 : (x > 709.0 ? 709.0 : x);
    const double n = __builtin_floor(1.4426950408889634 * xc + 0.5);
    const double r = (xc - n * 6.93145751953125e-1) - n * 1.42860682030941723212e-6;
    const double rr = r * r;
    const double p = r * ((1.26177193074810590878e-4 * rr + 3.02994407707441961300e-2) * rr
                          + 9.99999999999999999910e-1);
    const double q = ((3.00198505138664455042e-6 * rr + 2.52448340349684104192e-3) * rr
                      + 2.27265548208155028766e-1) * rr + 2.00000000000000000009e0;
    const int64_t bits = ((int64_t)n + 1023) << 52;
    double scale;
    __builtin_memcpy(&scale, &bits, sizeof scale);
    return (1.0 + 2.0 * p / (q - p)) * scale;
}
"""
"""C++ of :data:`VEXP` (support code of the code objects that call it)."""

VEXP = Function(np.exp, arg_units=[1], return_unit=1, arg_types=["float"], return_type="float",
                stateless=True)
"""``vexp``: the exponential (numpy's on a numpy target); on C++ targets :data:`VEXP_CPP`."""
VEXP.implementations.add_implementation("cpp", {"support_code": VEXP_CPP}, name="_vexp")
DEFAULT_FUNCTIONS["vexp"] = VEXP   # found by name, as Brian2's own functions


_GOLDEN = 0x9E3779B97F4A7C15
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB

URAND_CPP = f"""
// SplitMix64's mixing function (Steele, Lea & Flood 2014): a bijection of 64-bit words
static inline uint64_t _mix64(uint64_t z)
{{
    z = (z ^ (z >> 30)) * {_M1:#x}ULL;
    z = (z ^ (z >> 27)) * {_M2:#x}ULL;
    return z ^ (z >> 31);
}}
// a uniform in [0, 1) from the step's key in [0, 1) (53 bits), a cell index and a draw number
static inline double _urand(double key, int64_t i, int64_t draw)
{{
    const uint64_t k = _mix64((uint64_t)(key * 9007199254740992.0) ^ ((uint64_t)draw * {_GOLDEN:#x}ULL));
    return (double)(_mix64(k + (uint64_t)i) >> 11) * 1.1102230246251565e-16;
}}
"""
"""C++ of :data:`URAND`."""


def _mix64(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(_M1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(_M2)
    return z ^ (z >> np.uint64(31))


def urand(key, i, draw):
    """The counter-based uniform of :data:`URAND_CPP` in numpy, bit for bit: ``key`` in [0, 1)
    (its 53 bits), cell index ``i`` and draw number ``draw`` (integers; broadcast)."""
    key, i, draw = np.broadcast_arrays(np.asarray(key, float), np.asarray(i), np.asarray(draw))
    with np.errstate(over="ignore"):   # 64-bit words wrap, as in C++
        k = _mix64((key * 2.0 ** 53).astype(np.uint64) ^ (draw.astype(np.uint64) * np.uint64(_GOLDEN)))
        return (_mix64(k + i.astype(np.uint64)) >> np.uint64(11)).astype(float) * 2.0 ** -53


URAND = Function(urand, arg_units=[1, 1, 1], return_unit=1, arg_types=["float", "integer", "integer"],
                 return_type="float", stateless=True)
"""``urand(key, i, draw)``: a uniform in [0, 1) hashed from a key, a cell and a draw number."""
URAND.implementations.add_implementation("cpp", {"support_code": URAND_CPP}, name="_urand")
DEFAULT_FUNCTIONS["urand"] = URAND


_RAND = re.compile(r"\brand\(\)")


def counter_draws(code: str) -> str:
    """``code`` with its ``rand()`` calls drawn from one key per step: a first statement
    ``draw_key = rand()`` (scalar: one draw of the group's generator per step), then each
    ``rand()`` the ``n``-th ``urand(draw_key, i, n)``."""
    n = itertools.count(1)
    return f"{DRAW_KEY} = rand()\n" + _RAND.sub(lambda m: f"urand({DRAW_KEY}, i, {next(n)})", code)


def _standalone() -> bool:
    # exactly Brian2's C++ standalone device (brian2cuda subclasses it with code objects of its own)
    return type(get_device()) is CPPStandaloneDevice


class SimdStateUpdateCodeObject(CPPStandaloneCodeObject):
    """``cpp_standalone`` code object that finds this package's templates before Brian2's
    (``stateupdate_simd``: Brian2's state-update loop with ``#pragma GCC ivdep``)."""

    templater = package_templater()
    """:meta private:"""


_EXP = re.compile(r"\bexp\(")


class SimdExponentialEuler(ExponentialEulerStateUpdater):
    """Brian2's exponential Euler; on the ``cpp_standalone`` device its state update is
    vectorisable (module docstring). Brian2 passes the state updater to a method that returns a callable, so that
    the method can choose its code object."""

    def __call__(self, equations, variables=None, method_options=None):
        code = super().__call__(equations, variables, method_options)

        def apply(updater):
            if not _standalone():
                return code
            updater.codeobj_class = SimdStateUpdateCodeObject
            updater.template = "stateupdate_simd"
            return _EXP.sub("vexp(", code)

        return apply


StateUpdateMethod.register(SIMD_METHOD, SimdExponentialEuler())


class CounterDraws(CodeRunner):
    """A group's per-step code (as ``run_regularly``) whose ``rand()`` draws are counter-based on
    ``cpp_standalone`` (:func:`counter_draws`, in a vectorisable loop); elsewhere the code as
    written. The group declares :data:`ctmhsa.neurons.params.DRAW_KEY`. Install with
    :meth:`install`."""

    def __init__(self, group, code: str, clock, when: str, order: int, name: str):
        super().__init__(group, "stateupdate", code=code, clock=clock, when=when, order=order, name=name)
        self.written = code

    def create_code_objects(self, run_namespace):
        if _standalone():
            self.abstract_code = counter_draws(self.written)
            self.template, self.codeobj_class = "stateupdate_simd", SimdStateUpdateCodeObject
        else:
            self.abstract_code, self.template, self.codeobj_class = self.written, "stateupdate", self.group.codeobj_class
        super().create_code_objects(run_namespace)

    @classmethod
    def install(cls, group, code: str, clock, when: str, order: int, name: str) -> "CounterDraws":
        runner = cls(group, code, clock, when, order, name)
        group.contained_objects.append(runner)
        return runner
