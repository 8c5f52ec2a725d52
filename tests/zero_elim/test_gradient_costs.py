"""The cost of every operator's zero-eliminated gradient against a hand-derived cost.

For each differentiable operator of :mod:`tegrad.ops` and :mod:`tegrad.nn`, on at least
two attribute settings, the table ``ENTRIES`` builds the operator on placeholders and
gives, for every differentiated input, the iterations of the gradient a person would
write, computed from the shapes and attributes (the formula is in a comment). The test
differentiates with a placeholder head (a general vector-Jacobian product) and checks::

    tg.cost(gradient).iterations <= 1.1 * hand_derived
    tg.cost(gradient).iterations <= 3 * tg.cost(forward).iterations

Counting conventions of the hand-derived costs (those of :mod:`tegrad.cost`):

- a gather stage costs one point per output element plus one per reduction point it
  visits; a reduction over a single point is written as a plain read (no loop);
- a scatter stage (``dx[f(i)] += ...``) costs the points of its domain, its zero
  initial value is free; a person writes one where the gradient writes a small part of
  its output (slices) or at data-dependent positions (``take``, padding by edge or
  reflection, where several output points fold onto one input point); a bilinear
  gradient may scatter its taps in one pass over the output (four accumulations a
  point), which the formula here, a gather over (input, tap) pairs, bounds from above;
- the gradient is the adjoint of the operator's algorithm as written (the same
  reductions, transposed; no re-derivation such as separating a 2-D transform), with
  only the nonzero contributions visited;
- statistics are stages of their own, counted with the stages they read: forward
  reductions the gradient reads (a max and its tie count for the equal split among ties,
  a mean, a softmax's max and sum, ...) and the reductions of the gradient itself;
- elementwise values (the head times a derivative, constant matrices) are computed
  inline where they are used: they cost no iteration, so a stage holding them is
  overhead; except a value read at several window taps that costs more than one
  operation, which a hand-written gradient computes once per element (LRN's ratio
  buffer), and forward stages the gradient reads (a dropout's saved mask);
- the operator's output is free where the gradient reads it (``exp' = exp``, a relu's
  derivative tested on the relu's value, a softmax's value): the forward pass of a
  training step computes it anyway, so it is not part of the gradient's work;
- contributions that cancel identically are not written (the gradient through the
  stabilising max of a softmax, through the mean inside a variance); the library keeps
  them out with ``stop_gradient`` where that leaves every derivative exact.

Placeholders are free. ``X`` is the number of elements of the differentiated input,
``Y`` of the output, ``M`` of the output of a reduction; ``V`` counts the pairs (output
point, input point) of a window, convolution or interpolation.

An entry whose gradient is not minimal keeps its check, marked ``xfail(strict=True)``
with what is not minimal and the numbers, until the optimiser is fixed.
"""
from __future__ import annotations

import functools
import math
from collections import Counter
from fractions import Fraction

import pytest

import tegrad as tg
from tegrad import nn, ops
from tegrad.analysis.cost import stage_cost

F64 = "float64"


def _x(shape, name="x", dtype=F64):
    return tg.placeholder(shape, dtype=dtype, name=name)


def _n(shape):
    return math.prod(shape)


# ---------------------------------------------------------------------------------------
# counting helpers: each enumerates the index pairs of the operator's definition
# ---------------------------------------------------------------------------------------

def _pair(value):
    return tuple(value) if isinstance(value, (tuple, list)) else (value, value)


def _window_out(size, kernel, stride, pad, dilation, ceil_mode=False):
    """Windows of a sliding kernel (PyTorch): floor((size + 2p - d(k-1) - 1) / s) + 1,
    rounded up with ceil_mode unless the last window would start past input + left pad."""
    span = size + 2 * pad - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad:
        out -= 1
    return out


def _window_hits(size, out, kernel, stride, pad, dilation):
    """Per input index h, the pairs (window o, tap r) with o*s + r*d - p == h."""
    hits = [0] * size
    for o in range(out):
        for r in range(kernel):
            h = o * stride + r * dilation - pad
            if 0 <= h < size:
                hits[h] += 1
    return hits


