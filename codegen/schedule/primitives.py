"""The primitives of a schedule's steps, and :class:`Scheduler`, which applies steps.

Each entry of :data:`PRIMITIVES` says what a :class:`~.steps.Step` of that primitive
does, what its arguments are, and how it reads in ``f.schedule``. By kind:

- ``program`` (stage None): ``computed_once`` (stages computing the same values merged,
  :mod:`~tegrad.codegen.lower.dedupe`), ``contractions`` (stages with a product plan
  lowered to product kernels); the pipeline applies them before lowering;
- ``lowering``, applied as the program is lowered: ``plain`` (stage: a tensor's name)
  keeps the stage's loops (no product kernel), ``product`` says which product kernels a
  statement calls (:mod:`.products`: the kernel, its shape and its blocking, which
  follow from the plan and the target: a step asking for others is refused);
- ``loop`` (loops named as in ``f.loops``, the stage checked to hold them): ``split``
  ``(loop, factor)``, ``order`` ``(loop, ...)``, ``compute_at`` ``(stage, loop)``,
  ``unroll``, ``vectorize``, ``parallel`` ``(loop,)``, ``fuse_loops`` ``(outer, inner)``
  (:mod:`.loops`, :mod:`.stages`);
- ``batch``, applied together when consecutive: ``fuse`` ``(stage, ...)`` (those
  statements' loops run in the stage's, :mod:`.fusion`), ``reuse_stored`` ``()`` (the
  values the stage stored read back where computed again, :mod:`.stored`);
- ``statement``, the automatic schedule's passes on one statement, ``args`` the loops
  (buffers for ``if_convert``, ``(loop, lanes)`` pairs for ``accumulators``) they
  apply to, each where the pass's conditions hold: ``split_divisor``
  (:mod:`.divisors`), ``constant_tiny``, ``sink``, ``unroll_tiny`` (:mod:`.loop_order`),
  ``tile`` (:mod:`.tiles`), ``hoist_window`` (:mod:`.windows`), ``guards_to_bounds``
  (:mod:`.guards`), ``if_convert`` (:mod:`.ifconvert`), ``accumulators``
  (:mod:`.accumulators`), ``vector_loops`` (:mod:`.vector_loops`);
- ``part``: ``partition`` ``(threads,)``, a scatter run once per thread on the rows it
  owns (:mod:`.parallel`).

A step that does not apply as asked (an unknown stage or loop, a change of the
results, a loop a pass's conditions do not hold for, a mark the backend would not
realise) raises a :class:`~.common.ScheduleError` naming the stage. Kernels built for one
thread leave ``parallel`` and ``partition`` steps out (they would run serially).

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.schedule.steps import Step
>>> A = tg.placeholder((4, 16), name="A")
>>> B = tg.compute((4, 16), lambda i, j: A[i, j] * 2.0, name="B")
>>> s = Scheduler(lower_program([A], [B]), lanes_of=lambda dtype: 8)
>>> s.replay([Step("split", "B", ("j", 8)), Step("vector_loops", "B", ("j_i",))])
>>> [f"{v.var.name} {v.kind}" for v in walk_stmts(s.kernel.body) if type(v) is For]
['i serial', 'j_o serial', 'j_i vectorized']
>>> s.replay([Step("unroll", "B", ("k",))])
Traceback (most recent call last):
...
tegrad.codegen.schedule.common.ScheduleError: schedule for stage 'B': stage 'B' has no loop 'k' (its loops: i, j_o, j_i)
"""
from __future__ import annotations

from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass

from tegrad.codegen.loops.mapper import stmt_children, walk_stmts
from tegrad.codegen.loops.nodes import Block, For, Kernel
from tegrad.codegen.tuning import UNROLL_LIMIT
from tegrad.codegen.schedule.accumulators import statement_accumulators
from tegrad.codegen.schedule.common import (ScheduleError, constant_trip_count, find_loop,
                                            names_in)
from tegrad.codegen.schedule.divisors import split_divided_loops
from tegrad.codegen.schedule.fusion import fuse_stages, fusion_parts, stage_names, statements
from tegrad.codegen.schedule.guards import innermost_guards_to_bounds
from tegrad.codegen.schedule.ifconvert import if_convert
from tegrad.codegen.schedule.loop_order import (constant_tiny_loops, sink_stride_one,
                                                unroll_tiny_reductions)
from tegrad.codegen.schedule.loops import (fuse, parallelize, reorder, serial_reason, split,
                                           unroll, vectorize)
from tegrad.codegen.schedule.parallel import partition_stage
from tegrad.codegen.schedule.products import product_lines
from tegrad.codegen.schedule.stages import compute_at
from tegrad.codegen.schedule.steps import (Step, find_statement, holding, names_of,
                                           statement_key, statement_keys)
