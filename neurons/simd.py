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

So the lif somata are integrated by :data:`METHOD`, Brian2's exponential Euler with two changes
that apply on the ``cpp_standalone`` device alone (elsewhere it is exactly
``exponential_euler``): the state update's loop is preceded by ``#pragma GCC ivdep``
(``templates/stateupdate_simd.cpp``; each iteration reads and writes its own cell's state and
reads folded compartments no state update of the loop writes), and every ``exp`` of the update
is :data:`VEXP`, an exponential written in arithmetic alone. Spikes stay deterministic for a
seed; they are not those of the runtime device (whose lif spikes differ from the compiled
device's anyway, by their random draws).
"""

from __future__ import annotations

import re

import numpy as np
from brian2.core.functions import DEFAULT_FUNCTIONS, Function
from brian2.devices.cpp_standalone.codeobject import CPPStandaloneCodeObject
from brian2.devices.cpp_standalone.device import CPPStandaloneDevice
from brian2.devices.device import get_device
from brian2.stateupdaters.base import StateUpdateMethod
from brian2.stateupdaters.exponential_euler import ExponentialEulerStateUpdater

from .models import SIMD_METHOD
from .threshold import _templater

__all__ = ["METHOD", "VEXP", "VEXP_CPP", "SimdStateUpdateCodeObject", "SimdExponentialEuler"]

METHOD = SIMD_METHOD
"""Name of the state-update method (registered with Brian2 on import)."""

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


class SimdStateUpdateCodeObject(CPPStandaloneCodeObject):
    """``cpp_standalone`` code object that finds this package's templates before Brian2's
    (``stateupdate_simd``: Brian2's state-update loop with ``#pragma GCC ivdep``)."""

    templater = _templater()
    """:meta private:"""


_EXP = re.compile(r"\bexp\(")


class SimdExponentialEuler(ExponentialEulerStateUpdater):
    """Brian2's exponential Euler; on the ``cpp_standalone`` device (exactly Brian2's: brian2cuda
    subclasses it with its own code objects) its state update is vectorisable (module
    docstring). Brian2 passes the state updater to a method that returns a callable, so that
    the method can choose its code object."""

    def __call__(self, equations, variables=None, method_options=None):
        code = super().__call__(equations, variables, method_options)

        def apply(updater):
            if type(get_device()) is not CPPStandaloneDevice:
                return code
            updater.codeobj_class = SimdStateUpdateCodeObject
            updater.template = "stateupdate_simd"
            return _EXP.sub("vexp(", code)

        return apply


StateUpdateMethod.register(METHOD, SimdExponentialEuler())
