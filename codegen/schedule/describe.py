"""The schedule of a kernel as text (``str(f.schedule)``): per top-level statement, the
stages it computes, its loop nests with their kinds and trip counts, and the steps that
made them (:mod:`.primitives`), one or more lines each; then the steps of the whole
program, and those of stages the final kernel no longer has apart.

Loop kinds are read from the final kernel (a loop marked ``vectorized`` that LLVM did not
vectorise, given as ``declined``, shown serial and its step as left scalar); a statement that is not a loop nest (a node
the schedule does not know) is shown by its type. A step is shown under the statement
its stage names (the first statement computing the name, the ``n``-th for ``name#n``).

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.schedule.auto import auto_schedule
>>> A = tg.placeholder((4, 64), name="A")
>>> k = tg.reduce_axis((0, 64), name="k")
>>> S = tg.compute((4,), lambda i: tg.sum(A[i, k], axis=k), name="S")
>>> B = tg.compute((4, 64), lambda i, j: A[i, j] / S[i], name="B")
>>> print(describe_schedule(*auto_schedule(lower_program([A], [B]), lanes_of=lambda d: 8)))
stages S, B (fused)
  loops: i<4 { k_l<32; k_o<2 { k_l_1<32 vectorized }; k_l_2<16 vectorized; k_l_2<8 vectorized; k_l_2<4 vectorized; k_l_2<2 vectorized; k_l_2<2 unrolled; j<64 vectorized }
  fused with B
  k: vector accumulators (32 lanes)
  j: vectorized
"""
from __future__ import annotations

from tegrad.codegen.loops.mapper import StmtMapper, stmt_children, walk_stmts
from tegrad.codegen.kernels.product import describe_product
from tegrad.codegen.loops.nodes import (Accumulate, Allocate, Block, Check, For, If, Kernel,
                                        Let, MatrixProduct, Store)
from tegrad.codegen.loops.printer import format_expr
from tegrad.codegen.schedule.common import constant_trip_count
from tegrad.codegen.schedule.fusion import stage_names, statements
from tegrad.codegen.schedule.primitives import step_lines
from tegrad.codegen.schedule.steps import Schedule, statement_key

_LOOP_IR = (For, Block, If, Store, Accumulate, Let, Allocate, Check)


def _unknown(s):
    """A statement of a kind the loop IR's core does not have (shown by its type)."""
    return type(s) not in _LOOP_IR


def _trip(loop):
    n = constant_trip_count(loop)
    if n is not None and loop.begin.value == 0 and loop.step == 1:
        return f"<{n}"
    step = "" if loop.step == 1 else f" step {loop.step}"
    return f" in [{format_expr(loop.begin)}, {format_expr(loop.end)}){step}"


def nest_text(s):
    """The loops of ``s`` as ``i<4 { j<8 vectorized }`` (kinds other than serial shown)."""
    if _unknown(s):
        return type(s).__name__
    if type(s) is For:
        kind = "" if s.kind == "serial" else f" {s.kind}"
        inner = nest_text(s.body)
        return f"{s.var.name}{_trip(s)}{kind}" + (f" {{ {inner} }}" if inner else "")
    parts = [t for t in (nest_text(c) for c in stmt_children(s)) if t]
    return "; ".join(parts)


class _Unmarked(StmtMapper):
    def __init__(self, loops):
        super().__init__()
        self.loops = {id(s) for s in loops}

    def map_for(self, s):
        out = super().map_for(s)
        if id(s) in self.loops:
            return For(out.var, out.begin, out.end, out.body, "serial", out.step)
        return out


def without_marks(kernel, loops):
    """``kernel`` with the loops ``loops`` (its nodes) serial: the kernel as printed when
    LLVM did not vectorise those marked loops."""
    if not loops:
        return kernel
    return Kernel(kernel.name, kernel.args, kernel.temps, _Unmarked(loops)(kernel.body))


#: the steps whose lines say a loop is vectorised
_VECTOR_STEPS = ("vector_loops", "vectorize")


def _lines(step, scalar):
    """``step_lines(step)``, a vectorising step's loops named in ``scalar`` shown as left
    scalar."""
    if step.primitive not in _VECTOR_STEPS or not scalar & set(step.args):
        return step_lines(step)
    return [f"{a}: left scalar (LLVM did not vectorise it)" if a in scalar else f"{a}: vectorized"
            for a in step.args]


