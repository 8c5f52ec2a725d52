"""resize and upsampling against loops written after PyTorch's F.interpolate kernels."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn


def _ph(shape, name="x", dtype="float64"):
    return tg.placeholder(shape, dtype=dtype, name=name)


def nearest_exact_floor(n_in, n_out):
    return [(d * n_in) // n_out for d in range(n_out)]


def nearest_torch(n_in, n_out):
    """PyTorch's nearest_idx: floor(dst * float32(in / out)) in float32."""
    if n_out == n_in:
        return list(range(n_out))
    if n_out == 2 * n_in:
        return [d >> 1 for d in range(n_out)]
    scale = np.float32(n_in) / np.float32(n_out)
    return [min(int(np.floor(np.float32(d) * scale)), n_in - 1) for d in range(n_out)]


def nearest_ref(v, size):
    rows = nearest_exact_floor(v.shape[2], size[0])
    cols = nearest_exact_floor(v.shape[3], size[1])
    return v[:, :, rows][:, :, :, cols]


def _source(n_in, n_out, dst, align_corners):
    if align_corners:
        scale = (n_in - 1) / (n_out - 1) if n_out > 1 else 0.0
        return scale * dst
    return max(n_in / n_out * (dst + 0.5) - 0.5, 0.0)


def bilinear_ref(v, size, align_corners):
    """upsample_bilinear2d: h1 = int(src), h1p = (h1 < in - 1), lambdas from src - h1."""
    height, width = v.shape[2:]
    out = np.empty(v.shape[:2] + tuple(size))
    for y in range(size[0]):
        hr = _source(height, size[0], y, align_corners)
        h1 = int(hr)
        h1p = 1 if h1 < height - 1 else 0
        h1l = hr - h1
        h0l = 1.0 - h1l
        for x in range(size[1]):
            wr = _source(width, size[1], x, align_corners)
            w1 = int(wr)
            w1p = 1 if w1 < width - 1 else 0
            w1l = wr - w1
            w0l = 1.0 - w1l
            out[:, :, y, x] = (h0l * (w0l * v[:, :, h1, w1] + w1l * v[:, :, h1, w1 + w1p])
                               + h1l * (w0l * v[:, :, h1 + h1p, w1]
                                        + w1l * v[:, :, h1 + h1p, w1 + w1p]))
    return out


NEAREST_CASES = [((1, 2, 3, 5), (7, 2)), ((2, 1, 6, 4), (4, 12)), ((1, 1, 5, 5), (5, 5)),
                 ((1, 1, 7, 3), (1, 6))]


@pytest.mark.parametrize("shape,size", NEAREST_CASES)
def test_resize_nearest(rng, shape, size):
    x = _ph(shape)
    v = rng.standard_normal(shape)
    y = nn.resize(x, size)
    assert y.shape == shape[:2] + size and y.name == "resize"
    ref = nearest_ref(v, size)
    # for these sizes PyTorch's float32 rule picks the same pixels
    assert nearest_torch(shape[2], size[0]) == nearest_exact_floor(shape[2], size[0])
    assert nearest_torch(shape[3], size[1]) == nearest_exact_floor(shape[3], size[1])
    assert np.array_equal(tg.evaluate(y, {x: v}), ref)


def test_resize_nearest_is_exact_where_float32_rounding_differs():
    # PyTorch's floor(dst * float32(14 / 46)) in float32 picks a neighbouring pixel at
    # one position; tegrad uses the exact floor(dst * 14 / 46)
    n_in, n_out = 14, 46
    exact, torch = nearest_exact_floor(n_in, n_out), nearest_torch(n_in, n_out)
    differs = [d for d in range(n_out) if exact[d] != torch[d]]
    assert len(differs) == 1
    x = _ph((1, 1, n_in, 1))
    v = np.arange(float(n_in)).reshape(1, 1, n_in, 1)
    out = tg.evaluate(nn.resize(x, (n_out, 1)), {x: v})[0, 0, :, 0]
    assert out.tolist() == [float(i) for i in exact]


def test_resize_nearest_integer_input():
    x = _ph((1, 1, 2, 3), dtype="int32")
    v = np.arange(6, dtype="int32").reshape(1, 1, 2, 3)
    out = tg.evaluate(nn.resize(x, (4, 2)), {x: v})
    assert out.dtype == np.int32 and out[0, 0].tolist() == [[0, 1], [0, 1], [3, 4], [3, 4]]


BILINEAR_CASES = [((1, 2, 3, 4), (7, 9)), ((1, 1, 7, 6), (3, 4)), ((2, 1, 4, 5), (4, 5)),
                  ((1, 1, 3, 4), (1, 1)), ((1, 1, 1, 3), (4, 6)), ((1, 1, 5, 2), (8, 1))]


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("shape,size", BILINEAR_CASES)
def test_resize_bilinear(rng, shape, size, align_corners):
    x = _ph(shape)
    v = rng.standard_normal(shape)
    y = nn.resize(x, size, method="bilinear", align_corners=align_corners)
    ref = bilinear_ref(v, size, align_corners)
    assert y.shape == ref.shape and tg.topological_order([y]) == [x, y]
    assert np.allclose(tg.evaluate(y, {x: v}), ref)


