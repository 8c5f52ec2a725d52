"""Where a gradient stage can be nonzero, and guards that keep its readers there.

The adjoint of a tensor is a sum of its consumers' contributions, each of which is zero
outside the points the consumer reads (the affine image of the consumer's domain). Zero
elimination records, for every stage it rewrites, a *support*: affine conditions on the
stage's axes outside which its value is exactly zero (an over-approximation: the
smallest conjunction valid on every term's domain). A later stage whose term has a read
of that stage as a factor, ``dA[a] = sum_x dF[x] * P(x, a)``, then sums only over the
points where ``dF`` can be nonzero::

    sum_x dF[x] * P(x, a)  ==  sum_{x in support(dF)} dF[x] * P(x, a)

The identity holds wherever ``P`` is finite (the dropped products are ``0 * P``); where
``P`` is NaN or infinite at a point no consumer reads (``1 / x`` at ``x = 0``), the
guarded sum is the hand-written gradient's value, not NaN. The guard also shrinks loops.

>>> import tegrad as tg
>>> from tegrad.ir.expr import Var
>>> from tegrad.zero_elim.terms import Term
>>> h = tg.placeholder((7,), name="h")
>>> dF = tg.compute((8,), lambda x: tg.if_then_else(x >= 1, h[x - 1], 0.0), name="dF")
>>> s = Supports()
>>> s.record(dF, [[Var("x") >= 1]])      # the one term of dF is zero unless x >= 1
>>> [str(c) for c in s.guard(Term((), (), dF[Var("a")] * 2.0)).conds]
['a >= 1']
"""
from __future__ import annotations

from tegrad.ir.expr import Binary, Cast, Neg, Read, structural_equal
from tegrad.analysis.affine import from_constraint, to_affine, to_constraint
from tegrad.zero_elim.domain import implied, parameter_ranges
from tegrad.zero_elim.terms import Term


def factor_reads(value):
    """The reads that are factors of ``value`` (through ``*``, the numerator of ``/``,
    negation and casts): where such a read is zero, so is ``value`` (if finite)."""
    out, stack = [], [value]
    while stack:
        e = stack.pop()
        kind = type(e)
        if kind is Read:
            out.append(e)
        elif kind is Binary and e.op == "mul":
            stack.extend((e.b, e.a))
        elif kind is Binary and e.op == "div":
            stack.append(e.a)
        elif kind is Neg or kind is Cast:
            stack.append(e.a)
    return out


class Supports:
    """``{id(stage): (axis names, constraints)}`` for the stages zero elimination wrote.

    A stage without an entry (an input, a forward stage, one whose support is its whole
    shape) is taken to be nonzero anywhere.
    """

    def __init__(self):
        self._table = {}

    def record(self, t, alternatives, axes=None):
        """Note that ``t`` is zero outside the union of ``alternatives``.

        Each alternative is a list of conditions (tegrad expressions) over ``axes``, one
        per dimension of ``t`` (default: the axes of ``t``'s compute stage); only affine
        conditions are used (dropping one only widens the support).
        """
        axes = t.op.axes if axes is None else axes
        ranges = parameter_ranges(axes)
        if len(ranges) != len(axes) or len(axes) != len(t.shape):
            return
        alts = []
        for alt in alternatives:
            alts.append([con for con in map(to_constraint, alt) if con is not None])
        hull = _hull(alts, ranges)
        if hull:
            self._table[id(t)] = (tuple(ax.name for ax in axes), tuple(hull))

    def of(self, t):
        """``(axis names, constraints)`` of ``t``'s support, or None (anywhere)."""
        return self._table.get(id(t))

    def guard(self, term):
        """``term`` with the support of each of its factor reads as conditions."""
        extra = []
        for read in factor_reads(term.value):
            entry = self._table.get(id(read.tensor))
            if entry is None:
                continue
            names, constraints = entry
            indices = [to_affine(i) for i in read.indices]
            at = {n: i for n, i in zip(names, indices) if i is not None}
            for con in constraints:
                if not con.variables() <= at.keys():
                    continue  # an index that is not affine: no guard (the sum stays wider)
                con = con.substitute(at).normalized()
                if con.truth is True:
                    continue  # a constant index inside the support
                c = from_constraint(con)
                if not any(structural_equal(c, old) for old in term.conds + tuple(extra)):
                    extra.append(c)
        if not extra:
            return term
        return Term(term.axes, term.conds + tuple(extra), term.value)


def _hull(alternatives, ranges):
    """Constraints holding on every alternative (within ``ranges``), minus those the
    ranges imply: a conjunction containing the union of the alternatives."""
    if not alternatives or any(not alt for alt in alternatives):
        return []
    unique = []
    for alt in alternatives:
        if not any(alt == other for other in unique):
            unique.append(alt)
    alternatives = unique
    kept = []
    for alt in alternatives:
        for con in alt:
            if any(con == k for k in kept) or implied(con, [], ranges):
                continue
            if all(other is alt or implied(con, other, ranges) for other in alternatives):
                kept.append(con)
    return kept


__all__ = ["Supports", "factor_reads"]
