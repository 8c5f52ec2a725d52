"""Values a loop stored, read back instead of computed again.

``for v in R: B[.., v, ..] = E(v)`` followed, later in the same block, by a statement
computing ``E(w)`` inside a loop ``for w in R`` (same bounds) reads ``B[.., w, ..]``
there instead: iteration ``w`` of the first loop stored exactly that value, the same
operations on the same inputs, so the result is bit-identical. It holds when

- the store is unconditional, the only write of ``B`` in its statement, and indexed by
  each of its loops' variables alone in a dimension (every iteration its own element);
- nothing writes ``B`` or a buffer ``E`` reads, from the store's statement through the
  statement reading it (that one included);
- ``E`` uses only its loops' variables and variables bound outside both statements.

A gradient fused with its forward pass recomputes the forward's values (softmax's
``exp(x - m) / s`` in ``d softmax``): it now loads them. Expressions that are a single
load, variable or constant are left as they are (a load is no cheaper).

>>> from tegrad.codegen.loops.nodes import Buffer, For, Load, Store
>>> from tegrad.codegen.loops.mapper import block
>>> from tegrad.codegen.loops.printer import format_stmt
>>> from tegrad.ir.expr import Call, Const, Var
>>> X, Y, D = (Buffer(n, (8,), "float32", s) for n, s in
...            (("X", "input"), ("Y", "output"), ("D", "output")))
>>> i, j = Var("i", "int64"), Var("j", "int64")
>>> e = lambda v: Call("exp", (Load(X, (v,), "float32"),), "float32")
>>> loop = lambda v, body: For(v, Const(0, "int64"), Const(8, "int64"), body)
>>> s = block([loop(i, Store(Y, (i,), e(i))), loop(j, Store(D, (j,), e(j) * 2.0))])
>>> print(format_stmt(reuse_stored_values(s)))
for (i = 0; i < 8; i++) {
  Y[i] = exp(X[i]);
}
for (j = 0; j < 8; j++) {
  D[j] = Y[j] * 2.0;
}
"""
from __future__ import annotations

from dataclasses import dataclass

from tegrad.ir.expr import Const, Var, structural_equal

from tegrad.codegen.loops.mapper import (ExprMapper, StmtMapper, buffers_of, loads,
                                         substitute_expr, walk_expr, walk_stmts)
from tegrad.codegen.loops.nodes import (Allocate, Block, For, If, Let, Load, MatrixProduct,
                                        Store)
from tegrad.codegen.schedule.common import NotingMapper, bound_names, run_noting, writes


@dataclass(frozen=True)
class _Stored:
    """``store`` ran unconditionally in every iteration of the loops ``chain``."""

    chain: tuple
    store: Store
    reads: frozenset  # the buffers its value reads


def _written(s):
    """The buffer of every write in ``s``, once per write."""
    return [w.buffer for w in writes(s)] + [m.c for m in walk_stmts(s)
                                             if type(m) is MatrixProduct]


def _candidates(s):
    """The stores of ``s`` whose values may be read back (module doc), with their loops."""
    written = _written(s)
    bound, _ = bound_names(s)
    out = []

    def visit(node, chain):
        t = type(node)
        if t is For:
            visit(node.body, chain + (node,))
        elif t is Block:
            for c in node.stmts:
                visit(c, chain)
        elif t is Allocate:
            visit(node.body, chain)
        elif t is Store and chain:
            found = _stored(node, chain, written, bound)
            if found is not None:
                out.append(found)

    visit(s, ())
    return out


def _stored(store, chain, written, bound):
    value, buf = store.value, store.buffer
    if type(value) in (Load, Var, Const) or buf.scope == "local" or value.dtype != buf.dtype:
        return None
    if written.count(buf) != 1:
        return None
    names = {c.var.name for c in chain}
    own = {i.name for i in store.indices if type(i) is Var and i.name in names}
    others = [i for i in store.indices if not (type(i) is Var and i.name in names)]
    if own != names or len(own) + len(others) != len(store.indices):
        return None  # some iterations may share an element
    outside = bound - names  # variables of lets and inner loops: not known after the loop
    if any(type(n) is Var and n.name in outside
           for e in (value, *others) for n in walk_expr(e)):
        return None
    reads = frozenset(ld.buffer for ld in loads(value))
    if reads & set(written):
        return None
    return _Stored(chain, store, reads)


class _ReplaceExpr(ExprMapper):
    def __init__(self, target, load):
        self.target, self.load, self.hits = target, load, 0

    def finish(self, e, out):
        if hash(e) == hash(self.target) and structural_equal(e, self.target):
            self.hits += 1
            return self.load
        return out


