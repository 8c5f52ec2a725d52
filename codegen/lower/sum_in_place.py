"""A product plus a temporary: the temporary computed where the sum goes, the product
added onto it.

A stage ``R = A B + T`` (a residual block's input gradient: the transposed
convolution's product plus the gradient that came through the skip connection) is
lowered as a statement ``S`` running the product into ``R``, then a loop nest adding
``T`` to every element. ``T`` is computed earlier and kept until ``S``, while ``R``'s
memory, which nothing uses before ``S``, stands empty. :func:`sums_in_place` writes
``T`` into ``R`` instead (every statement before ``S`` names ``R`` where it named
``T``, and still say they compute ``T``: ``stage``), makes the product add onto what ``R`` holds (``accumulate``) and drops the
loop nest: ``T`` needs no storage of its own, and the sum one pass less over ``R``.

It does so when

- ``S`` is a block (or a run of top-level statements) of one matrix product
  overwriting ``R`` from its first element with ``batch * m * n`` equal to ``R``'s
  size, then products adding onto ``R``, then the nest; or a branch whose arm taken when the operands are finite is that block, and
  whose other arm (the product's loops) reads ``T`` only in the loop body storing
  ``R``, before the store, at its indices (as :mod:`.in_place` requires of an update);
- the nest stores each element of ``R`` once as ``R[v] + T[v]`` (either order) at one
  index ``v``: loops of constant bounds around one store whose flat offsets are
  distinct (:func:`~.in_place.each_element_once`), as many as ``R``'s elements, all
  inside ``R``; statements after the store in its loop body (a later stage fused
  there) stay, when they write neither buffer, read no ``T`` and read ``R`` only at
  ``v`` (which holds the sum there either way);
- ``T`` is a temporary of ``R``'s shape and dtype that no product reads in ``S``,
  that ``S`` does not write, that no statement after ``S`` touches, and that no
  statement reads at an index computed from loaded data (the check would name it);
- no top-level statement before ``S`` touches ``R`` and none after it writes ``R``.

Identity preserved: every element of ``R`` ends as ``T[v]`` plus the product's sum;
what changes is only the order of the additions (the product's partial sums, one per
block of ``k``, are added in turn onto ``T[v]`` instead of onto each other first: a
float32 sum equal up to rounding). Before ``S``, ``R``'s memory holds exactly what
``T``'s did, and nothing else reads or writes it there.

Measured on the ResNet block of ``benchmarks/models.py`` (training step, 1 thread): the
residual's gradient ``dadd`` (1 MB) lives in the output ``dx``, and the workspace goes
from 6.52 to 5.52 MB. Nothing is chosen that the kernel does not determine, so, like
:mod:`.memory_order`, the pass records no step.

>>> from tegrad.ir.expr import Const, Var
>>> from tegrad.codegen.kernels.gemm import GemmSpec
>>> from tegrad.codegen.loops.nodes import Block, Buffer, For, Kernel, Load, MatrixProduct, Store
>>> from tegrad.codegen.loops.printer import format_stmt
>>> a, b = Buffer("a", (8, 8), "float32", "input"), Buffer("b", (8, 8), "float32", "input")
>>> r, t = Buffer("r", (8, 8), "float32", "output"), Buffer("t", (8, 8), "float32")
>>> i, j = Var("i", "int64"), Var("j", "int64")
>>> nest = lambda value: For(i, Const(0, "int64"), Const(8, "int64"), For(
...     j, Const(0, "int64"), Const(8, "int64"), Store(value[0], (i, j), value[1])))
>>> product = MatrixProduct(GemmSpec.dense("float32", 8, 8, 8), r, a, b)
>>> body = Block((nest((t, Load(a, (i, j)) * 2.0)),
...               Block((product, nest((r, Load(r, (i, j)) + Load(t, (i, j))))))))
>>> k = sums_in_place(Kernel("k", (a, b, r), (t,), body))
>>> k.temps, k.body.stmts[1].spec.accumulate
((), True)
>>> print(format_stmt(k.body.stmts[0]))
for (i = 0; i < 8; i++) {
  for (j = 0; j < 8; j++) {
    r[i, j] = a[i, j] * 2.0;  // t
  }
}
"""
from __future__ import annotations

import dataclasses

from tegrad.ir.expr import Binary

from tegrad.codegen.loops import nodes as _n
from tegrad.codegen.loops.mapper import (block, buffers_of, loads, stmt_exprs, to_affine,
                                         walk_stmts)
from tegrad.codegen.lower.in_place import (each_element_once, read_at_loaded_index,
                                           reads_buffer, rename_buffers, safe_in,
                                           written_buffers)


def sums_in_place(kernel):
    """``kernel`` with each sum of a product and a temporary computed in the sum's memory
    (see the module doc): the temporary dropped from ``kernel.temps``."""
    stmts = list(kernel.body.stmts) if type(kernel.body) is _n.Block else [kernel.body]
    temps = set(kernel.temps)
    dropped = set()
    at = 0
    while at < len(stmts):
        end = _statement_end(stmts, at)
        found = _product_sum(block(stmts[at:end]))
        if found is not None:
            r, t, rewritten = found
            if t in temps and t not in dropped and _fits(stmts, at, end, r, t):
                # (T's statements are all before S: S only reads it, and nothing after
                # it touches it)
                renamed = {t: r}
                stmts[:at] = [rename_buffers(s, renamed, labelled=True) for s in stmts[:at]]
                stmts[at:end] = [rewritten(renamed)]
                dropped.add(t)
        at += 1
    if not dropped:
        return kernel
    return _n.Kernel(kernel.name, kernel.args,
                     tuple(b for b in kernel.temps if b not in dropped), block(stmts))


