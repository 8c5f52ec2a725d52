"""Sum-of-terms form: an expression as ``sum_t sum_{axes_t} [cond_t] * value_t``.

Expanding an expression lifts every ``cond ? v : 0`` into the condition of its term
(``*`` ANDs conditions, ``+`` and ``-`` make separate terms, ``/`` keeps the
numerator's condition, a select splits into its two branches) and flattens nested sums
into the axes of the term. A factor that is a constant plus terms with nothing to lift
multiplies the other side whole: multiplied out, ``(1 - t*t) * v`` as ``v - v*t*t``
loses ``v``'s digits where ``t*t`` rounds to 1. Each term is then simplified on its own domain: the sum
splitting that TVM left as a TODO.

>>> import tegrad as tg
>>> from tegrad.ir.expr import Var
>>> x = tg.placeholder((4,), name="x")
>>> i, a = Var("i"), Var("a")
>>> [str(t) for t in expand(tg.if_then_else(i == a, x[i], 0.0) * 2.0 + x[a])]
['[i == a] x[i] * 2.0', 'x[a]']
"""
from __future__ import annotations

from dataclasses import dataclass
from types import GeneratorType

from tegrad.ir import dtypes as _dt
from tegrad.ir.expr import Binary, Cast, Const, Neg, Not, Reduce, Select, structural_equal
from tegrad.ir.mapper import (Mapper, NodeMemo, all_var_names, free_var_names, rename_axes,
                              substitute)
from tegrad.ir.reduction import sum as sum_reducer
from tegrad.analysis.affine import conjunction, conjuncts, to_constraint
from tegrad.analysis.kronecker import kronecker_pairs

#: terms produced by one product before it is left unexpanded (bounds the blow-up)
MAX_PRODUCT_TERMS = 64
#: terms of one sum before it is left unexpanded: a gradient through a chain of
#: ``e = f(e) + g(e)`` doubles its terms at each link (2**depth of them, though the
#: expression itself grows linearly); past this it stays one term
MAX_SUM_TERMS = 1024


@dataclass(frozen=True)
class Term:
    """``sum over axes of (all conds ? value : 0)``."""

    axes: tuple
    conds: tuple
    value: object

    def __str__(self):
        axes = "".join(f"sum_{ax.name}[{ax.lo}, {ax.hi}) " for ax in self.axes)
        cond = "".join(f"[{c}] " for c in self.conds)
        return f"{axes}{cond}{self.value}"

    def to_expr(self):
        """The term as a tegrad expression (a Reduce when it has axes).

        Conditions on the axes become the reduction's ``where``; the others guard it.
        """
        value = self.value
        names = {ax.name for ax in self.axes}
        inner = [c for c in self.conds if free_var_names(c) & names]
        outer = [c for c in self.conds if not free_var_names(c) & names]
        if self.axes:
            where = conjunction(inner) if inner else None
            value = Reduce(sum_reducer, value, self.axes, where, None, value.dtype)
        if not outer:
            return value
        return Select(conjunction(outer), value, _zero(value.dtype), value.dtype)


def _zero(dtype):
    return Const(0, dtype)


