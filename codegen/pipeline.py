"""The compile pipeline: the passes that turn a program into the kernel that runs.

``tg.build``, ``tg.export`` and ``f.export`` all compile through :func:`compile_kernel`,
so an exported library runs the code a built function runs. The passes, in order
(:data:`PASSES`; each keeps every output equal to the program's, as ``tg.evaluate``
computes it):

1. ``computed_once``: stages computing the same values merged into one
   (:func:`~.lower.dedupe.computed_once`); keeps each output's expression.
2. ``lower``: one loop nest per stage, contractions as calls of the gemm kernel
   (:func:`~.lower.program.lower_program`); keeps the values of every buffer.
3. ``auto_schedule``: per stage, fusion, splits, loop order, tiles, vector
   accumulators and vector loops, the stages named in ``schedule`` as asked instead
   (:func:`~.schedule.auto.auto_schedule`); keeps results (a float sum's up to
   reassociation in its vector lanes).
4. ``parallelize``: per stage, the outer loop worth a fork-join marked parallel for
   ``threads`` threads (:func:`~.schedule.parallel.parallelize_stages`); keeps results
   bit for bit, for any thread count.
5. ``scalar_temps``: a temporary read only in the iteration that writes it (a fused
   intermediate) held in a variable instead of a buffer
   (:func:`~.schedule.scalar_temps.scalar_temps`); keeps results bit for bit.
6. ``memory_order``: the top-level statements reordered, dependencies kept, where that
   lowers the bytes of temporaries alive together (:func:`~.lower.memory_order.memory_order`).
7. ``rematerialise``: a temporary that is cheap elementwise arithmetic of other
   buffers (a padded input, an activation) written again right before its late readers,
   where that lowers the bytes of temporaries alive together
   (:func:`~.lower.rematerialise.rematerialise`); keeps results bit for bit.
8. ``sum_in_place``: a sum of a product and a temporary computed in the sum's memory,
   the product adding onto the temporary's values (:func:`~.lower.sum_in_place.sums_in_place`);
   keeps results up to the order of the sum's additions.

``schedule="none"`` runs :data:`PLAIN_PASSES` instead: ``lower`` as written (no merged
stages, no gemm calls), ``parallelize`` and ``memory_order``. ``dump=`` sees the text
after every pass.

Every choice the passes make is a step (:mod:`.schedule.primitives`), made before any
code is emitted; ``CompiledKernel.schedule`` is the :class:`~.schedule.steps.Schedule`
of them all (``f.schedule``). Given as ``schedule=``, a Schedule is replayed: the passes
apply its steps in order and choose nothing (``computed_once`` and lowering with
products only when its steps say so), so the same program compiles to the same loops.

>>> import tegrad as tg
>>> x = tg.placeholder((4,), name="x")
>>> y = tg.compute((4,), lambda i: x[i] * 2.0, name="y")
>>> seen = []
>>> compiled = compile_kernel([x], [y], threads=1, dump=lambda name, text: seen.append(name))
>>> seen
['computed_once', 'lower', 'auto_schedule', 'parallelize', 'scalar_temps', 'memory_order', 'rematerialise', 'sum_in_place']
>>> compiled.kernel.name, compiled.record.fused
('kernel', ())
>>> compile_kernel([x], [y], threads=1, schedule="none").record is None
True
>>> again = compile_kernel([x], [y], threads=1, schedule=compiled.schedule)
>>> format_kernel(again.kernel) == format_kernel(compiled.kernel), list(compiled.schedule)
(True, [Step('computed_once', None, ()), Step('contractions', None, ()), Step('unroll_tiny', 'y', ('i',))])
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Optional

from tegrad.ir.errors import TegradError
from tegrad.ir.printer import format_tensor
from tegrad.codegen.llvm.parallel import resolve_threads
from tegrad.codegen.loops.nodes import Kernel
from tegrad.codegen.loops.printer import format_kernel
from tegrad.codegen.lower.program import _tensor_list, lower_program
from tegrad.codegen.schedule.auto import ScheduleRecord, choose, record_of
from tegrad.codegen.schedule.common import ScheduleError
from tegrad.codegen.lower.dedupe import computed_once
from tegrad.codegen.lower.memory_order import memory_order
from tegrad.codegen.lower.rematerialise import rematerialise
from tegrad.codegen.lower.sum_in_place import sums_in_place
from tegrad.codegen.schedule.describe import schedule_value
from tegrad.codegen.schedule.fusion import stage_names, statements
from tegrad.codegen.schedule.manual import override_steps
from tegrad.codegen.schedule.parallel import parallel_steps
from tegrad.codegen.schedule.primitives import Scheduler, naming, unrealised_mark
from tegrad.codegen.schedule.products import check_products, product_steps
from tegrad.codegen.schedule.scalar_temps import scalar_temps
from tegrad.codegen.schedule.steps import Schedule, Step, holding, names_of
from tegrad.codegen.target import Target


@dataclass(frozen=True)
class CompiledKernel:
    """What :func:`compile_kernel` gives: the ``kernel``, the schedule ``record`` (None
    for ``schedule="none"``) and ``schedule``, the :class:`~.schedule.steps.Schedule` of
    every step made, which prints as :func:`~.schedule.describe.describe_schedule`
    describes the kernel and compiles the same kernel again when given as
    ``schedule=``."""

    kernel: Kernel
    record: Optional[ScheduleRecord] = None
    schedule: Optional[Schedule] = None


@dataclass(frozen=True)
class _State:
    """What flows through the passes: the program, the options, and once lowered the
    kernel, the schedule record and the steps made so far. ``mode``: ``"auto"`` (the
    steps chosen, a dict's asked for), ``"plain"`` (``schedule="none"``) or ``"replay"``
    (a :class:`Schedule` given: its steps, nothing chosen)."""

    inputs: tuple
    outputs: tuple
    name: str
    threads: Optional[int]
    schedule: object
    target: Target
    mode: str = "auto"
    kernel: Optional[Kernel] = None
    record: Optional[ScheduleRecord] = None
    steps: tuple = ()


def _given(s, name):
    return any(step.primitive == name for step in s.schedule)


def _computed_once(s):
    if s.mode == "replay" and not _given(s, "computed_once"):
        return s
    done = () if s.mode == "replay" else (Step("computed_once", None, ()),)
    return replace(s, outputs=tuple(computed_once(s.outputs)), steps=s.steps + done)


def _lower(s):
    if s.mode == "replay":
        return _lower_given(s)
    # a stage scheduled by hand keeps its loop nest, not a gemm call
    plain = tuple(s.schedule or ())
    kernel = lower_program(s.inputs, s.outputs, name=s.name, contractions=True, plain=plain)
    steps = (Step("contractions", None, ()),) + tuple(Step("plain", n, ()) for n in plain)
    return replace(s, kernel=kernel, steps=s.steps + steps + product_steps(kernel, s.target))


def _lower_given(s):
    """Lowered as a replayed schedule says: with products when it has the
    ``contractions`` step, the stages its ``plain`` steps name keeping their loops; its
    product steps must be those of the calls made (else a ScheduleError)."""
    plain = {step.stage for step in s.schedule if step.primitive == "plain"}
    given = [step for step in s.schedule if step.primitive == "product"]
    if not _given(s, "contractions"):
        if given:
            raise ScheduleError(f"schedule for stage {given[0].stage!r}: a product step "
                                f"needs the program's 'contractions' step")
        kernel = lower_program(s.inputs, s.outputs, name=s.name)
    else:
        kernel = lower_program(s.inputs, s.outputs, name=s.name, contractions=True,
                               plain=plain)
        check_products(given, product_steps(kernel, s.target))
    names = names_of(statements(kernel.body))
    for stage in plain:
        with naming(stage):
            holding(names, stage)
    return replace(s, kernel=kernel)


def _auto_schedule(s):
    # vector accumulators and tiles as wide as the target's vector registers
    sched = Scheduler(s.kernel, lanes_of=s.target.lanes, threads=resolve_threads(s.threads))
    if s.mode == "replay":
        sched.replay(s.schedule)
        kernel = sched.result()
        manual = sorted({n for st in statements(kernel.body) for n in stage_names(st)})
        record = record_of(sched, manual)
        return replace(s, kernel=kernel, record=record, steps=record.steps)
    steps, manual = override_steps(s.kernel, s.schedule or {})
    sched.replay(steps)
    choose(sched, manual=manual)
    record = record_of(sched, manual)
    return replace(s, kernel=sched.result(), record=record, steps=s.steps + record.steps)


def _parallelize(s):
    if s.mode == "replay":
        return s
    kernel, steps = parallel_steps(s.kernel, threads=s.threads)
    unrealised_mark(kernel)
    record = None if s.record is None else replace(s.record, steps=s.steps + steps)
    return replace(s, kernel=kernel, record=record, steps=s.steps + steps)


def _lower_plain(s):
    return replace(s, kernel=lower_program(s.inputs, s.outputs, name=s.name))


def _scalar_temps(s):
    return replace(s, kernel=scalar_temps(s.kernel))


def _memory_order(s):
    return replace(s, kernel=memory_order(s.kernel))


def _rematerialise(s):
    return replace(s, kernel=rematerialise(s.kernel))


def _sum_in_place(s):
    return replace(s, kernel=sums_in_place(s.kernel))


#: the passes, in order: ``(name, state -> state)``
PASSES = (("computed_once", _computed_once), ("lower", _lower),
          ("auto_schedule", _auto_schedule), ("parallelize", _parallelize),
          ("scalar_temps", _scalar_temps), ("memory_order", _memory_order),
          ("rematerialise", _rematerialise), ("sum_in_place", _sum_in_place))
#: the passes of ``schedule="none"``: every stage's loops as written
PLAIN_PASSES = (("lower", _lower_plain), ("parallelize", _parallelize),
                ("memory_order", _memory_order))


def check_schedule(schedule, caller):
    """``schedule`` when it is None, ``"none"``, a dict ``{stage: requests}`` or a
    :class:`~.schedule.steps.Schedule`; else a :class:`~.schedule.common.ScheduleError`
    naming ``caller``.

    >>> check_schedule("auto", "export")
    Traceback (most recent call last):
    ...
    tegrad.codegen.schedule.common.ScheduleError: export: schedule must be None, 'none' or a dict {stage: requests}, or a Schedule (f.schedule), got 'auto'
    """
    if schedule is None or isinstance(schedule, (dict, Schedule)) or (
            isinstance(schedule, str) and schedule == "none"):
        return schedule
    raise ScheduleError(f"{caller}: schedule must be None, 'none' or a dict "
                        f"{{stage: requests}}, or a Schedule (f.schedule), got {schedule!r}")


def _dumper(dump):
    """``dump`` as a function ``(pass name, text)``: a callable as it is, a stream (an
    object with ``write``) written a header line and the text."""
    if dump is None or (callable(dump) and not hasattr(dump, "write")):
        return dump
    if hasattr(dump, "write"):
        return lambda name, text: dump.write(f"// after {name}\n{text}\n")
    raise TegradError(f"compile_kernel: dump must be None, a callable (name, text) or a "
                      f"stream, got {dump!r}")


def compile_kernel(inputs, outputs, *, threads, schedule=None, name=None, dump=None,
                   target=None):
    """The kernel computing ``outputs`` (tensors) from the placeholders ``inputs``,
    through :data:`PASSES` (:data:`PLAIN_PASSES` for ``schedule="none"``), its parallel
    loops for ``threads`` threads (None: every usable core); ``schedule`` as
    ``tg.build``'s; ``name`` the kernel's (default ``"kernel"``). ``dump``: None, a
    callable given ``(pass name, text)`` after every pass, or a stream written the same
    (``dump=sys.stderr``); the text is the kernel's (``format_kernel``), or the program's
    before it is lowered. ``target``: the :class:`~tegrad.codegen.target.Target` the
    kernel is vectorised for (None: the host); emit its products for the same one.

    >>> import io, tegrad as tg
    >>> x = tg.placeholder((2,), name="x")
    >>> out = io.StringIO()
    >>> _ = compile_kernel([x], [x + 1.0], threads=1, schedule="none", name="inc", dump=out)
    >>> print(out.getvalue().splitlines()[:2])
    ['// after lower', 'kernel inc(float32 x[2], float32 add[2]) {']
    """
    schedule = check_schedule(schedule, "compile_kernel")
    dump = _dumper(dump)
    mode = "plain" if isinstance(schedule, str) else \
        "replay" if isinstance(schedule, Schedule) else "auto"
    state = _State(tuple(_tensor_list(inputs, "inputs")), tuple(_tensor_list(outputs, "outputs")),
                   "kernel" if name is None else name, threads, schedule,
                   Target.host() if target is None else target, mode)
    for pass_name, run in PLAIN_PASSES if mode == "plain" else PASSES:
        state = run(state)
        if dump is not None:
            dump(pass_name, format_tensor(list(state.outputs)) if state.kernel is None
                 else format_kernel(state.kernel))
    return CompiledKernel(state.kernel, state.record,
                          schedule_value(state.kernel, state.record, state.steps))


__all__ = ["PASSES", "PLAIN_PASSES", "CompiledKernel", "check_schedule", "compile_kernel"]
