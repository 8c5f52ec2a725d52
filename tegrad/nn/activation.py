"""Activations: relu, leaky_relu, prelu, gelu, silu, softplus, softmax and log_softmax.

Elementwise activations are one compute stage each, named after the operator. The
softmaxes reduce along one axis in two stages (the maximum, then the sum of
``exp(x - max)``) so that no exponential overflows, and a final elementwise stage.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((2, 3), dtype="float64", name="x")
>>> tg.evaluate(relu(x), {x: np.array([[-1., 0., 2.], [3., -4., 5.]])}).tolist()
[[0.0, 0.0, 2.0], [3.0, 0.0, 5.0]]
"""
from __future__ import annotations

import math

from tegrad.ir.builders import call, erf, exp, if_then_else, log, sigmoid, stop_gradient, tanh
from tegrad.ir.errors import TegradError
from tegrad.ir.reduction import max as _max
from tegrad.ir.reduction import reduce_axis
from tegrad.ir.reduction import sum as _sum
from tegrad.ir.tensor import compute
from tegrad.nn._util import channel_reader, check_number, check_tensor
from tegrad.ops.validation import normalize_axis

__all__ = ["relu", "leaky_relu", "prelu", "gelu", "silu", "softplus", "softmax",
           "log_softmax"]


def relu(x):
    """Rectified linear unit: ``relu(x) = max(x, 0)`` elementwise (as TOPI; any dtype)."""
    check_tensor(x, "relu", "x", float_only=False)
    return compute(x.shape, lambda *i: _max(x[i], 0), name="relu")


def leaky_relu(x, alpha=0.01):
    """``leaky_relu(x) = x if x > 0 else alpha * x`` elementwise (TOPI's select form)."""
    check_tensor(x, "leaky_relu", "x")
    alpha = check_number(alpha, "leaky_relu", "alpha")
    return compute(x.shape, lambda *i: if_then_else(x[i] > 0, x[i], x[i] * alpha),
                   name="leaky_relu")


def prelu(x, alpha, axis=1):
    """Parametric relu: ``out[..., c, ...] = x if x > 0 else alpha[c] * x``.

    ``alpha`` is a vector with one slope per index of ``axis`` (shape ``(C,)``), or a
    single slope shared by all channels (shape ``(1,)``, like PyTorch's default PReLU).
    """
    check_tensor(x, "prelu", "x")
    axis = normalize_axis(axis, x.ndim, "prelu: axis")
    slope = channel_reader(alpha, x.shape[axis], "prelu", "alpha", x)
    return compute(x.shape, lambda *i: if_then_else(x[i] > 0, x[i], x[i] * slope(i[axis])),
                   name="prelu")


def gelu(x, *, approximate="none"):
    """Gaussian error linear unit (PyTorch's ``F.gelu``), elementwise:

    ``approximate="none"``: ``x * Phi(x) = x / 2 * (1 + erf(x / sqrt(2)))``;
    ``approximate="tanh"``: ``x / 2 * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 x^3)))``.

    >>> import numpy as np, tegrad as tg
    >>> x = tg.placeholder((3,), dtype="float64", name="x")
    >>> np.round(tg.evaluate(gelu(x), {x: np.array([-1.0, 0.0, 2.0])}), 4).tolist()
    [-0.1587, 0.0, 1.9545]
    """
    check_tensor(x, "gelu", "x")
    # (x / 2 first, as PyTorch's kernels: x * (1 + erf) overflows for x above half the
    # largest float)
    if approximate == "none":
        def fn(v):
            return v * 0.5 * (erf(v * (1 / math.sqrt(2))) + 1)
    elif approximate == "tanh":
        def fn(v):
            return v * 0.5 * (tanh((v + v * v * v * 0.044715) * math.sqrt(2 / math.pi)) + 1)
    else:
        raise TegradError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
    return compute(x.shape, lambda *i: fn(x[i]), name="gelu")


