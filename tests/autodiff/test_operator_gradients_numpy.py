"""Gradients of the main layers against hand-derived numpy gradients (random heads)."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import nn, ops

F64 = "float64"


def _grads(out, inputs, feed, rng):
    h = rng.normal(size=out.shape)
    H = tg.placeholder(out.shape, dtype=F64, name="H")
    grads = tg.differentiate(out, inputs, head=H).result
    return h, tg.evaluate(grads, {**feed, H: h})


def _ph(rng, shape, name):
    t = tg.placeholder(shape, dtype=F64, name=name)
    return t, rng.normal(size=shape)


def test_dense():
    rng = np.random.default_rng(0)
    (x, xv), (w, wv), (b, bv) = _ph(rng, (3, 4), "x"), _ph(rng, (5, 4), "w"), _ph(rng, (5,), "b")
    h, (dx, dw, db) = _grads(nn.dense(x, w, b), [x, w, b], {x: xv, w: wv, b: bv}, rng)
    assert np.allclose(dx, h @ wv) and np.allclose(dw, h.T @ xv) and np.allclose(db, h.sum(0))


def _conv_adjoint(xv, wv, h, stride, padding, dilation, groups):
    """The adjoint of the direct convolution loop: scatter each output's head."""
    dx, dw = np.zeros_like(xv), np.zeros_like(wv)
    n_batch, _, height, width = xv.shape
    out_ch, group_ch, kh, kw = wv.shape
    per_group = out_ch // groups
    for n, f, oy, ox in np.ndindex(*h.shape):
        g = f // per_group
        for rc, ky, kx in np.ndindex(group_ch, kh, kw):
            iy = oy * stride[0] + ky * dilation[0] - padding[0]
            ix = ox * stride[1] + kx * dilation[1] - padding[1]
            if 0 <= iy < height and 0 <= ix < width:
                c = g * group_ch + rc
                dx[n, c, iy, ix] += h[n, f, oy, ox] * wv[f, rc, ky, kx]
                dw[f, rc, ky, kx] += h[n, f, oy, ox] * xv[n, c, iy, ix]
    return dx, dw


@pytest.mark.parametrize("stride,padding,dilation,groups,xshape,wshape", [
    ((1, 1), (1, 1), (1, 1), 1, (2, 2, 5, 5), (3, 2, 3, 3)),
    ((2, 1), (1, 0), (1, 2), 1, (1, 3, 6, 6), (2, 3, 2, 2)),
    ((1, 2), (0, 1), (1, 1), 2, (2, 4, 5, 5), (4, 2, 2, 3)),
    ((2, 2), (2, 2), (2, 2), 3, (1, 3, 7, 7), (3, 1, 3, 3)),
])
def test_conv2d(stride, padding, dilation, groups, xshape, wshape):
    rng = np.random.default_rng(1)
    (x, xv), (w, wv) = _ph(rng, xshape, "x"), _ph(rng, wshape, "w")
    out = nn.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    h, (dx, dw) = _grads(out, [x, w], {x: xv, w: wv}, rng)
    ex, ew = _conv_adjoint(xv, wv, h, stride, padding, dilation, groups)
    assert np.allclose(dx, ex) and np.allclose(dw, ew)


def _windows(shape, kernel, stride, padding):
    """(n, c, oy, ox, taps inside the input) of a pooling without dilation."""
    n_batch, chans, height, width = shape
    oh = (height + 2 * padding - kernel) // stride + 1
    ow = (width + 2 * padding - kernel) // stride + 1
    for n, c, oy, ox in np.ndindex(n_batch, chans, oh, ow):
        taps = [(oy * stride + ky - padding, ox * stride + kx - padding)
                for ky in range(kernel) for kx in range(kernel)]
        yield (n, c, oy, ox), [(iy, ix) for iy, ix in taps if 0 <= iy < height and 0 <= ix < width]


def test_max_pool2d():
    rng = np.random.default_rng(2)
    x, xv = _ph(rng, (2, 2, 5, 5), "x")
    h, (dx,) = _grads(nn.max_pool2d(x, 3, stride=2, padding=1), [x], {x: xv}, rng)
    expected = np.zeros_like(xv)
    for (n, c, oy, ox), taps in _windows(xv.shape, 3, 2, 1):
        iy, ix = max(taps, key=lambda t: xv[n, c, t[0], t[1]])
        expected[n, c, iy, ix] += h[n, c, oy, ox]
    assert np.allclose(dx, expected)


