import itertools

from hypothesis import given, settings, strategies as st

from tegrad.solver import FALSE, Affine, solve_linear_equations

p, y = Affine.var("p"), Affine.var("y")


def solution_points(sol, values):
    """All integer solutions described by ``sol`` (free variables in their bounds)."""
    free = sol.free_variables
    out = []

    def rec(k, env):
        if k == len(free):
            out.append(tuple(sol.solution[v].evaluate(env) for v in sol.solution))
            return
        lo, hi = sol.bounds[free[k]].evaluate(env)
        for t in range(lo, hi):
            rec(k + 1, {**env, free[k]: t})

    rec(0, dict(values))
    return out


def test_unique_solution():
    s = solve_linear_equations([[1, 1], [1, -1]], [20, 10], ["x", "y"])
    assert s.solvable is True and s.condition == ()
    assert s.free_variables == ()
    assert s.solution == {"x": Affine.const(15), "y": Affine.const(5)}
    assert str(s) == "  x = 15\n  y = 5"


def test_low_rank_system_has_one_free_variable_with_its_range():
    s = solve_linear_equations([[1, 1], [2, 2]], [5, 10], ["x", "y"],
                               ranges={"x": (0, 10), "y": (0, 10)})
    assert s.solvable is True
    assert s.free_variables == ("x",)  # a free direction with a unit entry keeps its name
    assert str(s.solution["y"]) == "-x + 5"
    assert s.solution["x"] == Affine.var("x")
    b = s.bounds["x"]
    assert b.lower == (Affine.const(0),) and b.upper == (Affine.const(6),)
    assert sorted(solution_points(s, {})) == [(x, 5 - x) for x in range(6)]
    assert s.inverse == {"x": Affine.var("x")}


def test_free_direction_without_unit_entry_gets_new_variable():
    s = solve_linear_equations([[2, 3]], [1], ["x", "y"], ranges={"x": (-5, 6), "y": (-5, 6)})
    assert s.solvable is True
    (t,) = s.free_variables
    assert t not in ("x", "y")
    pts = sorted(solution_points(s, {}))
    brute = sorted((x, yy) for x in range(-5, 6) for yy in range(-5, 6) if 2 * x + 3 * yy == 1)
    assert pts == brute
    for x, yy in brute:  # the inverse recovers the free variable
        tv = s.inverse[t].evaluate({"x": x, "y": yy})
        assert (s.solution["x"].evaluate({t: tv}), s.solution["y"].evaluate({t: tv})) == (x, yy)


def test_no_integer_solution():
    s = solve_linear_equations([[2, 4]], [3], ["x", "y"])
    assert s.solvable is False and s.condition == (FALSE,)
    assert str(s) == "no solution"
    s = solve_linear_equations([[1, 1], [1, 1]], [1, 2], ["x", "y"])
    assert s.solvable is False
    # solvable lattice but nothing inside the ranges
    s = solve_linear_equations([[1, 1]], [30], ["x", "y"], ranges={"x": (0, 10), "y": (0, 10)})
    assert s.solvable is False


def test_parameter_dependent_solvability_condition():
    s = solve_linear_equations([[3]], [p - 2 * y], ["x"], parameters=["p", "y"])
    assert [str(c) for c in s.condition] == ["(p - 2*y) % 3 == 0"]
    assert s.solvable == s.condition and s.is_conditional
    assert str(s.solution["x"]) == "(p - 2*y) // 3"
    for pv in range(-6, 7):
        for yv in range(-3, 4):
            env = {"p": pv, "y": yv}
            ok = all(c.evaluate(env) for c in s.condition)
            assert ok == ((pv - 2 * yv) % 3 == 0)
            if ok:
                assert 3 * s.solution["x"].evaluate(env) == pv - 2 * yv


