"""Compile-time and cost of zero elimination, operator by operator, and on a small CNN.

For every entry of the operator-gradient table (``OPERATOR_CASES`` in tests/conftest.py)
it reports the time to differentiate and zero-eliminate (best of 3), the time spent in
the solver, and the iterations of the forward pass, of the naive gradient and of the
optimised one. Then it times the same on a 6-layer CNN at a realistic size.

    python benchmarks/zero_elimination.py
"""
import importlib.util
import pathlib
import time
import zlib

from tegrad import solver
import tegrad as tg
import tegrad.zero_elim.domain as ze_domain
from tegrad import nn

ROOT = pathlib.Path(__file__).resolve().parent.parent


def _operator_table():
    path = ROOT / "tests" / "conftest.py"
    spec = importlib.util.spec_from_file_location("operator_cases", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _SolverClock:
    """Accumulates the time spent in ``solver.simplify_domain`` during differentiation."""

    def __init__(self):
        self.seconds, self.calls = 0.0, 0
        self._original = solver.simplify_domain

    def __enter__(self):
        def timed(domain):
            start = time.perf_counter()
            try:
                return self._original(domain)
            finally:
                self.seconds += time.perf_counter() - start
                self.calls += 1
        ze_domain.solver.simplify_domain = timed
        return self

    def __exit__(self, *exc):
        ze_domain.solver.simplify_domain = self._original


def _best_of(n, fn):
    best, out = None, None
    for _ in range(n):
        start = time.perf_counter()
        out = fn()
        elapsed = time.perf_counter() - start
        best = elapsed if best is None else min(best, elapsed)
    return best, out


def operators():
    table = _operator_table()
    print(f"{'operator':42s} {'diff+ZE s':>9s} {'solver ms/call':>14s} {'forward':>8s} "
          f"{'naive':>9s} {'optimised':>9s} {'opt/fwd':>7s}")
    worst = 0.0
    for name in sorted(table.OPERATOR_CASES):
        case = table.Case(zlib.crc32(name.encode()))
        out = table.first_output(table.OPERATOR_CASES[name](case))
        seconds, res = _best_of(3, lambda: tg.differentiate(out, case.inputs))
        with _SolverClock() as clock:
            tg.differentiate(out, case.inputs)
        fwd = tg.cost(out).iterations
        naive = max(tg.cost(g).iterations for g in res.naive)
        opt = max(tg.cost(g).iterations for g in res)
        per_call = 1000 * clock.seconds / max(clock.calls, 1)
        worst = max(worst, seconds)
        print(f"{name:42s} {seconds:9.3f} {per_call:14.2f} {fwd:8d} {naive:9d} {opt:9d} "
              f"{opt / fwd:7.2f}")
    print(f"slowest differentiate+optimise: {worst:.3f} s")


def cnn_program():
    """``(inputs, loss, weights)`` of the 6-layer CNN: conv, relu, max_pool, conv stride 2,
    relu, flatten, dense, softmax cross entropy (8x3x32x32 images)."""
    x = tg.placeholder((8, 3, 32, 32), name="x")
    labels = tg.placeholder((8,), dtype="int32", name="labels")
    w1 = tg.placeholder((16, 3, 3, 3), name="w1")
    w2 = tg.placeholder((32, 16, 3, 3), name="w2")
    wd = tg.placeholder((10, 32 * 8 * 8), name="wd")
    h = nn.relu(nn.conv2d(x, w1, padding=1))
    h = nn.max_pool2d(h, 2)
    h = nn.relu(nn.conv2d(h, w2, stride=2, padding=1))
    h = tg.ops.flatten(h)
    loss = nn.softmax_cross_entropy(nn.dense(h, wd), labels)
    return [x, labels, w1, w2, wd], loss, [w1, w2, wd]


def cnn():
    """Differentiation time and costs of the 6-layer CNN."""
    _, loss, (w1, w2, wd) = cnn_program()
    seconds, res = _best_of(3, lambda: tg.differentiate(loss, [w1, w2, wd]))
    fwd = tg.cost(loss).iterations
    grad = tg.cost(list(res)).iterations
    print(f"6-layer CNN: differentiate + zero elimination {seconds:.3f} s; forward "
          f"{fwd} iterations, all three gradients {grad} ({grad / fwd:.2f}x forward)")


if __name__ == "__main__":
    operators()
    cnn()
