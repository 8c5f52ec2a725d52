"""Expressions 4,000 operations deep and programs of 800 stages through every pass.

Each case is built, evaluated, differentiated (zero elimination included), costed,
compiled and run under Python's default recursion limit, in a thread with a small
stack: a pass that still recursed, in Python or natively, would fail here. Values are
checked against a numpy recurrence, gradients against its finite differences, compiled
code against ``tg.evaluate``.
"""
import os
import sys
import threading

import numpy as np
import pytest

import tegrad as tg

#: operations deep and stages long: three times Python's default recursion limit, which a
#: recursive pass would exceed, in a thread whose stack a native recursion would
#: overflow. ``TEGRAD_DEPTH=10000`` (and ``TEGRAD_STAGES=2000``) runs the longer local
#: check (about 8 minutes)
DEPTH = int(os.environ.get("TEGRAD_DEPTH", "3000"))
STAGES = int(os.environ.get("TEGRAD_STAGES", "800"))
#: a thread stack far smaller than a recursive pass needs at these sizes
STACK_BYTES = 4 << 20
X0 = np.array([0.1, 0.3, 2.5])


def run_small(fn):
    """``fn()`` in a thread with a small stack and the default recursion limit."""
    result, failure = [], []

    def target():
        try:
            result.append(fn())
        except BaseException as err:  # re-raised in the test's thread
            failure.append(err)

    old_limit, old_stack = sys.getrecursionlimit(), threading.stack_size()
    sys.setrecursionlimit(1000)
    threading.stack_size(STACK_BYTES)
    try:
        thread = threading.Thread(target=target)
        thread.start()
    finally:
        threading.stack_size(old_stack)
    thread.join()
    sys.setrecursionlimit(old_limit)
    if failure:
        raise failure[0]
    return result[0]


# --- the deep expressions, and numpy recurrences computing the same values -----------

def chain(v):
    for _ in range(DEPTH):
        v = v * 1.0001 + 0.5
    return v


def selects(x, i):
    # each level a select whose false branch does not continue the chain
    e = x[i]
    for k in range(DEPTH):
        e = tg.if_then_else(x[i] < 2.0, e * 1.0001 + 0.5, x[i] * 0.5 + float(k % 7))
    return e


def selects_np(x):
    e = x.copy()
    for k in range(DEPTH):
        e = np.where(x < 2.0, e * 1.0001 + 0.5, x * 0.5 + float(k % 7))
    return e


def index_chain(i):
    j = i
    for _ in range(DEPTH):
        j = (j * 5 + 1) % 3
    return j


def index_chain_np(n):
    j = np.arange(n)
    for _ in range(DEPTH):
        j = (j * 5 + 1) % 3
    return j


def make(shape):
    """``(x, y, numpy function of x computing y)`` for one deep expression shape."""
    x = tg.placeholder((3,), dtype="float64", name="x")
    if shape == "chain":
        return x, tg.compute((3,), lambda i: chain(x[i]), name="y"), chain
    if shape == "selects":
        return x, tg.compute((3,), lambda i: selects(x, i), name="y"), selects_np
    if shape == "reduction":
        k = tg.reduce_axis((0, 3), name="k")
        y = tg.compute((3,), lambda i: tg.sum(chain(x[k]) * x[i], axis=k), name="y")
        return x, y, lambda v: chain(v).sum() * v
    if shape == "index":
        y = tg.compute((3,), lambda i: x[index_chain(i)] * 2.0, name="y")
        return x, y, lambda v: v[index_chain_np(3)] * 2.0
    raise ValueError(shape)


def finite_difference_gradient(f, x, h=1e-3):
    # central differences: exact up to rounding for the (piecewise) quadratic cases here
    g = np.zeros_like(x)
    for d in range(x.size):
        step = np.zeros_like(x)
        step[d] = h
        g[d] = (f(x + step).sum() - f(x - step).sum()) / (2 * h)
    return g


SHAPES = ["chain", "selects", "reduction", "index"]
#: LLVM itself takes minutes (time growing faster than linearly) over a DEPTH-deep
#: integer index chain: that shape is compiled in benchmarks/depth.py, not here
COMPILED = {"chain", "selects", "reduction"}