class _Expander(Mapper):
    """The terms of an expression; the expansions are generators (see
    :func:`tegrad.ir.mapper.run`), so any depth expands without recursion."""

    def __init__(self, taken):
        self.taken = set(taken)
        # terms per node, so a node shared within the expression expands once (a term's
        # axes may then appear in two places: a product renames clashing axes, and two
        # sums over the same axes add up)
        self._memo = NodeMemo()

    def visit(self, e):
        if not _dt.is_float(e.dtype):
            return [Term((), (), e)]
        hit = self._memo.get(e)
        if hit is not None:
            return hit
        return self._remembered(e)

    def _remembered(self, e):
        out = Mapper.visit(self, e)
        if type(out) is GeneratorType:
            out = yield from out
        self._memo[e] = out
        return out

    def map_const(self, e):
        return [] if e.value == 0 else [Term((), (), e)]

    def map_binary(self, e):
        rule = _BINARY_EXPANSIONS.get(e.op)
        return [Term((), (), e)] if rule is None else rule(self, e)

    def add(self, e):
        left = yield self.visit(e.a)
        right = yield self.visit(e.b)
        if len(left) + len(right) > MAX_SUM_TERMS:
            return [Term((), (), e)]
        if e.op == "sub":
            right = [Term(r.axes, r.conds, _neg(r.value)) for r in right]
        return left + right

    def mul(self, e):
        left = yield self.visit(e.a)
        right = yield self.visit(e.b)
        if len(left) * len(right) > MAX_PRODUCT_TERMS:
            return [Term((), (), e)]
        # a factor ``c - f`` with nothing to lift multiplies each term of the other side
        # whole: multiplied out, the tangent of tanh, (1 - t*t) * v, is v - v*t*t, which
        # loses v's leading digits where t*t rounds to 1
        if _constant_minus(left):
            left = [Term((), (), e.a)]
        if _constant_minus(right):
            right = [Term((), (), e.b)]
        return [self.product(a, b) for a in left for b in right]

    def div(self, e):
        return [self.scale(r, e.b, "div") for r in (yield self.visit(e.a))]

    def map_neg(self, e):
        return [Term(r.axes, r.conds, _neg(r.value)) for r in (yield self.visit(e.a))]

    def map_cast(self, e):
        if not _dt.is_float(e.a.dtype):
            return [Term((), (), e)]
        return [Term(r.axes, r.conds, Cast(r.value, e.dtype))
                for r in (yield self.visit(e.a))]

    def map_reduce(self, e):
        return self.reduce(e) if e.reducer is sum_reducer else [Term((), (), e)]

    def map_select(self, e):
        return self.select(e)

    def whole(self, e):
        """A node that expansion does not look into: one term."""
        return [Term((), (), e)]

    map_var = map_compare = map_and = map_or = map_not = map_call = map_read = whole

    def select(self, e):
        pairs = kronecker_pairs(e)
        if pairs is not None:
            # the tangent of a read: one term whose equalities pin output axes
            return [Term((), tuple(conjuncts(e.cond)), e.true_value)]
        out = []
        cond_names = free_var_names(e.cond)
        for branch, cond in ((e.true_value, e.cond), (e.false_value, _negate(e.cond))):
            for r in (yield self.visit(branch)):
                r = self.rename_term(r, cond_names)
                out.append(Term(r.axes, tuple(conjuncts(cond)) + r.conds, r.value))
        return out

    def reduce(self, e):
        out = []
        if e.init is not None:
            out += yield self.visit(e.init)
        where = conjuncts(e.where) if e.where is not None else []
        outer = {ax.name for ax in e.axes}
        for c in where:
            outer |= free_var_names(c)
        for r in (yield self.visit(e.source)):
            r = self.rename_term(r, outer)
            out.append(Term(e.axes + r.axes, tuple(where) + r.conds, r.value))
        return out

    def rename_term(self, r, avoid):
        """Rename the term's axes that clash with ``avoid`` (free names of a factor)."""
        if not r.axes or not ({ax.name for ax in r.axes} & avoid):
            return r
        axes, renames = rename_axes(r.axes, self.taken | avoid, only=avoid)
        self.taken |= {ax.name for ax in axes}
        return Term(axes, tuple(substitute(c, renames) for c in r.conds),
                    substitute(r.value, renames))

    def product(self, a, b):
        # only a term with axes can clash; the names of a deep factor cost its size
        if b.axes:
            b = self.rename_term(b, _term_names(a))
        if a.axes:
            a = self.rename_term(a, _term_names(b))
        return Term(a.axes + b.axes, a.conds + b.conds, _mul(a.value, b.value))

    def scale(self, r, factor, op):
        r = self.rename_term(r, free_var_names(factor))
        return Term(r.axes, r.conds, Binary(op, r.value, factor, r.value.dtype))


#: how a float binary node expands (other ops stay one term)
_BINARY_EXPANSIONS = {"add": _Expander.add, "sub": _Expander.add, "mul": _Expander.mul,
                      "div": _Expander.div}


def _constant_minus(terms):
    """Whether ``terms`` are a constant and other terms, none with a condition or an axis
    (``1 - t*t``, ``s + 1``): nothing to lift, and cancellation to fear when multiplied
    out."""
    return (len(terms) > 1 and all(not t.axes and not t.conds for t in terms)
            and any(type(t.value) is Const for t in terms))


def _term_names(t):
    names = free_var_names(t.value)
    for c in t.conds:
        names |= free_var_names(c)
    for ax in t.axes:
        names.add(ax.name)
    return names


def _neg(v):
    return v.a if type(v) is Neg else Neg(v, v.dtype)


def _mul(a, b):
    if type(a) is Const and a.value == 1:
        return b
    if type(b) is Const and b.value == 1:
        return a
    return Binary("mul", a, b, a.dtype)


def _negate(c):
    return c.a if type(c) is Not else Not(c)


def expand(e, taken=()):
    """The terms of ``e`` (see the module docstring); ``taken``: names not to reuse."""
    return _Expander(set(taken) | all_var_names(e))(e)


def merge_terms(terms):
    """Terms over the same axes and affine conditions, added into one term each.

    Conditions that depend on data do not shrink a loop, so terms that differ only in
    them share one: ``sum_k [d1] v1 + sum_k [d2] v2 == sum_k (d1 ? v1 : 0) + (d2 ? v2 : 0)``.
    """
    groups = []
    for t in terms:
        affine = tuple(c for c in t.conds if to_constraint(c) is not None)
        value = _guarded(t.value, [c for c in t.conds if to_constraint(c) is None])
        for k, (axes, conds, total, first) in enumerate(groups):
            if structural_equal(axes, t.axes) and structural_equal(conds, affine):
                groups[k] = (axes, conds, Binary("add", total, value, value.dtype), None)
                break
        else:
            groups.append((t.axes, affine, value, t))
    return [first if first is not None else Term(axes, conds, total)
            for axes, conds, total, first in groups]


def _guarded(value, conds):
    if not conds:
        return value
    return Select(conjunction(conds), value, _zero(value.dtype), value.dtype)
