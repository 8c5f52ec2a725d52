"""Each rewrite rule of tegrad.simplify on its own, and the table's completeness."""
import math

import numpy as np
import pytest

import tegrad as tg
from tegrad.ir.expr import Binary, Cast, Compare, Const, Neg, Not, Reduce, Select, Var
from tegrad.analysis.simplify import EXACT_RULES, REWRITE_RULES, simplify, simplify_exact

i, j = Var("i"), Var("j")
x = tg.placeholder((4,), dtype="float64", name="x")
xi = x[i]
ONE, ZERO = Const(1.0, "float64"), Const(0.0, "float64")
c = i < 3

CASES = [
    # (rule, expression, expected): one case per rewrite a rule's docstring states
    ("fold_binary", Binary("add", Const(2, "int32"), Const(3, "int32"), "int32"), Const(5, "int32")),
    ("add_zero", Binary("add", xi, ZERO, "float64"), xi),
    ("zero_add", Binary("add", ZERO, xi, "float64"), xi),
    ("add_neg", Binary("add", xi, Neg(x[j], "float64"), "float64"),
     Binary("sub", xi, x[j], "float64")),
    ("add_selects", Binary("add", Select(c, xi, ZERO, "float64"),
                               Select(c, ZERO, x[j], "float64"), "float64"),
     Select(c, xi, x[j], "float64")),
    ("fold_binary", Binary("sub", Const(2, "int32"), Const(3, "int32"), "int32"), Const(-1, "int32")),
    ("add_zero", Binary("sub", xi, ZERO, "float64"), xi),
    ("zero_sub", Binary("sub", ZERO, xi, "float64"), Neg(xi, "float64")),
    ("sub_self", Binary("sub", i + j, i + j, "int32"), Const(0, "int32")),
    ("fold_binary", Binary("mul", Const(2, "int32"), Const(3, "int32"), "int32"), Const(6, "int32")),
    ("times_one", Binary("mul", xi, ONE, "float64"), xi),
    ("one_times", Binary("mul", ONE, xi, "float64"), xi),
    ("times_zero", Binary("mul", xi, ZERO, "float64"), ZERO),
    ("times_zero", Binary("mul", ZERO, xi, "float64"), ZERO),
    ("times_minus_one", Binary("mul", xi, Const(-1.0, "float64"), "float64"), Neg(xi, "float64")),
    ("times_minus_one", Binary("mul", Const(-1.0, "float64"), xi, "float64"), Neg(xi, "float64")),
    ("fold_binary", Binary("div", Const(3.0, "float64"), Const(2.0, "float64"), "float64"),
     Const(1.5, "float64")),
    ("times_one", Binary("div", xi, ONE, "float64"), xi),
    ("zero_over", Binary("div", ZERO, xi, "float64"), ZERO),
    ("fold_binary", Binary("floordiv", Const(-7, "int32"), Const(2, "int32"), "int32"),
     Const(-4, "int32")),
    ("times_one", Binary("floordiv", i, Const(1, "int32"), "int32"), i),
    ("zero_over", Binary("floordiv", Const(0, "int32"), i, "int32"), Const(0, "int32")),
    ("fold_binary", Binary("floormod", Const(-7, "int32"), Const(2, "int32"), "int32"),
     Const(1, "int32")),
    ("mod_one", Binary("floormod", i, Const(1, "int32"), "int32"), Const(0, "int32")),
    ("fold_binary", Binary("min", Const(2, "int32"), Const(3, "int32"), "int32"), Const(2, "int32")),
    ("extremum_self", Binary("min", xi, xi, "float64"), xi),
    ("fold_binary", Binary("max", Const(2, "int32"), Const(3, "int32"), "int32"), Const(3, "int32")),
    ("extremum_self", Binary("max", xi, xi, "float64"), xi),
    ("neg_const", Neg(Const(2.0, "float64"), "float64"), Const(-2.0, "float64")),
    ("neg_neg", Neg(Neg(xi, "float64"), "float64"), xi),
    ("fold_compare", Compare("lt", Const(2, "int32"), Const(3, "int32")), Const(True, "bool")),
    ("compare_self", Compare("eq", i + 1, i + 1), Const(True, "bool")),
    ("compare_self", Compare("lt", i + 1, i + 1), Const(False, "bool")),
    ("and_const_left", Const(True, "bool") & c, c),
    ("and_const_left", Const(False, "bool") & c, Const(False, "bool")),
    ("and_const_right", c & Const(True, "bool"), c),
    ("and_const_right", c & Const(False, "bool"), Const(False, "bool")),
    ("logical_self", c & c, c),
    ("or_const_left", Const(True, "bool") | c, Const(True, "bool")),
    ("or_const_left", Const(False, "bool") | c, c),
    ("or_const_right", c | Const(False, "bool"), c),
    ("or_const_right", c | Const(True, "bool"), Const(True, "bool")),
    ("logical_self", c | c, c),
    ("not_const", Not(Const(True, "bool")), Const(False, "bool")),
    ("not_not", Not(Not(c)), c),
    ("select_const", Select(Const(True, "bool"), xi, ZERO, "float64"), xi),
    ("select_const", Select(Const(False, "bool"), xi, ZERO, "float64"), ZERO),
    ("select_same", Select(c, xi, xi, "float64"), xi),
    ("select_not", Select(Not(c), xi, ZERO, "float64"), Select(c, ZERO, xi, "float64")),
    ("cast_same", Cast(xi, "float64"), xi),
    ("cast_const", Cast(Const(2.7, "float64"), "int32"), Const(2, "int32")),
    ("cast_const", Cast(Const(-2.7, "float64"), "int32"), Const(-2, "int32")),
]