from tegrad.codegen.schedule.stored import reuse_stored_values
from tegrad.codegen.schedule.tiles import tile_transposed_reads
from tegrad.codegen.schedule.vector_loops import mark_vector_loops, vector_problem
from tegrad.codegen.schedule.windows import hoist_scatter_windows


@dataclass(frozen=True)
class Primitive:
    """``kind`` (module doc), ``args`` (what the arguments are), ``text`` (arguments ->
    the lines ``f.schedule`` shows) and ``run`` (how it is applied, by kind)."""

    kind: str
    args: str
    text: object
    run: object = None


def _each(phrase):
    return lambda args: [f"{a}: {phrase}" for a in args]


# -- loop primitives: (scheduler, step) -> kernel ---------------------------------------


def _arity(step, n, what):
    if len(step.args) != n:
        raise ScheduleError(f"{step.primitive} takes {what}, got {step.args!r}")
    return step.args


def _check_loop(sched, stage, loop):
    if not isinstance(loop, str):
        raise ScheduleError(f"a loop name must be a string, got {loop!r}")
    stmts = sched.statements()
    loops = [m.var.name for k in holding(sched.names(), stage) for m in walk_stmts(stmts[k])
             if type(m) is For]
    if loop not in loops:
        raise ScheduleError(f"stage {stage!r} has no loop {loop!r} (its loops: "
                            f"{', '.join(dict.fromkeys(loops)) or 'none'})")
    return loop


def _split(sched, step):
    loop, factor = _arity(step, 2, "(loop, factor)")
    _check_loop(sched, step.stage, loop)
    return split(sched.kernel, loop=loop, factor=factor, tail="loop")


def _order(sched, step):
    for loop in step.args:
        _check_loop(sched, step.stage, loop)
    return reorder(sched.kernel, loops=step.args)


def _compute_at(sched, step):
    stage, loop = _arity(step, 2, "(stage, loop)")
    _check_loop(sched, stage, loop)
    return compute_at(sched.kernel, stage=statement_key(step.stage)[0], loop=loop)


def _marking(fn):
    def run(sched, step):
        (loop,) = _arity(step, 1, "(loop,)")
        return fn(sched.kernel, loop=_check_loop(sched, step.stage, loop))
    return run


def _vectorize(sched, step):
    """A loop marked ``vectorized``, refused when LLVM would not vectorise it or would
    have to reassociate a reduction (:func:`~.vector_loops.vector_problem`; what LLVM
    still declines is refused when the kernel is built)."""
    (loop,) = _arity(step, 1, "(loop,)")
    problem = vector_problem(find_loop(sched.kernel, _check_loop(sched, step.stage, loop)),
                             automatic=False)
    if problem:
        raise ScheduleError(f"vectorize loop {loop!r}: LLVM would not vectorise it: {problem}")
    return vectorize(sched.kernel, loop=loop)


def _fuse_loops(sched, step):
    outer, inner = _arity(step, 2, "(outer, inner)")
    for loop in (outer, inner):
        _check_loop(sched, step.stage, loop)
    return fuse(sched.kernel, outer=outer, inner=inner)


def _partition(sched, step):
    (threads,) = _arity(step, 1, "(threads,)")
    return partition_stage(sched.kernel, step.stage, threads)


# -- statement primitives: (statement, only, scheduler) -> (statement, changed) ---------


def _noting(fn, **fixed):
    """A statement pass ``fn(s, changed=, only=, ...)`` as a primitive's ``run``."""
    def run(s, only, sched):
        changed = []
        options = {k: getattr(sched, v) for k, v in fixed.items()}
        return fn(s, changed=changed, only=only, **options), changed
    return run


def _sink(s, *, changed, only):
    return sink_stride_one(s, moved=changed, only=only)


def _tile(s, *, changed, only, lanes_of, taken):
    return tile_transposed_reads(s, lanes_of=lanes_of, taken=taken, tiled=changed, only=only)


def _hoist(s, *, changed, only, taken):
    return hoist_scatter_windows(s, taken=taken, hoisted=changed, only=only)


def _accumulators(s, only, sched):
    asked = None
    if only is not None:
        asked = {}
        for loop, lanes in only:
            asked.setdefault(loop, []).append(lanes)
    out, loops = statement_accumulators(s, taken=sched.taken, lanes_of=sched.lanes_of,
                                        only=asked)
    return out, list(loops)


