"""Vector accumulators for reductions along the stride-1 axis of memory.

An innermost reduction loop ``for r in [b, b + n): acc op= f(r)`` that reads memory at
stride 1 in ``r`` becomes, with ``W`` lanes (the host's vector width for the dtype,
times up to ``INTERLEAVE`` vectors when ``n`` is large enough)::

    lanes[l] = identity                                  (l < W)
    for r_o in [0, n // W): for l in [0, W): lanes[l] op= f(b + r_o * W + l)
    for l in [0, E): lanes[l] op= f(b + n // W * W + l)  (E: whole vectors left, if any)
    for r in [b + n // W * W + E, b + n): acc op= f(r)   (the tail, if any)
    for h in [W / 2, .., 2]: for l in [0, h): lanes[l] op= lanes[l + h]
    acc op= lanes[0]; acc op= lanes[1]

When ``n`` is known at run time only, ``n`` is ``max(end - begin, 0)`` and ``W`` one
vector. Reduction loops around it that the accumulations do not index (a weight
gradient's sum over images and rows) run inside the lanes' life: ``lanes = identity; for
v: {main; tail}; acc op= lanes``, one combination per output.

The lanes are independent, so the inner loop runs as one vector operation. This
reassociates the reduction: allowed only here, for ``tg.sum``, ``tg.max`` and ``tg.min``
(commutative and associative, up to rounding for a float sum: the result may differ from
the sequential one within float tolerance; max and min are exact, and a NaN or infinity
in the input gives the same NaN or infinity).

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.loops.printer import format_kernel
>>> A = tg.placeholder((2, 20), name="A")
>>> k = tg.reduce_axis((0, 20), name="k")
>>> S = tg.compute((2,), lambda i: tg.max(A[i, k], axis=k), name="S")
>>> kern = lower_program([A], [S])
>>> print(format_kernel(vector_accumulators(kern, lanes_of=lambda dtype: 8)[0]))
kernel kernel(float32 A[2][20], float32 S[2]) {
  for (i = 0; i < 2; i++) {
    S[i] = -inf;
    local float32 S_lanes[8];
    for (k_l = 0; k_l < 8; k_l++) {
      S_lanes[k_l] = -inf;
    }
    for (k_o = 0; k_o < 2; k_o++) {
      vectorized for (k_l_1 = 0; k_l_1 < 8; k_l_1++) {
        S_lanes[k_l_1] max= A[i, k_o * 8 + k_l_1];
      }
    }
    for (k = 16; k < 20; k++) {
      S[i] max= A[i, k];
    }
    vectorized for (k_l_2 = 0; k_l_2 < 4; k_l_2++) {
      S_lanes[k_l_2] max= S_lanes[k_l_2 + 4];
    }
    vectorized for (k_l_2 = 0; k_l_2 < 2; k_l_2++) {
      S_lanes[k_l_2] max= S_lanes[k_l_2 + 2];
    }
    unrolled for (k_l_2 = 0; k_l_2 < 2; k_l_2++) {
      S[i] max= S_lanes[k_l_2];
    }
  }
}
"""
from __future__ import annotations

from tegrad.analysis.simplify import simplify
from tegrad.ir import dtypes
from tegrad.ir import reduction
from tegrad.ir.expr import Binary, Const, Var

from tegrad.codegen.loops.mapper import (StmtMapper, block, free_variables, loads, stmt_exprs,
                                         substitute_stmt, walk_expr, walk_stmts)
from tegrad.codegen.loops.nodes import (Accumulate, Allocate, Block, Buffer, Check, For, Kernel,
                                        Load, Store)
from tegrad.codegen.tuning import INTERLEAVE, VECTOR_STEPS_PER_ACCUMULATOR
from tegrad.codegen.schedule.common import (ScheduleError, constant_trip_count, fresh,
                                            names_in, stmt_uses_var, uses_var)
from tegrad.codegen.schedule.fusion import statements
from tegrad.codegen.schedule.loop_order import stride_one

#: the reducers whose reductions may be reassociated
REASSOCIATED = (reduction.sum, reduction.max, reduction.min)

INDEX = "int64"


def _c(v):
    return Const(int(v), INDEX)


