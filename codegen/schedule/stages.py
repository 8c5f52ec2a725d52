"""Stage transformations: inline a stage into its readers, compute a stage at a loop.

A stage is a temporary buffer and the top-level statement of the kernel that computes
it (its producer).

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.loops.printer import format_kernel
>>> A = tg.placeholder((3, 4), dtype="float64", name="A")
>>> k = tg.reduce_axis((0, 4), name="k")
>>> E = tg.compute((3, 4), lambda i, j: tg.exp(A[i, j]), name="E")
>>> S = tg.compute((3,), lambda i: tg.sum(E[i, k] * E[i, 3 - k], axis=k), name="S")
>>> print(format_kernel(inline_stage(lower_program([A], [S]), stage="E")))
kernel kernel(float64 A[3][4], float64 S[3]) {
  for (i_1 = 0; i_1 < 3; i_1++) {
    S[i_1] = 0.0;
    for (k = 0; k < 4; k++) {
      S[i_1] += exp(A[i_1, k]) * exp(A[i_1, 3 - k]);
    }
  }
}
"""
from __future__ import annotations

from tegrad.ir.expr import Const, Var

from tegrad.codegen.loops.mapper import (ExprMapper, StmtMapper, block, stmt_exprs, substitute_expr,
                                         substitute_stmt, walk_expr, walk_stmts)
from tegrad.codegen.loops.nodes import Block, For, Kernel, Load, MatrixProduct, Store
from tegrad.codegen.schedule.common import ScheduleError, find_loop, writes


def _stage(kernel, stage):
    """``(buffer, index of its producer among the top-level statements, statements)``."""
    temps = {b.name: b for b in kernel.temps}
    if stage not in temps:
        raise ScheduleError(f"kernel {kernel.name!r} has no temporary stage {stage!r}")
    buf = temps[stage]
    stmts = list(kernel.body.stmts) if type(kernel.body) is Block else [kernel.body]
    producers = [k for k, s in enumerate(stmts) if buf in _written(s)]
    if len(producers) != 1:
        raise ScheduleError(f"stage {stage!r} is written by {len(producers)} top-level "
                            f"statements; one is needed")
    k = producers[0]
    others = {b for b in _written(stmts[k]) if b.scope != "local"} - {buf}
    if others:
        raise ScheduleError(f"the statement computing {stage!r} also writes "
                            f"{sorted(b.name for b in others)}")
    return buf, k, stmts


def _loaded(s):
    return {n.buffer for node in walk_stmts(s) for e in stmt_exprs(node)
            for n in walk_expr(e) if type(n) is Load} | {
        b for node in walk_stmts(s) if type(node) is MatrixProduct for b in node.reads}


def _written(s):
    return {w.buffer for w in writes(s)} | {
        node.c for node in walk_stmts(s) if type(node) is MatrixProduct}


def _stages(stmts):
    """The kernel body of top-level statements, one per stage."""
    return stmts[0] if len(stmts) == 1 else Block(tuple(stmts))


class _Replace(ExprMapper):
    def __init__(self, buf, fn):
        self.buf, self.fn = buf, fn

    def map_load(self, e, *args):
        e = super().map_load(e)
        return self.fn(e) if e.buffer == self.buf else e


def inline_stage(kernel, *, stage):
    """Compute the elementwise stage ``stage`` where it is read, without its buffer.

    Preserves ``stage[idx] == value[vars := idx]`` at every load: the producer must be a
    perfect nest over the buffer's shape storing ``value`` (which reads no buffer written
    later) at its loop variables.
    """
    buf, k, stmts = _stage(kernel, stage)
    s, variables = stmts[k], {}
    for d in range(len(buf.shape)):
        if type(s) is For and s.step == 1 and type(s.begin) is Const and s.begin.value == 0:
            variables[s.var.name] = s
            s = s.body
    if type(s) is not Store or s.buffer != buf:
        raise ScheduleError(f"inline_stage {stage!r}: its producer is not a loop nest around "
                            f"one store")
    mapping_of = []
    for d, idx in enumerate(s.indices):
        if type(idx) is Var and idx.name in variables and type(variables[idx.name].end) is Const \
                and variables[idx.name].end.value == buf.shape[d]:
            mapping_of.append(idx.name)
        elif type(idx) is Const and idx.value == 0 and buf.shape[d] == 1:
            mapping_of.append(None)
        else:
            raise ScheduleError(f"inline_stage {stage!r}: the store's index {d} ({idx}) is "
                                f"not the loop over that dimension")
    if len({n for n in mapping_of if n}) != len(variables) or buf in _loaded(s):
        raise ScheduleError(f"inline_stage {stage!r}: not an elementwise stage")
    later = {b for t in stmts[k + 1:] for b in _written(t)}
    if _loaded(s) & later:
        raise ScheduleError(f"inline_stage {stage!r}: it reads a buffer written after it")
    value = s.value

    def replace(load):
        return substitute_expr(value, {n: i for n, i in zip(mapping_of, load.indices) if n})

    rest = [StmtMapper(_Replace(buf, replace))(t) for t in stmts[:k] + stmts[k + 1:]]
    temps = tuple(b for b in kernel.temps if b != buf)
    return Kernel(kernel.name, kernel.args, temps, _stages(rest))


