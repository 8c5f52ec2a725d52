"""Every construction and evaluation error: its type, and a message naming the culprit."""
import numpy as np
import pytest

import tegrad as tg


@pytest.fixture
def A():
    return tg.placeholder((4, 5), dtype="float32", name="Amat")


def test_wrong_number_of_indices(A):
    with pytest.raises(tg.IndexingError, match=r"'Amat'.*1 index.*needs 2"):
        tg.compute((4,), lambda i: A[i], name="bad")
    with pytest.raises(tg.IndexingError, match=r"'Amat'.*3 index"):
        A[0, 1, 2]


def test_float_used_as_an_index(A):
    with pytest.raises(tg.IndexingError, match=r"'Amat'.*float"):
        A[0.5, 1]
    x = tg.placeholder((3,), dtype="float32", name="fidx")
    with pytest.raises(tg.IndexingError, match=r"'Amat'.*index 0.*float32"):
        tg.compute((3,), lambda i: A[x[i], 0], name="bad")
    with pytest.raises(tg.IndexingError, match="slice"):
        A[0:2, 1]


def test_reduce_axis_used_outside_its_reduction(A):
    k = tg.reduce_axis((0, 5), name="kk")
    with pytest.raises(tg.ScopeError, match=r"'Cout'.*'kk'"):
        tg.compute((4,), lambda i: A[i, k] + tg.sum(A[i, k], axis=k), name="Cout")
    with pytest.raises(tg.ScopeError, match=r"'Cfree'.*'q'"):
        tg.compute((4,), lambda i: A[i, tg.Var("q")], name="Cfree")


def test_reduce_axis_name_clash_and_reuse(A):
    k = tg.reduce_axis((0, 5), name="i")
    with pytest.raises(tg.ScopeError, match=r"'Cl'.*'i'"):
        tg.compute((4,), lambda i: tg.sum(A[i, k], axis=k), name="Cl")
    k2 = tg.reduce_axis((0, 5), name="k2")
    with pytest.raises(tg.ScopeError, match="k2"):
        tg.sum(tg.sum(A[0, k2], axis=k2), axis=k2)
    with pytest.raises(tg.ScopeError, match="given twice"):
        tg.sum(A[0, k2], axis=[k2, k2])


def test_reduction_needs_an_axis(A):
    with pytest.raises(tg.TegradError, match="axis"):
        tg.sum(A[0, 0])
    with pytest.raises(tg.TegradError, match="not a reduce_axis"):
        tg.sum(A[0, 0], axis=3)
    with pytest.raises(tg.DTypeError, match="where"):
        k = tg.reduce_axis((0, 5), name="k")
        tg.sum(A[0, k], axis=k, where=A[0, k])
    with pytest.raises(tg.DTypeError, match="init"):
        k = tg.reduce_axis((0, 5), name="k")
        tg.sum(A[0, k], axis=k, init=tg.const(1, "float64"))


def test_mismatched_dtypes_without_a_cast(A):
    B = tg.placeholder((4, 5), dtype="float64", name="Bdbl")
    with pytest.raises(tg.DTypeError, match=r"Amat.*Bdbl.*float32 and float64"):
        tg.compute((4, 5), lambda i, j: A[i, j] + B[i, j], name="sum")
    with pytest.raises(tg.DTypeError, match="cast"):
        tg.if_then_else(A[0, 0] > 0.0, A[0, 0], B[0, 0])
    with pytest.raises(tg.DTypeError, match="float64"):
        tg.compute((4, 5), lambda i, j: A[i, j], name="typed", dtype="float64")


@pytest.mark.parametrize("shape, match", [
    ((0, 3), "non-positive"), ((-1,), "non-positive"), ((2.5, 3), "non-integer"),
    (("a",), "non-integer"), ("abc", "tuple"), ((True, 2), "non-integer")])
def test_bad_shapes(shape, match):
    with pytest.raises(tg.ShapeError, match=match):
        tg.placeholder(shape, name="P")
    with pytest.raises(tg.ShapeError, match=r"'Cshape'"):
        tg.compute(shape, lambda *i: 0.0, name="Cshape")


def test_compute_function_arity(A):
    with pytest.raises(tg.ShapeError, match=r"'Carity'.*3 index.*2 dimension"):
        tg.compute((4, 5), lambda i, j, k: A[i, j], name="Carity")


def test_bad_dtypes():
    with pytest.raises(tg.DTypeError, match="unsupported dtype"):
        tg.placeholder((2,), dtype="float128x", name="P")
    with pytest.raises(tg.DTypeError, match="bool"):
        x = tg.placeholder((2,), dtype="bool", name="bools")
        k = tg.reduce_axis((0, 2), name="k")
        tg.sum(x[k], axis=k)


