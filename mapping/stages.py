"""The old name of :mod:`ctmhsa.maths.stages` (here until version 0.15): importing it gives that
very module."""

import sys

from ctmhsa.maths import stages as _module

sys.modules[__name__] = _module
