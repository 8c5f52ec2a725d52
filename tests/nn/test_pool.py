"""max_pool2d, avg_pool2d and the global pools against loops with PyTorch's rules."""
import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import nn


def _ph(shape, name="x", dtype="float64"):
    return tg.placeholder(shape, dtype=dtype, name=name)


def _two(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def torch_pool_size(size, k, s, p, d, ceil_mode):
    """PyTorch's pooling_output_shape."""
    span = size + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)
    out = span // s + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


def _params(v, kernel, stride, padding, dilation, ceil_mode):
    k, p, d = _two(kernel), _two(padding), _two(dilation)
    s = k if stride is None else _two(stride)
    out = [torch_pool_size(v.shape[2 + i], k[i], s[i], p[i], d[i], ceil_mode) for i in range(2)]
    return k, s, p, d, out


def _taps(o, k, s, p, d, size):
    return [o * s - p + r * d for r in range(k) if 0 <= o * s - p + r * d < size]


def max_pool_ref(v, kernel, stride, padding, dilation, ceil_mode):
    k, s, p, d, (oh, ow) = _params(v, kernel, stride, padding, dilation, ceil_mode)
    out = np.empty(v.shape[:2] + (oh, ow), dtype=v.dtype)
    for y in range(oh):
        for x in range(ow):
            rows = _taps(y, k[0], s[0], p[0], d[0], v.shape[2])
            cols = _taps(x, k[1], s[1], p[1], d[1], v.shape[3])
            out[:, :, y, x] = v[:, :, rows][:, :, :, cols].max(axis=(2, 3))
    return out


def avg_pool_ref(v, kernel, stride, padding, ceil_mode, count_include_pad):
    """PyTorch's avg_pool2d loop (no dilation)."""
    k, s, p, _, (oh, ow) = _params(v, kernel, stride, padding, 1, ceil_mode)
    height, width = v.shape[2:]
    out = np.empty(v.shape[:2] + (oh, ow))
    for y in range(oh):
        for x in range(ow):
            hstart, wstart = y * s[0] - p[0], x * s[1] - p[1]
            hend, wend = min(hstart + k[0], height + p[0]), min(wstart + k[1], width + p[1])
            pool_size = (hend - hstart) * (wend - wstart)
            hstart, wstart = max(hstart, 0), max(wstart, 0)
            hend, wend = min(hend, height), min(wend, width)
            total = v[:, :, hstart:hend, wstart:wend].sum(axis=(2, 3))
            divisor = pool_size if count_include_pad else (hend - hstart) * (wend - wstart)
            out[:, :, y, x] = total / divisor
    return out


def dilated_avg_pool_ref(v, kernel, stride, padding, dilation, ceil_mode, count_include_pad):
    """Taps inside the input summed, divided by the taps inside the (padded) input."""
    k, s, p, d, (oh, ow) = _params(v, kernel, stride, padding, dilation, ceil_mode)
    out = np.empty(v.shape[:2] + (oh, ow))
    for y in range(oh):
        for x in range(ow):
            rows = _taps(y, k[0], s[0], p[0], d[0], v.shape[2])
            cols = _taps(x, k[1], s[1], p[1], d[1], v.shape[3])
            total = v[:, :, rows][:, :, :, cols].sum(axis=(2, 3))
            if count_include_pad:
                n_rows = len(_taps(y + 0, k[0], s[0], 0, d[0], v.shape[2] + 2 * p[0]))
                n_cols = len(_taps(x + 0, k[1], s[1], 0, d[1], v.shape[3] + 2 * p[1]))
                divisor = n_rows * n_cols
            else:
                divisor = len(rows) * len(cols)
            out[:, :, y, x] = total / divisor
    return out


POOL_CASES = [
    # shape, kernel, stride, padding, dilation, ceil_mode
    ((1, 2, 5, 5), 2, None, 0, 1, False),
    ((1, 2, 5, 5), 2, None, 0, 1, True),
    ((2, 1, 7, 6), 3, 2, 1, 1, True),
    ((1, 1, 6, 7), (3, 2), (1, 2), (1, 1), 1, False),
    ((1, 2, 4, 8), 5, 1, 2, 1, False),          # padding larger than stride
    ((1, 1, 9, 8), (4, 3), (3, 2), (2, 1), 1, True),
    ((1, 1, 7, 7), 3, 2, 1, 2, True),           # dilation 2
    ((1, 1, 8, 9), (2, 3), 3, (1, 0), (3, 2), True),
]


