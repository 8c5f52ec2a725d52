"""A scatter adding the same along a whole output dimension (``take``'s gradient for a
head of ones: ``dx[idx[i], j] += 1.0``) is computed once without that dimension, then
copied along it (:func:`drop_invariant_scatter_axes`); results equal the evaluator's."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import ops
from tegrad.codegen.kernels.contraction import drop_invariant_scatter_axes
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import Accumulate


def _accumulated_shapes(f):
    return {s.buffer.shape for s in walk_stmts(f.kernel.body) if type(s) is Accumulate}


@pytest.mark.parametrize("mode", ["clip", "wrap"])
@pytest.mark.parametrize("threads", [1, 2])
def test_take_gradient_counts_rows_once(mode, threads):
    x = tg.placeholder((37, 19), name="x")
    idx = tg.placeholder((300,), dtype="int64", name="idx")
    out = ops.take(x, idx, axis=0, mode=mode)
    (dx,) = tg.differentiate(out, [x])
    f = tg.build([x, idx], [out, dx], threads=threads)
    rng = np.random.default_rng(threads)
    feed = [rng.standard_normal(x.shape).astype(np.float32),
            rng.integers(-50, 90, idx.shape)]  # repeated, and outside the rows
    got_out, got_dx = f(*feed)
    want_out, want_dx = tg.evaluate([out, dx], dict(zip([x, idx], feed)))
    np.testing.assert_array_equal(got_out, want_out)
    np.testing.assert_array_equal(got_dx, want_dx)
    # hand-derived: each row's gradient is the number of times it is taken
    rows = np.clip(feed[1], 0, 36) if mode == "clip" else feed[1] % 37
    counts = np.bincount(rows, minlength=37).astype(np.float32)
    np.testing.assert_array_equal(got_dx, np.repeat(counts[:, None], 19, axis=1))
    # the scatter accumulates into a count per row, not into the table
    assert _accumulated_shapes(f) == {(37,)}


def _stage(value, index=lambda i, j, idx: (idx[i], j), init=None, shape=(6, 4)):
    idx = tg.placeholder((9,), dtype="int64", name="idx")
    g = tg.placeholder((9, 4), name="g")
    s = tg.scatter_add(shape, (9, 4), lambda i, j: index(i, j, idx),
                       lambda i, j: value(i, j, g), init=init, name="s")
    return s, idx, g


def test_what_is_dropped():
    s, _, _ = _stage(lambda i, j, g: g[i, 0] * 2.0)
    stage, kept = drop_invariant_scatter_axes(s)
    assert kept == (0,) and stage.shape == (6,)
    assert [ax.name for ax in stage.op.axes] == ["i"]


@pytest.mark.parametrize("case", [
    "value uses the axis", "index shifted", "index in two dimensions", "init",
    "axis shorter than the dimension"])
def test_what_is_kept(case):
    init = tg.placeholder((6, 4), name="init")
    s, _, _ = {
        "value uses the axis": lambda: _stage(lambda i, j, g: g[i, j]),
        "index shifted": lambda: _stage(lambda i, j, g: g[i, 0],
                                        index=lambda i, j, idx: (idx[i], (j + 1) % 4)),
        "index in two dimensions": lambda: _stage(lambda i, j, g: g[i, 0],
                                                  index=lambda i, j, idx: (j + 2, j),
                                                  shape=(6, 4)),
        "init": lambda: _stage(lambda i, j, g: g[i, 0], init=init),
        "axis shorter than the dimension": lambda: _stage(lambda i, j, g: g[i, 0],
                                                          shape=(6, 5)),
    }[case]()
    assert drop_invariant_scatter_axes(s) is None


@pytest.mark.parametrize("threads", [1, 2])
def test_a_users_scatter_with_a_guard(threads):
    """The guard and value use the other axes only: the once-stage keeps them."""
    idx = tg.placeholder((50,), dtype="int64", name="idx")
    g = tg.placeholder((50,), name="g")
    s = tg.scatter_add((8, 3, 16), (50, 16, 3),
                       lambda i, j, k: (tg.max(tg.min(idx[i], 7), 0), k, j),
                       lambda i, j, k: g[i] * 0.5 + tg.cast(k, "float32"),
                       where=lambda i, j, k: g[i] > 0.0, name="s")
    stage, kept = drop_invariant_scatter_axes(s)
    assert kept == (0, 1)
    f = tg.build([idx, g], [s], threads=threads)
    rng = np.random.default_rng(0)
    feed = [rng.integers(-2, 10, (50,)), rng.standard_normal(50).astype(np.float32)]
    (got,) = f(*feed)
    want = tg.evaluate(s, dict(zip([idx, g], feed)))
    np.testing.assert_array_equal(got, want)
