"""Neuron models of the cortico-thalamic attention circuit, per fidelity level.

``ctmhsa.neurons.params`` holds the one physiological parameter set shared by every level;
``ctmhsa.neurons.models`` the cell models (Brian2 equation strings with units) registered per
``(level, cell_type)``.
"""

from .models import FIDELITY_LEVELS, MODELS, CellModel, get_model, phi_expression  # noqa: F401
from .params import DEFAULT_PARAMS, CellParams  # noqa: F401
