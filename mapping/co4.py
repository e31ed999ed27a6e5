"""The old name of :mod:`ctmhsa.maths.co4` (here until version 0.15): importing it gives that
very module."""

import sys

from ctmhsa.maths import co4 as _module

sys.modules[__name__] = _module
