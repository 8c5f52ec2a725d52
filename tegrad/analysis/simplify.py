"""Local algebraic simplification: a table of rewrite rules applied bottom-up.

Each rule takes a node whose children are already simplified and returns a simpler
equivalent node, or None when it does not apply. Rules are keyed by node class (and op
for binary nodes); each states its rewrite in its docstring, and the completeness test
has a case per rule. Floating-point rules assume finite values
(``x * 0 -> 0``), as every autodiff system does for symbolic zeros.

>>> from tegrad.ir.expr import Var
>>> i = Var("i")
>>> str(simplify((i + 0) * 1))
'i'
"""
from __future__ import annotations

import math
import operator

from tegrad.ir import dtypes as _dt
from tegrad.ir.expr import (And, Binary, Cast, Compare, Const, Neg, Not, Or, Reduce, Select,
                            structural_equal)
from tegrad.ir.mapper import IdentityMapper, NodeMemo


def _is_const(e, value=None):
    return type(e) is Const and (value is None or e.value == value)


_FOLD = {"add": operator.add, "sub": operator.sub, "mul": operator.mul,
         "div": operator.truediv, "floordiv": operator.floordiv, "floormod": operator.mod,
         "min": min, "max": max}


def _fold_binary(op, a, b, dtype):
    if op in ("div", "floordiv", "floormod") and b == 0:
        return None
    if op in ("min", "max") and any(isinstance(v, float) and math.isnan(v) for v in (a, b)):
        return Const(math.nan, dtype)  # NaN propagates, as np.minimum and np.maximum
    v = _FOLD[op](a, b)
    if _dt.is_int(dtype) and not (_dt.min_value(dtype) <= v <= _dt.max_value(dtype)):
        return None
    return Const(v, dtype)


def _zero(dtype):
    return Const(False if _dt.is_bool(dtype) else 0, dtype)


#: ``{node class or (Binary, op): (rule, ...)}``; the first rule that applies wins
REWRITE_RULES = {}
#: the same for the rules that hold for every value, NaN, infinities and signed zeros
#: included (``x * 1 -> x`` but not ``x + 0 -> x``): compiled code, which must give the
#: evaluator's values exactly, is simplified with these only
EXACT_RULES = {}


def rewrite(*keys, exact=False):
    """Register a rule (a function of a node returning a simpler node, or None) for node
    classes or ``(Binary, op)`` keys; its docstring states the rewrite. ``exact``: the
    rewrite holds for every value (see :data:`EXACT_RULES`)."""
    def register(fn):
        for key in keys:
            REWRITE_RULES[key] = REWRITE_RULES.get(key, ()) + (fn,)
            if exact:
                EXACT_RULES[key] = EXACT_RULES.get(key, ()) + (fn,)
        return fn
    return register


def _binary_keys(*ops):
    return [(Binary, op) for op in ops]


@rewrite(*_binary_keys("add", "sub", "mul", "div", "floordiv", "floormod", "min", "max"))
def fold_binary(e):
    """c1 op c2 -> c (not a division by zero, not an integer overflow)"""
    if _is_const(e.a) and _is_const(e.b):
        return _fold_binary(e.op, e.a.value, e.b.value, e.dtype)
    return None


@rewrite(*_binary_keys("add", "sub"))
def add_zero(e):
    """x + 0 -> x; x - 0 -> x"""
    return e.a if _is_const(e.b, 0) else None


@rewrite(*_binary_keys("add"))
def zero_add(e):
    """0 + x -> x"""
    return e.b if _is_const(e.a, 0) else None


@rewrite(*_binary_keys("add"), exact=True)
def add_neg(e):
    """x + -y -> x - y"""
    return Binary("sub", e.a, e.b.a, e.dtype) if type(e.b) is Neg else None


@rewrite(*_binary_keys("add"), exact=True)
def add_selects(e):
    """(c ? a1 : b1) + (c ? a2 : b2) -> c ? a1 + a2 : b1 + b2"""
    a, b = e.a, e.b
    if type(a) is Select and type(b) is Select and structural_equal(a.cond, b.cond):
        return Select(a.cond, Binary("add", a.true_value, b.true_value, e.dtype),
                      Binary("add", a.false_value, b.false_value, e.dtype), e.dtype)
    return None


