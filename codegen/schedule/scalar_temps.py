"""Temporaries read only where they are written become scalars: no buffer, no memory traffic.

After fusion, a stage's loop body often writes a temporary and reads it back a few
statements later in the same iteration, and nowhere else::

    for b: for j:  dz[b, j] = f(...);  out[b, j] = dz[b, j] * g(...);  ...

The buffer then only carries a value from one statement to the next: it becomes a
variable bound at the store, ``let dz_v = f(...) in out[b, j] = dz_v * g(...); ...``,
and the buffer goes from the kernel's temporaries (its bytes from the workspace, its
stores and loads from the loop).

A temporary qualifies when it has one store and no accumulation, no product reads it
as a whole, the store is a statement of a block whose later statements are stores or
accumulations (no loop, let or condition that could bind the store's variables again),
every load of the buffer anywhere in the kernel is in the expressions of those later
statements, and each reads the element the store wrote (structurally equal indices
made of variables, constants and arithmetic, no loads).

Identity preserved: the loads read, in the same execution of the block, the value the
store just wrote (no other statement writes the buffer, and nothing between rebinds the
indices' variables), so binding the value to a variable changes no result.

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.loops.printer import format_kernel
>>> from tegrad.codegen.schedule.fusion import fuse_stages
>>> x = tg.placeholder((4,), dtype="float64", name="x")
>>> t = tg.compute((4,), lambda i: tg.exp(x[i]), name="t")
>>> y = tg.compute((4,), lambda i: t[i] * t[i] + t[i], name="y")
>>> print(format_kernel(scalar_temps(fuse_stages(lower_program([x], [y]))[0])))
kernel kernel(float64 x[4], float64 y[4]) {
  for (i = 0; i < 4; i++) {
    float64 t_v = exp(x[i]);
    y[i] = t_v * t_v + t_v;
  }
}
"""
from __future__ import annotations

from tegrad.ir.expr import Var, structural_equal

from tegrad.codegen.loops.mapper import (ExprMapper, StmtMapper, loads, stmt_exprs,
                                         walk_expr, walk_stmts)
from tegrad.codegen.loops.nodes import (Accumulate, Block, For, Kernel, Let, Load,
                                        MatrixProduct, Store)
from tegrad.codegen.schedule.common import fresh


def _counts(body):
    """``{buffer name: [stores, accumulations, loads, whole uses]}`` over ``body``."""
    counts = {}

    def add(name, k):
        counts.setdefault(name, [0, 0, 0, 0])[k] += 1

    for node in walk_stmts(body):
        if type(node) is Store:
            add(node.buffer.name, 0)
        elif type(node) is Accumulate:
            add(node.buffer.name, 1)
        elif type(node) is MatrixProduct:
            for b in (node.c, *node.reads):
                add(b.name, 3)
        for e in stmt_exprs(node):
            for ld in loads(e):
                add(ld.buffer.name, 2)
    return counts


def _plain_index(e):
    return not any(type(n) is Load for n in walk_expr(e))


def _reads_in(stmts, name, indices):
    """The number of loads of ``name`` in the expressions of ``stmts`` (stores and
    accumulations), or None if one of them reads another element."""
    n = 0
    for s in (node for st in stmts for node in walk_stmts(st)):
        for e in stmt_exprs(s):
            for ld in loads(e):
                if ld.buffer.name == name:
                    if len(ld.indices) != len(indices) or not all(
                            structural_equal(a, b) for a, b in zip(ld.indices, indices)):
                        return None
                    n += 1
    return n


def _writes_once(s):
    """``s`` is a store or an accumulation, with the values it reads bound ahead of it
    or not (``let``s of :mod:`.ifconvert`): it runs once, where it stands."""
    while type(s) is Let:
        s = s.body
    return type(s) in (Store, Accumulate)


class _Replace(ExprMapper):
    """Loads of one buffer replaced by a variable."""

    def __init__(self, name, var):
        super().__init__()
        self.name, self.var = name, var

    def map_load(self, e, *args):
        if e.buffer.name == self.name:
            return self.var
        return super().map_load(e, *args)


class _Scalarise(StmtMapper):
    def __init__(self, candidates, taken):
        super().__init__()
        self.candidates, self.taken, self.done = candidates, taken, set()

    def map_block(self, s):
        s = super().map_block(s)
        if type(s) is not Block:
            return s
        stmts = list(s.stmts)
        for p in range(len(stmts) - 1, -1, -1):
            st = stmts[p]
            if type(st) is not Store or st.buffer.name not in self.candidates:
                continue
            rest = stmts[p + 1:]
            if not rest or not all(_writes_once(r) for r in rest):
                continue
            name = st.buffer.name
            if not all(_plain_index(i) for i in st.indices):
                continue
            if _reads_in(rest, name, st.indices) != self.candidates[name]:
                continue
            var = Var(fresh(f"{name}_v", self.taken), st.buffer.dtype)
            mapper = StmtMapper(_Replace(name, var))
            body = [mapper(r) for r in rest]
            stmts[p:] = [Let(var, st.value, body[0] if len(body) == 1 else Block(tuple(body)),
                             name)]
            self.done.add(name)
        return Block(tuple(stmts)) if len(stmts) > 1 else stmts[0]


def scalar_temps(kernel):
    """``kernel`` with every temporary read only where it is written (module doc) a
    variable instead of a buffer."""
    counts = _counts(kernel.body)
    candidates = {b.name: counts[b.name][2] for b in kernel.temps
                  if b.name in counts and counts[b.name][0] == 1
                  and counts[b.name][1] == 0 and counts[b.name][3] == 0
                  and counts[b.name][2] > 0}
    if not candidates:
        return kernel
    taken = {n.name for s in walk_stmts(kernel.body) for e in stmt_exprs(s)
             for n in walk_expr(e) if type(n) is Var}
    taken |= {s.var.name for s in walk_stmts(kernel.body) if type(s) in (For, Let)}
    scalarise = _Scalarise(candidates, taken)
    body = scalarise(kernel.body)
    if not scalarise.done:
        return kernel
    temps = tuple(b for b in kernel.temps if b.name not in scalarise.done)
    return Kernel(kernel.name, kernel.args, temps, body)


__all__ = ["scalar_temps"]
