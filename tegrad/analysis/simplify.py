"""Local algebraic simplification: a table of rewrite rules applied bottom-up.

Each rule takes a node whose children are already simplified and returns a simpler
equivalent node, or None when it does not apply. Rules are keyed by node type (and op
for binary nodes), one comment per rule. Floating-point rules assume finite values
(``x * 0 -> 0``), as every autodiff system does for symbolic zeros.

>>> from tegrad.ir.expr import Var
>>> i = Var("i")
>>> str(simplify((i + 0) * 1))
'i'
"""
from __future__ import annotations

import math

from tegrad.ir import dtypes as _dt
from tegrad.ir.expr import Binary, Const, Neg, Not, Reduce, Select, structural_equal
from tegrad.ir.mapper import IdentityMapper


def _is_const(e, value=None):
    return type(e) is Const and (value is None or e.value == value)


def _fold_binary(op, a, b, dtype):
    if op == "add":
        v = a + b
    elif op == "sub":
        v = a - b
    elif op == "mul":
        v = a * b
    elif op == "div":
        if b == 0:
            return None
        v = a / b
    elif op == "floordiv":
        if b == 0:
            return None
        v = a // b
    elif op == "floormod":
        if b == 0:
            return None
        v = a % b
    elif op == "min":
        v = min(a, b)
    else:
        v = max(a, b)
    if _dt.is_int(dtype) and not (_dt.min_value(dtype) <= v <= _dt.max_value(dtype)):
        return None
    return Const(v, dtype)


def _zero(dtype):
    return Const(False if _dt.is_bool(dtype) else 0, dtype)


def _add(e):
    a, b = e.a, e.b
    if _is_const(a) and _is_const(b):          # c1 + c2 -> c
        return _fold_binary("add", a.value, b.value, e.dtype)
    if _is_const(b, 0):                        # x + 0 -> x
        return a
    if _is_const(a, 0):                        # 0 + x -> x
        return b
    if type(b) is Neg:                         # x + -y -> x - y
        return Binary("sub", a, b.a, e.dtype)
    if type(a) is Select and type(b) is Select and structural_equal(a.cond, b.cond):
        # (c ? a1 : b1) + (c ? a2 : b2) -> c ? a1 + a2 : b1 + b2
        return Select(a.cond, Binary("add", a.true_value, b.true_value, e.dtype),
                      Binary("add", a.false_value, b.false_value, e.dtype), e.dtype)
    return None


def _sub(e):
    a, b = e.a, e.b
    if _is_const(a) and _is_const(b):          # c1 - c2 -> c
        return _fold_binary("sub", a.value, b.value, e.dtype)
    if _is_const(b, 0):                        # x - 0 -> x
        return a
    if _is_const(a, 0):                        # 0 - x -> -x
        return Neg(b, e.dtype)
    if structural_equal(a, b):                 # x - x -> 0
        return _zero(e.dtype)
    return None


def _mul(e):
    a, b = e.a, e.b
    if _is_const(a) and _is_const(b):          # c1 * c2 -> c
        return _fold_binary("mul", a.value, b.value, e.dtype)
    if _is_const(b, 1):                        # x * 1 -> x
        return a
    if _is_const(a, 1):                        # 1 * x -> x
        return b
    if _is_const(a, 0) or _is_const(b, 0):     # x * 0 -> 0 (finite x)
        return _zero(e.dtype)
    if _is_const(b, -1):                       # x * -1 -> -x
        return Neg(a, e.dtype)
    if _is_const(a, -1):                       # -1 * x -> -x
        return Neg(b, e.dtype)
    return None


def _div(e):
    a, b = e.a, e.b
    if _is_const(a) and _is_const(b):          # c1 / c2 -> c
        return _fold_binary("div", a.value, b.value, e.dtype)
    if _is_const(b, 1):                        # x / 1 -> x
        return a
    if _is_const(a, 0):                        # 0 / x -> 0 (x nonzero where evaluated)
        return _zero(e.dtype)
    return None


def _floordiv(e):
    a, b = e.a, e.b
    if _is_const(a) and _is_const(b):          # c1 // c2 -> c
        return _fold_binary("floordiv", a.value, b.value, e.dtype)
    if _is_const(b, 1):                        # x // 1 -> x
        return a
    if _is_const(a, 0):                        # 0 // x -> 0
        return _zero(e.dtype)
    return None


def _floormod(e):
    a, b = e.a, e.b
    if _is_const(a) and _is_const(b):          # c1 % c2 -> c
        return _fold_binary("floormod", a.value, b.value, e.dtype)
    if _is_const(b, 1) and _dt.is_int(e.dtype):  # x % 1 -> 0
        return _zero(e.dtype)
    return None


