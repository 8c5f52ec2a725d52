"""Sizes: one shape rule for every tensor kind, and the evaluator's memory limit."""
import numpy as np
import pytest

import tegrad as tg
from tegrad.reference import memory


@pytest.mark.parametrize("shape", [(10**30,), (2**31,), (4, 2**31 + 1)])
def test_one_shape_rule_for_every_tensor_kind(shape):
    with pytest.raises(tg.ShapeError, match=r"'P'.*2147483647"):
        tg.placeholder(shape, name="P")
    with pytest.raises(tg.ShapeError, match=r"'H'.*2147483647"):
        tg.compute(shape, lambda *i: 0.0, name="H")
    with pytest.raises(tg.ShapeError, match=r"'S'.*2147483647"):
        tg.scatter_add((3,), shape, lambda *i: (0,), lambda *i: 1.0, name="S")


def test_too_many_elements_and_too_long_reduce_axes_are_shape_errors():
    with pytest.raises(tg.ShapeError, match=r"'Q'.*elements"):
        tg.placeholder((2**31 - 1,) * 3, name="Q")
    with pytest.raises(tg.ShapeError, match=r"'kk'.*int32"):
        tg.reduce_axis((0, 2**32), name="kk")
    assert tg.placeholder((2**31 - 1,), name="edge").shape == (2**31 - 1,)


def test_a_stage_too_large_for_the_available_memory_is_refused_up_front():
    big = tg.compute((10**6, 10**6), lambda i, j: tg.cast(i + j, "float32"), name="huge")
    with pytest.raises(tg.TegradError, match=r"'huge'.*\(1000000, 1000000\).*TB.*memory limit"):
        tg.evaluate(big, {})


def test_a_long_reduction_is_refused_with_its_stage_named():
    k = tg.reduce_axis((0, 2 * 10**9), name="k")
    s = tg.compute((), lambda: tg.sum(tg.cast(k, "float64"), axis=k), name="long_sum")
    with pytest.raises(tg.TegradError, match=r"'long_sum'.*2000000000 points.*memory limit"):
        tg.evaluate(s, {}, memory_limit=2**34)
    # a bound known only from data is checked when the reduction is reached
    n = tg.placeholder((), dtype="int32", name="n")
    k2 = tg.reduce_axis((0, n[()]), name="k2")
    s2 = tg.compute((), lambda: tg.sum(tg.cast(k2, "float64"), axis=k2), name="data_sum")
    with pytest.raises(tg.TegradError, match=r"'data_sum'.*1000000 points"):
        tg.evaluate(s2, {n: 10**6}, memory_limit=10**6)
    assert tg.evaluate(s2, {n: 10}, memory_limit=10**6) == 45.0


def test_the_memory_limit_is_settable_and_defaults_to_a_fraction_of_available(monkeypatch):
    x = tg.placeholder((2000, 1000), dtype="float64", name="x")
    y = tg.compute((2000, 1000), lambda i, j: x[i, j] + 1.0, name="y")
    feed = {x: np.zeros((2000, 1000))}
    monkeypatch.setattr(memory, "available_memory", lambda: 10**7)
    assert memory.memory_limit() == int(10**7 * memory.DEFAULT_FRACTION)
    with pytest.raises(tg.TegradError, match=r"'y'.*\(2000, 1000\).*16\.0 MB"):
        tg.evaluate(y, feed)
    previous = tg.set_memory_limit(10**9)
    try:
        assert tg.evaluate(y, feed).sum() == 2 * 10**6
    finally:
        tg.set_memory_limit(previous)
    assert tg.evaluate(y, feed, memory_limit=10**9).shape == (2000, 1000)
    with pytest.raises(tg.TegradError, match="memory_limit"):
        tg.evaluate(y, feed, memory_limit=-1)
    with pytest.raises(tg.TegradError, match="set_memory_limit"):
        tg.set_memory_limit("lots")
