"""A scatter built by zero elimination renames a domain axis that a reduction inside its
values also uses (a second derivative sums again over the forward's reduction axis)."""
import numpy as np

import tegrad as tg

F64 = "float64"


def test_second_derivative_through_a_custom_reducer_with_an_init():
    lse = tg.comm_reducer(lambda a, b: tg.log(tg.exp(a) + tg.exp(b)),
                          lambda d: tg.min_value(d), name="logsumexp")
    x = tg.placeholder((4, 2), dtype=F64, name="x")
    k0 = tg.reduce_axis((0, 3), name="k0")
    s0 = tg.compute(
        (1, 4), lambda i, j: lse(
            tg.exp(x[i // 2, j // 3] * x[j, i * 4] * x[j // 4, (j * 2 + k0 + 2) % 2] * 0.1),
            axis=k0, init=tg.if_then_else(tg.all(2 * j - 1 >= 0, 2 * j - 1 < 4),
                                          x[2 * j - 1, j // 2], 0.0) * 0.5),
        name="s0")
    k1 = tg.reduce_axis((0, 3), name="k1")
    s1 = tg.compute((2, 3), lambda i, j: tg.sum(s0[0, k1], axis=k1), name="s1")
    head = tg.placeholder(x.shape, dtype=F64, name="head")
    (dx,) = tg.differentiate(s1, [x])
    second = tg.differentiate(dx, [x], head=head)
    naive = tg.differentiate(tg.differentiate(s1, [x], optimize=False)[0], [x], head=head,
                             optimize=False)
    rng = np.random.default_rng(3)
    feeds = {x: rng.uniform(-1, 1, x.shape), head: rng.uniform(-1, 1, x.shape)}
    got = tg.evaluate(second[0], feeds)
    np.testing.assert_allclose(got, tg.evaluate(naive[0], feeds), rtol=1e-10, atol=1e-12)
    compiled = tg.build(list(feeds), [second[0]])(*feeds.values())[0]
    np.testing.assert_allclose(compiled, got, rtol=1e-10, atol=1e-12)
