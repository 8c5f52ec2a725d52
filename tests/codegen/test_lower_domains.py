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
        kind = draw(st.sampled_from(["ge", "mod", "eq_div"]))
        if kind == "ge":
            constraints.append(solver.ge(expr, 0))
        elif kind == "mod":
            constraints.append(solver.eq(expr % draw(st.integers(2, 3)), 0))
        else:
            constraints.append(solver.eq(expr // 2, terms[0] - 1))
    extents = [draw(st.integers(1, 5)) for _ in names]
    return names, extents, constraints


@settings(max_examples=150, deadline=None)
@given(domains(), st.integers(0, 3), st.booleans())
def test_loops_visit_exactly_the_points_of_the_domain(domain, p, lets):
    names, extents, constraints = domain
    axes = [(Var(v, "int64"), Const(0, "int64"), Const(n, "int64"))
            for v, n in zip(names, extents)]
    out = Buffer("out", tuple(extents), "int64", "output")
    # counts the visits of each point: once inside the domain, never outside
    body = Accumulate(out, tuple(Var(v, "int64") for v in names), Const(1, "int64"), tg.sum)
    stmt = domain_nest(axes, constraints, [solver.ge("p", 0), solver.le("p", 3)],
                       lambda: body, lets=lets)
    memory = {out: np.zeros(extents, dtype=np.int64)}
    Interpreter(memory).run(stmt, {"p": np.array(p, dtype=np.int64)})
    want = np.zeros(extents, dtype=np.int64)
    for point in itertools.product(*[range(n) for n in extents]):
        values = dict(zip(names, point), p=p)
        if all(c.evaluate(values) for c in constraints):
            want[point] = 1
    np.testing.assert_array_equal(memory[out], want)
