"""Every operator of tegrad.ops and tegrad.nn compiled with ``tg.build`` agrees with
``tg.evaluate``: the forward and the optimised gradient of every differentiable operator
in one compiled function, in float64 and float32 (the entries of the operator-gradient
table in tests/conftest.py, built with each dtype), and the operators without a gradient
on integer and bool operands."""
import zlib

import numpy as np
import pytest

import tegrad as tg
from tegrad import nn, ops
from tegrad.ir.graph import placeholders
from tegrad.tools.explain_op import NOT_DIFFERENTIABLE

from support.programs import forward_and_gradient


#: tolerance of a comparison with the evaluator (sums are added in another order)
TOLERANCE = {"float64": dict(rtol=1e-9, atol=1e-12), "float32": dict(rtol=2e-4, atol=2e-5)}


def assert_agrees(inputs, outputs, feed, dtype=None):
    f = tg.build(inputs, outputs)
    got = f(*[feed[t] for t in inputs])
    want = tg.evaluate(outputs, feed)
    for t, g, w in zip(outputs, got, want):
        assert g.dtype == w.dtype and g.shape == w.shape, t.name
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, err_msg=t.name, **TOLERANCE[dtype or g.dtype.name])
        else:
            np.testing.assert_array_equal(g, w, err_msg=t.name)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_operator_and_its_gradient(operator_name, dtype, operator_case_of):
    inputs, outputs, feed = forward_and_gradient(operator_case_of, operator_name, dtype)
    assert outputs[0].dtype == dtype
    assert_agrees(inputs, outputs, feed, dtype)


class IntCase:
    """Integer, bool and float placeholders with feeds (values with both signs)."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)
        self.feed = {}

    def i(self, shape, dtype="int32", lo=-9, hi=10, name="a"):
        t = tg.placeholder(shape, dtype=dtype, name=name)
        self.feed[t] = self.rng.integers(lo, hi, size=shape).astype(dtype)
        return t

    def nonzero(self, shape, dtype="int32", name="b"):
        t = tg.placeholder(shape, dtype=dtype, name=name)
        v = self.rng.integers(1, 6, size=shape) * self.rng.choice([-1, 1], size=shape)
        self.feed[t] = v.astype(dtype)
        return t

    def f(self, shape, name="x"):
        t = tg.placeholder(shape, dtype="float32", name=name)
        self.feed[t] = self.rng.standard_normal(shape).astype("float32")
        return t


#: operators without a gradient, and integer and bool programs of the others
INTEGER_AND_BOOL = {
    "equal": lambda c: ops.equal(c.i((3, 4)), c.i((4,), name="b")),
    "not_equal": lambda c: ops.not_equal(c.i((3, 4), "int8"), c.i((3, 1), "int8", name="b")),
    "greater": lambda c: ops.greater(c.f((3, 4)), c.f((4,), "y")),
    "greater_equal": lambda c: ops.greater_equal(c.i((3, 4), "uint8", 0, 255),
                                                 c.i((4,), "uint8", 0, 255, name="b")),
    "less": lambda c: ops.less(c.i((3, 4), "int64"), c.i((4,), "int64", name="b")),
    "less_equal": lambda c: ops.less_equal(c.i((3, 4), "int16"), c.i((3, 4), "int16", name="b")),
    "right_shift": lambda c: ops.right_shift(c.i((3, 4), lo=-100, hi=100), c.i((4,), lo=0, hi=5,
                                                                                  name="b")),
    "left_shift": lambda c: ops.left_shift(c.i((3, 4), lo=-100, hi=100), c.i((4,), lo=0, hi=5,
                                                                                name="b")),
    "argmax": lambda c: ops.argmax(c.i((3, 5)), axis=1),
    "argmin": lambda c: ops.argmin(c.f((3, 5)), axis=0),
    "one_hot": lambda c: ops.one_hot(c.i((4,), lo=0, hi=3), 3),
    "zeros": lambda c: ops.add(ops.zeros((2, 3), "int32"), c.i((2, 3))),
    "zeros_like": lambda c: ops.zeros_like(c.i((2, 3), "uint8", 0, 9)),
    "ones": lambda c: ops.multiply(ops.ones((2, 3), "int16"), c.i((2, 3), "int16")),
    "ones_like": lambda c: ops.ones_like(c.f((2, 3))),
    "int_arithmetic": lambda c: ops.add(ops.multiply(c.i((3, 4), "int8", -128, 127),
                                                     c.i((4,), "int8", -128, 127, name="b")),
                                        ops.subtract(c.i((3, 4), "int8", name="c"), 100)),
    "int_floor_divide": lambda c: ops.floor_divide(c.i((3, 4), lo=-50, hi=50),
                                                   c.nonzero((4,))),
    "int_mod": lambda c: ops.mod(c.i((3, 4), "int64", lo=-50, hi=50), c.nonzero((3, 1), "int64")),
    "int_max_min": lambda c: ops.maximum(ops.minimum(c.i((3, 4), "uint8", 0, 255),
                                                     c.i((4,), "uint8", 0, 255, name="b")), 7),
    "int_abs_negative": lambda c: ops.abs(ops.negative(c.i((3, 4), "int32", -2**31, 2**31 - 1))),
    "int_power": lambda c: ops.power(c.i((3, 4), lo=-5, hi=6), c.i((4,), lo=0, hi=9, name="b")),
    "int_sum_prod": lambda c: ops.add(ops.sum(c.i((3, 4), "int64"), axis=1),
                                      ops.prod(c.i((3, 4), "int64", lo=-3, hi=4, name="b"), axis=1)),
    "int_max_reduce": lambda c: ops.max(c.i((3, 4), "int16"), axis=0),
    "int_take": lambda c: ops.take(c.i((5, 3)), c.i((4,), lo=0, hi=5, name="idx"), axis=0),
    "int_cast_to_float": lambda c: ops.cast(c.i((3, 4), "int64", -2**40, 2**40), "float32"),
    "float_cast_to_int": lambda c: ops.cast(ops.multiply(c.f((3, 4)), 1e3), "int16"),
    "bool_where": lambda c: ops.where(ops.less(c.f((3, 4)), c.f((4,), "y")), c.i((3, 4)),
                                      c.i((4,), name="b")),
    "bool_cast": lambda c: ops.cast(ops.cast(c.i((3, 4), lo=-2, hi=3), "bool"), "int8"),
}


@pytest.mark.parametrize("name", sorted(INTEGER_AND_BOOL))
def test_integer_and_bool_program(name):
    case = IntCase(zlib.crc32(name.encode()))
    out = INTEGER_AND_BOOL[name](case)
    inputs = placeholders([out])
    assert_agrees(inputs, [out], case.feed)


def test_every_operator_is_compiled(operator_cases):
    not_differentiable = NOT_DIFFERENTIABLE
    names = set(ops.__all__) | set(nn.__all__)
    covered = {n for n in names for entry in operator_cases
               if entry == n or entry.startswith(n + "_")}
    assert not_differentiable <= set(INTEGER_AND_BOOL)
    assert names - covered <= not_differentiable