@rewrite(*_binary_keys("sub"))
def zero_sub(e):
    """0 - x -> -x"""
    return Neg(e.b, e.dtype) if _is_const(e.a, 0) else None


@rewrite(*_binary_keys("sub"))
def sub_self(e):
    """x - x -> 0"""
    return _zero(e.dtype) if structural_equal(e.a, e.b) else None


@rewrite(*_binary_keys("mul", "div", "floordiv"), exact=True)
def times_one(e):
    """x * 1 -> x; x / 1 -> x; x // 1 -> x (integers: a float's is its floor)"""
    if e.op == "floordiv" and not _dt.is_int(e.dtype):
        return None
    return e.a if _is_const(e.b, 1) else None


@rewrite(*_binary_keys("mul"), exact=True)
def one_times(e):
    """1 * x -> x"""
    return e.b if _is_const(e.a, 1) else None


@rewrite(*_binary_keys("mul"))
def times_zero(e):
    """x * 0 -> 0; 0 * x -> 0 (finite x)"""
    return _zero(e.dtype) if _is_const(e.a, 0) or _is_const(e.b, 0) else None


@rewrite(*_binary_keys("mul"), exact=True)
def times_minus_one(e):
    """x * -1 -> -x; -1 * x -> -x"""
    if _is_const(e.b, -1):
        return Neg(e.a, e.dtype)
    return Neg(e.b, e.dtype) if _is_const(e.a, -1) else None


@rewrite(*_binary_keys("div", "floordiv"))
def zero_over(e):
    """0 / x -> 0; 0 // x -> 0 (x nonzero where evaluated)"""
    return _zero(e.dtype) if _is_const(e.a, 0) else None


@rewrite(*_binary_keys("floormod"), exact=True)
def mod_one(e):
    """x % 1 -> 0 (integers)"""
    return _zero(e.dtype) if _is_const(e.b, 1) and _dt.is_int(e.dtype) else None


@rewrite(*_binary_keys("min", "max"), exact=True)
def extremum_self(e):
    """min(x, x) -> x; max(x, x) -> x"""
    return e.a if structural_equal(e.a, e.b) else None


@rewrite(Neg)
def neg_const(e):
    """-(c) -> c'"""
    return Const(-e.a.value, e.dtype) if _is_const(e.a) else None


@rewrite(Neg, exact=True)
def neg_neg(e):
    """-(-x) -> x"""
    return e.a.a if type(e.a) is Neg else None


_COMPARE_FOLD = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
                 "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
                 "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


@rewrite(Compare, exact=True)
def fold_compare(e):
    """c1 < c2 -> true/false"""
    if _is_const(e.a) and _is_const(e.b):
        return Const(_COMPARE_FOLD[e.op](e.a.value, e.b.value), "bool")
    return None


@rewrite(Compare, exact=True)
def compare_self(e):
    """x == x -> true; x < x -> false (not for floats: NaN)"""
    if structural_equal(e.a, e.b) and not _dt.is_float(e.a.dtype):
        return Const(e.op in ("le", "ge", "eq"), "bool")
    return None


@rewrite(And, exact=True)
def and_const_left(e):
    """true && x -> x; false && x -> false"""
    return (e.b if e.a.value else e.a) if _is_const(e.a) else None


@rewrite(And, exact=True)
def and_const_right(e):
    """x && true -> x; x && false -> false"""
    return (e.a if e.b.value else e.b) if _is_const(e.b) else None


@rewrite(Or, exact=True)
def or_const_left(e):
    """true || x -> true; false || x -> x"""
    return (e.a if e.a.value else e.b) if _is_const(e.a) else None


@rewrite(Or, exact=True)
def or_const_right(e):
    """x || true -> true; x || false -> x"""
    return (e.b if e.b.value else e.a) if _is_const(e.b) else None


@rewrite(And, Or, exact=True)
def logical_self(e):
    """x && x -> x; x || x -> x"""
    return e.a if structural_equal(e.a, e.b) else None


