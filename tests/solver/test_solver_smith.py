import pytest
from hypothesis import given, settings, strategies as st
from sympy import ZZ, Matrix
from sympy.matrices.normalforms import smith_normal_decomp

from tegrad.solver import smith_normal_form
from tegrad.solver.smith import determinant, identity, matmul, smith_decomposition


def check_smith(a):
    d = smith_decomposition(a)
    U, S, V = d.U, d.S, d.V
    m = len(a)
    n = len(a[0]) if m else 0
    assert matmul(matmul(U, a), V) == S if m and n else True
    assert abs(determinant(U)) == 1
    assert abs(determinant(V)) == 1
    assert matmul(V, d.V_inv) == identity(n)
    for i in range(m):
        for j in range(n):
            if i != j:
                assert S[i][j] == 0
    diag = [S[i][i] for i in range(min(m, n))]
    r = d.rank
    assert all(s > 0 for s in diag[:r]) and all(s == 0 for s in diag[r:])
    for s, t in zip(diag[:r], diag[1:r]):
        assert t % s == 0
    return diag


def sympy_diagonal(a):
    S, _, _ = smith_normal_decomp(Matrix(a), domain=ZZ)
    m, n = S.shape
    return [abs(int(S[i, i])) for i in range(min(m, n))]


@pytest.mark.parametrize("a", [
    [[2, 4], [6, 8]],
    [[1, 1], [1, -1]],
    [[2, 2, 0], [0, 0, 1]],
    [[0, 0], [0, 0]],
    [[6]],
    [[2, 4, 4], [-6, 6, 12], [10, -4, -16]],
    [[0, 3], [4, 0]],
    [[1, 2, 3, 4]],
    [[1], [2], [3]],
])
def test_golden_against_sympy(a):
    assert check_smith(a) == sympy_diagonal(a)


def test_public_signature():
    U, S, V = smith_normal_form([[2, 4], [6, 8]])
    assert S == [[2, 0], [0, 4]]
    assert matmul(matmul(U, [[2, 4], [6, 8]]), V) == S


def test_large_coefficients_stay_exact():
    a = [[1_000_000, 999_999, 3], [2_000_003, -1_000_000, 7], [999_983, 1_000_033, -1_000_000]]
    diag = check_smith(a)
    assert diag == sympy_diagonal(a)
    assert diag[0] * diag[1] * diag[2] == abs(determinant(a))
    b = [[10**6 * 3, 10**6 * 6], [10**6 * 5, 10**6 * 7 + 1]]
    assert check_smith(b) == sympy_diagonal(b)


def _matrix(m, n):
    return st.lists(st.lists(st.integers(-6, 6), min_size=n, max_size=n), min_size=m, max_size=m)


matrices = st.integers(1, 4).flatmap(lambda m: st.integers(1, 6).flatmap(lambda n: _matrix(m, n)))


@settings(max_examples=300, deadline=None, derandomize=True, print_blob=True,
          database=None)
@given(matrices)
def test_property_smith_invariants(a):
    check_smith(a)


@settings(max_examples=60, deadline=None, derandomize=True, print_blob=True,
          database=None)
@given(matrices)
def test_property_matches_sympy_diagonal(a):
    assert check_smith(a) == sympy_diagonal(a)
