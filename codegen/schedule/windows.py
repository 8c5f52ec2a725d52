"""A scatter's tiny window moved outside its loops, each element's updates in order.

``for v: for t1: for t2: acc[f(v, t)] op= g(v, t)`` (the taps ``t`` unrolled, tiny) writes
the element ``f(v, t) == f(v', t')`` from several iterations when windows overlap (a
max-pool gradient with dilation 2: ``dx[.., v + 2 * t2] +=``). Such a loop over ``v``
carries a dependence and is not vectorised. :func:`hoist_scatter_windows` runs the taps
outside instead, ``for t1: for t2': for v: ...`` with some taps reversed
(``t == begin + end - 1 - t'``), choosing directions so that every pair of iterations
writing the same element runs in the original order: each element receives the same
updates in the same sequence, so the result is bit-identical (floats are not
reassociated). For fixed taps the iterations over ``v`` write distinct elements, and the
loop over ``v`` is vectorised.

``v`` may be a perfect nest of loops (``for y: for x:``), each moving one index of the
write, the innermost its stride-1 axis; the taps go outside the outermost loop of it
across whose iterations windows overlap (each tap's pass over the rows it writes then
runs after the previous pass is out of the store buffer).

What the update computes from ``v`` alone (a costly part: a division or a call, such as
a max-pool gradient's share ``1 / ties``) was computed once per ``v`` inside the window
before; it is now stored per ``v`` in a local array ``w[v]`` ahead of the taps, computed
by the same operations (when evaluating it where a guard is false cannot fail, as in
:mod:`.ifconvert`).

>>> from tegrad.codegen.loops.nodes import Accumulate, Buffer, For, Load
>>> from tegrad.codegen.loops.printer import format_stmt
>>> from tegrad.ir.expr import Const, Var
>>> from tegrad.ir.reduction import sum as tg_sum
>>> v, t = Var("v", "int64"), Var("t", "int64")
>>> G, D = Buffer("G", (8,), "float32", "input"), Buffer("D", (12,), "float32", "output")
>>> def loop(var, n, body, kind="serial"):
...     return For(var, Const(0, "int64"), Const(n, "int64"), body, kind)
>>> s = loop(v, 8, loop(t, 3, Accumulate(D, (v + t * 2,), Load(G, (v,)), tg_sum), "unrolled"))
>>> print(format_stmt(hoist_scatter_windows(s, taken=set())))
unrolled for (t = 0; t < 3; t++) {
  for (v = 0; v < 8; v++) {
    D[v + (2 - t) * 2] += G[v];
  }
}
"""
from __future__ import annotations

import itertools
import math

from tegrad.ir.expr import Binary, Call, Const, Var

from tegrad.codegen.loops.mapper import (ExprMapper, StmtMapper, block, expr_children,
                                         substitute_stmt, to_affine, walk_expr,
                                         walk_stmts)
from tegrad.codegen.loops.nodes import Allocate, Buffer, For, Load, Store
from tegrad.codegen.tuning import MAX_TAPS, MAX_TUPLES, ROW_LIMIT
from tegrad.codegen.schedule.common import (RangedStmtMapper, bound_names,
                                            constant_trip_count, fresh, run_noting,
                                            sole_accumulation, uses_var)
from tegrad.codegen.schedule.ifconvert import evaluation_cannot_fail

INDEX = "int64"


def _nest(loop):
    """``(chain, taps, leaf)``: the perfect nest of serial loops from 0 to a constant that
    starts at ``loop``, the unrolled constant loops inside it, and the statement inside
    those, or None."""
    chain, s = [], loop
    while type(s) is For and s.kind == "serial" and s.step == 1 and type(s.begin) is Const \
            and s.begin.value == 0 and constant_trip_count(s) is not None:
        chain.append(s)
        s = s.body
    taps = []
    while type(s) is For and s.kind == "unrolled" and s.step == 1 \
            and constant_trip_count(s) is not None:
        taps.append(s)
        s = s.body
    if not chain or not taps or any(type(n) is For for n in walk_stmts(s)):
        return None
    return chain, taps, s


def _coefficients(indices, names):
    """Per index, the coefficients of the variables ``names`` in it; None when an index
    is not affine in them (the rest free of them)."""
    out = []
    for idx in indices:
        aff = to_affine(idx)
        if aff is None:
            return None
        coeffs = dict.fromkeys(names, 0)
        for atom, c in aff.terms:
            if type(atom) is str and atom in coeffs:
                coeffs[atom] = c
            elif type(atom) is not str and {getattr(x, "name", x)
                                             for x in atom.variables()} & set(names):
                return None
        out.append(tuple(coeffs[n] for n in names))
    return out


def _placement(coeffs, depth):
    """Per loop of the chain, the one index it moves (alone among the chain's loops), the
    innermost moving the last index; None otherwise."""
    where = []
    for j in range(depth):
        dims = [d for d, c in enumerate(coeffs) if c[j]]
        if len(dims) != 1 or sum(1 for k in range(depth) if coeffs[dims[0]][k]) != 1:
            return None
        where.append(dims[0])
    if where[-1] != len(coeffs) - 1 or coeffs[-1][depth - 1] != 1:
        return None
    return where


