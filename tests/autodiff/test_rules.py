"""One test per derivative rule, against central finite differences (float64).

Each entry builds ``y[i] = f(x[i], z[i])`` (or a reduction) away from kinks and ties
and checks the gradient with respect to every float input with a random head.
"""
import numpy as np
import pytest

import tegrad as tg
from tegrad.autodiff.reduce_rules import REDUCER_RULES
from tegrad.autodiff.rules import BINARY_RULES, RULES
from tegrad.ir.expr import BINARY_OPS
from tegrad.autodiff.intrinsic_rules import DERIVATIVES
from tegrad.ir.intrinsics import INTRINSICS
from tegrad.ir.mapper import Mapper
from tegrad.testing import check_grad

F64 = "float64"
N = 5


def _inputs():
    x = tg.placeholder((N,), dtype=F64, name="x")
    z = tg.placeholder((N,), dtype=F64, name="z")
    return x, z


def _feed(x, z, lo, hi, zlo=None, zhi=None, seed=0):
    rng = np.random.default_rng(seed)
    zlo = lo if zlo is None else zlo
    zhi = hi if zhi is None else zhi
    return {x: rng.uniform(lo, hi, N), z: rng.uniform(zlo, zhi, N)}


def _check_pointwise(fn, lo=-1.0, hi=1.0, zlo=None, zhi=None, feed_fn=None):
    x, z = _inputs()
    y = tg.compute((N,), lambda i: fn(x[i], z[i]), name="y")
    feed = _feed(x, z, lo, hi, zlo, zhi) if feed_fn is None else feed_fn(x, z)
    used = [t for t in (x, z) if t in tg.placeholders(y)]
    assert check_grad(y, used, feed=feed, head="random", rng=1) < 1e-6
    return y, used, feed


# ---------------------------------------------------------------------------------------
# intrinsics: one case per entry of tegrad.autodiff.intrinsic_rules.DERIVATIVES

INTRINSIC_CASES = {
    "exp": (lambda a, b: tg.exp(a), -1, 1),
    "log": (lambda a, b: tg.log(a), 0.5, 2),
    "sqrt": (lambda a, b: tg.sqrt(a), 0.5, 2),
    "tanh": (lambda a, b: tg.tanh(a), -2, 2),
    "sigmoid": (lambda a, b: tg.sigmoid(a), -3, 3),
    "sin": (lambda a, b: tg.sin(a), -3, 3),
    "cos": (lambda a, b: tg.cos(a), -3, 3),
    "erf": (lambda a, b: tg.erf(a), -2, 2),
    "pow": (lambda a, b: tg.power(a, b), 0.5, 2),
    "abs": (lambda a, b: tg.abs(a), 0.2, 1),
    "sign": (lambda a, b: tg.sign(a) * a, 0.2, 1),
    "floor": (lambda a, b: tg.floor(a * 3) + a, 0.1, 0.3),
    "ceil": (lambda a, b: tg.ceil(a * 3) + a, 0.1, 0.3),
    "round": (lambda a, b: tg.round(a * 3) + a, 0.2, 0.4),
    "trunc": (lambda a, b: tg.trunc(a * 3) + a, 0.1, 0.3),
    "tan": (lambda a, b: tg.tan(a), -1, 1),
    "asin": (lambda a, b: tg.asin(a), -0.9, 0.9),
    "acos": (lambda a, b: tg.acos(a), -0.9, 0.9),
    "atan": (lambda a, b: tg.atan(a), -3, 3),
    "atan2": (lambda a, b: tg.atan2(a, b + 2), -1, 1),
    "sinh": (lambda a, b: tg.sinh(a), -2, 2),
    "cosh": (lambda a, b: tg.cosh(a), -2, 2),
    "asinh": (lambda a, b: tg.asinh(a), -3, 3),
    "acosh": (lambda a, b: tg.acosh(a), 1.2, 3),
    "atanh": (lambda a, b: tg.atanh(a), -0.9, 0.9),
    "log1p": (lambda a, b: tg.log1p(a), -0.5, 2),
    "expm1": (lambda a, b: tg.expm1(a), -1, 1),
}


#: intrinsics whose rule finite differences cannot check, each with a test of its own
DEDICATED = {"stop_gradient", "philox"}  # philox: tests/ops/test_random.py


def test_every_intrinsic_has_a_rule_and_a_test():
    assert set(DERIVATIVES) == set(INTRINSICS)
    assert set(INTRINSIC_CASES) | DEDICATED == set(INTRINSICS)


