"""Broadcasting binary operators and where against numpy."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import tegrad as tg
from tegrad import ops

# pairs of shapes: equal, trailing broadcast, size-1 dimensions on both sides, scalars
SHAPE_PAIRS = [((2, 3), (2, 3)), ((4, 3), (3,)), ((3, 1, 5), (1, 4, 1)), ((), (2, 3)),
               ((1,), (3, 1))]

ARITHMETIC = [
    ("add", lambda a, b: a + b),
    ("subtract", lambda a, b: a - b),
    ("multiply", lambda a, b: a * b),
    ("divide", lambda a, b: a / b),
    ("floor_divide", lambda a, b: np.floor(a / b)),
    ("mod", lambda a, b: a - np.floor(a / b) * b),
    ("power", lambda a, b: np.abs(a) ** b),
    ("maximum", lambda a, b: np.where(a > b, a, b)),
    ("minimum", lambda a, b: np.where(a < b, a, b)),
]


def _operands(name, shape_a, shape_b, rng):
    a = rng.normal(size=shape_a)
    b = rng.normal(size=shape_b)
    if name == "power":
        a = np.abs(a)
    if name in ("divide", "floor_divide", "mod"):
        b = np.where(np.abs(b) < 0.1, 0.5, b)
    return a, b


@pytest.mark.parametrize("shape_a,shape_b", SHAPE_PAIRS)
@pytest.mark.parametrize("name,ref", ARITHMETIC, ids=[a[0] for a in ARITHMETIC])
def test_arithmetic_matches_numpy(name, ref, shape_a, shape_b, rng, run):
    a, b = _operands(name, shape_a, shape_b, rng)
    out = run(getattr(ops, name), a, b)
    expected = ref(a, b)
    assert out.shape == np.broadcast_shapes(shape_a, shape_b)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name,ref", ARITHMETIC, ids=[a[0] for a in ARITHMETIC])
def test_arithmetic_with_numbers_either_side(name, ref, rng, ph):
    a = np.abs(rng.normal(size=(2, 3))).astype("float32") + 0.5
    x = ph(a)
    left, right = getattr(ops, name)(x, 1.5), getattr(ops, name)(2.5, x)
    assert left.dtype == right.dtype == "float32"
    got_left, got_right = tg.evaluate([left, right], {x: a})
    np.testing.assert_allclose(got_left, ref(a.astype("float64"), 1.5), rtol=1e-6)
    np.testing.assert_allclose(got_right, ref(2.5, a.astype("float64")), rtol=1e-6)


@settings(max_examples=40, deadline=None)
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=0, max_dims=3,
                                                max_side=3),
       name=st.sampled_from(["add", "subtract", "maximum", "less_equal"]))
def test_broadcasting_any_compatible_shapes(shapes, name):
    rng = np.random.default_rng(0)
    shape_a, shape_b = shapes.input_shapes
    a, b = rng.normal(size=shape_a), rng.normal(size=shape_b)
    x, y = tg.placeholder(shape_a, "float64", "x"), tg.placeholder(shape_b, "float64", "y")
    out = tg.evaluate(getattr(ops, name)(x, y), {x: a, y: b})
    reference = {"add": np.add, "subtract": np.subtract, "maximum": np.maximum,
                 "less_equal": np.less_equal}[name]
    np.testing.assert_array_equal(out, reference(a, b))
    assert out.shape == shapes.result_shape


def test_integer_arithmetic_floor_semantics(run):
    a = np.array([[-7, 7, -8, 0, 5]], dtype="int32")
    b = np.array([[2], [-3]], dtype="int32")
    python = np.vectorize(lambda p, q: (p // q, p % q))
    div, mod = python(a, b)
    np.testing.assert_array_equal(run(ops.floor_divide, a, b), div)
    np.testing.assert_array_equal(run(ops.mod, a, b), mod)
    np.testing.assert_array_equal(run(ops.add, a, b), a.astype(int) + b.astype(int))
    np.testing.assert_array_equal(run(ops.power, np.abs(a), np.array([2], "int32")),
                                  np.abs(a).astype(int) ** 2)


def test_integer_dtypes_widen(run):
    a = np.array([1, 2, 3], dtype="int32")
    b = np.array([[10], [20]], dtype="int64")
    out = run(ops.multiply, a, b)
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [[10, 20, 30], [20, 40, 60]])


SHIFT_VALUES = np.array([-9, -1, 0, 1, 5, 1000, -2 ** 31, 2 ** 31 - 1], dtype="int32")


@pytest.mark.parametrize("shift", [0, 1, 3, 30, 31])
def test_shifts_by_a_number(shift, run):
    a = SHIFT_VALUES
    right = run(lambda x: ops.right_shift(x, shift), a)
    left = run(lambda x: ops.left_shift(x, shift), a)
    ints = [int(v) for v in a]
    wrap = lambda v: (v + 2 ** 31) % 2 ** 32 - 2 ** 31  # noqa: E731  two's complement int32
    np.testing.assert_array_equal(right, [v >> shift for v in ints])
    np.testing.assert_array_equal(left, [wrap(v << shift) for v in ints])
    assert right.dtype == left.dtype == np.int32


def test_shifts_by_a_tensor(run):
    a = np.array([[-9], [100], [7]], dtype="int64")
    s = np.array([0, 1, 2, 5], dtype="int32")
    np.testing.assert_array_equal(run(ops.right_shift, a, s),
                                  [[int(v) >> int(k) for k in s] for v in a[:, 0]])
    np.testing.assert_array_equal(run(ops.left_shift, a, s),
                                  [[int(v) << int(k) for k in s] for v in a[:, 0]])
    one = run(lambda t: ops.left_shift(1, t), s)
    np.testing.assert_array_equal(one, [1, 2, 4, 32])


def test_shift_errors():
    x = tg.placeholder((3,), name="xf")
    n = tg.placeholder((3,), dtype="int32", name="n")
    with pytest.raises(tg.DTypeError, match=r"^right_shift: .*tensor 'xf' has dtype float32"):
        ops.right_shift(x, 1)
    with pytest.raises(tg.DTypeError, match=r"^left_shift: shifts need integer operands, got 1.5"):
        ops.left_shift(n, 1.5)
    with pytest.raises(tg.TegradError, match=r"^left_shift: the shift 32 is out of range"):
        ops.left_shift(n, 32)
    with pytest.raises(tg.TegradError, match=r"^right_shift: the shift -1 is out of range"):
        ops.right_shift(n, -1)


COMPARISONS = [("equal", np.equal), ("not_equal", np.not_equal), ("greater", np.greater),
               ("greater_equal", np.greater_equal), ("less", np.less),
               ("less_equal", np.less_equal)]


@pytest.mark.parametrize("name,ref", COMPARISONS, ids=[c[0] for c in COMPARISONS])
def test_comparisons(name, ref, rng, run, ph):
    a = rng.integers(0, 3, size=(3, 1, 4)).astype("float64")
    b = rng.integers(0, 3, size=(5, 1)).astype("float64")
    out = run(getattr(ops, name), a, b)
    assert out.dtype == np.bool_
    np.testing.assert_array_equal(out, ref(a, b))
    ints = rng.integers(-2, 3, size=(7,)).astype("int32")
    x = ph(ints)
    np.testing.assert_array_equal(tg.evaluate(getattr(ops, name)(x, 1), {x: ints}),
                                  ref(ints, 1))
    np.testing.assert_array_equal(tg.evaluate(getattr(ops, name)(0, x), {x: ints}),
                                  ref(0, ints))


@pytest.mark.parametrize("name", [a[0] for a in ARITHMETIC] + [c[0] for c in COMPARISONS])
def test_binary_errors(name):
    op = getattr(ops, name)
    x = tg.placeholder((2, 3), name="x")
    y = tg.placeholder((4,), name="y")
    z = tg.placeholder((2, 3), dtype="float64", name="z")
    with pytest.raises(tg.ShapeError, match=rf"^{name}: cannot broadcast lhs tensor 'x' of shape "
                                            r"\(2, 3\) with rhs tensor 'y' of shape \(4,\)"):
        op(x, y)
    with pytest.raises(tg.DTypeError, match=rf"^{name}: .*float32 and float64"):
        op(x, z)
    with pytest.raises(tg.TegradError, match=rf"^{name}: needs at least one tensor operand"):
        op(1.0, 2.0)
    with pytest.raises(tg.TegradError, match=rf"^{name}: rhs must be a tegrad Tensor or a number"
                                            r", got list"):
        op(x, [1.0])


def test_numbers_must_fit_the_integer_dtype():
    n = tg.placeholder((2,), dtype="int32", name="n")
    with pytest.raises(tg.DTypeError, match=r"^add: the integer 1099511627776 does not fit the "
                                            r"dtype int32"):
        ops.add(n, 2 ** 40)
    u = tg.placeholder((2,), dtype="uint8", name="u")
    with pytest.raises(tg.DTypeError, match=r"^where: the integer -1 does not fit the dtype uint8"):
        ops.where(tg.placeholder((2,), dtype="bool", name="c"), u, -1)


def test_divide_rejects_integers():
    n = tg.placeholder((2,), dtype="int32", name="counts")
    with pytest.raises(tg.DTypeError, match=r"^divide: .*tensor 'counts' has dtype int32; use "
                                            r"floor_divide"):
        ops.divide(n, 2)


@pytest.mark.parametrize("shapes", [((2, 3), (2, 3), (2, 3)), ((3, 1), (1, 4), ()),
                                    ((4,), (2, 1, 1), (1, 4))])
def test_where(shapes, rng, run):
    c = rng.random(shapes[0]) < 0.5
    a = rng.normal(size=shapes[1])
    b = rng.normal(size=shapes[2])
    out = run(ops.where, c, a, b)
    expected = np.empty(np.broadcast_shapes(*shapes))
    cc, aa, bb = np.broadcast_arrays(c, a, b)
    for idx in np.ndindex(expected.shape):
        expected[idx] = aa[idx] if cc[idx] else bb[idx]
    np.testing.assert_array_equal(out, expected)


def test_where_numeric_condition_and_numbers(ph):
    c = np.array([0, 2, -1, 0], dtype="int32")
    a = np.array([1.0, 2.0, 3.0, 4.0], dtype="float32")
    tc, ta = ph(c, "c"), ph(a, "a")
    got = tg.evaluate([ops.where(tc, ta, -1.0), ops.where(tc, 5.0, 6.0),
                       ops.where(True, ta, 0.0)], {tc: c, ta: a})
    np.testing.assert_array_equal(got[0], [-1.0, 2.0, 3.0, -1.0])
    np.testing.assert_array_equal(got[1], [6.0, 5.0, 5.0, 6.0])
    np.testing.assert_array_equal(got[2], a)


def test_where_errors():
    c = tg.placeholder((3,), dtype="bool", name="c")
    a = tg.placeholder((3,), name="a")
    b = tg.placeholder((3,), dtype="float64", name="b")
    w = tg.placeholder((2,), name="w")
    with pytest.raises(tg.ShapeError, match=r"^where: cannot broadcast cond tensor 'c' of shape "
                                            r"\(3,\) with b tensor 'w'"):
        ops.where(c, a, w)
    with pytest.raises(tg.DTypeError, match=r"^where: dtype mismatch .*float32 and float64"):
        ops.where(c, a, b)
    with pytest.raises(tg.TegradError, match=r"^where: needs at least one tensor"):
        ops.where(True, 1.0, 2.0)
    with pytest.raises(tg.TegradError, match=r"^where: a must be a tegrad Tensor or a number"):
        ops.where(c, "a", b)