def _conflicts(chain, taps, coeffs, where):
    """``(pairs, moved)``: the pairs ``(first, second)`` of tap tuples whose iterations
    write the same element, ``first``'s update running first in the original order, and
    per loop of the chain whether some such pair lies in different iterations of it."""
    depth, sizes = len(chain), [constant_trip_count(c) for c in chain]
    loop_of = {d: j for j, d in enumerate(where)}
    pairs, moved = [], [False] * depth
    for a, b in itertools.permutations(itertools.product(*(range(t.begin.value, t.end.value)
                                                              for t in taps)), 2):
        # the chain's iterations differ by delta (a's minus b's) where both write one element
        delta = [0] * depth
        for d, c in enumerate(coeffs):
            diff = sum(k * (y - x) for k, x, y in zip(c[depth:], a, b))
            j = loop_of.get(d)
            if j is None:
                if diff:
                    break
            elif diff % c[j] or abs(diff // c[j]) >= sizes[j]:
                break
            else:
                delta[j] = diff // c[j]
        else:
            first = next((x for x in delta if x), 0)
            if first > 0 or (first == 0 and a < b):
                pairs.append((b, a) if first > 0 else (a, b))
                moved = [m or bool(x) for m, x in zip(moved, delta)]
    return pairs, moved


def _directions(taps, pairs):
    """Per tap, whether it runs reversed, so that each pair's first tuple comes first in
    the new order (taps outermost first); None if no choice does."""
    for flips in itertools.product((False, True), repeat=len(taps)):
        def order(t):
            return tuple(-x if f else x for f, x in zip(flips, t))
        if all(order(a) < order(b) for a, b in pairs):
            return flips
    return None


def _costly(e):
    return any(type(n) is Call or (type(n) is Binary and n.op == "div") for n in walk_expr(e))


def _invariant_parts(e, loops, taps):
    """The largest costly sub-expressions of ``e`` that use some of ``loops`` and no
    tap."""
    out, stack, seen = [], [e], set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        names = {n.name for n in walk_expr(node) if type(n) is Var}
        if names & loops and not names & taps and type(node) is not Load \
                and _costly(node):
            out.append(node)
        elif names & taps:
            stack.extend(expr_children(node))
    return out


class _Replace(ExprMapper):
    def __init__(self, mapping):
        self.mapping = mapping

    def finish(self, e, out):
        return self.mapping.get(id(e), out)


def _rows(chain, leaf, w, taps, ranges, taken):
    """``(rows, leaf)``: local arrays ``w[v...]`` over the chain's loops holding the costly
    parts of the update that use no tap (with the nests storing them), and the leaf
    reading them (``w``: the leaf's accumulation); None when they would be too large."""
    names = {c.var.name for c in chain}
    # what a let of the leaf binds is as unknown ahead of the taps as a tap
    tap_names = {t.var.name for t in taps} | bound_names(leaf)[0]
    inner = dict(ranges)
    inner.update((c.var.name, (0, c.end.value - 1)) for c in chain)
    parts = [p for p in _invariant_parts(w.value, names, tap_names)
             if evaluation_cannot_fail(p, inner)]
    shape = tuple(c.end.value for c in chain)
    if parts and math.prod(shape) > ROW_LIMIT:
        return None
    index, mapping, rows = tuple(c.var for c in chain), {}, []
    for p in parts:
        buf = Buffer(fresh(f"{w.buffer.name}_row", taken), shape, p.dtype, "local")
        mapping[id(p)] = Load(buf, index, p.dtype)
        fill = Store(buf, index, p)
        for c in reversed(chain):
            fill = For(c.var, c.begin, c.end, fill, c.kind)
        rows.append((buf, fill))
    return rows, StmtMapper(_Replace(mapping))(leaf) if mapping else leaf


def _hoist(loop, ranges, taken):
    found = _nest(loop)
    if found is None:
        return None
    chain, taps, leaf = found
    if len(taps) > MAX_TAPS or math.prod(constant_trip_count(t) for t in taps) > MAX_TUPLES:
        return None
    w = sole_accumulation(leaf)
    if w is None:
        return None
    bound, _ = bound_names(leaf)
    if any(uses_var(i, b) for i in w.indices for b in bound):
        return None  # an index through a let bound in the leaf is not a form of the loops
    names = [c.var.name for c in chain] + [t.var.name for t in taps]
    coeffs = _coefficients(w.indices, names)
    where = None if coeffs is None else _placement(coeffs, len(chain))
    if where is None:
        return None
    pairs, moved = _conflicts(chain, taps, coeffs, where)
    if not moved[0]:
        return None  # no overlap across the outermost loop: tried further in
    flips = _directions(taps, pairs)
    found = None if flips is None else _rows(chain, leaf, w, taps, ranges, taken)
    if found is None:
        return None
    rows, leaf = found
    mapping = {}
    for t, flip in zip(taps, flips):
        if flip:
            last = Const(t.begin.value + t.end.value - 1, INDEX)
            mapping[t.var.name] = Binary("sub", last, t.var, INDEX)
    out = substitute_stmt(leaf, mapping)
    for c in reversed(chain):
        out = For(c.var, c.begin, c.end, out, c.kind)
    for t in reversed(taps):
        out = For(t.var, t.begin, t.end, out, t.kind, t.step)
    out = block([fill for _, fill in rows] + [out])
    for buf, _ in reversed(rows):
        out = Allocate(buf, out)
    return out


class _HoistWindows(RangedStmtMapper):
    def __init__(self, taken, only):
        super().__init__(only)
        self.taken = taken

    def map_for(self, s):
        out = _hoist(s, self.ranges, self.taken) if self.allowed(s.var.name) else None
        if out is not None:
            self.changed.append(s.var.name)
            return out
        return super().map_for(s)


def hoist_scatter_windows(s, *, taken, hoisted=None, only=None):
    """``s`` with the overlapping tiny windows of its scatters run outside their stride-1
    loop (those named in ``only`` when given; module doc; ``taken``: the names in use, new
    row names added); the names of those loops are appended to ``hoisted`` when given."""
    return run_noting(_HoistWindows(taken, only), s, hoisted)


__all__ = ["hoist_scatter_windows", "MAX_TAPS"]
