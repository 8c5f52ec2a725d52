"""Overlapping scatter windows run outside their loops (``schedule/windows.py``) and
guarded accumulations become selects (``schedule/ifconvert.py``): each element still
receives the same updates in the same order, so compiled results equal the evaluator's
bit for bit."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import nn, ops
from tegrad.codegen.loops.interpret import run
from tegrad.codegen.loops.mapper import walk_stmts
from tegrad.codegen.loops.nodes import (Accumulate, Allocate, Block, Buffer, For, If, Kernel,
                                        Let, Load, Store)
from tegrad.codegen.loops.printer import format_stmt
from tegrad.codegen.lower.program import lower_program
from tegrad.codegen.schedule.auto import auto_schedule
from tegrad.codegen.schedule.ifconvert import if_convert
from tegrad.codegen.schedule.windows import hoist_scatter_windows
from tegrad.codegen.target import Target
from tegrad.ir.expr import Compare, Const, Var

I64 = "int64"


def _c(v):
    return Const(v, I64)


def _loop(var, n, body, kind="serial"):
    return For(var, _c(0), _c(n), body, kind)


def _assert_identical(got, want):
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def _dilated_pool(dtype, shape=(2, 3, 13, 14)):
    x = tg.placeholder(shape, dtype=dtype, name="x")
    y = nn.max_pool2d(x, 3, stride=1, dilation=2)
    head = tg.placeholder(y.shape, dtype=dtype, name="head")
    (dx,) = tg.differentiate(ops.sum(ops.multiply(y, head)), [x])
    return x, head, y, dx


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("threads", [1, 2])
def test_dilated_max_pool_gradient_equals_evaluator_bit_for_bit(dtype, threads):
    x, head, y, dx = _dilated_pool(dtype)
    rng = np.random.default_rng(0)
    # few distinct values: many ties, so several updates meet in one element
    a = rng.integers(-2, 3, x.shape).astype(dtype) * 0.5
    a[0, 0, 3, :] = -0.0
    h = rng.standard_normal(head.shape).astype(dtype) * 1e3
    h[0, 1] = np.float32(1e-7)
    f = tg.build([x, head], [y, dx], threads=threads)
    assert "inside its scatter's window" in f.schedule
    (got_y, got_dx), (want_y, want_dx) = f(a, h), tg.evaluate([y, dx], {x: a, head: h})
    # the sign of a maximum of -0.0 and 0.0 follows numpy's reduction order, not a rule
    np.testing.assert_array_equal(got_y, want_y)
    _assert_identical(got_dx, want_dx)


def test_the_window_runs_outside_both_overlapping_loops_and_its_share_is_computed_once():
    x, head, y, dx = _dilated_pool("float64")
    kernel, record = auto_schedule(lower_program([x, head], [y, dx]), lanes_of=Target.host().lanes)
    notes = [n for ns in record.notes.values() for n in ns]
    assert any("inside its scatter's window" in n for n in notes)
    scatter = [s for s in walk_stmts(kernel.body) if type(s) is Accumulate
               and s.buffer.name == "dx"]
    (acc,) = scatter
    # the taps enclose the loops over rows and columns of the pooled output
    taps = [s for s in walk_stmts(kernel.body) if type(s) is For and s.kind == "unrolled"
            and any(n is acc for n in walk_stmts(s.body))]
    assert len(taps) == 2
    inner = [s for s in walk_stmts(taps[-1].body) if type(s) is For]
    assert len(inner) == 2 and inner[-1].kind == "vectorized"
    # the share head / ties is stored once per output element, not divided per tap
    assert "/" not in format_stmt(acc)
    rows = [s.buffer for s in walk_stmts(kernel.body) if type(s) is Allocate
            and s.buffer.name.startswith("dx_row")]
    assert rows and rows[0].shape == y.shape[2:]


def _scatter(index, taps=(3,), n=8, size=24):
    """for v < n: for t.. (unrolled): D[index(v, t..)] += G[v]"""
    G = Buffer("G", (n,), "float64", "input")
    D = Buffer("D", (size,), "float64", "output")
    v, z = Var("v", I64), Var("z", I64)
    ts = [Var(f"t{k}", I64) for k in range(len(taps))]
    body = Accumulate(D, (index(v, *ts),), Load(G, (v,)), tg.sum)
    for t, m in reversed(list(zip(ts, taps))):
        body = _loop(t, m, body, "unrolled")
    init = _loop(z, size, Store(D, (z,), Const(0.0, "float64")))
    return Kernel("k", (G, D), (), Block((init, _loop(v, n, body)))), G, D


def _run_plain_and_hoisted(kernel, g):
    hoisted = Kernel(kernel.name, kernel.args, kernel.temps,
                     hoist_scatter_windows(kernel.body, taken=set()))
    return run(kernel, [g])[0][0], run(hoisted, [g])[0][0], hoisted


def test_hoisted_updates_reach_each_element_in_the_original_order():
    # values whose sum depends on the order of additions
    g = np.array([1e16, 1.0, -1e16, 3.0, 1e-3, -1.0, 2.5e15, 7.0])
    kernel, _, _ = _scatter(lambda v, t: v + t * 2)
    plain, hoisted, k = _run_plain_and_hoisted(kernel, g)
    assert k.body != kernel.body
    assert any(type(s) is For and s.var.name == "t0" and s.kind == "unrolled"
               and type(s.body) is For and s.body.var.name == "v" for s in walk_stmts(k.body))
    _assert_identical(hoisted, plain)


def test_a_part_of_the_update_through_a_let_of_the_window_stays_in_the_window():
    G = Buffer("G", (8,), "float64", "input")
    D = Buffer("D", (12,), "float64", "output")
    v, t, z, q = Var("v", I64), Var("t", I64), Var("z", I64), Var("q", "float64")
    leaf = Let(q, Load(G, (v,)) * Const(2.0, "float64"),
               Accumulate(D, (v + t * 2,), Const(1.0, "float64") / (q + Load(G, (v,))),
                          tg.sum))
    body = Block((_loop(z, 12, Store(D, (z,), Const(0.0, "float64"))),
                  _loop(v, 8, _loop(t, 3, leaf, "unrolled"))))
    kernel = Kernel("k", (G, D), (), body)
    g = np.random.default_rng(3).standard_normal(8)
    plain, hoisted, k = _run_plain_and_hoisted(kernel, g)
    assert k.body != kernel.body
    _assert_identical(hoisted, plain)


def test_a_window_with_no_order_keeping_directions_stays_inside():
    # D[v + 2 t0 + t1]: (t0, t1) = (1, 0) must come before (0, 1) and after (0, 2)
    kernel, _, _ = _scatter(lambda v, a, b: v + a * 2 + b, taps=(3, 3))
    assert hoist_scatter_windows(kernel.body, taken=set()) is kernel.body


def test_windows_that_do_not_overlap_stay_inside():
    kernel, _, _ = _scatter(lambda v, t: v * 3 + t, size=24)
    assert hoist_scatter_windows(kernel.body, taken=set()) is kernel.body


def _guarded(index_of_value, n=6):
    A = Buffer("A", (n,), "float64", "input")
    S = Buffer("S", (), "float64", "output")
    i = Var("i", I64)
    cond = Compare("gt", Load(A, (i,)), Const(0.0, "float64"))
    body = If(cond, Accumulate(S, (), Load(A, (index_of_value(i),)), tg.sum))
    return _loop(i, n, body)


def test_an_update_loading_inside_its_buffer_is_selected_from_a_let():
    s = if_convert(_guarded(lambda i: 5 - i))
    lets = [m for m in walk_stmts(s) if type(m) is Let]
    assert lets and not any(type(m) is If for m in walk_stmts(s))
    assert "?" in format_stmt(s)


def test_an_update_that_may_load_outside_its_buffer_keeps_its_guard():
    s = if_convert(_guarded(lambda i: i + 1))
    assert any(type(m) is If for m in walk_stmts(s))
