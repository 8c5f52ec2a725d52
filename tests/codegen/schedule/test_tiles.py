"""Square tiles for nests reading across rows (codegen.schedule.tiles), and the split
pairs ``c * o + i`` that pin both loops (tiling by hand, parallel tiles)."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import ops
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import Block, Buffer, For, Store
from tegrad.ir.expr import Const, Var
from tegrad.codegen.lower.program import lower_program
from tegrad.codegen.schedule import reorder, split
from tegrad.codegen.target import Target
from tegrad.codegen.schedule.common import ScheduleError, independence_problem
from tegrad.codegen.loops.interpret import run


def loops_of(f):
    return {s.var.name: s for s in walk_stmts(f.kernel.body) if type(s) is For}


def check(inputs, outputs, threads=2):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(t.shape).astype(t.dtype) for t in inputs]
    f = tg.build(inputs, outputs, threads=threads)
    for got, want in zip(f(*arrays), tg.evaluate(outputs, dict(zip(inputs, arrays)))):
        np.testing.assert_array_equal(got, want)
    return f


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_transpose_and_its_gradient_run_in_tiles_of_the_vector_lanes(dtype):
    side = Target.host().lanes(dtype)  # the target's vector lanes (16 float32 on AVX-512, 8 on AVX2)
    x = tg.placeholder((256, 384), dtype=dtype, name="x")
    y = ops.transpose(x)
    head = tg.placeholder(y.shape, dtype=dtype, name="head")
    (dx,) = tg.differentiate(ops.sum(ops.multiply(y, head)), [x])
    f = check([x, head], [y, dx])
    loops = loops_of(f)
    assert {"ax0_o", "ax1_o", "ax0_i", "ax1_i"} <= set(loops)
    assert loops["ax0_i"].end.value == loops["ax1_i"].end.value == side
    # a tile row of four lanes (float64 on AVX2) is a tiny loop, unrolled (LLVM's SLP
    # vectoriser packs it); wider ones are vectorised loops
    assert loops["ax1_i"].kind == ("vectorized" if side > 4 else "unrolled")
    assert loops["ax0_o"].kind == "parallel"  # the split pair pins the outer loop (large)
    assert "square tiles" in f.schedule


def test_tiles_shrink_to_divide_and_odd_sizes_stay_plain():
    x = tg.placeholder((40, 24), name="x")
    f = check([x], [ops.transpose(x)])
    assert loops_of(f)["ax0_i"].end.value == 8
    odd = tg.placeholder((30, 17), name="odd")
    f = check([odd], [ops.transpose(odd)])
    assert "ax0_i" not in loops_of(f)


def test_only_reads_across_rows_are_tiled():
    a = tg.placeholder((32, 32), name="a")
    f = check([a], [tg.compute((32, 32), lambda i, j: a[i, j] * 2.0, name="b")])
    assert "square tiles" not in f.schedule
    # A[i, j] + A[j, i]: one of the two reads runs across rows
    f = check([a], [tg.compute((32, 32), lambda i, j: a[i, j] + a[j, i], name="s")])
    assert "square tiles" in f.schedule


def test_a_nest_writing_what_it_reads_across_rows_keeps_its_order():
    # B[i, j] = A[j, i] then C[i, j] = B[j, i] + 1 in one nest would read elements
    # another iteration writes: not tiled unless independent
    a = tg.placeholder((32, 32), name="a")
    b = tg.compute((32, 32), lambda i, j: a[j, i] * 3.0, name="b")
    c = tg.compute((32, 32), lambda i, j: b[j, i] + 1.0, name="c")
    check([a], [c])


@settings(max_examples=25, deadline=None)
@given(st.sampled_from([(0, 1, 2), (0, 2, 1), (1, 0, 2), (2, 1, 0), (1, 2, 0), (2, 0, 1)]),
       st.tuples(*(st.sampled_from([3, 8, 16, 24, 32]) for _ in range(3))),
       st.sampled_from([1, 2]))
def test_random_permutations_equal_the_evaluator(axes, shape, threads):
    x = tg.placeholder(shape, name="x")
    y = ops.transpose(x, axes)
    head = tg.placeholder(y.shape, name="head")
    (dx,) = tg.differentiate(ops.sum(ops.multiply(y, head)), [x])
    check([x, head], [y, dx], threads=threads)


def test_a_split_pair_pins_both_loops():
    Y = Buffer("Y", (8,), "float32", "output")
    i_o, i_i = Var("i_o", "int64"), Var("i_i", "int64")
    store = Store(Y, (i_o * 4 + i_i,), Const(1.0, "float32"))
    inner = For(i_i, Const(0, "int64"), Const(4, "int64"), store)
    outer = For(i_o, Const(0, "int64"), Const(2, "int64"), inner)
    assert independence_problem(inner, ("i_o",), accumulate_ok=False) is None
    assert independence_problem(store, ("i_o", "i_i"), accumulate_ok=False,
                                loops=(outer, inner)) is None
    # an inner loop of 5 values would let two values of i_o meet
    wide = For(i_i, Const(0, "int64"), Const(5, "int64"), store)
    assert independence_problem(wide, ("i_o",), accumulate_ok=False) is not None
    # without the loops' bounds nothing is known of i_i
    assert independence_problem(Block((store,)), ("i_o", "i_i"), accumulate_ok=False)


def test_tiling_by_hand_is_accepted_and_equal():
    x = tg.placeholder((32, 48), dtype="float64", name="x")
    y = ops.transpose(x)
    f = tg.build([x], [y], schedule={y.name: {
        "split": {"ax0": 8, "ax1": 8}, "order": ["ax0_o", "ax1_o", "ax0_i", "ax1_i"],
        "vectorize": "ax1_i", "parallel": "ax0_o"}})
    a = np.random.default_rng(1).standard_normal((32, 48))
    (got,) = f(a)
    np.testing.assert_array_equal(got, a.T)
    kernel = lower_program([x], [y])
    tiled = reorder(split(split(kernel, loop="ax0", factor=8), loop="ax1", factor=8),
                    loops=("ax0_o", "ax1_o", "ax0_i", "ax1_i"))
    (got,), _ = run(tiled, [a])
    np.testing.assert_array_equal(got, a.T)
    # a guarded tail (5 does not divide 32) is not a perfect nest: refused
    with pytest.raises(ScheduleError, match="perfectly nested"):
        reorder(split(split(kernel, loop="ax0", factor=5), loop="ax1", factor=5),
                loops=("ax0_o", "ax1_o", "ax0_i", "ax1_i"))
