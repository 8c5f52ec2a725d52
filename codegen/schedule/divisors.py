"""Loops whose variable is divided by a constant are split by that divisor.

In ``for v in [0, n): ... v // d ... v % d ...`` (``n`` a multiple of ``d``), ``v`` runs as
``v == vo * d + vi`` with ``vi`` in ``[0, d)``, so ``v // d == vo`` and ``v % d == vi``
(floor division: exact for every sign of ``vo``); every other use of ``v`` reads
``vo * d + vi``. The inner loop has a tiny constant trip count and is unrolled: the
divisions disappear (a pooling gradient reads its window's output once per ``d``
elements instead of dividing per element).

>>> from tegrad.ir.expr import Binary, Const, Var
>>> from tegrad.codegen.loops.nodes import Buffer, For, Load, Store
>>> from tegrad.codegen.loops.printer import format_stmt
>>> i, X = Var("i", "int64"), Buffer("X", (4,), "float64", "input")
>>> Y = Buffer("Y", (8,), "float64", "output")
>>> loop = For(i, Const(0, "int64"), Const(8, "int64"),
...            Store(Y, (i,), Load(X, (Binary("floordiv", i, Const(2, "int64"), "int64"),))))
>>> print(format_stmt(split_by_divisor(loop, taken={"i"})))
for (i_o = 0; i_o < 4; i_o++) {
  unrolled for (i_i = 0; i_i < 2; i_i++) {
    Y[i_o * 2 + i_i] = X[i_o];
  }
}
"""
from __future__ import annotations

from tegrad.ir.expr import Binary, Const, Var

from tegrad.codegen.loops.mapper import (ExprMapper, StmtMapper, stmt_exprs, walk_expr,
                                         walk_stmts)
from tegrad.codegen.loops.nodes import For
from tegrad.codegen.schedule.common import constant_trip_count, fresh

INDEX = "int64"

#: the largest divisor split out (the inner loop is unrolled)
MAX_DIVISOR = 4


def _divisors(body, name):
    """The constant divisors of ``name`` in ``v // d`` and ``v % d`` in ``body``."""
    out = set()
    for node in walk_stmts(body):
        for e in stmt_exprs(node):
            for n in walk_expr(e):
                if (type(n) is Binary and n.op in ("floordiv", "floormod")
                        and type(n.a) is Var and n.a.name == name and type(n.b) is Const):
                    out.add(n.b.value)
    return out


class _Split(ExprMapper):
    def __init__(self, name, d, outer, inner):
        self.name, self.d, self.outer, self.inner = name, d, outer, inner

    def map_binary(self, e, *args):
        if (e.op in ("floordiv", "floormod") and type(e.a) is Var and e.a.name == self.name
                and type(e.b) is Const and e.b.value == self.d):
            return self.outer if e.op == "floordiv" else self.inner
        return super().map_binary(e, *args)

    def map_var(self, e, *args):
        if e.name == self.name:
            return Binary("add", Binary("mul", self.outer, Const(self.d, INDEX), INDEX),
                          self.inner, INDEX)
        return e


def split_by_divisor(loop, *, taken):
    """``loop`` split by the one constant its variable is divided by (module doc), or
    ``loop`` itself; new names avoid (and are added to) ``taken``."""
    n = constant_trip_count(loop)
    if (type(loop) is not For or n is None or loop.step != 1 or loop.begin.value != 0
            or loop.kind not in ("serial", "vectorized")):
        return loop
    divisors = _divisors(loop.body, loop.var.name)
    if len(divisors) != 1:
        return loop
    d = divisors.pop()
    if not (1 < d <= MAX_DIVISOR and n % d == 0):
        return loop
    outer = Var(fresh(loop.var.name + "_o", taken), INDEX)
    inner = Var(fresh(loop.var.name + "_i", taken), INDEX)
    body = StmtMapper(_Split(loop.var.name, d, outer, inner))(loop.body)
    return For(outer, Const(0, INDEX), Const(n // d, INDEX),
               For(inner, Const(0, INDEX), Const(d, INDEX), body, "unrolled"))


class _SplitAll(StmtMapper):
    def __init__(self, taken):
        super().__init__()
        self.taken, self.changed = taken, []

    def map_for(self, s):
        s = super().map_for(s)
        new = split_by_divisor(s, taken=self.taken)
        if new is not s:
            self.changed.append(s.var.name)
        return new


def split_divided_loops(s, *, taken, changed=None):
    """``s`` with :func:`split_by_divisor` applied to each of its loops, innermost first
    (the names of the loops split appended to the list ``changed`` when given)."""
    mapper = _SplitAll(taken)
    out = mapper(s)
    if changed is not None:
        changed.extend(mapper.changed)
    return out


__all__ = ["split_by_divisor", "split_divided_loops"]
