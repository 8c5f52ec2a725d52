"""Spatial resizing of NCHW images: resize (nearest, bilinear) and upsampling.

Source coordinates are rational functions of the output index, so they are computed
exactly in integer arithmetic: a source index is ``(a * dst + b) // c`` and a bilinear
weight is ``((a * dst + b) % c) / c`` with constants ``a, b, c`` (reduced by their
common divisor). Every index stays affine (``//`` and ``%`` by constants).

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((1, 1, 2, 2), dtype="float64", name="x")
>>> tg.evaluate(upsampling(x, 2), {x: np.arange(4.).reshape(1, 1, 2, 2)})[0, 0, 0].tolist()
[0.0, 0.0, 1.0, 1.0]
"""
from __future__ import annotations

from math import gcd

from ..api import cast
from ..errors import TegradError
from ..reduction import max as _max
from ..reduction import min as _min
from ..tensor import compute
from ._util import check_tensor, pair

__all__ = ["resize", "upsampling"]

_METHODS = ("nearest", "bilinear")


def _affine_floor(dst, scale, offset, den):
    """``(floor((scale * dst + offset) / den), ((scale * dst + offset) mod den, den))``
    with the fraction reduced and the numerator clamped at 0 if it can be negative."""
    g = gcd(gcd(scale, offset), den)
    scale, offset, den = scale // g, offset // g, den // g
    if scale == 0:
        num = max(offset, 0)
    else:
        num = dst if scale == 1 else dst * scale
        if offset > 0:
            num = num + offset
        elif offset < 0:
            num = _max(num - (-offset), 0)
    if den == 1:
        return num, None
    return num // den, (num % den, den)


def _nearest_index(dst, n_in, n_out):
    """PyTorch's ``nearest``: ``floor(dst * n_in / n_out)`` (exact, see :func:`resize`)."""
    return _affine_floor(dst, n_in, 0, n_out)[0]


def _linear_source(dst, n_in, n_out, align_corners):
    """``(i0, i1, frac)``: source ``src = i0 + frac`` of output ``dst`` (PyTorch's
    bilinear rule) and the next index ``i1 = min(i0 + 1, n_in - 1)``; ``frac`` is
    ``None`` where it is always zero."""
    if align_corners:
        # src = dst * (n_in - 1) / (n_out - 1), or 0 for a single output
        scale, offset, den = (n_in - 1, 0, n_out - 1) if n_out > 1 else (0, 0, 1)
    else:
        # src = max((dst + 1/2) * n_in / n_out - 1/2, 0)
        scale, offset, den = 2 * n_in, n_in - n_out, 2 * n_out
    i0, frac = _affine_floor(dst, scale, offset, den)
    if frac is None:
        return i0, None, None
    last = max(scale * (n_out - 1) + offset, 0) // den
    i1 = i0 + 1 if last + 1 < n_in else _min(i0 + 1, n_in - 1)
    return i0, i1, frac


def _lerp(a, b, frac, dtype):
    if frac is None:
        return a
    num, den = frac
    w = cast(num, dtype) / den
    return a + (b - a) * w


def resize(x, size, method="nearest", align_corners=False):
    """Resize the spatial dimensions of ``x`` (N, C, H, W) to ``size = (OH, OW)``,
    following PyTorch's ``F.interpolate``:

    - ``"nearest"``: ``out[n, c, y, x] = x[n, c, floor(y * H / OH), floor(x * W / OW)]``.
      The floor is exact here; PyTorch evaluates ``y * float32(H / OH)`` in float32,
      which picks the neighbouring pixel at a few positions for some sizes (e.g.
      H=14, OH=46). ``align_corners=True`` is an error with it, as in PyTorch.
    - ``"bilinear"``: ``src = y * (H-1)/(OH-1)`` with ``align_corners`` (0 when OH = 1),
      else ``src = max((y + 0.5) * H / OH - 0.5, 0)``; with ``y0 = floor(src)``,
      ``y1 = min(y0 + 1, H - 1)`` and ``t = src - y0`` the output interpolates
      ``(1-t) * x[y0] + t * x[y1]`` along both dimensions, i.e.
      ``a + (b - a) * t`` with the weight ``t`` an exact ratio of integers.
    """
    return _resize("resize", x, size, method, align_corners)


def _resize(op, x, size, method, align_corners):
    check_tensor(x, op, "x", ndim=4, float_only=(method == "bilinear"))
    out_h, out_w = pair(size, op, "size", 1)
    if method not in _METHODS:
        raise TegradError(f"{op}: method {method!r} is not supported; use one of "
                          f"{', '.join(map(repr, _METHODS))}")
    if not isinstance(align_corners, bool):
        raise TegradError(f"{op}: align_corners must be True or False, got {align_corners!r}")
    height, width = x.shape[2:]
    if method == "nearest":
        if align_corners:
            raise TegradError(f"{op}: align_corners=True only applies to the bilinear "
                              f"method, not 'nearest' (as PyTorch)")

        def nearest(nn, cc, yy, xx):
            return x[nn, cc, _nearest_index(yy, height, out_h),
                     _nearest_index(xx, width, out_w)]

        return compute((x.shape[0], x.shape[1], out_h, out_w), nearest, name=op)

    def bilinear(nn, cc, yy, xx):
        y0, y1, fy = _linear_source(yy, height, out_h, align_corners)
        x0, x1, fx = _linear_source(xx, width, out_w, align_corners)

        def row(iy):
            return _lerp(x[nn, cc, iy, x0], None if fx is None else x[nn, cc, iy, x1], fx,
                         x.dtype)

        return _lerp(row(y0), None if fy is None else row(y1), fy, x.dtype)

    return compute((x.shape[0], x.shape[1], out_h, out_w), bilinear, name=op)


def upsampling(x, scale=2, method="nearest", align_corners=False):
    """Upsample ``x`` (N, C, H, W) by integer factors ``scale`` (an int or ``(sh, sw)``)
    to ``(N, C, H * sh, W * sw)``, as Relay's ``nn.upsampling``: the same as
    :func:`resize` to that size, so nearest is ``out[.., y, x] = x[.., y // sh, x // sw]``
    and bilinear follows PyTorch's rule (``align_corners`` only applies to bilinear)."""
    op = "upsampling"
    check_tensor(x, op, "x", ndim=4, float_only=False)
    sh, sw = pair(scale, op, "scale", 1)
    return _resize(op, x, (x.shape[2] * sh, x.shape[3] * sw), method, align_corners)
