"""Elementwise unary operators, cast, clip and filled tensors against numpy."""
import math

import numpy as np
import pytest

import tegrad as tg
from tegrad import ops

SHAPES = [(5,), (2, 1, 3), ()]


def _sigmoid(a):
    return np.array([1.0 / (1.0 + math.exp(-v)) for v in a.ravel()]).reshape(a.shape)


# (operator, numpy reference, data maker)
UNARY = [
    ("log", np.log, lambda r, s: r.uniform(0.1, 3.0, s)),
    ("sqrt", np.sqrt, lambda r, s: r.uniform(0.0, 4.0, s)),
    ("exp", np.exp, lambda r, s: r.normal(size=s)),
    ("sigmoid", _sigmoid, lambda r, s: r.normal(scale=5.0, size=s)),
    ("tanh", np.tanh, lambda r, s: r.normal(size=s)),
    ("negative", lambda a: -a, lambda r, s: r.normal(size=s)),
    ("floor", np.floor, lambda r, s: r.normal(scale=3.0, size=s)),
    ("ceil", np.ceil, lambda r, s: r.normal(scale=3.0, size=s)),
    ("trunc", np.trunc, lambda r, s: r.normal(scale=3.0, size=s)),
    ("round", np.round, lambda r, s: r.integers(-7, 8, s) / 2),  # many ties: to even
    ("abs", np.abs, lambda r, s: r.normal(size=s)),
    ("copy", lambda a: a.copy(), lambda r, s: r.normal(size=s)),
]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("name,ref,data", UNARY, ids=[u[0] for u in UNARY])
def test_unary_matches_numpy(name, ref, data, shape, rng, run):
    a = np.asarray(data(rng, shape), dtype="float64")
    out = run(getattr(ops, name), a)
    assert out.shape == a.shape and out.dtype == np.float64
    np.testing.assert_allclose(out, ref(a), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "round", "abs", "negative", "copy"])
def test_unary_on_integers(name, rng, run):
    a = rng.integers(-5, 6, size=(3, 4)).astype("int32")
    out = run(getattr(ops, name), a)
    expected = {"abs": np.abs(a), "negative": -a}.get(name, a)  # whole numbers stay whole
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, expected)


def test_unary_float32_keeps_dtype(rng, run):
    a = rng.uniform(0.5, 2.0, (2, 3)).astype("float32")
    out = run(ops.log, a)
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, np.log(a), rtol=1e-6)


@pytest.mark.parametrize("name", [u[0] for u in UNARY])
def test_unary_rejects_non_tensor(name):
    with pytest.raises(tg.TegradError, match=rf"^{name}: x must be a tegrad Tensor, got list"):
        getattr(ops, name)([1.0, 2.0])


@pytest.mark.parametrize("name", ["log", "sqrt", "exp", "sigmoid", "tanh"])
def test_float_only_unary_rejects_integers(name):
    x = tg.placeholder((3,), dtype="int32", name="counts")
    with pytest.raises(tg.DTypeError, match=rf"^{name}: .*int32.*counts"):
        getattr(ops, name)(x)


@pytest.mark.parametrize("name", ["negative", "abs", "floor"])
def test_unary_rejects_bool(name):
    x = tg.placeholder((3,), dtype="bool", name="mask")
    with pytest.raises(tg.DTypeError, match=rf"^{name}: .*bool"):
        getattr(ops, name)(x)


def test_unary_stage_is_named_after_the_operator():
    x = tg.placeholder((2,), name="x")
    assert ops.sigmoid(x).name == "sigmoid"
    assert tg.format(ops.exp(x)).splitlines()[-1] == "exp[ax0] = exp(x[ax0])"


@pytest.mark.parametrize("src,dst", [("float64", "int32"), ("int32", "float32"),
                                      ("float32", "bool"), ("int64", "int8")])
def test_cast(src, dst, rng, run):
    a = (rng.normal(scale=4.0, size=(3, 5)) if src.startswith("float")
         else rng.integers(-200, 200, size=(3, 5))).astype(src)
    out = run(lambda x: ops.cast(x, dtype=dst), a)
    assert out.dtype == np.dtype(dst)
    # numpy's astype: floats truncate toward zero, integers wrap, nonzero is True
    np.testing.assert_array_equal(out, a.astype(dst))


def test_cast_errors():
    x = tg.placeholder((2,), name="x")
    with pytest.raises(tg.DTypeError, match=r"^cast: unsupported dtype 'complex64'"):
        ops.cast(x, "complex64")
    with pytest.raises(tg.TegradError, match=r"^cast: x must be a tegrad Tensor"):
        ops.cast(1.0, "float32")


