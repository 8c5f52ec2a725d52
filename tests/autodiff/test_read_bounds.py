"""A program that certainly reads outside a tensor is refused by ``tg.differentiate``
(its adjoint would drop the points outside and return a plausible gradient), exactly
where the evaluator raises for every input: random linear reads over one or two axes
and a reduction, unguarded, raise in ``differentiate`` if and only if ``tg.evaluate``
raises; guarded reads (a select's branch, a reduction's ``where``, bounds that depend on
another axis) are left to the evaluator, and valid padding keeps its gradient."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.analysis.read_bounds import reads_outside


@st.composite
def linear_reads(draw):
    """``(x, y)``: ``y[i, j] = sum_k x[a*i + b*j + c*k + d]`` (the reduction optional)
    over small random extents and coefficients, some reads outside."""
    n = draw(st.integers(1, 9))
    rows, cols, red = (draw(st.integers(1, 4)) for _ in range(3))
    a, b, c = (draw(st.integers(-2, 2)) for _ in range(3))
    d = draw(st.integers(-3, n + 2))
    reduce = draw(st.booleans())
    x = tg.placeholder((n,), dtype="float64", name="x")
    if reduce:
        k = tg.reduce_axis((0, red), name="k")
        y = tg.compute((rows, cols), lambda i, j: tg.sum(x[a * i + b * j + c * k + d], axis=k),
                       name="y")
    else:
        y = tg.compute((rows, cols), lambda i, j: x[a * i + b * j + d] * 2.0, name="y")
    return x, y


@settings(max_examples=60, deadline=None)
@given(linear_reads())
def test_differentiate_refuses_exactly_the_reads_the_evaluator_refuses(case):
    x, y = case
    value = np.arange(x.shape[0], dtype=np.float64)
    try:
        tg.evaluate(y, {x: value})
        outside = False
    except tg.OutOfBoundsError:
        outside = True
    assert bool(reads_outside(y)) == outside
    if outside:
        with pytest.raises(tg.OutOfBoundsError, match=r"stage 'y' reads 'x' \(shape"):
            tg.differentiate(y, [x])
        with pytest.raises(tg.OutOfBoundsError):
            tg.jacobian(y, x)
    else:
        (dx,) = tg.differentiate(y, [x])
        assert tg.testing.check_grad(y, [x], feed={x: value}, head="random", rng=0) < 1e-6


def test_guarded_reads_are_left_to_the_evaluator():
    x = tg.placeholder((5,), dtype="float64", name="x")
    value = np.arange(5.0)
    guarded = tg.compute((5,), lambda i: tg.if_then_else(i < 4, x[i + 1], 0.0), name="g")
    k = tg.reduce_axis((0, 6), name="k")
    masked = tg.compute((), lambda: tg.sum(x[k], axis=k, where=k < 5), name="m")

    def prefix(i):
        t = tg.reduce_axis((0, i + 1), name="t")
        return tg.sum(x[i - t], axis=t)

    triangular = tg.compute((5,), prefix, name="tri")
    for y in (guarded, masked, triangular):
        assert reads_outside(y) == []
        (dx,) = tg.differentiate(y, [x])
        assert tg.testing.check_grad(y, [x], feed={x: value}, head="random", rng=1) < 1e-6
    np.testing.assert_array_equal(tg.evaluate(tg.differentiate(guarded, [x])[0], {x: value}),
                                  [0.0, 1.0, 1.0, 1.0, 1.0])


def test_a_read_outside_behind_a_valid_stage_is_named():
    """The refused read is in an intermediate stage; the message names it, the tensor,
    the index and its reach."""
    x = tg.placeholder((4, 6), dtype="float64", name="x")
    shifted = tg.compute((4, 6), lambda i, j: x[i, j + 1], name="shifted")
    k = tg.reduce_axis((0, 6), name="k")
    total = tg.compute((4,), lambda i: tg.sum(shifted[i, k] * 2.0, axis=k), name="total")
    with pytest.raises(tg.OutOfBoundsError, match=r"stage 'shifted' reads 'x' \(shape \(4, 6\)\) "
                                                   r"at index j \+ 1, which reaches 6 in "
                                                   r"dimension 1"):
        tg.differentiate(total, [x])
    with pytest.raises(tg.OutOfBoundsError):
        tg.evaluate(total, {x: np.zeros((4, 6))})
