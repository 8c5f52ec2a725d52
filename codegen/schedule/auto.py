"""The automatic schedule: chosen per stage from the program's loops and accesses.

:func:`auto_schedule` makes, in order, these steps (:mod:`.primitives`; each keeps
every result equal to the plain loops', see its module):

1. an expert's overrides (:mod:`.manual`, as steps), whose stages are left alone
   afterwards;
2. loop fusion of consecutive nests over the same range (``fuse``, :mod:`.fusion`),
   then values a loop stored read back where a later one computes them again
   (``reuse_stored``, :mod:`.stored`);
3. per top-level statement, each pass of :data:`~.primitives.STATEMENT_PASSES`: loops
   divided by a small constant split by it (:mod:`.divisors`), tiny moving-bound
   reductions over constant guarded ranges, the written stride-1 axis moved innermost
   (:mod:`.loop_order`), nests reading across rows what they write along them run in
   square tiles (:mod:`.tiles`), tiny loops unrolled, overlapping scatter windows run
   outside their stride-1 loop (:mod:`.windows`), the guards of innermost loops made
   bounds (:mod:`.guards`), guarded accumulations made unguarded (:mod:`.ifconvert`),
   vector accumulators for innermost reductions along the stride-1 axis
   (:mod:`.accumulators`, the only pass that reassociates), innermost loops over the
   written stride-1 axis marked ``vectorized`` (:mod:`.vector_loops`).

Each choice is recorded as a :class:`~.steps.Step` of the loops it changed: replaying
the steps (:meth:`.primitives.Scheduler.replay`) makes the same kernel without choosing.
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
>>> record.steps[-1]
Step('vector_loops', 'S', ('j',))
"""
from __future__ import annotations

from dataclasses import dataclass, field

from tegrad.codegen.schedule.manual import override_steps
from tegrad.codegen.schedule.primitives import STATEMENT_PASSES, Scheduler


@dataclass(frozen=True)
class ScheduleRecord:
    """What the schedule chose: ``fused`` (groups of stages run in one loop nest),
    ``notes`` (index of a top-level statement of the kernel -> the choices made for
    it, as text), ``manual`` (the stages the ``schedule=`` option scheduled: its
    overrides', or every stage for a :class:`~.steps.Schedule` replayed) and ``steps``
    (every step made, in order)."""

    fused: tuple = ()
    notes: dict = field(default_factory=dict)
    manual: tuple = ()
    steps: tuple = ()


def record_of(sched, manual=()):
    """The :class:`ScheduleRecord` of the :class:`~.primitives.Scheduler` ``sched``."""
    return ScheduleRecord(fused=tuple(sched.fused),
                          notes={k: tuple(v) for k, v in sched.notes.items()},
                          manual=tuple(manual), steps=tuple(sched.steps))


def choose(sched, *, manual=()):
    """Make the automatic schedule's steps (module doc, 2 and 3) on ``sched``'s kernel,
    the stages named in ``manual`` left alone."""
    sched.fuse(keep=manual)
    sched.reuse()
    manual = set(manual)
    for k in range(len(sched.statements())):
        if set(sched.names()[k]) & manual:
            continue
        for name in STATEMENT_PASSES:
            sched.run_pass(name, k)


def auto_schedule(kernel, *, lanes_of, overrides=None, threads=None):
    """``(kernel, record)``: the kernel with the automatic schedule (module doc), the
    stages named in ``overrides`` (see :func:`.manual.override_steps`) scheduled as asked
    instead; ``threads``: the kernel's thread count (None: unknown)."""
    steps, manual = override_steps(kernel, overrides or {})
    sched = Scheduler(kernel, lanes_of=lanes_of, threads=threads)
    sched.replay(steps)
    choose(sched, manual=manual)
    return sched.result(), record_of(sched, manual)


__all__ = ["auto_schedule", "choose", "record_of", "ScheduleRecord"]