def check_every_pass(x, y, reference, flops, *, compiled=True, gradient_compiled=True,
                     differentiated=True):
    """Evaluate ``y`` against ``reference``, (``differentiated``) its zero-eliminated
    gradient against finite differences, its cost, its text, and (``compiled``) its
    compiled code, with the gradient's (``gradient_compiled``), against ``tg.evaluate``."""
    feed = {x: X0}
    value = tg.evaluate(y, feed)
    np.testing.assert_allclose(value, reference(X0), rtol=1e-12)

    gradient_compiled = gradient_compiled and differentiated
    if differentiated:
        grads = tg.differentiate(y, [x])
        (gx,) = tg.evaluate(list(grads), feed)
        np.testing.assert_allclose(gx, finite_difference_gradient(reference, X0),
                                   rtol=1e-6, atol=1e-6)

    assert tg.cost(y).flops >= flops
    assert tg.format(y).count("\n") >= 1

    if compiled:
        outputs = [y, grads] if gradient_compiled else [y]
        results = tg.build([x], outputs)(X0)
        np.testing.assert_allclose(results[0], value, rtol=1e-12)
        if gradient_compiled:
            np.testing.assert_allclose(results[1], gx, rtol=1e-12)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_deep_expression_through_every_pass(shape):
    # the index chain is integer arithmetic: its only float operation is the ``* 2.0``
    flops = 3 if shape == "index" else DEPTH
    run_small(lambda: check_every_pass(*make(shape), flops, compiled=shape in COMPILED))


def test_the_cost_of_a_deep_chain_counts_every_operation():
    def check():
        x = tg.placeholder((3,), dtype="float64", name="x")
        y = tg.compute((3,), lambda i: chain(x[i]), name="y")
        return tg.cost(y).flops
    assert run_small(check) == 2 * DEPTH * 3


def test_a_deep_expression_is_built_again_from_the_cache():
    def check():
        x, y, _ = make("chain")
        first = tg.build([x], [y])
        x2, y2, _ = make("chain")
        second = tg.build([x2], [y2])
        return first._executable is second._executable, second(X0)[0]
    same, out = run_small(check)
    assert same
    np.testing.assert_allclose(out, chain(X0), rtol=1e-12)


# --- programs of many stages -------------------------------------------------------

def chain_program(x):
    """Stage ``k`` reads stages ``k - 1`` and ``k - 2`` (a DAG ``STAGES`` deep)."""
    ts = [x, x]
    for k in range(STAGES):
        a, b = ts[-1], ts[-2]
        ts.append(tg.compute((3,), lambda i, a=a, b=b: a[i] * 0.5 + b[(i + 1) % 3] * 0.25
                             + 0.125, name=f"s{k}"))
    return ts[-1]


def chain_program_np(v):
    ts = [v, v]
    for _ in range(STAGES):
        ts.append(ts[-1] * 0.5 + np.roll(ts[-2], -1) * 0.25 + 0.125)
    return ts[-1]


def wide_program(x):
    """``STAGES`` stages reading ``x``, added up by the output."""
    parts = [tg.compute((3,), lambda i, k=k: x[(i + k) % 3] * (1.0 + k / STAGES), name=f"w{k}")
             for k in range(STAGES)]

    def total(i):
        e = parts[0][i]
        for p in parts[1:]:
            e = e + p[i]
        return e
    return tg.compute((3,), total, name="total")


def wide_program_np(v):
    return sum(np.roll(v, -k) * (1.0 + k / STAGES) for k in range(STAGES))


@pytest.mark.parametrize("program, reference", [(chain_program, chain_program_np),
                                                (wide_program, wide_program_np)],
                         ids=["chain", "wide"])
def test_a_program_of_many_stages_through_every_pass(program, reference):
    def check():
        x = tg.placeholder((3,), dtype="float64", name="x")
        # the wide program's gradient takes minutes in zero elimination (its STAGES
        # contributions to one gradient): the chain differentiates STAGES stages, and
        # compiles them with its gradient's
        check_every_pass(x, program(x), reference, STAGES,
                         differentiated=program is chain_program)
    run_small(check)