def test_stop_gradient_rule_is_zero_and_its_value_the_identity():
    x, z = _inputs()
    y = tg.compute((N,), lambda i: x[i] * tg.stop_gradient(z[i] * z[i]), name="y")
    dx, dz = tg.differentiate(y, [x, z])
    feed = _feed(x, z, -1, 1, None, None)
    zv = feed[z]
    np.testing.assert_allclose(tg.evaluate(y, feed), feed[x] * zv * zv)
    np.testing.assert_allclose(tg.evaluate(dx, feed), zv * zv)
    np.testing.assert_array_equal(tg.evaluate(dz, feed), np.zeros(N))


@pytest.mark.parametrize("name", sorted(INTRINSIC_CASES))
def test_intrinsic_rule(name):
    fn, lo, hi = INTRINSIC_CASES[name]
    _check_pointwise(fn, lo, hi)


def test_abs_rule_negative_side():
    _check_pointwise(lambda a, b: tg.abs(a), -1, -0.2)


def test_pow_rule_negative_base_integer_exponent():
    # d/da a**3 at a < 0; the exponent is a constant
    _check_pointwise(lambda a, b: tg.power(a, tg.const(3.0, F64)), -2, -0.5)


def test_pow_rule_zero_exponent_and_zero_base_are_finite():
    x = tg.placeholder((2,), dtype=F64, name="x")
    z = tg.placeholder((2,), dtype=F64, name="z")
    y = tg.compute((2,), lambda i: tg.power(x[i], z[i]), name="y")
    dx, dz = tg.differentiate(y, [x, z])
    gx, gz = tg.evaluate([dx, dz], {x: np.array([0.0, 2.0]), z: np.array([2.0, 0.0])})
    assert np.all(np.isfinite(gx)) and np.all(np.isfinite(gz))
    assert gx.tolist() == [0.0, 0.0]   # 2 * 0**1 = 0 and 0 * 2**-1 taken as 0
    assert gz[0] == 0.0


# ---------------------------------------------------------------------------------------
# binary operators: one case per entry of BINARY_RULES

BINARY_CASES = {
    "add": (lambda a, b: a + b, {}),
    "sub": (lambda a, b: a - b, {}),
    "mul": (lambda a, b: a * b, {}),
    "div": (lambda a, b: a / b, dict(zlo=0.5, zhi=2)),
    "floordiv": (lambda a, b: tg.floordiv(a, b) + a * b, dict(lo=2.1, hi=2.4, zlo=1.0, zhi=1.05)),
    "floormod": (lambda a, b: tg.floormod(a, b), dict(lo=2.1, hi=2.4, zlo=1.0, zhi=1.05)),
    "min": (lambda a, b: tg.min(a, b), {}),
    "max": (lambda a, b: tg.max(a, b), {}),
}


def test_every_binary_op_has_a_rule_and_a_test():
    assert set(BINARY_RULES) == set(BINARY_OPS) == set(BINARY_CASES)


@pytest.mark.parametrize("op", sorted(BINARY_CASES))
def test_binary_rule(op):
    fn, kw = BINARY_CASES[op]
    _check_pointwise(fn, **{"lo": -1.0, "hi": 1.0, **kw})


@pytest.mark.parametrize("op", ["max", "min"])
def test_binary_extremum_splits_ties_half_half(op):
    x = tg.placeholder((3,), dtype=F64, name="x")
    z = tg.placeholder((3,), dtype=F64, name="z")
    fn = tg.max if op == "max" else tg.min
    y = tg.compute((3,), lambda i: fn(x[i], z[i]), name="y")
    dx, dz = tg.differentiate(y, [x, z])
    gx, gz = tg.evaluate([dx, dz], {x: np.array([1.0, 2.0, 3.0]), z: np.array([1.0, 1.0, 4.0])})
    big = [0.5, 1.0, 0.0] if op == "max" else [0.5, 0.0, 1.0]
    assert gx.tolist() == big
    assert gz.tolist() == [1 - g for g in big]


@pytest.mark.parametrize("whole_body", [True, False])
def test_relu_as_max_has_zero_derivative_at_zero(whole_body):
    # against a constant the tie goes to the constant (torch.relu), whether the driver
    # has the stage's value (the whole body) or not (the max inside a product)
    x = tg.placeholder((4,), dtype=F64, name="x")
    if whole_body:
        y = tg.compute((4,), lambda i: tg.max(x[i], tg.const(0.0, F64)), name="y")
    else:
        y = tg.compute((4,), lambda i: tg.max(tg.const(0.0, F64), x[i]) * 3.0, name="y")
    (dx,) = tg.differentiate(y, [x])
    out = tg.evaluate(dx, {x: np.array([-1.0, 0.0, 2.0, np.nan])}).tolist()
    assert out == ([0.0, 0.0, 1.0, 1.0] if whole_body else [0.0, 0.0, 3.0, 3.0])


