"""The old name of :mod:`ctmhsa.maths.inputs` (here until version 0.15): importing it gives that
very module."""

import sys

from ctmhsa.maths import inputs as _module

sys.modules[__name__] = _module
