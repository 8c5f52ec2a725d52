"""conv2d and conv2d_transpose against naive numpy loops."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn


def _ph(shape, name, dtype="float64"):
    return tg.placeholder(shape, dtype=dtype, name=name)


def _two(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv2d_ref(v, wv, stride, padding, dilation, groups):
    (sh, sw), (ph, pw), (dh, dw) = _two(stride), _two(padding), _two(dilation)
    n_batch, channels, height, width = v.shape
    out_c, per_group, kh, kw = wv.shape
    vp = np.pad(v, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (height + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    ow = (width + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n_batch, out_c, oh, ow))
    for n in range(n_batch):
        for o in range(out_c):
            g = o // (out_c // groups)
            for y in range(oh):
                for x in range(ow):
                    patch = vp[n, g * per_group:(g + 1) * per_group,
                               y * sh:y * sh + dh * (kh - 1) + 1:dh,
                               x * sw:x * sw + dw * (kw - 1) + 1:dw]
                    out[n, o, y, x] = np.sum(patch * wv[o])
    return out


CONV_CASES = [
    # x shape, w shape, stride, padding, dilation, groups
    ((2, 3, 7, 6), (4, 3, 3, 3), 1, 0, 1, 1),
    ((1, 2, 7, 9), (3, 2, 3, 2), 2, 2, 1, 1),          # padding larger than stride, odd sizes
    ((1, 2, 9, 8), (2, 2, 3, 3), 1, 2, 2, 1),          # dilation 2
    ((1, 4, 6, 5), (6, 2, 3, 3), (2, 1), (1, 0), 1, 2),  # groups 2, pairs
    ((2, 3, 5, 5), (3, 1, 3, 3), 1, 1, (1, 2), 3),     # depthwise
    ((1, 3, 5, 4), (2, 3, 1, 1), 2, 0, 1, 1),          # 1x1 kernel, stride 2
    ((1, 1, 3, 3), (1, 1, 3, 3), 3, 1, 1, 1),          # stride larger than kernel span
]


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CONV_CASES)
def test_conv2d(rng, xs, ws, stride, padding, dilation, groups):
    x, w = _ph(xs, "x"), _ph(ws, "w")
    v, wv = rng.standard_normal(xs), rng.standard_normal(ws)
    y = nn.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    ref = conv2d_ref(v, wv, stride, padding, dilation, groups)
    assert y.shape == ref.shape and y.name == "conv2d"
    assert np.allclose(tg.evaluate(y, {x: v, w: wv}), ref)


def test_conv2d_float32(rng):
    x, w = _ph((1, 2, 5, 5), "x", "float32"), _ph((2, 2, 3, 3), "w", "float32")
    v = rng.standard_normal((1, 2, 5, 5)).astype("float32")
    wv = rng.standard_normal((2, 2, 3, 3)).astype("float32")
    out = tg.evaluate(nn.conv2d(x, w, padding=1), {x: v, w: wv})
    assert out.dtype == np.float32
    assert np.allclose(out, conv2d_ref(v, wv, 1, 1, 1, 1), atol=1e-5)


def test_conv2d_is_one_stage_without_padded_copy():
    x, w = _ph((1, 2, 5, 5), "x"), _ph((2, 2, 3, 3), "w")
    y = nn.conv2d(x, w, padding=1, stride=2)
    assert tg.topological_order([y]) == [x, w, y] or tg.topological_order([y]) == [w, x, y]
    text = tg.format(y)
    assert "yy * 2 + ry - 1" in text and "where" in text


def test_conv2d_errors():
    x = _ph((1, 4, 5, 5), "x")
    with pytest.raises(tg.ShapeError, match="conv2d: groups=3 does not divide the 4 input"):
        nn.conv2d(x, _ph((3, 1, 3, 3), "w"), groups=3)
    with pytest.raises(tg.ShapeError, match="conv2d: groups=2 does not divide the 3 output"):
        nn.conv2d(x, _ph((3, 2, 3, 3), "w"), groups=2)
    with pytest.raises(tg.ShapeError, match="conv2d: weight 'w' of shape \\(2, 3, 3, 3\\) has 3 "
                                            "input channel.*'x' has 4"):
        nn.conv2d(x, _ph((2, 3, 3, 3), "w"))
    with pytest.raises(tg.ShapeError, match="conv2d: the kernel of 'x' along height \\(6, "
                                            "dilated to 6\\) is larger than the padded input"):
        nn.conv2d(x, _ph((2, 4, 6, 3), "w"))
    with pytest.raises(tg.ShapeError, match="along width \\(3, dilated to 7\\)"):
        nn.conv2d(x, _ph((2, 4, 3, 3), "w"), dilation=3, padding=(1, 0))
    with pytest.raises(tg.TegradError, match="conv2d: stride must be positive, got 0"):
        nn.conv2d(x, _ph((2, 4, 3, 3), "w"), stride=0)
    with pytest.raises(tg.TegradError, match="conv2d: padding must be non-negative, got -1"):
        nn.conv2d(x, _ph((2, 4, 3, 3), "w"), padding=(0, -1))
    with pytest.raises(tg.TegradError, match="conv2d: dilation must be an int or a pair"):
        nn.conv2d(x, _ph((2, 4, 3, 3), "w"), dilation=(1, 1, 1))
    with pytest.raises(tg.TegradError, match="conv2d: groups must be positive"):
        nn.conv2d(x, _ph((2, 4, 3, 3), "w"), groups=0)
    with pytest.raises(tg.ShapeError, match="conv2d: x 'x3' must have 4 dimension"):
        nn.conv2d(_ph((4, 5, 5), "x3"), _ph((2, 4, 3, 3), "w"))
    with pytest.raises(tg.DTypeError, match="conv2d: weight 'w32' has dtype float32"):
        nn.conv2d(x, _ph((2, 4, 3, 3), "w32", "float32"))


def conv2d_transpose_ref(v, wv, stride, padding, output_padding, dilation):
    """Scatter form: every input pixel adds its weighted kernel into the output."""
    (sh, sw), (ph, pw) = _two(stride), _two(padding)
    (oph, opw), (dh, dw) = _two(output_padding), _two(dilation)
    n_batch, channels, height, width = v.shape
    _, out_c, kh, kw = wv.shape
    full_h = (height - 1) * sh + dh * (kh - 1) + 1 + oph
    full_w = (width - 1) * sw + dw * (kw - 1) + 1 + opw
    full = np.zeros((n_batch, out_c, full_h, full_w))
    for n in range(n_batch):
        for c in range(channels):
            for iy in range(height):
                for ix in range(width):
                    for ky in range(kh):
                        for kx in range(kw):
                            full[n, :, iy * sh + ky * dh, ix * sw + kx * dw] += (
                                v[n, c, iy, ix] * wv[c, :, ky, kx])
    oh = (height - 1) * sh - 2 * ph + dh * (kh - 1) + oph + 1
    ow = (width - 1) * sw - 2 * pw + dw * (kw - 1) + opw + 1
    return full[:, :, ph:ph + oh, pw:pw + ow]


TRANSPOSE_CASES = [
    # x shape, w shape, stride, padding, output_padding, dilation
    ((2, 3, 4, 3), (3, 2, 3, 3), 1, 0, 0, 1),
    ((1, 2, 3, 4), (2, 3, 3, 3), 2, 1, 1, 1),
    ((1, 2, 3, 3), (2, 1, 4, 3), (3, 2), (2, 1), (2, 0), 1),
    ((1, 1, 4, 3), (1, 2, 3, 2), 2, 0, 1, 2),             # dilation 2 with output padding
    ((1, 2, 3, 3), (2, 2, 2, 2), 1, 0, (0, 1), (1, 2)),   # output_padding < dilation
]


@pytest.mark.parametrize("xs,ws,stride,padding,output_padding,dilation", TRANSPOSE_CASES)
def test_conv2d_transpose(rng, xs, ws, stride, padding, output_padding, dilation):
    x, w = _ph(xs, "x"), _ph(ws, "w")
    v, wv = rng.standard_normal(xs), rng.standard_normal(ws)
    y = nn.conv2d_transpose(x, w, stride=stride, padding=padding,
                            output_padding=output_padding, dilation=dilation)
    ref = conv2d_transpose_ref(v, wv, stride, padding, output_padding, dilation)
    assert y.shape == ref.shape and y.name == "conv2d_transpose"
    assert np.allclose(tg.evaluate(y, {x: v, w: wv}), ref)


@pytest.mark.parametrize("stride,padding,dilation", [(2, 1, 1), (3, 2, 2), (1, 0, 1)])
def test_conv2d_transpose_is_the_adjoint_of_conv2d(rng, stride, padding, dilation):
    xs, ws = (1, 2, 8, 7), (3, 2, 3, 3)
    x, w = _ph(xs, "x"), _ph(ws, "w")
    y = nn.conv2d(x, w, stride=stride, padding=padding, dilation=dilation)
    extra = tuple((s + 2 * padding - dilation * 2 - 1) % stride for s in xs[2:])
    g = _ph(y.shape, "g")
    xt = nn.conv2d_transpose(g, w, stride=stride, padding=padding, output_padding=extra,
                             dilation=dilation)
    assert xt.shape == xs
    v, wv, gv = rng.standard_normal(xs), rng.standard_normal(ws), rng.standard_normal(y.shape)
    yv, xtv = tg.evaluate([y, xt], {x: v, w: wv, g: gv})
    assert np.isclose(np.sum(yv * gv), np.sum(v * xtv))


def test_conv2d_transpose_errors():
    x = _ph((1, 2, 3, 3), "x")
    with pytest.raises(tg.ShapeError, match="conv2d_transpose: weight 'w' of shape \\(3, 2, 3, "
                                            "3\\) expects 3 input channel.*'x' has 2"):
        nn.conv2d_transpose(x, _ph((3, 2, 3, 3), "w"))
    with pytest.raises(tg.TegradError, match="conv2d_transpose: output_padding 2 along height "
                                             "must be smaller than either the stride \\(2\\) "
                                             "or the dilation \\(1\\)"):
        nn.conv2d_transpose(x, _ph((2, 2, 3, 3), "w"), stride=2, output_padding=(2, 0))
    with pytest.raises(tg.ShapeError, match="conv2d_transpose: padding 3 along width leaves no "
                                            "output"):
        nn.conv2d_transpose(x, _ph((2, 2, 1, 1), "w"), padding=(0, 3))
    with pytest.raises(tg.TegradError, match="conv2d_transpose: stride must be positive"):
        nn.conv2d_transpose(x, _ph((2, 2, 3, 3), "w"), stride=(1, -2))
    with pytest.raises(tg.ShapeError, match="conv2d_transpose: weight 'w2' must have 4 dim"):
        nn.conv2d_transpose(x, _ph((2, 2, 3), "w2"))


@settings(max_examples=30, deadline=None)
@given(groups=st.integers(1, 2), per_group=st.integers(1, 2), out_per_group=st.integers(1, 2),
       size=st.tuples(st.integers(1, 7), st.integers(1, 7)),
       kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       padding=st.tuples(st.integers(0, 3), st.integers(0, 3)),
       dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)), seed=st.integers(0, 99))
def test_conv2d_random_attributes(groups, per_group, out_per_group, size, kernel, stride,
                                  padding, dilation, seed):
    assume(all(dilation[d] * (kernel[d] - 1) + 1 <= size[d] + 2 * padding[d] for d in range(2)))
    rng = np.random.default_rng(seed)
    xs = (1, groups * per_group) + size
    ws = (groups * out_per_group, per_group) + kernel
    x, w = _ph(xs, "x"), _ph(ws, "w")
    v, wv = rng.standard_normal(xs), rng.standard_normal(ws)
    y = nn.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)
    assert np.allclose(tg.evaluate(y, {x: v, w: wv}),
                       conv2d_ref(v, wv, stride, padding, dilation, groups))


@settings(max_examples=30, deadline=None)
@given(size=st.tuples(st.integers(1, 4), st.integers(1, 4)),
       kernel=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       padding=st.tuples(st.integers(0, 2), st.integers(0, 2)),
       dilation=st.tuples(st.integers(1, 2), st.integers(1, 2)),
       extra=st.tuples(st.integers(0, 2), st.integers(0, 2)), seed=st.integers(0, 99))
def test_conv2d_transpose_random_attributes(size, kernel, stride, padding, dilation, extra,
                                            seed):
    assume(all(extra[d] < max(stride[d], dilation[d]) for d in range(2)))
    assume(all((size[d] - 1) * stride[d] - 2 * padding[d] + dilation[d] * (kernel[d] - 1)
               + extra[d] + 1 > 0 for d in range(2)))
    rng = np.random.default_rng(seed)
    xs, ws = (1, 2) + size, (2, 3) + kernel
    x, w = _ph(xs, "x"), _ph(ws, "w")
    v, wv = rng.standard_normal(xs), rng.standard_normal(ws)
    y = nn.conv2d_transpose(x, w, stride=stride, padding=padding, output_padding=extra,
                            dilation=dilation)
    assert np.allclose(tg.evaluate(y, {x: v, w: wv}),
                       conv2d_transpose_ref(v, wv, stride, padding, extra, dilation))
