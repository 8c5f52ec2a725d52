"""Reductions (sum, max, min, prod, mean, variance, argmax, argmin) against numpy."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import ops

AXES = [((2, 3, 4), None, False), ((2, 3, 4), 1, True), ((2, 3, 4), (0, -1), False),
        ((5,), -1, True), ((3, 1, 2), (2, 0, 1), True), ((3, 4), (), False), ((), None, False)]

REFERENCES = {"sum": np.sum, "max": np.max, "min": np.min, "prod": np.prod, "mean": np.mean,
              "variance": np.var}


@pytest.mark.parametrize("shape,axis,keepdims", AXES)
@pytest.mark.parametrize("name", list(REFERENCES))
def test_reduction_matches_numpy(name, shape, axis, keepdims, rng, run):
    a = rng.normal(size=shape)
    out = run(lambda x: getattr(ops, name)(x, axis=axis, keepdims=keepdims), a)
    expected = REFERENCES[name](a, axis=axis, keepdims=keepdims)
    assert out.shape == np.shape(expected)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["sum", "max", "min", "prod"])
def test_integer_reductions_keep_dtype(name, rng, run):
    a = rng.integers(-3, 4, size=(3, 5)).astype("int32")
    out = run(lambda x: getattr(ops, name)(x, axis=0), a)
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, REFERENCES[name](a, axis=0))


def test_mean_and_variance_of_integers_are_float64(run):
    a = np.array([[1, 2, 4], [3, 3, 3]], dtype="int32")
    mean = run(lambda x: ops.mean(x, axis=1), a)
    var = run(lambda x: ops.variance(x, axis=1), a)
    assert mean.dtype == var.dtype == np.float64
    np.testing.assert_allclose(mean, [7 / 3, 3.0])
    np.testing.assert_allclose(var, [((1 - 7 / 3) ** 2 + (2 - 7 / 3) ** 2 + (4 - 7 / 3) ** 2) / 3,
                                     0.0])


def test_float32_mean_and_unbiased_variance(rng, run):
    a = rng.normal(size=(4, 6)).astype("float32")
    out = run(lambda x: ops.mean(x, axis=-1), a)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, a.mean(axis=-1), rtol=1e-5, atol=1e-6)
    got = run(lambda x: ops.variance(x, axis=(0,), unbiased=True), a.astype("float64"))
    np.testing.assert_allclose(got, np.var(a.astype("float64"), axis=0, ddof=1), rtol=1e-12)


@pytest.mark.parametrize("name", list(REFERENCES))
def test_reduction_errors(name):
    op = getattr(ops, name)
    x = tg.placeholder((2, 3), name="x")
    with pytest.raises(tg.ShapeError, match=rf"^{name}: axis 2 is out of range for tensor 'x' of "
                                            r"shape \(2, 3\) \(valid: -2 to 1\)"):
        op(x, axis=2)
    with pytest.raises(tg.ShapeError, match=rf"^{name}: axis entry -3 is out of range"):
        op(x, axis=(0, -3))
    with pytest.raises(tg.ShapeError, match=rf"^{name}: axis \(1, -1\) names an axis of tensor "
                                            r"'x' twice"):
        op(x, axis=(1, -1))
    with pytest.raises(tg.TegradError, match=rf"^{name}: keepdims must be True or False"):
        op(x, keepdims="yes")
    with pytest.raises(tg.TegradError, match=rf"^{name}: axis must be an integer or a sequence"):
        op(x, axis="0")
    with pytest.raises(tg.TegradError, match=rf"^{name}: x must be a tegrad Tensor"):
        op(np.ones(3))


def test_reduction_of_bool_is_an_error():
    b = tg.placeholder((3,), dtype="bool", name="flags")
    with pytest.raises(tg.DTypeError, match=r"^sum: .*bool"):
        ops.sum(b)
    with pytest.raises(tg.DTypeError, match=r"^mean: tensor 'flags' has dtype bool"):
        ops.mean(b)


def test_variance_errors():
    x = tg.placeholder((1, 3), name="x")
    with pytest.raises(tg.TegradError, match=r"^variance: the unbiased variance of tensor 'x' "
                                             r"over one element divides by zero"):
        ops.variance(x, axis=0, unbiased=True)
    with pytest.raises(tg.TegradError, match=r"^variance: unbiased must be True or False"):
        ops.variance(x, unbiased=1)


def _first_extreme(a, axis, better):
    """Index of the first element that nothing before it beats, by scanning."""
    if axis is None:
        flat = a.ravel()
        best = 0
        for i in range(flat.size):
            if better(flat[i], flat[best]):
                best = i
        return np.array(best)
    moved = np.moveaxis(a, axis, -1)
    out = np.zeros(moved.shape[:-1], dtype=int)
    for pos in np.ndindex(*moved.shape[:-1]):
        best = 0
        for i in range(moved.shape[-1]):
            if better(moved[pos + (i,)], moved[pos + (best,)]):
                best = i
        out[pos] = best
    return out


@pytest.mark.parametrize("name,better", [("argmax", lambda u, v: u > v),
                                         ("argmin", lambda u, v: u < v)])
@pytest.mark.parametrize("shape,axis,keepdims", [((3, 4), None, False), ((3, 4), 1, False),
                                                 ((2, 3, 5), -3, True), ((2, 3, 5), None, True),
                                                 ((7,), 0, False), ((), None, False)])
def test_arg_extremum(name, better, shape, axis, keepdims, rng, run):
    a = rng.integers(0, 3, size=shape).astype("float64")  # many ties: the first index wins
    out = run(lambda x: getattr(ops, name)(x, axis=axis, keepdims=keepdims), a)
    expected = _first_extreme(a, axis, better)
    if keepdims:
        expected = (expected.reshape((1,) * a.ndim) if axis is None
                    else np.expand_dims(expected, axis))
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, expected)


def test_arg_extremum_integers_and_nan(run):
    a = np.array([[3, -1, 3], [-5, 2, -5]], dtype="int64")
    np.testing.assert_array_equal(run(lambda x: ops.argmax(x, axis=1), a), [0, 1])
    np.testing.assert_array_equal(run(lambda x: ops.argmin(x, axis=0), a), [1, 0, 1])
    f = np.array([[1.0, np.nan, 5.0, np.nan], [2.0, 0.0, 2.0, 1.0]])
    np.testing.assert_array_equal(run(lambda x: ops.argmax(x, axis=1), f), np.argmax(f, axis=1))
    np.testing.assert_array_equal(run(lambda x: ops.argmin(x, axis=1), f), np.argmin(f, axis=1))
    assert run(ops.argmax, f) == np.argmax(f)


@pytest.mark.parametrize("name", ["argmax", "argmin"])
def test_arg_extremum_errors(name):
    op = getattr(ops, name)
    x = tg.placeholder((2, 3), name="x")
    with pytest.raises(tg.TegradError, match=rf"^{name}: axis must be None or an integer, got "
                                             r"\(0, 1\)"):
        op(x, axis=(0, 1))
    with pytest.raises(tg.ShapeError, match=rf"^{name}: axis -3 is out of range for tensor 'x'"):
        op(x, axis=-3)
    with pytest.raises(tg.DTypeError, match=rf"^{name}: tensor 'b' has dtype bool"):
        op(tg.placeholder((2,), dtype="bool", name="b"))
    with pytest.raises(tg.TegradError, match=rf"^{name}: keepdims must be True or False"):
        op(x, keepdims=None)
