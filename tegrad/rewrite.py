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

from .expr import Read
from .graph import topological_order
from .mapper import IdentityMapper
from .tensor import ComputeOp, PlaceholderOp, ScatterOp, Tensor


class _Retarget(IdentityMapper):
    def __init__(self, mapping):
        self.mapping = mapping

    def map_read(self, e, *args):
        e = super().map_read(e)
        target = self.mapping.get(id(e.tensor))
        return e if target is None or target is e.tensor else Read(target, e.indices, e.dtype)


def _by_id(mapping):
    return {id(k): v for k, v in mapping.items()}


def retarget(t, mapping):
    """``t`` with its stage reading ``mapping[s]`` wherever it read ``s``.

    Returns ``t`` itself when it reads none of the mapped tensors.
    """
    ids = mapping if all(isinstance(k, int) for k in mapping) else _by_id(mapping)
    op = t.op
    if isinstance(op, PlaceholderOp) or not ids:
        return t
    r = _Retarget(ids)
    if isinstance(op, ComputeOp):
        body = r(op.body)
        if body is op.body:
            return t
        return Tensor(ComputeOp(op.name, op.axes, body), t.shape, t.dtype, t.name)
    if isinstance(op, ScatterOp):
        indices = tuple(r(i) for i in op.indices)
        value = r(op.value)
        where = None if op.where is None else r(op.where)
        init = ids.get(id(op.init), op.init) if op.init is not None else None
        if (value is op.value and where is op.where and init is op.init
                and all(a is b for a, b in zip(indices, op.indices))):
            return t
        return Tensor(ScatterOp(op.name, op.axes, indices, value, where, init), t.shape,
                      t.dtype, t.name)
    raise TypeError(f"cannot rewrite the stage of {t.name!r}: {type(op).__name__}")


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
