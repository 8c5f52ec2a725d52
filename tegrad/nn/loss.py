"""Losses, each a scalar (shape ``()``) tensor averaged over its elements or batch.

>>> import numpy as np, tegrad as tg
>>> a = tg.placeholder((2, 2), dtype="float64", name="a")
>>> b = tg.placeholder((2, 2), dtype="float64", name="b")
>>> float(tg.evaluate(mse_loss(a, b), {a: np.ones((2, 2)), b: np.zeros((2, 2))}))
1.0
"""
from __future__ import annotations

from tegrad.ir.builders import if_then_else, log
from tegrad.ir.errors import DTypeError, ShapeError, TegradError
from tegrad.ir.expr import Const
from tegrad.ir.reduction import max as _max
from tegrad.ir.reduction import reduce_axis
from tegrad.ir.reduction import sum as _sum
from tegrad.ir.tensor import compute
from tegrad.ir import dtypes as _dt
from tegrad.nn._util import check_number, check_same_dtype, check_tensor, reduce_axes
from tegrad.ops.validation import check_int
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


def _check_labels(op, logits, labels):
    check_tensor(logits, op, "logits")
    if logits.ndim < 2:
        raise ShapeError(f"{op}: logits {logits.name!r} must have 2 dimension(s) or more "
                         f"(N, C, d1, ...), but its shape is {logits.shape}")
    check_tensor(labels, op, "labels", float_only=False)
    if not _dt.is_int(labels.dtype):
        raise DTypeError(f"{op}: labels {labels.name!r} has dtype {labels.dtype}; integer "
                         f"class ids are needed")
    expected = (logits.shape[0],) + logits.shape[2:]
    if labels.ndim != len(expected):
        raise ShapeError(f"{op}: labels {labels.name!r} must have {len(expected)} "
                         f"dimension(s) (N, d1, ...) for logits of shape {logits.shape}, but "
                         f"its shape is {labels.shape}")
    if labels.shape[0] != logits.shape[0]:
        raise ShapeError(f"{op}: labels {labels.name!r} has {labels.shape[0]} entries but "
                         f"logits {logits.name!r} has a batch of {logits.shape[0]}")
    if labels.shape != expected:
        raise ShapeError(f"{op}: labels {labels.name!r} has shape {labels.shape} but logits "
                         f"{logits.name!r} of shape {logits.shape} need {expected}")


def softmax_cross_entropy(logits, labels, *, ignore_index=None, label_smoothing=0.0,
                          reduction="mean"):
    """PyTorch's ``F.cross_entropy(logits, labels)``: per position ``i = (n, d1, ...)``,
    ``loss_i = (1 - eps) * (lse_i - logits[n, labels_i, d1, ...]) + eps * (lse_i -
    mean_c logits[n, c, d1, ...])`` with ``lse_i = log sum_c exp(logits[n, c, d1, ...])``
    (the row maximum subtracted) and ``eps = label_smoothing``.

    ``logits`` is ``(N, C)`` or ``(N, C, d1, ...)`` float, ``labels`` ``(N,)`` or
    ``(N, d1, ...)`` of integer class ids in ``[0, C)`` (a label out of range makes
    evaluation raise ``OutOfBoundsError``). Positions whose label is ``ignore_index``
    (None: none; PyTorch's default is -100) add nothing and are not counted.
    ``reduction`` is ``"mean"`` (over the counted positions: NaN when none is, as
    PyTorch), ``"sum"`` or ``"none"`` (the losses, of the labels' shape).

    >>> import numpy as np, tegrad as tg
    >>> x = tg.placeholder((2, 2), dtype="float64", name="x")
    >>> y = tg.placeholder((2,), dtype="int32", name="y")
    >>> loss = softmax_cross_entropy(x, y, ignore_index=-1, reduction="none")
    >>> tg.evaluate(loss, {x: np.zeros((2, 2)), y: np.array([1, -1], "int32")}).round(4).tolist()
    [0.6931, 0.0]
    """
    op = "softmax_cross_entropy"
    _check_labels(op, logits, labels)
    eps = check_number(label_smoothing, op, "label_smoothing")
    if not 0.0 <= eps <= 1.0:
        raise TegradError(f"{op}: label_smoothing must be in [0, 1], got {label_smoothing!r}")
    if reduction not in ("mean", "sum", "none"):
        raise TegradError(f"{op}: reduction must be 'mean', 'sum' or 'none', got "
                          f"{reduction!r}")
    if ignore_index is not None:
        check_int(ignore_index, f"{op}: ignore_index")
    m, s, _ = logsumexp_parts(logits, 1, op)
    classes, positions = logits.shape[1], labels.shape

    def at(idx, c):
        return (idx[0], c) + tuple(idx[1:])

    if eps:
        def row_total(*idx):
            c = reduce_axis((0, classes), name="rc")
            return _sum(logits[at(idx, c)], axis=c)

        total = compute(positions, row_total, name=f"{op}_total")

    def loss_at(idx):
        lse = m[idx] + log(s[idx])
        label = labels[idx]
        if ignore_index is not None:
            # an ignored label (often -100) is not read as a class: index 0 instead
            keep = label != ignore_index
            label = if_then_else(keep, label, Const(0, labels.dtype))
        nll = lse - logits[at(idx, label)]
        if eps:
            nll = nll * (1.0 - eps) + (lse - total[idx] / classes) * eps
        if ignore_index is not None:
            nll = if_then_else(keep, nll, Const(0, logits.dtype))
        return nll

    if reduction == "none":
        return compute(positions, lambda *i: loss_at(i), name=op)
    size = 1
    for p in positions:
        size *= p
    if reduction == "mean" and ignore_index is not None:
        def count_body():
            axes = reduce_axes(positions, "rn")
            kept = labels[tuple(axes)] != ignore_index
            return _sum(if_then_else(kept, Const(1, logits.dtype), Const(0, logits.dtype)),
                        axis=axes)

        count = compute((), count_body, name=f"{op}_count")

    def body():
        if len(positions) == 1:
            axes = [reduce_axis((0, positions[0]), name="rn")]
        else:
            axes = reduce_axes(positions, "rn")
        loss = _sum(loss_at(tuple(axes)), axis=axes)
        if reduction == "sum":
            return loss
        return loss / (size if ignore_index is None else count[()])

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