k = tg.reduce_axis((0, 4), name="k")
CASES += [
    ("where_true", tg.sum(x[k], axis=k, where=Const(True, "bool")), Reduce(tg.sum, x[k], (k,), None, None, "float64")),
    ("reduce_empty", tg.sum(x[k], axis=k, where=Const(False, "bool"), init=ONE), ONE),
    ("reduce_empty", tg.max(x[k], axis=k, where=Const(False, "bool")), Const(-math.inf, "float64")),
    ("sum_of_zeros", tg.sum(ZERO, axis=k), ZERO),
]


@pytest.mark.parametrize("key, expr, expected", CASES, ids=[f"{c[0]}-{n}" for n, c in enumerate(CASES)])
def test_rule(key, expr, expected):
    out = simplify(expr)
    assert tg.structural_equal(out, expected), f"{expr} -> {out}, expected {expected}"


RULES = {rule.__name__: rule for rules in REWRITE_RULES.values() for rule in rules}


def test_every_rule_is_tested():
    assert {case[0] for case in CASES} == set(RULES)


@pytest.mark.parametrize("name", sorted(RULES))
def test_every_rewrite_of_a_rule_has_a_case(name):
    # a rule stating "x && true -> x; x && false -> false" needs a case for each
    stated = RULES[name].__doc__.count(";") + 1
    assert sum(1 for case in CASES if case[0] == name) >= stated, RULES[name].__doc__


@pytest.mark.parametrize("key, expr, expected", CASES, ids=[f"{c[0]}-{n}" for n, c in enumerate(CASES)])
def test_the_case_is_the_rule_s(key, expr, expected):
    assert RULES[key](expr) is not None


def test_no_folding_that_would_change_a_value():
    # division by a zero constant is left alone, and integer overflow is not folded
    e = Binary("div", xi, ZERO, "float64")
    assert simplify(e) is e
    big = Binary("mul", Const(2**30, "int32"), Const(4, "int32"), "int32")
    assert simplify(big) is big
    # x == x is not folded for floats (NaN)
    assert isinstance(simplify(Compare("eq", xi, xi)), Compare)


def test_float_floor_division_by_one_is_a_floor_and_nan_extrema_fold_to_nan():
    e = Binary("floordiv", xi, ONE, "float64")
    assert simplify(e) is e
    a = tg.placeholder((3,), dtype="float32", name="a")
    b = tg.compute((3,), lambda q: tg.floordiv(a[q], 1.0) * a[q], name="b")
    (da,) = tg.differentiate(tg.ops.sum(b), [a])
    v = np.array([2.5, -1.5, 3.0], np.float32)
    np.testing.assert_array_equal(tg.evaluate(da, {a: v}), np.floor(v))
    for op in ("min", "max"):
        for pair in ((math.nan, 1.0), (1.0, math.nan)):
            folded = simplify(Binary(op, Const(pair[0], "float64"), Const(pair[1], "float64"),
                                     "float64"))
            assert type(folded) is Const and math.isnan(folded.value)


def test_simplify_returns_the_same_node_when_nothing_applies():
    e = xi * x[j] + tg.exp(xi)
    assert simplify(e) is e


def test_simplified_expressions_evaluate_alike():
    rng = np.random.default_rng(1)
    feed = {x: rng.standard_normal(4)}
    for _, expr, _ in CASES:
        if not isinstance(expr, (Binary, Neg, Select, Cast)) or expr.dtype != "float64":
            continue
        before = tg.compute((3, 4), lambda i, j: expr, name="before")
        after = tg.compute((3, 4), lambda i, j: simplify(expr), name="after")
        a, b = tg.evaluate([before, after], feed)
        np.testing.assert_allclose(a, b)


def test_exact_rules_hold_for_nan_infinities_and_signed_zeros():
    exact = {rule.__name__ for rules in EXACT_RULES.values() for rule in rules}
    assert exact < set(RULES) and {"times_one", "one_times", "select_same"} <= exact
    assert not exact & {"add_zero", "zero_add", "times_zero", "sub_self", "zero_sub",
                        "zero_over"}
    feed = {x: np.array([np.nan, np.inf, -np.inf, -0.0])}
    checked = 0
    for name, expr, _ in CASES:
        if name not in exact or not isinstance(expr, (Binary, Neg, Select, Cast)):
            continue
        out = simplify_exact(expr)
        assert not tg.structural_equal(out, expr), name
        before = tg.compute((3, 4), lambda i, j: expr, name="before")
        after = tg.compute((3, 4), lambda i, j: out, name="after")
        a, b = tg.evaluate([before, after], feed)
        np.testing.assert_array_equal(a, b, err_msg=name)
        numbers = ~np.isnan(a)  # a NaN's sign bit carries no meaning
        assert (np.signbit(a[numbers]) == np.signbit(b[numbers])).all(), name
        checked += 1
    assert checked >= 10
