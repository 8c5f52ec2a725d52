"""Feeds: one conversion rule for every container, and unambiguous names."""
import numpy as np
import pytest

import tegrad as tg


@pytest.fixture
def ints():
    n = tg.placeholder((2,), dtype="int32", name="counts")
    return n, tg.compute((2,), lambda i: n[i] * 2, name="twice")


@pytest.mark.parametrize("value", [[1.5, 2.7], np.array([1.5, 2.7]), (1.5, 2.0)])
def test_a_fraction_fed_to_an_integer_placeholder_is_refused(ints, value):
    n, y = ints
    with pytest.raises(tg.FeedError, match=r"'counts' is int32.*1\.5.*would become 1"):
        tg.evaluate(y, {n: value})


@pytest.mark.parametrize("value", [[1.0, 2.0], np.array([1.0, 2.0]), np.array([1, 2], "int64"),
                                   [1, 2], np.array([1, 2], "int16")])
def test_exact_values_are_converted_whatever_the_container(ints, value):
    n, y = ints
    assert tg.evaluate(y, {n: value}).tolist() == [2, 4]


def test_out_of_range_and_rounded_values_are_refused(ints):
    n, y = ints
    with pytest.raises(tg.FeedError, match=r"'counts'.*1099511627776"):
        tg.evaluate(y, {n: [2**40, 1]})
    with pytest.raises(tg.FeedError, match=r"'counts'.*bool"):
        tg.evaluate(y, {n: [True, False]})
    f = tg.placeholder((2,), dtype="float32", name="single")
    z = tg.compute((2,), lambda i: f[i] + 1.0, name="z")
    for value in ([0.1, 1.0], np.array([0.1, 1.0])):
        with pytest.raises(tg.FeedError, match=r"'single' is float32.*0\.1"):
            tg.evaluate(z, {f: value})
    with pytest.raises(tg.FeedError, match=r"'single'.*1e\+39.*inf"):
        tg.evaluate(z, {f: [0.5, 1e39]})
    out = tg.evaluate(z, {f: [float("nan"), 0.5]})
    assert np.isnan(out[0]) and out[1] == 1.5


def test_an_ambiguous_name_in_a_feed_is_an_error_naming_both():
    x1 = tg.placeholder((2,), dtype="float64", name="x")
    x2 = tg.placeholder((3,), dtype="float64", name="x")
    d = tg.compute((2,), lambda i: x1[i] - x2[i], name="d")
    with pytest.raises(tg.FeedError, match=r"'x'.*ambiguous.*shape \(2,\).*shape \(3,\)"):
        tg.evaluate(d, {"x": np.ones(2)})
    # keyed by tensor, the same program evaluates
    assert tg.evaluate(d, {x1: np.ones(2), x2: np.zeros(3)}).tolist() == [1.0, 1.0]