def compute_at(kernel, *, stage, loop):
    """Compute ``stage`` inside ``loop``: in iteration ``v``, the slice the loop reads.

    Every read of the stage must be inside ``loop`` at index ``v`` in one dimension ``d``,
    and the producer's writes at index ``u`` of one loop over that whole dimension.
    Preserves ``stage[..., v, ...]`` at every read: the producer's iteration ``u == v`` runs
    at the start of iteration ``v`` (the other slices are not computed).
    """
    buf, k, stmts = _stage(kernel, stage)
    target = find_loop(kernel, loop)
    v = target.var
    inside = [n for n in walk_stmts(target.body)]
    loads = [n for t in stmts for node in walk_stmts(t) for e in stmt_exprs(node)
             for n in walk_expr(e) if type(n) is Load and n.buffer == buf]
    loads_inside = [n for node in inside for e in stmt_exprs(node) for n in walk_expr(e)
                    if type(n) is Load and n.buffer == buf]
    if not loads or len(loads) != len(loads_inside):
        raise ScheduleError(f"compute_at {stage!r}: it is read outside loop {loop!r}")
    dims = [d for d in range(len(buf.shape)) if all(bool(ld.indices[d] == v) for ld in loads)]
    if not dims:
        raise ScheduleError(f"compute_at {stage!r}: no dimension is read at {loop!r}")
    d = dims[0]
    ws = [w for w in writes(stmts[k]) if w.buffer == buf]
    us = {w.indices[d].name for w in ws if type(w.indices[d]) is Var}
    if len(us) != 1 or any(type(w.indices[d]) is not Var for w in ws):
        raise ScheduleError(f"compute_at {stage!r}: its dimension {d} is not written by a "
                            f"single loop")
    u = us.pop()
    u_loop = find_loop(Kernel(kernel.name, kernel.args, kernel.temps, stmts[k]), u)
    if not (u_loop.step == 1 and type(u_loop.begin) is Const and u_loop.begin.value == 0
            and type(u_loop.end) is Const and u_loop.end.value == buf.shape[d]):
        raise ScheduleError(f"compute_at {stage!r}: loop {u!r} does not cover dimension {d}")
    consumer = next(j for j, t in enumerate(stmts) if any(n is target for n in walk_stmts(t)))
    if consumer <= k:
        raise ScheduleError(f"compute_at {stage!r}: loop {loop!r} runs before the stage")
    between = {b for t in stmts[k + 1:consumer + 1] for b in _written(t)}
    if _loaded(stmts[k]) & between:
        raise ScheduleError(f"compute_at {stage!r}: it reads a buffer written before "
                            f"{loop!r} reads it")

    class _Drop(StmtMapper):
        def map_for(self, s):
            if s is u_loop:
                return substitute_stmt(s.body, {u: v})
            return super().map_for(s)

    producer = _Drop()(stmts[k])

    class _Insert(StmtMapper):
        def map_for(self, s):
            if s is target:
                return For(s.var, s.begin, s.end, block([producer, s.body]), s.kind, s.step)
            return super().map_for(s)

    rest = stmts[:k] + [_Insert()(t) if j == consumer else t
                        for j, t in enumerate(stmts) if j > k]
    return Kernel(kernel.name, kernel.args, kernel.temps, _stages(rest))
