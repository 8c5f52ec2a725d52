"""Loop order inside a stage: the output's stride-1 axis innermost, tiny reductions unrolled.

Three rewrites of one statement, each keeping every iteration's effect:

- :func:`constant_tiny_loops`: a reduction loop whose bounds move with outer loops but
  stay within ``TINY_TRIP`` consecutive values runs over that constant range, guarded
  (``v`` runs over the same values, each once); one whose trip count stays at most
  ``TINY_TRIP`` runs over its offsets ``t`` from its begin, ``v == begin + t``, guarded;
- :func:`sink_stride_one`: a loop over the last index of everything its body writes,
  whose iterations are independent, moves inside the reduction loops of its body
  (scalar accumulators become one element per iteration; the loop is distributed over
  the body's statements and interchanged inward). Each iteration touches only its own
  elements, so running the iterations' statements in another interleaving computes the
  same values; done only when more accesses run along the stride-1 axis of memory with
  it innermost than with the reduction innermost, and never past a tiny reduction
  (those are unrolled inside it: each element is written once, its window combined in
  registers);
- :func:`unroll_tiny_reductions`: reduction loops of constant trip count at most
  ``TINY_TRIP`` are marked ``unrolled``, and so are other such loops with no loop inside
  that is not unrolled (a scatter's window), while the code emitted stays within
  ``UNROLLED_SIZE`` statements.

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.loops.printer import format_kernel
>>> A = tg.placeholder((4, 13), dtype="float64", name="A")
>>> r = tg.reduce_axis((0, 8), name="r")
>>> B = tg.compute((4, 6), lambda i, j: tg.sum(A[i, j + r], axis=r), name="B")
>>> k = lower_program([A], [B])
>>> body = unroll_tiny_reductions(sink_stride_one(k.body))
>>> print(format_kernel(k.__class__(k.name, k.args, k.temps, body)))
kernel kernel(float64 A[4][13], float64 B[4][6]) {
  for (i = 0; i < 4; i++) {
    for (j = 0; j < 6; j++) {
      B[i, j] = 0.0;
    }
    for (r = 0; r < 8; r++) {
      for (j = 0; j < 6; j++) {
        B[i, j] += A[i, j + r];
      }
    }
  }
}
"""
from __future__ import annotations

from tegrad.analysis.intervals import value_range
from tegrad.ir.expr import Binary, Compare, Const, Var

from tegrad.codegen.loops.mapper import (ExprMapper, StmtMapper, block, distinct_exprs,
                                         stmt_exprs, substitute_stmt, to_affine,
                                         walk_expr, walk_stmts)
from tegrad.codegen.loops.nodes import Accumulate, Allocate, Block, Buffer, For, If, Load, Store
from tegrad.codegen.tuning import (EXPANSION_LIMIT, NODES_PER_STATEMENT, POINTS_LIMIT, TINY_TRIP,
                                  UNROLLED_SIZE)
from tegrad.codegen.schedule.common import (NotingMapper, constant_trip_count,
                                            independence_problem, run_noting, uses_var,
                                            writes)

INDEX = "int64"


def _c(v):
    return Const(int(v), INDEX)


def is_reduction_loop(loop):
    """No write inside ``loop`` uses its variable in its indices (it combines or
    overwrites the same elements each iteration)."""
    name = loop.var.name
    return all(not any(uses_var(i, name) for i in w.indices) for w in writes(loop.body))


class _Ranged(NotingMapper):
    """A pass's mapper knowing the inclusive ranges of the enclosing constant loops."""

    def __init__(self, only=None):
        super().__init__(only)
        self.ranges = {}

    def map_for(self, s):
        n = constant_trip_count(s)
        if n and s.step == 1:
            self.ranges[s.var.name] = (s.begin.value, s.end.value - 1)
        try:
            return self.rewrite_for(s, super().map_for(s))
        finally:
            self.ranges.pop(s.var.name, None)

    def rewrite_for(self, old, new):
        return new


def _tiny_range(loop, ranges):
    """Constant ``(lo, hi)`` holding every value of ``loop`` (a loop with moving bounds
    over at most ``TINY_TRIP`` values), or None."""
    if loop.step != 1 or constant_trip_count(loop) is not None:
        return None
    lo, hi = value_range(loop.begin, ranges), value_range(loop.end, ranges)
    if lo is None or hi is None or hi[1] - lo[0] > TINY_TRIP or hi[1] <= lo[0]:
        return None
    return lo[0], hi[1]


