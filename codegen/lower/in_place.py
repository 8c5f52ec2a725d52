"""Updates written in place: an output that is the next value of an input (a training
step's parameter or optimizer state) written into that input's memory.

:func:`write_in_place` replaces the output buffer ``new`` by the input buffer ``old``
everywhere in a kernel and drops ``new`` from its arguments, where that keeps the
kernel's results. The identity it preserves: every element of ``old`` is read, for its
old value, only before the one store that writes its new value. It holds when

- one top-level statement ``T`` writes ``new``, with a single ``Store`` (no
  accumulation) whose indices are the variables of the loops around it, each once (so
  each element is written once, by one iteration);
- the statements before ``T`` may read ``old`` anywhere; no statement from ``T`` on
  reads it but ``T`` itself, and none from ``T`` on writes it (a write after the store
  would land on the new value);
- inside ``T``, ``old`` is read only in the loop body holding the store, before it, at
  the store's very indices (the iteration that writes an element reads only that
  element of ``old``, before writing it; no other iteration reads it).

Reads of ``new`` itself (a later stage reading the updated value) stay what they were:
they read the same memory. An update that does not meet these conditions stays an
output of its own. :func:`overwriting_statement` checks the condition for any two
buffers of a kernel body; the storage plan (:mod:`tegrad.codegen.llvm.kernel_buffers`)
uses it to place a temporary at the memory of the temporary it is computed from.

>>> from tegrad.ir.expr import Var, Const
>>> from tegrad.codegen.loops.nodes import Buffer, For, Kernel, Load, Store
>>> w = Buffer("w", (4,), "float64", "input")
>>> g = Buffer("g", (4,), "float64", "input")
>>> nw = Buffer("new_w", (4,), "float64", "output")
>>> i = Var("i", "int64")
>>> k = Kernel("sgd", (w, g, nw), (), For(i, Const(0, "int64"), Const(4, "int64"),
...            Store(nw, (i,), Load(w, (i,)) - Load(g, (i,)) * 0.1)))
>>> k2, done = write_in_place(k, [(nw, w)])
>>> [b.name for b in k2.args], done
(['w', 'g'], [True])
"""
from __future__ import annotations

import dataclasses

from tegrad.codegen.loops import nodes as _n
from tegrad.solver import Affine
from tegrad.codegen.loops.mapper import (ExprMapper, StmtMapper, buffers_of, loads,
                                         stmt_exprs, to_affine, walk_expr, walk_stmts)


def _top_level(body):
    return list(body.stmts) if type(body) is _n.Block else [body]


def reads_buffer(stmt, buffer):
    """Whether ``stmt`` reads ``buffer`` (a load, or a matrix product's operand)."""
    used, _ = buffers_of(stmt)
    if buffer not in used:
        return False
    for node in walk_stmts(stmt):
        if type(node) is _n.MatrixProduct and buffer in node.reads:
            return True
        if any(ld.buffer == buffer for e in stmt_exprs(node) for ld in loads(e)):
            return True
    return False


def _store_path(stmt, new):
    """``(path, store)``: the statements from ``stmt`` down to its only write of ``new``
    (a ``Store``), or None when ``new`` is written otherwise or more than once."""
    found = []

    def visit(s, path):
        t = type(s)
        if t in (_n.Store, _n.Accumulate) and s.buffer == new:
            found.append((path + [s], s))
        elif t is _n.MatrixProduct and s.c == new:
            found.append(None)
        elif t is _n.Block:
            for c in s.stmts:
                visit(c, path + [s])
        elif t in (_n.For, _n.Let, _n.Allocate):
            visit(s.body, path + [s])
        elif t is _n.If:
            visit(s.then, path + [s])
            if s.otherwise is not None:
                visit(s.otherwise, path + [s])

    visit(stmt, [])
    if len(found) != 1 or found[0] is None or type(found[0][1]) is not _n.Store:
        return None
    return found[0]


def safe_in(stmt, new, old):
    """Whether, inside the top-level statement ``stmt`` that writes ``new``, every read
    of ``old`` comes before the store, in its loop body, at its indices."""
    found = _store_path(stmt, new)
    if found is None:
        return False
    path, store = found
    if not each_element_once(store, [s for s in path if type(s) is _n.For]):
        return False
    # the innermost block holding the store (or the store alone)
    inner = len(path) - 1
    while inner > 0 and type(path[inner - 1]) not in (_n.For,):
        inner -= 1
    body = path[inner] if inner < len(path) else store
    within = {id(node) for node in walk_stmts(body)}
    seen_store = False
    for node in walk_stmts(stmt):
        if type(node) is _n.MatrixProduct and old in node.reads:
            return False
        if node is store:
            seen_store = True
        for e in stmt_exprs(node):
            for ld in loads(e):
                # every read of old: in that body, at the store's indices, not after it
                if ld.buffer == old and (id(node) not in within
                                         or not _same_indices(ld.indices, store.indices)
                                         or (seen_store and node is not store)):
                    return False
    return True


