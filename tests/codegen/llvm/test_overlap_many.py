"""Overlap checks of a function with many arguments (checked by loops over the outputs and
the arguments rather than code per pair): every overlap of an output with another
argument is reported by name, the first pair of ``overlap_pairs`` when several overlap,
and arrays that do not overlap pass."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.codegen.llvm.python_entry import UNROLLED_OVERLAP_PAIRS, overlap_pairs

N_IN, N_OUT = 24, 14


@pytest.fixture(scope="module")
def many():
    xs = [tg.placeholder((8,), dtype="float64", name=f"x{k}") for k in range(N_IN)]
    ys = [tg.compute((8,), lambda i, k=k: xs[k][i] * 2.0 + xs[k + 1][i], name=f"y{k}")
          for k in range(N_OUT)]
    f = tg.build(xs, ys, threads=1)
    assert len(overlap_pairs(f.kernel.args)) > UNROLLED_OVERLAP_PAIRS
    return xs, ys, f


def test_many_arguments_without_overlap_equal_the_evaluator(many):
    xs, ys, f = many
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(8) for _ in xs]
    want = tg.evaluate(ys, dict(zip(xs, arrays)))
    for got, w in zip(f(*arrays), want):
        np.testing.assert_array_equal(got, w)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, N_OUT - 1), st.integers(0, N_IN + N_OUT - 1))
def test_any_overlap_of_an_output_is_reported_by_name(many, out_index, other):
    xs, ys, f = many
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal(8) for _ in xs]
    outs = [np.empty(8) for _ in ys]
    if other < N_IN:
        outs[out_index] = arrays[other]
        other_name = xs[other].name
    else:
        if other - N_IN == out_index:
            return
        outs[out_index] = outs[other - N_IN]
        other_name = ys[other - N_IN].name
    with pytest.raises(tg.TegradError, match="overlaps") as err:
        f(*arrays, out=outs)
    assert ys[out_index].name in str(err.value) and other_name in str(err.value)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, N_OUT - 1), st.integers(0, N_IN + N_OUT - 1)),
                min_size=1, max_size=5))
def test_several_overlaps_report_the_first_pair(many, aliases):
    """With several outputs aliased at once, the pair reported is the first of
    ``overlap_pairs`` whose arrays share memory (as a check pair by pair finds it)."""
    xs, ys, f = many
    rng = np.random.default_rng(2)
    arrays = [rng.standard_normal(8) for _ in xs]
    outs = [np.empty(8) for _ in ys]
    for out_index, other in aliases:
        outs[out_index] = arrays[other] if other < N_IN else outs[other - N_IN]
    given_arrays = arrays + outs
    names = [x.name for x in xs] + [y.name for y in ys]
    assert [a.name for a in f.kernel.args] == names
    first = next(((k, m) for k, m in overlap_pairs(f.kernel.args)
                  if np.shares_memory(given_arrays[k], given_arrays[m])), None)
    if first is None:  # each alias was undone by a later one, or an output with itself
        for got, want in zip(f(*arrays, out=outs), tg.evaluate(ys, dict(zip(xs, arrays)))):
            np.testing.assert_array_equal(got, want)
        return
    with pytest.raises(tg.TegradError, match="overlaps") as err:
        f(*arrays, out=outs)
    k, m = first
    assert f"{names[k]!r} overlaps" in str(err.value)
    assert str(err.value).endswith(repr(names[m]))
