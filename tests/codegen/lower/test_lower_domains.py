"""The loops isl's AST builder makes (``solver.loop_ast``, turned into loop-IR by
``codegen.lower.nest``) visit exactly the integer points of random affine domains:
bounds that depend on outer variables and on parameters, divisibility (strides) and
equalities (single points become lets)."""
import itertools

import numpy as np

from hypothesis import given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad import solver
from tegrad.ir.expr import Const, Var
from tegrad.codegen.loops.interpret import Interpreter
from tegrad.codegen.loops.nodes import Accumulate, Buffer
from tegrad.codegen.lower.nest import domain_nest

NAMES = ("a", "b", "c")


@st.composite
def domains(draw):
    n = draw(st.integers(1, 3))
    names = NAMES[:n]
    terms = [solver.Affine.var(v) for v in names] + [solver.Affine.var("p")]
    constraints = []
    for _ in range(draw(st.integers(0, 3))):
        coeffs = [draw(st.integers(-2, 2)) for _ in terms]
        expr = sum((c * t for c, t in zip(coeffs, terms)), solver.Affine.const(0))
        expr = expr + draw(st.integers(-3, 3))
        kind = draw(st.sampled_from(["ge", "mod", "eq_div", "window"]))
        if kind == "ge":
            constraints.append(solver.ge(expr, 0))
        elif kind == "mod":
            constraints.append(solver.eq(expr % draw(st.integers(2, 3)), 0))
        elif kind == "eq_div":
            constraints.append(solver.eq(expr // 2, terms[0] - 1))
        else:
            # expr <= c * v <= expr + w: the windows of strided convolution gradients
            c, w = draw(st.integers(2, 10)), draw(st.integers(0, 2))
            v = terms[draw(st.integers(0, n - 1))]
            constraints += [solver.ge(v * c, expr), solver.le(v * c, expr + w)]
    extents = [draw(st.integers(1, 5)) for _ in names]
    lows = [draw(st.integers(-3, 0)) for _ in names]
    return names, extents, lows, constraints


@settings(max_examples=300, deadline=None)
@given(domains(), st.integers(0, 3), st.booleans())
def test_loops_visit_exactly_the_points_of_the_domain(domain, p, lets):
    names, extents, lows, constraints = domain
    axes = [(Var(v, "int64"), Const(lo, "int64"), Const(lo + n, "int64"))
            for v, n, lo in zip(names, extents, lows)]
    out = Buffer("out", tuple(extents), "int64", "output")
    # counts the visits of each point: once inside the domain, never outside
    body = Accumulate(out, tuple(Var(v, "int64") - lo for v, lo in zip(names, lows)),
                      Const(1, "int64"), tg.sum)
    stmt = domain_nest(axes, constraints, [solver.ge("p", 0), solver.le("p", 3)],
                       lambda: body, lets=lets)
    memory = {out: np.zeros(extents, dtype=np.int64)}
    Interpreter(memory).run(stmt, {"p": np.array(p, dtype=np.int64)})
    want = np.zeros(extents, dtype=np.int64)
    for point in itertools.product(*[range(n) for n in extents]):
        values = dict(zip(names, [a + lo for a, lo in zip(point, lows)]), p=p)
        if all(c.evaluate(values) for c in constraints):
            want[point] = 1
    np.testing.assert_array_equal(memory[out], want)


def test_a_variable_isl_takes_for_fixed_but_has_two_values():
    """isl's AST builder emits a single point for this domain (i0 == 0 has two: k0 == 0
    and k0 == 2); the loops must still visit both (a random program's gradient)."""
    A = solver.Affine.var
    i0, k0, q, t = A("i0"), A("k0"), A("q"), A("t")
    window = -(i0 * 4) - k0 * 5 + q * 2
    constraints = [solver.ge(t * 10, window), solver.le(t * 10, window + 1)]
    axes = [(Var("k0", "int64"), Const(0, "int64"), Const(3, "int64")),
            (Var("q", "int64"), Const(0, "int64"), Const(2, "int64")),
            (Var("t", "int64"), Const(-2, "int64"), Const(2, "int64"))]
    out = Buffer("out", (5,), "int64", "output")
    body = Accumulate(out, (Var("i0", "int64"),), Const(1, "int64"), tg.sum)
    stmt = domain_nest(axes, constraints, [solver.ge(i0, 0), solver.lt(i0, 5)], lambda: body)
    memory = {out: np.zeros(5, dtype=np.int64)}
    for value in range(5):
        Interpreter(memory).run(stmt, {"i0": np.array(value, dtype=np.int64)})
    want = [sum(1 for a in range(3) for b in range(2) for c in range(-2, 2)
                if -4 * v - 5 * a + 2 * b <= 10 * c <= -4 * v - 5 * a + 2 * b + 1)
            for v in range(5)]
    assert memory[out].tolist() == want == [2, 0, 1, 2, 1]


@st.composite
def windows(draw):
    """Domains ``lo <= c * v <= lo + w`` over two loop variables, ``lo`` moving with two
    parameters by large coefficients (the windows of zero-eliminated strided gradients)."""
    names = NAMES[:2]
    terms = [solver.Affine.var(v) for v in names]
    p, q = solver.Affine.var("p"), solver.Affine.var("q")
    constraints = []
    for _ in range(draw(st.integers(1, 2))):
        expr = (sum((draw(st.integers(-9, 9)) * t for t in terms), solver.Affine.const(0))
                + draw(st.integers(-40, 40)) * p + draw(st.integers(-40, 40)) * q
                + draw(st.integers(-20, 20)))
        c, w = draw(st.integers(2, 25)), draw(st.integers(0, 4))
        v = terms[draw(st.integers(0, 1))]
        constraints += [solver.ge(v * c, expr), solver.le(v * c, expr + w)]
    lows = [draw(st.integers(-12, 0)) for _ in names]
    return names, [draw(st.integers(1, 12)) for _ in names], lows, constraints


@settings(max_examples=60, deadline=None)
@given(windows())
def test_loops_visit_the_points_of_windows_moving_with_two_parameters(domain):
    names, extents, lows, constraints = domain
    axes = [(Var(v, "int64"), Const(lo, "int64"), Const(lo + n, "int64"))
            for v, n, lo in zip(names, extents, lows)]
    out = Buffer("out", (4, 5) + tuple(extents), "int64", "output")
    p, q = Var("p", "int64"), Var("q", "int64")
    body = Accumulate(out, (p, q) + tuple(Var(v, "int64") - lo for v, lo in zip(names, lows)),
                      Const(1, "int64"), tg.sum)
    context = [solver.ge("p", 0), solver.lt("p", 4), solver.ge("q", 0), solver.lt("q", 5)]
    stmt = domain_nest(axes, constraints, context, lambda: body)
    memory = {out: np.zeros(out.shape, dtype=np.int64)}
    want = np.zeros(out.shape, dtype=np.int64)
    for pv, qv in itertools.product(range(4), range(5)):
        Interpreter(memory).run(stmt, {"p": np.array(pv, dtype=np.int64),
                                       "q": np.array(qv, dtype=np.int64)})
        for point in itertools.product(*[range(n) for n in extents]):
            values = dict(zip(names, [a + lo for a, lo in zip(point, lows)]), p=pv, q=qv)
            if all(c.evaluate(values) for c in constraints):
                want[(pv, qv) + point] = 1
    np.testing.assert_array_equal(memory[out], want)


def test_values_of_fixed_variables_are_read_before_they_are_rebound():
    # isl unrolls the odd i of this union as "i = c + 1, k = -(c // 2) + 1" after the
    # even ones (c the loop over i): k must be computed from the loop's i, not the new one
    i, k = solver.Affine.var("i"), solver.Affine.var("k")
    common = [solver.eq((i * 2 + k) % 3, 0)]
    conds = [common + [solver.eq(i % 2, 0)], common + [solver.eq((i + 1) % 2, 0)], common]
    axes = [(Var("i", "int64"), Const(0, "int64"), Const(4, "int64")),
            (Var("k", "int64"), Const(0, "int64"), Const(3, "int64"))]
    outs = [Buffer(f"out{n}", (4, 3), "int64", "output") for n in range(3)]
    bodies = [lambda out=out: Accumulate(out, (Var("i", "int64"), Var("k", "int64")),
                                         Const(1, "int64"), tg.sum) for out in outs]
    stmt = domain_nest(axes, conds[0], [], bodies[0], more=list(zip(conds[1:], bodies[1:])))
    memory = {out: np.zeros((4, 3), dtype=np.int64) for out in outs}
    Interpreter(memory).run(stmt, {})
    for out, cs in zip(outs, conds):
        want = [[int(all(c.evaluate({"i": a, "k": b}) for c in cs)) for b in range(3)]
                for a in range(4)]
        assert memory[out].tolist() == want
