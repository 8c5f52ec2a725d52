"""Attention: scaled dot-product attention and multi-head attention.

The softmax over keys is written out in stages (the products ``q k``, the row maximum of
the scores, their exponentials, the row sum of those, the values weighted by the
exponentials, divided by the row sums: the probabilities are never stored) so that
a causal mask is a reduction mask (``where s <= t``): the masked half of every stage is
never visited, in the forward pass or in the gradient. A score is the product scaled
(and an additive mask added) where a stage reads it, not a stage of its own. A boolean
mask is a select (data-dependent).

>>> import numpy as np, tegrad as tg
>>> q = tg.placeholder((1, 2, 2), dtype="float64", name="q")
>>> v = tg.placeholder((1, 2, 2), dtype="float64", name="v")
>>> out = scaled_dot_product_attention(q, q, v, causal=True)
>>> tg.evaluate(out, {q: np.zeros((1, 2, 2)), v: np.array([[[1., 2.], [3., 4.]]])}).tolist()
[[[1.0, 2.0], [2.0, 3.0]]]
"""
from __future__ import annotations

import math

from tegrad.ir import dtypes as _dt
from tegrad.ir.builders import exp, if_then_else, stop_gradient
from tegrad.ir.errors import DTypeError, ShapeError, TegradError
from tegrad.ir.expr import Const
from tegrad.ir.reduction import max as _max
from tegrad.ir.reduction import reduce_axis
from tegrad.ir.reduction import sum as _sum
from tegrad.ir.tensor import Tensor, compute
from tegrad.nn._util import channel_reader, check_number, check_same_dtype, check_tensor
from tegrad.ops.broadcast import broadcast_index
from tegrad.ops.validation import check_int

__all__ = ["scaled_dot_product_attention", "multi_head_attention"]


def _mask_reader(op, mask, scores_shape, x):
    """``(kind, read)`` of a mask broadcastable to ``scores_shape`` (..., T, S): kind
    "bool" (True takes part) or "add" (added to the scores), ``read(index)`` its element."""
    check_tensor(mask, op, "mask", float_only=False)
    if mask.ndim > len(scores_shape) or any(
            m not in (1, s) for m, s in zip(mask.shape[::-1], scores_shape[::-1])):
        raise ShapeError(f"{op}: mask {mask.name!r} of shape {mask.shape} does not broadcast "
                         f"to the attention scores' shape {scores_shape}")
    if _dt.is_bool(mask.dtype):
        kind = "bool"
    elif _dt.is_float(mask.dtype):
        check_same_dtype(op, x, mask, "mask")
        kind = "add"
    else:
        raise DTypeError(f"{op}: mask {mask.name!r} has dtype {mask.dtype}; a bool mask "
                         f"(True takes part) or an additive float mask is needed")
    return kind, lambda idx: mask[broadcast_index(mask.shape, scores_shape, idx)]


