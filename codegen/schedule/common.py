"""What the schedule transformations share: finding loops, replacing them, errors."""
from __future__ import annotations

from tegrad.analysis.intervals import value_range
from tegrad.ir.errors import TegradError
from tegrad.ir.expr import Binary, Const, Var
from tegrad.ir.mapper import fresh_name

from tegrad.codegen.loops.mapper import (  # noqa: F401  (bound_names, names_in: the passes')
    StmtMapper, bound_names, buffers_of, free_variables, names_in, stmt_exprs, to_affine,
    walk_expr, walk_stmts)
from tegrad.codegen.loops.nodes import Accumulate, For, Kernel, Load, Store
from tegrad.codegen.loops.printer import format_expr


class ScheduleError(TegradError):
    """A schedule transformation that does not apply to the kernel as asked."""


def find_loop(kernel, name):
    """The loop of ``kernel`` whose variable is ``name``."""
    found = [s for s in walk_stmts(kernel.body) if type(s) is For and s.var.name == name]
    if not found:
        raise ScheduleError(f"kernel {kernel.name!r} has no loop {name!r}")
    if len(found) > 1:
        raise ScheduleError(f"kernel {kernel.name!r} has {len(found)} loops named {name!r}")
    return found[0]


class _ReplaceLoop(StmtMapper):
    def __init__(self, name, fn):
        super().__init__()
        self.name, self.fn = name, fn

    def map_for(self, s):
        if s.var.name == self.name:
            return self.fn(s)
        return super().map_for(s)


def replace_loop(kernel, name, fn):
    """``kernel`` with its loop ``name`` replaced by ``fn(loop)``."""
    find_loop(kernel, name)
    return Kernel(kernel.name, kernel.args, kernel.temps, _ReplaceLoop(name, fn)(kernel.body))