@pytest.mark.parametrize("shape,kernel,stride,padding,dilation,ceil_mode", POOL_CASES)
def test_max_pool2d(rng, shape, kernel, stride, padding, dilation, ceil_mode):
    x = _ph(shape)
    v = -rng.uniform(1, 2, shape)   # all negative: zero padding would show
    y = nn.max_pool2d(x, kernel, stride=stride, padding=padding, dilation=dilation,
                      ceil_mode=ceil_mode)
    ref = max_pool_ref(v, kernel, stride, padding, dilation, ceil_mode)
    assert y.shape == ref.shape and y.name == "max_pool2d"
    assert np.array_equal(tg.evaluate(y, {x: v}), ref)


@pytest.mark.parametrize("count_include_pad", [True, False])
@pytest.mark.parametrize("shape,kernel,stride,padding,dilation,ceil_mode", POOL_CASES)
def test_avg_pool2d(rng, shape, kernel, stride, padding, dilation, ceil_mode,
                    count_include_pad):
    x = _ph(shape)
    v = rng.standard_normal(shape)
    y = nn.avg_pool2d(x, kernel, stride=stride, padding=padding, dilation=dilation,
                      ceil_mode=ceil_mode, count_include_pad=count_include_pad)
    ref = dilated_avg_pool_ref(v, kernel, stride, padding, dilation, ceil_mode,
                               count_include_pad)
    if dilation == 1:
        torch_ref = avg_pool_ref(v, kernel, stride, padding, ceil_mode, count_include_pad)
        assert np.allclose(ref, torch_ref)
    assert y.shape == ref.shape and y.name == "avg_pool2d"
    assert np.allclose(tg.evaluate(y, {x: v}), ref)


def test_avg_pool2d_known_values():
    x = _ph((1, 1, 3, 3))
    v = np.arange(9.0).reshape(1, 1, 3, 3)
    out = tg.evaluate(nn.avg_pool2d(x, 2, ceil_mode=True), {x: v})
    assert out[0, 0].tolist() == [[2.0, 3.5], [6.5, 8.0]]
    # window 1 of 3x3/2 pad 1 over 4 rows runs past the right padding: divisor 3 * 2
    x4 = _ph((1, 1, 4, 4), "x4")
    out = tg.evaluate(nn.avg_pool2d(x4, 3, 2, 1, ceil_mode=True), {x4: np.ones((1, 1, 4, 4))})
    assert np.allclose(out[0, 0], [[4 / 9, 6 / 9, 2 / 6], [6 / 9, 1, 3 / 6], [2 / 6, 3 / 6, 1 / 4]])


def test_max_pool2d_integer_input(rng):
    x = _ph((1, 2, 4, 5), dtype="int32")
    v = rng.integers(-50, 50, (1, 2, 4, 5)).astype("int32")
    out = tg.evaluate(nn.max_pool2d(x, 3, 2, 1), {x: v})
    assert out.dtype == np.int32
    assert np.array_equal(out, max_pool_ref(v, 3, 2, 1, 1, False))


def test_pools_are_one_stage_with_affine_indices():
    x = _ph((1, 1, 6, 6))
    for y in (nn.max_pool2d(x, 3, 2, 1), nn.avg_pool2d(x, 3, 2, 1, count_include_pad=False)):
        assert tg.topological_order([y]) == [x, y]
        assert "yy * 2 + ry - 1" in tg.format(y)