def test_resize_bilinear_known_values():
    x = _ph((1, 1, 2, 2))
    v = np.array([[[[0.0, 1.0], [2.0, 3.0]]]])
    half = tg.evaluate(nn.resize(x, (4, 4), "bilinear"), {x: v})[0, 0]
    assert np.allclose(half[0], [0.0, 0.25, 0.75, 1.0])
    assert np.allclose(half[:, 0], [0.0, 0.5, 1.5, 2.0])
    corners = tg.evaluate(nn.resize(x, (3, 3), "bilinear", align_corners=True), {x: v})[0, 0]
    assert np.allclose(corners, [[0, 0.5, 1], [1, 1.5, 2], [2, 2.5, 3]])


def test_resize_indices_are_affine():
    x = _ph((1, 1, 3, 4))
    text = tg.format(nn.resize(x, (7, 8), "bilinear"))
    assert "floor" not in text and "float32(yy" not in text
    # width 4 -> 8: src = max((x + 1/2) / 2 - 1/2, 0) = max(2x - 1, 0) / 4; the clamps are
    # selects on affine conditions, the indices are affine
    assert "(xx * 2 - 1) // 4" in text and "(xx * 2 - 1) % 4" in text
    assert "xx * 2 - 1 < 0 ?" in text and "yy * 3 - 2 >= 14 ?" in text
    assert "max(" not in text and "min(" not in text


def test_resize_errors():
    x = _ph((1, 1, 3, 3))
    with pytest.raises(tg.TegradError, match="resize: size must be positive, got 0"):
        nn.resize(x, (0, 3))
    with pytest.raises(tg.TegradError, match="resize: size must be an int or a pair"):
        nn.resize(x, (1, 2, 3))
    with pytest.raises(tg.TegradError, match="resize: method 'bicubic' is not supported"):
        nn.resize(x, (4, 4), method="bicubic")
    with pytest.raises(tg.TegradError, match="resize: align_corners=True only applies to the "
                                             "bilinear method"):
        nn.resize(x, (4, 4), align_corners=True)
    with pytest.raises(tg.TegradError, match="resize: align_corners must be True or False"):
        nn.resize(x, (4, 4), "bilinear", align_corners=None)
    with pytest.raises(tg.DTypeError, match="resize: x 'xi' has dtype int32"):
        nn.resize(_ph((1, 1, 3, 3), "xi", "int32"), (4, 4), "bilinear")
    with pytest.raises(tg.ShapeError, match="resize: x 'x3' must have 4 dimension"):
        nn.resize(_ph((1, 3, 3), "x3"), (4, 4))


@pytest.mark.parametrize("scale", [2, (2, 3), (1, 3)])
def test_upsampling_nearest(rng, scale):
    x = _ph((2, 2, 3, 2))
    v = rng.standard_normal((2, 2, 3, 2))
    sh, sw = (scale, scale) if isinstance(scale, int) else scale
    ref = np.repeat(np.repeat(v, sh, axis=2), sw, axis=3)
    y = nn.upsampling(x, scale)
    assert "//" in tg.format(y) or sh == sw == 1
    assert np.array_equal(tg.evaluate(y, {x: v}), ref)


@pytest.mark.parametrize("align_corners", [False, True])
def test_upsampling_bilinear(rng, align_corners):
    x = _ph((1, 2, 3, 4))
    v = rng.standard_normal((1, 2, 3, 4))
    y = nn.upsampling(x, (2, 3), method="bilinear", align_corners=align_corners)
    assert np.allclose(tg.evaluate(y, {x: v}), bilinear_ref(v, (6, 12), align_corners))


def test_upsampling_errors():
    x = _ph((1, 1, 3, 3))
    with pytest.raises(tg.TegradError, match="upsampling: scale must be positive, got 0"):
        nn.upsampling(x, 0)
    with pytest.raises(tg.TegradError, match="upsampling: scale must be an integer, got 1.5"):
        nn.upsampling(x, (1.5, 2))
    with pytest.raises(tg.TegradError, match="upsampling: method 'area' is not supported"):
        nn.upsampling(x, 2, method="area")


@settings(max_examples=40, deadline=None)
@given(n_in=st.tuples(st.integers(1, 9), st.integers(1, 9)),
       n_out=st.tuples(st.integers(1, 12), st.integers(1, 12)), align_corners=st.booleans(),
       seed=st.integers(0, 99))
def test_resize_random_sizes(n_in, n_out, align_corners, seed):
    shape = (1, 1) + n_in
    v = np.random.default_rng(seed).standard_normal(shape)
    x = _ph(shape)
    near, lin = tg.evaluate([nn.resize(x, n_out),
                             nn.resize(x, n_out, "bilinear", align_corners=align_corners)],
                            {x: v})
    assert np.array_equal(near, nearest_ref(v, n_out))
    assert np.allclose(lin, bilinear_ref(v, n_out, align_corners))
