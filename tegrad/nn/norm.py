"""Normalisations: batch_norm, layer_norm, rms_norm, lrn (local response normalisation)
and l2_normalize.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((2, 3), dtype="float64", name="x")
>>> y = l2_normalize(x, axis=1)
>>> np.round(tg.evaluate(y, {x: np.array([[3., 4., 0.], [0., 0., 2.]])}), 6).tolist()
[[0.6, 0.8, 0.0], [0.0, 0.0, 1.0]]
"""
from __future__ import annotations

from tegrad.ir.builders import power, sqrt, stop_gradient
from tegrad.ir.errors import ShapeError, TegradError
from tegrad.ir.reduction import max as _max
from tegrad.ir.reduction import reduce_axis
from tegrad.ir.reduction import sum as _sum
from tegrad.ir.tensor import compute
from tegrad.nn._util import (channel_reader, check_number, check_same_dtype, check_tensor,
                             in_bounds, reduce_axes, where_of)
from tegrad.ops.validation import check_int, is_integer, normalize_axis

__all__ = ["batch_norm", "layer_norm", "rms_norm", "lrn", "l2_normalize"]


def _spread(kept_positions, kept_index, reduced_positions, reduced_index):
    """A full index built from the indices of kept and of reduced dimensions."""
    full = dict(zip(kept_positions, kept_index))
    full.update(zip(reduced_positions, reduced_index))
    return tuple(full[d] for d in range(len(full)))


def _batch_moments(x, axis, op):
    """Per-channel mean and biased variance over every dimension but ``axis``
    (two passes: the variance sums squared deviations from the mean)."""
    others = [d for d in range(x.ndim) if d != axis]
    count = 1
    for d in others:
        count *= x.shape[d]

    def mean_body(c):
        axes = reduce_axes([x.shape[d] for d in others], "rb")
        return _sum(x[_spread([axis], (c,), others, axes)], axis=axes) / count

    mean = compute((x.shape[axis],), mean_body, name=f"{op}_mean")

    def var_body(c):
        # mean((x - k)^2) - (mean - k)^2 is the variance for every constant k; with
        # k = stop_gradient(mean) the value is the two-pass one and every derivative is
        # exact, but the gradient skips the path through the mean inside the sum (it
        # cancels: sum(x - mean) == 0)
        axes = reduce_axes([x.shape[d] for d in others], "rb")
        centre = stop_gradient(mean[c])
        dev = x[_spread([axis], (c,), others, axes)] - centre
        shift = mean[c] - centre
        return _sum(dev * dev, axis=axes) / count - shift * shift

    var = compute((x.shape[axis],), var_body, name=f"{op}_var")
    return mean, var


def batch_norm(x, gamma, beta, mean=None, var=None, axis=1, epsilon=1e-5, training=True):
    """Batch normalisation along the channel ``axis``, returning ``(out, mean, var)``:

    ``out[.., c, ..] = (x[.., c, ..] - mean[c]) / sqrt(var[c] + epsilon) * gamma[c] + beta[c]``.

    With ``training`` the statistics are those of the batch, computed over every
    dimension but ``axis`` (the variance is biased, divided by the element count, as
    PyTorch normalises), and are returned; the ``mean``/``var`` arguments (running
    statistics) are then checked but not used, as in PyTorch's ``F.batch_norm``.
    Otherwise (inference) ``mean`` and ``var`` are required, used and returned as given.
    ``gamma``/``beta`` may be None (no scale / no shift); every per-channel vector has
    shape ``(C,)`` or ``(1,)``.
    """
    op = "batch_norm"
    check_tensor(x, op, "x")
    axis = normalize_axis(axis, x.ndim, f"{op}: axis")
    epsilon = check_number(epsilon, op, "epsilon")
    if epsilon < 0:
        raise TegradError(f"{op}: epsilon must be non-negative, got {epsilon}")
    if not isinstance(training, bool):
        raise TegradError(f"{op}: training must be True or False, got {training!r}")
    channels = x.shape[axis]
    scale = None if gamma is None else channel_reader(gamma, channels, op, "gamma", x)
    shift = None if beta is None else channel_reader(beta, channels, op, "beta", x)
    given = {}
    for what, t in (("mean", mean), ("var", var)):
        if t is not None:
            given[what] = channel_reader(t, channels, op, what, x)
        elif not training:
            raise TegradError(f"{op}: inference (training=False) needs the {what} argument")
    if training:
        if x.size == channels:
            raise TegradError(f"{op}: training needs more than one value per channel, but "
                              f"x {x.name!r} has shape {x.shape} (as PyTorch)")
        mean, var = _batch_moments(x, axis, op)
        mu, sigma2 = (lambda c: mean[c]), (lambda c: var[c])
    else:
        mu, sigma2 = given["mean"], given["var"]

    def body(*i):
        c = i[axis]
        out = (x[i] - mu(c)) / sqrt(sigma2(c) + epsilon)
        if scale is not None:
            out = out * scale(c)
        return out if shift is None else out + shift(c)

    return compute(x.shape, body, name=op), mean, var


