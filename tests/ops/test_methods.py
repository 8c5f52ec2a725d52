"""The array operators and methods of tensors (tegrad.ops.methods): every entry of the
table against numpy, on broadcasting shapes, and the errors of operands that are not
tensors or numbers."""
import operator

import numpy as np
import pytest

import tegrad as tg
from tegrad.ir.tensor import ARRAY_METHODS, Tensor
from tegrad.ops.methods import METHODS

A = (2, 3)
B = (3,)


def _inputs(rng):
    a = rng.uniform(0.5, 2.0, A)
    b = rng.uniform(0.5, 2.0, B)
    return a, b


#: method name -> (build from tensors a (2, 3) and b (3,), the same on numpy arrays);
#: each case broadcasts where the method is binary
CASES = {
    "__add__": lambda a, b: a + b,
    "__radd__": lambda a, b: 1.5 + a,
    "__sub__": lambda a, b: a - b,
    "__rsub__": lambda a, b: 1.5 - a,
    "__mul__": lambda a, b: a * b,
    "__rmul__": lambda a, b: 3 * a,
    "__truediv__": lambda a, b: a / b,
    "__rtruediv__": lambda a, b: 1.0 / a,
    "__floordiv__": lambda a, b: (a * 10).astype("int32") // 3,
    "__rfloordiv__": lambda a, b: 100 // (a * 10).astype("int32"),
    "__mod__": lambda a, b: (a * 10).astype("int32") % 4,
    "__rmod__": lambda a, b: 7 % (a * 10).astype("int32"),
    "__pow__": lambda a, b: a ** b,
    "__rpow__": lambda a, b: 2.0 ** a,
    "__matmul__": lambda a, b: a @ b,
    "__rmatmul__": lambda a, b: b @ a.T,
    "__neg__": lambda a, b: -a,
    "__abs__": lambda a, b: abs(a - 1.2),
    "__lt__": lambda a, b: a < b,
    "__le__": lambda a, b: a <= 1.0,
    "__gt__": lambda a, b: a > b,
    "__ge__": lambda a, b: 1.0 >= a,
    "T": lambda a, b: a.T,
    "sum": lambda a, b: a.sum(axis=0),
    "mean": lambda a, b: a.mean(axis=1, keepdims=True),
    "max": lambda a, b: a.max(),
    "min": lambda a, b: a.min(axis=-1),
    "reshape": lambda a, b: a.reshape(3, 2),
    "transpose": lambda a, b: a.transpose((1, 0)),
    "astype": lambda a, b: (a * 10).astype("int32"),
}


def test_every_method_of_the_table_has_a_case_and_is_installed():
    assert set(CASES) == set(METHODS)
    assert all(ARRAY_METHODS[name] is fn for name, fn in METHODS.items())
    assert all(hasattr(Tensor, name) for name in METHODS)


@pytest.mark.parametrize("name", sorted(CASES))
def test_method_matches_numpy(name):
    rng = np.random.default_rng(len(name))
    a, b = _inputs(rng)
    ta = tg.placeholder(A, dtype="float64", name="a")
    tb = tg.placeholder(B, dtype="float64", name="b")
    out = CASES[name](ta, tb)
    assert isinstance(out, Tensor)
    expected = np.asarray(CASES[name](a, b))
    got = tg.evaluate(out, {ta: a, tb: b})
    assert got.shape == expected.shape
    assert got.dtype.kind == expected.dtype.kind
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_the_operators_differentiate_and_compile():
    x = tg.placeholder((4, 3), name="x")
    w = tg.placeholder((3, 2), name="w")
    loss = ((x @ w - 1.0) ** 2).mean()
    step = tg.build([x, w], [loss, *tg.differentiate(loss, [w])])
    rng = np.random.default_rng(0)
    xv, wv = rng.standard_normal((4, 3), "float32"), rng.standard_normal((3, 2), "float32")
    value, dw = step(xv, wv)
    np.testing.assert_allclose(value, ((xv @ wv - 1) ** 2).mean(), rtol=1e-5)
    np.testing.assert_allclose(dw, xv.T @ (2 * (xv @ wv - 1)) / 8, rtol=1e-4, atol=1e-6)


def test_vector_products_follow_numpy():
    v = tg.placeholder((3,), dtype="float64", name="v")
    m = tg.placeholder((2, 3, 4), dtype="float64", name="m")
    rng = np.random.default_rng(1)
    vv, mv = rng.standard_normal(3), rng.standard_normal((2, 3, 4))
    for build in (lambda v, m: v @ v, lambda v, m: v @ m):
        expected = build(vv, mv)
        got = tg.evaluate(build(v, m), {v: vv, m: mv})
        assert got.shape == np.shape(expected)
        np.testing.assert_allclose(got, expected)


def test_equality_stays_identity():
    x = tg.placeholder((2,), name="x")
    y = tg.placeholder((2,), name="y")
    assert x == x and x != y and {x: 1}[x] == 1


@pytest.mark.parametrize("other, words", [
    (np.ones(3), "numpy array"),
    ([1, 2, 3], "list"),
    ("s", "str"),
])
def test_an_operand_that_is_not_a_tensor_or_number_is_named(other, words):
    x = tg.placeholder((3,), name="x")
    for apply in (operator.add, operator.mul, operator.lt):
        with pytest.raises(tg.TegradError, match=rf"tensor 'x' .*{words}"):
            apply(x, other)
    with pytest.raises(tg.TegradError, match=rf"tensor 'x' .*{words}"):
        operator.mul(other, x)


def test_an_expression_operand_says_to_read_elements():
    x = tg.placeholder((3,), name="x")
    i = tg.reduce_axis((0, 3), name="i")
    with pytest.raises(tg.TegradError, match="tensor 'x' \\+ an expression"):
        x + x[i]


def test_errors_of_the_operators_name_them():
    x = tg.placeholder((2, 3), name="x")
    y = tg.placeholder((4,), name="y")
    with pytest.raises(tg.ShapeError, match="add"):
        x + y
    with pytest.raises(tg.ShapeError):
        x @ y
    with pytest.raises(tg.TegradError, match="matrix product needs two tensors"):
        x @ 2.0
