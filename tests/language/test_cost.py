"""The cost model counts points in closed form: exact at any size."""
import itertools

import numpy as np
import pytest

import tegrad as tg
from tegrad.analysis.cost import stage_cost


def brute_force_points(extents, inside):
    return sum(1 for p in itertools.product(*(range(n) for n in extents)) if inside(*p))


def test_a_trillion_point_stage_is_counted_exactly():
    n = 10**6
    x = tg.placeholder((n,), name="x")
    k = tg.reduce_axis((0, n), name="k")
    y = tg.compute((n,), lambda i: tg.sum(x[k] * x[i], axis=k), name="y")
    c = tg.cost(y)
    assert c.iterations == n + n * n
    assert c.flops == n * n * 2


def test_triangular_reduction_under_a_select_and_where():
    x = tg.placeholder((7, 7), dtype="float64", name="x")
    k = tg.reduce_axis((0, 7), name="k")
    y = tg.compute((7, 7), lambda i, j: tg.if_then_else(
        i >= 2, tg.sum(x[i, k], axis=k, where=tg.all(k <= i, k != j)), 0.0), name="y")
    # k != j is not affine (a disjunction): its points are tested inside the loop
    expected = brute_force_points((7, 7, 7), lambda i, j, k: i >= 2 and k <= i)
    c = stage_cost(y)
    assert c.iterations == 49 + expected
    assert c.flops == expected


def test_min_max_bounds_count_like_the_loops_they_describe():
    x = tg.placeholder((10,), dtype="float64", name="x")

    def window(i):
        lo, hi = tg.max(i - 2, 0), tg.min(i + 3, 10)
        r = tg.reduce_axis((lo, hi), name="r")
        return tg.sum(x[r], axis=r)

    y = tg.compute((10,), window, name="y")
    expected = brute_force_points((10, 10), lambda i, r: max(i - 2, 0) <= r < min(i + 3, 10))
    assert stage_cost(y).iterations == 10 + expected


def test_a_scatter_counts_the_union_of_its_targets_conditions():
    g = tg.placeholder((8,), dtype="float64", name="g")
    h = tg.scatter_add((8,), (8,), lambda i: (i,), lambda i: g[i], where=lambda i: i < 3,
                       name="h")
    from tegrad.ir.tensor import ScatterTarget, scatter_stage
    i = h.op.axes[0].var
    targets = [h.op.targets[0], ScatterTarget((i,), g[i], tg.all(i >= 2, i < 5))]
    both = scatter_stage("h2", (8,), h.op.axes, targets)
    assert stage_cost(h).iterations == 3
    assert stage_cost(both).iterations == 5
    assert stage_cost(both).flops == 3 + 3


def test_cost_matches_a_loop_count_on_a_gradient():
    A = tg.placeholder((5, 6), dtype="float64", name="A")
    k = tg.reduce_axis((0, 6), name="k")
    C = tg.compute((5,), lambda i: tg.sum(A[i, k] * A[i, k], axis=k), name="C")
    res = tg.differentiate(C, [A])
    assert tg.cost(res[0]).iterations == 30
    assert np.allclose(tg.evaluate(res[0], {A: np.ones((5, 6))}), 2.0)


def test_a_bound_that_is_not_affine_is_named():
    x = tg.placeholder((4,), dtype="float64", name="x")

    def body(i):
        r = tg.reduce_axis((0, i * i), name="r")
        return tg.sum(x[r % 4], axis=r)

    y = tg.compute((4,), body, name="y")
    with pytest.raises(tg.TegradError, match="'y'.*'r'"):
        tg.cost(y)
    # zero elimination does not need the count of such a stage
    (dx,) = tg.differentiate(y, [x])
    assert np.allclose(tg.evaluate(dx, {x: np.ones(4)}), [5.0, 3.0, 3.0, 3.0])


def _reduction_points(body):
    x = tg.placeholder((6, 6), dtype="float64", name="x")
    y = tg.compute((6,), lambda i: body(x, i), name="y")
    return stage_cost(y).iterations - 6


def test_a_reduction_is_counted_where_the_conditions_around_it_hold():
    def red(x, i, name):
        k = tg.reduce_axis((0, 6), name=name)
        return tg.sum(x[i, k], axis=k)

    every = brute_force_points((6, 6), lambda i, k: True)
    # a select's false branch under the negated condition, of a conjunction too
    assert _reduction_points(lambda x, i: tg.if_then_else(i >= 2, 0.0, red(x, i, "k"))) == \
        brute_force_points((6, 6), lambda i, k: i < 2)
    assert _reduction_points(lambda x, i: tg.if_then_else(
        tg.all(i >= 1, i <= 3), 0.0, red(x, i, "k"))) == \
        brute_force_points((6, 6), lambda i, k: not 1 <= i <= 3)
    # != and % are exact (a disjunction of two inequalities)
    assert _reduction_points(lambda x, i: tg.if_then_else(
        i % 3 != 1, red(x, i, "k"), 0.0)) == brute_force_points((6, 6), lambda i, k: i % 3 != 1)
    # the right operand of && runs where the left holds, of || where it does not
    assert _reduction_points(lambda x, i: tg.cast(tg.all(
        i < 2, red(x, i, "k") > 0.0), "float64")) == brute_force_points(
            (6, 6), lambda i, k: i < 2)
    assert _reduction_points(lambda x, i: tg.cast(tg.any(
        i < 2, red(x, i, "k") > 0.0), "float64")) == brute_force_points(
            (6, 6), lambda i, k: i >= 2)
    # a condition on data may hold anywhere: counted as if it held
    assert _reduction_points(lambda x, i: tg.if_then_else(
        x[i, 0] > 0.0, red(x, i, "k"), 0.0)) == every


def test_reductions_in_where_init_and_under_a_where_on_data_are_counted():
    x = tg.placeholder((5, 5), dtype="float64", name="x")

    def body(i):
        k = tg.reduce_axis((0, 5), name="k")
        m = tg.reduce_axis((0, 5), name="m")
        n = tg.reduce_axis((0, 5), name="n")
        inner = tg.sum(x[k, m], axis=m)  # inside the source: under where
        return tg.sum(inner, axis=k, where=tg.all(k <= i, k != 2),
                      init=tg.sum(x[i, n], axis=n))

    y = tg.compute((5,), body, name="y")
    outer = brute_force_points((5, 5), lambda i, k: k <= i)  # k != 2 tested inside
    source = 5 * brute_force_points((5, 5), lambda i, k: k <= i and k != 2)
    init = 5 * 5
    assert stage_cost(y).iterations == 5 + outer + source + init