def _pairs(args):
    if not all(isinstance(a, tuple) and len(a) == 2 and isinstance(a[0], str) for a in args):
        raise ScheduleError(f"accumulators takes (loop, lanes) pairs, got {args!r}")
    return args


PRIMITIVES = {
    "computed_once": Primitive("program", "()", lambda a: [
        "stages computing the same values computed once"]),
    "contractions": Primitive("program", "()", lambda a: [
        "stages with a product plan lowered to product kernels"]),
    "plain": Primitive("lowering", "()", lambda a: ["keeps its loops (no product kernel)"]),
    "product": Primitive("lowering", "(entry, ...) per call", product_lines),
    "split": Primitive("loop", "(loop, factor)", lambda a: [f"{a[0]}: split by {a[1]}"],
                       _split),
    "order": Primitive("loop", "(loop, ...)", lambda a: [
        f"loops in the order {', '.join(map(str, a))}"], _order),
    "compute_at": Primitive("loop", "(stage, loop)", lambda a: [
        f"computed inside loop {a[1]} of stage {a[0]}"], _compute_at),
    "unroll": Primitive("loop", "(loop,)", _each("unrolled"), _marking(unroll)),
    "vectorize": Primitive("loop", "(loop,)", _each("vectorized"), _vectorize),
    "parallel": Primitive("loop", "(loop,)", _each("parallel"), _marking(parallelize)),
    "fuse_loops": Primitive("loop", "(outer, inner)", lambda a: [
        f"{a[0]}, {a[1]}: fused into one loop"], _fuse_loops),
    "fuse": Primitive("batch", "(stage, ...)", lambda a: [
        f"fused with {', '.join(map(str, a))}"]),
    "reuse_stored": Primitive("batch", "()", lambda a: [
        "its values read back where computed again"]),
    "split_divisor": Primitive("statement", "(loop, ...)", _each("split by its divisor"),
                               _noting(split_divided_loops, taken="taken")),
    "constant_tiny": Primitive("statement", "(loop, ...)",
                               _each("tiny bounds made constant, guarded"),
                               _noting(constant_tiny_loops)),
    "sink": Primitive("statement", "(loop, ...)", _each("moved innermost (stride 1)"),
                      _noting(_sink)),
    "tile": Primitive("statement", "(loop, ...)", _each(
        "square tiles with the loop inside it (a read across rows)"),
        _noting(_tile, lanes_of="lanes_of", taken="taken")),
    "unroll_tiny": Primitive("statement", "(loop, ...)", _each("unrolled (tiny loop)"),
                             _noting(unroll_tiny_reductions)),
    "hoist_window": Primitive("statement", "(loop, ...)", _each(
        "inside its scatter's window (updates kept in order)"),
        _noting(_hoist, taken="taken")),
    "guards_to_bounds": Primitive("statement", "(loop, ...)", _each("guards made bounds"),
                                  _noting(innermost_guards_to_bounds)),
    "if_convert": Primitive("statement", "(buffer, ...)", _each(
        "guarded accumulation or select made unguarded"), _noting(if_convert, taken="taken")),
    "accumulators": Primitive("statement", "((loop, lanes), ...)", lambda a: [
        f"{v}: vector accumulators ({n} lanes)" for v, n in a], _accumulators),
    "vector_loops": Primitive("statement", "(loop, ...)", _each("vectorized"),
                              _noting(mark_vector_loops)),
    "partition": Primitive("part", "(threads,)", lambda a: [
        f"runs on {a[0]} threads, each the updates of the rows it owns"], _partition),
}

#: the passes the automatic schedule runs on each statement, in order
STATEMENT_PASSES = ("split_divisor", "constant_tiny", "sink", "tile", "unroll_tiny",
                    "hoist_window", "guards_to_bounds", "if_convert", "accumulators",
                    "vector_loops")

#: steps a kernel built for one thread leaves out (its loops run serially)
PARALLEL_ONLY = ("parallel", "partition")


def primitive(step):
    """The :class:`Primitive` of ``step``, or a ScheduleError naming the known ones."""
    if not isinstance(step, Step):
        raise ScheduleError(f"schedule: every step is a Step, got {step!r}")
    try:
        return PRIMITIVES[step.primitive]
    except KeyError:
        raise ScheduleError(f"schedule for stage {step.stage!r}: unknown primitive "
                            f"{step.primitive!r} (known: {', '.join(PRIMITIVES)})") from None


def step_lines(step):
    """The lines ``f.schedule`` shows for ``step``."""
    try:
        return primitive(step).text(step.args)
    except (ScheduleError, IndexError, TypeError, ValueError):
        return [str(step)]


