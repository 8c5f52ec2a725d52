"""Schedule transformations: pure functions from kernels to kernels computing the same.

Loops are named by their variable (each loop of a lowered kernel has its own); stages
by their buffer. See :mod:`.loops` (split, reorder, fuse, unroll, vectorize,
parallelize) and :mod:`.stages` (inline a stage, compute a stage at a loop).
:mod:`.auto` chooses a schedule for every stage from the program (``tg.build`` applies
it; :mod:`.manual` applies an expert's instead, :mod:`.describe` prints it). Every choice
is a :class:`Step` of :mod:`.primitives`; a :class:`Schedule` of them compiles the same
kernel again.
"""
from tegrad.codegen.schedule.loops import (fuse, parallelize, reorder, split, unroll,
                                           vectorize)
from tegrad.codegen.schedule.stages import compute_at, inline_stage
from tegrad.codegen.schedule.steps import Schedule, Step

__all__ = ["split", "reorder", "fuse", "unroll", "vectorize", "parallelize", "inline_stage",
           "compute_at", "Schedule", "Step"]
