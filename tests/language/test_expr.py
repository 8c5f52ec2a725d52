"""Expression nodes: structural identity, dtype rules, truth values."""
import numpy as np
import pytest

import tegrad as tg
from tegrad.ir.expr import (And, Binary, Call, Cast, Compare, Const, Neg, Not, Or, Read, Reduce,
                            Select, Var)


def test_same_expression_built_twice_is_equal_and_hashes_alike():
    A = tg.placeholder((4, 4), name="A")
    i, j = Var("i"), Var("j")
    e1 = A[i, j] * 2 + A[j, i]
    e2 = A[i, j] * 2 + A[j, i]
    assert e1 is not e2
    assert tg.structural_equal(e1, e2)
    assert hash(e1) == hash(e2)
    assert bool(e1 == e2) and not bool(e1 != e2)
    assert {e1: "grad"}[e2] == "grad"


def test_structural_inequality():
    A = tg.placeholder((4, 4), name="A")
    B = tg.placeholder((4, 4), name="A")  # same name, different tensor
    i, j = Var("i"), Var("j")
    assert not tg.structural_equal(A[i, j], A[j, i])
    assert not tg.structural_equal(A[i, j], B[i, j])
    assert not tg.structural_equal(Const(1, "float32"), Const(1, "float64"))
    assert not tg.structural_equal(i + 1, i - 1)
    assert bool(A[i, j] != B[i, j])


