"""Winograd weight transform and convolution against Lavin's matrices and direct conv."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import nn

# Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", F(2x2, 3x3)
LAVIN_G = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]])


def _ph(shape, name, dtype="float64"):
    return tg.placeholder(shape, dtype=dtype, name=name)


def direct_conv(v, wv, padding):
    vp = np.pad(v, ((0, 0), (0, 0), (padding[0],) * 2, (padding[1],) * 2))
    n_batch, _, height, width = vp.shape
    out_c, _, k, _ = wv.shape
    out = np.zeros((n_batch, out_c, height - k + 1, width - k + 1))
    for y in range(out.shape[2]):
        for x in range(out.shape[3]):
            out[:, :, y, x] = np.einsum("nchw,ochw->no", vp[:, :, y:y + k, x:x + k], wv)
    return out


@pytest.mark.parametrize("shape", [(2, 3, 3, 3), (1, 1, 3, 3)])
def test_weight_transform_f2x2_3x3(rng, shape):
    w = _ph(shape, "w")
    wv = rng.standard_normal(shape)
    u = nn.conv2d_winograd_weight_transform(w)
    assert u.shape == (4, 4) + shape[:2]
    ref = np.empty((4, 4) + shape[:2])
    for o in range(shape[0]):
        for i in range(shape[1]):
            ref[:, :, o, i] = LAVIN_G @ wv[o, i] @ LAVIN_G.T
    assert np.allclose(tg.evaluate(u, {w: wv}), ref)


@pytest.mark.parametrize("tile,kernel", [(2, 3), (4, 3), (3, 2), (2, 5)])
def test_winograd_matrices_compute_correlations(rng, tile, kernel):
    from tegrad.nn.winograd import winograd_matrices
    at, g, bt = (np.array(m, dtype=float) for m in winograd_matrices(tile, kernel))
    d, f = rng.standard_normal(tile + kernel - 1), rng.standard_normal(kernel)
    ref = [sum(d[i + k] * f[k] for k in range(kernel)) for i in range(tile)]
    assert np.allclose(at @ ((g @ f) * (bt @ d)), ref)
    assert all(float(v).is_integer() for v in bt.ravel())


CASES = [
    # x shape, w shape, padding, tile
    ((1, 2, 6, 6), (3, 2, 3, 3), 1, 2),
    ((2, 3, 7, 5), (2, 3, 3, 3), (0, 1), 2),     # odd sizes: partial last tiles
    ((1, 2, 9, 8), (2, 2, 3, 3), 2, 4),          # F(4x4, 3x3), padding 2
    ((1, 1, 5, 6), (2, 1, 5, 5), 2, 3),          # F(3x3, 5x5)
]


@pytest.mark.parametrize("xs,ws,padding,tile", CASES)
def test_winograd_equals_conv2d(rng, xs, ws, padding, tile):
    x, w = _ph(xs, "x"), _ph(ws, "w")
    v, wv = rng.standard_normal(xs), rng.standard_normal(ws)
    u = nn.conv2d_winograd_weight_transform(w, tile_size=tile)
    y = nn.conv2d_winograd_without_weight_transform(x, u, padding=padding, tile_size=tile)
    pads = (padding, padding) if isinstance(padding, int) else padding
    ref = direct_conv(v, wv, pads)
    assert y.shape == ref.shape
    assert np.allclose(tg.evaluate(y, {x: v, w: wv}), ref)


def test_winograd_with_a_fed_transformed_weight(rng):
    x, u = _ph((1, 1, 4, 4), "x"), _ph((4, 4, 1, 1), "u")
    wv = rng.standard_normal((1, 1, 3, 3))
    uv = (LAVIN_G @ wv[0, 0] @ LAVIN_G.T).reshape(4, 4, 1, 1)
    v = rng.standard_normal((1, 1, 4, 4))
    y = nn.conv2d_winograd_without_weight_transform(x, u, padding=1)
    assert np.allclose(tg.evaluate(y, {x: v, u: uv}), direct_conv(v, wv, (1, 1)))


def test_winograd_stage_names():
    x, w = _ph((1, 1, 4, 4), "x"), _ph((1, 1, 3, 3), "w")
    y = nn.conv2d_winograd_without_weight_transform(x, nn.conv2d_winograd_weight_transform(w),
                                                    padding=1)
    assert y.name == "conv2d_winograd_without_weight_transform"
    names = {t.name for t in tg.topological_order([y])}
    assert names == {"x", "w", "winograd_G", "conv2d_winograd_weight_transform", "winograd_AT",
                     "winograd_BT", "winograd_input", "winograd_batch_gemm", y.name}


def test_weight_transform_errors():
    with pytest.raises(tg.ShapeError, match="conv2d_winograd_weight_transform: weight 'w' has a "
                                            "3x2 kernel; winograd needs a square kernel"):
        nn.conv2d_winograd_weight_transform(_ph((1, 1, 3, 2), "w"))
    with pytest.raises(tg.TegradError, match="conv2d_winograd_weight_transform: tile_size must "
                                             "be positive"):
        nn.conv2d_winograd_weight_transform(_ph((1, 1, 3, 3), "w"), tile_size=0)
    with pytest.raises(tg.TegradError, match="tile_size 9 with a 3x3 kernel needs 10 "
                                             "interpolation points"):
        nn.conv2d_winograd_weight_transform(_ph((1, 1, 3, 3), "w"), tile_size=9)
    with pytest.raises(tg.ShapeError, match="weight 'w3' must have 4 dimension"):
        nn.conv2d_winograd_weight_transform(_ph((1, 3, 3), "w3"))


def test_winograd_errors():
    op = "conv2d_winograd_without_weight_transform"
    x = _ph((1, 2, 5, 5), "x")
    with pytest.raises(tg.TegradError, match=f"{op}: winograd convolution supports only stride "
                                             f"1, got stride=2"):
        nn.conv2d_winograd_without_weight_transform(x, _ph((4, 4, 2, 2), "u"), stride=2)
    with pytest.raises(tg.ShapeError, match=f"{op}: transformed weight 'u' of shape \\(4, 4, 3, "
                                            f"3\\) expects 3 input channel.*'x' has 2"):
        nn.conv2d_winograd_without_weight_transform(x, _ph((4, 4, 3, 3), "u"))
    with pytest.raises(tg.ShapeError, match=f"{op}: transformed weight 'u' of shape \\(4, 3, 2, "
                                            f"2\\) does not match tile_size 2"):
        nn.conv2d_winograd_without_weight_transform(x, _ph((4, 3, 2, 2), "u"))
    with pytest.raises(tg.ShapeError, match=f"{op}: the 7x7 kernel is larger than the padded "
                                            f"input of x 'x'"):
        nn.conv2d_winograd_without_weight_transform(x, _ph((8, 8, 2, 2), "u"))
    with pytest.raises(tg.TegradError, match=f"{op}: padding must be non-negative"):
        nn.conv2d_winograd_without_weight_transform(x, _ph((4, 4, 2, 2), "u"), padding=-1)
    with pytest.raises(tg.DTypeError, match=f"{op}: transformed weight 'u32' has dtype float32"):
        nn.conv2d_winograd_without_weight_transform(x, _ph((4, 4, 2, 2), "u32", "float32"))