def _transposed_hits(size, out, kernel, stride, pad, dilation):
    """Per input index h of a transposed convolution, the pairs (output y, tap k) with
    y + p - k*d == h*s (the input pixel h feeds output y through tap k)."""
    hits = [0] * size
    for y in range(out):
        for k in range(kernel):
            t = y + pad - k * dilation
            if t % stride == 0 and 0 <= t // stride < size:
                hits[t // stride] += 1
    return hits


def _nearest_hits(n_in, n_out):
    """Per input index, the outputs y with floor(y * n_in / n_out) == h."""
    hits = [0] * n_in
    for y in range(n_out):
        hits[y * n_in // n_out] += 1
    return hits


def _bilinear_taps(n_in, n_out, align_corners):
    """The rows one bilinear output reads, summed over the outputs (PyTorch's source:
    y*(n-1)/(m-1) with align_corners, else max((y + 1/2)*n/m - 1/2, 0)). A source clamped
    at 0 or at the last row reads one row; any other reads its floor and the next row
    (the second also where its weight is 0 at an integer source: the forward's
    a + (b - a) * t reads it)."""
    total = 0
    for y in range(n_out):
        if align_corners:
            src = Fraction(y * (n_in - 1), n_out - 1) if n_out > 1 else Fraction(0)
            clamped_low = False
        else:
            src = Fraction((2 * y + 1) * n_in, 2 * n_out) - Fraction(1, 2)
            clamped_low = src < 0
        total += 1 if clamped_low or math.floor(src) >= n_in - 1 else 2
    return total


# ---------------------------------------------------------------------------------------
# the table: key "operator/setting" -> builder returning (output, inputs, hand costs)
# ---------------------------------------------------------------------------------------

ENTRIES = {}


def _entry(key):
    def register(fn):
        assert key not in ENTRIES, key
        ENTRIES[key] = fn
        return fn
    return register


# --- tegrad.ops.elementwise --------------------------------------------------------------
# dx[i] = head[i] * f'(x[i]), f' inline (0 for floor, ceil, round, trunc: a stage of
# zeros): X outputs, no reduction.

_UNARY = ("log", "sqrt", "exp", "sigmoid", "tanh", "negative", "abs", "copy", "floor",
          "ceil", "round", "trunc")
_UNARY_SHAPES = {"vector": (96,), "nchw": (2, 3, 8, 8)}


def _unary(name, shape):
    x = _x(shape)
    return getattr(ops, name)(x), [x], [_n(shape)]


for _name in _UNARY:
    for _label, _shape in _UNARY_SHAPES.items():
        _entry(f"{_name}/{_label}")(functools.partial(_unary, _name, _shape))

# the intrinsics of the trigonometric, hyperbolic and log1p/expm1 family: as above, the
# derivative inline (X)
for _name in ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh",
              "log1p", "expm1"):
    for _label, _shape in _UNARY_SHAPES.items():
        _entry(f"{_name}/{_label}")(functools.partial(_unary, _name, _shape))


def _atan2(ys, xs):
    y, x = _x(ys, "y"), _x(xs, "x")
    out_shape = tuple(max(a, b) for a, b in zip((1,) * (len(xs) - len(ys)) + ys,
                                                (1,) * (len(ys) - len(xs)) + xs))
    Y = _n(out_shape)
    # dy = head * x / (x^2 + y^2) inline: Y (y has the output's shape); dx[j] = sum over
    # the broadcast rows of head * -y / (x^2 + y^2): X + Y
    return ops.atan2(y, x), [y, x], [Y, _n(xs) + Y]


_entry("atan2/row_broadcast")(functools.partial(_atan2, (12, 8), (8,)))
_entry("atan2/column_broadcast")(functools.partial(_atan2, (2, 3, 5, 5), (3, 1, 1)))


@_entry("cast/f64_to_f32")
def _():
    x = _x((6, 16))
    # dx[i] = cast(head[i]): X
    return ops.cast(x, "float32"), [x], [96]


@_entry("cast/f32_to_f64")
def _():
    x = _x((2, 3, 4, 5), dtype="float32")
    # dx[i] = cast(head[i]): X
    return ops.cast(x, F64), [x], [120]


@_entry("clip/both_bounds")
def _():
    x = _x((8, 12))
    # dx[i] = (a_min <= x[i] <= a_max) ? head[i] : 0 (ties split inline): X
    return ops.clip(x, -0.5, 0.5), [x], [96]


@_entry("clip/lower_only")
def _():
    x = _x((2, 4, 6, 6))
    # dx[i] = x[i] >= a_min ? head[i] : 0: X
    return ops.clip(x, 0.0, None), [x], [288]


@_entry("full/matrix")
def _():
    v = _x((), "v")
    # dv = sum_i head[i]: 1 output + Y reduction points
    return ops.full((12, 10), v, dtype=F64), [v], [1 + 120]


@_entry("full/nchw")
def _():
    v = _x((), "v")
    # dv = sum_i head[i]: 1 + Y
    return ops.full((2, 3, 5, 5), v, dtype=F64), [v], [1 + 150]


@_entry("full_like/matrix")
def _():
    like, v = _x((9, 11), "like"), _x((), "v")
    # dv = sum_i head[i]: 1 + Y
    return ops.full_like(like, v), [v], [1 + 99]


@_entry("full_like/nchw")
def _():
    like, v = _x((2, 2, 6, 6), "like"), _x((), "v")
    # dv = sum_i head[i]: 1 + Y
    return ops.full_like(like, v), [v], [1 + 144]


# --- tegrad.ops.binary (numpy broadcasting) ----------------------------------------------
# An operand of the output's shape: d[i] = head[i] * partial(i) inline: X outputs. A
# broadcast operand: d[j] = sum over the broadcast dims of head * partial: X outputs + Y
# reduction points. A constant operand has no gradient.

_BINARY = ("add", "subtract", "multiply", "divide", "power", "maximum", "minimum",
           "floor_divide", "mod")
# (x shape, y shape): the same shape, and y broadcast along the rows
_BINARY_SETTINGS = {"same_shape": ((10, 12), (10, 12)),
                    "row_broadcast": ((10, 12), (12,))}


def _binary(name, xs, ys):
    x, y = _x(xs), _x(ys, "y")
    out = getattr(ops, name)(x, y)
    Y = _n(out.shape)

    def grad_cost(shape):
        # same shape as the output: an elementwise stage; else a reduction over the
        # broadcast dims (floor_divide's derivatives are 0: a stage of zeros)
        if shape == out.shape or name == "floor_divide":
            return _n(shape)
        return _n(shape) + Y

    return out, [x, y], [grad_cost(xs), grad_cost(ys)]


for _name in _BINARY:
    for _label, (_xs, _ys) in _BINARY_SETTINGS.items():
        _entry(f"{_name}/{_label}")(functools.partial(_binary, _name, _xs, _ys))


@_entry("add/scalar")
def _():
    x = _x((8, 16))
    # dx = head: X
    return ops.add(2.0, x), [x], [128]


@_entry("subtract/outer")
def _():
    x, y = _x((10, 1)), _x((1, 14), "y")
    # dx[i, 0] = sum_j head[i, j]: X + Y; dy[0, j] = -sum_i head[i, j]: X_y + Y
    return ops.subtract(x, y), [x, y], [10 + 140, 14 + 140]


@_entry("multiply/column_broadcast")
def _():
    x, y = _x((10, 12)), _x((10, 1), "y")
    # dx[i, j] = head[i, j] * y[i, 0]: X; dy[i, 0] = sum_j head[i, j] * x[i, j]: 10 + Y
    return ops.multiply(x, y), [x, y], [120, 10 + 120]


@_entry("divide/scalar_numerator")
def _():
    x = _x((6, 20))
    # dx = -head * 1 / x^2: X
    return ops.divide(1.0, x), [x], [120]


@_entry("power/scalar_exponent")
def _():
    x = _x((6, 20))
    # dx = head * 3 x^2: X
    return ops.power(x, 3.0), [x], [120]


@_entry("where/row_broadcast")
def _():
    cond = _x((10, 12), "cond", dtype="bool")
    a, b = _x((10, 12), "a"), _x((12,), "b")
    # da = cond ? head : 0: X; db[j] = sum_i (!cond ? head : 0): 12 + Y
    return ops.where(cond, a, b), [a, b], [120, 12 + 120]


@_entry("where/number_branch")
def _():
    cond = _x((4, 5, 6), "cond", dtype="bool")
    a = _x((4, 5, 6), "a")
    # da = cond ? head : 0: X
    return ops.where(cond, a, 0.0), [a], [120]


# --- tegrad.ops.broadcast ----------------------------------------------------------------

@_entry("broadcast_to/middle_axis")
def _():
    x = _x((8, 1))
    # dx[i, 0] = sum_{a, b} head[a, i, b]: X + Y
    return ops.broadcast_to(x, (4, 8, 16)), [x], [8 + 512]


@_entry("broadcast_to/leading_axes")
def _():
    x = _x((16,))
    # dx[j] = sum_{a, b} head[a, b, j]: X + Y
    return ops.broadcast_to(x, (3, 5, 16)), [x], [16 + 240]


@_entry("broadcast_to_like/middle_axis")
def _():
    x, like = _x((1, 12)), _x((20, 12), "like")
    # dx[0, j] = sum_i head[i, j]: X + Y
    return ops.broadcast_to_like(x, like), [x], [12 + 240]


@_entry("broadcast_to_like/leading_axes")
def _():
    x, like = _x((6, 5)), _x((4, 6, 5), "like")
    # dx[i, j] = sum_a head[a, i, j]: X + Y
    return ops.broadcast_to_like(x, like), [x], [30 + 120]


@_entry("collapse_sum_to/keep_one")
def _():
    x = _x((4, 8, 16))
    # dx[a, i, b] = head[i, 0]: X
    return ops.collapse_sum_to(x, (8, 1)), [x], [512]


@_entry("collapse_sum_to/leading")
def _():
    x = _x((3, 5, 16))
    # dx[a, b, j] = head[j]: X
    return ops.collapse_sum_to(x, (16,)), [x], [240]


@_entry("collapse_sum_like/keep_one")
def _():
    x, like = _x((20, 12)), _x((1, 12), "like")
    # dx[i, j] = head[0, j]: X
    return ops.collapse_sum_like(x, like), [x], [240]


@_entry("collapse_sum_like/leading")
def _():
    x, like = _x((4, 6, 5)), _x((6, 5), "like")
    # dx[a, i, j] = head[i, j]: X
    return ops.collapse_sum_like(x, like), [x], [120]


# --- tegrad.ops.shape: every gradient reads head at permuted / re-raveled indices: X -----

@_entry("reshape/split_merge")
def _():
    x = _x((8, 12))
    return ops.reshape(x, (4, -1, 3)), [x], [96]


@_entry("reshape/merge")
def _():
    x = _x((2, 3, 4, 5))
    return ops.reshape(x, (6, 20)), [x], [120]


@_entry("reshape_like/merge")
def _():
    x, like = _x((6, 16)), _x((12, 8), "like")
    return ops.reshape_like(x, like), [x], [96]


@_entry("reshape_like/split")
def _():
    x, like = _x((24, 5)), _x((2, 3, 4, 5), "like")
    return ops.reshape_like(x, like), [x], [120]


@_entry("transpose/rotate")
def _():
    x = _x((4, 5, 6))
    return ops.transpose(x, (2, 0, 1)), [x], [120]


@_entry("transpose/reverse")
def _():
    x = _x((2, 3, 4, 5))
    return ops.transpose(x), [x], [120]


@_entry("squeeze/axis")
def _():
    x = _x((6, 1, 16))
    return ops.squeeze(x, axis=1), [x], [96]


@_entry("squeeze/all")
def _():
    x = _x((1, 8, 1, 12, 1))
    return ops.squeeze(x), [x], [96]


@_entry("expand_dims/middle_two")
def _():
    x = _x((8, 12))
    return ops.expand_dims(x, 1, num=2), [x], [96]


@_entry("expand_dims/last")
def _():
    x = _x((4, 5, 6))
    return ops.expand_dims(x, -1), [x], [120]


@_entry("flatten/3d")
def _():
    x = _x((6, 4, 5))
    return ops.flatten(x), [x], [120]


@_entry("flatten/nchw")
def _():
    x = _x((2, 3, 4, 5))
    return ops.flatten(x), [x], [120]


@_entry("concatenate/axis0_three")
def _():
    a, b, c = _x((4, 10), "a"), _x((3, 10), "b"), _x((5, 10), "c")
    # d_k = head at the rows of piece k: X_k each
    return ops.concatenate([a, b, c], axis=0), [a, b, c], [40, 30, 50]


@_entry("concatenate/axis1_two")
def _():
    a, b = _x((2, 3, 4, 4), "a"), _x((2, 5, 4, 4), "b")
    return ops.concatenate([a, b], axis=1), [a, b], [96, 160]


# --- tegrad.ops.slicing ------------------------------------------------------------------
# Slices: a scatter dx[begin + i * stride] += head[i] over the slice: Y points (the
# zero-initialised rest of dx is free).

@_entry("strided_slice/stride2_3")
def _():
    x = _x((10, 12))
    out = ops.strided_slice(x, [1, 0], [10, 12], [2, 3])
    return out, [x], [_n(out.shape)]


@_entry("strided_slice/negative_stride")
def _():
    x = _x((12, 8))
    out = ops.strided_slice(x, [11, 1], [0, 7], [-2, 1])
    return out, [x], [_n(out.shape)]


@_entry("strided_slice/crop_one_row")
def _():
    x = _x((10, 12))
    out = ops.strided_slice(x, [1, 0], [10, 12])
    # it writes most of x (more than half: no small part), through an invertible shift:
    # dx[i, j] = i >= 1 ? head[i - 1, j] : 0, a gather writing each point once: X
    return out, [x], [_n(x.shape)]


@_entry("slice_like/all_axes")
def _():
    x, like = _x((12, 10)), _x((5, 7), "like")
    return ops.slice_like(x, like), [x], [35]


@_entry("slice_like/one_axis")
def _():
    x, like = _x((6, 10, 4)), _x((6, 3, 4), "like")
    return ops.slice_like(x, like, axes=(1,)), [x], [72]


@_entry("split/sections")
def _():
    x = _x((12, 8))
    return ops.split(x, 3, axis=0)[1], [x], [32]


@_entry("split/indices")
def _():
    x = _x((4, 15))
    return ops.split(x, [3, 9], axis=1)[2], [x], [24]


@_entry("pad/constant")
def _():
    x = _x((8, 10))
    # dx[i, j] = head[i + 1, j] (no padding point reaches x): X
    return ops.pad(x, ((1, 2), (0, 3)), value=0.5), [x], [80]


@_entry("pad/edge")
def _():
    x = _x((8, 10))
    out = ops.pad(x, ((1, 2), (2, 1)), mode="edge")
    # several padded points fold onto each border element: a scatter
    # dx[clamp(i - 1), clamp(j - 2)] += head[i, j] over the output: Y
    return out, [x], [_n(out.shape)]


@_entry("pad/reflect")
def _():
    x = _x((8, 10))
    out = ops.pad(x, ((2, 1), (3, 2)), mode="reflect")
    # scatter dx[reflect(i), reflect(j)] += head[i, j]: Y
    return out, [x], [_n(out.shape)]


@_entry("pad/reflect_wide")
def _():
    x = _x((3, 12))
    out = ops.pad(x, ((4, 5), (1, 1)), mode="reflect")
    # pads wider than n - 1 reflect again (periodic): still one scatter over Y
    return out, [x], [_n(out.shape)]


# --- tegrad.ops.layout / indexing --------------------------------------------------------

@_entry("layout_transform/nchw_to_nchw4c")
def _():
    x = _x((2, 8, 3, 5))
    # dx[n, c, h, w] = head[n, c // 4, h, w, c % 4]: X
    return ops.layout_transform(x, "NCHW", "NCHW4c"), [x], [240]


@_entry("layout_transform/padded_nhwc2c")
def _():
    x = _x((2, 5, 3, 4))
    # dx reads head at its position; the zero tail of the output is not read back: X
    return ops.layout_transform(x, "NCHW", "NHWC2c"), [x], [120]


@_entry("layout_transform/nchw4c_to_nchw")
def _():
    x = _x((2, 3, 4, 5, 4))
    return ops.layout_transform(x, "NCHW4c", "NCHW"), [x], [480]


# take: a scatter dx[fix(idx[i])] += head[i] over the gathered output: Y

@_entry("take/flat_clip")
def _():
    x, idx = _x((6, 8)), _x((20,), "idx", dtype="int32")
    return ops.take(x, idx), [x], [20]


@_entry("take/axis1_clip")
def _():
    x, idx = _x((6, 8)), _x((3, 4), "idx", dtype="int32")
    out = ops.take(x, idx, axis=1)
    return out, [x], [_n(out.shape)]


@_entry("take/axis0_wrap")
def _():
    x, idx = _x((6, 8)), _x((10,), "idx", dtype="int32")
    out = ops.take(x, idx, axis=0, mode="wrap")
    return out, [x], [_n(out.shape)]


# --- tegrad.ops.reduce / linalg ----------------------------------------------------------

@_entry("sum/axes_keepdims")
def _():
    x = _x((4, 8, 16))
    # dx[a, i, b] = head[0, i, 0]: X
    return ops.sum(x, axis=(0, 2), keepdims=True), [x], [512]


@_entry("sum/all")
def _():
    x = _x((12, 10))
    return ops.sum(x), [x], [120]


@_entry("mean/axis1")
def _():
    x = _x((4, 8, 16))
    # dx[a, i, b] = head[a, b] / n: X
    return ops.mean(x, axis=1), [x], [512]


@_entry("mean/all_keepdims")
def _():
    x = _x((12, 10))
    return ops.mean(x, keepdims=True), [x], [120]


def _extremum(fn, shape, axis, keepdims):
    x = _x(shape)
    out = fn(x, axis=axis, keepdims=keepdims)
    X, M = _n(shape), _n(out.shape)
    # equal split among ties: the forward max (or min) m (M + X), the tie count t[o] =
    # sum_k (x == m) (M + X), dx = (x == m[o]) ? head[o] / t[o] : 0 (X, no loop)
    return out, [x], [2 * (M + X) + X]


for _name in ("max", "min"):
    _entry(f"{_name}/axis1")(functools.partial(_extremum, getattr(ops, _name), (16, 12),
                                               1, False))
    _entry(f"{_name}/axes02_keepdims")(functools.partial(
        _extremum, getattr(ops, _name), (4, 6, 8), (0, 2), True))
    _entry(f"{_name}/all")(functools.partial(_extremum, getattr(ops, _name), (10, 12),
                                             None, False))


def _prod(shape, axis):
    x = _x(shape)
    out = ops.prod(x, axis=axis)
    X, M = _n(shape), _n(out.shape)
    # without dividing by zero: z = count of zero factors (M + X), p = product of the
    # nonzero factors (M + X), dx = z == 0 ? head * p / x : (z == 1 && x == 0 ?
    # head * p : 0) (X). The forward product is not needed: with no zero it equals p.
    return out, [x], [2 * (M + X) + X]


_entry("prod/axis1")(functools.partial(_prod, (16, 12), 1))
_entry("prod/all")(functools.partial(_prod, (10, 12), None))


def _variance(shape, axis, unbiased):
    x = _x(shape)
    out = ops.variance(x, axis=axis, unbiased=unbiased)
    X, M = _n(shape), _n(out.shape)
    # dx = head * 2 (x - mean) / (n - ddof): the mean stage (M + X) and X. The path
    # through the mean contributes sum_k 2 (x_k - mean) / (n - ddof) * (-1/n) = 0.
    return out, [x], [M + X + X]


_entry("variance/axis1")(functools.partial(_variance, (16, 12), 1, False))
_entry("variance/all_unbiased")(functools.partial(_variance, (10, 12), None, True))


def _with_index(name, shape, axis):
    x = _x(shape)
    _, out = getattr(ops, name)(x, axis=axis)
    X, M = _n(shape), _n(out.shape)
    # dx = k == index ? head : 0 (X), reading the index stage of the one-pass reduction
    # of (index, value) pairs (M + X): the gradient goes to one position, no tie count
    return out, [x], [M + X + X]


for _name in ("argmax_with_value", "argmin_with_value"):
    _entry(f"{_name}/axis1")(functools.partial(_with_index, _name, (12, 10), 1))
    _entry(f"{_name}/all")(functools.partial(_with_index, _name, (6, 5, 4), None))


def _mean_var(shape, axis, correction, which):
    x = _x(shape)
    out = ops.mean_var(x, axis=axis, correction=correction)[which]
    X, M = _n(shape), _n(out.shape)
    # the mean: dx = head / n (X); the variance: dx = head * 2 (x - mean) / (n -
    # correction), reading the mean stage (M + X), and X
    return out, [x], [X if which == 0 else M + X + X]


_entry("mean_var/mean_axis0")(functools.partial(_mean_var, (16, 12), 0, 1, 0))
_entry("mean_var/var_axis1")(functools.partial(_mean_var, (16, 12), 1, 0, 1))


@_entry("matmul/2d")
def _():
    a, b = _x((12, 10), "a"), _x((10, 14), "b")
    # da[i, k] = sum_j head[i, j] * b[k, j]: 12*10 + 12*10*14
    # db[k, j] = sum_i a[i, k] * head[i, j]: 10*14 + 12*10*14
    return ops.matmul(a, b), [a, b], [120 + 1680, 140 + 1680]


@_entry("matmul/batch_broadcast")
def _():
    a, b = _x((3, 6, 8), "a"), _x((8, 5), "b")
    # da[t, i, k] = sum_j head[t, i, j] * b[k, j]: 3*6*8 + 3*6*8*5
    # db[k, j] = sum_{t, i} a[t, i, k] * head[t, i, j]: 8*5 + 3*6*8*5
    return ops.matmul(a, b), [a, b], [144 + 720, 40 + 720]


@_entry("matmul/batched")
def _():
    a, b = _x((4, 5, 6), "a"), _x((4, 6, 7), "b")
    # da: 4*5*6 + 4*5*6*7; db: 4*6*7 + 4*5*6*7
    return ops.matmul(a, b), [a, b], [120 + 840, 168 + 840]


# --- tegrad.nn activations ---------------------------------------------------------------

@_entry("relu/matrix")
def _():
    x = _x((12, 10))
    # dx = x > 0 ? head : 0: X
    return nn.relu(x), [x], [120]


@_entry("relu/nchw")
def _():
    x = _x((2, 3, 6, 6))
    return nn.relu(x), [x], [216]


@_entry("leaky_relu/matrix")
def _():
    x = _x((12, 10))
    # dx = x > 0 ? head : alpha * head: X
    return nn.leaky_relu(x, alpha=0.2), [x], [120]


@_entry("leaky_relu/nchw")
def _():
    x = _x((2, 3, 6, 6))
    return nn.leaky_relu(x, alpha=0.01), [x], [216]


@_entry("prelu/channel_slopes")
def _():
    x, alpha = _x((4, 8, 5, 5)), _x((8,), "alpha")
    # dx = x > 0 ? head : alpha[c] * head: X
    # dalpha[c] = sum_{n, h, w} (x > 0 ? 0 : head * x): C + X
    return nn.prelu(x, alpha), [x, alpha], [800, 8 + 800]


@_entry("prelu/shared_slope_last_axis")
def _():
    x, alpha = _x((6, 4, 10)), _x((1,), "alpha")
    # dalpha[0] = sum over all of (x > 0 ? 0 : head * x): 1 + X
    return nn.prelu(x, alpha, axis=-1), [x, alpha], [240, 1 + 240]


def _softmax(fn, shape, axis):
    x = _x(shape)
    X = _n(shape)
    M = X // shape[axis]
    # y = exp(x - m) / s inline from the forward's max m (M + X) and sum s (M + X):
    # softmax: dx = y * (head - d), d = sum_k head * y (M + X), dx (X)
    # log_softmax: dx = head - y * d, d = sum_k head (M + X), dx (X)
    return fn(x, axis=axis), [x], [3 * (M + X) + X]


for _name in ("softmax", "log_softmax"):
    _entry(f"{_name}/last_axis")(functools.partial(_softmax, getattr(nn, _name), (12, 16),
                                                   -1))
    _entry(f"{_name}/axis0")(functools.partial(_softmax, getattr(nn, _name), (10, 3, 4),
                                               0))


# --- dense, bias_add, dropout ------------------------------------------------------------

@_entry("dense/no_bias")
def _():
    x, w = _x((16, 20)), _x((24, 20), "w")
    # dx[n, i] = sum_o head[n, o] * w[o, i]: N*I + N*I*O
    # dw[o, i] = sum_n head[n, o] * x[n, i]: O*I + N*O*I
    return nn.dense(x, w), [x, w], [320 + 7680, 480 + 7680]


@_entry("dense/bias_3d")
def _():
    x, w, b = _x((2, 8, 20)), _x((24, 20), "w"), _x((24,), "b")
    # as above with N = 16 rows; db[o] = sum_n head[n, o]: O + N*O
    return nn.dense(x, w, b), [x, w, b], [320 + 7680, 480 + 7680, 24 + 384]


@_entry("bias_add/nchw")
def _():
    x, b = _x((4, 6, 5, 5)), _x((6,), "b")
    # dx = head: X; db[c] = sum_{n, h, w} head: C + X
    return nn.bias_add(x, b), [x, b], [600, 6 + 600]


@_entry("bias_add/last_axis")
def _():
    x, b = _x((20, 12)), _x((12,), "b")
    return nn.bias_add(x, b, axis=-1), [x, b], [240, 12 + 240]


@_entry("dropout/mask")
def _():
    x, mask = _x((12, 10)), _x((12, 10), "mask")
    # dx = head * mask / (1 - rate): X
    return nn.dropout(x, rate=0.25, mask=mask), [x], [120]


@_entry("dropout/channel_mask")
def _():
    x, mask = _x((2, 4, 5, 5)), _x((2, 4, 1, 1), "mask")
    return nn.dropout(x, rate=0.5, mask=mask), [x], [200]


@_entry("dropout/hash")
def _():
    x = _x((12, 10))
    # dx = head * mask / (1 - rate) reading the forward's mask stage, as a hand-written
    # dropout reads its saved mask: the mask stage X + the product X
    return nn.dropout(x, rate=0.5, seed=3), [x], [120 + 120]


# --- normalisations ----------------------------------------------------------------------

def _batch_norm_train(shape, axis):
    x = _x(shape)
    C = shape[axis]
    g, b = _x((C,), "g"), _x((C,), "b")
    X = _n(shape)
    # with xhat = (x - mean) / sqrt(var + eps), every stage reads the forward's mean
    # (C + X) and var (C + X):
    # dx = g / sqrt(var + eps) * (head - sb / n - xhat * sg / n), with the reductions
    # sb = sum head (C + X), sg = sum head * xhat (C + X): 4 (C + X) + X
    # dg = sum head * xhat: 3 (C + X); db = sum head: C + X
    out = nn.batch_norm(x, g, b, axis=axis)[0]
    return out, [x, g, b], [4 * (C + X) + X, 3 * (C + X), C + X]


_entry("batch_norm/train_nchw")(functools.partial(_batch_norm_train, (4, 3, 6, 6), 1))
_entry("batch_norm/train_features")(functools.partial(_batch_norm_train, (32, 8), 1))


def _batch_norm_infer(shape, axis):
    x = _x(shape)
    C = shape[axis]
    g, b, m = _x((C,), "g"), _x((C,), "b"), _x((C,), "m")
    v = _x((C,), "v")
    X = _n(shape)
    # dx = head * g / sqrt(v + eps): X; dg, db, dm, dv: each a sum over all but the
    # channel of head times an inline factor: C + X
    out = nn.batch_norm(x, g, b, m, v, axis=axis, training=False)[0]
    return out, [x, g, b, m, v], [X] + [C + X] * 4


_entry("batch_norm/infer_nchw")(functools.partial(_batch_norm_infer, (4, 3, 6, 6), 1))
_entry("batch_norm/infer_last_axis")(functools.partial(_batch_norm_infer, (6, 5, 8), -1))


def _lrn(shape, size):
    x = _x(shape)
    X = _n(shape)
    C, half = shape[1], size // 2
    # T = pairs (channel c, neighbour j) with j in [c - size//2, c - size//2 + size)
    # inside the channels, at every other index
    T = sum(1 for c in range(C) for r in range(size) if 0 <= c + r - half < C) * (X // C)
    # D[c] = bias + alpha/size * sq[c], sq[c] = sum_j x[j]^2 (the forward's sum, a stage:
    # X + T); the factor r[c] = head[c] * x[c] * D[c]^(-beta-1) computed once per element
    # (Caffe's ratio buffer: X), then dx[j] = head[j] / D[j]^beta - 2 alpha/size * beta *
    # x[j] * sum_{c: j in window(c)} r[c] (X + T)
    return nn.lrn(x, size=size, alpha=0.5), [x], [2 * (X + T) + X]


_entry("lrn/size5")(functools.partial(_lrn, (2, 8, 4, 4), 5))
_entry("lrn/size3")(functools.partial(_lrn, (2, 6, 5, 5), 3))


def _l2_normalize(shape, axis):
    x = _x(shape)
    out = nn.l2_normalize(x, axis=axis)
    X = _n(shape)
    reduced = range(len(shape)) if axis is None else ([axis] if isinstance(axis, int)
                                                      else axis)
    M = X // _n([shape[d] for d in reduced])
    # s = sum x^2 (the forward's stage, M + X); dx = head / sqrt(max(s, eps)) - x *
    # [s > eps ? 1 : s == eps ? 1/2 : 0] * d / s^(3/2), d = sum head * x (M + X): X
    return out, [x], [2 * (M + X) + X]


_entry("l2_normalize/axis1")(functools.partial(_l2_normalize, (12, 16), 1))
_entry("l2_normalize/all")(functools.partial(_l2_normalize, (4, 6, 5), None))


# --- convolutions ------------------------------------------------------------------------

def _conv2d(xs, ws, stride=1, padding=0, dilation=1, groups=1):
    x, w = _x(xs), _x(ws, "w")
    out = nn.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    n, c, h, wd = xs
    o, cg, kh, kw = ws
    oh, ow = out.shape[2:]
    (sh, sw), (ph, pw), (dh, dw) = (_pair(stride), _pair(padding), _pair(dilation))
    hy = _window_hits(h, oh, kh, sh, ph, dh)
    hx = _window_hits(wd, ow, kw, sw, pw, dw)
    # V = the forward's reduction points inside the input: N * O * C/G * (pairs (y, ry)
    # in bounds) * (pairs (x, rx) in bounds)
    V = n * o * cg * sum(hy) * sum(hx)
    # dx[n, c, h, w] = sum over the output channels of c's group and the (y, ry), (x, rx)
    # reaching (h, w) of head * w: X + V (no loop if each pixel meets one output point)
    loops = o // groups > 1 or max(hy) > 1 or max(hx) > 1
    # dw[o, c, ry, rx] = sum over n and the (y, x) whose tap is inside: W + V
    return out, [x, w], [_n(xs) + (V if loops else 0), _n(ws) + V]


_entry("conv2d/pad1")(functools.partial(_conv2d, (2, 3, 9, 9), (4, 3, 3, 3), padding=1))
_entry("conv2d/stride2_dilation2")(functools.partial(
    _conv2d, (2, 3, 11, 11), (4, 3, 3, 3), stride=2, padding=1, dilation=2))
_entry("conv2d/groups2_stride1x2")(functools.partial(
    _conv2d, (2, 4, 8, 8), (6, 2, 3, 3), stride=(1, 2), groups=2))
_entry("conv2d/stride3_gaps")(functools.partial(
    _conv2d, (1, 3, 11, 11), (4, 3, 2, 2), stride=3))


def _conv2d_transpose(xs, ws, stride=1, padding=0, output_padding=0, dilation=1):
    x, w = _x(xs), _x(ws, "w")
    out = nn.conv2d_transpose(x, w, stride=stride, padding=padding,
                              output_padding=output_padding, dilation=dilation)
    n, c, h, wd = xs
    _, o, kh, kw = ws
    oh, ow = out.shape[2:]
    hy = _transposed_hits(h, oh, kh, stride, padding, dilation)
    hx = _transposed_hits(wd, ow, kw, stride, padding, dilation)
    # V = pairs (output point, tap) fed by an input pixel: N * O * C * sum(hy) * sum(hx)
    V = n * o * c * sum(hy) * sum(hx)
    # dx[n, c, h, w] = sum_{o, ky, kx} head[n, o, h*s - p + ky*d, ...] * w: X + V
    # dw[c, o, ky, kx] = sum_{n, h, w} x * head[...] over the pixels landing inside: W + V
    return out, [x, w], [_n(xs) + V, _n(ws) + V]


_entry("conv2d_transpose/stride2_pad1")(functools.partial(
    _conv2d_transpose, (2, 3, 5, 5), (3, 4, 3, 3), stride=2, padding=1))
_entry("conv2d_transpose/stride1")(functools.partial(
    _conv2d_transpose, (2, 3, 6, 6), (3, 4, 3, 3)))
_entry("conv2d_transpose/dilation2_output_padding1")(functools.partial(
    _conv2d_transpose, (1, 3, 5, 5), (3, 2, 2, 2), stride=2, padding=1, output_padding=1,
    dilation=2))


def _winograd_weight_transform(ws, tile):
    w = _x(ws, "w")
    out = nn.conv2d_winograd_weight_transform(w, tile_size=tile)
    alpha = tile + ws[2] - 1
    # dw[o, i, ra, rb] = sum_{e, u} head[e, u, o, i] * G[e, ra] * G[u, rb] (G's constants
    # inline): W + W * alpha^2
    return out, [w], [_n(ws) * (1 + alpha * alpha)]


_entry("conv2d_winograd_weight_transform/tile2")(functools.partial(
    _winograd_weight_transform, (4, 3, 3, 3), 2))
_entry("conv2d_winograd_weight_transform/tile4")(functools.partial(
    _winograd_weight_transform, (2, 3, 3, 3), 4))


def _winograd(xs, o, kernel, padding, tile):
    alpha = tile + kernel - 1
    n, c, h, wd = xs
    x, u = _x(xs), _x((alpha, alpha, o, c), "u")
    out = nn.conv2d_winograd_without_weight_transform(x, u, padding=padding, tile_size=tile)
    oh, ow = out.shape[2:]
    th, tw = -(-oh // tile), -(-ow // tile)
    ty = _window_hits(h, th, alpha, tile, padding, 1)
    tx = _window_hits(wd, tw, alpha, tile, padding, 1)
    # adjoint of the output transform: dM[e, u, n, o, ty, tx] = sum over the output
    # pixels of the tile inside the output of AT * head * AT: a^2 N O T + a^2 N O OH OW
    dm = alpha ** 2 * n * o * (th * tw + oh * ow)
    # adjoint of the batched product: dV[e, u, n, c, t] = sum_o U * dM: a^2 N C T (1 + O)
    dv = alpha ** 2 * n * c * th * tw * (1 + o)
    # adjoint of the input transform: dx[n, c, h, w] = sum over the tiles and taps reaching
    # (h, w) and (e, u) of BT * dV * BT: X + a^2 N C (tile-tap pairs inside)
    dx = _n(xs) + alpha ** 2 * n * c * sum(ty) * sum(tx)
    # the forward's input transform V (a^2 N C T + a^2 N C pairs), then
    # dU[e, u, o, c] = sum_{n, t} dM * V: a^2 O C + a^2 O C N T
    v = alpha ** 2 * n * c * (th * tw + sum(ty) * sum(tx))
    du = alpha ** 2 * o * c * (1 + n * th * tw)
    return out, [x, u], [dm + dv + dx, dm + v + du]


_entry("conv2d_winograd_without_weight_transform/pad1_tile2")(functools.partial(
    _winograd, (2, 3, 8, 8), 4, 3, 1, 2))
_entry("conv2d_winograd_without_weight_transform/pad0_tile4_partial")(functools.partial(
    _winograd, (1, 2, 9, 11), 3, 3, 0, 4))


# --- pooling -----------------------------------------------------------------------------

def _pool_pairs(xs, kernel, stride, padding, dilation, ceil_mode):
    n, c, h, w = xs
    oh = _window_out(h, kernel, stride, padding, dilation, ceil_mode)
    ow = _window_out(w, kernel, stride, padding, dilation, ceil_mode)
    hy = _window_hits(h, oh, kernel, stride, padding, dilation)
    hx = _window_hits(w, ow, kernel, stride, padding, dilation)
    P = n * c * oh * ow
    V = n * c * sum(hy) * sum(hx)  # window taps inside the input
    overlap = max(hy) > 1 or max(hx) > 1
    return P, V, overlap


def _max_pool(xs, kernel, stride=None, padding=0, dilation=1, ceil_mode=False):
    x = _x(xs)
    out = nn.max_pool2d(x, kernel, stride=stride, padding=padding, dilation=dilation,
                        ceil_mode=ceil_mode)
    P, V, overlap = _pool_pairs(xs, kernel, stride or kernel, padding, dilation, ceil_mode)
    # the forward max (P + V), the tie count per window (P + V), dx[h, w] = sum over the
    # windows holding (h, w) of (x == max ? head / ties : 0): X + V, or X without a loop
    # when each pixel is in at most one window
    return out, [x], [2 * (P + V) + _n(xs) + (V if overlap else 0)]


_entry("max_pool2d/overlap_pad")(functools.partial(_max_pool, (2, 3, 9, 9), 3, 2, 1))
_entry("max_pool2d/no_overlap")(functools.partial(_max_pool, (2, 3, 8, 8), 2))
_entry("max_pool2d/ceil_mode")(functools.partial(_max_pool, (2, 2, 9, 9), 2, 2, 0, 1,
                                                 True))
_entry("max_pool2d/dilation2")(functools.partial(_max_pool, (1, 3, 10, 10), 2, 1, 0, 2))


def _avg_pool(xs, kernel, stride=None, padding=0, count_include_pad=True):
    x = _x(xs)
    out = nn.avg_pool2d(x, kernel, stride=stride, padding=padding,
                        count_include_pad=count_include_pad)
    P, V, overlap = _pool_pairs(xs, kernel, stride or kernel, padding, 1, False)
    # dx[h, w] = sum over the windows holding (h, w) of head / count (count an affine
    # expression, inline): X + V, or X when each pixel is in at most one window
    return out, [x], [_n(xs) + (V if overlap else 0)]


_entry("avg_pool2d/overlap_pad")(functools.partial(_avg_pool, (2, 3, 9, 9), 3, 2, 1))
_entry("avg_pool2d/exclude_pad")(functools.partial(_avg_pool, (2, 3, 9, 9), 3, 2, 1,
                                                   False))
_entry("avg_pool2d/no_overlap")(functools.partial(_avg_pool, (2, 3, 8, 8), 2))


def _global_max(xs):
    x = _x(xs)
    X, M = _n(xs), xs[0] * xs[1]
    # the forward max (M + X), the tie count (M + X), dx (X)
    return nn.global_max_pool2d(x), [x], [2 * (M + X) + X]


_entry("global_max_pool2d/square")(functools.partial(_global_max, (2, 3, 6, 6)))
_entry("global_max_pool2d/wide")(functools.partial(_global_max, (1, 4, 3, 10)))


def _global_avg(xs):
    x = _x(xs)
    # dx = head[n, c] / (H W): X
    return nn.global_avg_pool2d(x), [x], [_n(xs)]


_entry("global_avg_pool2d/square")(functools.partial(_global_avg, (2, 3, 6, 6)))
_entry("global_avg_pool2d/wide")(functools.partial(_global_avg, (1, 4, 3, 10)))


# --- resizing ----------------------------------------------------------------------------

def _nearest_cost(xs, out_hw):
    n, c, h, w = xs
    hy, hx = _nearest_hits(h, out_hw[0]), _nearest_hits(w, out_hw[1])
    Y = n * c * out_hw[0] * out_hw[1]
    # dx[h, w] = sum of head over the outputs reading (h, w): X + Y (each output reads one
    # pixel); when no pixel is read twice (downsampling) the gradient writes only the
    # pixels read, like a strided slice: a scatter dx[src(y), src(x)] += head over Y
    if max(hy) > 1 or max(hx) > 1:
        return _n(xs) + Y
    return Y


def _bilinear_cost(xs, out_hw, align_corners):
    n, c, h, w = xs
    vy = _bilinear_taps(h, out_hw[0], align_corners)
    vx = _bilinear_taps(w, out_hw[1], align_corners)
    # dx[h, w] = sum over the (output, tap) pairs reading (h, w) of head * weights:
    # X + N C Vy Vx
    return _n(xs) + n * c * vy * vx


@_entry("upsampling/nearest2")
def _():
    x = _x((2, 3, 4, 5))
    return nn.upsampling(x, 2), [x], [_nearest_cost((2, 3, 4, 5), (8, 10))]


@_entry("upsampling/nearest2x3")
def _():
    x = _x((1, 2, 5, 4))
    return nn.upsampling(x, (2, 3)), [x], [_nearest_cost((1, 2, 5, 4), (10, 12))]


@_entry("upsampling/bilinear2")
def _():
    x = _x((1, 2, 4, 5))
    return (nn.upsampling(x, 2, method="bilinear"), [x],
            [_bilinear_cost((1, 2, 4, 5), (8, 10), False)])


@_entry("resize/nearest_up")
def _():
    x = _x((2, 2, 4, 6))
    return nn.resize(x, (6, 9)), [x], [_nearest_cost((2, 2, 4, 6), (6, 9))]


@_entry("resize/nearest_down")
def _():
    x = _x((2, 2, 8, 9))
    return nn.resize(x, (4, 3)), [x], [_nearest_cost((2, 2, 8, 9), (4, 3))]


@_entry("resize/bilinear_align_corners")
def _():
    x = _x((1, 2, 5, 5))
    return (nn.resize(x, (7, 9), method="bilinear", align_corners=True), [x],
            [_bilinear_cost((1, 2, 5, 5), (7, 9), True)])


@_entry("resize/bilinear_half_pixel")
def _():
    x = _x((1, 2, 4, 6))
    return (nn.resize(x, (7, 9), method="bilinear"), [x],
            [_bilinear_cost((1, 2, 4, 6), (7, 9), False)])


# --- losses (scalar outputs) -------------------------------------------------------------

def _cross_entropy(n, k):
    logits, labels = _x((n, k), "logits"), _x((n,), "labels", dtype="int32")
    # the forward's row max m (N + NK) and sum s (N + NK); dlogits = head / N *
    # (exp(x - m) / s - (k == labels[n] ? 1 : 0)), the label test inline: NK
    return nn.softmax_cross_entropy(logits, labels), [logits], [2 * (n + n * k) + n * k]


_entry("softmax_cross_entropy/batch16_classes10")(functools.partial(_cross_entropy, 16, 10))
_entry("softmax_cross_entropy/batch4_classes64")(functools.partial(_cross_entropy, 4, 64))


def _pair_loss(fn, shape):
    p, t = _x(shape, "p"), _x(shape, "t")
    # each gradient is head / size times an inline derivative: X each
    return fn(p, t), [p, t], [_n(shape), _n(shape)]


_entry("binary_cross_entropy/matrix")(functools.partial(
    _pair_loss, nn.binary_cross_entropy, (12, 10)))
_entry("binary_cross_entropy/nchw")(functools.partial(
    _pair_loss, nn.binary_cross_entropy, (2, 3, 5, 5)))
_entry("mse_loss/matrix")(functools.partial(_pair_loss, nn.mse_loss, (12, 10)))
_entry("mse_loss/nchw")(functools.partial(_pair_loss, nn.mse_loss, (2, 3, 5, 5)))


# --- layers of today's models -------------------------------------------------------------
# elementwise activations: dx = head * f'(x) inline: X

def _activation(fn, shape, **attrs):
    x = _x(shape)
    return fn(x, **attrs), [x], [_n(shape)]


_entry("gelu/erf")(functools.partial(_activation, nn.gelu, (12, 10)))
_entry("gelu/tanh")(functools.partial(_activation, nn.gelu, (2, 3, 4, 4), approximate="tanh"))
_entry("silu/matrix")(functools.partial(_activation, nn.silu, (12, 10)))
_entry("silu/nchw")(functools.partial(_activation, nn.silu, (2, 3, 4, 4)))
_entry("softplus/default")(functools.partial(_activation, nn.softplus, (12, 10)))
_entry("softplus/beta2_threshold5")(functools.partial(_activation, nn.softplus, (2, 3, 4, 4),
                                                      beta=2, threshold=5))


def _layer_norm(shape, axis):
    x = _x(shape)
    G = _n(shape[axis:])
    g, b = _x(shape[axis:], "g"), _x(shape[axis:], "b")
    X = _n(shape)
    M = X // G
    # as batch_norm with the roles of the axes swapped: the forward's mean (M + X) and
    # var (M + X); dx = g-scaled head through xhat with sb = sum head * g (M + X) and
    # sg = sum head * g * xhat (M + X) per row: 4 (M + X) + X
    # dgamma[j] = sum over rows of head * xhat: mean + var + G + X; dbeta: G + X
    return (nn.layer_norm(x, g, b, axis=axis), [x, g, b],
            [4 * (M + X) + X, 2 * (M + X) + G + X, G + X])


_entry("layer_norm/last_axis")(functools.partial(_layer_norm, (16, 12), -1))
_entry("layer_norm/trailing_two")(functools.partial(_layer_norm, (4, 6, 5), 1))


def _rms_norm(shape, axis):
    x = _x(shape)
    g = _x(shape[axis:], "g")
    G, X = _n(shape[axis:]), _n(shape)
    M = X // G
    # the forward's mean square ms (M + X); dx = g head / r - x sum(head g x) / (G r^3)
    # with the row sum (M + X): 2 (M + X) + X; dgamma = ms + sum over rows (G + X)
    return nn.rms_norm(x, g, axis=axis), [x, g], [2 * (M + X) + X, (M + X) + G + X]


_entry("rms_norm/last_axis")(functools.partial(_rms_norm, (16, 12), -1))
_entry("rms_norm/channels_on")(functools.partial(_rms_norm, (2, 3, 8, 8), 1))


def _embedding(rows, width, ids_shape):
    table = _x((rows, width), "table")
    ids = _x(ids_shape, "ids", dtype="int32")
    # dtable[ids[i], d] += head[i, d]: a scatter over the looked-up rows, I * D
    return nn.embedding(table, ids), [table], [_n(ids_shape) * width]


_entry("embedding/matrix_ids")(functools.partial(_embedding, 20, 8, (6, 5)))
_entry("embedding/vector_ids")(functools.partial(_embedding, 50, 16, (64,)))


def _conv1d(xs, ws, stride=1, padding=0, dilation=1, groups=1):
    x, w = _x(xs), _x(ws, "w")
    out = nn.conv1d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    n, c, length = xs
    o, cg, k = ws
    before = padding[0] if isinstance(padding, tuple) else padding
    hits = _window_hits(length, out.shape[2], k, stride, before, dilation)
    # as conv2d along one axis: V = N * O * C/G * (pairs (t, rl) inside the input);
    # dx: X + V, dw: W + V
    V = n * o * cg * sum(hits)
    return out, [x, w], [_n(xs) + V, _n(ws) + V]


_entry("conv1d/causal")(functools.partial(_conv1d, (2, 4, 16), (6, 4, 3), padding=(2, 0)))
_entry("conv1d/stride2_dilation2_groups2")(functools.partial(
    _conv1d, (2, 4, 17), (6, 2, 3), stride=2, padding=1, dilation=2, groups=2))


@_entry("conv2d/per_side_padding")
def _():
    xs, ws = (1, 3, 8, 8), (4, 3, 3, 3)
    x, w = _x(xs), _x(ws, "w")
    out = nn.conv2d(x, w, padding=((2, 0), (2, 0)))
    hy = _window_hits(8, out.shape[2], 3, 1, 2, 1)
    hx = _window_hits(8, out.shape[3], 3, 1, 2, 1)
    V = 4 * 3 * sum(hy) * sum(hx)
    # as conv2d/pad1 with the padding on the top and left sides only: X + V, W + V
    return out, [x, w], [_n(xs) + V, _n(ws) + V]


def _attention_costs(b, t, s, d, e, causal):
    """Hand costs of scaled_dot_product_attention's gradients for q, k and v (and the
    forward's stages they read): Z scores per batch element pair, P kept pairs."""
    Z = b * t * s
    P = b * t * (t + 1) // 2 if causal else Z
    M = b * t
    # the forward's stages the gradients read: scores (Z + P d), max (M + P), exponentials
    # x (Z), sum (M + P)
    forward = Z + P * d + 2 * (M + P) + Z
    # dw[t, e] = head / sum (M E), for the values weighted by x; dsum[t] = -sum_e head *
    # out / sum (M + M E), reading out, so the weighted values too (M E + P E); dx[t, s] =
    # sum_e dw v + dsum (Z + P e); ds = scale dx x (Z); dq[t, :] = scale sum_s ds k
    # (B T D + P D), dk likewise (B S D + P D)
    shared = forward + M * e + (M + M * e) + (M * e + P * e) + Z + P * e + Z
    # dv[s, :] = sum_t x dw: M E + B S E + P E
    return [shared + b * t * d + P * d, shared + b * s * d + P * d,
            forward + M * e + b * s * e + P * e]


def _attention(b, t, s, d, e, causal):
    q, k, v = _x((b, t, d), "q"), _x((b, s, d), "k"), _x((b, s, e), "v")
    out = nn.scaled_dot_product_attention(q, k, v, causal=causal)
    return out, [q, k, v], _attention_costs(b, t, s, d, e, causal)


_entry("scaled_dot_product_attention/full")(functools.partial(_attention, 2, 6, 6, 4, 3,
                                                              False))
_entry("scaled_dot_product_attention/causal")(functools.partial(_attention, 2, 6, 6, 4, 3,
                                                                True))


def _multi_head(n, t, e, heads, causal):
    q = _x((n, t, e), "query")
    ws = [_x((e, e), f"w{c}") for c in "qkvo"]
    out = nn.multi_head_attention(q, q, q, *ws, num_heads=heads, causal=causal)
    dh = e // heads
    b = n * heads
    Z = b * t * t
    P = b * t * (t + 1) // 2 if causal else Z
    M = b * t
    # dw_o[o, j] = sum_{n, t} head * att (W + N T E E), reading the attention's forward:
    # three projections (N T E + N T E E each), scores, max, exponentials, sum, the
    # values weighted by the exponentials (B T Dh + P Dh) and divided by the sums (B T Dh)
    forward = 3 * (n * t * e + n * t * e * e) + Z + P * dh + 2 * (M + P) + Z + b * t * dh \
        + P * dh + b * t * dh
    return out, [ws[3]], [e * e + n * t * e * e + forward]


_entry("multi_head_attention/two_heads")(functools.partial(_multi_head, 2, 5, 8, 2, False))
_entry("multi_head_attention/causal_four_heads")(functools.partial(_multi_head, 1, 6, 8, 4,
                                                                   True))


def _cross_entropy_extended(shape, **attrs):
    logits = _x(shape, "logits")
    labels = _x((shape[0],) + shape[2:], "labels", dtype="int32")
    X = _n(shape)
    P = X // shape[1]
    # the forward's row max (P + X) and sum (P + X); with ignore_index and a mean, the
    # count of kept labels (1 + P); dlogits = head * (kept ? (softmax - (1 - eps) onehot -
    # eps / C) / count : 0) inline: X
    count = 1 + P if attrs.get("ignore_index") is not None else 0
    return (nn.softmax_cross_entropy(logits, labels, **attrs), [logits],
            [2 * (P + X) + count + X])


_entry("softmax_cross_entropy/smoothing")(functools.partial(
    _cross_entropy_extended, (8, 5), label_smoothing=0.1))
_entry("softmax_cross_entropy/spatial_ignore")(functools.partial(
    _cross_entropy_extended, (4, 5, 3), ignore_index=-100))
_entry("softmax_cross_entropy/spatial_none")(functools.partial(
    _cross_entropy_extended, (4, 5, 3), reduction="none"))


# --- custom reducers (tg.comm_reducer) ----------------------------------------------------
# y[i] = R_k f(x[i, k]) for a reducer without a builtin rule: the derivative of the
# combine at (rest_k, f(k)) needs, for every element, the reduction of all the others.
# A person reads them from an exclusive prefix scan and an exclusive suffix scan of f
# along k (n points per line each: M n + M n) and writes dx[i, k] inline: X = M n.

_LSE = tg.comm_reducer(lambda a, b: tg.log(tg.exp(a) + tg.exp(b)),
                       lambda dtype: tg.min_value(dtype), name="logsumexp")
_PROD = tg.comm_reducer(lambda a, b: a * b, lambda dtype: 1.0, name="product")


def _logsumexp(m, n):
    x = _x((m, n))
    k = tg.reduce_axis((0, n), name="k")
    y = tg.compute((m,), lambda i: _LSE(x[i, k], axis=k), name="lse")
    # prefix scan M n + suffix scan M n + dx M n
    return y, [x], [3 * m * n]


for _n_red in (4, 16, 64, 256, 1024):
    _entry(f"comm_reducer/logsumexp_n{_n_red}")(functools.partial(_logsumexp, 2, _n_red))


@_entry("comm_reducer/product_symmetric")
def _():
    a = _x((10, 10), "a")
    k = tg.reduce_axis((0, 10), name="k")
    y = tg.compute((10,), lambda i: _PROD(a[i, k] + a[k, i], axis=k), name="p")
    # the scans of a[i, q] + a[q, i] over (i, q): 2 * 100; da[r, c] reads them at (r, c)
    # and at (c, r): 100
    return y, [a], [2 * 100 + 100]


# ---------------------------------------------------------------------------------------
# known non-minimal gradients: "key:input" -> what is not minimal (optimised/hand/forward)
# ---------------------------------------------------------------------------------------

XFAIL = {
    # optimised / hand-derived / forward iterations in each reason
}


# ---------------------------------------------------------------------------------------
# the tests
# ---------------------------------------------------------------------------------------

#: entries of the language itself rather than of the operator library
LANGUAGE = {"comm_reducer"}

#: operators without a mathematical derivative (bool or integer outputs, constants)
NOT_DIFFERENTIABLE = {
    "equal", "not_equal", "greater", "greater_equal", "less", "less_equal",
    "right_shift", "left_shift", "argmax", "argmin", "one_hot",
    "zeros", "zeros_like", "ones", "ones_like",
}


@functools.lru_cache(maxsize=None)
def _built(key):
    out, inputs, hand = ENTRIES[key]()
    assert len(inputs) == len(hand), key
    return out, inputs, hand


@functools.lru_cache(maxsize=None)
def _costs(key):
    """(forward iterations, [optimised gradient iterations per input], hand costs)."""
    out, inputs, hand = _built(key)
    head = tg.placeholder(out.shape, dtype=out.dtype, name="head")
    res = tg.differentiate(out, inputs, head=head)
    return (tg.cost(out).iterations, [_gradient_iterations(g, out) for g in res], hand)


def _gradient_iterations(grad, out):
    """The iterations of ``grad``'s program but those of the stage ``out`` (computed by
    the forward pass), if the gradient reads it."""
    reads_out = any(t is out for t in tg.topological_order([grad]))
    return tg.cost(grad).iterations - (stage_cost(out).iterations if reads_out else 0)


def _cases():
    cases = []
    for key in sorted(ENTRIES):
        _, inputs, _ = _built(key)
        for index, inp in enumerate(inputs):
            case_id = f"{key}:{inp.name}"
            marks = ()
            if case_id in XFAIL:
                marks = pytest.mark.xfail(strict=True, reason=XFAIL[case_id])
            cases.append(pytest.param(key, index, id=case_id, marks=marks))
    return cases


@pytest.mark.parametrize("key, index", _cases())
def test_gradient_cost(key, index):
    forward, optimised, hand = _costs(key)
    opt, expected = optimised[index], hand[index]
    name = _built(key)[1][index].name
    assert opt <= 1.1 * expected and opt <= 3 * forward, (
        f"{key}: the gradient for {name} costs {opt} iterations; hand-derived {expected} "
        f"(bound {1.1 * expected:g}), forward {forward} (bound {3 * forward})")


def test_every_expected_failure_names_a_case():
    ids = {f"{key}:{inp.name}" for key in ENTRIES for inp in _built(key)[1]}
    assert not set(XFAIL) - ids


def test_every_differentiable_operator_has_two_settings():
    names = set(ops.__all__) | set(nn.__all__) | LANGUAGE
    per_operator = Counter(key.split("/")[0] for key in ENTRIES)
    assert not set(per_operator) - names, "entries naming no operator of the library"
    missing = {name: per_operator[name] for name in sorted(names - NOT_DIFFERENTIABLE)
               if per_operator[name] < 2}
    assert not missing, f"operators with fewer than two settings: {missing}"