def scaled_dot_product_attention(q, k, v, *, mask=None, causal=False, scale=None):
    """``softmax(q k^T * scale + mask) v`` over the last two axes (PyTorch's
    ``F.scaled_dot_product_attention`` with ``attn_mask=mask``, ``is_causal=causal``):

    ``out[..., t, e] = sum_s p[..., t, s] v[..., s, e]`` with
    ``p[..., t, s] = exp(a[t, s] - m[t]) / sum_s' exp(a[t, s'] - m[t])`` (computed as
    ``(sum_s x[t, s] v[s, e]) / sum_s x[t, s]`` of the stage ``x = exp(a - m)``),
    ``a[t, s] = scale * sum_d q[..., t, d] k[..., s, d]`` and ``m[t] = max_s a[t, s]``.

    ``q`` is ``(..., T, D)``, ``k`` ``(..., S, D)``, ``v`` ``(..., S, E)`` with equal
    leading axes; ``scale`` defaults to ``1 / sqrt(D)``. ``mask`` broadcasts to
    ``(..., T, S)``: a bool mask keeps the pairs where it is True, a float mask is added
    to the scores. ``causal`` keeps ``s <= t`` (top-left aligned, as PyTorch). A row whose
    mask keeps no key (all False, or all -inf) gives zeros, as PyTorch.
    """
    op = "scaled_dot_product_attention"
    for what, t in (("q", q), ("k", k), ("v", v)):
        check_tensor(t, op, what)
        if t.ndim < 2:
            raise ShapeError(f"{op}: {what} {t.name!r} of shape {t.shape} needs at least "
                             f"two axes (..., length, features)")
    check_same_dtype(op, q, k, "k")
    check_same_dtype(op, q, v, "v")
    lead = q.shape[:-2]
    if k.shape[:-2] != lead or v.shape[:-2] != lead:
        raise ShapeError(f"{op}: q {q.name!r}, k {k.name!r} and v {v.name!r} have shapes "
                         f"{q.shape}, {k.shape} and {v.shape}; their leading axes must be "
                         f"equal")
    if k.shape[-1] != q.shape[-1]:
        raise ShapeError(f"{op}: k {k.name!r} has {k.shape[-1]} features per key but q "
                         f"{q.name!r} has {q.shape[-1]}")
    if v.shape[-2] != k.shape[-2]:
        raise ShapeError(f"{op}: v {v.name!r} has {v.shape[-2]} values but k {k.name!r} "
                         f"has {k.shape[-2]} keys")
    if not isinstance(causal, bool):
        raise TegradError(f"{op}: causal must be True or False, got {causal!r}")
    (T, D), S, E = q.shape[-2:], k.shape[-2], v.shape[-1]
    scale = 1 / math.sqrt(D) if scale is None else check_number(scale, op, "scale")
    scores_shape = lead + (T, S)
    kind, read_mask = (None, None) if mask is None else _mask_reader(op, mask, scores_shape, q)

    def kept(t, s):
        """The affine condition of the causal mask (None: every key)."""
        return s <= t if causal else None

    def products_body(*i):
        b, t, s = i[:-2], i[-2], i[-1]
        d = reduce_axis((0, D), name="rd")
        return _sum(q[b + (t, d)] * k[b + (s, d)], axis=d, where=kept(t, s))

    products = compute(scores_shape, products_body, name=f"{op}_scores")

    def scores(i):
        """The score of pair ``i``, scaled and masked where it is read: a stage of its
        own would be one more pass over every pair, in the forward and the gradient."""
        a = products[i]
        a = a if scale == 1 else a * scale
        return a + read_mask(i) if kind == "add" else a

    lowest = Const(float("-inf"), q.dtype)

    def visible(i, value, hidden):
        return if_then_else(read_mask(i), value, hidden) if kind == "bool" else value

    def row_max(*i):
        s = reduce_axis((0, S), name="rs")
        full = i + (s,)
        # the softmax does not depend on the maximum subtracted: no gradient through it
        return stop_gradient(_max(visible(full, scores(full), lowest), axis=s,
                                  where=kept(i[-1], s)))

    m = compute(lead + (T,), row_max, name=f"{op}_max")
    zero = Const(0, q.dtype)

    def shift(row):
        """The maximum subtracted in ``row``; with a mask, 0 where it keeps no key (the
        maximum is -inf): the row's exponentials are then 0, not NaN."""
        return m[row] if mask is None else if_then_else(m[row] == lowest, zero, m[row])

    def exps_body(*i):
        e = visible(i, exp(scores(i) - shift(i[:-1])), zero)
        return if_then_else(i[-1] <= i[-2], e, zero) if causal else e

    # the softmax's numerators: its gradient reads them (d exp = exp), not the scores,
    # and no probabilities are stored: the weighted sum of the values is divided by the
    # row sum once per output instead (the division distributes over the sum)
    exps = compute(scores_shape, exps_body, name=f"{op}_exp")

    def row_sum(*i):
        s = reduce_axis((0, S), name="rs")
        return _sum(exps[i + (s,)], axis=s, where=kept(i[-1], s))

    total = compute(lead + (T,), row_sum, name=f"{op}_sum")

    def weighted_body(*i):
        b, t, e = i[:-2], i[-2], i[-1]
        s = reduce_axis((0, S), name="rs")
        return _sum(exps[b + (t, s)] * v[b + (s, e)], axis=s, where=kept(t, s))

    weighted = compute(lead + (T, E), weighted_body, name=f"{op}_weighted")

    def out_body(*i):
        value = weighted[i] / total[i[:-1]]
        # a row keeping no key sums to 0: its output is 0, as PyTorch's
        return value if mask is None else if_then_else(total[i[:-1]] == 0, zero, value)

    return compute(lead + (T, E), out_body, name=op)


