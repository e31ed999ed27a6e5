"""Mapping between attention maths and circuit activity.

``mapping.reference`` is the exact maths (numpy only); ``mapping.gradients`` the formal gradients
of the paper's section 5; ``mapping.encode`` / ``mapping.decode`` the affine codes that turn
tokens and weights into rates, synaptic weights and biases, and rates back into every stage.
"""
