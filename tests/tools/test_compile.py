"""compile_program (tegrad.build for the tools) computes what tg.evaluate computes."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import nn
from tegrad.tools.compile import compile_program


def test_outputs_and_gradients_match_the_evaluator():
    rng = np.random.default_rng(0)
    x = tg.placeholder((4, 3), dtype="float64", name="x")
    w = tg.placeholder((2, 3), dtype="float64", name="w")
    y = nn.dense(x, w)
    res = tg.differentiate(y, [x, w])
    xv, wv = rng.standard_normal((4, 3)), rng.standard_normal((2, 3))
    f = compile_program([x, w], [y, *res])
    got = f(xv, wv)
    want = tg.evaluate([y, *res], {x: xv, w: wv})
    assert len(got) == 3
    for g, e in zip(got, want):
        np.testing.assert_allclose(g, e, rtol=1e-12)
    g = compile_program([x, w], res)  # a differentiate() result as the outputs
    np.testing.assert_allclose(g(xv, wv)[1], want[2], rtol=1e-12)


def test_out_buffers_are_written():
    x = tg.placeholder((3,), dtype="float64", name="x")
    y = tg.compute((3,), lambda i: x[i] + 1.0, name="y")
    buf = np.zeros(3)
    result = compile_program([x], [y])(np.arange(3.0), out=[buf])
    assert result[0] is buf
    assert buf.tolist() == [1.0, 2.0, 3.0]


def test_wrong_number_of_arrays_is_a_tegrad_error():
    x = tg.placeholder((3,), dtype="float64", name="x")
    y = tg.compute((3,), lambda i: x[i] + 1.0, name="y")
    with pytest.raises(tg.TegradError):
        compile_program([x], [y])()