def _statement_end(stmts, at):
    """The end of the statement ``S`` starting at top-level position ``at``: a product
    standing alone there takes with it the products into its result after it and the
    statement after those (``S`` as one block)."""
    if type(stmts[at]) is not _n.MatrixProduct:
        return at + 1
    end = at + 1
    while end < len(stmts) and type(stmts[end]) is _n.MatrixProduct \
            and stmts[end].c == stmts[at].c:
        end += 1
    return min(end + 1, len(stmts))


def _fits(stmts, at, end, r, t):
    """Whether ``t`` can be computed in ``r``'s memory for the statement ``S`` (the
    top-level statements ``at`` to ``end``, exclusive) summing into ``r`` (the
    conditions on the whole body)."""
    if (tuple(t.shape), t.dtype) != (tuple(r.shape), r.dtype) or t.scope != "temp":
        return False
    # (a temporary or an output is never allocated inside a statement: used is touched)
    if any(r in buffers_of(s)[0] for s in stmts[:at]):
        return False
    if any(t in buffers_of(s)[0] or r in written_buffers(s) for s in stmts[end:]):
        return False
    return not read_at_loaded_index(stmts, t)


def _product_sum(stmt):
    """``(R, T, rewrite)`` when ``stmt`` is a product into ``R`` plus ``T`` as the module
    doc says (its own conditions), ``rewrite(renamed)`` giving the statement with the
    products adding onto ``R`` and the rest renamed; else None."""
    if type(stmt) is _n.If:
        found = _product_sum(stmt.then)
        if found is None:
            return None
        r, t, rewrite = found
        if stmt.otherwise is not None and (not safe_in(stmt.otherwise, r, t)
                                           or reads_buffer(stmt.otherwise, r)):
            return None
        return r, t, lambda renamed: dataclasses.replace(
            stmt, then=rewrite(renamed),
            otherwise=None if stmt.otherwise is None
            else rename_buffers(stmt.otherwise, renamed, labelled=True))
    if type(stmt) is not _n.Block or len(stmt.stmts) < 2:
        return None
    *products, nest = stmt.stmts
    if not all(type(p) is _n.MatrixProduct for p in products):
        return None
    first = products[0]
    r = first.c
    spec = first.spec
    if first.spec.accumulate or first.c_offset != 0 \
            or spec.batch * spec.m * spec.n != r.size \
            or any(p.c != r or not p.spec.accumulate for p in products[1:]):
        return None
    added = _added(nest, r)
    if added is None:
        return None
    t, rest = added
    if any(t in p.reads or r in p.reads for p in products):
        return None

    def rewrite(renamed):
        return block([dataclasses.replace(p, spec=dataclasses.replace(p.spec, accumulate=True))
                      for p in products] + [rest])
    return r, t, rewrite


def _added(nest, r):
    """``(T, rest)`` when ``nest`` stores every element of ``r`` once as ``r[v] + T[v]``
    (either order), first in its innermost body: ``rest`` is ``nest`` without that store
    (None when nothing else is in it; the statements after the store must write
    neither buffer, read no ``T`` and read ``r`` only at ``v``, where it holds the sum
    either way); else None."""
    loops, s = [], nest
    while type(s) is _n.For:
        loops.append(s)
        s = s.body
    after = ()
    if type(s) is _n.Block:
        s, after = s.stmts[0], s.stmts[1:]
    if type(s) is not _n.Store or s.buffer != r or not loops:
        return None
    v = s.value
    if type(v) is not Binary or v.op != "add":
        return None
    sides = (v.a, v.b)
    if not all(type(x) is _n.Load and x.indices == s.indices for x in sides):
        return None
    names = [x.buffer for x in sides]
    if names.count(r) != 1:
        return None
    t = names[0] if names[1] == r else names[1]
    if not each_element_once(s, loops) or _trips(loops) != r.size \
            or not _inside(s, loops):
        return None
    if not after:
        return t, None
    rest = block(after)
    if {r, t} & written_buffers(rest) or reads_buffer(rest, t) or any(
            ld.buffer == r and ld.indices != s.indices
            for node in walk_stmts(rest) for e in stmt_exprs(node) for ld in loads(e)):
        return None
    for loop in reversed(loops):
        rest = dataclasses.replace(loop, body=rest)
    return t, rest


def _trips(loops):
    n = 1
    for loop in loops:
        begin, end = to_affine(loop.begin), to_affine(loop.end)
        n *= max(0, -(-(end.constant - begin.constant) // loop.step))
    return n


def _inside(store, loops):
    """Whether every index of ``store`` stays inside its dimension over the loops' ranges
    (each loop's variable from its first value to its last)."""
    ranges = {}
    for loop in loops:
        begin, end = to_affine(loop.begin).constant, to_affine(loop.end).constant
        last = begin + (-(-(end - begin) // loop.step) - 1) * loop.step
        ranges[loop.var.name] = (begin, last)
    for index, extent in zip(store.indices, store.buffer.shape):
        form = to_affine(index)
        if form is None:
            return False
        lo = hi = form.constant
        for name in form.variables():
            c = form.coeff(name)
            first, last = ranges[name]
            lo += min(c * first, c * last)
            hi += max(c * first, c * last)
        if lo < 0 or hi >= int(extent):
            return False
    return True
