"""Cheap temporaries computed again where they are read late, instead of kept alive
between.

A convolution with padding reads a zero-padded copy of its input (``x_padded``): the
forward product reads it, and so does the weight gradient at the end of the backward
pass, so the copy stays in the workspace for the whole step although its source (``x``)
is there too. Likewise a GELU's output is read by the next product and again by that
product's weight gradient, while the GELU's input stays alive for the GELU's derivative.
:func:`rematerialise` writes such a temporary a second time, into a buffer of its own
(``x_padded_again``, ``gelu_again``), right before a later group of its readers, which
then read the new buffer: the first buffer dies after its early readers, the second
lives only from the new statement to its last reader.

A temporary ``t`` qualifies when

- one top-level statement ``W`` writes it, with stores only (no accumulation, no matrix
  product), and every store of ``t`` is cheap: its value is elementwise arithmetic (of
  at most :data:`~tegrad.codegen.tuning.REMATERIALISED_NODES` nodes: arithmetic,
  comparisons, selects, casts, intrinsic calls) of loads, constants and loop variables
  (a load's indices may load too: an embedding's gather); the stores' indices,
  conditions and loop bounds are integer arithmetic on loop variables. The new
  statement is ``W`` pruned to the loops and conditions around the stores of ``t``
  (their variables renamed; without ``W``'s checks of gathered indices, which passed on
  the same data before the new statement runs), so it costs what ``W``'s stores of
  ``t`` cost;
- the sources (the buffers those stores load) are arguments or temporaries other than
  ``t``, none written by a statement between ``W`` and the new statement, and no input
  among them read, in ``W`` or between, by a statement writing an output of its shape
  and dtype (an update, which may be written in place over the input, :mod:`.in_place`,
  and no longer could with the input read after it); a source that ``W`` writes too is
  written there by stores only, and either by no other top-level statement, or by
  earlier ones and by one store of ``W`` that precedes every load of it in the stores of
  ``t``, in the same block or one around it, at the same indices (a bias added in place
  to a product's output, then read by the activation fused behind it).

Identity preserved: the new statement computes the same elements as ``W`` computed into
``t``, because its stores are ``W``'s (same indices, conditions and values) and every
source holds, where it runs, the values ``W``'s stores read: a source written before
``W`` is not written again until then, and a source ``W`` writes holds, once ``W`` has
run, the values of its tensor, which are what ``W``'s own later stages read (lowering and
scheduling put every write of a stage's element before any read of it, and a source only
stored to holds no partial sum); one written before ``W`` too holds, once ``W`` has run,
what ``W``'s one store of it wrote, which is what each load of it after that store, at
its indices, read. Readers of the new buffer therefore read what they read of ``t``.

A copy reads, instead of a source no statement uses from its place on, a copy of that
source made before (an embedding's copy, read by its layer norm's copy): written
earlier, or moved up to run right before it (its own sources unchanged in between), so
that the source need not live on for it. A copy is made, one at a time (the one whose
peak is lowest, ties to the earliest statement), only where it lowers the peak bytes of
temporaries alive together (each
alive from the first top-level statement that uses it to the last, as
:func:`~tegrad.codegen.llvm.kernel_buffers.live_ranges` has it, and a temporary written
in place over another counted as that one's memory, as the storage plan places it:
:func:`planned_peak`); the new buffer may be copied again. Once copies are made, the
statements are ordered again (:func:`~.memory_order.memory_order`, by
:func:`planned_peak`), each copy no earlier than it was placed: a statement freeing
memory may now better run before a copy. Nothing is chosen that the kernel does not
determine, so a replayed schedule makes the same copies (like :mod:`.memory_order`, the
pass records no step; ``f.schedule`` lists each copy as a stage of its own,
``stage x_padded_again``).

Measured on the ResNet block of ``benchmarks/models.py`` (training step, 1 thread): the
workspace goes from 10.05 to 7.52 MB (``x_padded`` and ``relu_padded``, 1.27 MB each,
no longer alive across the backward pass), the two copies take 0.94 ms of a 149 ms
profiled step (0.7%); LeNet's workspace goes from 6.06 to 5.81 MB. On the transformer
block's step, the GELU's output, the embedding's and two layer norms' outputs are
computed again: the workspace goes from 5.72 to 4.29 MB.

>>> from tegrad.ir.expr import Const, Var, select
>>> from tegrad.codegen.loops.nodes import Block, Buffer, For, Kernel, Load, Store
>>> from tegrad.codegen.loops.printer import format_stmt
>>> i, zero = Var("i", "int64"), Const(0, "int64")
>>> x = Buffer("x", (1000,), "float32", "input")
>>> out = Buffer("out", (1,), "float32", "output")
>>> p, a, b = (Buffer(n, (1000,), "float32") for n in ("p", "a", "b"))
>>> loop = lambda dst, value: For(i, zero, Const(1000, "int64"), Store(dst, (i,), value))
>>> body = Block((loop(p, select(i < 500, Load(x, (i,)), 0.0)),
...               loop(a, Load(p, (i,)) * 2.0), loop(b, Load(a, (999 - i,)) + 1.0),
...               Store(out, (zero,), Load(b, (zero,)) + Load(p, (zero,)))))
>>> k = rematerialise(Kernel("k", (x, out), (p, a, b), body))
>>> [t.name for t in k.temps]
['p', 'a', 'b', 'p_again']
>>> print(format_stmt(k.body.stmts[3]))
for (i_1 = 0; i_1 < 1000; i_1++) {
  p_again[i_1] = i_1 < 500 ? x[i_1] : 0.0;
}
"""
from __future__ import annotations

