"""An expert's schedule for chosen stages: ``tg.build(..., schedule={...})``.

``overrides`` maps a stage (the name of the tensor it computes, as ``f.loops`` shows
it) to ``"none"`` (its plain loops, no automatic schedule) or to a dict of requests,
applied in this order with the transformations of :mod:`.loops` and :mod:`.stages`:

- ``"split": {loop: factor}``: ``loop`` becomes ``loop_o`` and ``loop_i`` (a tail loop
  keeps the name ``loop`` when the factor does not divide the trip count);
- ``"order": [loop, ...]``: those perfectly nested loops in that order, outermost first;
- ``"compute_at": (stage, loop)``: this stage computed inside ``loop`` of ``stage``;
- ``"unroll": [loop, ...]``, ``"vectorize": loop``, ``"parallel": loop``.

Loops are named as in ``f.loops``. A request naming an unknown stage or loop, or one
that would change the result, raises a :class:`ScheduleError` naming the stage.

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.loops.printer import format_kernel
>>> A = tg.placeholder((4, 16), name="A")
>>> B = tg.compute((4, 16), lambda i, j: A[i, j] * 2.0, name="B")
>>> kernel, stages = apply_overrides(lower_program([A], [B]),
...                                  {"B": {"split": {"j": 8}, "vectorize": "j_i"}})
>>> print(format_kernel(kernel))
kernel kernel(float32 A[4][16], float32 B[4][16]) {
  for (i = 0; i < 4; i++) {
    for (j_o = 0; j_o < 2; j_o++) {
      vectorized for (j_i = 0; j_i < 8; j_i++) {
        B[i, j_o * 8 + j_i] = A[i, j_o * 8 + j_i] * 2.0;
      }
    }
  }
}
"""
from __future__ import annotations

from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import For
from tegrad.codegen.schedule.common import ScheduleError
from tegrad.codegen.schedule.fusion import stage_names, statements
from tegrad.codegen.schedule.loops import parallelize, reorder, split, unroll, vectorize
from tegrad.codegen.schedule.stages import compute_at

#: the requests a stage's override may hold, in the order they are applied
REQUESTS = ("split", "order", "compute_at", "unroll", "vectorize", "parallel")


def _statement_of(kernel, stage):
    for s in statements(kernel.body):
        if stage in stage_names(s):
            return s
    known = sorted({n for s in statements(kernel.body) for n in stage_names(s)})
    raise ScheduleError(f"schedule: no stage named {stage!r} (stages: {', '.join(known)})")


def _loops_of(kernel, stage):
    return [m.var.name for m in walk_stmts(_statement_of(kernel, stage)) if type(m) is For]


def _check_loop(kernel, stage, loop, owner=None):
    owner = owner or stage
    if not isinstance(loop, str):
        raise ScheduleError(f"schedule for stage {stage!r}: a loop name must be a string, "
                            f"got {loop!r}")
    loops = _loops_of(kernel, owner)
    if loop not in loops:
        raise ScheduleError(f"schedule for stage {stage!r}: stage {owner!r} has no loop "
                            f"{loop!r} (its loops: {', '.join(loops) or 'none'})")


def _names(value, stage, what):
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ScheduleError(f"schedule for stage {stage!r}: {what} must be a loop name or a list "
                        f"of loop names, got {value!r}")


def _apply(kernel, stage, spec):
    unknown = sorted(set(spec) - set(REQUESTS))
    if unknown:
        raise ScheduleError(f"schedule for stage {stage!r}: unknown request(s) {unknown} "
                            f"(known: {', '.join(REQUESTS)})")
    if "split" in spec:
        splits = spec["split"]
        if not isinstance(splits, dict):
            raise ScheduleError(f"schedule for stage {stage!r}: split must be a dict "
                                f"{{loop: factor}}, got {splits!r}")
        for loop, factor in splits.items():
            _check_loop(kernel, stage, loop)
            kernel = split(kernel, loop=loop, factor=factor, tail="loop")
    if "order" in spec:
        order = _names(spec["order"], stage, "order")
        for loop in order:
            _check_loop(kernel, stage, loop)
        kernel = reorder(kernel, loops=order)
    if "compute_at" in spec:
        at = spec["compute_at"]
        if not (isinstance(at, (list, tuple)) and len(at) == 2
                and all(isinstance(v, str) for v in at)):
            raise ScheduleError(f"schedule for stage {stage!r}: compute_at must be "
                                f"(stage, loop), got {at!r}")
        _statement_of(kernel, at[0])
        _check_loop(kernel, stage, at[1], owner=at[0])
        kernel = compute_at(kernel, stage=stage, loop=at[1])
    for loop in _names(spec.get("unroll", []), stage, "unroll"):
        _check_loop(kernel, stage, loop)
        kernel = unroll(kernel, loop=loop)
    for key, fn in (("vectorize", vectorize), ("parallel", parallelize)):
        if key in spec:
            loop = spec[key]
            _check_loop(kernel, stage, loop)
            kernel = fn(kernel, loop=loop)
    return kernel


def apply_overrides(kernel, overrides):
    """``(kernel, stages)``: ``kernel`` with each stage of ``overrides`` scheduled as asked
    (module doc), and the names of those stages (the automatic schedule leaves them)."""
    if not isinstance(overrides, dict):
        raise ScheduleError(f"schedule must be a dict {{stage: requests}}, got {overrides!r}")
    for stage, spec in overrides.items():
        if not isinstance(stage, str):
            raise ScheduleError(f"schedule: stage names are strings, got {stage!r}")
        _statement_of(kernel, stage)
        if spec == "none":
            continue
        if not isinstance(spec, dict):
            raise ScheduleError(f"schedule for stage {stage!r}: give 'none' or a dict of "
                                f"requests, got {spec!r}")
        try:
            kernel = _apply(kernel, stage, spec)
        except ScheduleError as e:
            if str(e).startswith(f"schedule for stage {stage!r}"):
                raise
            raise ScheduleError(f"schedule for stage {stage!r}: {e}") from None
    return kernel, tuple(overrides)
