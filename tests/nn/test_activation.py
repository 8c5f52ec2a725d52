"""relu, leaky_relu, prelu, softmax, log_softmax against numpy."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import nn


def _x(shape, dtype="float64", name="x"):
    return tg.placeholder(shape, dtype=dtype, name=name)


@pytest.mark.parametrize("shape", [(7,), (2, 3, 5), ()])
def test_relu(rng, shape):
    x = _x(shape)
    v = rng.standard_normal(shape)
    out = tg.evaluate(nn.relu(x), {x: v})
    assert np.array_equal(out, np.where(v > 0, v, 0.0))


def test_relu_integer_input():
    x = _x((4,), "int32")
    v = np.array([-3, 0, 2, -1], dtype="int32")
    out = tg.evaluate(nn.relu(x), {x: v})
    assert out.dtype == np.int32 and out.tolist() == [0, 0, 2, 0]


def test_relu_errors():
    with pytest.raises(tg.TegradError, match="relu: x must be a tegrad Tensor"):
        nn.relu(np.ones(3))


@pytest.mark.parametrize("shape,alpha", [((3, 4), 0.01), ((2, 1, 5), 0.3)])
def test_leaky_relu(rng, shape, alpha):
    x = _x(shape)
    v = rng.standard_normal(shape)
    out = tg.evaluate(nn.leaky_relu(x, alpha=alpha), {x: v})
    ref = np.array([e if e > 0 else alpha * e for e in v.ravel()]).reshape(shape)
    assert np.allclose(out, ref)


def test_leaky_relu_errors():
    with pytest.raises(tg.DTypeError, match="leaky_relu: x 'xi' has dtype int32"):
        nn.leaky_relu(_x((3,), "int32", "xi"))
    with pytest.raises(tg.TegradError, match="leaky_relu: alpha must be a number"):
        nn.leaky_relu(_x((3,)), alpha="0.1")


def _prelu_ref(v, slopes, axis):
    out = v.copy()
    for idx in np.ndindex(v.shape):
        c = idx[axis] if slopes.size > 1 else 0
        if v[idx] <= 0:
            out[idx] = slopes[c] * v[idx]
    return out


@pytest.mark.parametrize("shape,axis,n_alpha", [((2, 3, 4, 5), 1, 3), ((3, 5), -1, 5),
                                                ((2, 3, 2), 1, 1)])
def test_prelu(rng, shape, axis, n_alpha):
    x, a = _x(shape), _x((n_alpha,), name="alpha")
    v, s = rng.standard_normal(shape), rng.uniform(0, 1, n_alpha)
    out = tg.evaluate(nn.prelu(x, a, axis=axis), {x: v, a: s})
    assert np.allclose(out, _prelu_ref(v, s, axis % len(shape)))


def test_prelu_errors():
    x = _x((2, 3, 4))
    with pytest.raises(tg.ShapeError, match="prelu: alpha 'slopes' has shape \\(4,\\).*3 "
                                            "channel"):
        nn.prelu(x, _x((4,), name="slopes"))
    with pytest.raises(tg.TegradError, match="prelu: axis 3 is out of range"):
        nn.prelu(x, _x((3,), name="a"), axis=3)
    with pytest.raises(tg.ShapeError, match="prelu: alpha 'a2' must have 1 dimension"):
        nn.prelu(x, _x((3, 1), name="a2"))
    with pytest.raises(tg.DTypeError, match="prelu: alpha 'a32' has dtype float32 but 'x'"):
        nn.prelu(x, _x((3,), "float32", name="a32"))


def _softmax_ref(v, axis):
    e = np.exp(v - v.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


@pytest.mark.parametrize("shape,axis", [((4, 7), -1), ((2, 3, 5), 1), ((3, 2, 4), 0), ((6,), 0)])
def test_softmax_and_log_softmax(rng, shape, axis):
    x = _x(shape)
    v = rng.standard_normal(shape) * 3
    sm, lsm = tg.evaluate([nn.softmax(x, axis=axis), nn.log_softmax(x, axis=axis)], {x: v})
    ref = _softmax_ref(v, axis)
    assert np.allclose(sm, ref)
    assert np.allclose(lsm, np.log(ref))


def test_softmax_is_stable_for_large_logits():
    x = _x((2, 3))
    v = np.array([[1000.0, 1001.0, 1002.0], [-1000.0, -1000.0, -999.0]])
    sm, lsm = tg.evaluate([nn.softmax(x), nn.log_softmax(x)], {x: v})
    assert np.all(np.isfinite(sm)) and np.all(np.isfinite(lsm))
    assert np.allclose(sm, _softmax_ref(v, -1))
    assert np.allclose(lsm[0], [-2.40760596, -1.40760596, -0.40760596])


def test_softmax_float32():
    x = _x((3, 4), "float32")
    v = np.linspace(-5, 5, 12, dtype="float32").reshape(3, 4)
    out = tg.evaluate(nn.softmax(x, axis=0), {x: v})
    assert out.dtype == np.float32 and np.allclose(out, _softmax_ref(v, 0), atol=1e-6)


def test_softmax_stage_names():
    x = _x((2, 3))
    y = nn.log_softmax(x)
    assert y.name == "log_softmax"
    assert {t.name for t in tg.topological_order([y])} == {"x", "log_softmax_max",
                                                          "log_softmax_sum", "log_softmax"}


@pytest.mark.parametrize("fn", [nn.softmax, nn.log_softmax])
def test_softmax_errors(fn):
    name = fn.__name__
    with pytest.raises(tg.TegradError, match=f"{name}: axis -3 is out of range for a tensor "
                                             f"of 2 dimension"):
        fn(_x((2, 3)), axis=-3)
    with pytest.raises(tg.TegradError, match=f"{name}: axis must be an integer"):
        fn(_x((2, 3)), axis=1.0)
    with pytest.raises(tg.DTypeError, match=f"{name}: x 'ints' has dtype int64"):
        fn(_x((2, 3), "int64", "ints"))
