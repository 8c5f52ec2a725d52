"""Winograd convolution F(m x m, r x r) with a separate weight transform (as TOPI).

The transform matrices come from the Toom-Cook construction with the interpolation
points ``0, 1, -1, 2, -2, 1/2, -1/2, 3, -3`` and the point at infinity: with ``Vk`` the
``alpha x k`` evaluation matrix of a polynomial of ``k`` coefficients (row ``j`` holds
``a_j^0 .. a_j^(k-1)``, the last row picks the leading coefficient),
``G = V_r``, ``A^T = V_m^T`` and ``B^T = V_alpha^(-T)``, each row of ``B^T`` then scaled
to a primitive integer vector and the matching row of ``G`` divided by the same factor.
For F(2x2, 3x3) this gives Lavin's ``G = [[1,0,0], [1/2,1/2,1/2], [1/2,-1/2,1/2], [0,0,1]]``
and ``B^T = [[1,0,-1,0], [0,1,1,0], [0,-1,1,0], [0,-1,0,1]]``, ``A^T = [[1,1,1,0], [0,1,-1,1]]``.

>>> import numpy as np, tegrad as tg
>>> w = tg.placeholder((1, 1, 3, 3), dtype="float64", name="w")
>>> conv2d_winograd_weight_transform(w).shape
(4, 4, 1, 1)
"""
from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from math import gcd, lcm

from tegrad.ir.builders import all as _all
from tegrad.ir.builders import if_then_else
from tegrad.ir.errors import ShapeError, TegradError
from tegrad.ir.reduction import reduce_axis
from tegrad.ir.reduction import sum as _sum
from tegrad.ir.tensor import compute
from tegrad.nn._util import check_same_dtype, check_tensor, const, in_bounds, pair, where_of
from tegrad.ops.validation import check_int

__all__ = ["conv2d_winograd_weight_transform", "conv2d_winograd_without_weight_transform"]

_POINTS = tuple(Fraction(p) for p in ("0", "1", "-1", "2", "-2", "1/2", "-1/2", "3", "-3"))


def _evaluation_matrix(points, cols):
    rows = [[p ** k for k in range(cols)] for p in points]
    return rows + [[Fraction(int(k == cols - 1)) for k in range(cols)]]


def _inverse(matrix):
    """Gauss-Jordan inverse of a square matrix of Fractions."""
    n = len(matrix)
    rows = [list(row) + [Fraction(int(i == j)) for j in range(n)]
            for i, row in enumerate(matrix)]
    for c in range(n):
        pivot = next(r for r in range(c, n) if rows[r][c] != 0)
        rows[c], rows[pivot] = rows[pivot], rows[c]
        rows[c] = [v / rows[c][c] for v in rows[c]]
        for r in range(n):
            if r != c and rows[r][c] != 0:
                factor = rows[r][c]
                rows[r] = [v - factor * u for v, u in zip(rows[r], rows[c])]
    return [row[n:] for row in rows]


def _transpose(matrix):
    return [list(col) for col in zip(*matrix)]


@lru_cache(maxsize=None)
def winograd_matrices(tile, kernel):
    """``(A^T, G, B^T)`` of F(tile, kernel) as tuples of Fraction rows (see the module)."""
    alpha = tile + kernel - 1
    points = _POINTS[:alpha - 1]
    g = _evaluation_matrix(points, kernel)
    at = _transpose(_evaluation_matrix(points, tile))
    bt = _transpose(_inverse(_evaluation_matrix(points, alpha)))
    for j, row in enumerate(bt):
        factor = Fraction(lcm(*(v.denominator for v in row)), gcd(*(v.numerator for v in row)))
        bt[j] = [v * factor for v in row]
        g[j] = [v / factor for v in g[j]]
    return tuple(tuple(r) for r in at), tuple(tuple(r) for r in g), tuple(tuple(r) for r in bt)


def _const_matrix(rows, dtype, name):
    """A compute holding a constant matrix as a chain of selects (as TOPI's const_matrix)."""
    def body(i, j):
        out = const(0, dtype)
        for a, row in enumerate(rows):
            for b, v in enumerate(row):
                if v != 0:
                    out = if_then_else(_all(i == a, j == b), const(float(v), dtype), out)
        return out

    return compute((len(rows), len(rows[0])), body, name=name)


def _check_tile(op, tile, kernel):
    tile = check_int(tile, f"{op}: tile_size", minimum=1)
    if tile + kernel - 2 > len(_POINTS):
        raise TegradError(f"{op}: tile_size {tile} with a {kernel}x{kernel} kernel needs "
                          f"{tile + kernel - 2} interpolation points; at most "
                          f"{len(_POINTS)} are available (tile_size <= "
                          f"{len(_POINTS) - kernel + 2})")
    return tile


