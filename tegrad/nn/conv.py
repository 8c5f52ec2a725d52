"""1-D and 2-D convolution and 2-D transposed convolution (NCL / NCHW data, OIL / OIHW
weights).

Each layer is one compute stage whose reduction reads the input at affine indices
(``y * stride + ry * dilation - pad``); zero padding is a ``where=`` mask on the
reduction, never a padded copy of the input.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((1, 1, 4, 4), dtype="float64", name="x")
>>> w = tg.placeholder((1, 1, 3, 3), dtype="float64", name="w")
>>> tg.evaluate(conv2d(x, w, padding=1), {x: np.ones((1, 1, 4, 4)),
...                                       w: np.ones((1, 1, 3, 3))})[0, 0, 0].tolist()
[4.0, 6.0, 6.0, 4.0]
"""
from __future__ import annotations

from tegrad.ir.errors import ShapeError, TegradError
from tegrad.ir.reduction import reduce_axis
from tegrad.ir.reduction import sum as _sum
from tegrad.ir.tensor import compute
from tegrad.nn._util import (check_same_dtype, check_tensor, check_window, in_bounds, ints, pair,
                             side_pads, sliding_output, sliding_window, where_of)
from tegrad.ops.validation import check_int

__all__ = ["conv1d", "conv2d", "conv2d_transpose"]


def _check_inputs(op, x, w, ndim=4):
    check_tensor(x, op, "x", ndim=ndim)
    check_tensor(w, op, "weight", ndim=ndim)
    check_same_dtype(op, x, w, "weight")


_DIMS = {1: ("length",), 2: ("height", "width")}


def _convolution(op, nd, x, w, stride, padding, dilation, groups):
    """The grouped convolution of ``x (N, C, *S)`` with ``w (O, C/G, *K)`` over its
    ``len(S)`` spatial dimensions: one stage, padding as reduction masks."""
    _check_inputs(op, x, w, nd + 2)
    strides = ints(stride, op, "stride", nd, 1)
    pads = side_pads(padding, op, nd)
    dilations = ints(dilation, op, "dilation", nd, 1)
    groups = check_int(groups, f"{op}: groups", minimum=1)
    n_batch, channels, sizes = x.shape[0], x.shape[1], x.shape[2:]
    out_channels, group_channels, kernels = w.shape[0], w.shape[1], w.shape[2:]
    if channels % groups:
        raise ShapeError(f"{op}: groups={groups} does not divide the {channels} input "
                         f"channel(s) of x {x.name!r}")
    if out_channels % groups:
        raise ShapeError(f"{op}: groups={groups} does not divide the {out_channels} output "
                         f"channel(s) of weight {w.name!r}")
    if group_channels * groups != channels:
        raise ShapeError(f"{op}: weight {w.name!r} of shape {w.shape} has {group_channels} "
                         f"input channel(s) per group, but x {x.name!r} has {channels} "
                         f"channel(s) in {groups} group(s) ({channels // groups} per group)")
    out_sizes = []
    for d, dim in enumerate(_DIMS[nd]):
        check_window(op, x, sizes[d], kernels[d], dilations[d], pads[d], dim)
        out_sizes.append(sliding_output(sizes[d], kernels[d], strides[d], pads[d],
                                        dilations[d]))
    per_group_out = out_channels // groups

    def input_channel(ff, rc):
        if groups == 1:
            return rc
        group = ff if per_group_out == 1 else ff // per_group_out
        return (group if group_channels == 1 else group * group_channels) + rc

    def element(nn, ff, *out):
        rc = reduce_axis((0, group_channels), name="rc")
        taps = [reduce_axis((0, k), name=f"r{'yx'[d] if nd == 2 else 'l'}")
                for d, k in enumerate(kernels)]
        index, conds = [], []
        for d in range(nd):
            i, c = sliding_window(out[d], taps[d], out_sizes[d], kernels[d], strides[d],
                                  dilations[d], pads[d][0], sizes[d])
            index.append(i)
            conds += c
        return _sum(x[(nn, input_channel(ff, rc), *index)] * w[(ff, rc, *taps)],
                    axis=[rc, *taps], where=where_of(conds))

    # the axes are named after the parameters
    if nd == 1:
        def body(nn, ff, xx):
            return element(nn, ff, xx)
    else:
        def body(nn, ff, yy, xx):
            return element(nn, ff, yy, xx)
    return compute((n_batch, out_channels, *out_sizes), body, name=op)


def conv1d(x, w, *, stride=1, padding=0, dilation=1, groups=1):
    """1-D convolution (cross-correlation, PyTorch's ``F.conv1d``):

    ``out[n, f, t] = sum_{rc, rl} xp[n, g(f) * C/G + rc, t*s + rl*d - left] * w[f, rc, rl]``
    with ``xp`` the input padded with zeros and ``g(f) = f // (O/G)``.

    ``x`` is ``(N, C, L)``, ``w`` is ``(O, C/G, K)``; ``stride`` and ``dilation`` are
    ints; ``padding`` an int (both sides) or ``(left, right)`` (the parser of every
    layer's padding, :func:`tegrad.nn._util.side_pads`): ``padding=(d*(K-1), 0)``
    is a causal convolution, without a padded copy. The output is ``(N, O, OL)`` with
    ``OL = (L + left + right - d(K-1) - 1) // s + 1``.

    >>> import numpy as np, tegrad as tg
    >>> x = tg.placeholder((1, 1, 4), dtype="float64", name="x")
    >>> w = tg.placeholder((1, 1, 2), dtype="float64", name="w")
    >>> tg.evaluate(conv1d(x, w, padding=(1, 0)), {x: np.array([[[1., 2., 3., 4.]]]),
    ...                                             w: np.ones((1, 1, 2))}).tolist()
    [[[1.0, 3.0, 5.0, 7.0]]]
    """
    return _convolution("conv1d", 1, x, w, stride, padding, dilation, groups)