@contextmanager
def naming(stage):
    """ScheduleErrors raised inside say which stage's step they come from."""
    try:
        yield
    except ScheduleError as e:
        text = str(e)
        if stage is None or text.startswith(("schedule for stage ", "schedule: ")):
            raise
        raise ScheduleError(f"schedule for stage {stage!r}: {text}") from None


class Scheduler:
    """A kernel the steps given to :meth:`replay` (or chosen by the automatic schedule)
    are applied to, one after another; ``steps`` lists those applied, ``fused`` the
    stages each fusion merged, ``notes`` the lines of each statement's steps (by its
    index). ``lanes_of(dtype)``: the target's vector lanes; ``threads``: the kernel's
    thread count (1: :data:`PARALLEL_ONLY` steps are left out; None: unknown).

    The statements steps name are the kernel's top-level statements, blocks among them
    flattened when the scheduler starts and after each step on the whole kernel (a
    stage lowered as several loops is several statements), not after a statement pass
    (a statement a pass turns into a block stays one, so that the passes after it name
    the same statements); :meth:`result` is the kernel with its blocks flattened.
    """

    def __init__(self, kernel, *, lanes_of, threads=None):
        self.kernel, self.lanes_of, self.threads = _flat(kernel), lanes_of, threads
        self.steps, self.fused, self.notes = [], [], {}
        self._taken, self._stale = None, False
        self._stmts = self._names = self._keys = None

    # -- the statements, their stage names and keys (kept while only one changes) ------

    def statements(self):
        if self._stmts is None:
            self._stmts = statements(self.kernel.body)
            self._names, self._keys = names_of(self._stmts), None
        return self._stmts

    def names(self):
        self.statements()
        return self._names

    def keys(self):
        if self._keys is None:
            self._keys = statement_keys(self.names())
        return self._keys

    @property
    def taken(self):
        """The names in use, which new names avoid (kept across statement passes, so
        that a replay makes the same names)."""
        if self._taken is None:
            self._taken = names_in(self.kernel)
        elif self._stale:
            self._taken |= names_in(self.kernel)
        self._stale = False
        return self._taken

    def set_kernel(self, kernel):
        old = self._stmts
        self.kernel, self._stale = _flat(kernel), self._taken is not None
        if old is None:
            return
        known = {id(s): n for s, n in zip(old, self._names)}
        self._stmts = statements(self.kernel.body)
        self._names = [known[id(s)] if id(s) in known else stage_names(s)
                       for s in self._stmts]
        self._keys = None

    def set_statement(self, k, s):
        stmts = list(self.statements())
        stmts[k] = s
        self.kernel = Kernel(self.kernel.name, self.kernel.args, self.kernel.temps,
                             Block(tuple(stmts)))
        names = stage_names(s)
        self._stmts = stmts
        if names != self._names[k]:
            self._names[k], self._keys = names, None

    def record(self, step, k=None):
        self.steps.append(step)
        if k is not None:
            self.notes.setdefault(k, []).extend(step_lines(step))

    # -- applying steps ---------------------------------------------------------------

    def replay(self, steps):
        """Apply ``steps`` in order (``program`` and ``lowering`` steps are recorded
        only: the pipeline applies them before and as it lowers)."""
        steps, i = list(steps), 0
        while i < len(steps):
            step, prim = steps[i], primitive(steps[i])
            if prim.kind == "batch":
                j = i
                while j < len(steps) and steps[j].primitive == step.primitive:
                    j += 1
                (self.fuse if step.primitive == "fuse" else self.reuse)(steps[i:j])
                i = j
                continue
            i += 1
            if prim.kind in ("program", "lowering"):
                self.record(step)
            elif self.threads is not None and self.threads <= 1 and \
                    step.primitive in PARALLEL_ONLY:
                continue
            elif prim.kind == "statement":
                with naming(step.stage):
                    self.run_pass(step.primitive, find_statement(self.names(), step.stage),
                                  step.args)
            else:
                with naming(step.stage):
                    self.set_kernel(prim.run(self, step))
                self.record(step)

    def run_pass(self, name, k, args=None):
        """Run the statement pass ``name`` on statement ``k``: on the loops ``args``
        name, each of which it must change, or (None) where it chooses; the step is
        recorded when it changed something."""
        prim = PRIMITIVES[name]
        only = None
        if args is not None:
            if name == "accumulators":
                only = _pairs(args)
            elif not all(isinstance(a, str) for a in args):
                raise ScheduleError(f"{name} takes names, got {args!r}")
            else:
                only = frozenset(args)
        key = self.keys()[k]
        s, changed = prim.run(self.statements()[k], only, self)
        if args is not None:
            missing = list((Counter(args) - Counter(changed)).elements()) \
                if name == "accumulators" else [a for a in args if a not in changed]
            if missing:
                raise ScheduleError(f"{name} does not apply to {', '.join(map(str, missing))} "
                                    f"(its conditions do not hold there; see "
                                    f"tegrad.codegen.schedule.primitives)")
        elif name != "accumulators":
            changed = list(dict.fromkeys(changed))
        if changed:
            self.set_statement(k, s)
            self.record(Step(name, key, tuple(changed) if args is None else args), k)

    def fuse(self, steps=None, keep=()):
        """Fuse the statements ``steps`` name into theirs (None: every fusion that is
        legal, the stages named in ``keep`` left alone)."""
        self.set_kernel(self.kernel)  # flat: the statements are fusion's
        names, keys, allowed = self.names(), self.keys(), None
        if steps is not None:
            allowed = {}
            for step in steps:
                with naming(step.stage):
                    head = find_statement(names, step.stage)
                    allowed.setdefault(head, set()).update(
                        find_statement(names, m) for m in step.args)
        kernel, fused, groups = fuse_stages(self.kernel, keep=keep, allowed=allowed)
        if steps is not None:
            within = {j: g[0] for g in groups for j in g[1:]}
            for head, members in allowed.items():
                for j in sorted(members):
                    if within.get(j) != head:
                        raise ScheduleError(
                            f"schedule for stage {keys[head]!r}: stage {keys[j]!r} cannot be "
                            f"fused into it (its loop differs in range or kind, an iteration "
                            f"of one touches elements other iterations of the other do, or a "
                            f"statement between them depends on it)")
        else:
            steps = [Step("fuse", keys[g[0]], tuple(keys[j] for j in g[1:])) for g in groups]
        self.fused.extend(fused)
        self.set_kernel(kernel)
        for step in steps:
            self.record(step)

    def reuse(self, steps=None):
        """Read back the values the stages ``steps`` name stored where later statements
        compute them again (None: every such value)."""
        only = None if steps is None else {s.stage for s in steps}
        reused = []
        body = reuse_stored_values(self.kernel.body, only=only, reused=reused)
        if steps is not None:
            missing = [s.stage for s in steps if s.stage not in reused]
            if missing:
                raise ScheduleError(f"schedule for stage {missing[0]!r}: no value it stores is "
                                    f"computed again later (reuse_stored does not apply)")
        else:
            steps = [Step("reuse_stored", name, ()) for name in reused]
        self.set_kernel(Kernel(self.kernel.name, self.kernel.args, self.kernel.temps, body))
        for step in steps:
            self.record(step)

    def result(self):
        """The kernel, its top-level blocks flattened; a ScheduleError when a mark would
        not be realised (see :func:`unrealised_mark`)."""
        kernel = _flat(self.kernel, alone=True)
        unrealised_mark(kernel)
        return kernel