def test_rank_deficient_parameter_condition_is_an_equality():
    q = Affine.var("q")
    s = solve_linear_equations([[1, 2], [2, 4]], [p, q], ["x", "y"], parameters=["p", "q"])
    assert [str(c) for c in s.condition] == ["2*p == q"]


def test_ranges_add_parameter_conditions():
    s = solve_linear_equations([[2]], [p + 1], ["x"], ranges={"x": (0, 8)}, parameters=["p"])
    conds = {str(c) for c in s.condition}
    assert "(p + 1) % 2 == 0" in conds
    for pv in range(-4, 20):
        ok = all(c.evaluate({"p": pv}) for c in s.condition)
        assert ok == ((pv + 1) % 2 == 0 and 0 <= (pv + 1) // 2 < 8)


def test_empty_variable_list():
    s = solve_linear_equations([], [], [])
    assert s.solvable is True and s.solution == {} and s.free_variables == ()
    s = solve_linear_equations([[]], [0], [])
    assert s.solvable is True
    s = solve_linear_equations([[]], [1], [])
    assert s.solvable is False
    s = solve_linear_equations([[]], [p], [], parameters=["p"])
    assert [str(c) for c in s.condition] == ["p == 0"]
    # no equations at all: every variable is free within its range
    s = solve_linear_equations([], [], ["x", "y"], ranges={"x": (0, 3), "y": (1, 4)})
    assert s.free_variables == ("x", "y")
    assert sorted(solution_points(s, {})) == [(a, b) for a in range(3) for b in range(1, 4)]


def test_large_coefficients():
    big = 10**6
    s = solve_linear_equations([[big, big + 1], [big - 1, big]], [3 * big + 2, 3 * big - 1],
                               ["x", "y"])
    assert s.solvable is True
    x, yy = s.solution["x"].constant, s.solution["y"].constant
    assert big * x + (big + 1) * yy == 3 * big + 2
    assert (big - 1) * x + big * yy == 3 * big - 1
    s = solve_linear_equations([[big, 3 * big + 1]], [p], ["x", "y"], parameters=["p"],
                               ranges={"x": (-3 * big, 3 * big), "y": (-big, big)})
    assert s.solvable is not False
    env = {"p": 7}
    (t,) = s.free_variables
    tv = s.bounds[t].evaluate(env)[0]
    env[t] = tv
    assert big * s.solution["x"].evaluate(env) + (3 * big + 1) * s.solution["y"].evaluate(env) == 7


systems = st.integers(1, 3).flatmap(lambda m: st.integers(1, 4).flatmap(lambda n: st.tuples(
    st.lists(st.lists(st.integers(-3, 3), min_size=n, max_size=n), min_size=m, max_size=m),
    st.lists(st.integers(-4, 4), min_size=m, max_size=m),
    st.lists(st.integers(0, 2), min_size=m, max_size=m),
    st.lists(st.tuples(st.integers(-2, 0), st.integers(1, 3)), min_size=n, max_size=n))))


@settings(max_examples=150, deadline=None, derandomize=True, print_blob=True,
          database=None)
@given(systems)
def test_property_parametrisation_matches_brute_force(case):
    matrix, consts, pcoeffs, boxes = case
    names = [f"x{i}" for i in range(len(boxes))]
    rhs = [Affine.var("p") * a + c for a, c in zip(pcoeffs, consts)]
    ranges = dict(zip(names, boxes))
    s = solve_linear_equations(matrix, rhs, names, ranges=ranges, parameters=["p"])
    for pv in range(-2, 3):
        env = {"p": pv}
        b = [r.evaluate(env) for r in rhs]
        brute = sorted(pt for pt in itertools.product(*(range(lo, hi) for lo, hi in boxes))
                       if all(sum(a * x for a, x in zip(row, pt)) == bi
                              for row, bi in zip(matrix, b)))
        if s.solvable is False or not all(c.evaluate(env) for c in s.condition):
            assert brute == []
            continue
        assert sorted(solution_points(s, env)) == brute
