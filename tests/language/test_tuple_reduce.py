"""Reductions of tuples written with tg.comm_reducer: tuple computes, their evaluation,
compiled code (one loop nest), gradients (declared and generic) and the errors of
malformed reducers."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tegrad as tg
from tegrad.codegen.lower.program import lower_program
from tegrad.codegen.schedule.fusion import stage_names, statements
from tegrad.ir.expr import TupleReduce

#: (sum, max) of pairs: two reductions folded in one pass
SUM_MAX = tg.comm_reducer(lambda a, b: (a[0] + b[0], tg.max(a[1], b[1])),
                          lambda t0, t1: (0.0, -float("inf")), name="sum_max")


def _sum_of_products(a, b):
    """(sum of x * y, sum of y) from pairs (x * y, y): differentiable everywhere, for the
    generic rule (no declared derivative)."""
    return a[0] + b[0], a[1] + b[1]


SUM_PAIR = tg.comm_reducer(_sum_of_products, lambda t0, t1: (0.0, 0.0), name="sum_pair")


def _one_nest(inputs, outputs):
    kernel = lower_program(inputs, outputs)
    return any(set(stage_names(s)) >= {t.name for t in outputs}
               for s in statements(kernel.body))


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 5), st.integers(1, 9), st.sampled_from(["float32", "float64"]),
       st.integers(0, 2**32 - 1), st.booleans())
def test_a_pair_of_reductions_in_one_pass(rows, cols, dtype, seed, masked):
    a = np.random.default_rng(seed).normal(size=(rows, cols)).astype(dtype)
    x = tg.placeholder(a.shape, dtype=dtype, name="x")
    k = tg.reduce_axis((0, cols), name="k")
    where = (k % 2 == 0) if masked else None
    total, top = tg.compute((rows,), lambda i: SUM_MAX((x[i, k], x[i, k] * 2.0), axis=k,
                                                       where=where), name=("total", "top"))
    assert type(total.op.body) is TupleReduce and total.op.body.component(1) == top.op.body
    kept = a[:, ::2] if masked else a
    got = tg.evaluate([total, top], {x: a})
    tol = 1e-5 if dtype == "float32" else 1e-12
    np.testing.assert_allclose(got[0], kept.sum(axis=1), rtol=tol, atol=tol)
    np.testing.assert_array_equal(got[1], (kept * 2).max(axis=1))
    compiled = tg.build([x], [total, top])(a)
    np.testing.assert_allclose(compiled[0], got[0], rtol=tol, atol=tol)
    np.testing.assert_array_equal(compiled[1], got[1])
    assert _one_nest([x], [total, top])


def test_the_generic_gradient_of_a_reducer_without_derivative():
    x = tg.placeholder((3, 5), dtype="float64", name="x")
    w = tg.placeholder((5,), dtype="float64", name="w")
    k = tg.reduce_axis((0, 5), name="k")
    dot, norm = tg.compute((3,), lambda i: SUM_PAIR((x[i, k] * w[k], w[k] * w[k]), axis=k),
                           name=("dot", "norm"))
    y = tg.compute((3,), lambda i: dot[i] / norm[i], name="y")
    assert tg.testing.check_grad(y, [x, w], head="random", rng=4) < 1e-6


#: (min, max) of pairs, and the (index, value) of the first maximum: combiners whose
#: partial derivatives hold the other points' reduction inside a select
MIN_MAX = tg.comm_reducer(lambda a, b: (tg.min(a[0], b[0]), tg.max(a[1], b[1])),
                          lambda t0, t1: (tg.max_value(t0), tg.min_value(t1)), name="min_max")
ARGMAX = tg.comm_reducer(
    lambda a, b: (tg.if_then_else(a[1] >= b[1], a[0], b[0]), tg.max(a[1], b[1])),
    lambda t0, t1: (-1, tg.min_value(t1)), name="argmax")


@settings(max_examples=12, deadline=None)
@given(st.sampled_from(["sum_max", "min_max", "argmax"]), st.integers(1, 3),
       st.integers(1, 3), st.integers(1, 5), st.booleans(), st.integers(0, 2**32 - 1))
def test_generic_gradients_of_tuple_reducers_with_selects(reducer, rows, depth, cols,
                                                          masked, seed):
    """Without a declared derivative, each point's partial reads the reduction of the
    other points (stages ``Y_rest<c>`` over the output and the point): every component
    of SUM_MAX, MIN_MAX and ARGMAX over 2 axes equals central differences in
    float64 (distinct values: no ties), and compiled equals ``tg.evaluate``."""
    rng = np.random.default_rng(seed)
    a = rng.permutation(rows * depth * cols).reshape(rows, depth, cols) * 0.37 - 1.0
    x = tg.placeholder(a.shape, dtype="float64", name="x")
    k, m = tg.reduce_axis((0, depth), name="k"), tg.reduce_axis((0, cols), name="m")
    where = ((m + k) % 3 != 1) if masked and cols > 1 else None
    sources = {"sum_max": lambda i: (x[i, k, m] * 2.0, x[i, k, m]),
               "min_max": lambda i: (x[i, k, m], x[i, k, m] * x[i, k, m]),
               "argmax": lambda i: (m + k * 0, x[i, k, m] * 1.5)}[reducer]
    red = {"sum_max": SUM_MAX, "min_max": MIN_MAX, "argmax": ARGMAX}[reducer]
    first, second = tg.compute((rows,), lambda i: red(sources(i), axis=[k, m], where=where),
                               name=("first", "second"))
    outputs = [second] if reducer == "argmax" else [first, second]
    for out in outputs:
        assert tg.testing.check_grad(out, [x], feed={x: a}, head="random",
                                     rng=seed % 97) < 1e-6
        (dx,) = tg.differentiate(out, [x])
        want = tg.evaluate(dx, {x: a})
        np.testing.assert_allclose(tg.build([x], [dx], threads=2)(a)[0], want, rtol=1e-12,
                                   atol=1e-12)


def test_an_axis_free_tuple_is_its_element():
    x = tg.placeholder((3,), dtype="float64", name="x")
    a, b = tg.compute((3,), lambda i: SUM_MAX((x[i], x[i] + 1.0), axis=[]), name=("a", "b"))
    values = np.array([1.0, -2.0, 3.0])
    assert [v.tolist() for v in tg.evaluate([a, b], {x: values})] == [
        values.tolist(), (values + 1).tolist()]


def test_printing_and_substitution_of_tuple_components():
    x = tg.placeholder((4, 4), dtype="float64", name="x")
    k = tg.reduce_axis((0, 4), name="k")
    s, m = SUM_MAX((x[tg.Var("i"), k], x[k, tg.Var("i")]), axis=k)
    assert str(m) == "sum_max((x[i, k], x[k, i]), k in [0, 4))[1]"
    moved = tg.ir.mapper.substitute(m, {"i": tg.Var("k") + 1})
    # the bound k is renamed, not captured by the replacement's k
    assert str(moved) == "sum_max((x[k + 1, k_1], x[k_1, k + 1]), k_1 in [0, 4))[1]"


def _pair(a, b):
    return a[0] + b[0], a[1] + b[1]


@pytest.mark.parametrize("combine, identity, match", [
    (lambda a, b: (a[0] + b[0],), lambda t0, t1: (0.0, 0.0),
     r"'bad': combine of two 2-tuples returned .*; it must return a tuple of 2"),
    (lambda a, b: a[0] + b[0], lambda t0, t1: (0.0, 0.0),
     r"'bad': combine of two 2-tuples returned .*; it must return a tuple of 2"),
    (lambda a, b: (a[0] + b[0], tg.cast(a[1], "float32")), lambda t0, t1: (0.0, 0.0),
     r"'bad': component 1 of combine has dtype float32, but the sources' component 1 is "
     r"float64"),
    (_pair, lambda t0, t1: (0.0,),
     r"'bad': identity of 2 components returned \(0.0,\); it must return a tuple of 2"),
    (_pair, lambda t0: (0.0, 0.0), r"'bad': identity must take one dtype per component"),
    (_pair, lambda t0, t1: (0.0, 1.5),
     r"the float 1.5 is not a valid int32 constant"),
])
def test_malformed_reducers_of_tuples_are_named(combine, identity, match):
    x = tg.placeholder((4,), dtype="float64", name="x")
    k = tg.reduce_axis((0, 4), name="k")
    second = k if "int32" in match else x[k]
    bad = tg.comm_reducer(combine, identity, name="bad")
    with pytest.raises(tg.TegradError, match=match):
        tg.compute((), lambda: bad((x[k], second), axis=k))


def test_misused_reductions_of_tuples_are_named():
    x = tg.placeholder((4,), dtype="float64", name="x")
    k = tg.reduce_axis((0, 4), name="k")
    with pytest.raises(tg.TegradError, match="sum_max: a reduction of a tuple takes no init"):
        SUM_MAX((x[k], x[k]), axis=k, init=(0.0, 0.0))
    with pytest.raises(tg.TegradError, match=r"'sum_max': combine\(a, b\) failed on two "
                                             r"float64 expressions"):
        SUM_MAX(x[k], axis=k)
    with pytest.raises(tg.TegradError, match=r"'sum': combine\(a, b\) failed on two "
                                             r"2-tuples of float64, float64"):
        tg.sum((x[k], x[k]), axis=k)
    with pytest.raises(tg.TegradError, match="sum_max: the tuple of sources is empty"):
        SUM_MAX((), axis=k)
    with pytest.raises(tg.TegradError, match="compute 'y': the body uses a component of the "
                                             "reduction of a tuple .*inside an expression"):
        tg.compute((), lambda: SUM_MAX((x[k], x[k]), axis=k)[0] * 2.0, name="y")
    with pytest.raises(tg.DTypeError, match="dtype= must be a tuple of 2 dtypes"):
        tg.compute((), lambda: SUM_MAX((x[k], x[k]), axis=k), dtype="float64")
    with pytest.raises(tg.TegradError, match=r"the names \('a', 'b'\) are for a function "
                                             r"returning a tuple"):
        tg.compute((), lambda: x[0], name=("a", "b"))


def test_a_malformed_declared_derivative_is_named():
    rows = tg.comm_reducer(_pair, lambda t0, t1: (0.0, 0.0), name="rows",
                           derivative=lambda x, y: (1.0, 1.0))
    x = tg.placeholder((4,), dtype="float64", name="x")
    k = tg.reduce_axis((0, 4), name="k")
    s, _ = tg.compute((), lambda: rows((x[k], x[k] * x[k]), axis=k), name=("s", "q"))
    with pytest.raises(tg.DifferentiationError, match="'rows': derivative.* must return 2 "
                                                      "rows of 2 partial derivatives"):
        tg.differentiate(s, [x])


def test_a_schedule_of_one_component_schedules_the_shared_nest():
    x = tg.placeholder((5, 37), name="x")
    k = tg.reduce_axis((0, 37), name="k")
    total, top = tg.compute((5,), lambda i: SUM_MAX((x[i, k], x[i, k]), axis=k),
                            name=("total", "top"))
    f = tg.build([x], [total, top], schedule={"top": {"split": {"i": 2}}})
    text = f.loops
    # split, with a remainder loop: each nest over k computes both components
    assert "i_o" in text and text.count("total[i") == text.count("top[i") == text.count(
        "for (k "), text
    again = tg.build([x], [total, top], schedule=f.schedule)
    assert again.loops == f.loops
    a = np.random.default_rng(2).normal(size=(5, 37)).astype("float32")
    for got, want in zip(f(a), tg.evaluate([total, top], {x: a})):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