def _candidate(loop, lanes_of):
    """The accumulations of ``loop`` and its lane count, when the rewrite applies."""
    n = constant_trip_count(loop)
    if loop.kind != "serial" or loop.step != 1:
        return None
    if any(type(m) in (For, Allocate, Check) for m in walk_stmts(loop.body)):
        return None
    accs = [m for m in walk_stmts(loop.body) if type(m) is Accumulate]
    # stores fused into the loop (an elementwise stage over the reduction's range) run
    # in the same order after the rewrite; only the accumulations move to lanes
    stored = {m.buffer for m in walk_stmts(loop.body) if type(m) is Store}
    if stored & {a.buffer for a in accs}:
        return None
    outside = free_variables(loop)  # the combination runs after the loop: no let of its body
    if not accs or any(a.reducer not in REASSOCIATED or uses_var_any(a.indices, loop.var.name)
                       or not _index_vars(a.indices) <= outside for a in accs):
        return None
    if any(not (dtypes.is_float(a.buffer.dtype) or dtypes.is_int(a.buffer.dtype))
           for a in accs):
        return None
    targets = {a.buffer for a in accs}
    read = [ld for m in walk_stmts(loop.body) for e in stmt_exprs(m) for ld in loads(e)]
    if any(ld.buffer in targets for ld in read):
        return None
    if not any(stride_one(ld.indices, loop.var.name) for ld in read):
        return None
    lanes = min(lanes_of(a.buffer.dtype) for a in accs)
    if lanes < 2 or (n is not None and n < VECTOR_STEPS_PER_ACCUMULATOR * lanes):
        return None
    if n is None:  # a trip count known at run time only: one vector
        return accs, lanes, None, lanes
    # several vectors of lanes hide the latency of each vector's combination
    vectors = min(INTERLEAVE, n // (VECTOR_STEPS_PER_ACCUMULATOR * lanes))
    return accs, lanes * vectors, n, lanes


def uses_var_any(indices, name):
    return any(uses_var(i, name) for i in indices)


def _index_vars(indices):
    return {n.name for i in indices for n in walk_expr(i) if type(n) is Var}


class _ToLanes(StmtMapper):
    def __init__(self, lanes_of_target, lane):
        super().__init__()
        self.lanes_of_target, self.lane = lanes_of_target, lane

    def map_accumulate(self, s):
        buf = self.lanes_of_target[(s.buffer, s.indices, s.reducer)]
        return Accumulate(buf, (self.lane,), s.value, s.reducer)


def _rewrite(loop, accs, lanes, n, vector, taken):
    name = loop.var.name
    targets = []
    for a in accs:
        key = (a.buffer, a.indices, a.reducer)
        if key not in [t[0] for t in targets]:
            targets.append((key, Buffer(fresh(a.buffer.name + "_lanes", taken), (lanes,),
                                        a.buffer.dtype, "local")))
    lanes_of_target = dict(targets)
    outer = Var(fresh(name + "_o", taken), INDEX)
    lane_vars = [Var(fresh(name + "_l", taken), INDEX) for _ in range(4)]
    if n is None:
        trip = simplify(Binary("max", Binary("sub", loop.end, loop.begin, INDEX), _c(0), INDEX))
        full = simplify(Binary("floordiv", trip, _c(lanes), INDEX))
    else:
        full = _c(n // lanes)
    init = For(lane_vars[0], _c(0), _c(lanes),
               block([Store(buf, (lane_vars[0],), key[2].identity(buf.dtype))
                      for key, buf in targets]))
    position = simplify(Binary("add", loop.begin,
                               Binary("add", Binary("mul", outer, _c(lanes), INDEX),
                                      lane_vars[1], INDEX), INDEX))
    body = _ToLanes(lanes_of_target, lane_vars[1])(substitute_stmt(loop.body, {name: position}))
    main = For(outer, _c(0), full, For(lane_vars[1], _c(0), _c(lanes), body, "vectorized"))
    combine = _combine_lanes(targets, lane_vars[2], lanes)
    stmts = [init, main]
    if n is None or n % lanes:
        start = simplify(Binary("add", loop.begin, Binary("mul", full, _c(lanes), INDEX), INDEX))
        # whole vectors left over by the interleaved lanes go to the first lanes
        extra = 0 if n is None else n % lanes // vector * vector
        if extra:
            at = simplify(Binary("add", start, lane_vars[3], INDEX))
            rest = substitute_stmt(loop.body, {name: at})
            stmts.append(For(lane_vars[3], _c(0), _c(extra),
                             _ToLanes(lanes_of_target, lane_vars[3])(rest), "vectorized"))
            start = simplify(Binary("add", start, _c(extra), INDEX))
        if n is None or n % vector:
            stmts.append(For(loop.var, start, loop.end, loop.body, "serial"))
    out = block(stmts + [combine])
    for _, buf in reversed(targets):
        out = Allocate(buf, out)
    return out


def _combine_lanes(targets, lane, lanes):
    """``acc op= lanes[0] op .. op lanes[W - 1]`` as a tree: halves combined lane by lane
    (``lanes[l] op= lanes[l + h]``, one vector operation each) down to two lanes, which
    go into ``acc`` in order. A fixed order, as short as the tree is deep: combined in
    order, ``W`` dependent operations ended every output (a row's max or sum)."""
    stmts, width = [], lanes
    while width > 2 and width % 2 == 0:
        width //= 2
        stmts.append(For(lane, _c(0), _c(width), block([
            Accumulate(buf, (lane,), Load(buf, (Binary("add", lane, _c(width), INDEX),)), key[2])
            for key, buf in targets]), "vectorized"))
    stmts.append(For(lane, _c(0), _c(width),
                     block([Accumulate(key[0], key[1], Load(buf, (lane,)), key[2])
                            for key, buf in targets]), "unrolled"))
    return block(stmts)


def _asked_lanes(loop, found, lanes):
    """``found`` (:func:`_candidate`'s) with ``lanes`` lanes instead of its own: whole
    vectors of the target, at most the trip count (one vector when it is known at run
    time only)."""
    accs, _, n, vector = found
    if not (isinstance(lanes, int) and not isinstance(lanes, bool) and lanes >= vector
            and lanes % vector == 0 and (lanes <= n if n is not None else lanes == vector)):
        most = "one vector" if n is None else f"a multiple of it up to the {n} iterations"
        raise ScheduleError(f"vector accumulators of loop {loop.var.name!r}: {lanes!r} lanes, "
                            f"but the target's vectors hold {vector} ({most})")
    return accs, lanes, n, vector


class _Vectorise(StmtMapper):
    def __init__(self, lanes_of, taken, only=None):
        super().__init__()
        self.lanes_of, self.taken, self.loops = lanes_of, taken, []
        # loop name -> the lanes asked for its rewritten loops, in order
        self.only = None if only is None else {k: list(v) for k, v in only.items()}

    def map_for(self, s):
        asked = None if self.only is None else self.only.get(s.var.name)
        if self.only is not None and not asked:
            return super().map_for(s)
        found = _candidate(s, self.lanes_of)
        if found is None:
            return super().map_for(s)
        if asked:
            found = _asked_lanes(s, found, asked.pop(0))
        self.loops.append((s.var.name, found[1]))
        return _rewrite(s, *found, self.taken)


def _is_halving(s, own):
    """``s`` is a step of :func:`_combine_lanes`' tree: ``lanes[l] op= lanes[l + h]``."""
    if type(s) is not For or s.kind != "vectorized":
        return False
    body = s.body.stmts if type(s.body) is Block else (s.body,)
    return all(type(m) is Accumulate and m.buffer in own and type(m.value) is Load
               and m.value.buffer is m.buffer for m in body)


def _lanes_block(s):
    """``(buffers, init, middle, combine)`` when ``s`` is the lanes of a rewritten loop
    (``_rewrite``: allocations around ``[init, *middle, *combine]``, ``combine`` the
    tree's halving steps and the last loop into the accumulations), else None."""
    buffers = []
    while type(s) is Allocate:
        buffers.append(s.buffer)
        s = s.body
    if not buffers or type(s) is not Block or len(s.stmts) < 3:
        return None
    init, *middle, last = s.stmts
    own = set(buffers)
    if type(init) is not For or type(last) is not For or last.kind != "unrolled":
        return None
    if not all(type(m) is Store and m.buffer in own for m in walk_stmts(init.body)
               if type(m) in (Store, Accumulate)):
        return None
    if not all(type(m) is Accumulate and all(ld.buffer in own for ld in loads(m.value))
               for m in walk_stmts(last.body) if type(m) in (Store, Accumulate)):
        return None
    steps = 0
    while steps < len(middle) and _is_halving(middle[len(middle) - 1 - steps], own):
        steps += 1
    if steps == len(middle):
        return None
    cut = len(middle) - steps
    return buffers, init, middle[:cut], middle[cut:] + [last]


class _HoistLanes(StmtMapper):
    """Lanes live across the reduction loops around their loop: ``for v: {init; main;
    combine}`` becomes ``init; for v: main; combine`` where neither ``init`` nor
    ``combine`` uses ``v`` (``v`` a further reduction of the same accumulations, whose
    partial sums then stay in the lanes: one combination per output instead of one per
    iteration of ``v``; a reassociation, as in the lanes themselves)."""

    def map_for(self, s):
        s = super().map_for(s)
        found = _lanes_block(s.body) if s.kind in ("serial", "unrolled") else None
        if found is None:
            return s
        buffers, init, middle, combine = found
        name = s.var.name
        if stmt_uses_var(init, name) or any(stmt_uses_var(c, name) for c in combine):
            return s
        out = block([init, For(s.var, s.begin, s.end, block(middle), s.kind, s.step),
                     *combine])
        for buf in reversed(buffers):
            out = Allocate(buf, out)
        return out


def statement_accumulators(s, *, taken, lanes_of, only=None):
    """``(statement, loops)``: :func:`vector_accumulators` on one statement; ``taken`` holds
    the names in use (new ones are added to it); ``loops`` lists ``(loop, lanes)``.
    ``only``: the loops to rewrite, each name to the lanes of its loops of that name in
    order (a ScheduleError if the target cannot have them), when given."""
    mapper = _Vectorise(lanes_of, taken, only)
    out = mapper(s)
    if mapper.loops:
        out = _HoistLanes()(out)
    return out, tuple(mapper.loops)


def vector_accumulators(kernel, *, lanes_of):
    """``(kernel, loops)``: ``kernel`` with its stride-1 innermost reductions accumulated
    in vector lanes (module doc), and ``(loop, lanes)`` for each loop rewritten."""
    taken, loops, new = names_in(kernel), [], []
    for s in statements(kernel.body):
        s, found = statement_accumulators(s, taken=taken, lanes_of=lanes_of)
        new.append(s)
        loops.extend(found)
    return Kernel(kernel.name, kernel.args, kernel.temps, block(new)), tuple(loops)