def _flat(kernel, alone=False):
    """``kernel`` with its top-level blocks flattened (``alone``: a single statement as
    the body itself, else a block of one)."""
    stmts = fusion_parts(kernel)
    body = stmts[0] if alone and len(stmts) == 1 else Block(tuple(stmts))
    return Kernel(kernel.name, kernel.args, kernel.temps, body)


def unrealised_mark(kernel):
    """Raise a ScheduleError naming the stage of the first loop of ``kernel`` marked
    ``unrolled`` that the backend would not unroll (its trip count not a constant up
    to :data:`UNROLL_LIMIT`), or marked ``parallel`` that it would run serially
    (:func:`~.loops.serial_reason`)."""
    for top in statements(kernel.body):
        stack = [(top, ())]
        while stack:
            m, around = stack.pop()
            problem = None
            if type(m) is For and m.kind == "unrolled":
                n = constant_trip_count(m)
                if n is None or n > UNROLL_LIMIT:
                    problem = (f"loop {m.var.name!r} is marked unrolled but has "
                               f"{'no constant trip count' if n is None else f'{n} iterations'}"
                               f" (at most {UNROLL_LIMIT} are unrolled)")
            elif type(m) is For and m.kind == "parallel":
                problem = serial_reason(m, around)
                if problem:
                    problem = f"parallel loop {m.var.name!r} would run serially: {problem}"
            if problem:
                names = stage_names(top)
                raise ScheduleError(f"schedule for stage {names[0] if names else '?'!r}: "
                                    f"{problem}")
            inner = around + (m,) if type(m) is For else around
            stack.extend((c, inner) for c in stmt_children(m))


__all__ = ["PRIMITIVES", "PARALLEL_ONLY", "STATEMENT_PASSES", "Primitive", "Scheduler",
           "naming", "primitive", "step_lines", "unrealised_mark"]
