"""Conversion between integer tegrad expressions and the solver's affine terms.

Index arithmetic (``+``, ``-``, multiplication by constants, ``//`` and ``%`` by
positive constants) maps onto :class:`solver.Affine`; anything else (tensor reads,
min/max, division by a variable) is not quasi-affine and stays a tegrad expression.

>>> from tegrad.ir.expr import Var
>>> str(to_affine((Var("i") * 2 + Var("k")) // 3 - 1))
'(2*i + k) // 3 - 1'
>>> str(from_affine(to_affine(Var("i") + 1 - 1)))
'i'
"""
from __future__ import annotations

from tegrad import solver
from tegrad.solver.affine import FloorDiv, Mod

from tegrad.ir import dtypes as _dt
from tegrad.ir.expr import And, Binary, Compare, Const, Neg, Not, Var
from tegrad.analysis.integer_forms import IntegerForm

INDEX_DTYPE = _dt.INDEX_DTYPE


def to_affine(e):
    """The :class:`solver.Affine` equal to the integer expression ``e``, or None."""
    return AffineForm()(e)


#: divisions nest at most this deep in a quasi-affine form; a deeper one is not taken
#: as affine (the solver prints and orders its forms recursively, in time growing with
#: the square of the nesting)
MAX_DIVISION_NESTING = 64


def _division_nesting(aff):
    """How deep divisions nest in ``aff``, counted up to :data:`MAX_DIVISION_NESTING`."""
    depth, level = 0, [aff]
    while depth < MAX_DIVISION_NESTING:
        level = [atom.expr for form in level for atom, _ in form.terms if type(atom) is not str]
        if not level:
            break
        depth += 1
    return depth


class AffineForm(IntegerForm):
    """The affine form of each integer node (None: not quasi-affine).

    A code generator with node kinds of its own subclasses it (listing them in
    ``_method_names`` and their children in ``children_of``)."""

    def const(self, value):
        return solver.Affine.const(value)

    def var(self, name):
        return solver.Affine.var(name)

    def neg(self, a):
        return -a

    def divide(self, op, a, c):
        if _division_nesting(a) >= MAX_DIVISION_NESTING:
            return None
        return a // c if op == "floordiv" else a % c

    def binary(self, op, a, b):
        if op == "add":
            return a + b
        if op == "sub":
            return a - b
        if op == "mul" and (a.is_constant or b.is_constant):
            return a * b
        return None


def from_affine(aff, dtype=INDEX_DTYPE):
    """The tegrad expression of a :class:`solver.Affine`, terms in the solver's order."""
    aff = solver.lift(aff)
    out = None
    for atom, coeff in aff.as_dict().items():
        term = _atom_expr(atom, dtype)
        if abs(coeff) != 1:
            term = Binary("mul", term, Const(abs(coeff), dtype), dtype)
        if out is None:
            out = Neg(term, dtype) if coeff < 0 else term
        else:
            out = Binary("sub" if coeff < 0 else "add", out, term, dtype)
    c = aff.constant
    if out is None:
        return Const(c, dtype)
    if c != 0:
        out = Binary("add" if c > 0 else "sub", out, Const(abs(c), dtype), dtype)
    return out


def _atom_expr(atom, dtype):
    if isinstance(atom, str):
        return Var(atom, dtype)
    inner = from_affine(atom.expr, dtype)
    op = "floordiv" if isinstance(atom, FloorDiv) else "floormod"
    assert isinstance(atom, (FloorDiv, Mod))
    return Binary(op, inner, Const(atom.divisor, dtype), dtype)


_CONSTRAINT_OF = {"lt": solver.lt, "le": solver.le, "gt": solver.gt, "ge": solver.ge,
                  "eq": solver.eq}


def to_constraints(cond):
    """Affine constraints equivalent to the conjunction ``cond``, or None.

    Handles conjunctions of integer comparisons (``!=`` is a disjunction: None) and
    negated inequalities.
    """
    out = []
    for c in conjuncts(cond):
        con = to_constraint(c)
        if con is None:
            return None
        out.append(con)
    return out


def to_constraint(c, affine=None):
    """The :class:`solver.Constraint` of one integer comparison, or None. ``affine``
    (default :func:`to_affine`) gives the affine form of each side: a code generator
    whose expressions hold nodes of its own passes one that knows them."""
    negate = False
    if type(c) is Not:
        c, negate = c.a, True
    if type(c) is not Compare or not _dt.is_int(c.a.dtype):
        return None
    op = c.op
    if negate:
        op = {"lt": "ge", "le": "gt", "gt": "le", "ge": "lt", "eq": "ne", "ne": "eq"}[op]
    affine = affine or to_affine
    a, b = affine(c.a), affine(c.b)
    if a is None or b is None:
        return None
    if op == "ne":
        return _residue_differs(a - b)
    return _CONSTRAINT_OF[op](a, b)


def _residue_differs(d):
    """The constraint ``d != 0`` when ``d`` is ``s * (e % m) + k`` (``s`` = +-1): ``e % m``
    is not the one residue ``c = -s * k``, so ``(e - c) % m >= 1``; true or false for a
    constant ``d``; None for any other ``d`` (``!=`` is then a disjunction)."""
    if d.is_constant:
        return solver.TRUE if d.constant else solver.FALSE
    if len(d.terms) != 1:
        return None
    (atom, coeff), = d.terms
    if type(atom) is not Mod or abs(coeff) != 1:
        return None
    residue = -coeff * d.constant
    if not 0 <= residue < atom.divisor:
        return solver.TRUE
    return solver.ge((atom.expr - residue) % atom.divisor, 1)


def from_constraint(con, dtype=INDEX_DTYPE):
    """The tegrad comparison ``expr == 0`` or ``expr >= 0`` of a solver constraint."""
    expr = con.expr
    lhs, rhs = _split_sides(expr)
    op = "eq" if con.is_equality else "ge"
    return Compare(op, from_affine(lhs, dtype), from_affine(rhs, dtype))


def _split_sides(expr):
    """``expr`` as ``lhs - rhs`` with positive coefficients on both sides (readable)."""
    pos = {a: c for a, c in expr.as_dict().items() if c > 0}
    neg = {a: -c for a, c in expr.as_dict().items() if c < 0}
    const = expr.constant
    return solver.Affine(pos, max(const, 0)), solver.Affine(neg, max(-const, 0))


def conjuncts(cond):
    """The operands of a conjunction ``a && b && ...`` as a list (``true`` gives [])."""
    out, stack = [], [cond]
    while stack:
        c = stack.pop()
        if type(c) is And:
            stack.extend((c.b, c.a))
        elif type(c) is Const and c.value is True:
            continue
        else:
            out.append(c)
    return out


def conjunction(conds):
    """``c1 && c2 && ...`` (``true`` for none)."""
    out = None
    for c in conds:
        out = c if out is None else And(out, c)
    return Const(True, "bool") if out is None else out
