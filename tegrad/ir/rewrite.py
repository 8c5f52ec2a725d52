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
from tegrad.ir.tensor import ComputeOp, PlaceholderOp, ScanOp, ScatterOp, Tensor


class _Retarget(IdentityMapper):
    def __init__(self, mapping):
        self.mapping = mapping

    def map_read(self, e, *args):
        e = super().map_read(e)
        target = self.mapping.get(id(e.tensor))
        return e if target is None or target is e.tensor else Read(target, e.indices, e.dtype)


def _by_id(mapping):
    return {id(k): v for k, v in mapping.items()}


def stage_exprs(op):
    """The expressions of a stage: a compute's body; each scatter target's expressions."""
    if isinstance(op, ComputeOp):
        return [op.body]
    if isinstance(op, ScatterOp):
        return op.exprs()
    if isinstance(op, ScanOp):
        return [op.source]
    return []


def map_stage(t, fn, init_of=None):
    """``t`` with ``fn`` applied to every expression of its stage (see :func:`stage_exprs`).

    ``init_of(tensor)`` replaces a scatter's initial tensor. The new tensor's dtype is
    that of the new body (or scatter value); ``t`` itself comes back when nothing changed.
    """
    op = t.op
    if isinstance(op, PlaceholderOp):
        return t
    if isinstance(op, ComputeOp):
        body = fn(op.body)
        if body is op.body:
            return t
        return Tensor(ComputeOp(op.name, op.axes, body), t.shape, body.dtype, t.name)
    if isinstance(op, ScatterOp):
        init = op.init if op.init is None or init_of is None else init_of(op.init)
        changed = init is not op.init
        targets = []
        for target in op.targets:
            old = target.exprs()
            new = [fn(e) for e in old]
            changed |= not all(a is b for a, b in zip(new, old))
            targets.append(target.rebuilt(new))
        if not changed:
            return t
        return Tensor(ScatterOp(op.name, op.axes, targets, init), t.shape,
                      targets[0].value.dtype, t.name)
    if isinstance(op, ScanOp):
        source = fn(op.source)
        if source is op.source:
            return t
        return Tensor(ScanOp(op.name, op.axes, op.axis, op.reducer, source, op.reverse),
                      t.shape, source.dtype, t.name)
    raise TypeError(f"cannot rewrite the stage of {t.name!r}: {type(op).__name__}")


def retarget(t, mapping):
    """``t`` with its stage reading ``mapping[s]`` wherever it read ``s``.

    Returns ``t`` itself when it reads none of the mapped tensors.
    """
    ids = mapping if all(isinstance(k, int) for k in mapping) else _by_id(mapping)
    if not ids:
        return t
    return map_stage(t, _Retarget(ids), lambda init: ids.get(id(init), init))


def rewrite_program(outputs, transform, skip=()):
    """Apply ``transform(tensor) -> tensor`` to every stage the outputs depend on.

    Stages are visited inputs first; each is retargeted to its rewritten inputs before
    ``transform`` sees it. Tensors in ``skip`` (and placeholders) are kept as they are.
    Returns ``{id(old): new}`` for every visited tensor.
    """
    skip_ids = {id(t) for t in skip}
    mapping = {}
    for t in topological_order(outputs):
        if isinstance(t.op, PlaceholderOp) or id(t) in skip_ids:
            mapping[id(t)] = t
            continue
        new = retarget(t, mapping)
        mapping[id(t)] = transform(new)
    return mapping