def _tiny_trip(loop, ranges):
    """The largest trip count of ``loop`` (at most ``TINY_TRIP``) over the values of the
    one enclosing loop its bounds use, each value tried on its own, or None."""
    if loop.step != 1:
        return None
    used = [n for n in ranges if uses_var(loop.begin, n) or uses_var(loop.end, n)]
    if len(used) != 1 or ranges[used[0]][1] - ranges[used[0]][0] >= POINTS_LIMIT:
        return None
    name, (lo, hi) = used[0], ranges[used[0]]
    trip = 0
    for point in range(lo, hi + 1):
        at = {**ranges, name: (point, point)}
        b, e = value_range(loop.begin, at), value_range(loop.end, at)
        if b is None or e is None or b[0] != b[1] or e[0] != e[1]:
            return None
        trip = max(trip, e[0] - b[0])
        if trip > TINY_TRIP:
            return None
    return trip


class _ConstantTiny(_Ranged):
    def rewrite_for(self, old, s):
        if not self.allowed(s.var.name) or not is_reduction_loop(s):
            return s
        v = s.var
        span = _tiny_range(s, self.ranges)
        if span is not None:
            self.changed.append(v.name)
            guarded = If(Compare("ge", v, s.begin), If(Compare("lt", v, s.end), s.body))
            return For(v, _c(span[0]), _c(span[1]), guarded, s.kind)
        trip = _tiny_trip(s, self.ranges) if constant_trip_count(s) is None else None
        if not trip:
            return s
        # v runs over its offsets from begin: v_old == begin + v
        self.changed.append(v.name)
        body = substitute_stmt(s.body, {v.name: Binary("add", s.begin, v, INDEX)})
        span = Binary("sub", s.end, s.begin, INDEX)
        return For(v, _c(0), _c(trip), If(Compare("lt", v, span), body), s.kind)


def constant_tiny_loops(s, *, changed=None, only=None):
    """``s`` with its tiny moving-bound reduction loops (those named in ``only`` when
    given) over constant guarded ranges (their names appended to the list ``changed``
    when given)."""
    return run_noting(_ConstantTiny(only), s, changed)


def code_size(s):
    """How many statements are emitted for ``s`` (an unrolled loop's body once per
    iteration; a large statement counts as several, see :data:`NODES_PER_STATEMENT`)."""
    t = type(s)
    if t is For:
        inner = code_size(s.body)
        return inner * (constant_trip_count(s) or 1) if s.kind == "unrolled" else inner
    if t is Block:
        return sum(code_size(c) for c in s.stmts)
    if t is If:
        return code_size(s.then) + (0 if s.otherwise is None else code_size(s.otherwise))
    if t is Allocate or hasattr(s, "body"):
        return code_size(s.body)
    return 1 + sum(1 for _ in distinct_exprs(s)) // NODES_PER_STATEMENT


class _UnrollTiny(NotingMapper):
    def map_for(self, s):
        s = super().map_for(s)
        if not self.allowed(s.var.name):
            return s
        n = constant_trip_count(s)
        if s.kind == "serial" and n is not None and 1 < n <= TINY_TRIP \
                and n * code_size(s.body) <= UNROLLED_SIZE and (
                is_reduction_loop(s) or all(m.kind == "unrolled" for m in walk_stmts(s.body)
                                            if type(m) is For)):
            self.changed.append(s.var.name)
            return For(s.var, s.begin, s.end, s.body, "unrolled", s.step)
        return s


def unroll_tiny_reductions(s, *, changed=None, only=None):
    """``s`` with its constant tiny reduction loops, and its other tiny loops with only
    unrolled loops inside, marked ``unrolled`` (the same iterations, in order); only those
    named in ``only`` when given, their names appended to ``changed`` when given."""
    return run_noting(_UnrollTiny(only), s, changed)


# -- the stride-1 axis innermost --------------------------------------------------------


def stride_one(indices, name):
    """The last index moves by exactly 1 with the variable ``name`` (``name`` appears in
    it as ``+ name`` only, in no division or modulo, and in no other index)."""
    if not indices or any(uses_var(i, name) for i in indices[:-1]):
        return False
    aff = to_affine(indices[-1])
    if aff is None:
        return False
    plain = [c for atom, c in aff.terms if atom == name]
    inside = [atom for atom, _ in aff.terms
              if type(atom) is not str and name in {getattr(v, "name", v)
                                                    for v in atom.variables()}]
    return plain == [1] and not inside


def _accesses(s):
    out = set()
    for node in walk_stmts(s):
        if type(node) in (Store, Accumulate):
            out.add((node.buffer, node.indices))
        for e in stmt_exprs(node):
            out.update((ld.buffer, ld.indices) for ld in walk_expr(e) if type(ld) is Load)
    return out


def _score(accesses, name):
    """How well running ``name`` innermost suits ``accesses``: those moving along memory's
    stride-1 axis with it, less those it moves across rows (accesses not using it stay
    in registers and count for nothing)."""
    score = 0
    for _, idx in accesses:
        if stride_one(idx, name):
            score += 1
        elif any(uses_var(i, name) for i in idx):
            score -= 1
    return score


