"""An expert's schedule for chosen stages: ``tg.build(..., schedule={...})``.

The dict is a short way to write steps (:mod:`.primitives`) for some stages, the
automatic schedule choosing the others'. ``overrides`` maps a stage (the name of the
tensor it computes, as ``f.loops`` shows it) to ``"none"`` (its plain loops, no
automatic schedule) or to a dict of requests, which become these steps, in this
order:

- ``"split": {loop: factor}``: ``Step("split", stage, (loop, factor))`` each: ``loop``
  becomes ``loop_o`` and ``loop_i`` (a tail loop keeps the name ``loop`` when the factor
  does not divide the trip count);
- ``"order": [loop, ...]``: ``Step("order", stage, loops)``, those perfectly nested loops
  in that order, outermost first;
- ``"compute_at": (stage, loop)``: this stage computed inside ``loop`` of ``stage``;
- ``"unroll": [loop, ...]``, ``"vectorize": loop``, ``"parallel": loop``.

Loops are named as in ``f.loops``. A request naming an unknown stage or loop, one that
would change the result, or a mark the backend would not realise raises a
:class:`ScheduleError` naming the stage: a ``vectorize`` of a loop LLVM would not
vectorise or would have to reassociate (see
:func:`~.vector_loops.vector_problem`) when the schedule is made, one LLVM declined when
the function is built.

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> A = tg.placeholder((4, 16), name="A")
>>> B = tg.compute((4, 16), lambda i, j: A[i, j] * 2.0, name="B")
>>> steps, stages = override_steps(lower_program([A], [B]),
...                                {"B": {"split": {"j": 8}, "vectorize": "j_i"}})
>>> steps, stages
([Step('split', 'B', ('j', 8)), Step('vectorize', 'B', ('j_i',))], ('B',))
"""
from __future__ import annotations

from tegrad.codegen.schedule.common import ScheduleError
from tegrad.codegen.schedule.fusion import statements
from tegrad.codegen.schedule.steps import Step, holding, names_of

#: the requests a stage's override may hold, in the order they are applied
REQUESTS = ("split", "order", "compute_at", "unroll", "vectorize", "parallel")


def _names(value, stage, what):
    if isinstance(value, str):
        return [value]
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return list(value)
    raise ScheduleError(f"schedule for stage {stage!r}: {what} must be a loop name or a list "
                        f"of loop names, got {value!r}")


def _steps_of(stage, spec):
    unknown = sorted(set(spec) - set(REQUESTS))
    if unknown:
        raise ScheduleError(f"schedule for stage {stage!r}: unknown request(s) {unknown} "
                            f"(known: {', '.join(REQUESTS)})")
    steps = []
    if "split" in spec:
        splits = spec["split"]
        if not isinstance(splits, dict):
            raise ScheduleError(f"schedule for stage {stage!r}: split must be a dict "
                                f"{{loop: factor}}, got {splits!r}")
        steps += [Step("split", stage, (loop, factor)) for loop, factor in splits.items()]
    if "order" in spec:
        steps.append(Step("order", stage, tuple(_names(spec["order"], stage, "order"))))
    if "compute_at" in spec:
        at = spec["compute_at"]
        if not (isinstance(at, (list, tuple)) and len(at) == 2
                and all(isinstance(v, str) for v in at)):
            raise ScheduleError(f"schedule for stage {stage!r}: compute_at must be "
                                f"(stage, loop), got {at!r}")
        steps.append(Step("compute_at", stage, tuple(at)))
    steps += [Step("unroll", stage, (loop,))
              for loop in _names(spec.get("unroll", []), stage, "unroll")]
    for key in ("vectorize", "parallel"):
        if key in spec:
            steps.append(Step(key, stage, (spec[key],)))
    return steps


def override_steps(kernel, overrides):
    """``(steps, stages)``: the steps the overrides ask for (module doc), checked against
    ``kernel``'s stages, and the names of the stages they schedule (the automatic
    schedule leaves them)."""
    if not isinstance(overrides, dict):
        raise ScheduleError(f"schedule must be a dict {{stage: requests}}, got {overrides!r}")
    names = names_of(statements(kernel.body))
    steps = []
    for stage, spec in overrides.items():
        if not isinstance(stage, str):
            raise ScheduleError(f"schedule: stage names are strings, got {stage!r}")
        holding(names, stage)
        if spec == "none":
            continue
        if not isinstance(spec, dict):
            raise ScheduleError(f"schedule for stage {stage!r}: give 'none' or a dict of "
                                f"requests, got {spec!r}")
        steps += _steps_of(stage, spec)
    return steps, tuple(overrides)


__all__ = ["REQUESTS", "override_steps"]