from tegrad.ir.expr import (And, Binary, Call, Cast, Compare, Const, Neg, Not, Or,
                            Select, Var, logical_not, structural_equal)
from tegrad.ir.mapper import fresh_name

from tegrad.codegen.loops import nodes as _n
from tegrad.codegen.loops.mapper import (buffers_of, loads, names_in, stmt_exprs,
                                         substitute_expr, walk_expr, walk_stmts)
from tegrad.codegen.lower.in_place import rename_buffer, stored_and_updated, written_buffers
from tegrad.codegen.llvm.kernel_buffers import in_place_temporaries, remembered
from tegrad.codegen.lower.memory_order import buffer_bytes, live_bytes, memory_order
from tegrad.codegen.tuning import REMATERIALISED_NODES

#: the expression nodes a cheap stored value may hold: arithmetic, comparisons, choices,
#: casts and intrinsic calls (``erf``, ``sqrt``, ...) of loads (at indices that may load:
#: a gather), constants and loop variables; no reduction
_ELEMENTWISE = (_n.Load, Const, Var, Binary, Neg, Compare, And, Or, Not, Select, Cast, Call)


class _NotCheap(Exception):
    """The statement's writes of the temporary are not a cheap copy."""


def _cheap_value(e):
    """Whether ``e`` is a cheap stored value (see the module docstring): at most
    :data:`~tegrad.codegen.tuning.REMATERIALISED_NODES` nodes, elementwise (its indices
    may load: a gather)."""
    for count, node in enumerate(walk_expr(e)):
        if count == REMATERIALISED_NODES or type(node) not in _ELEMENTWISE:
            return False  # (a deep expression is not walked to its end)
    return True


def _no_loads(*exprs):
    """Whether ``exprs`` hold no load and only integer or boolean values (the index
    arithmetic of loop variables and constants)."""
    return all(type(n) is not _n.Load and not n.dtype.startswith("float")
               for e in exprs for n in walk_expr(e))


