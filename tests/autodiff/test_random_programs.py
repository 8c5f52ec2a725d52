"""Property test: random expression trees and reductions against finite differences."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg
from tegrad.testing import check_grad

F64 = "float64"

_UNARY = [tg.exp, tg.sin, tg.cos, tg.tanh, tg.sigmoid, tg.erf,
          lambda e: tg.sqrt(e * e + 1.0), lambda e: tg.log(e * e + 1.0), lambda e: -e]
_BINARY = [lambda a, b: a + b, lambda a, b: a - b, lambda a, b: a * b,
           lambda a, b: a / (b * b + 1.0), tg.max, tg.min,
           lambda a, b: tg.if_then_else(a > b, a * 2.0, tg.exp(b)),
           lambda a, b: tg.power(a * a + 0.5, b)]


def _leaf():
    # x[i], a neighbour of x, z[i], or a constant
    return st.sampled_from(["x", "xs", "z", "c"])


def _tree():
    return st.recursive(
        _leaf(),
        lambda sub: st.one_of(
            st.tuples(st.sampled_from(range(len(_UNARY))), sub),
            st.tuples(st.sampled_from(range(len(_BINARY))), sub, sub)),
        max_leaves=6)


def _build(tree, x, z, i):
    """The expression of ``tree`` at position ``i``; ``z(i)`` reads the row of z."""
    if tree == "x":
        return x[i]
    if tree == "xs":
        return x[(i + 1) % 4]
    if tree == "z":
        return z(i)
    if tree == "c":
        return tg.const(0.7, F64)
    if len(tree) == 2:
        return _UNARY[tree[0]](_build(tree[1], x, z, i))
    return _BINARY[tree[0]](_build(tree[1], x, z, i), _build(tree[2], x, z, i))


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(tree=_tree(), reducer=st.sampled_from(["none", "sum", "max", "prod"]),
       seed=st.integers(0, 2**16))
def test_random_program_gradient(tree, reducer, seed):
    x = tg.placeholder((4,), dtype=F64, name="x")
    z = tg.placeholder((3, 4), dtype=F64, name="z")
    k = tg.reduce_axis((0, 4), name="k")
    if reducer == "none":
        y = tg.compute((3, 4), lambda j, i: _build(tree, x, lambda m: z[j, m], i) + x[i] * 0.0, name="y")
    else:
        red = {"sum": tg.sum, "max": tg.max, "prod": tg.prod}[reducer]
        y = tg.compute((3,), lambda j: red(_build(tree, x, lambda m: z[j, m], k) + x[k] * 0.0, axis=k),
                       name="y")
    rng = np.random.default_rng(seed)
    feed = {x: rng.uniform(-1, 1, 4), z: rng.uniform(-1, 1, (3, 4))}
    assert check_grad(y, [x, z], feed=feed, head="random", rng=seed, rtol=1e-5,
                      atol=1e-7) < 1e-5