# ---------------------------------------------------------------------------------------
# the other node kinds: one case per entry of RULES


def test_every_node_kind_has_a_rule():
    assert set(RULES) == set(Mapper._method_names)


def test_neg_rule():
    _check_pointwise(lambda a, b: -(a * b))


def test_select_rule():
    _check_pointwise(lambda a, b: tg.if_then_else(a > 0, a * b, tg.exp(b)))


def test_cast_rule_between_floats():
    x = tg.placeholder((N,), dtype="float32", name="x")
    z = tg.placeholder((N,), dtype=F64, name="z")
    y = tg.compute((N,), lambda i: tg.cast(x[i], F64) * z[i], name="y")
    dx, dz = tg.differentiate(y, [x, z])
    assert dx.dtype == "float32" and dz.dtype == F64
    xv = np.arange(N, dtype="float32")
    zv = np.linspace(-1, 1, N)
    gx, gz = tg.evaluate([dx, dz], {x: xv, z: zv})
    assert np.allclose(gx, zv.astype("float32")) and np.allclose(gz, xv)


def test_cast_rule_through_integers_is_zero():
    _check_pointwise(lambda a, b: tg.cast(tg.cast(a * 4, "int32"), F64) + b, 0.3, 0.7)


def test_compare_and_logical_rules_are_zero():
    _check_pointwise(lambda a, b: tg.if_then_else((a > b) | ~(a < 0.5) & (b > 0), a, b))


def test_const_rule():
    _check_pointwise(lambda a, b: a * tg.const(3.0, F64) + tg.const(1.0, F64))


def test_read_rule_with_shifted_index():
    x, z = _inputs()
    y = tg.compute((N - 1,), lambda i: x[i + 1] * z[N - 1 - i], name="y")
    assert check_grad(y, [x, z], head="random", rng=2) < 1e-6


def test_var_rule_through_index_arithmetic_is_zero():
    x, _ = _inputs()
    y = tg.compute((N,), lambda i: x[i] * tg.cast(i, F64), name="y")
    (dx,) = tg.differentiate(y, [x])
    assert tg.evaluate(dx, {x: np.zeros(N)}).tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]


# ---------------------------------------------------------------------------------------
# reductions: one case per entry of REDUCER_RULES and the generic combiner rule

M = 4


def _reduce_case(make, lo=-1.0, hi=1.0, seed=3):
    A = tg.placeholder((3, M), dtype=F64, name="A")
    c = tg.placeholder((3,), dtype=F64, name="c")
    k = tg.reduce_axis((0, M), name="k")
    y = tg.compute((3,), lambda i: make(A, c, i, k), name="y")
    rng = np.random.default_rng(seed)
    feed = {A: rng.uniform(lo, hi, (3, M)), c: rng.uniform(lo, hi, 3)}
    used = [t for t in (A, c) if t in tg.placeholders(y)]
    assert check_grad(y, used, feed=feed, head="random", rng=seed) < 1e-6


def test_every_builtin_reducer_has_a_rule():
    assert set(REDUCER_RULES) == set(tg.ir.reduction.BUILTIN_REDUCERS.values())


def test_sum_rule():
    _reduce_case(lambda A, c, i, k: tg.sum(A[i, k] * A[i, k], axis=k))


def test_prod_rule():
    _reduce_case(lambda A, c, i, k: tg.prod(A[i, k], axis=k))


def test_prod_rule_with_a_zero_factor():
    A = tg.placeholder((2, 3), dtype=F64, name="A")
    k = tg.reduce_axis((0, 3), name="k")
    y = tg.compute((2,), lambda i: tg.prod(A[i, k], axis=k), name="y")
    (dA,) = tg.differentiate(y, [A])
    a = np.array([[2.0, 0.0, 3.0], [0.0, 0.0, 5.0]])
    assert tg.evaluate(dA, {A: a}).tolist() == [[0.0, 6.0, 0.0], [0.0, 0.0, 0.0]]
    assert check_grad(y, [A], feed={A: a}) < 1e-6


def test_max_rule():
    _reduce_case(lambda A, c, i, k: tg.max(A[i, k] * 2, axis=k))


def test_min_rule():
    _reduce_case(lambda A, c, i, k: tg.min(tg.exp(A[i, k]), axis=k))


def test_generic_combiner_rule():
    logsumexp = tg.comm_reducer(lambda a, b: tg.log(tg.exp(a) + tg.exp(b)),
                                lambda dtype: tg.const(float("-inf"), dtype), name="lse")
    _reduce_case(lambda A, c, i, k: logsumexp(A[i, k], axis=k))
