import pytest
from hypothesis import given, strategies as st

from tegrad.solver import (FALSE, TRUE, Affine, Constraint, EQ, FloorDiv, GE, Mod, eq,
                           expand_divisions, ge, gt, le, lt, parse_affine)

x, y, i, k, p = (Affine.var(n) for n in ("x", "y", "i", "k", "p"))


def test_arithmetic_and_printing():
    e = 2 * x + y - 3
    assert str(e) == "2*x + y - 3"
    assert e.coeff("x") == 2 and e.coeff("y") == 1 and e.coeff("z") == 0
    assert e.constant == -3
    assert e.variables() == {"x", "y"}
    assert str(-e) == "-2*x - y + 3"
    assert str(e - e) == "0"
    assert str(3 - x) == "-x + 3"
    assert str(Affine.const(7)) == "7"
    assert e * 0 == Affine.const(0)
    assert (x + 1) * Affine.const(2) == 2 * x + 2
    assert Affine({"x": 2, "y": 1}, -3) == e
    assert hash(Affine({"y": 1, "x": 2}, -3)) == hash(e)


def test_product_of_non_constants_raises():
    with pytest.raises(ValueError):
        x * y
    with pytest.raises(ValueError):
        (x + 1) * (y - 2)


def test_substitute_and_evaluate():
    e = 2 * x + y - 3
    assert e.substitute({"y": x + 1}) == 3 * x - 2
    assert e.evaluate({"x": 4, "y": 1}) == 6
    with pytest.raises(KeyError):
        e.evaluate({"x": 1})
    d = (x + y) // 3
    assert str(d.substitute({"y": Affine.const(3)})) == "x // 3 + 1"


def test_floordiv_and_mod_atoms():
    e = (i * 2 + k) // 3
    assert str(e) == "(2*i + k) // 3"
    assert e.atoms() == (FloorDiv(2 * i + k, 3),)
    assert not e.is_linear
    m = (i + 1) % 4
    assert str(m) == "(i + 1) % 4"
    assert m.atoms() == (Mod(i + 1, 4),)
    # canonicalisation: multiples of the divisor move out, common factors cancel
    assert (2 * x + 7) // 2 == x + 3
    assert str((4 * x + 2 * y + 3) // 4) == "x + (y + 1) // 2"
    assert (x + 4) % 4 == x % 4
    assert (6 * x) % 3 == Affine.const(0)
    assert str((2 * x) % 4) == "2*(x % 2)"
    assert x // 1 == x and x % 1 == Affine.const(0)
    with pytest.raises(ValueError):
        x // 0
    with pytest.raises(ValueError):
        x % -2
    with pytest.raises(ValueError):
        x // y


@pytest.mark.parametrize("text", [
    "2*x + y - 3", "(2*i + k) // 3", "(i + 1) % 4", "-(x // 2) + 3*((x + y) % 5) - 1",
    "x // 2 + 1", "(x // 2) // 3", "7",
])
def test_printing_is_valid_python(text):
    e = parse_affine(text)
    assert parse_affine(str(e)) == e
    for xv in range(-7, 8):
        for yv in (-3, 0, 4):
            env = {"x": xv, "y": yv, "i": xv + 2, "k": yv * 3}
            assert e.evaluate(env) == eval(text, {}, dict(env))


def test_quasi_affine_evaluation_matches_python():
    e = 2 * ((2 * i + k) // 3) + (i + 1) % 4 - 1
    for iv in range(-5, 6):
        for kv in range(-4, 5):
            assert e.evaluate({"i": iv, "k": kv}) == 2 * ((2 * iv + kv) // 3) + (iv + 1) % 4 - 1


def test_parse_rejects_non_affine():
    with pytest.raises(ValueError):
        parse_affine("x * y")
    with pytest.raises(ValueError):
        parse_affine("x ** 2")
    with pytest.raises(ValueError):
        parse_affine("f(x)")


def test_constraint_helpers_and_printing():
    q, r = Affine.var("q"), Affine.var("r")
    assert str(eq(p, 2 * q + r)) == "p == 2*q + r"
    assert str(ge(x, 3)) == "x >= 3"
    assert str(le(x, 5)) == "x <= 5"
    assert str(lt(r, 3)) == "r <= 2"
    assert str(gt(x, y)) == "x >= y + 1"
    assert str(eq((p - 2 * y) % 3, 0)) == "(p - 2*y) % 3 == 0"
    assert str(TRUE) == "true" and str(FALSE) == "false"
    assert eq("x", 1).evaluate({"x": 1}) and not lt("x", 1).evaluate({"x": 1})


def test_constraint_normalisation():
    assert Constraint(2 * x - 3, GE).normalized() == Constraint(x - 2, GE)
    assert Constraint(2 * x - 3, EQ).normalized() == FALSE
    assert Constraint(-4 * x + 2 * y + 6, EQ).normalized() == Constraint(2 * x - y - 3, EQ)
    assert Constraint(Affine.const(1), GE).normalized() == TRUE
    assert Constraint(Affine.const(0), EQ).normalized() == TRUE
    assert Constraint(Affine.const(2), EQ).normalized() == FALSE
    assert ge(x, 0).negated() == lt(x, 0)


def _unravelled_offset(flat, shape):
    """The row-major offset of ``unravel(flat, shape)``, written with ``//`` and ``%``."""
    offset, step = Affine.const(0), 1
    for d in reversed(range(len(shape))):
        index = flat // step if d == 0 else (flat // step) % shape[d]
        offset = offset + index * step
        step *= shape[d]
    return offset


@pytest.mark.parametrize("shape", [(10, 26, 26), (2, 3, 4), (5,), (7, 1, 3), (4, 4, 4, 4)])
def test_expand_divisions_finds_the_offset_of_an_unravelled_index(shape):
    flat = 13 * x + 2 * y + 1
    offset = _unravelled_offset(flat, shape)
    assert not offset.is_linear or len(shape) == 1
    assert expand_divisions(offset) == flat


@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(-3, 3), st.integers(-4, 4),
                          st.integers(1, 6), st.sampled_from(["div", "mod"])),
                min_size=1, max_size=4),
       st.integers(-30, 30), st.integers(-30, 30))
def test_property_expand_divisions_keeps_the_value(parts, vx, vy):
    e = Affine.const(0)
    for cx, cy, scale, divisor, kind in parts:
        inner = cx * x + cy * y + e  # nest the expression built so far
        e = scale * (inner // divisor if kind == "div" else inner % divisor) + cx * x
    expanded = expand_divisions(e)
    assert not any(type(a) is Mod for a in expanded.atoms())
    assert expanded.evaluate({"x": vx, "y": vy}) == e.evaluate({"x": vx, "y": vy})


def test_expand_divisions_leaves_divisions_that_do_not_cancel():
    assert expand_divisions(x // 3) == x // 3
    assert expand_divisions(x % 3) == x - 3 * (x // 3)
    assert expand_divisions(((x // 2) + y) // 5) == (x + 2 * y) // 10
    assert expand_divisions(2 * (x // 2) + x % 2) == x
