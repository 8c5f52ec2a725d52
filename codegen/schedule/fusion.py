"""Producer-consumer loop fusion: consecutive loop nests over the same range run as one.

Two loops ``for a in R: A`` and ``for b in R: B`` (same bounds and step) become
``for a in R: A; B[b := a]`` when every buffer one of them writes and the other touches
is accessed, in both, at index exactly ``a`` (``b``) in one common dimension: iteration
``v`` of ``B`` then touches only the elements iteration ``v`` of ``A`` touches, so running
``B(v)`` right after ``A(v)`` instead of after all of ``A`` reads and writes the same
values. A statement is moved up to the loop it fuses with only past statements it shares
no written buffer with; loops that both check indices at run time are not fused (the
first failing check stays the same). An initialisation standing in the way (an
accumulator's zero fill between the loop computing the first values it accumulates and
the accumulation) moves up just before the loop when it shares no written buffer with
the loop nor with the statements it moves past: statements that commute run in either
order with the same results. Fusion recurses into the fused body (a row max, a row sum
and an elementwise output over the same rows end up in one loop over rows).

At the top level, where a temporary holds its storage from the first statement using
it to the last, a loop joins only a loop touching a buffer it touches (fused, they share
the loads or stores of it). The bias and gain gradients of a transformer block, column
sums each over another tensor, fused into one loop over columns, ran at the end of the
backward pass, strided over rows, holding all those tensors until then: 1.05 ms of its
12 ms step (benchmarks/models.py, profiled); apart, each sum runs as soon as its tensor
is ready, rows outer and columns in vectors, about 0.36 ms in all. And a loop does not
move up to join a loop it reads nothing from (a sibling) when it is the first to use a
temporary of :data:`SHARED_MIN_BYTES` or more and other statements stay between the
two: fused, it would hold that temporary across them for no reuse (the zero fill of a
recurrent network's input-projection gradient, fused with the forward bias add, held
0.75 MB through the whole forward pass).

>>> import tegrad as tg
>>> from tegrad.codegen.lower.program import lower_program
>>> from tegrad.codegen.loops.printer import format_kernel
>>> A = tg.placeholder((4, 3), dtype="float64", name="A")
>>> k = tg.reduce_axis((0, 3), name="k")
>>> S = tg.compute((4,), lambda i: tg.sum(A[i, k], axis=k), name="S")
>>> B = tg.compute((4, 3), lambda i, j: A[i, j] / S[i], name="B")
>>> kernel, fused, _ = fuse_stages(lower_program([A], [B]))
>>> print(format_kernel(kernel))
kernel kernel(float64 A[4][3], float64 B[4][3]) {
  temp float64 S[4];
  for (i = 0; i < 4; i++) {
    S[i] = 0.0;
    for (k = 0; k < 3; k++) {
      S[i] += A[i, k];
    }
    for (j = 0; j < 3; j++) {
      B[i, j] = A[i, j] / S[i];
    }
  }
}
>>> fused
(('S', 'B'),)
"""
from __future__ import annotations

from tegrad.ir.expr import Var, structural_equal

from tegrad.codegen.loops.mapper import (block, bound_names, loads, stmt_exprs,
                                         substitute_stmt, to_affine, walk_stmts)
from tegrad.codegen.loops.nodes import (Accumulate, Allocate, Block, Check, For, Kernel, Let,
                                        MatrixProduct, Store)
from tegrad.codegen.lower.memory_order import buffer_bytes
from tegrad.codegen.tuning import FUSION_WINDOW, SHARED_MIN_BYTES


def statements(s):
    """The statements of ``s`` as a list (a block's, or ``s`` alone)."""
    return list(s.stmts) if type(s) is Block else [s]


def _accesses(s):
    """``(buffer, indices, is_write)`` of every load, store and accumulation in ``s``
    (buffers allocated inside ``s`` left out)."""
    local = {n.buffer for n in walk_stmts(s) if type(n) is Allocate}
    out = []
    for node in walk_stmts(s):
        if type(node) in (Store, Accumulate) and node.buffer not in local:
            out.append((node.buffer, node.indices, True))
        elif type(node) is MatrixProduct:  # whole buffers: indices None
            out += [(node.c, None, True)] + [(b, None, False) for b in node.reads]
        for e in stmt_exprs(node):
            out.extend((ld.buffer, ld.indices, False) for ld in loads(e)
                       if ld.buffer not in local)
    return out


