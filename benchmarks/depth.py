"""The time of each pass on deep expressions and on programs of many stages.

For the expression shapes of tests/test_depth.py (10,000 operations deep: the chain
``e = e * 1.0001 + 0.5``, nested selects, a reduction of a deep body, an integer index
chain) and its programs of 2,000 stages (a chain of stages, a wide DAG): construction,
``tg.evaluate``, naive differentiation, zero elimination, ``tg.cost``, ``tg.format``,
and ``tg.build`` of the forward and of the gradient. Prints a markdown table (seconds).

    python benchmarks/depth.py [shape ...]
"""
import os
import sys
import time

import numpy as np

import tegrad as tg

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))
import test_depth as cases  # noqa: E402  (the shapes the tests check)

PASSES = ["construct", "evaluate", "differentiate", "zero elim", "cost", "format",
          "build", "build grad"]


def measure(make):
    times = {}

    def lap(name, fn):
        start = time.perf_counter()
        out = fn()
        times[name] = time.perf_counter() - start
        return out

    x, y = lap("construct", make)
    feed = {x: cases.X0}
    lap("evaluate", lambda: tg.evaluate(y, feed))
    naive = lap("differentiate", lambda: tg.differentiate(y, [x], optimize=False))
    grads = lap("zero elim", naive.optimized)
    lap("cost", lambda: tg.cost(y))
    lap("format", lambda: tg.format(y))
    lap("build", lambda: tg.build([x], [y]))
    lap("build grad", lambda: tg.build([x], [grads]))
    return times


def expression(shape):
    def make():
        x, y, _ = cases.make(shape)
        return x, y
    return make


def program(build):
    def make():
        x = tg.placeholder((3,), dtype="float64", name="x")
        return x, build(x)
    return make


CASES = {
    "chain": expression("chain"), "selects": expression("selects"),
    "reduction": expression("reduction"), "index": expression("index"),
    "stages-chain": program(cases.chain_program), "stages-wide": program(cases.wide_program),
}


def main(names):
    print("| case | " + " | ".join(PASSES) + " |")
    print("|---" * (len(PASSES) + 1) + "|")
    for name in names or CASES:
        times = measure(CASES[name])
        print(f"| {name} | " + " | ".join(f"{times[p]:.2f}" for p in PASSES) + " |",
              flush=True)


if __name__ == "__main__":
    np.seterr(all="ignore")
    main(sys.argv[1:])
