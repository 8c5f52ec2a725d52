"""Integer conditions as solver constraints (``tegrad.analysis.affine.to_constraint``):
the constraint holds at exactly the points where the condition does."""
from hypothesis import given
from hypothesis import strategies as st

from tegrad.analysis.affine import to_constraint
from tegrad.ir.expr import Compare, Const, Not, Var
from tegrad.reference.evaluator import ExprEvaluator

I64 = "int64"
i, j = Var("i", I64), Var("j", I64)


def _agrees(cond, points, required=True):
    con = to_constraint(cond)
    if con is None:
        assert not required, str(cond)
        return
    ev = ExprEvaluator({})
    for p in points:
        want = bool(ev.at_point(cond, {k: v for k, v in p.items()}))
        assert con.evaluate(p) == want, (str(cond), str(con), p)


@given(st.integers(2, 7), st.integers(-9, 9), st.integers(-3, 3), st.integers(-4, 4),
       st.booleans(), st.booleans())
def test_a_residue_that_differs_is_one_constraint(m, c, a, b, negate, flip):
    """``(a*i + b*j) % m != c`` (or ``!(... == c)``, or ``c - e % m != 0``) is the one
    constraint ``(e - c) % m >= 1``, always true for a residue outside ``[0, m)`` (one
    for ``e == i`` at least; a form the solver writes as ``2 * (j % 2)`` may be none)."""
    e = i * a + j * b
    lhs, rhs = (e % m, Const(c, I64)) if not flip else (Const(c, I64) - e % m, Const(0, I64))
    cond = Not(Compare("eq", lhs, rhs)) if negate else Compare("ne", lhs, rhs)
    _agrees(cond, [{"i": x, "j": y} for x in range(-6, 7) for y in range(-3, 4)],
            required=(a, b) == (1, 0))


def test_other_disequalities_are_not_one_constraint():
    assert to_constraint(Compare("ne", i, Const(5, I64))) is None
    assert to_constraint(Compare("ne", i % 3 * 2, Const(2, I64))) is None
    assert to_constraint(Not(Compare("eq", i % 3 + j % 2, Const(1, I64)))) is None