def _has_check(s):
    return any(type(n) is Check for n in walk_stmts(s))


def _pinned_dims(indices, names):
    return {d for d, i in enumerate(indices or ()) if type(i) is Var and i.name in names}


class _Summary:
    """What a run of statements reads and writes, and whether it checks indices."""

    __slots__ = ("reads", "written", "check")

    def __init__(self, accesses=(), check=False):
        self.reads = {b for b, _, w in accesses if not w}
        self.written = {b for b, _, w in accesses if w}
        self.check = check

    def add(self, other):
        self.reads |= other.reads
        self.written |= other.written
        self.check = self.check or other.check

    def commutes_with(self, other):
        """Neither writes what the other touches, and at most one checks indices (so
        the two may swap: the first failing check stays the same)."""
        return (self.written.isdisjoint(other.reads) and self.written.isdisjoint(other.written)
                and self.reads.isdisjoint(other.written) and not (self.check and other.check))


def _pinned_and_written(accesses, names):
    """``(pinned, written)``: per buffer of ``accesses``, the dimensions where every
    access indexes at exactly the loop variable (named one of ``names``); and the
    buffers written."""
    pinned, written = {}, set()
    for buf, indices, w in accesses:
        dims = _pinned_dims(indices, names)
        pinned[buf] = dims & pinned[buf] if buf in pinned else dims
        if w:
            written.add(buf)
    return pinned, written


class _LoopFacts:
    """What fusion asks of a loop's body, found once however many loops it is tried
    with: its accesses, the names its loops and lets bind, whether it checks indices."""

    __slots__ = ("accesses", "binders", "check")

    def __init__(self, loop):
        self.accesses = _accesses(loop.body)
        self.binders = bound_names(loop.body)[0]
        self.check = _has_check(loop.body)


class _FusedLoop:
    """A loop growing by fusion: the first loop's header over the bodies fused so far,
    with, per buffer they touch, the dimensions every access indexes at exactly the
    loop variable (kept up to date, so testing a candidate costs the candidate's size)."""

    def __init__(self, loop, facts):
        self.loop, self.bodies = loop, [loop.body]
        self.name = loop.var.name
        self.check = facts.check
        self.rebinds = self.name in facts.binders
        self.pinned, self.written = _pinned_and_written(facts.accesses, {self.name})

    def fused_body(self, b, facts):
        """What :meth:`add` takes to run ``b`` (a loop whose :class:`_LoopFacts` are
        ``facts``) fused into this loop (see the module doc): ``b``, whether it checks
        indices, and its accesses pinned at this loop's variable; None when it may not.
        (The facts of ``b``'s body over its own variable are those of the body over this
        loop's once it is renamed: the renaming binds nothing, and an access at either
        name is at this loop's variable after it.)"""
        a = self.loop
        if self.rebinds or not _same_range(a, b):
            return None
        if self.check and facts.check:
            return None  # the first check to fail, and the error, would change
        if self.name in facts.binders:
            return None
        pinned, written = _pinned_and_written(facts.accesses, {self.name, b.var.name})
        for buf in pinned.keys() & self.pinned.keys() & (written | self.written):
            if not pinned[buf] & self.pinned[buf]:
                return None
        return b, facts.check, pinned, written

    def body_of(self, b):
        """``b``'s body over this loop's variable."""
        return b.body if b.var.name == self.name else \
            substitute_stmt(b.body, {b.var.name: self.loop.var})

    def add(self, b, check, pinned, written):
        self.bodies.append(self.body_of(b))
        self.check = self.check or check
        for buf, dims in pinned.items():
            self.pinned[buf] = dims & self.pinned[buf] if buf in self.pinned else dims
        self.written |= written

    def result(self):
        if len(self.bodies) == 1:
            return self.loop
        a = self.loop
        # the fused bodies may fuse in turn (row statistics over the same columns)
        return For(a.var, a.begin, a.end, fuse_list_body(block(self.bodies)), a.kind, a.step)


def _same(a, b):
    return a is b or (hash(a) == hash(b) and structural_equal(a, b))


def fuse_list_body(body):
    stmts, _ = fuse_list(statements(body))
    return block(stmts)


def _first_users(summaries, temps):
    """``starts[k]``: the buffers of ``temps`` that statement ``k`` is the first of
    ``summaries`` (in order) to touch."""
    seen, starts = set(), []
    for s in summaries:
        touched = (s.reads | s.written) & temps
        starts.append(touched - seen)
        seen |= touched
    return starts


