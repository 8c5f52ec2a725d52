"""Elementwise gradient stages are computed inline by the stages that read them.

Reverse mode gives every intermediate tensor an adjoint stage; when one is elementwise
(``davg_r0[y] = head[y] * 0.25``) its consumers can compute it where they read it, as a
hand-written gradient would: ``dX[x] = head[x // 2] * 0.25`` instead of a stage and a
read. A stage is inlined when it has no reduction and inlining does not repeat work: it
is read outside reductions only, or its body costs at most one floating-point operation.

A stage among the ``tensors`` asked for is still returned as a stage of its own, and is
inlined into the stages inside the program that read it like any other: reverse mode
returns every adjoint as an output (the adjoint of a softmax's row sum, elementwise), and
a gradient computes such a value inline as it would if the adjoint were not asked for.
An output read by another output stays a stage for all its readers: outputs reading each
other (an adjoint reading its consumers' adjoints) share what they compute when built
together.

``inline_elementwise(tensors, keep)[k]`` computes the same values as ``tensors[k]``.
"""
from __future__ import annotations

from tegrad.analysis.cost import local_flops
from tegrad.ir.expr import REDUCTIONS, Read, structural_equal
from tegrad.ir.graph import topological_order
from tegrad.ir.mapper import IdentityMapper, NodeMemo, children, substitute, walk
from tegrad.ir.rewrite import map_stage, retarget_ids
from tegrad.ir.stages import StageMapper, is_placeholder, stage_exprs
from tegrad.analysis.simplify import simplify
from tegrad.analysis.indices import normalize_indices

#: float operations an inlined body may cost when it is read inside a reduction
CHEAP_FLOPS = 1


def read_sites(e):
    """``[(tensor, inside a reduction)]`` for every read in ``e``, in order; a read
    shared within ``e`` counts at each place it occurs, up to twice.

    >>> import tegrad as tg
    >>> x = tg.placeholder((4,), name="x")
    >>> k = tg.reduce_axis((0, 4), name="k")
    >>> [(t.name, inside) for t, inside in read_sites(x[0] + tg.sum(x[k], axis=k))]
    [('x', False), ('x', True)]
    """
    out = []
    # a node shared within ``e`` is walked at most twice (per side of a reduction): its
    # reads then count twice, all that readers of the result tell apart from once
    visits = {}
    stack = [(e, False)]
    while stack:
        node, inside = stack.pop()
        key = (id(node), inside)
        if visits.get(key, 0) == 2:
            continue
        visits[key] = visits.get(key, 0) + 1
        if type(node) is Read:
            out.append((node.tensor, inside))
        inner = inside or type(node) in REDUCTIONS
        stack.extend((c, inner) for c in reversed(children(node)))
    return out


class _InlineFacts(StageMapper):
    """``(elementwise compute, tensors used whole)`` of a stage."""

    def map_placeholder(self, t):
        return False, ()

    def map_compute(self, t):
        return not any(type(n) in REDUCTIONS for n in walk(t.op.body)), ()

    def map_scatter(self, t):
        return False, (() if t.op.init is None else (t.op.init,))

    def map_scan(self, t):
        return False, ()


def _inlinable(tensors, keep):
    """Ids of the elementwise stages that can be inlined into all their readers (an
    output among them stays an output as well)."""
    keep_ids = {id(t) for t in keep}
    outputs = {id(t) for t in tensors}
    order = topological_order(tensors)
    facts = _InlineFacts()
    candidates = {id(t): t for t in order if id(t) not in keep_ids and facts(t)[0]}
    read_inside = set()
    for t in order:
        for e in stage_exprs(t):
            for tensor, inside in read_sites(e):
                if inside:
                    read_inside.add(id(tensor))
                if id(t) in outputs and id(tensor) in outputs:
                    # outputs read each other (see the module docstring)
                    candidates.pop(id(tensor), None)
        for whole in facts(t)[1]:
            candidates.pop(id(whole), None)  # an init is a whole tensor, not a read
    return {i for i, t in candidates.items()
            if i not in read_inside or local_flops(t.op.body)[0] <= CHEAP_FLOPS}


