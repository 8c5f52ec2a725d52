"""Spatial resizing of NCHW images: resize (nearest, bilinear) and upsampling.

Source coordinates are rational functions of the output index, so they are computed
exactly in integer arithmetic: a source index is ``(a * dst + b) // c`` and a bilinear
weight is ``((a * dst + b) % c) / c`` with constants ``a, b, c`` (reduced by their
common divisor). Every index stays affine (``//`` and ``%`` by constants): the clamps of
bilinear sampling at the borders are selects on affine conditions, not min/max.

>>> import numpy as np, tegrad as tg
>>> x = tg.placeholder((1, 1, 2, 2), dtype="float64", name="x")
>>> tg.evaluate(upsampling(x, 2), {x: np.arange(4.).reshape(1, 1, 2, 2)})[0, 0, 0].tolist()
[0.0, 0.0, 1.0, 1.0]
"""
from __future__ import annotations

from math import gcd

from tegrad.ir.builders import cast, if_then_else
from tegrad.ir.errors import TegradError
from tegrad.ir.tensor import compute
from tegrad.nn._util import check_tensor, pair

__all__ = ["resize", "upsampling"]

_METHODS = ("nearest", "bilinear")


def _reduced_numerator(dst, scale, offset, den):
    """``(num, den)`` with ``num = scale * dst + offset`` after dividing all three
    constants by their common divisor (a Python int when ``scale`` is 0)."""
    g = gcd(gcd(scale, offset), den)
    scale, offset, den = scale // g, offset // g, den // g
    if scale == 0:
        return offset, den
    num = dst if scale == 1 else dst * scale
    if offset > 0:
        num = num + offset
    elif offset < 0:
        num = num - (-offset)
    return num, den


def _nearest_index(dst, n_in, n_out):
    """PyTorch's ``nearest``: ``floor(dst * n_in / n_out)`` (exact, see :func:`resize`)."""
    num, den = _reduced_numerator(dst, n_in, 0, n_out)
    return num if den == 1 else num // den


def _linear_pieces(dst, n_in, n_out, align_corners):
    """PyTorch's linear source of output ``dst`` as pieces ``(condition, i0, frac)``:
    the sample is ``x[i0]`` if ``frac`` is None, else ``x[i0] + (x[i0+1] - x[i0]) * frac``
    with ``frac = (num % den) / den``; the first piece whose condition holds applies
    (the last one has the condition None).

    With ``src = num / den`` (``num`` affine in ``dst``) the interior piece has
    ``i0 = num // den``; clamping ``src`` at 0 and ``i0 + 1`` at ``n_in - 1`` are
    separate pieces selected by affine conditions, so no index needs a min or max.
    """
    if align_corners:
        # src = dst * (n_in - 1) / (n_out - 1), or 0 for a single output
        scale, offset, den = (n_in - 1, 0, n_out - 1) if n_out > 1 else (0, 0, 1)
    else:
        # src = max((dst + 1/2) * n_in / n_out - 1/2, 0)
        scale, offset, den = 2 * n_in, n_in - n_out, 2 * n_out
    reaches_last = scale * (n_out - 1) + offset >= (n_in - 1) * den
    num, den = _reduced_numerator(dst, scale, offset, den)
    if den == 1:
        return [(None, num, None)]
    pieces = []
    if offset < 0:
        pieces.append((num < 0, 0, None))
    if reaches_last:
        pieces.append((num >= (n_in - 1) * den, n_in - 1, None))
    pieces.append((None, num // den, (num % den, den)))
    return pieces


def _interpolate(pieces, sample, dtype):
    """The linear interpolation along one dimension of ``sample(index)``."""
    out = None
    for cond, i0, frac in reversed(pieces):
        value = sample(i0)
        if frac is not None:
            num, den = frac
            value = value + (sample(i0 + 1) - value) * (cast(num, dtype) / den)
        out = value if out is None else if_then_else(cond, value, out)
    return out


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
      ``(1-t) * x[y0] + t * x[y1]`` along both dimensions, computed as
      ``a + (b - a) * t`` with the weight ``t`` an exact ratio of integers (outputs whose
      source is clamped read the border pixel through a select).
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
        rows = _linear_pieces(yy, height, out_h, align_corners)
        cols = _linear_pieces(xx, width, out_w, align_corners)
        return _interpolate(rows, lambda iy: _interpolate(
            cols, lambda ix: x[nn, cc, iy, ix], x.dtype), x.dtype)

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
