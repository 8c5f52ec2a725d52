"""Exact reasoning about integer iteration domains (for zero elimination).

Independent of the tensor language: terms are :class:`Affine` expressions
(with ``//`` / ``%`` atoms), constraints, domains and transformations.

>>> from tegrad.solver import Affine, Domain, eq, simplify_domain
>>> i, c, y, x = (Affine.var(n) for n in ("i", "c", "y", "x"))
>>> flat = Domain([("i", 0, 3 * 4 * 5)], [eq(i, c * 20 + y * 5 + x)], parameters=["c", "y", "x"])
>>> t = simplify_domain(flat)
>>> t.new.names, str(t.old_to_new["i"])
((), '20*c + x + 5*y')
"""

from .affine import Affine, AffineLike, FloorDiv, Mod, expand_divisions, lift, parse_affine
from .bounds import Bounds
from .constraint import Constraint, EQ, FALSE, GE, TRUE, eq, ge, gt, le, lt
from .domain import Domain, count_union, variable_bounds
from .linear_equations import LinearSolution, solve_linear_equations
from .simplify import simplify_domain
from .smith import smith_normal_form
from .transform import DomainTransformation

__all__ = [
    "Affine", "AffineLike", "FloorDiv", "Mod", "expand_divisions", "lift", "parse_affine",
    "Constraint", "EQ", "GE", "TRUE", "FALSE", "eq", "ge", "gt", "le", "lt",
    "Bounds", "Domain", "count_union", "variable_bounds", "DomainTransformation",
    "LinearSolution", "solve_linear_equations", "simplify_domain", "smith_normal_form",
]