class _Inliner(IdentityMapper):
    """Replaces a read of an inlined stage by its body at the read's indices, and the
    reads in that body in turn (a generator method: chains of any length, no recursion).

    Linear in the DAG: a node met again (shared within a body, or between stages) is
    mapped once, and a stage read again at equal indices gives the node of its first
    read, so a chain of stages each read twice stays a chain instead of a tree.
    """

    def __init__(self, inlined):
        self.inlined = inlined
        self._mapped = NodeMemo()
        self._bodies = {}  # (id(stage), hash(indices)) -> [(indices, inlined body)]

    def visit(self, e, *args):
        hit = self._mapped.get(e)
        return hit if hit is not None else self._remembered(e, super().visit(e, *args))

    def _remembered(self, e, work):
        out = yield work
        self._mapped[e] = out
        return out

    def map_read(self, e, *args):
        e = super().map_read(e)
        stage = self.inlined.get(id(e.tensor))
        if stage is None:
            return e
        bucket = self._bodies.setdefault((id(stage), hash(e.indices)), [])
        for indices, body in bucket:
            if all(map(structural_equal, indices, e.indices)):
                return body
        axes = {ax.name: idx for ax, idx in zip(stage.op.axes, e.indices)}
        body = yield self.visit(substitute(stage.op.body, axes))
        bucket.append((e.indices, body))
        return body


def _inline_into(t, inliner, simplifier):
    return map_stage(t, lambda e: _simplified_if_changed(e, inliner(e), simplifier))


def _simplified_if_changed(old, new, simplifier):
    return new if new is old else simplifier(new)


def simplify_normalized(e):
    """``e`` simplified, its indices normalised (what zero elimination inlines with)."""
    return simplify(normalize_indices(e))


def inline_elementwise(tensors, keep=()):
    """The tensors with their elementwise intermediate stages computed inline."""
    tensors = list(tensors)
    return inline_stages(tensors, _inlinable(tensors, keep), keep=keep)


def inline_reads(t, stages):
    """``t`` with each read of one of the compute ``stages`` replaced by that stage's body
    at the read's indices (and so on through the reads of ``stages`` in those bodies),
    not simplified. Only ``t``'s own expressions are visited: :func:`inline_stages` on
    one stage would visit the whole program above it (a merge test once per wrapped
    reduction of a training step: quadratic in its stages).

    >>> import tegrad as tg
    >>> x = tg.placeholder((4,), name="x")
    >>> h = tg.compute((4,), lambda i: x[i] * 2.0, name="h")
    >>> y = tg.compute((4,), lambda i: h[3 - i] + 1.0, name="y")
    >>> print(tg.format(inline_reads(y, [h])))
    x = placeholder((4,), float32)
    y[i] = x[3 - i] * 2.0 + 1.0
    """
    return map_stage(t, _Inliner({id(s): s for s in stages}))


def inline_stages(tensors, ids, *, keep=(), simplifier=simplify_normalized):
    """The tensors with each compute stage whose id is in ``ids`` (elementwise, no
    reduction) substituted into the stages that read it: a read ``S[e]`` becomes
    ``S``'s body at ``e``, so ``inline_stages(ts, ids)[k]`` computes ``ts[k]``'s values.

    The stages in ``keep`` are left as they are; a rewritten expression is passed through
    ``simplifier`` (None: left as it is).

    >>> import tegrad as tg
    >>> x = tg.placeholder((4,), name="x")
    >>> h = tg.compute((4,), lambda i: x[i] * 2.0, name="h")
    >>> y = tg.compute((4,), lambda i: h[i] + 1.0, name="y")
    >>> print(tg.format(inline_stages([y], {id(h)})[0]))
    x = placeholder((4,), float32)
    y[i] = x[i] * 2.0 + 1.0
    """
    tensors = list(tensors)
    if not ids:
        return tensors
    keep_ids = {id(t) for t in keep}
    wanted = {id(t) for t in tensors}
    mapping, inlined, outputs = {}, {}, {}
    inliner = _Inliner(inlined)

    def rewritten(t_new):
        return _inline_into(t_new, inliner, simplifier) if simplifier \
            else map_stage(t_new, inliner)

    for t in topological_order(tensors):
        if is_placeholder(t) or id(t) in keep_ids:
            mapping[id(t)] = t
            continue
        t_new = retarget_ids(t, mapping)
        if id(t) in ids:
            # its readers inline its body and, through it, the stages it inlines: one
            # pass over each final body (inlining each stage's body eagerly would
            # rebuild a chain of n stages n times)
            mapping[id(t)] = inlined[id(t_new)] = t_new
            if id(t) in wanted:
                outputs[id(t)] = rewritten(t_new)  # an output is still computed
            continue
        mapping[id(t)] = rewritten(t_new)
    return [outputs.get(id(t), mapping[id(t)]) for t in tensors]