@pytest.mark.parametrize("include_pad", [True, False])
def test_avg_pool2d(include_pad):
    rng = np.random.default_rng(3)
    x, xv = _ph(rng, (1, 2, 5, 5), "x")
    out = nn.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=include_pad)
    h, (dx,) = _grads(out, [x], {x: xv}, rng)
    expected = np.zeros_like(xv)
    for (n, c, oy, ox), taps in _windows(xv.shape, 3, 2, 1):
        count = 9 if include_pad else len(taps)
        for iy, ix in taps:
            expected[n, c, iy, ix] += h[n, c, oy, ox] / count
    assert np.allclose(dx, expected)


def test_softmax_cross_entropy():
    rng = np.random.default_rng(4)
    logits, lv = _ph(rng, (4, 5), "logits")
    labels = tg.placeholder((4,), dtype="int32", name="labels")
    yv = np.array([0, 3, 3, 4], dtype="int32")
    h, (dl,) = _grads(nn.softmax_cross_entropy(logits, labels), [logits],
                      {logits: lv, labels: yv}, rng)
    p = np.exp(lv - lv.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(4), yv] -= 1
    assert np.allclose(dl, h * p / 4)


def test_batch_norm_training():
    rng = np.random.default_rng(5)
    (x, xv), (g, gv), (b, bv) = _ph(rng, (3, 2, 2, 2), "x"), _ph(rng, (2,), "g"), \
        _ph(rng, (2,), "b")
    eps = 1e-5
    out = nn.batch_norm(x, g, b, epsilon=eps)[0]
    h, (dx, dg, db) = _grads(out, [x, g, b], {x: xv, g: gv, b: bv}, rng)
    axes = (0, 2, 3)
    mu = xv.mean(axes, keepdims=True)
    sigma = np.sqrt(xv.var(axes, keepdims=True) + eps)
    xhat = (xv - mu) / sigma
    gb = gv.reshape(1, 2, 1, 1)
    expected_dx = gb / sigma * (h - h.mean(axes, keepdims=True)
                                - xhat * (h * xhat).mean(axes, keepdims=True))
    assert np.allclose(dx, expected_dx)
    assert np.allclose(dg, (h * xhat).sum(axes)) and np.allclose(db, h.sum(axes))


def test_layout_transform():
    rng = np.random.default_rng(6)
    x, xv = _ph(rng, (2, 4, 3, 2), "x")
    out = ops.layout_transform(x, "NCHW", "NCHW2c")
    assert out.shape == (2, 2, 3, 2, 2)
    h, (dx,) = _grads(out, [x], {x: xv}, rng)
    # out[n, C, y, x, c] = x[n, 2C + c, y, x]: the gradient is the inverse re-arrangement
    assert np.allclose(dx, h.transpose(0, 1, 4, 2, 3).reshape(2, 4, 3, 2))


@pytest.mark.parametrize("mode,axis", [("clip", None), ("clip", 1), ("wrap", 0),
                                       ("fast", 1)])
def test_take(mode, axis):
    rng = np.random.default_rng(7)
    x, xv = _ph(rng, (3, 4), "x")
    lo, hi = (0, 3) if mode == "fast" else (-3, 14)
    iv = rng.integers(lo, hi, size=(2, 3)).astype("int32")
    idx = tg.placeholder((2, 3), dtype="int32", name="idx")
    h, (dx,) = _grads(ops.take(x, idx, axis=axis, mode=mode), [x], {x: xv, idx: iv}, rng)
    expected = np.zeros_like(xv)
    n = xv.size if axis is None else xv.shape[axis]
    fixed = np.mod(iv, n) if mode == "wrap" else np.clip(iv, 0, n - 1)
    for pos in np.ndindex(*iv.shape):
        k = fixed[pos]
        if axis is None:
            expected.reshape(-1)[k] += h[pos]
        elif axis == 0:
            expected[k, :] += h[pos]             # out[i, j, b] = x[fix(idx[i, j]), b]
        else:
            expected[:, k] += h[(slice(None),) + pos]   # out[a, i, j] = x[a, fix(idx[i, j])]
    assert np.allclose(dx, expected)


def test_flatten():
    rng = np.random.default_rng(8)
    x, xv = _ph(rng, (2, 3, 2, 2), "x")
    out = ops.flatten(x)
    assert out.shape == (2, 12)
    h, (dx,) = _grads(out, [x], {x: xv}, rng)
    assert np.allclose(dx, h.reshape(xv.shape))
