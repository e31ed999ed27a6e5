"""The old name of :mod:`ctmhsa.devices.cuda` (here until version 0.15): importing it gives that
very module (imported only when asked for: it may load Brian2)."""

import sys

from ctmhsa.devices import cuda as _module

sys.modules[__name__] = _module
