"""Square tiles for nests that read across rows what they write along them (transposes).

``for a: for b: Y[.., a, b] = f(X[.., b, a])`` writes ``Y`` along its stride-1 axis but
reads ``X`` one element per row: each iteration of ``b`` touches another cache line (and,
for large rows, another page), and the line of ``X`` it loaded is evicted before the
next iteration of ``a`` uses its neighbours. :func:`tile_transposed_reads` runs the two
loops in ``T x T`` tiles instead,

    for a_o: for b_o: for a_i < T: for b_i < T:  (a == a_o * T + a_i, b == b_o * T + b_i)

so that a tile's ``T`` lines of ``X`` and of ``Y`` stay in the first-level cache while
all of them are used; ``b_i`` stays innermost, along ``Y``'s stride-1 axis (vectorised).
Every iteration runs once, with the same body; it applies only where iterations are
independent (each writes its own elements and reads nothing the nest writes elsewhere),
so their order does not change any value. ``T`` is the most vector lanes (the host's,
halved down to 4) that divides both trip counts; other nests are left alone.

>>> from tegrad.codegen.loops.nodes import Buffer, For, Load, Store
>>> from tegrad.codegen.loops.printer import format_stmt
>>> from tegrad.ir.expr import Const, Var
>>> X, Y = Buffer("X", (8, 8), "float32", "input"), Buffer("Y", (8, 8), "float32", "output")
>>> a, b = Var("a", "int64"), Var("b", "int64")
>>> loop = lambda v, body: For(v, Const(0, "int64"), Const(8, "int64"), body)
>>> s = loop(a, loop(b, Store(Y, (a, b), Load(X, (b, a)))))
>>> print(format_stmt(tile_transposed_reads(s, lanes_of=lambda dtype: 4, taken=set())))
for (a_o = 0; a_o < 2; a_o++) {
  for (b_o = 0; b_o < 2; b_o++) {
    for (a_i = 0; a_i < 4; a_i++) {
      for (b_i = 0; b_i < 4; b_i++) {
        Y[a_o * 4 + a_i, b_o * 4 + b_i] = X[b_o * 4 + b_i, a_o * 4 + a_i];
      }
    }
  }
}
"""
from __future__ import annotations

from tegrad.ir.expr import Binary, Const, Var

from tegrad.codegen.loops.mapper import loads, stmt_exprs, substitute_stmt, to_affine, walk_stmts
from tegrad.codegen.loops.nodes import Block, For, Let, Store
from tegrad.codegen.tuning import MIN_TILE
from tegrad.codegen.schedule.common import (NotingMapper, constant_trip_count, fresh,
                                            independence_problem, loop_value, run_noting,
                                            uses_var)
from tegrad.codegen.schedule.loop_order import stride_one

INDEX = "int64"


def _c(v):
    return Const(int(v), INDEX)


def _moves_last_index(indices, name):
    """The last index moves with ``name`` (affinely), no other index does: a read that
    runs along a row as ``name`` runs."""
    if not indices or any(uses_var(i, name) for i in indices[:-1]):
        return False
    aff = to_affine(indices[-1])
    return aff is not None and any(atom == name for atom, c in aff.terms if c)


def _reads_across_rows(body, outer, inner):
    """Some load of ``body`` runs along its rows with ``outer`` and across them with
    ``inner`` (``inner`` in an earlier index only)."""
    return any(_moves_last_index(ld.indices, outer) and any(uses_var(i, inner)
                                                            for i in ld.indices[:-1])
               for node in walk_stmts(body) for e in stmt_exprs(node) for ld in loads(e))


def _straight_line(body):
    """Stores and lets only: no loop, branch or accumulation to keep in order."""
    return all(type(n) in (Store, Let, Block) for n in walk_stmts(body))


def _tile(outer, inner, lanes):
    """The tile side for the trip counts of ``outer`` and ``inner``, or None."""
    n_outer, n_inner = constant_trip_count(outer), constant_trip_count(inner)
    if n_outer is None or n_inner is None:
        return None
    t = lanes
    while t >= MIN_TILE:
        if n_outer % t == 0 and n_inner % t == 0 and n_outer > t and n_inner > t:
            return t
        t //= 2
    return None


class _TileTransposed(NotingMapper):
    def __init__(self, lanes_of, taken, only):
        super().__init__(only)
        self.lanes_of, self.taken = lanes_of, taken

    def map_for(self, s):
        s = super().map_for(s)
        inner = s.body
        if not self.allowed(s.var.name):
            return s
        if (type(inner) is not For or s.kind != "serial" or inner.kind != "serial"
                or s.step != 1 or inner.step != 1 or uses_var(inner.begin, s.var.name)
                or uses_var(inner.end, s.var.name) or not _straight_line(inner.body)):
            return s
        a, b = s.var.name, inner.var.name
        writes = [n for n in walk_stmts(inner.body) if type(n) is Store]
        if not writes or not all(stride_one(w.indices, b) for w in writes):
            return s
        if not _reads_across_rows(inner.body, a, b):
            return s
        t = _tile(s, inner, min(self.lanes_of(w.buffer.dtype) for w in writes))
        if t is None or independence_problem(inner.body, (a, b), accumulate_ok=False,
                                             loops=(s, inner)):
            return s
        return self._tiled(s, inner, t)

    def _tiled(self, outer, inner, t):
        names = {}
        for loop in (outer, inner):
            for part in ("o", "i"):
                names[loop.var.name, part] = Var(fresh(f"{loop.var.name}_{part}",
                                                       self.taken), INDEX)

        def value(loop):
            o, i = names[loop.var.name, "o"], names[loop.var.name, "i"]
            return loop_value(loop, Binary("add", Binary("mul", o, _c(t), INDEX), i, INDEX))

        body = substitute_stmt(inner.body, {outer.var.name: value(outer),
                                            inner.var.name: value(inner)})
        for loop, part in ((inner, "i"), (outer, "i"), (inner, "o"), (outer, "o")):
            trip = t if part == "i" else constant_trip_count(loop) // t
            body = For(names[loop.var.name, part], _c(0), _c(trip), body)
        self.changed.append(outer.var.name)
        return body


def tile_transposed_reads(s, *, lanes_of, taken, tiled=None, only=None):
    """``s`` with each two-loop nest that writes along its inner loop and reads along its
    outer one (whose outer loop is named in ``only`` when given) run in square tiles of
    ``lanes_of(dtype)`` (the written dtype's vector lanes) or fewer (module doc); the
    outer loops' names tiled are appended to ``tiled``."""
    return run_noting(_TileTransposed(lanes_of, taken, only), s, tiled)


__all__ = ["tile_transposed_reads"]
