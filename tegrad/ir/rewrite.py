"""Rewriting tensor programs stage by stage.

``retarget(t, mapping)`` rebuilds the stage of ``t`` so that its reads of a tensor
``s`` read ``mapping[s]`` instead; ``rewrite_program`` applies a stage transformation to
every stage of a program, inputs first, keeping reads pointed at the rewritten stages.

>>> import tegrad as tg
>>> x = tg.placeholder((3,), name="x")
>>> x2 = tg.placeholder((3,), name="x2")
>>> y = tg.compute((3,), lambda i: x[i] * 2.0, name="y")
>>> str(retarget(y, {x: x2}).op.body)
'x2[i] * 2.0'
"""
from __future__ import annotations

from tegrad.ir.expr import Read
from tegrad.ir.graph import topological_order
from tegrad.ir.mapper import IdentityMapper
from tegrad.ir.stages import StageMapper, is_placeholder
from tegrad.ir.tensor import compute_stage, scan_stage, scatter_stage, with_tensors_replaced


class _Retarget(IdentityMapper):
    def __init__(self, mapping):
        self.mapping = mapping

    def map_read(self, e, *args):
        e = super().map_read(e)
        target = self.mapping.get(id(e.tensor))
        return e if target is None or target is e.tensor else Read(target, e.indices, e.dtype)


def _by_id(mapping):
    return {id(k): v for k, v in mapping.items()}


class _MapStage(StageMapper):
    def __init__(self, fn, init_of, same_scope=False):
        # same_scope: fn only changes the tensor of reads (indices and dtype kept), so a
        # rebuilt compute stage passes compute_stage's checks as the old one did
        self.fn, self.init_of, self.same_scope = fn, init_of, same_scope

    def map_placeholder(self, t):
        return t

    def map_compute(self, t):
        body = self.fn(t.op.body)
        if body is t.op.body:
            return t
        if self.same_scope:
            return with_tensors_replaced(t, body)
        return compute_stage(t.name, t.op.axes, body)

    def map_scatter(self, t):
        op = t.op
        init = op.init if op.init is None or self.init_of is None else self.init_of(op.init)
        changed = init is not op.init
        targets = []
        for target in op.targets:
            old = target.exprs()
            new = [self.fn(e) for e in old]
            changed |= not all(a is b for a, b in zip(new, old))
            targets.append(target.rebuilt(new))
        if not changed:
            return t
        return scatter_stage(t.name, t.shape, op.axes, targets, init)

    def map_scan(self, t):
        op = t.op
        source = self.fn(op.source)
        if source is op.source:
            return t
        return scan_stage(t.name, op.axes, op.axis, op.reducer, source, op.reverse)


def map_stage(t, fn, init_of=None):
    """``t`` with ``fn`` applied to every expression of its stage (see
    :func:`tegrad.ir.stages.stage_exprs`).

    ``init_of(tensor)`` replaces a scatter's initial tensor. The new tensor's dtype is
    that of the new body (or scatter value); ``t`` itself comes back when nothing changed.
    """
    return _MapStage(fn, init_of)(t)


def retarget(t, mapping):
    """``t`` with its stage reading ``mapping[s]`` wherever it read ``s``.

    Returns ``t`` itself when it reads none of the mapped tensors.
    """
    return retarget_ids(t, _by_id(mapping))


def retarget_ids(t, ids):
    """:func:`retarget` for a mapping ``{id(s): new}`` (which may be large: it is not
    scanned)."""
    # (a stage reading no remapped tensor is itself: its body is not walked and rebuilt)
    if not ids or all(ids.get(id(s), s) is s for s in t.op.input_tensors()):
        return t
    return _MapStage(_Retarget(ids), lambda init: ids.get(id(init), init), same_scope=True)(t)


def rewrite_program(outputs, transform, skip=()):
    """Apply ``transform(tensor) -> tensor`` to every stage the outputs depend on.

    Stages are visited inputs first; each is retargeted to its rewritten inputs before
    ``transform`` sees it. Tensors in ``skip`` (and placeholders) are kept as they are.
    Returns ``{id(old): new}`` for every visited tensor.
    """
    skip_ids = {id(t) for t in skip}
    mapping = {}
    for t in topological_order(outputs):
        if is_placeholder(t) or id(t) in skip_ids:
            mapping[id(t)] = t
            continue
        new = retarget_ids(t, mapping)
        mapping[id(t)] = transform(new)
    return mapping
