"""The contribution of one stage to the adjoint of one of its inputs.

For a consumer ``Y[y] = body`` and an input ``X``, the contribution to ``dX[x]`` is::

    sum(head[y'] * D, y' in Y's domain)

where ``y'`` are fresh reduce axes replacing Y's axes, ``head`` is Y's adjoint and ``D``
is the forward-mode derivative of ``body[y := y']`` with respect to the element
``X[x]``: each read ``X[idx]`` contributes ``(idx == x) ? 1 : 0`` (kept explicit, for
zero elimination), multiplied by the partial derivatives of the rules, and reductions
inside the body stay reductions (``sum(..., k)``). Where a rule uses the value of the
whole body (a reduction's, ``exp'(e) = exp(e)``, the condition of ``max(e, 0)``'s
derivative) it is the read ``Y[y']``. For a scatter stage ``out[index(p)] += value(p)`` the
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
from tegrad.ir.expr import Const, Read, Reduce, Select
from tegrad.ir.mapper import rename_axes, substitute
from tegrad.ir.stages import StageMapper
from tegrad.autodiff.algebra import ZERO, add, cast_to, choose, mul
from tegrad.autodiff.names import names_in
from tegrad.analysis.kronecker import kronecker
from tegrad.autodiff.rules import ForwardDiff, bound_tests


def element_seed(X, xs):
    """The leaf tangents for differentiating with respect to the element ``X[xs]``."""
    def seed(leaf):
        if type(leaf) is Read and leaf.tensor is X:
            return kronecker(leaf.indices, xs, leaf.dtype)
        return ZERO
    return seed


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
    taken = set(reserved) | {v.name for v in list(xs) + list(prefix)}
    return _Contribution()(Y, X, head, xs, prefix, taken)


class _Contribution(StageMapper):
    def map_placeholder(self, Y, X, head, xs, prefix, taken):
        return ZERO  # an input reads nothing

    def map_compute(self, Y, X, head, xs, prefix, taken):
        return _pointwise_contribution(Y, Y.op.body, X, head, xs, prefix, taken)

    def map_scan(self, Y, X, head, xs, prefix, taken):
        # a scan is the compute of its equivalent reduction (whose value it holds)
        return _pointwise_contribution(Y, Y.op.as_reduce(taken), X, head, xs, prefix, taken)

    def map_scatter(self, Y, X, head, xs, prefix, taken):
        op = Y.op
        taken |= names_in(*op.exprs()) - {ax.name for ax in op.axes}
        axes, _ = rename_axes(op.axes, taken, kind="reduce")
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


def _values(body, value):
    """``{id(node): value}`` for the nodes of ``body`` whose value is the stage's,
    ``value``, wherever their tangent is used: the body itself, and the arm of a select
    whose other branch is a constant (a masked softmax's ``causal ? exp(a - m) / s : 0``),
    down through such selects: the select rule uses an arm's tangent only where the arm
    is taken, and there the stage holds the arm's value. (A node the condition shares
    with the arm is not differentiated there: conditions have no tangent.)

    >>> import tegrad as tg
    >>> from tegrad.ir.expr import Var
    >>> x = tg.placeholder((4,), dtype="float64", name="x")
    >>> y = tg.compute((4,), lambda i: tg.if_then_else(i < 2, tg.exp(x[i]), 0.0), name="y")
    >>> str(stage_contribution(y, x, lambda p, idx: tg.const(1.0, "float64"), [Var("j")], []))
    'sum(i < 2 ? (i == j ? 1.0 : 0.0) * y[i] : 0.0, i in [0, 4))'
    """
    values, e = {id(body): value}, body
    while type(e) is Select:
        if type(e.false_value) is Const:
            e = e.true_value
        elif type(e.true_value) is Const:
            e = e.false_value
        else:
            break
        values[id(e)] = value
    return values


def _pointwise_contribution(Y, body, X, head, xs, prefix, taken):
    """The contribution of a stage holding ``body`` at every point of its axes."""
    out_axes = Y.op.axes
    taken |= names_in(body) - {ax.name for ax in out_axes}
    axes, _ = rename_axes(out_axes, taken, kind="reduce")
    mapping = {ax.name: new.var for ax, new in zip(out_axes, axes) if ax.name != new.name}
    body = substitute(body, mapping) if mapping else body
    ys = tuple(ax.var for ax in axes)
    # the rules that use the value of a node (exp' = exp, d(a / b) = da / b - (a / b)
    # db / b, the condition of relu' = max(x, 0)') read the stage for its whole body, as
    # a hand-written gradient would: no reduction or exp is computed again, and the
    # stage's input need not be kept for the gradient when the stage's value is (a
    # clip's inner bound is tested on the value too: bound_tests)
    value = Read(Y, ys, Y.dtype)
    fd = ForwardDiff(element_seed(X, xs), _values(body, value), taken | {a.name for a in axes},
                     bound_tests(body, value))
    d = fd.tangent(body)
    term = mul(head(prefix, ys), d)
    return cast_to(_sum_over(axes, term, None, Y.dtype), X.dtype)


__all__ = ["stage_contribution", "element_seed"]
