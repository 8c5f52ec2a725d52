"""Smith normal form over the integers, with exact Python ints.

For an ``m x n`` integer matrix ``A`` we compute unimodular ``U`` (m x m) and
``V`` (n x n) with ``U A V == S``, where ``S`` is diagonal, its non-zero
diagonal ``s_0, ..., s_{r-1}`` is positive and each ``s_i`` divides ``s_{i+1}``.

>>> U, S, V = smith_normal_form([[2, 4], [6, 8]])
>>> S
[[2, 0], [0, 4]]
>>> matmul(matmul(U, [[2, 4], [6, 8]]), V) == S
True
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["smith_normal_form", "smith_decomposition", "SmithDecomposition",
           "matmul", "identity", "determinant"]


def identity(n: int) -> list:
    return [[int(i == j) for j in range(n)] for i in range(n)]


def matmul(a: list, b: list) -> list:
    """Product of two integer matrices given as lists of rows."""
    cols = list(zip(*b)) if b else []
    inner = len(b)
    if a and len(a[0]) != inner:
        raise ValueError("matrix shapes do not match")
    if not cols:
        return [[] for _ in a]
    return [[sum(x * y for x, y in zip(row, col)) for col in cols] for row in a]


def determinant(a: list) -> int:
    """Exact determinant by fraction-free (Bareiss) elimination."""
    n = len(a)
    m = [list(map(int, row)) for row in a]
    sign, prev = 1, 1
    for k in range(n - 1):
        if m[k][k] == 0:
            swap = next((i for i in range(k + 1, n) if m[i][k]), None)
            if swap is None:
                return 0
            m[k], m[swap] = m[swap], m[k]
            sign = -sign
        for i in range(k + 1, n):
            for j in range(k + 1, n):
                m[i][j] = (m[i][j] * m[k][k] - m[i][k] * m[k][j]) // prev
        prev = m[k][k]
    return sign * m[n - 1][n - 1] if n else 1


@dataclass(frozen=True)
class SmithDecomposition:
    """``U A V == S``; ``V_inv`` is ``V``'s integral inverse; ``rank`` non-zero diagonals."""

    U: list
    S: list
    V: list
    V_inv: list
    rank: int

    @property
    def diagonal(self) -> list:
        return [self.S[i][i] for i in range(self.rank)]


def smith_normal_form(matrix: list) -> tuple:
    """Return ``(U, S, V)`` with ``U * matrix * V == S`` in Smith normal form.

    >>> smith_normal_form([[1, 1], [1, -1]])[1]
    [[1, 0], [0, 2]]
    """
    d = smith_decomposition(matrix)
    return d.U, d.S, d.V


def smith_decomposition(matrix: list) -> SmithDecomposition:
    """Smith normal form plus the inverse of ``V`` and the rank.

    Elementary operations are applied to ``S`` and mirrored on ``U`` (row
    operations), ``V`` (column operations) and ``V_inv`` (the inverse row
    operation), so no matrix is ever inverted.
    """
    S = [list(map(int, row)) for row in matrix]
    m = len(S)
    n = len(S[0]) if m else 0
    if any(len(row) != n for row in S):
        raise ValueError("ragged matrix")
    U = identity(m)
    V = identity(n)
    V_inv = identity(n)

    def swap_rows(i, j):
        S[i], S[j] = S[j], S[i]
        U[i], U[j] = U[j], U[i]

    def swap_cols(i, j):
        for row in S:
            row[i], row[j] = row[j], row[i]
        for row in V:
            row[i], row[j] = row[j], row[i]
        V_inv[i], V_inv[j] = V_inv[j], V_inv[i]

    def add_row(dst, src, k):  # row_dst += k * row_src
        S[dst] = [a + k * b for a, b in zip(S[dst], S[src])]
        U[dst] = [a + k * b for a, b in zip(U[dst], U[src])]

    def add_col(dst, src, k):  # col_dst += k * col_src
        for row in S:
            row[dst] += k * row[src]
        for row in V:
            row[dst] += k * row[src]
        # (V E)^-1 = E^-1 V^-1 and E^-1 is "row_src -= k * row_dst".
        V_inv[src] = [a - k * b for a, b in zip(V_inv[src], V_inv[dst])]

    # Loop invariant (checked by the property tests):
    #   U * A * V == S,  V * V_inv == I,  U and V unimodular, and for t = the
    #   current step: S[:t, :t] is diagonal with positive entries
    #   s_0 | s_1 | ... | s_{t-1}, rows/columns t.. of S are zero inside the
    #   first t columns/rows, and s_{t-1} divides every entry of S[t:, t:].
    # Each step moves the smallest non-zero entry of the trailing block to
    # (t, t) and reduces its row and column by Euclidean division; a remainder
    # becomes a strictly smaller pivot, so the inner loop terminates.  Using
    # the smallest pivot keeps intermediate numbers small.
    rank = 0
    for t in range(min(m, n)):
        while True:
            pivot = None
            for i in range(t, m):
                row = S[i]
                for j in range(t, n):
                    v = row[j]
                    if v and (pivot is None or abs(v) < abs(S[pivot[0]][pivot[1]])):
                        pivot = (i, j)
            if pivot is None:
                break
            if pivot[0] != t:
                swap_rows(t, pivot[0])
            if pivot[1] != t:
                swap_cols(t, pivot[1])
            p = S[t][t]
            clean = True
            for i in range(t + 1, m):
                if S[i][t]:
                    add_row(i, t, -(S[i][t] // p))
                    clean = clean and S[i][t] == 0
            for j in range(t + 1, n):
                if S[t][j]:
                    add_col(j, t, -(S[t][j] // p))
                    clean = clean and S[t][j] == 0
            if not clean:
                continue  # a non-zero remainder is a smaller pivot candidate
            bad = next(((i, j) for i in range(t + 1, m) for j in range(t + 1, n)
                        if S[i][j] % p), None)
            if bad is None:
                break
            # Pull the offending row into row t: its entry there leaves a
            # remainder modulo p, which then becomes a smaller pivot.
            add_row(t, bad[0], 1)
        if pivot is None:
            break
        if S[t][t] < 0:
            S[t] = [-a for a in S[t]]
            U[t] = [-a for a in U[t]]
        rank = t + 1
    return SmithDecomposition(U, S, V, V_inv, rank)
