"""A sum of a product and a temporary computed in the sum's memory (the pass
``sum_in_place``, :mod:`tegrad.codegen.lower.sum_in_place`).

Random programs ``R = A B + T`` (a matrix product or a 1-D convolution, ``T`` a
product of its own or an elementwise stage that another output reads first, ``R`` an
output or a temporary read by a later stage, or ``T`` still read after ``R``): compiled
on 1 and 2 threads, each equals ``tg.evaluate``, with non-finite weights too (the
product's fallback loops then add ``T``), and ``T`` keeps no storage of its own only
where nothing reads it after ``R``; at sizes that run as products the pass applies
(and without it ``T`` keeps its buffer); the pass gives the same values as the kernel
it rewrites in the loop interpreter (bit for bit there: it adds a product onto what
its result holds in one addition). (A ResNet block's input gradient, computed so:
tests/test_benchmarks_models.py.)
"""
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import MatrixProduct
from tegrad.codegen.lower.sum_in_place import sums_in_place
from tegrad.codegen import pipeline

from tests.support.compare import same_in_interpreter


def _product(kind, x, w, name, plus=None):
    """``x @ w`` (``kind`` "matmul") or a valid 1-D convolution of ``x`` (N, C, L) by
    ``w`` (F, C, K), plus ``plus`` (a tensor of the result's shape) in the same stage
    when given."""
    add = (lambda value, i: value) if plus is None else (lambda value, i: value + plus[i])
    if kind == "matmul":
        k = tg.reduce_axis((0, x.shape[1]), name=f"{name}_k")
        return tg.compute((x.shape[0], w.shape[1]), lambda i, j: add(
            tg.sum(x[i, k] * w[k, j], axis=k), (i, j)), name=name)
    n, c, length = x.shape
    f, _, kw = w.shape
    rc, rk = tg.reduce_axis((0, c), name=f"{name}_c"), tg.reduce_axis((0, kw), name=f"{name}_r")
    return tg.compute((n, f, length - kw + 1), lambda b, o, t: add(tg.sum(
        x[b, rc, t + rk] * w[o, rc, rk], axis=[rc, rk]), (b, o, t)), name=name)


@st.composite
def programs(draw):
    """``(inputs, outputs, expect_in_place, nonfinite)``: ``R = product + T`` as the
    module doc draws it."""
    kind = draw(st.sampled_from(["matmul", "conv1d"]))
    dtype = draw(st.sampled_from(["float32", "float64"]))
    if kind == "matmul":
        m, k, n = (draw(st.integers(8, 40)) for _ in range(3))
        shapes = {"x": (m, k), "w": (k, n), "x2": (m, k), "w2": (k, n)}
    else:
        b, c, f, kw = (draw(st.integers(1, 4)), draw(st.integers(2, 9)),
                       draw(st.integers(2, 9)), draw(st.integers(1, 4)))
        length = draw(st.integers(kw + 4, 40))
        shapes = {"x": (b, c, length), "w": (f, c, kw), "x2": (b, c, length),
                  "w2": (f, c, kw)}
    ph = {name: tg.placeholder(s, dtype=dtype, name=name) for name, s in shapes.items()}
    # T: a product of its own, or an elementwise stage another output reads too
    t_kind = draw(st.sampled_from(["product", "shared"]))
    if t_kind == "product":
        t = _product(kind, ph["x2"], ph["w2"], "t")
        extra = []
    else:
        q = _product(kind, ph["x2"], ph["w2"], "q")
        t = tg.compute(q.shape, lambda *i: tg.tanh(q[i]) * 0.5, name="t")
        extra = [tg.compute(q.shape, lambda *i: t[i] * 3.0, name="t_reader")]
    r = _product(kind, ph["x"], ph["w"], "r", plus=t)
    r_kind = draw(st.sampled_from(["output", "temp", "t_after"]))
    if r_kind == "output":
        outputs = [r, *extra]
    elif r_kind == "temp":
        outputs = [*extra, tg.compute(r.shape, lambda *i: tg.exp(r[i] * 0.1), name="z")]
    else:  # T read again after R: it must keep its own storage
        outputs = [*extra, tg.compute(r.shape, lambda *i: r[i] * t[i], name="z")]
    nonfinite = draw(st.sampled_from([None, "inf", "nan"]))
    return list(ph.values()), outputs, r_kind != "t_after", nonfinite