def _trailing(op, x, axis, eps, params):
    """The checked ``(axis, eps)`` of a normalisation over the axes from ``axis`` on, and
    a reader ``p -> (lambda i: p[i[axis:]])`` per given parameter ``params``
    (``{what: tensor or None}``), each of shape ``x.shape[axis:]``."""
    check_tensor(x, op, "x")
    if x.ndim == 0:
        raise ShapeError(f"{op}: x {x.name!r} is a scalar; it needs an axis to normalise")
    axis = normalize_axis(axis, x.ndim, f"{op}: axis")
    eps = check_number(eps, op, "eps")
    if eps < 0:
        raise TegradError(f"{op}: eps must be non-negative, got {eps}")
    readers = {}
    for what, p in params.items():
        if p is None:
            readers[what] = None
            continue
        check_tensor(p, op, what)
        check_same_dtype(op, x, p, what)
        if p.shape != x.shape[axis:]:
            raise ShapeError(f"{op}: {what} {p.name!r} has shape {p.shape}, but x "
                             f"{x.name!r} of shape {x.shape} is normalised over its axes "
                             f"from {axis} on, of shape {x.shape[axis:]}")
        readers[what] = (lambda t: lambda i: t[i[axis:]])(p)
    return axis, eps, readers


def _row_moments(x, axis, op, centred):
    """Per leading index, the mean of ``x`` over the axes from ``axis`` on and its biased
    variance (``centred``), or the mean of ``x^2`` alone."""
    tail = x.shape[axis:]
    count = 1
    for s in tail:
        count *= s

    def row(i, value):
        axes = reduce_axes(tail, "rn")
        return _sum(value(i + tuple(axes)), axis=axes) / count

    if not centred:
        return compute(x.shape[:axis], lambda *i: row(i, lambda j: x[j] * x[j]),
                       name=f"{op}_ms"), None
    mean = compute(x.shape[:axis], lambda *i: row(i, lambda j: x[j]), name=f"{op}_mean")

    def var_body(*i):
        # the variance around k = stop_gradient(mean) as in batch_norm: the two-pass value,
        # exact derivatives, no gradient path through the mean inside the sum (it cancels)
        centre = stop_gradient(mean[i])

        def square(j):
            d = x[j] - centre
            return d * d

        shift = mean[i] - centre
        return row(i, square) - shift * shift

    return mean, compute(x.shape[:axis], var_body, name=f"{op}_var")


def layer_norm(x, gamma=None, beta=None, *, axis=-1, eps=1e-5):
    """Layer normalisation over the trailing axes of ``x`` from ``axis`` on (PyTorch's
    ``F.layer_norm`` with ``normalized_shape = x.shape[axis:]``):

    ``out = (x - mean) / sqrt(var + eps) * gamma + beta``, with ``mean`` and the biased
    ``var`` taken over those axes per leading index; ``gamma`` and ``beta`` have shape
    ``x.shape[axis:]`` and may be None (no scale / no shift).

    >>> import numpy as np, tegrad as tg
    >>> x = tg.placeholder((1, 4), dtype="float64", name="x")
    >>> y = tg.evaluate(layer_norm(x, eps=0.0), {x: np.array([[1.0, 2.0, 3.0, 4.0]])})
    >>> np.round(y, 4).tolist()
    [[-1.3416, -0.4472, 0.4472, 1.3416]]
    """
    op = "layer_norm"
    axis, eps, p = _trailing(op, x, axis, eps, {"gamma": gamma, "beta": beta})
    mean, var = _row_moments(x, axis, op, centred=True)

    def body(*i):
        lead = i[:axis]
        out = (x[i] - mean[lead]) / sqrt(var[lead] + eps)
        if p["gamma"] is not None:
            out = out * p["gamma"](i)
        return out if p["beta"] is None else out + p["beta"](i)

    return compute(x.shape, body, name=op)


