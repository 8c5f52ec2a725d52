"""Copies that need no memory of their own: a temporary ``D`` whose every element is
stored from the element of another temporary ``S`` at the same flat offset (a reshape,
``D[i * 64 + j, c] = S[i, j, c]``; the gradient of one, the other way round) is ``S``'s
memory read under ``D``'s shape, as a view in numpy is.

:func:`copy_views` finds them; the storage plan
(:mod:`tegrad.codegen.llvm.kernel_buffers`) places ``D`` at ``S``'s offset, and
:func:`copies_dropped` removes their stores. The identity preserved: each element of
``D`` a statement reads holds the value of ``S`` at its flat offset, which is the value
the store would have copied, as long as

- every write of ``D`` is such a store (a ``Store`` whose value is a ``Load`` of ``S``
  of the same dtype, the two flat offsets equal affine forms of the loop variables:
  ``D`` and ``S`` of one dtype and size, both row-major), all in one top-level statement
  ``T``, ``D``'s first;
- no statement from ``T`` on writes ``S`` (``S`` keeps, while ``D`` is read, the values
  it had when they were copied; a write of ``S`` inside ``T`` could precede the copy);
- both are temporaries that no write in place (:func:`in_place_temporaries`) renames,
  and ``S`` is not a view itself.

``D`` keeps its name, shape and indices (no access changes); after ``T`` only reads
touch the memory the two share, so a function receiving both pointers ``noalias``
still holds LLVM's condition (no location both written through one and accessed
through the other); before ``T``, ``D`` is not used.

>>> from tegrad.ir.expr import Var, Const
>>> from tegrad.codegen.loops.nodes import Block, Buffer, For, Load, Store
>>> s, d = Buffer("s", (2, 3), "float32"), Buffer("d", (6,), "float32")
>>> out = Buffer("out", (6,), "float32", "output")
>>> i, j = Var("i", "int64"), Var("j", "int64")
>>> loop = lambda v, n, body: For(v, Const(0, "int64"), Const(n, "int64"), body)
>>> body = Block((loop(i, 2, loop(j, 3, Store(s, (i, j), Const(1.0, "float32")))),
...               loop(i, 2, loop(j, 3, Store(d, (i * 3 + j,), Load(s, (i, j))))),
...               loop(i, 6, Store(out, (i,), Load(d, (i,)) * 2.0))))
>>> {v.name: s.name for v, s in copy_views(body, [s, d]).items()}
{'d': 's'}
"""
from __future__ import annotations

from tegrad.codegen.loops import nodes as _n
from tegrad.codegen.loops.mapper import StmtMapper, walk_stmts
from tegrad.codegen.lower.in_place import flat_offset


def _copied_from(store):
    """The buffer ``store`` copies element for element at the same flat offset (its
    value a load of that buffer, of the stored buffer's dtype), or None."""
    value, target = store.value, store.buffer
    if type(value) is not _n.Load or value.dtype != target.dtype \
            or value.buffer.dtype != target.dtype or value.buffer == target \
            or value.buffer.size != target.size:
        return None
    mine, theirs = flat_offset(target, store.indices), flat_offset(value.buffer, value.indices)
    if mine is None or theirs is None or mine != theirs:
        return None
    return value.buffer


def copy_views(body, buffers, ranges=None, excluded=()):
    """``{D: S}``: the temporaries of ``buffers`` that are views of another (the
    condition of the module docstring), none of them or their sources in ``excluded``
    (buffers written in place). ``ranges``: the buffers' live ranges
    (:func:`~tegrad.codegen.llvm.kernel_buffers.live_ranges`) when known."""
    stmts = list(body.stmts) if type(body) is _n.Block else [body]
    temps = {b for b in buffers if b.scope == "temp"} - set(excluded)
    writes = {}  # buffer -> [(statement, node)] of every write
    for k, s in enumerate(stmts):
        for node in walk_stmts(s):
            t = type(node)
            if t is _n.Store or t is _n.Accumulate:
                target = node.buffer
            elif t is _n.MatrixProduct:
                target = node.c
            else:
                continue
            if target in temps:
                writes.setdefault(target, []).append((k, node))
    views = {}
    for d in sorted(temps, key=lambda b: b.name):
        found = writes.get(d, [])
        if not found or len({k for k, _ in found}) != 1:
            continue
        t = found[0][0]
        if ranges is not None and ranges[d][0] != t:
            continue
        sources = {_copied_from(node) if type(node) is _n.Store else None
                   for _, node in found}
        if len(sources) != 1:
            continue
        (s,) = sources
        if s is None or s not in temps or s in views:
            continue
        if any(k >= t for k, _ in writes.get(s, [])):
            continue
        views[d] = s
    # a source is not a view itself (its own copy is then kept)
    return {d: s for d, s in views.items() if s not in views}


class _WithoutStores(StmtMapper):
    """The given stores (by identity) become empty blocks: the loops around them stay,
    so loop numbering is unchanged (an empty loop is deleted by LLVM)."""

    def __init__(self, stores):
        super().__init__()
        self.stores = stores

    def map_store(self, s):
        return _n.Block(()) if s in self.stores else super().map_store(s)


def copies_dropped(body, views):
    """``body`` without the stores that copy each view of ``views`` (``{D: S}``, from
    :func:`copy_views`) from its source: ``D`` is placed at ``S``'s memory."""
    if not views:
        return body
    stores = {node for node in walk_stmts(body)
              if type(node) is _n.Store and node.buffer in views}
    return _WithoutStores(stores)(body)


__all__ = ["copies_dropped", "copy_views"]