def _arrays(inputs, seed, nonfinite):
    rng = np.random.default_rng(seed)
    arrays = [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in inputs]
    if nonfinite:
        # an operand that is not finite: the products' loops run instead
        arrays[1].flat[rng.integers(arrays[1].size)] = float(nonfinite)
    return arrays


@settings(max_examples=30, deadline=None)
@given(programs(), st.integers(0, 2**32 - 1))
def test_a_product_plus_a_temporary_equals_the_evaluator(case, seed):
    inputs, outputs, expect_in_place, nonfinite = case
    arrays = _arrays(inputs, seed, nonfinite)
    want = tg.evaluate(outputs, dict(zip(inputs, arrays)))
    tol = 1e-10 if inputs[0].dtype == "float64" else 2e-4
    for threads in (1, 2):
        f = tg.build(inputs, outputs, threads=threads)
        for got, expected, t in zip(f(*arrays), want, outputs):
            np.testing.assert_allclose(got, expected, rtol=tol, atol=tol, err_msg=t.name)
        temps = {b.name for b in f.kernel.temps}
        onto = _accumulating_into(f.kernel, "r")
        # T is computed in R's memory only when nothing reads it after R
        assert not onto or expect_in_place, f.loops
        if onto:
            assert "t" not in temps, f.loops


def _accumulating_into(kernel, name):
    """Whether a product of ``kernel`` adds onto the buffer computing stage ``name``."""
    return any(type(s) is MatrixProduct and s.spec.accumulate and s.c.name == name
               for s in walk_stmts(kernel.body))


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("kind", ["matmul", "conv1d"])
@pytest.mark.parametrize("r_kind", ["output", "temp"])
def test_a_product_plus_a_product_takes_no_storage_for_the_second(r_kind, kind, threads):
    # sizes that run as products; the pass off, T keeps a buffer of its own
    shapes = {"x": (48, 40), "w": (40, 56)} if kind == "matmul" else \
        {"x": (4, 16, 60), "w": (24, 16, 3)}
    ph = {n: tg.placeholder(s, dtype="float64", name=n)
          for name, s in shapes.items() for n in (name, name + "2")}
    t = _product(kind, ph["x2"], ph["w2"], "t")
    r = _product(kind, ph["x"], ph["w"], "r", plus=t)
    outputs = [r] if r_kind == "output" else \
        [tg.compute(r.shape, lambda *i: tg.exp(r[i] * 0.1), name="z")]
    inputs = list(ph.values())
    arrays = _arrays(inputs, 5, None)
    want = tg.evaluate(outputs, dict(zip(inputs, arrays)))
    f = tg.build(inputs, outputs, threads=threads)
    np.testing.assert_allclose(f(*arrays)[0], want[0], rtol=1e-12, atol=1e-12)
    assert _accumulating_into(f.kernel, "r") and "t" not in {b.name for b in f.kernel.temps}, \
        f.loops
    # the schedule says so; the stage's statements keep its name
    text = str(f.schedule)
    assert "t: computed in r's memory" in text and "r: the product adds onto t" in text, text
    assert "stage t\n" in text
    with mock.patch.object(pipeline, "PASSES", pipeline.PASSES[:-1]):
        kept = pipeline.compile_kernel(inputs, outputs, threads=threads).kernel
    assert "t" in {b.name for b in kept.temps} and not _accumulating_into(kept, "r")


@settings(max_examples=20, deadline=None)
@given(programs(), st.integers(0, 2**32 - 1))
def test_the_pass_keeps_every_value_in_the_interpreter(case, seed):
    inputs, outputs, _, _ = case
    # the kernel the pass is given: every pass before it
    assert pipeline.PASSES[-1][0] == "sum_in_place"
    with mock.patch.object(pipeline, "PASSES", pipeline.PASSES[:-1]):
        kernel = pipeline.compile_kernel(inputs, outputs, threads=1).kernel
    # (the interpreter adds a product onto what C holds in one addition: the same bits)
    same_in_interpreter(kernel, sums_in_place, seed)