def rms_norm(x, gamma=None, *, axis=-1, eps=1e-6):
    """Root-mean-square normalisation over the trailing axes from ``axis`` on (PyTorch's
    ``F.rms_norm`` with ``normalized_shape = x.shape[axis:]``):

    ``out = x / sqrt(mean(x^2) + eps) * gamma``, ``gamma`` of shape ``x.shape[axis:]`` or
    None (no scale).

    >>> import numpy as np, tegrad as tg
    >>> x = tg.placeholder((1, 2), dtype="float64", name="x")
    >>> tg.evaluate(rms_norm(x, eps=0.0), {x: np.array([[3.0, 4.0]])}).round(4).tolist()
    [[0.8485, 1.1314]]
    """
    op = "rms_norm"
    axis, eps, p = _trailing(op, x, axis, eps, {"gamma": gamma})
    ms, _ = _row_moments(x, axis, op, centred=False)

    def body(*i):
        out = x[i] / sqrt(ms[i[:axis]] + eps)
        return out if p["gamma"] is None else out * p["gamma"](i)

    return compute(x.shape, body, name=op)


def lrn(x, size=5, axis=1, alpha=1e-4, beta=0.75, bias=2.0):
    """Local response normalisation across ``axis`` (Relay/TOPI's formula):

    ``out[.., c, ..] = x[.., c, ..] / (bias + alpha / size * sum_{j} x[.., j, ..]^2)^beta``

    with ``j`` in ``[c - size // 2, c - size // 2 + size)`` clipped to the channels
    (TOPI pads the channels by ``size // 2`` zeros on both sides).
    """
    op = "lrn"
    check_tensor(x, op, "x")
    axis = normalize_axis(axis, x.ndim, f"{op}: axis")
    size = check_int(size, f"{op}: size", minimum=1)
    alpha = check_number(alpha, op, "alpha")
    beta = check_number(beta, op, "beta")
    bias = check_number(bias, op, "bias")
    channels, half = x.shape[axis], size // 2

    def body(*i):
        r = reduce_axis((0, size), name="rl")
        j = i[axis] + r - half if half else i[axis] + r
        neighbour = x[i[:axis] + (j,) + i[axis + 1:]]
        conds = in_bounds(j, channels, -half, channels - 1 + size - 1 - half)
        sq = _sum(neighbour * neighbour, axis=r, where=where_of(conds))
        return x[i] / power(sq * (alpha / size) + bias, beta)

    return compute(x.shape, body, name=op)


def _axes_list(axis, ndim, op):
    if axis is None:
        return list(range(ndim))
    items = [axis] if is_integer(axis) else axis
    if not isinstance(items, (list, tuple)) or not items:
        raise TegradError(f"{op}: axis must be None, an int or a non-empty list of ints, got "
                          f"{axis!r}")
    out = [normalize_axis(a, ndim, f"{op}: axis") for a in items]
    if len(set(out)) != len(out):
        raise TegradError(f"{op}: axis {axis!r} names a dimension twice")
    return sorted(out)


def l2_normalize(x, eps=1e-12, axis=None):
    """``out = x / sqrt(max(sum x^2, eps))`` with the sum over ``axis`` (an int, a list
    of ints, or None for every dimension), as Relay's ``nn.l2_normalize``."""
    op = "l2_normalize"
    check_tensor(x, op, "x")
    eps = check_number(eps, op, "eps")
    reduced = _axes_list(axis, x.ndim, op)
    kept = [d for d in range(x.ndim) if d not in reduced]

    def sum_body(*k):
        axes = reduce_axes([x.shape[d] for d in reduced], "rn")
        v = x[_spread(kept, k, reduced, axes)]
        return _sum(v * v, axis=axes) if axes else v * v

    squares = compute(tuple(x.shape[d] for d in kept), sum_body, name=f"{op}_sum")
    return compute(x.shape,
                   lambda *i: x[i] / sqrt(_max(squares[tuple(i[d] for d in kept)], eps)),
                   name=op)
