"""The contribution of one stage to the adjoint of one of its inputs.

For a consumer ``Y[y] = body`` and an input ``X``, the contribution to ``dX[x]`` is::

    sum(head[y'] * D, y' in Y's domain)

where ``y'`` are fresh reduce axes replacing Y's axes, ``head`` is Y's adjoint and ``D``
is the forward-mode derivative of ``body[y := y']`` with respect to the element
``X[x]``: each read ``X[idx]`` contributes ``(idx == x) ? 1 : 0`` (kept explicit, for
zero elimination), multiplied by the partial derivatives of the rules, and reductions
inside the body stay reductions (``sum(..., k)``). A body that is a reduction uses the
read ``Y[y']`` for its value. For a scatter stage ``out[index(p)] += value(p)`` the
contribution is ``sum(head[index(p')] * D, p' where where(p'))`` (a gather of the head),
plus ``head[x]`` when ``X`` is the scatter's ``init``.

>>> import tegrad as tg
>>> from tegrad.ir.expr import Var
>>> A = tg.placeholder((3,), dtype="float64", name="A")
>>> B = tg.compute((3,), lambda i: A[i] * A[i], name="B")
>>> str(stage_contribution(B, A, lambda p, idx: tg.const(1.0, "float64"), [Var("x")], []))
'sum((i == x ? 1.0 : 0.0) * A[i] + A[i] * (i == x ? 1.0 : 0.0), i in [0, 3))'
"""
from __future__ import annotations

from tegrad.ir import reduction as _red
from tegrad.ir.errors import DifferentiationError
from tegrad.ir.expr import IterVar, Read, Reduce, Var
from tegrad.ir.mapper import substitute
from tegrad.ir.tensor import ComputeOp, ScanOp, ScatterOp
from tegrad.autodiff.algebra import ZERO, add, cast_to, choose, mul
from tegrad.autodiff.names import fresh_names, names_in
from tegrad.autodiff.rules import ForwardDiff, index_select


def element_seed(X, xs):
    """The leaf tangents for differentiating with respect to the element ``X[xs]``."""
    def seed(leaf):
        if type(leaf) is Read and leaf.tensor is X:
            return index_select(leaf.indices, xs, leaf.dtype)
        return ZERO
    return seed


def _fresh_axes(ivs, taken):
    """Reduce axes over the same ranges as ``ivs``, with names fresh against ``taken``."""
    names = fresh_names([iv.name for iv in ivs], taken)
    return tuple(IterVar(Var(n, iv.var.dtype), iv.lo, iv.extent, "reduce")
                 for n, iv in zip(names, ivs))


def _sum_over(axes, term, where, dtype):
    if term is ZERO:
        return ZERO
    if not axes:
        return term if where is None else choose(where, term, ZERO, dtype)
    return Reduce(_red.BUILTIN_REDUCERS["sum"], term, axes, where, None, dtype)


def stage_contribution(Y, X, head, xs, prefix, reserved=()):
    """``head . dY/dX`` at ``X[xs]`` as an expression (or ZERO).

    ``head(prefix, idx)`` builds the adjoint of ``Y`` at ``Y[idx]`` (``prefix`` are the
    extra leading variables of a batched adjoint, e.g. for full Jacobians); ``xs`` and
    ``prefix`` are Vars, ``reserved`` further names the new axes must avoid.
    """
    op = Y.op
    taken = set(reserved) | {v.name for v in list(xs) + list(prefix)}
    if isinstance(op, ScanOp):
        # a scan is the compute of its equivalent reduction (whose value it holds)
        op = ComputeOp(op.name, op.axes, op.as_reduce(taken))
    if isinstance(op, ComputeOp):
        taken |= names_in(op.body) - {ax.name for ax in op.axes}
        axes = _fresh_axes(op.axes, taken)
        mapping = {ax.name: new.var for ax, new in zip(op.axes, axes) if ax.name != new.name}
        body = substitute(op.body, mapping) if mapping else op.body
        ys = tuple(ax.var for ax in axes)
        answers = {id(body): Read(Y, ys, Y.dtype)} if type(body) is Reduce else {}
        fd = ForwardDiff(element_seed(X, xs), answers, taken | {a.name for a in axes})
        d = fd.tangent(body)
        term = mul(head(prefix, ys), d)
        return cast_to(_sum_over(axes, term, None, Y.dtype), X.dtype)
    if isinstance(op, ScatterOp):
        taken |= names_in(*op.exprs()) - {ax.name for ax in op.axes}
        axes = _fresh_axes(op.axes, taken)
        mapping = {ax.name: new.var for ax, new in zip(op.axes, axes) if ax.name != new.name}

        def sub(e):
            return substitute(e, mapping) if (mapping and e is not None) else e
        fd = ForwardDiff(element_seed(X, xs), {}, taken | {a.name for a in axes})
        out = ZERO
        for target in op.targets:
            # each target adds value at its index: the head there times d value
            d = fd.tangent(sub(target.value))
            if d is not ZERO:
                idx = tuple(sub(i) for i in target.indices)
                out = add(out, _sum_over(axes, mul(head(prefix, idx), d), sub(target.where),
                                         Y.dtype))
        if op.init is X:
            out = add(out, head(prefix, tuple(xs)))
        return cast_to(out, X.dtype)
    raise DifferentiationError(f"cannot differentiate the stage of {Y.name!r} "
                               f"({type(op).__name__})")


__all__ = ["stage_contribution", "element_seed"]
