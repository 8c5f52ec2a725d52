"""Where a kernel's buffers live: local buffers on the stack up to
:data:`STACK_LIMIT_BYTES`, larger ones (:func:`large_locals`) and the matrix products'
packing space (:func:`packing_space`) in storage the runtime owns, passed after the
kernel's arguments and temporaries, aligned to :data:`STORAGE_ALIGNMENT` bytes.

In that storage (:func:`plan_storage`) buffers of disjoint lifetimes share memory, and a
temporary computed elementwise from a temporary that dies with it takes that one's
memory (:func:`in_place_temporaries`), the kernel then emitted with the second named as
the first (:func:`in_place_kernel`); a temporary that only copies another at the same
flat offsets (a reshape) is that one's memory, its stores dropped
(:mod:`tegrad.codegen.lower.copy_views`). The identity the plan preserves: every element
a statement reads holds the value last written to that element's buffer, as in separate
memory; between two buffers placed at the same bytes, either their lifetimes are
disjoint, or one is written over the other in place under
:func:`~tegrad.codegen.lower.in_place.overwriting_statement`'s condition (each element of
the old read, for its old value, only before the one store of the new one's value), or
one is a view of the other (:func:`~tegrad.codegen.lower.copy_views.copy_views`'s
condition: the source unchanged from the copy on, the view written by the copy alone).
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

import numpy as np

from tegrad.codegen.kernels.product import product_space_bytes
from tegrad.codegen.loops import nodes as _n
from tegrad.codegen.loops.mapper import buffers_of, walk_stmts
from tegrad.codegen.lower.copy_views import copies_dropped, copy_views
from tegrad.codegen.lower.in_place import (overwriting_statement, read_at_loaded_index,
                                           read_at_loaded_indices, rename_buffers,
                                           written_buffers)
from tegrad.codegen.lower.memory_order import buffer_bytes  # noqa: F401 - also this module's
from tegrad.codegen.tuning import (
    PLACEMENT_SLACK, PLACEMENT_TRIES, SHARED_MIN_BYTES, STACK_LIMIT_BYTES)

#: the alignment (bytes) of the storage the runtime allocates for temporaries and large
#: local buffers, declared to LLVM
STORAGE_ALIGNMENT = 64

#: the name of the kernel's buffer of packing space for its matrix products (a name no
#: tensor's buffer has: those are the tensors' names, and no tensor is named so by tegrad)
PACKING_SPACE = "tegrad.packing"


def large_locals(stmt):
    """Local buffers too large for the stack."""
    out = []
    for s in walk_stmts(stmt):
        if isinstance(s, _n.Allocate):
            b = s.buffer
            if b.size * np.dtype(b.dtype).itemsize > STACK_LIMIT_BYTES and b not in out:
                out.append(b)
    return out


def packing_space(stmt, threads, target=None):
    """The buffer where the matrix products of ``stmt`` pack their operands (None when
    none packs): one for all of them, sized for the largest on ``threads`` threads (the
    products run one after another, never inside a parallel loop's task: see
    :mod:`.parallel`), passed after the large local buffers, so an export carves it from
    the caller's workspace and the JIT's executable owns it: nothing is allocated in a
    call.

    >>> from tegrad.codegen.kernels.gemm import GemmSpec
    >>> from tegrad.codegen.loops.nodes import Buffer, MatrixProduct
    >>> a, b, c = (Buffer(n, (64, 64), "float32") for n in "abc")
    >>> mm = MatrixProduct(GemmSpec.dense("float32", 64, 64, 64), c, a, b, 0, 0, 0)
    >>> packing_space(mm, 2).shape[0] > packing_space(mm, 1).shape[0]
    True
    """
    nbytes = max([product_space_bytes(s.spec, threads, target) for s in walk_stmts(stmt)
                  if isinstance(s, _n.MatrixProduct)], default=0)
    return _n.Buffer(PACKING_SPACE, (nbytes,), "uint8", "local") if nbytes else None


def has_product(stmt):
    return any(isinstance(s, _n.MatrixProduct) for s in walk_stmts(stmt))




@dataclass(frozen=True)
class StoragePlan:
    """Where the runtime's storage holds each buffer: ``offsets[b]`` the byte offset of
    buffer ``b`` in one block of ``nbytes`` bytes (each aligned to
    :data:`STORAGE_ALIGNMENT`); ``shares[b]`` the buffers whose memory overlaps ``b``'s
    (all of them live only while ``b`` is dead, but those of ``b``'s chain of writes in
    place); ``separate_bytes`` what the buffers would take each in a place of its own;
    ``in_place[new]`` the temporary ``old`` whose memory ``new`` is written over (see
    :func:`in_place_temporaries`; the kernel is emitted with ``new`` named ``old``,
    :func:`in_place_kernel`); ``views[d]`` the temporary whose memory ``d`` reads under
    its own shape, its copy dropped (:mod:`tegrad.codegen.lower.copy_views`)."""

    offsets: dict
    nbytes: int
    shares: dict
    separate_bytes: int
    in_place: dict = field(default_factory=dict)
    views: dict = field(default_factory=dict)

    def sharing(self, a, b):
        """Whether buffers ``a`` and ``b`` have overlapping memory."""
        return b in self.shares.get(a, ())

    def one_chain(self, a, b):
        """Whether buffers ``a`` and ``b`` are of one chain of writes in place (one
        memory, the lifetimes meeting at each write)."""
        return _chain_first(self.in_place, a) is _chain_first(self.in_place, b)


def _round_up(n, multiple):
    return -(-n // multiple) * multiple


def remembered(memo, kind, stmt, compute, *key):
    """``compute()``, remembered in the dict ``memo`` (when not None) for the statement
    ``stmt`` (by identity, the statement kept so its identity is not reused) under
    ``kind`` and ``key``: a pass that asks again about statements it left as they were
    (loop-IR statements are immutable) finds the answer."""
    if memo is None:
        return compute()
    at = (kind, id(stmt), *key)
    hit = memo.get(at)
    if hit is None or hit[0] is not stmt:
        hit = memo[at] = (stmt, compute())
    return hit[1]


def live_ranges(body, buffers, packing=None, memo=None):
    """``{buffer: (first, last)}``: the top-level statements of the kernel body ``body``
    (by position) between the first and the last that use each of ``buffers`` (reading,
    writing or allocating it; ``packing`` is used by every statement holding a matrix
    product). A buffer no statement uses is live throughout. A kernel runs its top-level
    statements once each, in order, so a buffer holds nothing another statement needs
    outside its range. ``memo``: see :func:`remembered`."""
    stmts = list(body.stmts) if type(body) is _n.Block else [body]
    wanted, ranges = set(buffers), {}
    for k, s in enumerate(stmts):
        used, allocated = remembered(memo, "buffers", s, lambda: buffers_of(s))
        touched = set(used) | allocated
        if packing is not None and has_product(s):
            touched.add(packing)
        for b in touched & wanted:
            first, _ = ranges.get(b, (k, k))
            ranges[b] = (first, k)
    everywhere = (0, max(len(stmts) - 1, 0))
    return {b: ranges.get(b, everywhere) for b in buffers}


def plan_storage(body, buffers, packing=None, in_place=True):
    """A :class:`StoragePlan` for ``buffers`` (a kernel's temporaries and large local
    buffers, packing space included) used by the kernel body ``body``: buffers of at
    least :data:`SHARED_MIN_BYTES` whose :func:`live_ranges` do not intersect may take
    the same memory, so the block is about the peak of the buffers live together rather
    than their sum. A chain of temporaries each written over the one before
    (:func:`in_place_temporaries`, recorded in ``in_place``; none when ``in_place`` is
    false) is one buffer for placement, live from its first's first statement to its
    last's last.

    Each buffer takes, in turn, an aligned offset where it overlaps no placed buffer whose
    range intersects its own: the lowest such offset, or the start of the tightest gap
    that holds it. The buffers are taken largest first, by first use, longest-lived
    first, last to die first, then (up to :data:`PLACEMENT_TRIES` orders) largest first
    with each size scaled by a random factor in [0.5, 1.5) (a fixed seed: the same plan
    each time); the first plan whose block is within :data:`PLACEMENT_SLACK` of the peak
    of the bytes alive at one statement (no plan is smaller than that peak) is kept, else
    the smallest. (Largest first at the lowest offset alone left 1.0 MB of a ResNet
    block's 11.05 MB training-step workspace unused, and 0.49 MB of a TCN's 4.70 MB; the
    random orders reach the peak in both.)

    >>> from tegrad.ir.expr import Var, Const
    >>> from tegrad.codegen.loops.nodes import Block, Buffer, Load, Store
    >>> a, b, c = (Buffer(n, (1024,), "float32") for n in "abc")
    >>> zero, one = Const(0, "int64"), Const(1, "int64")
    >>> body = Block((Store(a, (zero,), Const(1.0, "float32")),
    ...               Store(b, (zero,), Load(a, (one,))),
    ...               Store(c, (zero,), Load(b, (one,)))))
    >>> plan = plan_storage(body, [a, b, c])
    >>> plan.nbytes, plan.separate_bytes, plan.offsets[a] == plan.offsets[c]
    (8192, 12288, True)
    """
    ranges = live_ranges(body, buffers, packing)
    in_place = in_place_temporaries(body, buffers, ranges) if in_place else {}
    views = copy_views(body, buffers, ranges, {*in_place, *in_place.values()})
    # a chain of writes in place is one buffer for placement, named by its first; a view
    # is its source's
    root = {b: _chain_first(in_place, views.get(b, b)) for b in buffers}
    units = [b for b in buffers if root[b] == b]
    nbytes_of = {b: _round_up(buffer_bytes(b), STORAGE_ALIGNMENT) for b in buffers}
    spans = {}
    for b in buffers:
        lo, hi = spans.get(root[b], ranges[b])
        spans[root[b]] = (min(lo, ranges[b][0]), max(hi, ranges[b][1]))
    everywhere = (0, max(hi for _, hi in ranges.values()) if ranges else 0)
    for b in units:
        if nbytes_of[b] < SHARED_MIN_BYTES:
            spans[b] = everywhere
    placed = _best_placement(units, spans, nbytes_of)
    offsets = {b: placed[root[b]] for b in buffers}
    return StoragePlan(offsets, _extent(offsets, nbytes_of), _overlapping(offsets, nbytes_of),
                       sum(nbytes_of.values()), in_place, views)


def _overlapping(offsets, nbytes_of):
    """``{b: the buffers whose bytes overlap b's}`` (for those overlapping some other):
    taken by offset, a buffer meets, among those at or after its own offset, only the
    ones starting before it ends."""
    shares = {}
    order = sorted(offsets, key=offsets.get)
    for k, b in enumerate(order):
        end = offsets[b] + nbytes_of[b]
        for p in order[k + 1:]:
            if offsets[p] >= end:
                break  # (and so do all after p)
            if offsets[b] < offsets[p] + nbytes_of[p]:
                shares.setdefault(b, set()).add(p)
                shares.setdefault(p, set()).add(b)
    return {b: frozenset(s) for b, s in shares.items()}


def in_place_temporaries(body, buffers, ranges=None, memo=None):
    """``{new: old}``: the temporaries of ``buffers`` (scope ``temp``) written over another
    of them, ``old``, in the kernel body ``body``: ``new``'s first top-level statement is
    ``old``'s last, and there ``new`` is computed elementwise, each element from ``old``'s
    at its own indices only (the condition of
    :func:`~tegrad.codegen.lower.in_place.overwriting_statement`). Each ``old`` takes at
    most one ``new`` (two written over one would overwrite each other); an ``old`` may be
    a ``new`` itself (a chain ``a <- b <- c`` takes one place). ``ranges``: the
    :func:`live_ranges` of ``buffers`` when known; ``memo``: see :func:`remembered`.

    >>> from tegrad.ir.expr import Var, Const
    >>> from tegrad.codegen.loops.nodes import Block, Buffer, For, Load, Store
    >>> a, b, c = (Buffer(n, (1024,), "float32") for n in "abc")
    >>> i = Var("i", "int64")
    >>> loop = lambda out, value: For(i, Const(0, "int64"), Const(1024, "int64"),
    ...                               Store(out, (i,), value))
    >>> body = Block((loop(a, Const(1.0, "float32")), loop(b, Load(a, (i,)) * 2.0),
    ...               loop(c, Load(b, (i,)) + 1.0)))
    >>> {n.name: o.name for n, o in in_place_temporaries(body, [a, b, c]).items()}
    {'b': 'a', 'c': 'b'}
    """
    if ranges is None:
        ranges = live_ranges(body, buffers, memo=memo)
    stmts = list(body.stmts) if type(body) is _n.Block else [body]
    temps = [b for b in buffers if b.scope == "temp"]
    dying, facts = {}, {}
    for b in temps:
        dying.setdefault(ranges[b][1], []).append(b)

    def fact(k):  # the buffers statement k uses and those it writes, once each
        if k not in facts:
            s = stmts[k]
            facts[k] = (remembered(memo, "buffers", s, lambda: buffers_of(s))[0],
                        remembered(memo, "written", s, lambda: written_buffers(s)))
        return facts[k]

    pairs, taken = {}, set()
    for new in sorted(temps, key=lambda b: ranges[b][0]):
        t, last = ranges[new]
        olds = [old for old in dying.get(t, ()) if old not in taken and old != new
                and (old.shape, old.dtype) == (new.shape, new.dtype)
                # (used at T: a buffer no statement uses is live everywhere)
                and old in fact(t)[0]]
        if not olds or any(new in fact(k)[0] and new in fact(k)[1]
                           for k in range(t + 1, last + 1)):
            continue
        for old in olds:
            # new is written at T alone and old is not used after T (its range ends
            # there): the condition on the whole body is the condition on T
            at = stmts[t]
            if remembered(memo, "over", at, lambda: overwriting_statement([at], new, old),
                          new, old) == 0 \
                    and not any(new in remembered(memo, "loaded", s,
                                                  lambda: read_at_loaded_indices(s))
                                for s in stmts[t:last + 1]):
                pairs[new] = old
                taken.add(old)
                break
    return pairs


def in_place_kernel(kernel, plan):
    """``kernel`` with each temporary ``new`` of ``plan.in_place`` (a :class:`StoragePlan`
    of its buffers) named as the first buffer of its chain, whose memory it takes: the
    statement writing one over the other then reads and writes through one pointer, and
    no function of the emitted module receives two pointers to that memory, each
    declared ``noalias``. ``new`` stays one of the kernel's temporaries, at the same
    offset (the runtime's table of pointers is unchanged). The stores of the views of
    ``plan.views`` are dropped (:func:`~tegrad.codegen.lower.copy_views.copies_dropped`).

    >>> from tegrad.ir.expr import Var, Const
    >>> from tegrad.codegen.loops.nodes import Block, Buffer, For, Kernel, Load, Store
    >>> a, b = (Buffer(n, (1024,), "float32") for n in "ab")
    >>> out = Buffer("out", (1024,), "float32", "output")
    >>> i = Var("i", "int64")
    >>> loop = lambda dst, value: For(i, Const(0, "int64"), Const(1024, "int64"),
    ...                               Store(dst, (i,), value))
    >>> k = Kernel("k", (out,), (a, b), Block((loop(a, Const(1.0, "float32")),
    ...            loop(b, Load(a, (i,)) * 2.0), loop(out, Load(b, (i,))))))
    >>> plan = plan_storage(k.body, [a, b])
    >>> from tegrad.codegen.loops.mapper import buffers_of
    >>> sorted(x.name for x in buffers_of(in_place_kernel(k, plan).body)[0])
    ['a', 'out']
    """
    if not plan.in_place and not plan.views:
        return kernel
    body = rename_buffers(kernel.body, {new: _chain_first(plan.in_place, new)
                                        for new in plan.in_place})
    return _n.Kernel(kernel.name, kernel.args, kernel.temps, copies_dropped(body, plan.views))


def _chain_first(in_place, b):
    """The first buffer of ``b``'s chain of writes in place (``{new: old}``)."""
    while b in in_place:
        b = in_place[b]
    return b


def _best_placement(buffers, ranges, nbytes_of):
    """The offsets of the plan :func:`plan_storage` keeps."""
    floor = _peak_alive(ranges, nbytes_of)
    size = lambda b: (-nbytes_of[b], ranges[b][0])  # noqa: E731
    orders = [sorted(buffers, key=key) for key in (
        size, lambda b: (ranges[b][0], -nbytes_of[b]),
        lambda b: (ranges[b][0] - ranges[b][1], -nbytes_of[b]),
        lambda b: (-ranges[b][1], -nbytes_of[b]))]
    rng = random.Random(0)
    for _ in range(PLACEMENT_TRIES - len(orders)):
        scale = {b: rng.uniform(0.5, 1.5) for b in buffers}
        orders.append(sorted(buffers, key=lambda b: (-nbytes_of[b] * scale[b], size(b))))
    best = None
    for k, order in enumerate(orders):
        for tightest in (False, True) if k < 4 else (True,):
            offsets = _place(order, ranges, nbytes_of, tightest)
            extent = _extent(offsets, nbytes_of)
            if best is None or extent < best[0]:
                best = (extent, offsets)
            if extent <= floor * (1 + PLACEMENT_SLACK):
                return offsets
    return best[1] if best is not None else {}


def _peak_alive(ranges, nbytes_of):
    """The most bytes of buffers alive at one statement."""
    change = {}
    for b, (lo, hi) in ranges.items():
        change[lo] = change.get(lo, 0) + nbytes_of[b]
        change[hi + 1] = change.get(hi + 1, 0) - nbytes_of[b]
    peak = now = 0
    for k in sorted(change):
        now += change[k]
        peak = max(peak, now)
    return peak


def _extent(offsets, nbytes_of):
    return max((at + nbytes_of[b] for b, at in offsets.items()), default=0)


def _place(order, ranges, nbytes_of, tightest):
    """``{buffer: offset}``: the buffers of ``order`` placed in turn, each at the lowest
    offset (or, ``tightest``, in the smallest gap) where it overlaps no buffer placed
    before it whose live range intersects its own."""
    offsets = {}
    for b in order:
        lo, hi = ranges[b]
        size = nbytes_of[b]
        # the placed buffers alive together with b, by offset; the gaps between them
        busy = sorted((at, at + nbytes_of[p]) for p, at in offsets.items()
                      if ranges[p][0] <= hi and lo <= ranges[p][1])
        gaps, at = [], 0
        for start, end in busy:
            if start - at >= size:
                gaps.append((start - at, at))
            at = max(at, end)
        if gaps:
            offsets[b] = min(gaps)[1] if tightest else gaps[0][1]
        else:
            offsets[b] = at
    return offsets
