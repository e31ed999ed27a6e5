"""The maths of attention, apart from any circuit: numpy only, nothing of Brian2 or the project.

:mod:`~ctmhsa.maths.reference` the exact (linear and memory) attention every level is compared
with; :mod:`~ctmhsa.maths.gradients` the formal gradients of the paper's section 5;
:mod:`~ctmhsa.maths.transformer` and :mod:`~ctmhsa.maths.model` transformer blocks and their
model files (:mod:`~ctmhsa.maths.weights` trained attention weights); :mod:`~ctmhsa.maths.stages`
the names of the stages; :mod:`~ctmhsa.maths.inputs` declared input ranges;
:mod:`~ctmhsa.maths.codes` the affine codes and gains between quantities and neural variables;
:mod:`~ctmhsa.maths.co4` the rival Co4 theory's reference maths.

This is the lowest layer: every other package may import it, it imports none of them (the
layer test checks the whole import graph). :mod:`ctmhsa.mapping` turns this maths into the
values of a circuit and reads them back. Until version 0.15 these modules lived in
:mod:`ctmhsa.mapping`, whose old names (``ctmhsa.mapping.reference``, ...) still give them.
"""

from . import co4  # noqa: F401,E402 - registers the Co4 model files' kind with load_model
