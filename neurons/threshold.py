"""Spike thresholders of the circuit's cells: the escape cells' per-step code and the spike
condition in one loop, and on ``cpp_standalone`` that loop split over the OpenMP threads.

Brian2 tests a spike condition in one serial loop (its ``threshold`` template), after the
``run_regularly`` code of the step. The escape cells (:data:`ctmhsa.neurons.models.ESCAPE`) update their
survival and window integral every step and then compare the survival with their draw: two
passes over every cell, the second serial. On a barrel head's binary (2 threads) the L5 IT
survival pass was 19 % and its serial thresholder 7.5 % of the run; one loop split in blocks
over the threads took the binary from 0.666 to 0.519 s for 1.2 s (medians of 9, measured).

:class:`CellThresholder` runs a model's ``pre_threshold`` statements inside the thresholder's
loop, for each cell just before its spike condition; the statements and their order per cell
are unchanged, so the spikes are the same on every device. On ``cpp_standalone`` it generates
its code from ``templates/threshold_blocks.cpp`` (:class:`BlockThresholdCodeObject`): one block
of cells per OpenMP thread, whose events are then moved together in cell order, as the serial
loop lists them. Other devices and targets use Brian2's own template. Every spiking cell group
of the circuit uses it (:func:`ctmhsa.neurons.models.add_step_code`), with or without per-step code.
"""

from __future__ import annotations

import os

from brian2.codegen.templates import Templater
from brian2.devices.cpp_standalone.codeobject import CPPStandaloneCodeObject
from brian2.devices.cpp_standalone.device import CPPStandaloneDevice
from brian2.devices.device import get_device
from brian2.groups.neurongroup import Thresholder
from brian2.utils.stringtools import get_identifiers
from jinja2 import ChoiceLoader, FileSystemLoader

__all__ = ["CellThresholder", "BlockThresholdCodeObject", "package_templater"]


RANDOM = frozenset({"rand", "randn", "poisson"})
"""Brian2's random functions: a thresholder using them keeps Brian2's serial loop."""

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
"""This package's Brian2 templates."""


def package_templater():
    """Brian2's ``cpp_standalone`` templater, finding :data:`TEMPLATES` first. (A directory, not
    Brian2's ``derive``: its package loader resolves ``neurons`` through the import system, where
    a test directory of the same name may stand first.)"""
    base = CPPStandaloneCodeObject.templater
    t = Templater(base.package_names, base.extension, env_globals=base.env_globals, templates_dir=base.templates_dir)
    t.env.loader = ChoiceLoader([FileSystemLoader(TEMPLATES), t.env.loader])
    return t


class BlockThresholdCodeObject(CPPStandaloneCodeObject):
    """``cpp_standalone`` code object that finds this package's templates before Brian2's."""

    templater = package_templater()
    """Brian2's ``cpp_standalone`` templater with this package's templates first (an
    implementation detail: a Brian2 templater answers every attribute name with a template).

    :meta private:
    """


class CellThresholder(Thresholder):
    """A spike thresholder that runs per-cell ``code`` (may be empty) before the spike condition,
    in the same loop, in blocks over the threads on ``cpp_standalone`` (see the module
    docstring). Install with :meth:`install`."""

    def __init__(self, group, code: str = ""):
        self.pre_code = code
        super().__init__(group, when="thresholds", event="spike")

    def update_abstract_code(self, run_namespace):
        super().update_abstract_code(run_namespace)
        if self.pre_code:
            self.abstract_code = f"{self.pre_code}\n{self.abstract_code}"

    def create_code_objects(self, run_namespace):
        # exactly Brian2's C++ standalone device (brian2cuda's subclasses it with its own code
        # objects), and no random numbers in the loop: in blocks they would come from each
        # thread's generator, and the spikes would depend on which thread took which block
        random = get_identifiers(f"{self.pre_code}\n{self.group.events[self.event]}") & RANDOM
        if type(get_device()) is CPPStandaloneDevice and not random:
            self.template, self.codeobj_class = "threshold_blocks", BlockThresholdCodeObject
        else:   # the target's own class (or one set on the object, ctmhsa.neurons.compilation.lean_cython)
            self.template = "threshold"
            if self.codeobj_class is BlockThresholdCodeObject:
                self.codeobj_class = None
        super().create_code_objects(run_namespace)

    @classmethod
    def install(cls, group, code: str = "") -> "CellThresholder":
        """Replace ``group``'s spike thresholder by one running ``code`` first; return it."""
        old = group.thresholder["spike"]
        new = cls(group, code)
        new.order = old.order
        group.contained_objects[group.contained_objects.index(old)] = new
        group.thresholder["spike"] = new
        return new
