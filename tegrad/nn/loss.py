"""Losses, each a scalar (shape ``()``) tensor averaged over its elements or batch.

>>> import numpy as np, tegrad as tg
>>> a = tg.placeholder((2, 2), dtype="float64", name="a")
>>> b = tg.placeholder((2, 2), dtype="float64", name="b")
>>> float(tg.evaluate(mse_loss(a, b), {a: np.ones((2, 2)), b: np.zeros((2, 2))}))
1.0
"""
from __future__ import annotations

from tegrad.ir.builders import log
from tegrad.ir.errors import DTypeError, ShapeError
from tegrad.ir.reduction import max as _max
from tegrad.ir.reduction import reduce_axis
from tegrad.ir.reduction import sum as _sum
from tegrad.ir.tensor import compute
from tegrad.ir import dtypes as _dt
from tegrad.nn._util import check_same_dtype, check_tensor, reduce_axes
from tegrad.nn.activation import logsumexp_parts

__all__ = ["softmax_cross_entropy", "binary_cross_entropy", "mse_loss"]


def _check_pair(op, a, b, what_a, what_b):
    check_tensor(a, op, what_a)
    check_tensor(b, op, what_b)
    check_same_dtype(op, a, b, what_b)
    if a.shape != b.shape:
        raise ShapeError(f"{op}: {what_a} {a.name!r} has shape {a.shape} but {what_b} "
                         f"{b.name!r} has shape {b.shape}; they must be equal")


def _mean_of(op, shape, term):
    """The scalar ``sum over all indices i of term(i) / size`` in one stage."""
    size = 1
    for s in shape:
        size *= s

    def body():
        axes = reduce_axes(shape, "rl")
        if not axes:
            return term(())
        return _sum(term(tuple(axes)), axis=axes) / size

    return compute((), body, name=op)


def softmax_cross_entropy(logits, labels):
    """``mean_n ( log sum_k exp(logits[n, k]) - logits[n, labels[n]] )``: the mean over the
    batch of ``-log_softmax(logits)[n, labels[n]]`` (PyTorch's ``F.cross_entropy``).

    ``logits`` is ``(N, K)`` float, ``labels`` is ``(N,)`` of integer class ids in
    ``[0, K)`` (a label out of range makes evaluation raise ``OutOfBoundsError``). The
    log-sum-exp subtracts the row maximum; the label logit is a data-dependent read.
    """
    op = "softmax_cross_entropy"
    check_tensor(logits, op, "logits", ndim=2)
    check_tensor(labels, op, "labels", ndim=1, float_only=False)
    if not _dt.is_int(labels.dtype):
        raise DTypeError(f"{op}: labels {labels.name!r} has dtype {labels.dtype}; integer "
                         f"class ids are needed")
    if labels.shape[0] != logits.shape[0]:
        raise ShapeError(f"{op}: labels {labels.name!r} has {labels.shape[0]} entries but "
                         f"logits {logits.name!r} has a batch of {logits.shape[0]}")
    m, s, _ = logsumexp_parts(logits, 1, op)
    batch = logits.shape[0]

    def body():
        n = reduce_axis((0, batch), name="rn")
        nll = m[n] + log(s[n]) - logits[n, labels[n]]
        return _sum(nll, axis=n) / batch

    return compute((), body, name=op)


def binary_cross_entropy(probs, targets):
    """``mean( -(t * log(p) + (1 - t) * log(1 - p)) )`` over all elements, with each log
    clamped below at -100 as PyTorch's ``F.binary_cross_entropy`` (so p = 0 or 1 gives a
    finite loss). ``probs`` and ``targets`` are float tensors of the same shape."""
    op = "binary_cross_entropy"
    _check_pair(op, probs, targets, "probs", "targets")

    def term(i):
        p, t = probs[i], targets[i]
        return -(t * _max(log(p), -100.0) + (1.0 - t) * _max(log(1.0 - p), -100.0))

    return _mean_of(op, probs.shape, term)


def mse_loss(a, b):
    """``mean((a - b)^2)`` over all elements (PyTorch's ``F.mse_loss``, reduction mean);
    ``a`` and ``b`` are float tensors of the same shape."""
    op = "mse_loss"
    _check_pair(op, a, b, "a", "b")

    def term(i):
        d = a[i] - b[i]
        return d * d

    return _mean_of(op, a.shape, term)