def fuse_list(stmts, keep=frozenset(), allowed=None, temps=frozenset(), top_level=False):
    """``(statements, groups)``: ``stmts`` with each loop fused with the later loops it can
    be (see the module doc), among the next :data:`FUSION_WINDOW`; ``groups`` lists the
    indices of the statements merged into each result statement. Statements whose index
    is in ``keep`` are left alone; with ``allowed`` (index -> indices), a statement takes
    only the statements it maps to. ``temps``: the buffers whose storage is held from
    the first statement of ``stmts`` touching them to the last (a kernel's temporaries);
    a loop that is the first to touch one of them and reads nothing the loop it would
    join writes is not moved up past statements that stay between the two. With
    ``top_level`` (a kernel's top-level statements, no ``allowed`` given), a loop joins
    only a loop touching a buffer it touches."""
    summaries = [_Summary(_accesses(s), _has_check(s)) for s in stmts]
    starts = _first_users(summaries, temps) if temps else [frozenset()] * len(stmts)

    facts = {}  # index -> the _LoopFacts of a loop, once asked for

    def facts_of(k):
        if k not in facts:
            facts[k] = _LoopFacts(stmts[k])
        return facts[k]

    out, groups = [], []
    taken = [False] * len(stmts)
    for i, s in enumerate(stmts):
        if taken[i]:
            continue
        group, hoisted = [i], []
        if i not in keep and type(s) is For:
            loop, done = _FusedLoop(s, facts_of(i)), _Summary()
            done.add(summaries[i])
            # invariant: ``stay`` lists the statements after ``i`` and before ``j`` that
            # stay where they are (``between`` summarises them); a candidate moves up
            # past exactly those
            stay, between = [], _Summary()
            for j in range(i + 1, min(len(stmts), i + 1 + FUSION_WINDOW)):
                if taken[j]:
                    continue
                fused, lift = None, ()
                if j not in keep and (allowed is None or j in allowed.get(i, ())):
                    fused, lift = _joins(loop, done, stmts, summaries, starts, keep, stay,
                                         between, j, facts_of, top_level=top_level)
                if fused is None:
                    stay.append(j)
                    between.add(summaries[j])
                    continue
                loop.add(*fused)
                done.add(summaries[j])
                taken[j] = True
                group.append(j)
                if lift:
                    for k in lift:
                        taken[k] = True
                    hoisted += lift
                    stay = [k for k in stay if k not in lift]
                    between = _Summary()
                    for k in stay:
                        between.add(summaries[k])
            s = loop.result()
        for k in hoisted:  # each alone, in its order, just before the loop it let fuse
            out.append(stmts[k])
            groups.append([k])
        out.append(s)
        groups.append(group)
    return out, groups


def _joins(loop, done, stmts, summaries, starts, keep, stay, between, j, facts_of, *,
           top_level):
    """``(fused, lift)``: whether statement ``j`` joins ``loop`` (the loop's
    :meth:`_FusedLoop.fused_body` of it, or None) and the statements of ``stay`` that
    move up before the loop to let it, when some stand in its way. ``done``
    summarises the loop's statements so far; ``between``, those of ``stay``;
    ``facts_of(k)``, the :class:`_LoopFacts` of loop ``k``; ``top_level``: the
    statements are a kernel's top-level ones (where temporaries hold storage), and
    ``j`` joins only when it touches a buffer the loop touches.

    A statement of ``stay`` that ``j`` may not move past moves up before the loop when
    it is an initialisation (reads no buffer: an accumulator's zero fill, standing
    between the loop computing the first values it accumulates and that accumulation),
    commutes with the loop and with the statements of ``stay`` before it that stay, is
    not in ``keep``, and every temporary it is the first to touch is one ``j`` touches
    (so in use at the loop anyway once ``j`` joins it); and only when each iteration of
    ``j`` writes elements of its own (at the loop's variable, or it plus a constant: a
    sum carried across iterations, or a window's overlapping updates, would keep the
    fused loop from running in parallel or in vectors). (Moving a statement that reads
    up past a loop could keep it from reading a value the loop stores instead of
    computing it again.)"""
    if type(stmts[j]) is not For:
        return None, ()
    cand = summaries[j]
    if top_level and cand.reads and \
            (cand.reads | cand.written).isdisjoint(done.reads | done.written):
        return None, ()  # it touches nothing the loop touches: fused, no reuse
    if starts[j] and stay and cand.reads.isdisjoint(loop.written):
        return None, ()  # it would start its temporary earlier, past ``stay``, for no reuse
    if cand.commutes_with(between):
        return loop.fused_body(stmts[j], facts_of(j)), ()
    # (the cheap tests first, a model's backward holding hundreds of candidates: some
    # initialisation must stand in the way before every statement in the way is checked
    # and the body is fused)
    if all(summaries[k].reads for k in stay) or not _same_range(loop.loop, stmts[j]):
        return None, ()
    touched = cand.reads | cand.written
    lift, kept = [], _Summary()
    for k in stay:
        s = summaries[k]
        if cand.commutes_with(s):
            kept.add(s)
        elif k not in keep and not s.reads and starts[k] <= touched \
                and s.commutes_with(done) and s.commutes_with(kept):
            lift.append(k)
        else:
            return None, ()
    fused = loop.fused_body(stmts[j], facts_of(j))
    if fused is None or not _writes_vary(stmts[j].body, {loop.name, stmts[j].var.name}):
        return None, ()
    return fused, tuple(lift)