class _Copy:
    """The statement writing ``t`` again into ``again``, cut out of a top-level
    statement: its loops (variables renamed to names not in ``taken``), conditions and
    stores of ``t``; :meth:`of` raises :class:`_NotCheap` when that is not a cheap copy."""

    def __init__(self, t, again, taken):
        self.t, self.again, self.taken = t, again, taken
        # the stores (buffer, indices) before the one being cut out, in its block and
        # the blocks around it, and the buffers its values load elsewhere than there
        self.before, self.plain_reads = [], set()

    def of(self, s, names=None):
        """The part of ``s`` writing ``t``, as ``again`` (None if none), its variables
        ``names`` (old name -> new variable) renamed."""
        names = {} if names is None else names
        method = getattr(self, "_" + type(s).__name__.lower(), None)
        if method is None:
            raise _NotCheap(type(s).__name__)
        return method(s, names)

    def _expr(self, e, names):
        return substitute_expr(e, names) if names else e

    def _store(self, s, names):
        if s.buffer != self.t:
            return None
        if not (_no_loads(*s.indices) and _cheap_value(s.value)):
            raise _NotCheap("value")
        for ld in loads(s.value):
            if not any(b == ld.buffer and len(ix) == len(ld.indices) and
                       all(map(structural_equal, ix, ld.indices)) for b, ix in self.before):
                self.plain_reads.add(ld.buffer)
        return _n.Store(self.again, tuple(self._expr(i, names) for i in s.indices),
                        self._expr(s.value, names))

    def _accumulate(self, s, names):
        if s.buffer == self.t:
            raise _NotCheap("accumulation")
        return None

    def _matrixproduct(self, s, names):
        if s.c == self.t:
            raise _NotCheap("product")
        return None

    def _check(self, s, names):
        # a check guards an index read from data; the stores of t have none
        return None

    def _block(self, s, names):
        depth, kept = len(self.before), []
        for c in s.stmts:
            cut = self.of(c, names)
            if cut is not None:
                kept.append(cut)
            if type(c) is _n.Store:
                self.before.append((c.buffer, c.indices))
        del self.before[depth:]
        return None if not kept else kept[0] if len(kept) == 1 else _n.Block(tuple(kept))

    def _for(self, s, names):
        var = Var(fresh_name(s.var.name, self.taken), s.var.dtype)
        self.taken.add(var.name)
        body = self.of(s.body, {**names, s.var.name: var})
        if body is None:
            return None
        if not _no_loads(s.begin, s.end):
            raise _NotCheap("bounds")
        return _n.For(var, self._expr(s.begin, names), self._expr(s.end, names), body,
                      s.kind, s.step)

    def _if(self, s, names):
        then = self.of(s.then, names)
        otherwise = None if s.otherwise is None else self.of(s.otherwise, names)
        if then is None and otherwise is None:
            return None
        if not _no_loads(s.cond):
            raise _NotCheap("condition")
        cond = self._expr(s.cond, names)
        if then is None:
            return _n.If(logical_not(cond), otherwise)
        return _n.If(cond, then, otherwise, s.likely)

    def _let(self, s, names):
        body = self.of(s.body, names)
        if body is not None and any(type(n) is Var and n.name == s.var.name
                                    for x in walk_stmts(body) for e in stmt_exprs(x)
                                    for n in walk_expr(e)):
            raise _NotCheap("let")  # a store of t uses a value computed in s
        return body

    def _allocate(self, s, names):
        body = self.of(s.body, names)
        if body is not None and s.buffer in buffers_of(body)[0]:
            raise _NotCheap("local")
        return body


def _sources(copy):
    return {ld.buffer for node in walk_stmts(copy) for e in stmt_exprs(node)
            for ld in loads(e)}


def _stores_of(stmt, buffer):
    return sum(1 for node in walk_stmts(stmt) if type(node) is _n.Store
               and node.buffer == buffer)


def _holds_what_was_read(s, w, stmts, writes, writers, plain_reads):
    """Whether the source ``s``, which the statement ``stmts[w]`` writes, holds once
    ``w`` has run the values ``w``'s stores of the copied temporary read: ``w`` alone
    writes it, by stores only; or, written before ``w`` too, ``w`` stores it once and
    each load of it in the copied stores follows that store in its block (or a block
    around it), at the same indices, so it reads the value stored there."""
    if s in writes[w][1]:
        return False
    if writers[s] == [w]:
        return True
    return max(writers[s]) == w and s not in plain_reads and \
        _stores_of(stmts[w], s) == 1


def _cut(t, stmt):
    """``(sources, plain reads)`` of the copy of ``t`` cut out of ``stmt`` (see
    :class:`_Copy`), or None when ``stmt`` writes no cheap copy of ``t``."""
    copier = _Copy(t, t, set())
    try:
        copy = copier.of(stmt)
    except _NotCheap:
        return None
    return None if copy is None else (_sources(copy), frozenset(copier.plain_reads))


def _candidates(kernel, stmts, writes, used, taken, peaks, seen):
    """``(t, w, copy, again, sources)`` for each temporary written by one top-level
    statement ``w`` as a cheap copy (``copy()`` makes that statement's part writing it,
    into the new buffer ``again``) and used after the statement following ``w`` (a copy
    right after ``w`` would only add a buffer), with two consecutive uses around the
    statements ``peaks`` (first, last) where the live bytes peak (a copy frees ``t``
    between two uses only: elsewhere the peak stays)."""
    writers = {}
    for k, (stored, other) in enumerate(writes):
        for b in stored | other:
            writers.setdefault(b, []).append(k)
    readable = set(kernel.temps) | set(kernel.args)
    for t in kernel.temps:
        if len(writers.get(t, ())) != 1:
            continue
        w = writers[t][0]
        if not any(t.name in u for u in used[w + 2:]):
            continue
        uses = [w] + [k for k in range(w + 1, len(stmts)) if t.name in used[k]]
        if not any(a < peaks[0] and peaks[1] < b for a, b in zip(uses, uses[1:])):
            continue
        cut = remembered(seen, "cut", stmts[w], lambda: _cut(t, stmts[w]), t)
        if cut is None:
            continue
        sources, plain_reads = cut
        if t in sources or not sources <= readable:
            continue
        if not all(_holds_what_was_read(s, w, stmts, writes, writers, plain_reads)
                   for s in sources if s in writes[w][0]):
            continue
        again = _n.Buffer(fresh_name(f"{t.name}_again", taken), t.shape, t.dtype, t.scope)
        yield t, w, (lambda t=t, w=w, again=again:
                     _Copy(t, again, set(taken) | {again.name}).of(stmts[w])), \
            again, sources


