import islpy as isl
import pytest

from tegrad.solver import Affine, Bounds, Domain, eq, ge, le, lt, variable_bounds

i, j, k, p, q, r = (Affine.var(n) for n in ("i", "j", "k", "p", "q", "r"))


def test_printing():
    d = Domain([("r", 0, 3), ("q", 0, 8)], [eq(p, 2 * q + r)], parameters=["p"])
    assert str(d) == "[p] -> { r in [0, 3), q in [0, 8) : p == 2*q + r }"
    assert str(Domain([("i", 0, 4), ("j", i, None), "k"])) == "{ i in [0, 4), j >= i, k }"
    assert str(Domain()) == "{ }"
    assert str(Domain.empty(["p"])) == "[p] -> { : false }"


def test_validation():
    with pytest.raises(ValueError):
        Domain([("i", 0, 4), ("i", 0, 4)])
    with pytest.raises(ValueError):
        Domain([("i", 0, j), ("j", 0, 4)])  # bounds may only use earlier variables
    with pytest.raises(ValueError):
        Domain([("i", 0, 4)], [eq(i, q)])  # q is not declared
    with pytest.raises(ValueError):
        Domain([("p", 0, 4)], parameters=["p"])


def test_contains_points_count():
    d = Domain([("i", 0, 4), ("j", 0, i + 1)])  # triangular
    pts = list(d.points())
    assert pts == [{"i": a, "j": b} for a in range(4) for b in range(a + 1)]
    assert d.count() == 10
    assert d.contains({"i": 2, "j": 2}) and not d.contains({"i": 2, "j": 3})
    box = Domain([("i", 0, 40), ("j", 2, 50)])
    assert box.count() == 40 * 48
    m = Domain([("i", 0, 10)], [eq(i % 3, 1)])
    assert [pt["i"] for pt in m.points()] == [1, 4, 7]
    assert m.count() == 3


def test_count_with_parameters_needs_values():
    d = Domain([("r", 0, 3), ("q", 0, 8)], [eq(p, 2 * q + r)], parameters=["p"])
    with pytest.raises(ValueError):
        d.count()
    assert [d.count({"p": v}) for v in range(0, 20)] == \
        [sum(1 for qq in range(8) for rr in range(3) if 2 * qq + rr == v) for v in range(20)]
    assert list(d.points({"p": 5})) == [{"r": 1, "q": 2}]


def test_count_large_domain_is_fast():
    d = Domain([("i", 0, 300), ("j", 0, i + 1), ("k", 0, 100)], [eq((i + j) % 3, 0)])
    expected = sum(1 for a in range(300) for b in range(a + 1) if (a + b) % 3 == 0) * 100
    assert d.count() == expected


def test_is_empty():
    assert Domain.empty().is_empty()
    assert Domain([("i", 0, 0)]).is_empty()
    assert Domain([("i", 0, 10)], [eq(2 * i, 7)]).is_empty()
    assert Domain([("i", 0, 10), ("j", 0, 10)], [ge(i + j, 19)]).is_empty()
    assert not Domain([("i", 0, 10), ("j", 0, 10)], [ge(i + j, 18)]).is_empty()
    # parametric: empty only if empty for every parameter value
    assert not Domain([("i", 0, p)], parameters=["p"]).is_empty()
    assert Domain([("i", 0, p)], [lt(p, 0)], parameters=["p"]).is_empty()


def test_parameter_conditions():
    d = Domain([("i", 0, 10)], [eq((p - 2 * q) % 3, 0), le(i, p), ge(p, 0)], parameters=["p", "q"])
    assert [str(c) for c in d.parameter_conditions] == ["(p - 2*q) % 3 == 0", "p >= 0"]
    assert [str(c) for c in d.variable_conditions] == ["p >= i"]


def test_isl_round_trip_by_name():
    d = Domain([("n'", 0, 4), ("y", 0, 8), ("r", 0, 3)],
               [eq(Affine.var("n'") * 0 + 2 * Affine.var("y") + r, p), eq((p + 1) % 4, 1)],
               parameters=["p"])
    s = d.to_isl()
    assert s.get_var_names(isl.dim_type.set) == ["n'", "y", "r"]
    assert s.get_var_names(isl.dim_type.param) == ["p"]
    back = Domain.from_isl(s)
    assert back.names == ("n'", "y", "r") and back.parameters == ("p",)
    assert back.to_isl().is_equal(s)
    for pv in range(-2, 20):
        assert back.count({"p": pv}) == d.count({"p": pv})


def test_from_isl_text_with_divisions():
    s = isl.Set("[n] -> { [i, j] : 0 <= i < n and 0 <= j <= i and (i + j) mod 3 = 0 }")
    d = Domain.from_isl(s)
    assert d.names == ("i", "j") and d.parameters == ("n",)
    # isl dropped 0 <= i (implied by 0 <= j <= i) and keeps the mod as a division
    assert d.range_of("i") == (None, Affine.var("n"))
    assert "(i + j) % 3 == 0" in str(d)
    for n in range(0, 9):
        brute = sum(1 for a in range(n) for b in range(a + 1) if (a + b) % 3 == 0)
        assert d.count({"n": n}) == brute
    with pytest.raises(ValueError):
        Domain.from_isl(isl.Set("{ [i] : 0 <= i < 3 or 7 <= i < 9 }"))


def test_variable_bounds_triangular_and_strided():
    d = Domain([("i", 0, 10), ("j", 0, 10)], [ge(i, j)])
    b = variable_bounds(d)
    assert b["i"] == Bounds((Affine.const(0),), (Affine.const(10),))
    assert b["j"] == Bounds((Affine.const(0),), (i + 1,))
    y = Affine.var("y")
    d = Domain([("y", 0, 8), ("r", 0, 3)], [eq(2 * y + r, p)], parameters=["p"])
    b = d.bounds()
    assert b["y"].format("y") == "max(0, (p + 1) // 2 - 1) <= y < min(8, p // 2 + 1)"
    for pv in range(-3, 22):
        lo, hi = b["y"].evaluate({"p": pv})
        ys = [pt["y"] for pt in d.points({"p": pv})]
        assert ys == list(range(lo, hi))  # the bounds are tight here


def test_variable_bounds_with_division_conditions():
    d = Domain([("i", 0, 20)], [eq(i // 4, 2)])
    b = variable_bounds(d)["i"]
    assert b.evaluate({}) == (8, 12)
