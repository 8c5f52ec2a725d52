"""A scatter adding the same along a whole output dimension (``take``'s gradient for a
head of ones: ``dx[idx[i], j] += 1.0``) is computed once without that dimension, then
copied along it (:func:`drop_invariant_scatter_axes`); results equal the evaluator's."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import ops
from tegrad.codegen.lower.product_plans import drop_invariant_scatter_axes
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


@st.composite
def scatters(draw):
    """A random scatter over a 3-d domain ``(i, j, k)`` into a 3-d output: each target
    writes each output dimension at a plain axis, a data-dependent row, or a shifted
    axis; values and guards use a random subset of the axes."""
    n_rows = draw(st.integers(1, 6))
    extents = [draw(st.integers(1, 5)) for _ in range(3)]
    idx = tg.placeholder((extents[0],), dtype="int64", name="idx")
    g = tg.placeholder(tuple(extents), name="g")
    # output dimension d of the extent of the axis it may hold plainly
    out_shape = (n_rows, extents[1], extents[2])
    n_targets = draw(st.integers(1, 3))
    specs = []
    for _ in range(n_targets):
        dims = [draw(st.sampled_from(["row", "plain"])),
                draw(st.sampled_from(["plain", "plain", "shifted"])),
                draw(st.sampled_from(["plain", "plain", "zero"]))]
        uses = draw(st.sets(st.sampled_from("ijk")))
        guarded = draw(st.booleans())
        specs.append((dims, uses, guarded))

    def clamp_row(e):
        return tg.max(tg.min(e, n_rows - 1), 0)

    def index(dims, i, j, k):
        row = clamp_row(idx[i]) if dims[0] == "row" else clamp_row(i)
        second = j if dims[1] == "plain" else (j + 1) % extents[1]
        third = k if dims[2] == "plain" else k * 0
        return (row, second, third)

    def value(uses, i, j, k):
        pick = {"i": i, "j": j, "k": k}
        at = [pick[name] if name in uses else 0 for name in "ijk"]
        return g[at[0], at[1], at[2]] * 0.5 + 1.0

    targets = []
    for dims, uses, guarded in specs:
        targets.append((dims, uses, guarded))
    out = None
    for dims, uses, guarded in targets:
        t = tg.scatter_add(
            out_shape, tuple(extents),
            lambda i, j, k, dims=dims: index(dims, i, j, k),
            lambda i, j, k, uses=uses: value(uses, i, j, k),
            where=(lambda i, j, k: g[i, 0, 0] > -0.5) if guarded else None,
            init=out, name="s")
        out = t
    return [idx, g], out, extents, n_rows


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scatters(), st.integers(1, 2), st.integers(0, 2**31 - 1))
def test_random_scatters_equal_evaluator(program, threads, seed):
    """Compiled scatters, broadcast or not, equal the evaluator bit for bit (each element
    receives the same updates in the same order)."""
    inputs, out, extents, n_rows = program
    f = tg.build(inputs, [out], threads=threads)
    rng = np.random.default_rng(seed)
    feed = [rng.integers(-2, n_rows + 2, (extents[0],)),
            rng.standard_normal(tuple(extents)).astype(np.float32)]
    (got,) = f(*feed)
    want = tg.evaluate(out, dict(zip(inputs, feed)))
    np.testing.assert_array_equal(got, want)