def test_bad_reduce_axis():
    with pytest.raises(tg.ShapeError, match="before"):
        tg.reduce_axis((5, 2), name="back")
    with pytest.raises(tg.ShapeError, match="integers"):
        tg.reduce_axis((0, 2.5), name="frac")
    with pytest.raises(tg.ShapeError, match=r"\(begin, end\)"):
        tg.reduce_axis((0, 1, 2), name="three")


def test_feed_errors(A):
    B = tg.compute((4, 5), lambda i, j: A[i, j] * 2, name="B")
    with pytest.raises(tg.FeedError, match=r"'Amat'.*shape \(4, 5\).*\(5, 4\)"):
        tg.evaluate(B, {A: np.zeros((5, 4), dtype="float32")})
    with pytest.raises(tg.FeedError, match=r"'Amat'.*float32.*float64"):
        tg.evaluate(B, {A: np.full((4, 5), 0.1, dtype="float64")})
    with pytest.raises(tg.FeedError, match=r"no value fed.*'Amat'"):
        tg.evaluate(B, {})
    with pytest.raises(tg.FeedError, match="dict"):
        tg.evaluate(B, [np.zeros((4, 5))])
    with pytest.raises(tg.FeedError, match="'Amat'"):
        tg.evaluate(B, {A: [["x"] * 5] * 4})


def test_out_of_bounds_read_is_reported_not_wrapped(A):
    shifted = tg.compute((4, 5), lambda i, j: A[i, j - 1], name="shifted")
    with pytest.raises(tg.OutOfBoundsError, match=r"'Amat'.*\(0, -1\).*dimension 1"):
        tg.evaluate(shifted, {A: np.zeros((4, 5), dtype="float32")})
    k = tg.reduce_axis((0, 6), name="k")
    over = tg.compute((4,), lambda i: tg.sum(A[i, k], axis=k), name="over")
    with pytest.raises(tg.OutOfBoundsError, match="'Amat'"):
        tg.evaluate(over, {A: np.zeros((4, 5), dtype="float32")})