def _changed(kernel, writes, uses):
    """``changed[k]``: the buffers statement ``k`` writes, and the inputs it reads
    (``uses[k]``: the buffers it uses) and writes the next value of (an output of the
    input's shape and dtype: an update, which may be written in place over the input,
    :mod:`.in_place`; a copy reading the input after it would keep that from happening)."""
    outputs = [b for b in kernel.args if b.scope == "output"]
    twins = {o: [i for i in kernel.args if i.scope == "input"
                 and (i.shape, i.dtype) == (o.shape, o.dtype)] for o in outputs}
    changed = []
    for (stored, other), used in zip(writes, uses):
        written = stored | other
        changed.append(written | {i for o in written & twins.keys() for i in twins[o]
                                  if i in used})
    return changed


def _accesses(stmt, seen):
    """``(stored_and_updated(stmt), the buffers stmt uses)``, remembered in ``seen`` (see
    :func:`~tegrad.codegen.llvm.kernel_buffers.remembered`: the statements a copy leaves
    as they were are looked at again)."""
    return remembered(seen, "accesses", stmt, lambda: (
        stored_and_updated(stmt),
        set(remembered(seen, "buffers", stmt, lambda: buffers_of(stmt))[0])))


def planned_peak(kernel, memo=None):
    """The most bytes of ``kernel``'s temporaries alive together at one top-level
    statement, a temporary written in place over another counted as that one's memory
    (as :func:`~tegrad.codegen.llvm.kernel_buffers.plan_storage` places them).
    ``memo``: see :func:`~tegrad.codegen.llvm.kernel_buffers.remembered`."""
    nbytes = {b.name: buffer_bytes(b) for b in kernel.temps}
    stmts = kernel.body.stmts if type(kernel.body) is _n.Block else (kernel.body,)
    used = [{b.name for b in remembered(memo, "buffers", s, lambda: buffers_of(s))[0]}
            & nbytes.keys() for s in stmts]
    over = {new.name: old.name for new, old in
            in_place_temporaries(kernel.body, list(kernel.temps), memo=memo).items()}
    return _planned_peak(used, nbytes, over)


def _planned_peak(used, nbytes, over):
    return max(_live_bytes(used, nbytes, over), default=0)


def _live_bytes(used, nbytes, over):
    """Per top-level statement (``used[k]``: the temporaries statement ``k`` uses), the
    bytes of temporaries alive there, each alive from its first user to its last and
    each written in place over another (``over``: new -> old, as the storage plan's
    :func:`~tegrad.codegen.llvm.kernel_buffers.in_place_temporaries` finds them) counted
    as the memory of the first of its chain."""
    def first(name):
        while name in over:
            name = over[name]
        return name
    return live_bytes(range(len(used)), [{first(b) for b in u} for u in used], nbytes)


