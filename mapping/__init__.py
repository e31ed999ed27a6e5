"""Mapping between attention maths and circuit activity.

``ctmhsa.mapping.reference`` is the exact maths (numpy only); ``ctmhsa.mapping.gradients`` the formal gradients
of the paper's section 5; ``ctmhsa.mapping.encode`` / ``ctmhsa.mapping.decode`` the affine codes that turn
tokens and weights into rates, synaptic weights and biases, and rates back into every stage.
"""
