"""Loops whose variable is divided by a constant are split by that divisor.

In ``for v in [0, n): ... v // d ... v % d ...`` (``n`` a multiple of ``d``), ``v`` runs as
``v == vo * d + vi`` with ``vi`` in ``[0, d)``, so ``v // d == vo`` and ``v % d == vi``
(floor division: exact for every sign of ``vo``), and for a multiple ``d * e`` of ``d``,
``v // (d * e) == vo // e`` and ``v % (d * e) == (vo % e) * d + vi`` (``vo >= 0``); every
other use of ``v`` reads ``vo * d + vi``. ``d`` is the least divisor of ``v``, which must
divide the others; the outer loop is then split by its own divisors in turn. A tiny
inner loop is unrolled: the divisions disappear (a pooling gradient reads its window's
output once per ``d`` elements instead of dividing per element); a larger one stays a
loop (a reshape's copy, ``flat[v] = x[v // 676, v // 26 % 26, v % 26]``, becomes three
loops over ``x``'s axes, the innermost contiguous).

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
from tegrad.codegen.tuning import MAX_DIVISOR
from tegrad.codegen.schedule.common import (NotingMapper, constant_trip_count, fresh,
                                            run_noting)

INDEX = "int64"


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
                and type(e.b) is Const and e.b.value % self.d == 0):
            q = e.b.value // self.d
            if e.op == "floordiv":
                return self.outer if q == 1 else Binary("floordiv", self.outer, _c(q), INDEX)
            if q == 1:
                return self.inner
            rest = Binary("floormod", self.outer, _c(q), INDEX)
            return Binary("add", Binary("mul", rest, _c(self.d), INDEX), self.inner, INDEX)
        return super().map_binary(e, *args)

    def map_var(self, e, *args):
        if e.name == self.name:
            return Binary("add", Binary("mul", self.outer, Const(self.d, INDEX), INDEX),
                          self.inner, INDEX)
        return e


def split_by_divisor(loop, *, taken):
    """``loop`` split by the constants its variable is divided by (module doc), or
    ``loop`` itself; new names avoid (and are added to) ``taken``."""
    n = constant_trip_count(loop)
    if (type(loop) is not For or n is None or loop.step != 1 or loop.begin.value != 0
            or loop.kind not in ("serial", "vectorized")):
        return loop
    divisors = _divisors(loop.body, loop.var.name)
    if not divisors:
        return loop
    d = min(divisors)
    if not (1 < d and n % d == 0 and all(x % d == 0 for x in divisors)):
        return loop
    outer = Var(fresh(loop.var.name + "_o", taken), INDEX)
    inner = Var(fresh(loop.var.name + "_i", taken), INDEX)
    body = StmtMapper(_Split(loop.var.name, d, outer, inner))(loop.body)
    kind = "unrolled" if d <= MAX_DIVISOR else loop.kind
    return split_by_divisor(For(outer, _c(0), _c(n // d),
                                For(inner, _c(0), _c(d), body, kind)), taken=taken)


def _c(v):
    return Const(v, INDEX)


class _SplitAll(NotingMapper):
    def __init__(self, taken, only):
        super().__init__(only)
        self.taken = taken

    def map_for(self, s):
        s = super().map_for(s)
        if not self.allowed(s.var.name):
            return s
        new = split_by_divisor(s, taken=self.taken)
        if new is not s:
            self.changed.append(s.var.name)
        return new


def split_divided_loops(s, *, taken, changed=None, only=None):
    """``s`` with :func:`split_by_divisor` applied to each of its loops (those named in
    ``only`` when given), innermost first (the names of the loops split appended to the
    list ``changed`` when given)."""
    return run_noting(_SplitAll(taken, only), s, changed)


__all__ = ["split_by_divisor", "split_divided_loops"]
