"""The Kronecker select is built by autodiff and recognised by zero elimination alike.

If either side changes the shape of ``(idx == x) ? 1 : 0`` (a simplification upstream,
a new constructor), these tests fail instead of gradients silently staying slow.
"""
import tegrad as tg
from tegrad.analysis.kronecker import equality_sides, kronecker, kronecker_pairs
from tegrad.ir.expr import Reduce, Var
from tegrad.ir.mapper import walk
from tegrad.zero_elim.terms import expand


def test_the_matcher_recognises_what_the_constructor_builds():
    idx = [Var("i") + 1, Var("j") * 2, Var("k")]
    xs = [Var("a"), Var("b"), Var("c")]
    for n in range(1, 4):
        pairs = kronecker_pairs(kronecker(idx[:n], xs[:n], "float64"))
        assert [(str(i), str(x)) for i, x in pairs] == [(str(i), str(x)) for i, x in
                                                        zip(idx[:n], xs[:n])]
    assert kronecker_pairs(tg.if_then_else(Var("i") < Var("a"), 1.0, 0.0)) is None
    assert kronecker_pairs(tg.if_then_else(Var("i") == Var("a"), 2.0, 0.0)) is None


def test_autodiff_emits_the_select_the_matcher_recognises():
    x = tg.placeholder((4, 5), dtype="float64", name="x")
    y = tg.compute((5, 4), lambda i, j: x[j, i] * 3.0, name="y")
    (dx,) = tg.differentiate(y, [x], optimize=False)
    found = [kronecker_pairs(n) for n in walk(dx.op.body)]
    found = [p for p in found if p is not None]
    assert found, tg.format(dx)
    assert [(str(i), str(x)) for i, x in found[0]] == [("j", "i0"), ("i", "i1")]
    J = tg.jacobian(y, x, optimize=False)
    assert any(kronecker_pairs(n) is not None for n in walk(J.op.body))


def test_zero_elimination_pins_the_axes_of_the_select():
    x = tg.placeholder((4, 5), dtype="float64", name="x")
    y = tg.compute((5, 4), lambda i, j: x[j, i] * 3.0, name="y")
    (dx,) = tg.differentiate(y, [x], optimize=False)
    (term,) = expand(dx.op.body, taken=[ax.name for ax in dx.op.axes])
    assert all(equality_sides(c) is not None for c in term.conds)
    assert {str(side) for c in term.conds for side in equality_sides(c)} >= {"i0", "i1"}
    (opt,) = tg.differentiate(y, [x])
    assert not any(type(n) is Reduce for n in walk(opt.op.body))
    assert tg.cost(opt).iterations == 20