def _best_copy(kernel, seen, copies):
    """``(peak, kernel', t, again)``: of the kernels with one more copy (see the module
    docstring), of ``t`` into ``again``, the one of lowest :func:`planned_peak`, or None
    when none is below
    ``kernel``'s (``seen``: see :func:`_accesses`; ``copies``: each copy made so far, by
    name, -> the temporary it copies). The peaks are estimated with ``kernel``'s writes
    in place, the temporary written over the copied one at its last reader written over
    the copy instead; each estimate below ``kernel``'s peak is checked, lowest first, on
    the kernel it makes."""
    stmts = list(kernel.body.stmts)
    writes, uses = zip(*(_accesses(s, seen) for s in stmts))
    nbytes = {b.name: buffer_bytes(b) for b in kernel.temps}
    used = [{b.name for b in u} & nbytes.keys() for u in uses]
    changed = _changed(kernel, writes, uses)
    over = {new.name: old.name for new, old in
            in_place_temporaries(kernel.body, list(kernel.temps), memo=seen).items()}
    live = _live_bytes(used, nbytes, over)
    now = max(live, default=0)
    at_peak = [k for k, v in enumerate(live) if v == now]
    peaks = (at_peak[0], at_peak[-1]) if at_peak else (0, 0)
    last_use = {b: k for k, u in enumerate(used) for b in u}
    written_at = {b: k for k, (stored, _) in enumerate(writes) for b in stored
                  if b.name in copies}
    copy_of = {copies[a.name].name: a for a in written_at}
    found = []
    for t, w, copy, again, sources in _candidates(kernel, stmts, writes, used,
                                                  names_in(kernel), peaks, seen):
        readers = [k for k in range(w + 1, len(stmts)) if t.name in used[k]]
        size = {**nbytes, again.name: buffer_bytes(again)}
        # an update of an input W reads and writes counts too (W's own writes do not)
        if sources & changed[w] - writes[w][0] - writes[w][1]:
            continue
        moved = {new: again.name if old == t.name else old for new, old in over.items()}
        for j, r in enumerate(readers):
            if any(sources & changed[k] for k in range(w + 1, r)):
                break  # a source changes before this reader, and so before later ones
            if r == w + 1 or not (readers[j - 1] if j else w) < peaks[0] or \
                    not peaks[1] < r:
                continue  # t would not be freed where the bytes peak
            late = set(readers[j:])
            hoisted, renamed = _read_from_copies(t, sources, r, stmts, writes, uses, used,
                                                 changed, last_use, written_at, copy_of)
            order = [k for k in range(len(stmts)) if k != hoisted]
            if hoisted is not None:
                order.insert(r, hoisted)
            at = r + (hoisted is not None)
            order.insert(at, None)  # the copy
            read = {renamed.get(b, b).name for b in sources if b.name in nbytes}
            new_used = [read | {again.name} if k is None else
                        (used[k] - {t.name}) | {again.name} if k in late else used[k]
                        for k in order]
            peak = _planned_peak(new_used, size, moved)
            if peak < now:
                found.append((peak, len(found), (t, copy, again, late, order, renamed)))
    for _, _, (t, copy, again, late, order, renamed) in sorted(found, key=lambda f: f[:2]):
        cut = copy()
        for b, a in renamed.items():
            cut = rename_buffer(cut, b, a)
        body = [cut if k is None else rename_buffer(stmts[k], t, again) if k in late
                else stmts[k] for k in order]
        made = _n.Kernel(kernel.name, kernel.args, kernel.temps + (again,),
                         _n.Block(tuple(body)))
        peak = planned_peak(made, seen)
        if peak < now:
            return peak, made, t, again
    return None


def _read_from_copies(t, sources, r, stmts, writes, uses, used, changed, last_use,
                      written_at, copy_of):
    """``(hoisted, renamed)``: for a copy of ``t`` written right before statement ``r``,
    the sources no statement uses from ``r`` on but a copy of them made earlier
    (``renamed``: source -> that copy), which the copy reads instead; the copy is
    written before ``r`` already, or its statement (at ``hoisted``, at most one) moves up
    to run right before the new copy: its own sources unchanged between, and ``t`` not
    among them. Identity: a copy holds its temporary's values (see the module docstring)."""
    hoisted, renamed = None, {}
    for b in sources:
        a = copy_of.get(b.name)
        if a is None or last_use.get(b.name, len(stmts)) >= r:
            continue
        p = written_at[a]
        if p < r:  # (read at r, the copy lives on to there)
            renamed[b] = a
            continue
        reads = uses[p] - writes[p][0] - writes[p][1]
        if hoisted is not None or t.name in used[p] or \
                any(reads & changed[k] for k in range(r, p)):
            continue
        hoisted, renamed[b] = p, a
    return hoisted, renamed


def rematerialise(kernel):
    """``kernel`` with cheap copies written again before their late readers where that
    lowers the peak bytes of temporaries alive together (see the module docstring), or
    ``kernel`` itself when no copy does."""
    if type(kernel.body) is not _n.Block or len(kernel.body.stmts) < 3:
        return kernel
    # each copy lowers the peak by at least a byte; a kernel has few temporaries
    seen, copied, copies = {}, kernel, {}
    for _ in range(2 * len(kernel.temps)):
        found = _best_copy(copied, seen, copies)
        if found is None:
            break
        _, copied, t, again = found
        copies[again.name] = t
    if copied is kernel:
        return kernel
    # a copy moves the peak: a statement that frees memory may now better run before a
    # copy; the copies stay at least as late as they are
    new = set(copied.temps[len(kernel.temps):])
    held = [k for k, s in enumerate(copied.body.stmts)
            if set(written_buffers(s)) <= new]
    return memory_order(copied, measure=lambda k: planned_peak(k, seen), held=held)


__all__ = ["planned_peak", "rematerialise"]
