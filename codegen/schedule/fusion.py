"""Producer-consumer loop fusion: consecutive loop nests over the same range run as one.

Two loops ``for a in R: A`` and ``for b in R: B`` (same bounds and step) become
``for a in R: A; B[b := a]`` when every buffer one of them writes and the other touches
is accessed, in both, at index exactly ``a`` (``b``) in one common dimension: iteration
``v`` of ``B`` then touches only the elements iteration ``v`` of ``A`` touches, so running
``B(v)`` right after ``A(v)`` instead of after all of ``A`` reads and writes the same
values. A statement is moved up to the loop it fuses with only past statements it shares
no written buffer with; loops that both check indices at run time are not fused (the
first failing check stays the same). Fusion recurses into the fused body (a row max, a row sum and an
elementwise output over the same rows end up in one loop over rows).

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.loops.printer import format_kernel
>>> A = tg.placeholder((4, 3), dtype="float64", name="A")
>>> k = tg.reduce_axis((0, 3), name="k")
>>> S = tg.compute((4,), lambda i: tg.sum(A[i, k], axis=k), name="S")
>>> B = tg.compute((4, 3), lambda i, j: A[i, j] / S[i], name="B")
>>> kernel, fused = fuse_stages(lower_program([A], [B]))
>>> print(format_kernel(kernel))
kernel kernel(float64 A[4][3], float64 B[4][3]) {
  temp float64 S[4];
  for (i = 0; i < 4; i++) {
    S[i] = 0.0;
    for (k = 0; k < 3; k++) {
      S[i] += A[i, k];
    }
    for (j = 0; j < 3; j++) {
      B[i, j] = A[i, j] / S[i];
    }
  }
}
>>> fused
(('S', 'B'),)
"""
from __future__ import annotations

from tegrad.ir.expr import Var

from tegrad.codegen.loops.mapper import block, loads, stmt_exprs, substitute_stmt, walk_stmts
from tegrad.codegen.loops.nodes import (Accumulate, Allocate, Block, Check, For, Kernel, Let,
                                        MatrixProduct, Store)


def statements(s):
    """The statements of ``s`` as a list (a block's, or ``s`` alone)."""
    return list(s.stmts) if type(s) is Block else [s]


def _accesses(s):
    """``(buffer, indices, is_write)`` of every load, store and accumulation in ``s``
    (buffers allocated inside ``s`` left out)."""
    local = {n.buffer for n in walk_stmts(s) if type(n) is Allocate}
    out = []
    for node in walk_stmts(s):
        if type(node) in (Store, Accumulate) and node.buffer not in local:
            out.append((node.buffer, node.indices, True))
        elif type(node) is MatrixProduct:  # whole buffers: indices None
            out += [(node.c, None, True)] + [(b, None, False) for b in node.reads]
        for e in stmt_exprs(node):
            out.extend((ld.buffer, ld.indices, False) for ld in loads(e)
                       if ld.buffer not in local)
    return out


def _reads_writes(s):
    acc = _accesses(s)
    return {b for b, _, w in acc if not w}, {b for b, _, w in acc if w}


def _has_check(s):
    return any(type(n) is Check for n in walk_stmts(s))


def independent(s, others):
    """``s`` shares no written buffer with any of ``others`` (so they may swap), and at
    most one side has run-time checks (the first failing check stays the same)."""
    reads, written = _reads_writes(s)
    check = _has_check(s)
    for t in others:
        r, w = _reads_writes(t)
        if written & (r | w) or reads & w or (check and _has_check(t)):
            return False
    return True


def _same(a, b):
    return bool(a == b)


def _pinned_dims(indices, var):
    return {d for d, i in enumerate(indices or ()) if type(i) is Var and i.name == var}


def fusable(a, b):
    """``b`` (a loop) may run fused into ``a`` (a loop), see the module doc."""
    if type(a) is not For or type(b) is not For or a.kind != b.kind or a.step != b.step:
        return False
    if not (_same(a.begin, b.begin) and _same(a.end, b.end)):
        return False
    if _has_check(a) and _has_check(b):
        return False  # the first check to fail, and the error, would change
    b_body = substitute_stmt(b.body, {b.var.name: a.var})
    if any(type(n) in (For, Let) and n.var.name == a.var.name
           for body in (a.body, b_body) for n in walk_stmts(body)):
        return False  # an access at the loop's name would not be at the loop's value
    acc_a, acc_b = _accesses(a.body), _accesses(b_body)
    written = {x for x, _, w in acc_a + acc_b if w}
    shared = {x for x, _, _ in acc_a} & {x for x, _, _ in acc_b} & written
    for x in shared:
        dims = None
        for buf, indices, _ in acc_a + acc_b:
            if buf == x:
                d = _pinned_dims(indices, a.var.name)
                dims = d if dims is None else dims & d
        if not dims:
            return False
    return True


def fuse_pair(a, b):
    """The loop running ``a``'s body, then ``b``'s, in each iteration (see :func:`fusable`)."""
    body = block([a.body, substitute_stmt(b.body, {b.var.name: a.var})])
    return For(a.var, a.begin, a.end, fuse_list_body(body), a.kind, a.step)


def fuse_list_body(body):
    stmts, _ = fuse_list(statements(body))
    return block(stmts)


def fuse_list(stmts, keep=frozenset()):
    """``(statements, groups)``: ``stmts`` with each loop fused with the later loops it can
    be (see the module doc); ``groups`` lists the indices of the statements merged into
    each result statement. Statements whose index is in ``keep`` are left alone."""
    stmts = list(stmts)
    groups = [[k] for k in range(len(stmts))]
    i = 0
    while i < len(stmts):
        j = i + 1
        while j < len(stmts):
            if (groups[i][0] not in keep and groups[j][0] not in keep
                    and fusable(stmts[i], stmts[j]) and independent(stmts[j], stmts[i + 1:j])):
                stmts[i] = fuse_pair(stmts[i], stmts[j])
                groups[i] += groups[j]
                del stmts[j], groups[j]
            else:
                j += 1
        i += 1
    return stmts, groups


def fuse_stages(kernel, *, keep=()):
    """``(kernel, fused)``: the top-level loop nests of ``kernel`` fused where legal (see the
    module doc); ``fused`` names, per merged statement, the stages (written buffers) it
    computes, for those merging two or more. Stages named in ``keep`` are not fused."""
    # a stage lowered as several loops (fill, then accumulate) fuses loop by loop
    stmts = [part for s in statements(kernel.body) for part in statements(s)]
    names = [stage_names(s) for s in stmts]
    keep_idx = frozenset(k for k, n in enumerate(names) if set(n) & set(keep))
    new, groups = fuse_list(stmts, keep_idx)
    fused = tuple(tuple(n for k in g for n in names[k]) for g in groups if len(g) > 1)
    return Kernel(kernel.name, kernel.args, kernel.temps, block(new)), fused


def stage_names(s):
    """The names of the non-local buffers ``s`` writes, in order of first write."""
    out = []
    for b, _, w in _accesses(s):
        if w and b.name not in out:
            out.append(b.name)
    return tuple(out)
