"""Randomised checks: simplify_domain is a bijection on the integer points.

Seeds are fixed (``derandomize=True``) and failures print a reproduction blob.
"""

from hypothesis import given, settings, strategies as st

from tegrad.solver import EQ, GE, Affine, Constraint, Domain, simplify_domain

V = Affine.var


def check_bijection(t, params):
    """Bijection check with the old points found by scanning the declared ranges."""
    return t.check_bijection(params, tight=False)


@st.composite
def domains(draw):
    """Random domains; most conditions hold at a drawn witness point (for p == 2)."""
    nvars = draw(st.integers(1, 6))
    names = [f"v{i}" for i in range(nvars)]
    use_param = draw(st.booleans())
    params = ["p"] if use_param else []
    p = V("p")
    max_extent = 4 if nvars <= 4 else 3
    variables = []
    witness = {"p": 2}
    for k, name in enumerate(names):
        lo = draw(st.integers(-2, 1))
        extent = draw(st.integers(1, max_extent))
        hi = Affine.const(lo + extent)
        if k > 0 and draw(st.integers(0, 5)) == 0:  # triangular: bounded by an earlier variable
            hi = V(names[draw(st.integers(0, k - 1))]) + extent
        variables.append((name, lo, hi))
        witness[name] = draw(st.integers(lo, max(lo, hi.evaluate(witness) - 1)))

    def linear(max_coeff):
        coeffs = draw(st.lists(st.integers(-max_coeff, max_coeff), min_size=nvars, max_size=nvars))
        e = Affine({n: a for n, a in zip(names, coeffs)})
        if use_param:
            e = e + p * draw(st.integers(-2, 2))
        if draw(st.integers(0, 4)) == 0:
            return e + draw(st.integers(-3, 3))  # arbitrary: often unsatisfiable
        return e - e.evaluate(witness)  # zero at the witness

    conditions = [Constraint(linear(3), EQ) for _ in range(draw(st.integers(0, 4)))]
    if draw(st.booleans()):
        conditions.append(Constraint(linear(2) + draw(st.integers(0, 2)), GE))
    kind = draw(st.integers(0, 5))
    if kind == 0:
        e = linear(2) + draw(st.integers(0, 3))
        m = draw(st.integers(2, 4))
        conditions.append(Constraint(e % m - e.evaluate(witness) % m, EQ))
    elif kind == 1:
        e = linear(2) // draw(st.integers(2, 3))
        conditions.append(Constraint(e - e.evaluate(witness) + draw(st.integers(0, 2)), GE))
    return Domain(variables, conditions, params)


@settings(max_examples=300, deadline=None, derandomize=True, print_blob=True,
          database=None)
@given(domains())
def test_property_simplify_is_a_bijection(domain):
    t = simplify_domain(domain)
    values = [{"p": -1}, {"p": 2}] if domain.parameters else [{}]
    for params in values:
        count = check_bijection(t, params)
        if t.is_empty:
            assert count == 0
    if not domain.parameters:
        assert t.is_empty == (check_bijection(t, {}) == 0)
    assert len(t.new.names) <= len(domain.names) + 2 * sum(
        str(c).count("//") + str(c).count("%") for c in domain.conditions)


@settings(max_examples=80, deadline=None, derandomize=True, print_blob=True,
          database=None)
@given(domains())
def test_property_count_and_bounds(domain):
    if domain.parameters:
        domain = domain.with_parameters({"p": 1})
    pts = list(domain.points({}, tight=False))
    assert domain.count() == len(pts)
    assert domain.is_empty() == (not pts)
    bounds = domain.bounds()
    for pt in pts:  # bounds are valid (sound) for every point
        for v in domain.names:
            lo, hi = bounds[v].evaluate(pt)
            assert lo <= pt[v] < hi
