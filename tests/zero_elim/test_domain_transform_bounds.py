"""A change of variables the solver offers with entries too large for the index dtype
is not taken: the term keeps its own axes.

Found by the compiled random programs: a max-abs reduction over a residue class
(``(k + 2*i) % 3 == 0``) of reads at ``(k*2 + 2) % 35`` and ``(k + 2) // 3 % 35``, whose
gradient's terms the solver re-parametrised with coefficients of about 2.6e9;
differentiating raised "the integer 2587571088 does not fit the dtype int32".
"""
import numpy as np

import tegrad as tg
from tegrad.zero_elim.domain import MAX_TRANSFORM_ENTRY, _small
from tegrad import solver

ABSMAX = tg.comm_reducer(lambda a, b: tg.max(tg.abs(a), tg.abs(b)), lambda dtype: 0.0,
                         name="absmax")


def program():
    x = tg.placeholder((35, 51), dtype="float64", name="x")
    k = tg.reduce_axis((0, 6), name="k")
    l_ = tg.reduce_axis((0, 2), name="l")

    def body(i, j):
        a = x[(k * 2 + 2) % 35, (k * -2 + 2) % 51]
        b = tg.if_then_else(tg.all(i * 4 - 1 >= 0, i * 4 - 1 < 51),
                            x[(k + 2) // 3 % 35, i * 4 - 1], 0.0)
        c = tg.if_then_else(tg.all(k + i * 3 - 1 >= 0, k + i * 3 - 1 < 35),
                            x[k + i * 3 - 1, l_ // 2], 0.0)
        p = a * b * c
        return ABSMAX(tg.if_then_else(i % 2 == 0, p, p * 2.0), axis=[k, l_],
                      where=(k + i * 2) % 3 == 0, init=x[0, 0])
    return x, tg.compute((41, 47), body, name="s0")


def test_the_gradient_differentiates_compiles_and_equals_the_evaluator():
    x, s0 = program()
    head = tg.placeholder(s0.shape, dtype="float64", name="head")
    (dx,) = tg.differentiate(s0, [x], head=head)
    rng = np.random.default_rng(2160)
    feed = {x: rng.standard_normal(x.shape), head: rng.standard_normal(s0.shape)}
    want = tg.evaluate([s0, dx], feed)
    (naive,) = tg.differentiate(s0, [x], head=head, optimize=False)
    np.testing.assert_allclose(want[1], tg.evaluate(naive, feed), rtol=1e-12, atol=1e-12)
    got = tg.build([x, head], [s0, dx], check_bounds=True)(feed[x], feed[head])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)


def test_small_bounds_every_entry_divisions_included():
    i = solver.Affine.var("i")
    big = MAX_TRANSFORM_ENTRY + 1
    assert _small(i * 3 + 2) and _small(i * MAX_TRANSFORM_ENTRY)
    assert not _small(i * big)
    assert not _small(i + big)
    assert _small((i * 3 + 1) // 4 + i)
    assert not _small((i * big) // 4 + i)
    assert not _small(i // big)
