"""The automatic schedule: chosen per stage from the program's loops and accesses.

:func:`auto_schedule` applies, in order (each pass keeps every result equal to the
plain loops', see its module):

1. an expert's overrides (:mod:`.manual`), whose stages are left alone afterwards;
2. loop fusion of consecutive nests over the same range (:mod:`.fusion`), then values
   a loop stored read back where a later one computes them again (:mod:`.stored`);
3. per top-level statement: loops divided by a small constant split by it
   (:mod:`.divisors`), tiny moving-bound reductions over constant guarded ranges,
   the written stride-1 axis moved innermost, tiny reductions unrolled
   (:mod:`.loop_order`), nests reading across rows what they write along them run in
   square tiles (:mod:`.tiles`), overlapping scatter windows run outside their stride-1 loop
   (:mod:`.windows`), the guards of innermost loops made bounds (:mod:`.guards`),
   guarded accumulations made unguarded (:mod:`.ifconvert`);
4. vector accumulators for innermost reductions along the stride-1 axis
   (:mod:`.accumulators`, the only pass that reassociates);
5. innermost loops over the written stride-1 axis marked ``vectorized``.

It returns the new kernel and a :class:`ScheduleRecord` of the choices, which
:func:`.describe.describe_schedule` prints next to the final loops.

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> A = tg.placeholder((4, 64), name="A")
>>> k = tg.reduce_axis((0, 64), name="k")
>>> S = tg.compute((4,), lambda i: tg.sum(A[i, k], axis=k), name="S")
>>> B = tg.compute((4, 64), lambda i, j: A[i, j] / S[i], name="B")
>>> kernel, record = auto_schedule(lower_program([A], [B]), lanes_of=lambda dtype: 8)
>>> record.fused
(('S', 'B'),)
>>> record.notes[0]
('k: vector accumulators (32 lanes)', 'j: vectorized')
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tegrad.codegen.loops.mapper import StmtMapper, block, walk_stmts
from tegrad.codegen.loops.nodes import For, Kernel
from tegrad.codegen.schedule.accumulators import host_lanes, statement_accumulators
from tegrad.codegen.schedule.common import constant_trip_count, names_in, writes
from tegrad.codegen.schedule.fusion import fuse_stages, stage_names, statements
from tegrad.codegen.schedule.divisors import split_divided_loops
from tegrad.codegen.schedule.guards import innermost_guards_to_bounds
from tegrad.codegen.schedule.ifconvert import if_convert
from tegrad.codegen.schedule.loop_order import (constant_tiny_loops, is_reduction_loop,
                                                sink_stride_one, stride_one,
                                                unroll_tiny_reductions)
from tegrad.codegen.schedule.manual import apply_overrides
from tegrad.codegen.schedule.stored import reuse_stored_values
from tegrad.codegen.schedule.tiles import tile_transposed_reads
from tegrad.codegen.schedule.windows import hoist_scatter_windows


@dataclass(frozen=True)
class ScheduleRecord:
    """What the schedule chose: ``fused`` (groups of stages run in one loop nest),
    ``notes`` (index of a top-level statement of the kernel -> the choices made for
    it, as text) and
    ``manual`` (the stages an expert's overrides scheduled)."""

    fused: tuple = ()
    notes: dict = field(default_factory=dict)
    manual: tuple = ()


class _MarkVector(StmtMapper):
    """Innermost constant loops writing along their stride-1 axis become ``vectorized``
    (loops inside them that are unrolled when emitted do not count)."""

    def __init__(self):
        super().__init__()
        self.marked = []

    def map_for(self, s):
        s = super().map_for(s)
        n = constant_trip_count(s)
        if (s.kind != "serial" or n is None or n < 2
                or any(type(m) is For and m.kind != "unrolled" for m in walk_stmts(s.body))
                or is_reduction_loop(s)):
            return s
        ws = writes(s.body)
        if any(w.buffer.scope != "local" for w in ws) and all(
                stride_one(w.indices, s.var.name) for w in ws):
            self.marked.append(s.var.name)
            return For(s.var, s.begin, s.end, s.body, "vectorized", s.step)
        return s


def _nest_schedule(s, notes, taken, lanes_of):
    changed, moved, divided, tiled = [], [], [], []
    s = split_divided_loops(s, taken=taken, changed=divided)
    notes += [f"{v}: split by its divisor" for v in divided]
    s = constant_tiny_loops(s, changed=changed)
    s = sink_stride_one(s, moved=moved)
    s = tile_transposed_reads(s, lanes_of=lanes_of, taken=taken, tiled=tiled)
    before = {m.var.name for m in walk_stmts(s) if type(m) is For and m.kind == "unrolled"}
    s = unroll_tiny_reductions(s)
    unrolled = [m.var.name for m in walk_stmts(s) if type(m) is For and m.kind == "unrolled"
                and m.var.name not in before]
    hoisted = []
    s = hoist_scatter_windows(s, taken=taken, hoisted=hoisted)
    bounded = []
    s = innermost_guards_to_bounds(s, changed=bounded)
    s = if_convert(s, taken=taken)
    notes += [f"{v}: tiny bounds made constant, guarded" for v in changed]
    notes += [f"{v}: moved innermost (stride 1)" for v in moved]
    notes += [f"{v}: square tiles with the loop inside it (a read across rows)"
              for v in tiled]
    notes += [f"{v}: unrolled (tiny reduction)" for v in unrolled]
    notes += [f"{v}: inside its scatter's window (updates kept in order)" for v in hoisted]
    notes += [f"{v}: guards made bounds" for v in bounded]
    return s


def auto_schedule(kernel, *, overrides=None, lanes_of=host_lanes):
    """``(kernel, record)``: the kernel with the automatic schedule (module doc), the
    stages named in ``overrides`` (see :func:`.manual.apply_overrides`) scheduled as asked
    instead."""
    kernel, manual = apply_overrides(kernel, overrides or {})
    kernel, fused = fuse_stages(kernel, keep=manual)
    kernel = Kernel(kernel.name, kernel.args, kernel.temps, reuse_stored_values(kernel.body))
    taken = names_in(kernel)
    stmts, notes = statements(kernel.body), {}
    for k, s in enumerate(stmts):
        names = stage_names(s)
        if set(names) & set(manual):
            continue
        found = []
        s = _nest_schedule(s, found, taken, lanes_of)
        s, lanes = statement_accumulators(s, taken=taken, lanes_of=lanes_of)
        found += [f"{v}: vector accumulators ({n} lanes)" for v, n in lanes]
        mark = _MarkVector()
        s = mark(s)
        found += [f"{v}: vectorized" for v in mark.marked]
        stmts[k] = s
        if found:
            notes[k] = tuple(found)
    kernel = Kernel(kernel.name, kernel.args, kernel.temps, block(stmts))
    return kernel, ScheduleRecord(fused=fused, notes=notes, manual=tuple(manual))


__all__ = ["auto_schedule", "ScheduleRecord"]