def _projection(op, x, w, b, heads, what):
    """``x (N, L, E_in) @ w^T + b`` laid out by heads: ``(N, H, L, E_out / H)``."""
    check_tensor(w, op, f"w_{what}", ndim=2)
    check_same_dtype(op, x, w, f"w_{what}")
    if w.shape[1] != x.shape[-1]:
        raise ShapeError(f"{op}: w_{what} {w.name!r} of shape {w.shape} expects "
                         f"{w.shape[1]} input features but {x.name!r} has {x.shape[-1]}")
    if w.shape[0] % heads:
        raise ShapeError(f"{op}: num_heads={heads} does not divide the {w.shape[0]} "
                         f"output features of w_{what} {w.name!r}")
    per_head = w.shape[0] // heads
    bias = None if b is None else channel_reader(b, w.shape[0], op, f"b_{what}", x)

    def body(n, h, t, d):
        r = reduce_axis((0, x.shape[-1]), name="re")
        row = h * per_head + d
        acc = _sum(x[n, t, r] * w[row, r], axis=r)
        return acc if bias is None else acc + bias(row)

    return compute((x.shape[0], heads, x.shape[1], per_head), body, name=f"{op}_{what}")


def multi_head_attention(query, key, value, w_q, w_k, w_v, w_o, *, num_heads, b_q=None,
                         b_k=None, b_v=None, b_o=None, mask=None, causal=False):
    """Multi-head attention, batch first (PyTorch's ``nn.MultiheadAttention`` with
    ``batch_first=True``, its ``in_proj_weight`` split into ``w_q, w_k, w_v``):

    ``head_h = scaled_dot_product_attention(Q_h, K_h, V_h, mask=mask, causal=causal)``
    with ``Q = query w_q^T + b_q`` split into ``num_heads`` heads of ``E / num_heads``
    features (likewise ``K`` from ``key``, ``V`` from ``value``), and
    ``out = concat_h(head_h) w_o^T + b_o``.

    ``query`` is ``(N, T, E)``, ``key`` and ``value`` ``(N, S, E_k)`` and ``(N, S, E_v)``;
    ``w_q`` and ``w_k`` are ``(E, E)`` and ``(E, E_k)``, ``w_v`` ``(E, E_v)``, ``w_o``
    ``(E, E)`` (dense layout: ``(out, in)``); biases ``(E,)`` or None. ``mask`` broadcasts
    to ``(N, num_heads, T, S)`` (bool: True takes part; float: added). The heads are
    index arithmetic on the projections' stages, no reshape copies. Returns ``(N, T, E)``.
    """
    op = "multi_head_attention"
    heads = check_int(num_heads, f"{op}: num_heads", minimum=1)
    for what, t in (("query", query), ("key", key), ("value", value)):
        check_tensor(t, op, what, ndim=3)
        check_same_dtype(op, query, t, what)
    if key.shape[:2] != value.shape[:2] or key.shape[0] != query.shape[0]:
        raise ShapeError(f"{op}: query {query.shape}, key {key.shape} and value "
                         f"{value.shape} need one batch, and key and value one length")
    qh = _projection(op, query, w_q, b_q, heads, "q")
    kh = _projection(op, key, w_k, b_k, heads, "k")
    vh = _projection(op, value, w_v, b_v, heads, "v")
    if qh.shape[-1] != kh.shape[-1]:
        raise ShapeError(f"{op}: w_q {w_q.name!r} and w_k {w_k.name!r} must give as many "
                         f"features, got {w_q.shape[0]} and {w_k.shape[0]}")
    att = scaled_dot_product_attention(qh, kh, vh, mask=mask, causal=causal)
    check_tensor(w_o, op, "w_o", ndim=2)
    check_same_dtype(op, query, w_o, "w_o")
    per_head = vh.shape[-1]
    if w_o.shape[1] != heads * per_head:
        raise ShapeError(f"{op}: w_o {w_o.name!r} of shape {w_o.shape} expects {w_o.shape[1]} "
                         f"input features but the heads give {heads * per_head}")
    bias = None if b_o is None else channel_reader(b_o, w_o.shape[0], op, "b_o", query)

    def body(n, t, o):
        h = reduce_axis((0, heads), name="rh")
        d = reduce_axis((0, per_head), name="rd")
        acc = _sum(att[n, h, t, d] * w_o[o, h * per_head + d], axis=[h, d])
        return acc if bias is None else acc + bias(o)

    return compute((query.shape[0], query.shape[1], w_o.shape[0]), body, name=op)
