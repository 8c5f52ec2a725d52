"""Fully connected layer and per-channel bias.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((2, 3), dtype="float64", name="x")
>>> w = tg.placeholder((4, 3), dtype="float64", name="w")
>>> tg.evaluate(dense(x, w), {x: np.ones((2, 3)), w: np.ones((4, 3))}).shape
(2, 4)
"""
from __future__ import annotations

from tegrad.ir.errors import ShapeError
from tegrad.ir.reduction import reduce_axis
from tegrad.ir.reduction import sum as _sum
from tegrad.ir.tensor import compute
from tegrad.nn._util import channel_reader, check_same_dtype, check_tensor
from tegrad.ops.validation import normalize_axis

__all__ = ["dense", "bias_add"]


def dense(x, w, bias=None):
    """``y[..., o] = sum_k x[..., k] * w[o, k] + bias[o]`` (Relay's ``nn.dense``: y = x w^T + b).

    ``x`` has shape ``(..., in)`` (any number of leading dimensions), ``w`` is
    ``(out, in)`` and the optional ``bias`` is ``(out,)`` (or ``(1,)``, broadcast).
    One stage named ``dense``; the bias is added in the same stage.
    """
    op = "dense"
    check_tensor(x, op, "x")
    if x.ndim < 1:
        raise ShapeError(f"{op}: x {x.name!r} is a scalar; it needs a last dimension of "
                         f"input features")
    check_tensor(w, op, "weight", ndim=2)
    check_same_dtype(op, x, w, "weight")
    units, features = w.shape
    if features != x.shape[-1]:
        raise ShapeError(f"{op}: weight {w.name!r} of shape {w.shape} expects {features} input "
                         f"feature(s) but x {x.name!r} of shape {x.shape} has "
                         f"{x.shape[-1]}")
    add = None if bias is None else channel_reader(bias, units, op, "bias", x)

    def body(*idx):
        k = reduce_axis((0, features), name="rk")
        acc = _sum(x[idx[:-1] + (k,)] * w[idx[-1], k], axis=k)
        return acc if add is None else acc + add(idx[-1])

    return compute(x.shape[:-1] + (units,), body, name=op)


def bias_add(x, b, axis=1):
    """``out[..., c, ...] = x[..., c, ...] + b[c]`` with ``c`` the index along ``axis``
    (Relay's ``nn.bias_add``); ``b`` has shape ``(C,)`` or ``(1,)`` (broadcast)."""
    op = "bias_add"
    check_tensor(x, op, "x")
    axis = normalize_axis(axis, x.ndim, f"{op}: axis")
    add = channel_reader(b, x.shape[axis], op, "bias", x)
    return compute(x.shape, lambda *i: x[i] + add(i[axis]), name=op)