@pytest.mark.parametrize("a_min,a_max", [(-0.5, 0.5), (None, 0.0), (-1.0, None), (2.0, 2.0)])
def test_clip(a_min, a_max, rng, run):
    a = rng.normal(size=(4, 3))
    out = run(lambda x: ops.clip(x, a_min=a_min, a_max=a_max), a)
    expected = a.copy()
    if a_min is not None:
        expected[expected < a_min] = a_min
    if a_max is not None:
        expected[expected > a_max] = a_max
    np.testing.assert_array_equal(out, expected)


def test_clip_integers(run):
    a = np.arange(-4, 5, dtype="int64").reshape(3, 3)
    np.testing.assert_array_equal(run(lambda x: ops.clip(x, -2, 3), a),
                                  [[-2, -2, -2], [-1, 0, 1], [2, 3, 3]])


def test_clip_errors():
    x = tg.placeholder((2,), name="x")
    with pytest.raises(tg.TegradError, match=r"^clip: a_min 1.0 is greater than a_max 0.0"):
        ops.clip(x, 1.0, 0.0)
    with pytest.raises(tg.TegradError, match=r"^clip: a_min and a_max are both None"):
        ops.clip(x, None, None)
    with pytest.raises(tg.TegradError, match=r"^clip: a_max must be a number or None"):
        ops.clip(x, 0.0, "1")
    n = tg.placeholder((2,), dtype="int32", name="n")
    with pytest.raises(tg.DTypeError, match=r"^clip: cannot combine the float 0.5"):
        ops.clip(n, 0.5, 2)


@pytest.mark.parametrize("shape,dtype", [((2, 3), "float32"), ((5,), "int32"), ((), "float64"),
                                         (4, "bool")])
def test_zeros_ones_full(shape, dtype):
    expected_shape = (shape,) if isinstance(shape, int) else shape
    for out, value in [(ops.zeros(shape, dtype=dtype), 0), (ops.ones(shape, dtype=dtype), 1),
                       (ops.full(shape, 1, dtype=dtype), 1)]:
        got = tg.evaluate(out)
        assert got.shape == expected_shape and got.dtype == np.dtype(dtype)
        assert np.all(got == value)


def test_full_default_dtype_and_value():
    got = tg.evaluate(ops.full((3, 1), -2.5))
    assert got.dtype == np.float32 and got.tolist() == [[-2.5]] * 3
    assert tg.evaluate(ops.zeros((2,))).dtype == np.float32


def test_full_with_a_scalar_tensor(run):
    out = run(lambda v: ops.full((2, 3), v, dtype="float64"), np.array(7.5))
    np.testing.assert_array_equal(out, np.full((2, 3), 7.5))


@pytest.mark.parametrize("dtype", ["float64", "int32"])
def test_like_variants(dtype, rng, run):
    a = rng.normal(size=(3, 1, 2)).astype(dtype)
    np.testing.assert_array_equal(run(ops.zeros_like, a), np.zeros_like(a))
    np.testing.assert_array_equal(run(ops.ones_like, a), np.ones_like(a))
    out = run(lambda x: ops.full_like(x, fill_value=4), a)
    assert out.dtype == a.dtype
    np.testing.assert_array_equal(out, np.full_like(a, 4))


def test_filled_errors():
    with pytest.raises(tg.ShapeError, match=r"^zeros: shape \(2, 0\) has the invalid extent 0"):
        ops.zeros((2, 0))
    with pytest.raises(tg.TegradError, match=r"^ones: shape must be an integer or a sequence"):
        ops.ones("3")
    with pytest.raises(tg.DTypeError, match=r"^full: fill_value 0.5 is not a whole number"):
        ops.full((2,), 0.5, dtype="int32")
    with pytest.raises(tg.DTypeError, match=r"^full: the integer 300 does not fit the dtype int8"):
        ops.full((2,), 300, dtype="int8")
    with pytest.raises(tg.DTypeError, match=r"^full: unsupported dtype 'float128x'"):
        ops.full((2,), 1, dtype="float128x")
    v = tg.placeholder((2,), name="v")
    with pytest.raises(tg.TegradError, match=r"^full: fill_value tensor 'v' must be a scalar"):
        ops.full((2,), v)
    x = tg.placeholder((2,), dtype="int64", name="x")
    with pytest.raises(tg.DTypeError, match=r"^full_like: fill_value 1.5 is not a whole"):
        ops.full_like(x, 1.5)
    for fn in (ops.zeros_like, ops.ones_like):
        with pytest.raises(tg.TegradError, match=rf"^{fn.__name__}: x must be a tegrad Tensor"):
            fn(np.zeros(2))
