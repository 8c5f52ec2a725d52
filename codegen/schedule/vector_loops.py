"""Innermost loops writing along the stride-1 axis of memory marked ``vectorized``.

A constant loop of two or more iterations, with no loop inside it that is not unrolled,
which is no reduction and whose writes (one of them to a buffer outside the loop) all
move along their last index by exactly one per iteration, runs its iterations as
vector lanes: the mark asks the backend to vectorise it, the same iterations.

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.loops.printer import format_stmt
>>> A = tg.placeholder((4, 16), name="A")
>>> B = tg.compute((4, 16), lambda i, j: A[i, j] * 2.0, name="B")
>>> marked = []
>>> print(format_stmt(mark_vector_loops(lower_program([A], [B]).body, changed=marked)))
for (i = 0; i < 4; i++) {
  vectorized for (j = 0; j < 16; j++) {
    B[i, j] = A[i, j] * 2.0;
  }
}
>>> marked
['j']
"""
from __future__ import annotations

from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import For
from tegrad.codegen.schedule.common import NotingMapper, constant_trip_count, run_noting, writes
from tegrad.codegen.schedule.loop_order import is_reduction_loop, stride_one


class _MarkVector(NotingMapper):
    def map_for(self, s):
        s = super().map_for(s)
        if not self.allowed(s.var.name):
            return s
        n = constant_trip_count(s)
        if (s.kind != "serial" or n is None or n < 2
                or any(type(m) is For and m.kind != "unrolled" for m in walk_stmts(s.body))
                or is_reduction_loop(s)):
            return s
        ws = writes(s.body)
        if any(w.buffer.scope != "local" for w in ws) and all(
                stride_one(w.indices, s.var.name) for w in ws):
            self.changed.append(s.var.name)
            return For(s.var, s.begin, s.end, s.body, "vectorized", s.step)
        return s


def mark_vector_loops(s, *, changed=None, only=None):
    """``s`` with its innermost loops along the written stride-1 axis (those named in
    ``only`` when given) marked ``vectorized`` (module doc); their names appended to
    ``changed`` when given."""
    return run_noting(_MarkVector(only), s, changed)


__all__ = ["mark_vector_loops"]