def _placed(steps, names):
    """``(by statement index, program steps, others by stage)``: where each step is
    shown (module doc)."""
    at, program, others = {}, [], {}
    for step in steps:
        if step.stage is None:
            program.append(step)
            continue
        name, n = statement_key(step.stage)
        found = [k for k, held in enumerate(names) if name in held]
        if found:
            at.setdefault(found[min(n, len(found)) - 1], []).append(step)
        else:
            others.setdefault(step.stage, []).append(step)
    return at, program, others


def describe_schedule(kernel, record=None, steps=None, declined=()):
    """The text of ``kernel``'s schedule (module doc), with ``record``'s choices and the
    ``steps`` made (by default ``record.steps``); ``declined``: the loops of ``kernel``
    marked ``vectorized`` that LLVM did not vectorise."""
    scalar = _scalar_names(statements(kernel.body), declined)
    kernel = without_marks(kernel, declined)
    fused = {g[0]: g for g in (record.fused if record else ())}
    manual = set(record.manual) if record else set()
    if steps is None:
        steps = record.steps if record else ()
    stmts = statements(kernel.body)
    names = [stage_names(s) if not _unknown(s) or type(s) is MatrixProduct else ()
             for s in stmts]
    at, program, others = _placed(steps, names)
    lines = []
    held_in = {}  # buffer -> the stage written in its memory (a sum's term, sum_in_place)
    for k, s in enumerate(stmts):
        label = ", ".join(names[k]) or f"statement {k}"
        tags = []
        if len(names[k]) > 1 and names[k][0] in fused:
            tags.append("fused")
        if set(names[k]) & manual:
            tags.append("as given")
        head = "stages" if len(names[k]) > 1 else "stage"
        lines.append(f"{head} {label}" + (f" ({', '.join(tags)})" if tags else ""))
        if type(s) is MatrixProduct:
            lines.append(f"  {describe_product(s.spec)}")
        elif _unknown(s):
            lines.append(f"  {type(s).__name__} (not a loop nest)")
        else:
            lines.append(f"  loops: {nest_text(s) or 'none'}")
        lines.extend(_sum_in_place_lines(s, held_in))
        # (a statement that is one product shows its kernel above: not again)
        lines.extend(f"  {line}" for step in at.get(k, ()) for line in _lines(step, scalar[k])
                     if not (type(s) is MatrixProduct and step.primitive == "product"))
    for stage, held in others.items():
        lines.append(f"stage {stage} (not a statement of the final loops)")
        lines.extend(f"  {line}" for step in held for line in step_lines(step))
    if program:
        lines.append("program")
        lines.extend(f"  {line}" for step in program for line in step_lines(step))
    return "\n".join(lines)


def _sum_in_place_lines(s, held_in):
    """The lines saying that statement ``s`` writes a stage in another buffer's memory,
    or adds a product onto such a stage (``held_in``: buffer -> that stage, from the
    statements before, updated)."""
    lines = []
    for node in walk_stmts(s):
        t = type(node)
        buffer = node.c if t is MatrixProduct else \
            node.buffer if t in (Store, Accumulate) else None
        if buffer is None:
            continue
        if node.stage and held_in.get(buffer) != node.stage:
            held_in[buffer] = node.stage
            lines.append(f"  {node.stage}: computed in {buffer.name}'s memory (a sum's term)")
        elif t is MatrixProduct and node.spec.accumulate and buffer in held_in:
            lines.append(f"  {buffer.name}: the product adds onto {held_in.pop(buffer)}")
    return lines


def _scalar_names(stmts, declined):
    """Per statement, the names of its loops in ``declined`` that no other loop of it
    marked ``vectorized`` shares."""
    ids = {id(s) for s in declined}
    out = []
    for s in stmts:
        loops = [m for m in walk_stmts(s) if type(m) is For and m.kind == "vectorized"]
        out.append({m.var.name for m in loops if id(m) in ids}
                   - {m.var.name for m in loops if id(m) not in ids})
    return out


def schedule_value(kernel, record=None, steps=None, declined=()):
    """The :class:`~.steps.Schedule` of ``steps`` (by default ``record.steps``), printed
    as :func:`describe_schedule` describes ``kernel`` (when first printed)."""
    if steps is None:
        steps = record.steps if record else ()
    return Schedule(steps, text=lambda: describe_schedule(kernel, record, steps, declined))


__all__ = ["describe_schedule", "nest_text", "schedule_value", "without_marks"]