def test_integer_division_by_zero():
    I = tg.placeholder((3,), dtype="int32", name="I")
    q = tg.compute((3,), lambda i: 10 // I[i], name="q")
    with pytest.raises(tg.TegradError, match="division by zero"):
        tg.evaluate(q, {I: np.array([1, 0, 2], dtype="int32")})
    guarded = tg.compute((3,), lambda i: tg.if_then_else(I[i] != 0, 10 // I[i], -1), name="g")
    assert tg.evaluate(guarded, {I: np.array([1, 0, 2], dtype="int32")}).tolist() == [10, -1, 5]


def test_misuse_of_tensors_and_expressions(A):
    with pytest.raises(tg.TegradError, match="'Amat'.*scalar"):
        tg.compute((4, 5), lambda i, j: A, name="whole")
    with pytest.raises(tg.TegradError, match="unknown intrinsic"):
        tg.call("softplus", A[0, 0])
    with pytest.raises(tg.TegradError, match=r"2 names \('a', 'b'\) for the 3 outputs"):
        tg.compute((4,), lambda i: (A[i, 0], A[i, 1], A[i, 2]), name=("a", "b"))
    with pytest.raises(tg.TegradError, match="tg.max"):
        tg.max(A[0, 0], A[0, 1], A[0, 2])
    with pytest.raises(tg.TegradError, match="comm_reducer"):
        tg.comm_reducer("add", 0)
    with pytest.raises(AttributeError, match="immutable"):
        A.name = "other"


def test_errors_share_a_base_and_builtin_types():
    assert issubclass(tg.DTypeError, TypeError) and issubclass(tg.ShapeError, ValueError)
    assert issubclass(tg.OutOfBoundsError, IndexError)
    for cls in (tg.DTypeError, tg.ShapeError, tg.IndexingError, tg.ScopeError, tg.FeedError,
                tg.OutOfBoundsError, tg.DifferentiationError):
        assert issubclass(cls, tg.TegradError)


def test_integer_constants_must_fit_their_dtype():
    x = tg.placeholder((2,), dtype="int32", name="ints")
    with pytest.raises(tg.DTypeError, match="1099511627776.*int32"):
        tg.compute((2,), lambda i: x[i] + 2**40, name="big")
    with pytest.raises(tg.DTypeError, match="int8"):
        tg.const(300, "int8")
    assert tg.const(2**40).dtype == "int64"


def test_a_constant_must_be_a_real_number():
    with pytest.raises(tg.DTypeError, match=r"'abc'.*float64"):
        tg.const("abc", "float64")
    with pytest.raises(tg.DTypeError, match=r"1j"):
        tg.const(1j, "float32")


def test_python_and_numpy_math_on_expressions_name_the_tegrad_function(A):
    import math
    with pytest.raises(tg.TegradError, match=r"Amat\[0, 1\].*tg\.exp"):
        math.exp(A[0, 1])
    with pytest.raises(tg.TegradError, match=r"Amat\[0, 0\].*Python number"):
        float(A[0, 0])
    with pytest.raises(tg.TegradError, match=r"\bi\b.*Python number"):
        tg.compute((4,), lambda i: [1.0, 2.0][i], name="listed")
    with pytest.raises(tg.TegradError, match=r"numpy's exp.*Amat\[0, 0\].*tg\.exp"):
        np.exp(A[0, 0])
    # numpy scalars still combine with expressions like Python numbers
    assert str(np.float32(2.0) * A[0, 0]) == "2.0 * Amat[0, 0]"


def test_builtin_abs_builds_the_abs_intrinsic():
    x = tg.placeholder((3,), dtype="float64", name="x")
    y = tg.compute((3,), lambda i: abs(x[i] - 1.0), name="y")
    assert tg.evaluate(y, {x: np.array([-1.0, 1.0, 3.0])}).tolist() == [2.0, 0.0, 2.0]
    assert str(abs(tg.Var("i"))) == "abs(i)"


def test_comm_reducer_checks_the_arity_of_combine_and_identity():
    with pytest.raises(tg.TegradError, match=r"'unary'.*combine must take 2.*combine\(a\)"):
        tg.comm_reducer(lambda a: a, lambda dtype: 0.0, name="unary")
    with pytest.raises(tg.TegradError, match=r"'triple'.*combine\(a, b, c\)"):
        tg.comm_reducer(lambda a, b, c: a, lambda dtype: 0.0, name="triple")
    with pytest.raises(tg.TegradError, match=r"'noid'.*identity must take 1"):
        tg.comm_reducer(lambda a, b: a + b, lambda: 0.0, name="noid")


def test_evaluate_names_what_is_not_a_tensor(A):
    with pytest.raises(tg.TegradError, match=r"3\.0 of type float"):
        tg.evaluate(3.0, {})
    with pytest.raises(tg.TegradError, match=r"Amat\[0, 0\] is an expression, not a tensor"):
        tg.evaluate(A[0, 0], {A: np.zeros((4, 5), dtype="float32")})
    with pytest.raises(tg.TegradError, match=r"'x' of type str"):
        tg.evaluate([A, "x"], {A: np.zeros((4, 5), dtype="float32")})


def _mistakes():
    import math
    x = tg.placeholder((3,), dtype="float64", name="xm")
    s = tg.placeholder((), dtype="float64", name="sm")
    y = tg.compute((3,), lambda i: x[i] * 2.0, name="ym")
    k = tg.reduce_axis((0, 3), name="km")
    return {
        "format of a number": (lambda: tg.format(3), "3 of type int"),
        "cost of a number": (lambda: tg.cost(3), "3 of type int"),
        "length of a scalar tensor": (lambda: len(s), "'sm'"),
        "iterating a tensor": (lambda: list(x), "'xm'"),
        "assigning to a tensor": (lambda: setattr(x, "name", "z"), "'xm'.*immutable"),
        "compute without a function": (lambda: tg.compute((3,), None, name="cm"), "'cm'"),
        "round to digits": (lambda: round(x[0], 2), r"xm\[0\]"),
        "math on an expression": (lambda: math.sqrt(x[0]), r"xm\[0\].*tg\.sqrt"),
        "a string body": (lambda: tg.compute((3,), lambda i: "abc", name="sb"), "'sb'"),
        "a string constant": (lambda: tg.const("abc", "float64"), "'abc'"),
        "a reducer of the wrong arity": (
            lambda: tg.comm_reducer(lambda a: a, lambda d: 0.0, name="ar"), "'ar'"),
        "a reducer whose combine returns text": (
            lambda: tg.comm_reducer(lambda a, b: "s", lambda d: 0.0, name="rt")(x[k], axis=k),
            "'s'"),
        "evaluating a number": (lambda: tg.evaluate(3.0, {}), "3.0"),
        "evaluating an expression": (lambda: tg.evaluate(y[0], {}), r"ym\[0\]"),
        "differentiating an expression": (lambda: tg.differentiate(y[0], [x]), r"ym\[0\]"),
        "an unknown dtype": (lambda: tg.placeholder((3,), dtype="str", name="ud"), "'str'"),
    }


@pytest.mark.parametrize("mistake", sorted(_mistakes()))
def test_every_user_mistake_is_a_tegrad_error_naming_the_culprit(mistake):
    fn, culprit = _mistakes()[mistake]
    with pytest.raises(tg.TegradError, match=culprit):
        fn()
