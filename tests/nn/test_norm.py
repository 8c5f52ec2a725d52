"""batch_norm, lrn and l2_normalize against numpy."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import nn


def _ph(shape, name, dtype="float64"):
    return tg.placeholder(shape, dtype=dtype, name=name)


def _per_channel(values, axis, ndim):
    shape = [1] * ndim
    shape[axis] = -1
    return np.asarray(values).reshape(shape)


@pytest.mark.parametrize("shape,axis", [((4, 3, 2, 5), 1), ((6, 4), -1), ((3, 2, 5), 0)])
def test_batch_norm_training(rng, shape, axis):
    c = shape[axis]
    x, g, b = _ph(shape, "x"), _ph((c,), "gamma"), _ph((c,), "beta")
    v = rng.standard_normal(shape) * 3 + 1
    gv, bv = rng.uniform(0.5, 2, c), rng.standard_normal(c)
    out, mean, var = nn.batch_norm(x, g, b, axis=axis, epsilon=1e-3)
    ov, mv, vv = tg.evaluate([out, mean, var], {x: v, g: gv, b: bv})
    ax = axis % len(shape)
    others = tuple(d for d in range(len(shape)) if d != ax)
    ref_mean = np.array([np.take(v, i, axis=ax).mean() for i in range(c)])
    ref_var = np.array([np.mean((np.take(v, i, axis=ax) - ref_mean[i]) ** 2) for i in range(c)])
    assert np.allclose(mv, ref_mean) and np.allclose(vv, ref_var)
    assert np.allclose(vv, v.var(axis=others))
    mean_b, var_b = _per_channel(ref_mean, ax, v.ndim), _per_channel(ref_var, ax, v.ndim)
    ref = ((v - mean_b) / np.sqrt(var_b + 1e-3) * _per_channel(gv, ax, v.ndim)
           + _per_channel(bv, ax, v.ndim))
    assert np.allclose(ov, ref)


def test_batch_norm_inference_with_optional_scale(rng):
    shape = (2, 3, 4, 4)
    x, m, s, b = _ph(shape, "x"), _ph((3,), "m"), _ph((3,), "s"), _ph((1,), "b")
    v, mv, sv, bv = rng.standard_normal(shape), rng.standard_normal(3), rng.uniform(1, 2, 3), [0.5]
    out, mean, var = nn.batch_norm(x, None, b, mean=m, var=s, training=False)
    assert mean is m and var is s
    ref = (v - mv.reshape(1, 3, 1, 1)) / np.sqrt(sv.reshape(1, 3, 1, 1) + 1e-5) + 0.5
    assert np.allclose(tg.evaluate(out, {x: v, m: mv, s: sv, b: bv}), ref)


def test_batch_norm_training_ignores_running_statistics(rng):
    x, m, s = _ph((5, 2), "x"), _ph((2,), "m"), _ph((2,), "s")
    v = rng.standard_normal((5, 2))
    out, mean, var = nn.batch_norm(x, None, None, mean=m, var=s)
    assert mean is not m
    ov = tg.evaluate(out, {x: v})   # m and s need no feed
    assert np.allclose(ov, (v - v.mean(0)) / np.sqrt(v.var(0) + 1e-5))


def test_batch_norm_errors():
    x = _ph((2, 3, 4), "x")
    g = _ph((3,), "g")
    with pytest.raises(tg.TegradError, match="batch_norm: inference \\(training=False\\) needs "
                                             "the mean argument"):
        nn.batch_norm(x, g, g, training=False)
    with pytest.raises(tg.TegradError, match="batch_norm: inference .* needs the var"):
        nn.batch_norm(x, g, g, mean=g, training=False)
    with pytest.raises(tg.ShapeError, match="batch_norm: gamma 'g4' has shape \\(4,\\), but 'x' "
                                            "has 3 channel"):
        nn.batch_norm(x, _ph((4,), "g4"), g)
    with pytest.raises(tg.ShapeError, match="batch_norm: var 'v2' has shape \\(2,\\)"):
        nn.batch_norm(x, g, g, mean=g, var=_ph((2,), "v2"), training=False)
    with pytest.raises(tg.TegradError, match="batch_norm: axis -4 is out of range"):
        nn.batch_norm(x, g, g, axis=-4)
    with pytest.raises(tg.TegradError, match="batch_norm: epsilon must be non-negative"):
        nn.batch_norm(x, g, g, epsilon=-1.0)
    with pytest.raises(tg.TegradError, match="batch_norm: training must be True or False"):
        nn.batch_norm(x, g, g, training="yes")
    with pytest.raises(tg.TegradError, match="batch_norm: training needs more than one value "
                                             "per channel, but x 'one'"):
        nn.batch_norm(_ph((1, 3, 1, 1), "one"), g, g)
    with pytest.raises(tg.DTypeError, match="batch_norm: beta 'b32' has dtype float32"):
        nn.batch_norm(x, g, _ph((3,), "b32", "float32"))


def lrn_ref(v, size, axis, alpha, beta, bias):
    out = np.empty_like(v)
    channels = v.shape[axis]
    for idx in np.ndindex(v.shape):
        c = idx[axis]
        total = 0.0
        for j in range(c - size // 2, c - size // 2 + size):
            if 0 <= j < channels:
                total += v[idx[:axis] + (j,) + idx[axis + 1:]] ** 2
        out[idx] = v[idx] / (bias + alpha / size * total) ** beta
    return out


@pytest.mark.parametrize("shape,size,axis,alpha,beta,bias", [
    ((2, 7, 3, 2), 5, 1, 1e-4, 0.75, 2.0),
    ((2, 3, 4), 4, -1, 0.5, 0.6, 1.0),          # even size: window [c - 2, c + 1]
    ((3, 2), 7, 1, 0.3, 1.0, 1.5),              # window wider than the channels
])
def test_lrn(rng, shape, size, axis, alpha, beta, bias):
    x = _ph(shape, "x")
    v = rng.standard_normal(shape) * 2
    y = nn.lrn(x, size=size, axis=axis, alpha=alpha, beta=beta, bias=bias)
    assert y.name == "lrn" and tg.topological_order([y]) == [x, y]
    ref = lrn_ref(v, size, axis % len(shape), alpha, beta, bias)
    assert np.allclose(tg.evaluate(y, {x: v}), ref)


def test_lrn_errors():
    x = _ph((2, 3, 4, 4), "x")
    with pytest.raises(tg.TegradError, match="lrn: size must be positive, got 0"):
        nn.lrn(x, size=0)
    with pytest.raises(tg.TegradError, match="lrn: axis 4 is out of range"):
        nn.lrn(x, axis=4)
    with pytest.raises(tg.TegradError, match="lrn: beta must be a number"):
        nn.lrn(x, beta=None)
    with pytest.raises(tg.DTypeError, match="lrn: x 'xi' has dtype int32"):
        nn.lrn(_ph((2, 3), "xi", "int32"))


@pytest.mark.parametrize("shape,axis,eps", [((3, 4), None, 1e-12), ((2, 3, 4), 1, 1e-12),
                                            ((2, 3, 4), [0, -1], 1e-12), ((2, 5), -1, 10.0)])
def test_l2_normalize(rng, shape, axis, eps):
    x = _ph(shape, "x")
    v = rng.standard_normal(shape)
    if axis is None:
        axes = tuple(range(len(shape)))
    else:
        axes = tuple(a % len(shape) for a in ([axis] if isinstance(axis, int) else axis))
    ref = v / np.sqrt(np.maximum(np.sum(v * v, axis=axes, keepdims=True), eps))
    assert np.allclose(tg.evaluate(nn.l2_normalize(x, eps=eps, axis=axis), {x: v}), ref)


def test_l2_normalize_of_zeros_is_finite():
    x = _ph((2, 2), "x")
    assert np.array_equal(tg.evaluate(nn.l2_normalize(x, axis=1), {x: np.zeros((2, 2))}),
                          np.zeros((2, 2)))


def test_l2_normalize_errors():
    x = _ph((2, 3), "x")
    with pytest.raises(tg.TegradError, match="l2_normalize: axis 2 is out of range"):
        nn.l2_normalize(x, axis=2)
    with pytest.raises(tg.TegradError, match="l2_normalize: axis \\[1, -1\\] names a dimension "
                                             "twice"):
        nn.l2_normalize(x, axis=[1, -1])
    with pytest.raises(tg.TegradError, match="l2_normalize: axis must be None, an int or a "
                                             "non-empty list"):
        nn.l2_normalize(x, axis=[])
    with pytest.raises(tg.TegradError, match="l2_normalize: eps must be a number"):
        nn.l2_normalize(x, eps="small")


def test_l2_normalize_of_a_scalar():
    x = _ph((), "x")
    assert tg.evaluate(nn.l2_normalize(x), {x: np.array(-3.0)}) == -1.0