@pytest.mark.parametrize("fn", [nn.max_pool2d, nn.avg_pool2d])
def test_pool_errors(fn):
    op = fn.__name__
    x = _ph((1, 1, 4, 4))
    # more than PyTorch's half kernel is accepted while every window holds an input element
    assert fn(x, 3, padding=2).shape == (1, 1, 2, 2)
    with pytest.raises(tg.TegradError, match=f"{op}: window 0 of 'x' along height \\(taps -3, "
                                             f"-2, ... with dilation 1\\) holds no input "
                                             f"element, only padding \\(3 before, 3 after\\)"):
        fn(x, 3, padding=3)
    with pytest.raises(tg.TegradError, match=f"{op}: window 2 of 'x' along width \\(taps 4, 5, "
                                             f"... with dilation 1\\) holds no input element, "
                                             f"only padding \\(0 before, 2 after\\)"):
        fn(x, 2, padding=((0, 0), (0, 2)))
    with pytest.raises(tg.ShapeError, match=f"{op}: the kernel of 'x' along width \\(5, dilated "
                                            f"to 5\\) is larger than the padded input"):
        fn(x, (2, 5))
    with pytest.raises(tg.ShapeError, match=f"{op}: the kernel of 'x' along height \\(3, "
                                            f"dilated to 7\\)"):
        fn(x, 3, dilation=3, padding=1)
    with pytest.raises(tg.TegradError, match=f"{op}: window 0 of 'x' along width \\(taps -1, "
                                             f"4, ... with dilation 5\\) holds no input"):
        fn(x, (1, 2), padding=(0, 1), dilation=5)
    with pytest.raises(tg.TegradError, match=f"{op}: stride must be positive, got 0"):
        fn(x, 2, stride=0)
    with pytest.raises(tg.TegradError, match=f"{op}: kernel must be positive, got 0"):
        fn(x, (0, 2))
    with pytest.raises(tg.TegradError, match=f"{op}: ceil_mode must be True or False"):
        fn(x, 2, ceil_mode=1)
    with pytest.raises(tg.ShapeError, match=f"{op}: x 'v' must have 4 dimension"):
        fn(_ph((4, 4), "v"), 2)


def test_avg_pool2d_errors():
    with pytest.raises(tg.DTypeError, match="avg_pool2d: x 'xi' has dtype int32"):
        nn.avg_pool2d(_ph((1, 1, 4, 4), "xi", "int32"), 2)
    with pytest.raises(tg.TegradError, match="avg_pool2d: count_include_pad must be True"):
        nn.avg_pool2d(_ph((1, 1, 4, 4)), 2, count_include_pad=None)


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (1, 1, 1, 1)])
def test_global_pools(rng, shape):
    x = _ph(shape)
    v = rng.standard_normal(shape)
    mx, av = tg.evaluate([nn.global_max_pool2d(x), nn.global_avg_pool2d(x)], {x: v})
    assert mx.shape == av.shape == shape[:2] + (1, 1)
    for n in range(shape[0]):
        for c in range(shape[1]):
            assert mx[n, c, 0, 0] == max(v[n, c].ravel())
            assert np.isclose(av[n, c, 0, 0], sum(v[n, c].ravel()) / v[n, c].size)


@pytest.mark.parametrize("fn", [nn.global_max_pool2d, nn.global_avg_pool2d])
def test_global_pool_errors(fn):
    with pytest.raises(tg.ShapeError, match=f"{fn.__name__}: x 'v' must have 4 dimension"):
        fn(_ph((3, 4, 4), "v"))
    with pytest.raises(tg.TegradError, match=f"{fn.__name__}: x must be a tegrad Tensor"):
        fn(np.ones((1, 1, 2, 2)))


@settings(max_examples=40, deadline=None)
@given(size=st.tuples(st.integers(1, 8), st.integers(1, 8)),
       kernel=st.tuples(st.integers(1, 4), st.integers(1, 4)),
       stride=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       pad_fraction=st.tuples(st.floats(0, 1), st.floats(0, 1)),
       dilation=st.tuples(st.integers(1, 3), st.integers(1, 3)),
       ceil_mode=st.booleans(), count_include_pad=st.booleans(), seed=st.integers(0, 99))
def test_pools_random_attributes(size, kernel, stride, pad_fraction, dilation, ceil_mode,
                                 count_include_pad, seed):
    padding = tuple(int(f * (k // 2)) for f, k in zip(pad_fraction, kernel))
    assume(all(dilation[d] * (kernel[d] - 1) + 1 <= size[d] + 2 * padding[d] for d in range(2)))
    shape = (1, 2) + size
    v = np.random.default_rng(seed).standard_normal(shape)
    *_, out = _params(v, kernel, stride, padding, dilation, ceil_mode)
    assume(all(out[d] > 0 for d in range(2)))
    assume(all(_taps(o, kernel[d], stride[d], padding[d], dilation[d], size[d])
               for d in range(2) for o in range(out[d])))
    x = _ph(shape)
    mx = nn.max_pool2d(x, kernel, stride, padding, dilation, ceil_mode)
    av = nn.avg_pool2d(x, kernel, stride, padding, dilation, ceil_mode, count_include_pad)
    got_max, got_avg = tg.evaluate([mx, av], {x: v})
    assert np.array_equal(got_max, max_pool_ref(v, kernel, stride, padding, dilation, ceil_mode))
    assert np.allclose(got_avg, dilated_avg_pool_ref(v, kernel, stride, padding, dilation,
                                                     ceil_mode, count_include_pad))