def _innermost_loops(s):
    return [n for n in walk_stmts(s) if type(n) is For
            and not any(type(m) is For for m in walk_stmts(n.body))]


def _worth_sinking(loop):
    """Some innermost loop of ``loop``'s body is better run along ``loop`` instead (tiny
    reductions are never worth running innermost), and none is worse."""
    better = False
    for r in _innermost_loops(loop.body):
        n = constant_trip_count(r)
        accesses = _accesses(r.body)
        mine = _score(accesses, loop.var.name)
        if n is not None and n <= TINY_TRIP:
            continue  # unrolled inside ``loop``: its window stays in registers
        if mine < _score(accesses, r.var.name):
            return False
        else:
            better |= mine > _score(accesses, r.var.name)
    return better


class _Expand(ExprMapper):
    def __init__(self, old, new, index):
        self.old, self.new, self.index = old, new, index

    def map_load(self, e, *args):
        e = super().map_load(e)
        return Load(self.new, (self.index,), e.dtype) if e.buffer == self.old else e


class _ExpandWrites(StmtMapper):
    def __init__(self, old, new, index):
        super().__init__(_Expand(old, new, index))
        self.old, self.new, self.index = old, new, index

    def map_store(self, s):
        s = super().map_store(s)
        return Store(self.new, (self.index,), s.value) if s.buffer == self.old else s

    def map_accumulate(self, s):
        s = super().map_accumulate(s)
        if s.buffer == self.old:
            return Accumulate(self.new, (self.index,), s.value, s.reducer)
        return s


def _hoist_scalars(body):
    """``body`` with the scalar locals allocated by its top-level statements allocated
    around the whole of it (local names are unique in a kernel, so the wider scope
    changes nothing)."""
    found, stmts = [], []
    for st in (body.stmts if type(body) is Block else (body,)):
        while type(st) is Allocate and st.buffer.shape == ():
            found.append(st.buffer)
            st = st.body
        stmts.append(st)
    if not found:
        return body
    out = block(stmts)
    for buf in reversed(found):
        out = Allocate(buf, out)
    return out


def _expand_scalars(loop, n):
    """``(allocations, body)``: the scalar locals allocated at the top of ``loop``'s body
    as arrays of ``n`` elements indexed by the loop variable, and the body using them."""
    body, allocations = _hoist_scalars(loop.body), []
    while type(body) is Allocate and body.buffer.shape == () and n <= EXPANSION_LIMIT:
        old = body.buffer
        new = Buffer(old.name, (n,), old.dtype, "local")
        allocations.append(new)
        body = _ExpandWrites(old, new, loop.var)(body.body)
    return allocations, body


def _sink(x, s):
    """``for x: s`` with ``x`` moved inside ``s``'s loops and blocks, where legal."""
    t = type(s)
    if t is For and s.kind == "serial" and not (uses_var(s.begin, x.var.name)
                                                 or uses_var(s.end, x.var.name)):
        return For(s.var, s.begin, s.end, _sink(x, s.body), s.kind, s.step)
    if t is Block:
        return block([_sink(x, c) for c in s.stmts])
    if t is If and not uses_var(s.cond, x.var.name):
        return If(s.cond, _sink(x, s.then),
                  None if s.otherwise is None else _sink(x, s.otherwise), s.likely)
    return For(x.var, x.begin, x.end, s, x.kind, x.step)


def _try_sink(loop):
    n = constant_trip_count(loop)
    if (n is None or n <= TINY_TRIP or loop.step != 1 or loop.kind != "serial"
            or loop.begin.value != 0
            or not any(type(m) is For for m in walk_stmts(loop.body))):
        return None
    allocations, body = _expand_scalars(loop, n)
    name = loop.var.name
    ws = writes(body)
    if not ws or not all(w.indices and type(w.indices[-1]) is Var and w.indices[-1].name == name
                         for w in ws):
        return None
    if any(type(m) is Allocate for m in walk_stmts(body)):
        return None
    candidate = For(loop.var, loop.begin, loop.end, body, loop.kind, loop.step)
    if not _worth_sinking(candidate):
        return None
    if independence_problem(body, (name,), accumulate_ok=False):
        return None
    out = _sink(candidate, body)
    for buf in reversed(allocations):
        out = Allocate(buf, out)
    return out


class _SinkStrideOne(NotingMapper):
    def map_for(self, s):
        sunk = _try_sink(s) if self.allowed(s.var.name) else None
        if sunk is None:
            return super().map_for(s)
        self.changed.append(s.var.name)
        return sunk


def sink_stride_one(s, *, moved=None, only=None):
    """``s`` with loops over the written stride-1 axis (those named in ``only`` when
    given) moved innermost (module doc); the names of the loops moved are appended to the
    list ``moved`` when given."""
    return run_noting(_SinkStrideOne(only), s, moved)
