"""Fixtures for the operator tests: seeded random data and placeholders made from arrays."""
import numpy as np
import pytest

import tegrad as tg


@pytest.fixture
def rng():
    return np.random.default_rng(20240611)


@pytest.fixture
def ph():
    """``ph(array, name)``: a placeholder with the array's shape and dtype."""
    def make(array, name="x"):
        return tg.placeholder(np.shape(array), dtype=np.asarray(array).dtype.name, name=name)
    return make


@pytest.fixture
def run(ph):
    """``run(build, *arrays)``: build the operator on placeholders of the arrays, evaluate.

    The placeholders are named x, y, z, w in order.
    """
    def evaluate(build, *arrays):
        tensors = [ph(a, name) for a, name in zip(arrays, "xyzw")]
        out = build(*tensors)
        feed = {t: np.asarray(a) for t, a in zip(tensors, arrays)}
        return tg.evaluate(out, feed)
    return evaluate
