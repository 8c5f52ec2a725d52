"""Equal blocks of a program solve their summation domains once: the solver's results
are remembered by domain, so a second block differing only in its tensors adds no
solver work, and its gradient is still right."""
from hypothesis import given, settings, strategies as st

import tegrad as tg
from tegrad import nn
from tegrad.testing import check_grad
from tegrad.zero_elim import domain


def _block(n, d, k):
    x = tg.placeholder((n, d), dtype="float64", name=f"x{k}")
    w = tg.placeholder((d, d), dtype="float64", name=f"w{k}")
    y = nn.layer_norm(nn.dense(x, w), tg.placeholder((d,), dtype="float64", name=f"g{k}"),
                      tg.placeholder((d,), dtype="float64", name=f"b{k}"))
    r, c = tg.reduce_axis((0, n), name="r"), tg.reduce_axis((0, d), name="c")
    return x, w, tg.compute((), lambda: tg.sum(y[r, c] * y[r, c], axis=[r, c]), name=f"l{k}")


@settings(max_examples=5, deadline=None)
@given(st.integers(2, 6), st.integers(2, 6))
def test_an_equal_block_adds_no_solver_work(n, d):
    x0, w0, loss0 = _block(n, d, 0)
    tg.differentiate(loss0, [x0, w0])
    solved, implied = domain._solved.cache_info(), domain._drop_implied.cache_info()
    x1, w1, loss1 = _block(n, d, 1)
    tg.differentiate(loss1, [x1, w1])
    again, implied_again = domain._solved.cache_info(), domain._drop_implied.cache_info()
    assert again.misses == solved.misses and again.hits > solved.hits
    assert implied_again.misses == implied.misses
    # the remembered solutions give the gradient finite differences give
    assert check_grad(loss1, [x1, w1], rng=n * 7 + d, rtol=1e-5) < 1e-5