def _min_max(e):
    a, b = e.a, e.b
    if _is_const(a) and _is_const(b):          # min/max(c1, c2) -> c
        return _fold_binary(e.op, a.value, b.value, e.dtype)
    if structural_equal(a, b):                 # min/max(x, x) -> x
        return a
    return None


def _neg(e):
    if _is_const(e.a):                         # -(c) -> c'
        return Const(-e.a.value, e.dtype)
    if type(e.a) is Neg:                       # -(-x) -> x
        return e.a.a
    return None


_COMPARE_FOLD = {"lt": lambda a, b: a < b, "le": lambda a, b: a <= b,
                 "gt": lambda a, b: a > b, "ge": lambda a, b: a >= b,
                 "eq": lambda a, b: a == b, "ne": lambda a, b: a != b}


def _compare(e):
    if _is_const(e.a) and _is_const(e.b):      # c1 < c2 -> true/false
        return Const(_COMPARE_FOLD[e.op](e.a.value, e.b.value), "bool")
    if structural_equal(e.a, e.b) and not _dt.is_float(e.a.dtype):
        # x == x -> true, x < x -> false (not for floats: NaN)
        return Const(e.op in ("le", "ge", "eq"), "bool")
    return None


def _and(e):
    a, b = e.a, e.b
    if _is_const(a):                           # true && x -> x; false && x -> false
        return b if a.value else a
    if _is_const(b):                           # x && true -> x; x && false -> false
        return a if b.value else b
    if structural_equal(a, b):                 # x && x -> x
        return a
    return None


def _or(e):
    a, b = e.a, e.b
    if _is_const(a):                           # true || x -> true; false || x -> x
        return a if a.value else b
    if _is_const(b):                           # x || true -> true; x || false -> x
        return b if b.value else a
    if structural_equal(a, b):                 # x || x -> x
        return a
    return None


def _not(e):
    if _is_const(e.a):                         # !c -> c'
        return Const(not e.a.value, "bool")
    if type(e.a) is Not:                       # !!x -> x
        return e.a.a
    return None


def _select(e):
    if _is_const(e.cond):                      # true ? a : b -> a; false ? a : b -> b
        return e.true_value if e.cond.value else e.false_value
    if structural_equal(e.true_value, e.false_value):  # c ? a : a -> a
        return e.true_value
    if type(e.cond) is Not:                    # !c ? a : b -> c ? b : a
        return Select(e.cond.a, e.false_value, e.true_value, e.dtype)
    return None


def _cast(e):
    if e.a.dtype == e.dtype:                   # cast to own dtype -> x
        return e.a
    if _is_const(e.a):                         # cast(c) -> c'
        value = e.a.value
        if _dt.is_int(e.dtype) and isinstance(value, float):
            if not math.isfinite(value):
                return None
            value = math.trunc(value)
        return Const(value, e.dtype)
    return None


def _reduce(e):
    if e.where is not None and _is_const(e.where, True):   # where true -> no where
        return Reduce(e.reducer, e.source, e.axes, None, e.init, e.dtype)
    empty = (e.where is not None and _is_const(e.where, False)) or any(
        _is_const(ax.extent) and ax.extent.value <= 0 for ax in e.axes)
    if empty:                                  # reduction over nothing -> init or identity
        return e.init if e.init is not None else e.reducer.identity(e.dtype)
    if e.reducer.name == "sum" and _is_const(e.source, 0):  # sum of zeros -> init or 0
        return e.init if e.init is not None else _zero(e.dtype)
    return None


REWRITE_RULES = {
    ("Binary", "add"): _add, ("Binary", "sub"): _sub, ("Binary", "mul"): _mul,
    ("Binary", "div"): _div, ("Binary", "floordiv"): _floordiv,
    ("Binary", "floormod"): _floormod, ("Binary", "min"): _min_max,
    ("Binary", "max"): _min_max, "Neg": _neg, "Compare": _compare, "And": _and,
    "Or": _or, "Not": _not, "Select": _select, "Cast": _cast, "Reduce": _reduce,
}


def _rule_for(e):
    t = type(e)
    if t is Binary:
        return REWRITE_RULES.get(("Binary", e.op))
    return REWRITE_RULES.get(t.__name__)


class Simplifier(IdentityMapper):
    """Bottom-up application of ``REWRITE_RULES`` until no rule applies at a node."""

    def __init__(self):
        self.memo = {}

    def __call__(self, e, *args):
        hit = self.memo.get(id(e))
        if hit is not None and hit[0] is e:
            return hit[1]
        out = super().__call__(e)
        for _ in range(64):
            rule = _rule_for(out)
            new = rule(out) if rule is not None else None
            if new is None:
                break
            out = new if new is out else super().__call__(new)
        self.memo[id(e)] = (e, out)
        return out


def simplify(e):
    """Apply the rewrite table to ``e``; returns ``e`` itself when nothing applies."""
    return Simplifier()(e)


__all__ = ["simplify", "Simplifier", "REWRITE_RULES"]