def _same_indices(a, b):
    """Whether index tuples ``a`` and ``b`` name one element: equal, or equal affine
    forms (``i + 0`` is ``i``)."""
    if a == b:
        return True
    if len(a) != len(b):
        return False
    forms = [(to_affine(x), to_affine(y)) for x, y in zip(a, b)]
    return all(f is not None and f == g for f, g in forms)


def flat_offset(buffer, indices):
    """The row-major flat offset of ``buffer[indices]`` as an affine form of the loop
    variables, or None (an index that is not one).

    >>> from tegrad.ir.expr import Var
    >>> from tegrad.codegen.loops.nodes import Buffer
    >>> i, j = Var("i", "int64"), Var("j", "int64")
    >>> str(flat_offset(Buffer("b", (3, 5), "float32"), (i, j + 1)))
    '5*i + j + 1'
    """
    flat, stride = Affine.const(0), 1
    for index, extent in zip(reversed(indices), reversed(buffer.shape)):
        form = to_affine(index)
        if form is None:
            return None
        flat, stride = flat + form * stride, stride * int(extent)
    return flat


def each_element_once(store, loops):
    """Whether the ``loops`` around ``store`` (outermost first) run it at most once per
    element: its flat offset is an affine form of their variables in which, taken by
    increasing coefficient (per trip of each loop), every coefficient exceeds the most
    the smaller terms can add up to (a mixed radix, as a split loop's ``o * 16 + l``),
    so distinct iterations reach distinct offsets."""
    flat = flat_offset(store.buffer, store.indices)
    names = {loop.var.name for loop in loops}
    if flat is None or not set(flat.variables()) <= names:
        return False
    terms = []
    for loop in loops:
        begin, end = to_affine(loop.begin), to_affine(loop.end)
        if begin is None or end is None or not begin.is_constant or not end.is_constant:
            return False
        trips = -(-(end.constant - begin.constant) // loop.step)
        if trips > 1:
            terms.append((abs(flat.coeff(loop.var.name)) * loop.step, trips))
    reach = 0
    for coefficient, trips in sorted(terms):
        if coefficient <= reach:
            return False
        reach += coefficient * (trips - 1)
    return True


def overwriting_statement(stmts, new, old):
    """The position in ``stmts`` (a kernel body's top-level statements) of the statement
    ``T`` that may write ``new`` over ``old`` (the condition of the module docstring; the
    two of one shape and dtype), or None when it may not.

    >>> from tegrad.ir.expr import Var, Const
    >>> from tegrad.codegen.loops.nodes import Buffer, For, Load, Store
    >>> a, b = Buffer("a", (4,), "float32"), Buffer("b", (4,), "float32")
    >>> i = Var("i", "int64")
    >>> loop = lambda value: For(i, Const(0, "int64"), Const(4, "int64"), Store(b, (i,), value))
    >>> overwriting_statement([loop(Load(a, (i,)) * 2.0)], b, a)
    0
    >>> print(overwriting_statement([loop(Load(a, (i + 1,)) * 2.0)], b, a))
    None
    """
    if new == old or new.shape != old.shape or new.dtype != old.dtype:
        return None
    writers = [k for k, s in enumerate(stmts) if _store_path(s, new) is not None]
    touching = [k for k, s in enumerate(stmts) if _writes(s, new)]
    if len(writers) != 1 or touching != writers:
        return None
    t = writers[0]
    if any(reads_buffer(s, old) for s in stmts[t + 1:]) \
            or any(_writes(s, old) for s in stmts[t:]):
        return None
    return t if safe_in(stmts[t], new, old) else None


def read_at_loaded_index(stmts, buffer):
    """Whether one of ``stmts`` reads ``buffer`` at an index computed from loaded data:
    the check of that index names the buffer, which must then stay ``buffer``'s own
    name (its memory is not taken by another)."""
    return any(buffer in read_at_loaded_indices(s) for s in stmts)


def read_at_loaded_indices(stmt):
    """The buffers ``stmt`` reads at an index computed from loaded data (see
    :func:`read_at_loaded_index`)."""
    return {ld.buffer for node in walk_stmts(stmt) for e in stmt_exprs(node)
            for ld in loads(e)
            if any(type(n) is _n.Load for i in ld.indices for n in walk_expr(i))}


def in_place_safe(kernel, new, old):
    """Whether the output ``new`` of ``kernel`` can be written into the input ``old`` (see
    the module docstring)."""
    if new not in kernel.args or old not in kernel.args or new.scope != "output" \
            or old.scope != "input":
        return False
    return overwriting_statement(_top_level(kernel.body), new, old) is not None


def _writes(stmt, buffer):
    return buffer in written_buffers(stmt)


def written_buffers(stmt):
    """The buffers ``stmt`` writes (stores, accumulates, matrix products' results)."""
    stored, updated = stored_and_updated(stmt)
    return stored | updated


def stored_and_updated(stmt):
    """``(stored, updated)``: the buffers ``stmt`` writes with stores, and those it
    writes otherwise (accumulations, matrix products' results)."""
    stored, updated = set(), set()
    for node in walk_stmts(stmt):
        t = type(node)
        if t is _n.Store:
            stored.add(node.buffer)
        elif t is _n.Accumulate:
            updated.add(node.buffer)
        elif t is _n.MatrixProduct:
            updated.add(node.c)
    return stored, updated


class _RenameLoads(ExprMapper):
    """Loads of some buffers become loads of others (``renamed``: buffer -> buffer)."""

    def __init__(self, renamed):
        super().__init__()
        self.renamed = renamed

    def map_load(self, e, *args):
        e = super().map_load(e, *args)
        old = self.renamed.get(e.buffer)
        return e if old is None else _n.Load(old, e.indices, e.dtype)


class _Rename(StmtMapper):
    """Every load and store of some buffers becomes one of others (``renamed``); with
    ``labelled``, a renamed write keeps the name of the stage it writes (``stage``)."""

    def __init__(self, renamed, labelled=False):
        super().__init__(_RenameLoads(renamed))
        self.renamed, self.labelled = renamed, labelled

    def _stage(self, s, buffer):
        return (s.stage or buffer.name) if self.labelled else s.stage

    def map_store(self, s):
        s = super().map_store(s)
        old = self.renamed.get(s.buffer)
        return s if old is None else _n.Store(old, s.indices, s.value, self._stage(s, s.buffer))

    def map_accumulate(self, s):
        s = super().map_accumulate(s)
        old = self.renamed.get(s.buffer)
        return s if old is None else _n.Accumulate(old, s.indices, s.value, s.reducer,
                                                   self._stage(s, s.buffer))

    def map_matrix_product(self, s):
        named = {f: self.renamed[getattr(s, f)] for f in ("a", "b", "c")
                 if getattr(s, f) in self.renamed}
        if "c" in named:
            named["stage"] = self._stage(s, s.c)
        return dataclasses.replace(s, **named) if named else s


def write_in_place(kernel, updates):
    """``(kernel', done)``: ``kernel`` with each ``(new, old)`` of ``updates`` (an output
    buffer and an input buffer of its arguments) written in place where
    :func:`in_place_safe` allows, ``new`` then no longer an argument; ``done[k]`` says
    whether the ``k``-th update was. A pair that is not is left as it was."""
    done = []
    for new, old in updates:
        ok = in_place_safe(kernel, new, old)
        done.append(ok)
        if ok:
            body = rename_buffer(kernel.body, new, old)
            args = tuple(b for b in kernel.args if b != new)
            kernel = _n.Kernel(kernel.name, args, kernel.temps, body)
    return kernel, done


def rename_buffer(body, new, old):
    """``body`` with every load and store of ``new`` made of ``old``."""
    return rename_buffers(body, {new: old})


def rename_buffers(body, renamed, labelled=False):
    """``body`` with every load and store of each buffer of ``renamed`` (buffer ->
    buffer) made of the buffer it maps to, in one pass; with ``labelled``, each write
    renamed still names the stage it computes (``stage``: the old buffer's name)."""
    return _Rename(renamed, labelled)(body) if renamed else body


def rare_branch_after(kernel, buffers):
    """Whether a ``likely`` branch (compiled on demand, the kernel then running again
    from the start) comes at or after the first top-level statement writing one of
    ``buffers``: running again would then read values already updated in place."""
    stmts = _top_level(kernel.body)
    first = next((k for k, s in enumerate(stmts) if any(_writes(s, b) for b in buffers)),
                 None)
    if first is None:
        return False
    return any(type(n) is _n.If and n.likely for s in stmts[first:] for n in walk_stmts(s))


__all__ = ["each_element_once", "flat_offset", "in_place_safe", "overwriting_statement",
           "rare_branch_after", "rename_buffer", "rename_buffers", "stored_and_updated",
           "write_in_place", "written_buffers"]
