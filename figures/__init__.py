"""Figures, drawn from results directories only (never re-simulating inside a plot function)."""
