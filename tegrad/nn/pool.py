"""2-D max and average pooling (NCHW), windowed and global.

Windows follow PyTorch: ``stride`` defaults to the kernel, and with ``ceil_mode`` the
output size is rounded up as long as the last window starts inside the input or the
``before`` padding (PyTorch's ``pooling_output_shape_pad_lr``). ``padding`` is an int,
an ``(h, w)`` pair or per side ``((top, bottom), (left, right))``, parsed by
:func:`tegrad.nn._util.side_pads`: ``((k - 1, 0), ...)`` pools causally without a padded
copy. Each output equals that of pooling, without padding, the input padded explicitly
(where ``ceil_mode`` could add a last window starting in the ``after`` padding, which
is not made here): padded with ``-inf`` for max pooling, and for average pooling with
zeros and divided, with ``count_include_pad``, by the number of taps inside the padded
input ``[-before, size + after)`` (the padding PyTorch's ``count_include_pad`` counts),
otherwise by the number inside the input.

PyTorch's pools take only symmetric padding of at most half the kernel; here any
padding is accepted as long as every window holds an input element. A window of
padding only (a first window starting ``d(k-1) + 1`` or more taps early, a dilated
window skipping the input, ...) is an error rather than a ``-inf`` or 0/0 output.

Each layer is one stage whose reduction is masked (``where=``) to the taps inside the
input: for max pooling the masked taps act as ``-inf`` padding (the identity of
``max``), for average pooling as zeros, and the divisor is an affine-arithmetic count
of the taps.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((1, 1, 4, 4), dtype="float64", name="x")
>>> tg.evaluate(max_pool2d(x, 2), {x: np.arange(16.).reshape(1, 1, 4, 4)})[0, 0].tolist()
[[5.0, 7.0], [13.0, 15.0]]
"""
from __future__ import annotations

from tegrad.ir.builders import cast
from tegrad.ir.errors import TegradError
from tegrad.ir.reduction import max as _max
from tegrad.ir.reduction import min as _min
from tegrad.ir.reduction import reduce_axis
from tegrad.ir.reduction import sum as _sum
from tegrad.ir.tensor import compute
from tegrad.nn._util import (check_tensor, check_window, pair, side_pads, sliding_output,
                             sliding_window, where_of)

__all__ = ["max_pool2d", "avg_pool2d", "global_max_pool2d", "global_avg_pool2d"]