@rewrite(Not, exact=True)
def not_const(e):
    """!c -> c'"""
    return Const(not e.a.value, "bool") if _is_const(e.a) else None


@rewrite(Not, exact=True)
def not_not(e):
    """!!x -> x"""
    return e.a.a if type(e.a) is Not else None


@rewrite(Select, exact=True)
def select_const(e):
    """true ? a : b -> a; false ? a : b -> b"""
    if _is_const(e.cond):
        return e.true_value if e.cond.value else e.false_value
    return None


@rewrite(Select, exact=True)
def select_same(e):
    """c ? a : a -> a"""
    return e.true_value if structural_equal(e.true_value, e.false_value) else None


@rewrite(Select, exact=True)
def select_not(e):
    """!c ? a : b -> c ? b : a"""
    if type(e.cond) is Not:
        return Select(e.cond.a, e.false_value, e.true_value, e.dtype)
    return None


@rewrite(Cast, exact=True)
def cast_same(e):
    """cast to its own dtype -> x"""
    return e.a if e.a.dtype == e.dtype else None


@rewrite(Cast)
def cast_const(e):
    """cast(c) -> c' (floats truncate toward zero; not inf or NaN to an integer)"""
    if not _is_const(e.a):
        return None
    value = e.a.value
    if _dt.is_int(e.dtype) and isinstance(value, float):
        if not math.isfinite(value):
            return None
        value = math.trunc(value)
    return Const(value, e.dtype)


@rewrite(Reduce, exact=True)
def where_true(e):
    """reduce(..., where true) -> reduce(...)"""
    if e.where is not None and _is_const(e.where, True):
        return Reduce(e.reducer, e.source, e.axes, None, e.init, e.dtype)
    return None


@rewrite(Reduce, exact=True)
def reduce_empty(e):
    """a reduction over nothing (where false, an empty axis) -> init or the identity"""
    empty = (e.where is not None and _is_const(e.where, False)) or any(
        _is_const(ax.extent) and ax.extent.value <= 0 for ax in e.axes)
    if empty:
        return e.init if e.init is not None else e.reducer.identity(e.dtype)
    return None


@rewrite(Reduce)
def sum_of_zeros(e):
    """sum(0) -> init or 0"""
    if e.reducer.name == "sum" and _is_const(e.source, 0):
        return e.init if e.init is not None else _zero(e.dtype)
    return None


def _rewritten(e, rules):
    """The first rule of ``e``'s kind in ``rules`` that applies, or None."""
    key = (Binary, e.op) if type(e) is Binary else type(e)
    for rule in rules.get(key, ()):
        out = rule(e)
        if out is not None:
            return out
    return None


class Simplifier(IdentityMapper):
    """Bottom-up application of a rule table (``REWRITE_RULES`` by default) until no rule
    applies at a node."""

    def __init__(self, rules=None):
        super().__init__()
        self.rules = REWRITE_RULES if rules is None else rules
        # a rule's result is simplified again, and it is mostly made of simplified
        # nodes: remembered, they are not walked again (a chain of n rewrites would be
        # walked n times over, quadratic in its length)
        self.memo = NodeMemo()

    def finish(self, e, out):
        for _ in range(64):
            new = _rewritten(out, self.rules)
            if new is None:
                # no rule applies here, and its children are simplified: a fixed point
                self.memo[out] = out
                break
            out = new if new is out else self(new)
        return out


def simplify(e):
    """Apply the rewrite table to ``e``; returns ``e`` itself when nothing applies."""
    return Simplifier()(e)


def simplify_exact(e):
    """Apply the rules that hold for every value (:data:`EXACT_RULES`) to ``e``.

    >>> from tegrad.ir.expr import Var
    >>> x = Var("x", "float32")
    >>> str(simplify_exact(x * 1.0 + 0.0))
    'x + 0.0'
    """
    return Simplifier(EXACT_RULES)(e)


__all__ = ["simplify", "simplify_exact", "Simplifier", "EXACT_RULES", "REWRITE_RULES"]
