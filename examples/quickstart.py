"""A matrix product and a softly-masked reduction, evaluated and printed."""
import numpy as np

import tegrad as tg


def main():
    m, n, p = 4, 6, 3
    A = tg.placeholder((m, n), dtype="float64", name="A")
    B = tg.placeholder((n, p), dtype="float64", name="B")
    k = tg.reduce_axis((0, n), name="k")
    C = tg.compute((m, p), lambda i, j: tg.sum(A[i, k] * B[k, j], axis=k), name="C")
    R = tg.compute((m, p), lambda i, j: tg.if_then_else(C[i, j] > 0, C[i, j], 0.0), name="R")
    print(tg.format(R))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, n)), rng.standard_normal((n, p))
    r = tg.evaluate(R, {A: a, B: b})
    assert np.allclose(r, np.maximum(a @ b, 0))
    print(r)


if __name__ == "__main__":
    main()