def _read_back(s, stored, hits, mapping=None):
    """``s`` with the value of ``stored`` loaded where ``s`` computes it inside loops
    matching all of ``stored.chain``, in any order (``mapping``: its variables matched
    so far, to the variables of the loops of ``s`` matching them); the number of
    expressions replaced is appended to the list ``hits``."""
    mapping = mapping or {}
    chain = stored.chain
    if len(mapping) == len(chain):
        store = stored.store
        target = substitute_expr(store.value, mapping)
        index = tuple(substitute_expr(i, mapping) for i in store.indices)
        replace = _ReplaceExpr(target, Load(store.buffer, index, store.buffer.dtype))
        out = StmtMapper(replace)(s)
        hits.append(replace.hits)
        return out
    t = type(s)
    if t is For:
        loop = _matching_loop(s, chain, mapping)
        inner = mapping if loop is None else {**mapping, loop.var.name: s.var}
        body = _read_back(s.body, stored, hits, inner)
        return s if body is s.body else For(s.var, s.begin, s.end, body, s.kind, s.step)
    if t is Block:
        stmts = tuple(_read_back(c, stored, hits, mapping) for c in s.stmts)
        return s if all(a is b for a, b in zip(stmts, s.stmts)) else Block(stmts)
    if t in (Allocate, Let):
        body = _read_back(s.body, stored, hits, mapping)
        if body is s.body:
            return s
        return Allocate(s.buffer, body) if t is Allocate else Let(s.var, s.value, body, s.stage)
    if t is If:
        then = _read_back(s.then, stored, hits, mapping)
        other = None if s.otherwise is None else _read_back(s.otherwise, stored, hits, mapping)
        if then is s.then and other is s.otherwise:
            return s
        return If(s.cond, then, other, s.likely)
    return s


def _matching_loop(s, chain, mapping):
    """The first loop of ``chain`` not matched yet that runs over the same values as the
    loop ``s`` (its bounds given the matches so far), or None."""
    unmatched = {c.var.name for c in chain} - set(mapping)
    for c in chain:
        if c.var.name not in unmatched or c.step != s.step:
            continue
        begin, end = (substitute_expr(b, mapping) for b in (c.begin, c.end))
        if any(type(n) is Var and n.name in unmatched for b in (begin, end)
               for n in walk_expr(b)):
            continue
        if structural_equal(s.begin, begin) and structural_equal(s.end, end):
            return c
    return None


class _Available:
    """The stored values still valid at a point of a block, numbered in the order they
    were stored and indexed by the buffers they read and store: a statement is searched
    only for the values whose reads it uses, and a write drops only the values it
    touches (a block of thousands of stages stays linear)."""

    def __init__(self):
        self.values = {}  # number -> _Stored
        self.by_buffer = {}  # buffer -> numbers of the values that read or store it
        self.pure = set()  # numbers of the values reading no buffer
        self.count = 0

    def add(self, stored):
        key, self.count = self.count, self.count + 1
        self.values[key] = stored
        for b in stored.reads | {stored.store.buffer}:
            self.by_buffer.setdefault(b, set()).add(key)
        if not stored.reads:
            self.pure.add(key)

    def usable_in(self, used):
        """The values whose reads are all among the buffers ``used``, in order."""
        keys = set(self.pure)
        for b in used:
            keys.update(k for k in self.by_buffer.get(b, ()) if self.values[k].reads <= used)
        return [self.values[k] for k in sorted(keys)]

    def drop_written(self, written):
        for b in written:
            for key in self.by_buffer.pop(b, ()):
                stored = self.values.pop(key, None)
                self.pure.discard(key)
                if stored is not None:
                    for other in stored.reads | {stored.store.buffer}:
                        self.by_buffer.get(other, set()).discard(key)


def _forward_block(stmts, allowed, reused):
    available, out = _Available(), []
    for s in stmts:
        written = set(_written(s))
        if available.values:
            for stored in available.usable_in(set(buffers_of(s)[0])):
                name = stored.store.buffer.name
                if stored.store.buffer not in written and not stored.reads & written \
                        and allowed(name):
                    hits = []
                    s = _read_back(s, stored, hits)
                    if any(hits) and name not in reused:
                        reused.append(name)
        available.drop_written(written)
        for stored in _candidates(s):
            available.add(stored)
        out.append(s)
    return out


class _ReuseStored(NotingMapper):
    def map_block(self, s):
        s = super().map_block(s)
        stmts = _forward_block(list(s.stmts), self.allowed, self.changed)
        return s if all(a is b for a, b in zip(stmts, s.stmts)) else Block(tuple(stmts))


def reuse_stored_values(s, *, only=None, reused=None):
    """``s`` with values stored by a loop (into the buffers named in ``only`` when given)
    loaded back where a later statement of the same block computes them again (module
    doc); the names of the buffers read back appended to ``reused`` when given."""
    return run_noting(_ReuseStored(only), s, reused)


__all__ = ["reuse_stored_values"]