class _Window:
    """Checked pooling attributes of one call and the output size."""

    def __init__(self, op, x, kernel, stride, padding, dilation, ceil_mode):
        self.kernel = pair(kernel, op, "kernel", 1)
        self.stride = self.kernel if stride is None else pair(stride, op, "stride", 1)
        #: ``(before, after)`` per dimension
        self.pads = side_pads(padding, op, 2)
        self.dilation = pair(dilation, op, "dilation", 1)
        if not isinstance(ceil_mode, bool):
            raise TegradError(f"{op}: ceil_mode must be True or False, got {ceil_mode!r}")
        self.size = x.shape[2:]
        self.out = []
        for d, dim in enumerate(("height", "width")):
            k, pads = self.kernel[d], self.pads[d]
            check_window(op, x, self.size[d], k, self.dilation[d], pads, dim)
            self.out.append(sliding_output(self.size[d], k, self.stride[d], pads,
                                           self.dilation[d], ceil_mode))
            self._check_no_empty_window(op, x, d, dim)

    def _check_no_empty_window(self, op, x, d, dim):
        """Every window must hold an input element. One starting inside the input does; one
        starting in the padding may not (a side padded too much, or a dilated window
        stepping over the input)."""
        k, s, dil, (before, after) = (self.kernel[d], self.stride[d], self.dilation[d],
                                      self.pads[d])
        for o in range(self.out[d]):
            start = o * s - before
            if 0 <= start < self.size[d]:
                continue
            if not any(0 <= start + r * dil < self.size[d] for r in range(k)):
                raise TegradError(f"{op}: window {o} of {x.name!r} along {dim} (taps "
                                  f"{start}, {start + dil}, ... with dilation {dil}) holds "
                                  f"no input element, only padding ({before} before, "
                                  f"{after} after)")

    def tap(self, out, r, d):
        """Input index of output ``out``, tap ``r`` along dim ``d``, and its bounds."""
        return sliding_window(out, r, self.out[d], self.kernel[d], self.stride[d],
                              self.dilation[d], self.pads[d][0], self.size[d])

    def count(self, out, d, lo, hi):
        """The number of taps of window ``out`` along ``d`` with an index in ``[lo, hi)``.

        Taps ``r`` in ``[0, k)`` with ``lo <= start + r*dil < hi`` (``start = out*s - p``,
        ``p`` the ``before`` padding):
        ``min(k-1, (hi-1-start) // dil) - max(0, ceil((lo-start) / dil)) + 1``; each clamp
        is kept only if some window needs it, so the count is often a Python int.
        """
        k, s, dil, p = self.kernel[d], self.stride[d], self.dilation[d], self.pads[d][0]
        scaled = out if s == 1 else out * s  # the window starts at scaled - p
        high = k - 1
        if (self.out[d] - 1) * s - p + (k - 1) * dil >= hi:
            room = (hi - 1 + p) - scaled
            high = _min(k - 1, room if dil == 1 else room // dil)
        low = 0
        if -p < lo:
            # the first tap inside is ceil((lo - start) / dil) = -((start - lo) // dil)
            low = _max(0, (lo + p) - scaled if dil == 1 else -((scaled - (lo + p)) // dil))
        return high - low + 1


def _pool_input(op, x, float_only):
    check_tensor(x, op, "x", ndim=4, float_only=float_only)


def max_pool2d(x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False,
               count_include_pad=True):
    """2-D max pooling: ``out[n, c, y, x] = max_{ry, rx} x[n, c, y*sh + ry*dh - top,
    x*sw + rx*dw - left]`` over the taps inside the input (padding is ``-inf``, as
    PyTorch). ``count_include_pad`` only concerns average pooling and is ignored.

    >>> import numpy as np, tegrad as tg
    >>> x = tg.placeholder((1, 1, 1, 4), dtype="float64", name="x")
    >>> causal = max_pool2d(x, (1, 3), stride=1, padding=((0, 0), (2, 0)))
    >>> tg.evaluate(causal, {x: np.array([[[[3., 1., 2., 0.]]]])}).tolist()
    [[[[3.0, 3.0, 3.0, 2.0]]]]
    """
    op = "max_pool2d"
    _pool_input(op, x, float_only=False)
    win = _Window(op, x, kernel, stride, padding, dilation, ceil_mode)

    def body(nn, cc, yy, xx):
        ry = reduce_axis((0, win.kernel[0]), name="ry")
        rx = reduce_axis((0, win.kernel[1]), name="rx")
        iy, cy = win.tap(yy, ry, 0)
        ix, cx = win.tap(xx, rx, 1)
        return _max(x[nn, cc, iy, ix], axis=[ry, rx], where=where_of(cy + cx))

    return compute(x.shape[:2] + tuple(win.out), body, name=op)


def avg_pool2d(x, kernel, stride=None, padding=0, dilation=1, ceil_mode=False,
               count_include_pad=True):
    """2-D average pooling: ``out[n, c, y, x] = sum_{ry, rx} x[n, c, y*sh + ry*dh - top,
    x*sw + rx*dw - left] / count`` over the taps inside the input.

    As PyTorch, ``count`` is the number of taps inside the padded input
    ``[-before, size + after)`` with ``count_include_pad`` (so a window that
    ``ceil_mode`` lets run past the ``after`` padding is not divided by the full kernel
    size), and the number inside the input otherwise. PyTorch has no dilated average
    pooling; here dilation counts taps alike.

    >>> import numpy as np, tegrad as tg
    >>> x = tg.placeholder((1, 1, 1, 3), dtype="float64", name="x")
    >>> v = {x: np.array([[[[3., 6., 9.]]]])}
    >>> [tg.evaluate(avg_pool2d(x, (1, 2), 1, ((0, 0), (1, 0)), count_include_pad=c), v)
    ...  .ravel().tolist() for c in (True, False)]
    [[1.5, 4.5, 7.5], [3.0, 4.5, 7.5]]
    """
    op = "avg_pool2d"
    _pool_input(op, x, float_only=True)
    if not isinstance(count_include_pad, bool):
        raise TegradError(f"{op}: count_include_pad must be True or False, got "
                          f"{count_include_pad!r}")
    win = _Window(op, x, kernel, stride, padding, dilation, ceil_mode)

    def divisor(yy, xx):
        counts = []
        for d, out in enumerate((yy, xx)):
            before, after = win.pads[d] if count_include_pad else (0, 0)
            counts.append(win.count(out, d, -before, win.size[d] + after))
        total = counts[0] * counts[1]
        return total if isinstance(total, int) else cast(total, x.dtype)

    def body(nn, cc, yy, xx):
        ry = reduce_axis((0, win.kernel[0]), name="ry")
        rx = reduce_axis((0, win.kernel[1]), name="rx")
        iy, cy = win.tap(yy, ry, 0)
        ix, cx = win.tap(xx, rx, 1)
        total = _sum(x[nn, cc, iy, ix], axis=[ry, rx], where=where_of(cy + cx))
        return total / divisor(yy, xx)

    return compute(x.shape[:2] + tuple(win.out), body, name=op)


def _global(op, x, reducer, scale):
    n_batch, channels, height, width = x.shape

    def body(nn, cc, i, j):
        ry = reduce_axis((0, height), name="ry")
        rx = reduce_axis((0, width), name="rx")
        out = reducer(x[nn, cc, ry, rx], axis=[ry, rx])
        return out if scale is None else out * scale

    return compute((n_batch, channels, 1, 1), body, name=op)


def global_max_pool2d(x):
    """``out[n, c, 0, 0] = max_{y, x} x[n, c, y, x]``; the output is ``(N, C, 1, 1)``
    like Relay's ``nn.global_max_pool2d``."""
    _pool_input("global_max_pool2d", x, float_only=False)
    return _global("global_max_pool2d", x, _max, None)


def global_avg_pool2d(x):
    """``out[n, c, 0, 0] = sum_{y, x} x[n, c, y, x] / (H * W)``; the output is
    ``(N, C, 1, 1)`` like Relay's ``nn.global_avg_pool2d``."""
    _pool_input("global_avg_pool2d", x, float_only=True)
    return _global("global_avg_pool2d", x, _sum, 1.0 / (x.shape[2] * x.shape[3]))
