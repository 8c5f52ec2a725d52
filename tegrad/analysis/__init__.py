"""Analyses shared by zero elimination and code generation.

Simplification, affine forms of index expressions, interval bounds, canonical indices and
the cost model. Imports the IR and the solver only.
"""
