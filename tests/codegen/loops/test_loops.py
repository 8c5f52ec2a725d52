"""The loop IR's printer, mappers and interpreter on hand-built kernels."""
import numpy as np
import pytest

import tegrad as tg
from tegrad.ir.expr import And, Const, Not, Or, Select, Var
from tegrad.codegen.loops.interpret import run
from tegrad.codegen.loops.mapper import (ExprMapper, StmtMapper, loads, substitute_stmt,
                                         walk_stmts)
from tegrad.codegen.loops.nodes import (Accumulate, Allocate, Block, Buffer, Check, For, If,
                                        Kernel, Let, Load, Store)
from tegrad.codegen.loops.printer import format_expr, format_kernel

I64 = "int64"
A = Buffer("A", (6,), "float64", "input")
N = Buffer("N", (6,), "int32", "input")
B = Buffer("B", (3,), "float64", "output")
acc = Buffer("acc", (), "float64", "local")
i, k = Var("i", I64), Var("k", I64)


def c(v):
    return Const(v, I64)


def every_node_kernel():
    """B[i] = max over k in [i, 6) step 2 of A[k] (if N[k] > 0), computed through a local
    accumulator, a let, a check and a guarded store."""
    idx = Var("t", I64)
    body = Allocate(acc, Block((
        Store(acc, (), Const(-np.inf, "float64")),
        For(k, i, c(6), Block((
            Let(idx, k, Block((
                Check(Load(N, (idx,)) >= 0, "index_out_of_range", "N"),
                If(Load(N, (idx,)) > 0, Accumulate(acc, (), Load(A, (idx,)), tg.max)))),
            ),)), step=2),
        Store(B, (i,), Load(acc, ())))))
    return Kernel("k", (A, N, B), (), For(i, c(0), c(3), body, "parallel"))


def test_printer_shows_every_node():
    text = format_kernel(every_node_kernel())
    assert text == """kernel k(float64 A[6], int32 N[6], float64 B[3]) {
  parallel for (i = 0; i < 3; i++) {
    local float64 acc;
    acc = -inf;
    for (k = i; k < 6; k += 2) {
      int64 t = k;
      check(N[t] >= 0, index_out_of_range, 'N');
      if (N[t] > 0) {
        acc max= A[t];
      }
    }
    B[i] = acc;
  }
}"""
    assert str(Load(A, (i + 1,))) == "A[i + 1]" == format_expr(Load(A, (i + 1,)))


def test_interpreter_runs_every_node_and_counts_points():
    a = np.arange(6.0)
    n = np.array([1, 0, 1, 1, 0, 1], dtype="int32")
    (b,), iterations = run(every_node_kernel(), [a, n])
    want = [max(a[j] for j in range(s, 6, 2) if n[j] > 0) for s in range(3)]
    assert b.tolist() == want
    # each let (a single-trip loop) around the accumulation is a point: k visits
    # 3 + 3 + 2 of them; the i loop's body stores B: 3 more
    assert iterations == 8 + 3
    with pytest.raises(tg.OutOfBoundsError, match="'N'"):
        run(every_node_kernel(), [a, np.array([1, -1, 1, 1, 0, 1], dtype="int32")])


def test_interpreter_uses_the_evaluator_semantics():
    out = Buffer("out", (4,), "int64", "output")
    x = Buffer("x", (4,), "int64", "input")
    kernel = Kernel("k", (x, out), (), For(i, c(0), c(4), Store(
        out, (i,), Load(x, (i,)) // c(-3) + Load(x, (i,)) % c(4))))
    (got,), _ = run(kernel, [np.array([7, -7, 2, -1])])
    assert got.tolist() == [v // -3 + v % 4 for v in (7, -7, 2, -1)]
    # a select evaluates only the branch it takes: no out-of-bounds load at i == 3
    f = Buffer("f", (4,), "float64", "output")
    guarded = Kernel("g", (A, f), (), For(i, c(0), c(4), Store(
        f, (i,), Select(i < 3, Load(A, (i * 2 + 1,)), Const(0.0, "float64"), "float64"))))
    (got,), _ = run(guarded, [np.arange(6.0)])
    assert got.tolist() == [1.0, 3.0, 5.0, 0.0]
    # nor do || and && read their right side where the left one decides (a check's guard)
    g = Buffer("g", (4,), "bool", "output")
    decided = Kernel("d", (A, g), (), For(i, c(0), c(4), Store(g, (i,), Or(
        Not(i < 3), And(i < 3, Load(A, (i * 2 + 1,)) > 2.0)))))
    (got,), _ = run(decided, [np.arange(6.0)])
    assert got.tolist() == [False, True, True, True]
    bad = Kernel("b", (A, f), (), For(i, c(0), c(4), Store(f, (i,), Load(A, (i * 2,)))))
    with pytest.raises(tg.OutOfBoundsError):
        run(bad, [np.arange(6.0)])


def test_mappers_keep_unchanged_nodes_and_substitute():
    kernel = every_node_kernel()
    assert StmtMapper()(kernel.body) is kernel.body
    assert ExprMapper()(Load(A, (i,)) + 1.0) is not None
    shifted = substitute_stmt(kernel.body.body, {"i": i + 1})
    stores = [s for s in walk_stmts(shifted) if type(s) is Store and s.buffer == B]
    assert str(stores[0].indices[0]) == "i + 1"
    assert [ld.buffer.name for ld in loads(Load(A, (Load(N, (i,)),)) * 2.0)] == ["A", "N"]


def test_nodes_are_hashable_and_checked():
    assert hash(every_node_kernel()) == hash(every_node_kernel())
    with pytest.raises(ValueError):
        For(i, c(0), c(3), Block(()), kind="sideways")
    with pytest.raises(ValueError):
        Buffer("z", (2,), "float64", "global")
    # an element is named by one index per axis: a buffer of shape (2, 6) indexed as if
    # seen with split axes (2, 3, 2) would drop an index when the address is formed
    z = Buffer("z", (2, 6), "float64", "output")
    j = Var("j", "int64")
    for bad in (lambda: Load(z, (i, j, c(0))), lambda: Store(z, (i,), c(0.0)),
                lambda: Accumulate(z, (i, j, j), c(1.0), tg.sum)):
        with pytest.raises(ValueError, match="indexed with"):
            bad()


def test_free_variables_are_those_no_loop_or_let_binds():
    from tegrad.codegen.loops.mapper import free_variables
    i, j, n = (Var(v, "int64") for v in ("i", "j", "n"))
    out = Buffer("out", (4,), "int64", "output")
    inner = Let(j, i + 1, Store(out, (j,), n))
    assert free_variables(For(i, Const(0, "int64"), n, inner)) == {"n"}
    assert free_variables(inner) == {"i", "n"}
    # a let's value and a loop's bounds are outside their own binding
    assert free_variables(Let(i, i + 1, Store(out, (i,), i))) == {"i"}