def conv2d_winograd_weight_transform(w, tile_size=2):
    """The Winograd weight transform ``U = G g G^T`` of every ``(o, i)`` kernel ``g``:

    ``U[e, u, o, i] = sum_{ra, rb} G[e, ra] * w[o, i, ra, rb] * G[u, rb]``.

    ``w`` is ``(O, I, r, r)`` (square kernel); the output is ``(alpha, alpha, O, I)``
    with ``alpha = tile_size + r - 1``, the layout of TOPI's
    ``conv2d_winograd_weight_transform`` (F(2x2, 3x3) for the defaults).
    """
    op = "conv2d_winograd_weight_transform"
    check_tensor(w, op, "weight", ndim=4)
    out_c, in_c, kh, kw = w.shape
    if kh != kw:
        raise ShapeError(f"{op}: weight {w.name!r} has a {kh}x{kw} kernel; winograd needs a "
                         f"square kernel")
    tile = _check_tile(op, tile_size, kh)
    alpha = tile + kh - 1
    g = _const_matrix(winograd_matrices(tile, kh)[1], w.dtype, "winograd_G")

    def body(eps, nu, oc, ic):
        ra = reduce_axis((0, kh), name="ra")
        rb = reduce_axis((0, kw), name="rb")
        return _sum(g[eps, ra] * w[oc, ic, ra, rb] * g[nu, rb], axis=[ra, rb])

    return compute((alpha, alpha, out_c, in_c), body, name=op)


def conv2d_winograd_without_weight_transform(x, u, stride=1, padding=0, tile_size=2):
    """Winograd convolution of ``x`` (N, C, H, W) with transformed weights ``u``
    (``(alpha, alpha, O, C)``, from :func:`conv2d_winograd_weight_transform`); equal to
    ``conv2d(x, w, stride=1, padding=padding)``. Three stages:

    - input transform of each ``alpha x alpha`` tile ``d`` (tiles start every
      ``m = tile_size`` pixels of the zero-padded input): ``V = B^T d B``,
      ``V[e, u, n, c, ty, tx] = sum_{ra, rb} BT[e, ra] * xp[n, c, ty*m + ra - ph,
      tx*m + rb - pw] * BT[u, rb]``;
    - ``M[e, u, n, o, ty, tx] = sum_c U[e, u, o, c] * V[e, u, n, c, ty, tx]``;
    - output transform ``A^T M A``: ``out[n, o, y, x] = sum_{ra, rb} AT[y % m, ra] *
      M[ra, rb, n, o, y // m, x // m] * AT[x % m, rb]``.
    Only ``stride=1`` is supported (as TOPI's winograd schedules).
    """
    op = "conv2d_winograd_without_weight_transform"
    check_tensor(x, op, "x", ndim=4)
    check_tensor(u, op, "transformed weight", ndim=4)
    check_same_dtype(op, x, u, "transformed weight")
    if pair(stride, op, "stride", 1) != (1, 1):
        raise TegradError(f"{op}: winograd convolution supports only stride 1, got "
                          f"stride={stride!r}")
    pads = pair(padding, op, "padding", 0)
    n_batch, channels, height, width = x.shape
    alpha, alpha2, out_c, in_c = u.shape
    tile = check_int(tile_size, f"{op}: tile_size", minimum=1)
    kernel = alpha - tile + 1
    if alpha != alpha2 or kernel < 1:
        raise ShapeError(f"{op}: transformed weight {u.name!r} of shape {u.shape} does not "
                         f"match tile_size {tile} (expected (alpha, alpha, O, I) with "
                         f"alpha >= tile_size)")
    _check_tile(op, tile, kernel)
    if in_c != channels:
        raise ShapeError(f"{op}: transformed weight {u.name!r} of shape {u.shape} expects "
                         f"{in_c} input channel(s) but x {x.name!r} has {channels}")
    sizes = (height, width)
    out_hw = [sizes[d] + 2 * pads[d] - kernel + 1 for d in range(2)]
    if min(out_hw) <= 0:
        raise ShapeError(f"{op}: the {kernel}x{kernel} kernel is larger than the padded input "
                         f"of x {x.name!r} ({height}x{width} padded by {pads})")
    tiles = [-(-o // tile) for o in out_hw]
    at_rows, _, bt_rows = winograd_matrices(tile, kernel)
    at = _const_matrix(at_rows, x.dtype, "winograd_AT")
    bt = _const_matrix(bt_rows, x.dtype, "winograd_BT")

    def tile_read(t, r, d):
        index = t * tile + r - pads[d] if pads[d] else t * tile + r
        highest = (tiles[d] - 1) * tile + alpha - 1 - pads[d]
        return index, in_bounds(index, sizes[d], -pads[d], highest)

    def input_transform(eps, nu, nn, cc, ty, tx):
        ra = reduce_axis((0, alpha), name="ra")
        rb = reduce_axis((0, alpha), name="rb")
        iy, cy = tile_read(ty, ra, 0)
        ix, cx = tile_read(tx, rb, 1)
        return _sum(bt[eps, ra] * x[nn, cc, iy, ix] * bt[nu, rb], axis=[ra, rb],
                    where=where_of(cy + cx))

    v = compute((alpha, alpha, n_batch, channels, tiles[0], tiles[1]), input_transform,
                name="winograd_input")

    def batch_gemm(eps, nu, nn, oc, ty, tx):
        rc = reduce_axis((0, channels), name="rc")
        return _sum(u[eps, nu, oc, rc] * v[eps, nu, nn, rc, ty, tx], axis=rc)

    m = compute((alpha, alpha, n_batch, out_c, tiles[0], tiles[1]), batch_gemm,
                name="winograd_batch_gemm")

    def output_transform(nn, oc, yy, xx):
        ra = reduce_axis((0, alpha), name="ra")
        rb = reduce_axis((0, alpha), name="rb")
        return _sum(at[yy % tile, ra] * m[ra, rb, nn, oc, yy // tile, xx // tile]
                    * at[xx % tile, rb], axis=[ra, rb])

    return compute((n_batch, out_c, out_hw[0], out_hw[1]), output_transform, name=op)