def silu(x):
    """Sigmoid linear unit (swish, PyTorch's ``F.silu``): ``x * sigmoid(x)`` elementwise,
    the sigmoid computed without overflow.

    >>> import numpy as np, tegrad as tg
    >>> x = tg.placeholder((2,), dtype="float64", name="x")
    >>> np.round(tg.evaluate(silu(x), {x: np.array([-1.0, 2.0])}), 4).tolist()
    [-0.2689, 1.7616]
    """
    check_tensor(x, "silu", "x")
    return compute(x.shape, lambda *i: x[i] * sigmoid(x[i]), name="silu")


def softplus(x, *, beta=1, threshold=20):
    """``softplus(x) = log(1 + exp(beta x)) / beta``, and ``x`` itself where
    ``beta x > threshold`` (PyTorch's ``F.softplus``, the same defaults). ``log1p`` keeps
    the precision where ``exp(beta x)`` is tiny; the threshold keeps ``exp`` finite.

    >>> import numpy as np, tegrad as tg
    >>> x = tg.placeholder((3,), dtype="float64", name="x")
    >>> np.round(tg.evaluate(softplus(x), {x: np.array([-50.0, 0.0, 30.0])}), 4).tolist()
    [0.0, 0.6931, 30.0]
    """
    check_tensor(x, "softplus", "x")
    beta = check_number(beta, "softplus", "beta")
    threshold = check_number(threshold, "softplus", "threshold")
    if beta == 0:
        raise TegradError("softplus: beta must be nonzero (it divides the result)")

    def fn(v):
        scaled = v if beta == 1 else v * beta
        smooth = call("log1p", exp(scaled))
        return if_then_else(scaled > threshold, v, smooth if beta == 1 else smooth / beta)

    return compute(x.shape, lambda *i: fn(x[i]), name="softplus")


def logsumexp_parts(x, axis, op):
    """The stages ``m = max_k x[.., k, ..]`` and ``s = sum_k exp(x[.., k, ..] - m)``.

    Both have the shape of ``x`` without ``axis`` (a scalar for a 1-D ``x``), and
    ``log(sum_k exp(x)) = m + log(s)`` without overflow. Returns ``(m, s, expand)``
    where ``expand(idx)`` drops ``axis`` from an index of ``x`` to index ``m`` and ``s``.
    """
    extent = x.shape[axis]
    shape = x.shape[:axis] + x.shape[axis + 1:]

    def full(idx, k):
        return idx[:axis] + (k,) + idx[axis:]

    def row_max(*idx):
        # log(sum_k exp(x_k - m)) + m does not depend on m: no gradient flows through it
        k = reduce_axis((0, extent), name="rmax")
        return stop_gradient(_max(x[full(idx, k)], axis=k))

    m = compute(shape, row_max, name=f"{op}_max")

    def row_sum(*idx):
        k = reduce_axis((0, extent), name="rsum")
        return _sum(exp(x[full(idx, k)] - m[idx]), axis=k)

    s = compute(shape, row_sum, name=f"{op}_sum")
    return m, s, lambda idx: idx[:axis] + idx[axis + 1:]


def softmax(x, axis=-1):
    """``softmax(x)[.., j, ..] = exp(x_j - m) / sum_k exp(x_k - m)`` along ``axis``,
    with ``m = max_k x_k`` subtracted for stability."""
    check_tensor(x, "softmax", "x")
    axis = normalize_axis(axis, x.ndim, "softmax: axis")
    m, s, drop = logsumexp_parts(x, axis, "softmax")
    return compute(x.shape, lambda *i: exp(x[i] - m[drop(i)]) / s[drop(i)], name="softmax")


def log_softmax(x, axis=-1):
    """``log_softmax(x)[.., j, ..] = x_j - m - log(sum_k exp(x_k - m))`` along ``axis``,
    with ``m = max_k x_k`` (the stable log-sum-exp)."""
    check_tensor(x, "log_softmax", "x")
    axis = normalize_axis(axis, x.ndim, "log_softmax: axis")
    m, s, drop = logsumexp_parts(x, axis, "log_softmax")
    return compute(x.shape, lambda *i: x[i] - m[drop(i)] - log(s[drop(i)]),
                   name="log_softmax")