def _writes_vary(body, names):
    """Every element ``body`` writes (outside its own buffers) is at an index that is
    the loop variable (named one of ``names``) or it plus a constant: each iteration
    writes elements of its own."""
    local = {n.buffer for n in walk_stmts(body) if type(n) is Allocate}
    for n in walk_stmts(body):
        if type(n) is MatrixProduct:
            return False
        if type(n) in (Store, Accumulate) and n.buffer not in local and \
                not any(_is_shifted(i, names) for i in n.indices):
            return False
    return True


def _is_shifted(e, names):
    """``e`` is a variable named one of ``names``, or it plus (or minus) a constant."""
    form = to_affine(e)
    return form is not None and len(form.terms) == 1 and form.terms[0][1] == 1 \
        and form.terms[0][0] in names


def _same_range(a, b):
    """``b`` is a loop of ``a``'s kind over ``a``'s range (so it may fuse with it)."""
    return type(b) is For and a.kind == b.kind and a.step == b.step and \
        _same(a.begin, b.begin) and _same(a.end, b.end)


def fusion_parts(kernel):
    """The statements fusion takes: a stage lowered as several loops (fill, then
    accumulate) fuses loop by loop."""
    return [part for s in statements(kernel.body) for part in statements(s)]


def fuse_stages(kernel, *, keep=(), allowed=None):
    """``(kernel, fused, groups)``: the top-level loop nests of ``kernel`` fused where legal
    (see the module doc); ``fused`` names, per merged statement, the stages (written
    buffers) it computes, for those merging two or more; ``groups``, the indices among
    :func:`fusion_parts` of those statements. Stages named in ``keep`` are not fused;
    ``allowed`` (index -> indices), when given, the only statements each may take (and
    may take although that holds a temporary longer: a schedule asked for it)."""
    stmts = fusion_parts(kernel)
    names = [stage_names(s) for s in stmts]
    keep_idx = frozenset(k for k, n in enumerate(names) if set(n) & set(keep))
    # a temporary under SHARED_MIN_BYTES has storage of its own whatever its live range
    temps = frozenset(b for b in kernel.temps if buffer_bytes(b) >= SHARED_MIN_BYTES) \
        if allowed is None else frozenset()
    new, groups = fuse_list(stmts, keep_idx, allowed, temps, top_level=allowed is None)
    merged = [g for g in groups if len(g) > 1]
    fused = tuple(tuple(n for k in g for n in names[k]) for g in merged)
    return Kernel(kernel.name, kernel.args, kernel.temps, block(new)), fused, tuple(
        tuple(g) for g in merged)


def stage_names(s):
    """The names of the non-local buffers ``s`` writes, in order of first write (and of
    the stages whose values it holds in variables instead)."""
    nodes = list(walk_stmts(s))
    local = {n.buffer for n in nodes if type(n) is Allocate}
    out = {}
    for n in nodes:
        t = type(n)
        if (t is Store or t is Accumulate) and n.buffer not in local:
            out.setdefault(n.stage or n.buffer.name)
        elif t is MatrixProduct:
            out.setdefault(n.stage or n.c.name)
        elif t is Let and n.stage:  # a stage's values held in a variable
            out.setdefault(n.stage)
    return tuple(out)