def test_operators_build_the_right_nodes():
    i = Var("i")
    x = Var("x", "float32")
    assert isinstance(i + 1, Binary) and (i + 1).op == "add"
    assert (1 - i).op == "sub" and isinstance((1 - i).a, Const)
    assert (i * 3).op == "mul"
    assert (x / 2).op == "div" and (x / 2).dtype == "float32"
    assert (i // 2).op == "floordiv" and (i % 2).op == "floormod"
    assert isinstance(-x, Neg)
    assert isinstance(i < 3, Compare) and (i < 3).dtype == "bool"
    assert isinstance((i < 3) & (i > 0), And)
    assert isinstance((i < 3) | (i > 0), Or)
    assert isinstance(~(i < 3), Not)
    assert isinstance(tg.if_then_else(i < 3, x, 0.0), Select)
    assert isinstance(tg.cast(i, "float32"), Cast)
    assert isinstance(tg.exp(x), Call) and tg.exp(x).name == "exp"
    assert isinstance(x ** 2, Call) and (x ** 2).name == "pow"
    assert tg.max(i, 3).op == "max" and tg.min(i, 3).op == "min"


def test_python_numbers_take_the_expression_dtype():
    A = tg.placeholder((2,), dtype="float64", name="A")
    e = A[0] * 2 + 0.5
    assert e.dtype == "float64"
    assert e.a.b.dtype == "float64" and e.b.value == 0.5
    assert (Var("i") + 2).dtype == "int32"


def test_truth_value_of_an_inequality_raises():
    i = Var("i")
    with pytest.raises(tg.TegradError, match="truth value"):
        bool(i < 3)
    with pytest.raises(tg.TegradError, match="truth value"):
        if i + 1:
            pass



@pytest.mark.parametrize("make", [
    lambda x: x > 0, lambda x: x, lambda x: tg.compute(x.shape, lambda i: x[i] * 2.0),
    lambda x: (x * x).sum()])
def test_a_tensor_has_no_truth_value_and_no_array(make):
    """A tensor (a comparison's, a placeholder, a stage, a reduction) is known only when
    the program runs: ``if``, ``bool`` and ``np.asarray`` raise a TegradError naming it
    instead of taking a branch or making an object array."""
    t = make(tg.placeholder((3,), name="x"))
    with pytest.raises(tg.TegradError, match=f"truth value of tensor '{t.name}'"):
        bool(t)
    with pytest.raises(tg.TegradError, match=f"truth value of tensor '{t.name}'"):
        if t:
            pass
    for convert in (np.asarray, np.array):
        with pytest.raises(tg.TegradError, match=f"tensor '{t.name}' has no values"):
            convert(t)
    if t.dtype != "bool":  # a numpy scalar still combines with a tensor
        assert isinstance(np.float32(2) * t, tg.Tensor)

def test_dtype_mismatch_needs_a_cast():
    A = tg.placeholder((2,), dtype="float32", name="A")
    B = tg.placeholder((2,), dtype="float64", name="B")
    with pytest.raises(tg.DTypeError, match="float32 and float64"):
        A[0] + B[0]
    assert (tg.cast(A[0], "float64") + B[0]).dtype == "float64"
    with pytest.raises(tg.DTypeError, match="float"):
        Var("i") * 0.5
    with pytest.raises(tg.DTypeError, match="true division"):
        Var("i") / 2
    with pytest.raises(tg.DTypeError, match="bool condition"):
        tg.if_then_else(Var("i"), A[0], 0.0)
    with pytest.raises(tg.DTypeError, match="not defined for int32"):
        tg.exp(Var("i"))


def test_integer_dtypes_widen():
    I = tg.placeholder((3,), dtype="int64", name="I")
    assert (Var("i") + I[0]).dtype == "int64"


def test_const_and_limits():
    assert tg.const(3, "float32").value == 3.0
    assert tg.const(2).dtype == "int32"
    assert tg.const(1.5).dtype == "float32"
    assert tg.max_value("int32").value == 2**31 - 1
    assert tg.min_value("int8").value == -128
    assert tg.max_value("float32").value == pytest.approx(3.4028234663852886e38)
    with pytest.raises(tg.DTypeError):
        tg.const(1.5, "int32")
    with pytest.raises(tg.DTypeError, match="unsupported dtype"):
        tg.const(1, "complex64")


def test_reduce_node_fields():
    A = tg.placeholder((3, 4), name="A")
    k = tg.reduce_axis((0, 4), name="k")
    r = tg.sum(A[0, k], axis=k, where=k < 2, init=1.0)
    assert isinstance(r, Reduce) and r.reducer is tg.sum
    assert r.axes[0].name == "k" and r.axes[0].extent.value == 4
    assert isinstance(r.where, Compare) and r.init.value == 1.0


def test_printer_one_stage_per_line():
    A = tg.placeholder((64, 64), name="A")
    B = tg.placeholder((64, 64), name="B")
    k = tg.reduce_axis((0, 64), name="k")
    C = tg.compute((64, 64), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
    D = tg.compute((64, 64), lambda i, j: tg.if_then_else(C[i, j] > 0, C[i, j], 0.0), name="D")
    text = tg.format(D)
    assert text.splitlines() == [
        "A = placeholder((64, 64), float32)",
        "B = placeholder((64, 64), float32)",
        "C[i, j] = sum(A[i, k] * B[k, j], k in [0, 64))",
        "D[i, j] = C[i, j] > 0.0 ? C[i, j] : 0.0",
    ]
    assert str(D) == text


def test_printer_precedence_and_duplicate_names():
    x = tg.placeholder((8,), name="x")
    y = tg.compute((8,), lambda i: x[(i + 1) % 8] * (x[i] - 1.0), name="x")
    text = tg.format(y)
    assert "x_1[i] = x[(i + 1) % 8] * (x[i] - 1.0)" in text
    i = Var("i")
    assert str(i - (i - 1)) == "i - (i - 1)"
    assert str((i - i) - 1) == "i - i - 1"
    assert str(tg.if_then_else(tg.all(i >= 1, i < 6), x[i - 1], 0.0)) == \
        "(i >= 1 && i < 6) ? x[i - 1] : 0.0"


def test_python_literals_are_weakly_typed():
    x = tg.placeholder((3,), dtype="float64", name="x")
    y = tg.compute((3,), lambda i: x[i] * tg.if_then_else(x[i] > 0.0, 1.0, 0.0), name="y")
    assert y.dtype == "float64"
    assert tg.evaluate(y, {x: np.array([-1.0, 0.5, 2.0])}).tolist() == [-0.0, 0.5, 2.0]
    k = tg.reduce_axis((0, 3), name="k")
    s = tg.compute((), lambda: tg.sum(x[k], axis=k, init=tg.const(1.5)), name="s")
    assert s.dtype == "float64"
    assert tg.compute((), lambda: 0.0, dtype="float64").dtype == "float64"
    # an explicitly typed constant is not converted
    with pytest.raises(tg.DTypeError, match="float64 and float32"):
        x[0] + tg.const(1.0, "float32")
    # a float literal never becomes an integer
    with pytest.raises(tg.DTypeError):
        Var("i") + tg.if_then_else(Var("i") > 0, 1.5, 0.5)


def test_reduction_over_no_axes_is_its_value():
    x = tg.placeholder((3,), dtype="float64", name="x")
    y = tg.compute((3,), lambda i: tg.sum(x[i], axis=[], where=i > 0, init=10.0), name="y")
    assert tg.evaluate(y, {x: np.array([1.0, 2.0, 3.0])}).tolist() == [10.0, 12.0, 13.0]
    assert tg.structural_equal(tg.max(x[0], axis=[]), x[0])


def test_adding_a_negative_constant_prints_as_subtraction():
    A = tg.placeholder((9,), name="A")
    i = Var("i")
    assert str(A[i * 2 + (-1) + 2]) == "A[i * 2 - 1 + 2]"
