"""A compiled function converts its arguments by the rule tg.evaluate converts its feeds
(tegrad.reference.evaluator.feed_array): value-exact conversions pass, others are errors
naming the input, and both give the same answer on the same values."""
import numpy as np
import pytest

import tegrad as tg


@pytest.fixture(scope="module")
def program():
    x = tg.placeholder((4,), name="x")
    labels = tg.placeholder((4,), dtype="int32", name="labels")
    y = tg.compute((4,), lambda i: x[i] * tg.cast(labels[i], "float32"), name="y")
    return x, labels, y, tg.build([x, labels], [y])


def test_int64_labels_and_exact_float64_values_are_fed(program):
    x, labels, y, f = program
    xv = np.array([0.5, 1.0, -2.0, 3.25])             # float64, each exactly a float32
    lv = np.array([0, 3, 9, 2], dtype=np.int64)
    (got,) = f(xv, lv)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, xv * lv)
    np.testing.assert_array_equal(got, tg.evaluate(y, {x: xv, labels: lv}))


@pytest.mark.parametrize("lv, words", [
    (np.array([0, 2.5, 1, 1]), "'labels'.*2.5"),
    (np.array([0, 2**40, 1, 1], dtype=np.int64), "'labels'.*1099511627776"),
    (np.array([True, False, True, True]), "'labels'.*bool"),
])
def test_inexact_values_are_refused_as_by_evaluate(program, lv, words):
    x, labels, y, f = program
    xv = np.ones(4, dtype=np.float32)
    with pytest.raises(tg.FeedError, match=words):
        f(xv, lv)
    with pytest.raises(tg.FeedError, match=words):
        tg.evaluate(y, {x: xv, labels: lv})


def test_a_float64_value_float32_rounds_is_refused(program):
    x, labels, y, f = program
    with pytest.raises(tg.FeedError, match="'x'.*0.1"):
        f(np.array([0.1, 1, 1, 1]), np.zeros(4, dtype=np.int32))


def test_a_converted_argument_of_the_wrong_shape_names_the_input(program):
    f = program[3]
    with pytest.raises(tg.ShapeError, match="'labels'"):
        f(np.ones(4, dtype=np.float32), np.zeros(5, dtype=np.int64))