def conv2d(x, w, stride=1, padding=0, dilation=1, groups=1):
    """2-D convolution (cross-correlation, as PyTorch and Relay):

    ``out[n, f, y, x] = sum_{rc, ry, rx} xp[n, g(f) * C/G + rc, y*sh + ry*dh - top,
    x*sw + rx*dw - left] * w[f, rc, ry, rx]`` with ``xp`` the input padded with zeros,
    ``g(f) = f // (O/G)`` the group of output channel ``f`` and ``G = groups``.

    ``x`` is ``(N, C, H, W)``, ``w`` is ``(O, C/G, KH, KW)``; ``stride`` and
    ``dilation`` are ints or ``(h, w)`` pairs; ``padding`` an int, an ``(h, w)`` pair
    (both sides alike) or per side ``((top, bottom), (left, right))``. The output is
    ``(N, O, OH, OW)`` with ``OH = (H + top + bottom - dh(KH-1) - 1) // sh + 1``.
    """
    return _convolution("conv2d", 2, x, w, stride, padding, dilation, groups)


def conv2d_transpose(x, w, stride=1, padding=0, output_padding=0, dilation=1):
    """2-D transposed convolution (the gradient of conv2d with respect to its input),
    with PyTorch's ``conv_transpose2d`` semantics:

    ``out[n, o, y, x] = sum_{c, ky, kx} x[n, c, iy, ix] * w[c, o, ky, kx]`` over the taps
    with ``iy * sh = y + top - ky * dh`` (and the same for x) for an integer
    ``0 <= iy < H``; written as ``iy = (y + top - ky*dh) // sh`` masked by
    ``(y + top - ky*dh) % sh == 0`` (no dilated copy of the input is made).

    ``x`` is ``(N, C, H, W)`` and ``w`` is ``(C, O, KH, KW)``; ``padding`` (an int, an
    ``(h, w)`` pair or per side ``((top, bottom), (left, right))``) crops the full
    output, so the output is ``(N, O, OH, OW)`` with
    ``OH = (H - 1) sh - top - bottom + dh (KH - 1) + oph + 1``: per side, the adjoint of
    ``conv2d`` with that padding. ``output_padding`` must be smaller than the stride or
    the dilation (as PyTorch).
    """
    op = "conv2d_transpose"
    _check_inputs(op, x, w)
    strides = pair(stride, op, "stride", 1)
    pads = side_pads(padding, op, 2)
    extra = pair(output_padding, op, "output_padding", 0)
    dilations = pair(dilation, op, "dilation", 1)
    n_batch, channels, height, width = x.shape
    in_channels, out_channels, kh, kw = w.shape
    if in_channels != channels:
        raise ShapeError(f"{op}: weight {w.name!r} of shape {w.shape} expects {in_channels} "
                         f"input channel(s) but x {x.name!r} has {channels}")
    sizes, kernels = (height, width), (kh, kw)
    out_hw = []
    for d, dim in enumerate(("height", "width")):
        if extra[d] >= strides[d] and extra[d] >= dilations[d]:
            raise TegradError(f"{op}: output_padding {extra[d]} along {dim} must be smaller "
                              f"than either the stride ({strides[d]}) or the dilation "
                              f"({dilations[d]})")
        before, after = pads[d]
        size = ((sizes[d] - 1) * strides[d] - before - after
                + dilations[d] * (kernels[d] - 1) + extra[d] + 1)
        if size <= 0:
            shown = before if before == after else pads[d]
            raise ShapeError(f"{op}: padding {shown} along {dim} leaves no output for x "
                             f"{x.name!r} of shape {x.shape} (output size {size})")
        out_hw.append(size)

    def source(out, tap, d):
        """The input index feeding output ``out`` through ``tap`` and its conditions."""
        s, dil, p = strides[d], dilations[d], pads[d][0]
        t = out - (tap if dil == 1 else tap * dil)
        t = t + p if p else t
        lowest, highest = p - dil * (kernels[d] - 1), out_hw[d] - 1 + p
        conds = in_bounds(t, sizes[d] * s, lowest, highest)
        if s == 1:
            return t, conds
        return t // s, [t % s == 0] + conds

    def body(nn, ff, yy, xx):
        rc = reduce_axis((0, channels), name="rc")
        ry = reduce_axis((0, kh), name="ry")
        rx = reduce_axis((0, kw), name="rx")
        iy, cy = source(yy, ry, 0)
        ix, cx = source(xx, rx, 1)
        return _sum(x[nn, rc, iy, ix] * w[rc, ff, ry, rx], axis=[rc, ry, rx],
                    where=where_of(cy + cx))

    return compute((n_batch, out_channels, out_hw[0], out_hw[1]), body, name=op)
