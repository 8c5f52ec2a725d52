"""Time of ``tg.cost`` on large stages: the solver counts points in closed form.

A box-shaped stage of 10^12 points is a product of extents; a triangular one is counted
by isl, which scans the outer variable (no barvinok), so it grows with that extent.

    python benchmarks/cost.py
"""
import time

import tegrad as tg


def _time(t):
    start = time.perf_counter()
    c = tg.cost(t)
    return c, 1000 * (time.perf_counter() - start)


def main():
    for n in (10**3, 10**4, 10**5, 10**6):
        x = tg.placeholder((n,), name="x")
        k = tg.reduce_axis((0, n), name="k")
        box = tg.compute((n,), lambda i: tg.sum(x[k] * x[i], axis=k), name="box")
        k2 = tg.reduce_axis((0, n), name="k2")
        tri = tg.compute((n,), lambda i: tg.sum(x[k2], axis=k2, where=k2 <= i), name="tri")
        (cb, mb), (ct, mt) = _time(box), _time(tri)
        print(f"n={n:>8d}  box: {cb.iterations:>16d} points in {mb:8.1f} ms   "
              f"triangle: {ct.iterations:>16d} points in {mt:8.1f} ms")


if __name__ == "__main__":
    main()