def constant_trip_count(loop):
    """The number of iterations of ``loop`` when its bounds are constants, else None."""
    if type(loop.begin) is Const and type(loop.end) is Const:
        return max(0, -(-(loop.end.value - loop.begin.value) // loop.step))
    return None


def loop_value(loop, t):
    """The loop variable at iteration ``t``: ``begin + t * step``."""
    scaled = t if loop.step == 1 else Binary("mul", t, Const(loop.step, "int64"), "int64")
    if type(loop.begin) is Const and loop.begin.value == 0:
        return scaled
    return Binary("add", loop.begin, scaled, "int64")


def loop_var_range(loop, ranges):
    """Inclusive ``(lo, hi)`` holding every value of ``loop``'s variable, given the
    inclusive ``ranges`` of the variables its bounds use, or None."""
    lo, hi = value_range(loop.begin, ranges), value_range(loop.end, ranges)
    if lo is None or hi is None:
        return None
    return lo[0], hi[1] - 1


class NotingMapper(StmtMapper):
    """The statement mapper of a pass that lists what it changed in ``changed`` (see
    :func:`run_noting`) and, given ``only`` (names), changes nothing else: a schedule's
    step names the loops (or buffers) a pass applies to."""

    def __init__(self, only=None):
        super().__init__()
        self.changed, self.only = [], only

    def allowed(self, name):
        """The pass may change what ``name`` names."""
        return self.only is None or name in self.only


class RangedStmtMapper(NotingMapper):
    """A pass's statement mapper (:class:`NotingMapper`) that knows, in ``self.ranges``,
    the inclusive ranges of the variables of the loops around the statement it maps
    (those :func:`loop_var_range` bounds)."""

    def __init__(self, only=None):
        super().__init__(only)
        self.ranges = {}

    def map_for(self, s):
        name, r = s.var.name, loop_var_range(s, self.ranges)
        saved = self.ranges.pop(name, None)
        if r is not None:
            self.ranges[name] = r
        try:
            return super().map_for(s)
        finally:
            self.ranges.pop(name, None)
            if saved is not None:
                self.ranges[name] = saved


def sole_accumulation(s):
    """The one write of ``s`` when it is an accumulation into a buffer ``s`` does not
    load (each update then depends on no other), else None."""
    ws = writes(s)
    if len(ws) != 1 or type(ws[0]) is not Accumulate:
        return None
    if any(ld.buffer == ws[0].buffer for node in walk_stmts(s) for e in stmt_exprs(node)
           for ld in walk_expr(e) if type(ld) is Load):
        return None
    return ws[0]


def run_noting(mapper, s, changed):
    """``mapper(s)``, the names the mapper listed in its ``changed`` attribute appended
    to the list ``changed`` when given (what a pass reports to the schedule's notes)."""
    out = mapper(s)
    if changed is not None:
        changed.extend(mapper.changed)
    return out


def uses_var(e, name):
    return any(getattr(n, "name", None) == name and type(n).__name__ == "Var"
               for n in walk_expr(e))


def stmt_uses_var(s, name):
    """``s`` (with its children) reads the variable ``name``."""
    return any(uses_var(e, name) for node in walk_stmts(s) for e in stmt_exprs(node))


def writes(s):
    """The Store and Accumulate statements in ``s``."""
    return [n for n in walk_stmts(s) if type(n) in (Store, Accumulate)]


def names_in_stmt(s):
    """The names of ``s``'s loops, lets and allocated buffers, and of the variables and
    buffers it uses from outside."""
    bound, local = bound_names(s)
    used, _ = buffers_of(s)
    return bound | {b.name for b in local} | {b.name for b in used} | free_variables(s)


def fresh(base, taken):
    """A name not in ``taken`` (added to it)."""
    name = fresh_name(base, taken)
    taken.add(name)
    return name


def _pins(indices, name, inner, spans):
    """Some index is ``c * name + rest`` (``c != 0``) where ``rest`` is free of ``inner``
    but for loop variables of ``spans`` (name -> most minus least value) moving it by
    less than ``|c|`` in all (a split loop's ``c * outer + inner``, ``0 <= inner < c``):
    two iterations that agree on the variables outside ``inner`` and write the same
    element agree on ``name``."""
    for idx in indices:
        aff = to_affine(idx)
        if aff is None:
            continue
        coeff, moved, ok = 0, 0, True
        for atom, c in aff.terms:
            if type(atom) is str:
                if atom == name:
                    coeff = c
                elif atom in spans:
                    moved += abs(c) * spans[atom]
                else:
                    ok &= atom not in inner
            else:
                ok &= not (atom.variables() & (inner | {name}))
        if coeff and ok and moved < abs(coeff):
            return True
    return False


def _unpinned(indices, names, inner, spans):
    """The first of ``names`` that a write at ``indices`` may not pin, or None. Pinned
    variables count as fixed for the others (``c * o + i`` pins ``o`` by the span of
    ``i``, then ``i``): a write that pins all of them is one element per iteration."""
    pinned, progress = set(), True
    while progress:
        progress = False
        for v in names:
            if v not in pinned and _pins(indices, v, inner - pinned - {v},
                                         {k: d for k, d in spans.items()
                                          if k != v and k not in pinned}):
                pinned.add(v)
                progress = True
    return next((v for v in names if v not in pinned), None)


def _spans(loops):
    """Most minus least value of the variable of each loop of constant bounds."""
    out = {}
    for loop in loops:
        n = constant_trip_count(loop)
        if n:
            out[loop.var.name] = (n - 1) * abs(loop.step)
    return out


def independence_problem(body, names, accumulate_ok, loops=()):
    """Why iterations over the loop variables ``names`` around ``body`` may not run in any
    order or at once (None when they may).

    Each write to a buffer not allocated inside ``body`` must pin every one of ``names``
    (an index ``c * v + rest`` with ``rest`` free of variables bound inside, or moved by
    them by less than ``|c|``: a split loop's ``c * o + i``), so that different
    iterations write different elements, and such a buffer is loaded only at the indices
    it is written at. With ``accumulate_ok``, accumulations need not pin (they commute,
    up to rounding) if their buffer is not loaded. ``loops``: the loops of ``names``
    where known (their constant bounds count too).
    """
    bound, local = bound_names(body)
    inner = bound | set(names)
    spans = _spans([n for n in walk_stmts(body) if type(n) is For] + list(loops))
    written = {}
    for w in writes(body):
        if w.buffer in local:
            continue
        written.setdefault(w.buffer, []).append(w)
        if accumulate_ok and type(w) is Accumulate:
            continue
        v = _unpinned(w.indices, names, inner, spans)
        if v is not None:
            return (f"the write to {w.buffer.name!r} at {_text(w.indices)} is "
                    f"the same element in different iterations of {v!r}")
    for buffer, ws in written.items():
        pinning = [w for w in ws if not (accumulate_ok and type(w) is Accumulate)]
        if len(pinning) < 2:
            continue
        # Each write pins the iterations on its own, but two writes may still meet across
        # iterations (x[i] and x[3*i - 2]: i = 4 and i = 2 both write x[4]). They are
        # disjoint when the dimensions where every write has the same index already pin
        # every variable: those indices tell the iteration whichever write made them.
        first = pinning[0].indices
        same = [d for d in range(len(first))
                if all(len(w.indices) == len(first) and bool(w.indices[d] == first[d])
                       for w in pinning[1:])]
        v = _unpinned([first[d] for d in same], names, inner, spans)
        if v is not None:
            return (f"the writes to {buffer.name!r} at "
                    f"{' and '.join(_text(w.indices) for w in pinning)} may be the same "
                    f"element in different iterations of {v!r}")
    for node in walk_stmts(body):
        for e in stmt_exprs(node):
            for ld in walk_expr(e):
                if type(ld) is not Load or ld.buffer not in written:
                    continue
                ws = written[ld.buffer]
                # unpinned accumulations (accumulate_ok) may update any element
                if (accumulate_ok and any(type(w) is Accumulate for w in ws)) or not (any(
                        len(w.indices) == len(ld.indices)
                        and all(bool(a == b) for a, b in zip(w.indices, ld.indices))
                        for w in ws) or _pinned_alike(ld, ws, names, bound)):
                    return (f"{ld.buffer.name!r} is read at {_text(ld.indices)} "
                            f"and written in other iterations")
    return None


def _pinned_alike(ld, ws, names, bound):
    """For each of ``names``, some dimension where the load ``ld`` and every write ``ws``
    of its buffer index at exactly that loop variable (not rebound inside): iterations
    that differ in it touch different elements, so the load reads only what its own
    iteration writes."""
    def at(e, v):
        return type(e) is Var and e.name == v
    n = len(ld.indices)
    return all(v not in bound and any(
        at(ld.indices[d], v) and all(len(w.indices) == n and at(w.indices[d], v) for w in ws)
        for d in range(n)) for v in names)


def _text(indices):
    return "[" + ", ".join(format_expr(i) for i in indices) + "]"
