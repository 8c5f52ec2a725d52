"""Values a loop stored are loaded back where a later loop computes them again
(``schedule/stored.py``): the result is bit-identical, and nothing is read back that a
write in between could have changed, that another iteration overwrote, or that was
stored only under a condition."""
import numpy as np
import pytest

import tegrad as tg
from tegrad import nn, ops
from tegrad.codegen.loops.interpret import run
from tegrad.codegen.loops.mapper import walk_expr, walk_stmts
from tegrad.codegen.loops.nodes import Block, Buffer, For, If, Kernel, Load, Store
from tegrad.codegen.schedule.steps import Schedule
from tegrad.codegen.schedule.stored import reuse_stored_values
from tegrad.ir.expr import Call, Compare, Const, Var

I64 = "int64"
X = Buffer("X", (8,), "float32", "input")
Y = Buffer("Y", (8,), "float32", "output")
D = Buffer("D", (8,), "float32", "output")
i, j = Var("i", I64), Var("j", I64)


def _c(v):
    return Const(v, I64)


def _loop(var, body, begin=0, end=8):
    return For(var, _c(begin), _c(end), body)


def _exp(v, buf=X):
    return Call("exp", (Load(buf, (v,), "float32"),), "float32")


def _calls(s):
    return sum(type(e) is Call for n in walk_stmts(s) if type(n) is Store
               for e in walk_expr(n.value))


def test_a_later_loop_loads_the_stored_value_and_computes_the_same():
    s = Block((_loop(i, Store(Y, (i,), _exp(i))), _loop(j, Store(D, (j,), _exp(j) * 2.0))))
    out = reuse_stored_values(s)
    assert _calls(s) == 2 and _calls(out) == 1
    assert any(type(e) is Load and e.buffer is Y for n in walk_stmts(out.stmts[1])
               if type(n) is Store for e in walk_expr(n.value))


@pytest.mark.parametrize("case", ["input written between", "output written between",
                                  "other bounds", "one element for all", "conditional",
                                  "reads what its loop writes"])
def test_values_that_may_differ_are_computed_again(case):
    first = _loop(i, Store(Y, (i,), _exp(i)))
    second = _loop(j, Store(D, (j,), _exp(j) * 2.0))
    between = []
    if case == "input written between":
        # X is an input here only by name: the kernel writes it, so E(j) changed
        between = [_loop(i, Store(X, (i,), Load(X, (i,), "float32") + 1.0))]
    elif case == "output written between":
        between = [Store(Y, (_c(3),), Const(0.0, "float32"))]
    elif case == "other bounds":
        second = _loop(j, Store(D, (j,), _exp(j) * 2.0), 0, 7)
    elif case == "one element for all":
        first = _loop(i, Store(Y, (_c(0),), _exp(i)))
    elif case == "conditional":
        first = _loop(i, If(Compare("lt", i, _c(4)), Store(Y, (i,), _exp(i))))
    elif case == "reads what its loop writes":
        first = _loop(i, Block((Store(Y, (i,), _exp(i, D)), Store(D, (i,), Const(1.0, "float32")))))
        second = _loop(j, Store(D, (j,), _exp(j, D) * 2.0))
    s = Block(tuple([first] + between + [second]))
    assert reuse_stored_values(s) == s


def test_nested_loops_map_each_variable():
    A = Buffer("A", (4, 8), "float32", "input")
    B = Buffer("B", (4, 8), "float32", "output")
    C = Buffer("C", (4,), "float32", "output")
    r, q = Var("r", I64), Var("q", I64)
    val = lambda a, b: Call("tanh", (Load(A, (a, b), "float32"),), "float32")
    first = For(r, _c(0), _c(4), _loop(i, Store(B, (r, i), val(r, i))))
    # the second nest sums over the rows, so its loops come in the other order
    second = _loop(j, For(q, _c(0), _c(4), Store(C, (q,), Load(C, (q,), "float32")
                                                  + val(q, j))))
    out = reuse_stored_values(Block((first, second)))
    assert _calls(out) == 1
    a = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    got, _ = run(Kernel("k", (A, B, C), (), out), [a])
    want, _ = run(Kernel("k", (A, B, C), (), Block((first, second))), [a])
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("op", ["softmax", "log_softmax", "sigmoid_tanh"])
def test_gradients_read_the_forward_bit_for_bit(op):
    x = tg.placeholder((6, 37), name="x")
    h = tg.placeholder((6, 37), name="h")
    if op == "sigmoid_tanh":
        y = ops.multiply(ops.sigmoid(x), ops.tanh(x))
    else:
        y = getattr(nn, op)(x)
    (dx,) = tg.differentiate(ops.sum(ops.multiply(y, h)), [x])
    rng = np.random.default_rng(1)
    a, hv = (rng.standard_normal((6, 37)).astype(np.float32) * 3 for _ in range(2))
    f = tg.build([x, h], [y, dx])
    got = f(a, hv)
    for g, w in zip(got, tg.evaluate([y, dx], {x: a, h: hv})):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)  # libm and numpy differ
    if op == "softmax":
        # the forward's exp(x - m) / s is loaded by the gradient's sum
        assert not [line for line in f.loops.splitlines() if "dsoftmax_sum" in line
                    and "+=" in line and "exp(" in line]
    # the same schedule without its reuse_stored steps
    plain = tg.build([x, h], [y, dx], schedule=Schedule(
        [s for s in f.schedule if s.primitive != "reuse_stored"]))
    assert (plain.loops != f.loops) == (op == "softmax")
    for g, w in zip(got, plain(a, hv)):
        np.testing.assert_array_equal(g, w)
