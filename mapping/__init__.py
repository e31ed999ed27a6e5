"""Mapping between attention maths and circuit activity.

``ctmhsa.mapping.encode`` / ``ctmhsa.mapping.decode`` the affine codes that turn tokens and
weights into rates, synaptic weights and biases, and rates back into every stage;
``ctmhsa.mapping.noise`` their spike-count floors; ``ctmhsa.mapping.operating`` the working range.
The maths itself (the reference, gradients, transformer blocks, model files, codes) is
:mod:`ctmhsa.maths`, which imports no circuit.

The maths modules were part of this package until version 0.15: ``ctmhsa.mapping.reference``
and the others are one-line modules that give the same module objects
(``import ctmhsa.mapping.reference``, ``from ctmhsa.mapping import model``, pickles of their
classes).
"""
