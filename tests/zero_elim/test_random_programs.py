"""Random programs: the optimised gradient equals the naive one.

Programs are compositions of stages whose reads use affine, floor-division and modulo
indices (some guarded by conditions, like padding), elementwise operations, and sum or
max reductions; hypothesis draws their structure, sizes and coefficients.
"""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tegrad as tg

F64 = "float64"


def _index(draw, variables, extent):
    """An integer index into a dimension of ``extent`` (in bounds where it is read)."""
    kind = draw(st.sampled_from(["plain", "affine_mod", "div_mod", "div", "shifted"]))
    names = [v for v, _ in variables]
    v, size = variables[draw(st.integers(0, len(variables) - 1))]
    if kind == "plain" and size <= extent:
        return v, None
    if kind == "div" and size <= 2 * extent:
        return v // 2, None
    if kind == "shifted" and size <= extent + 1:
        # a padded read: only where the guard holds
        return v - 1, tg.all(v >= 1, v - 1 < extent)
    a = draw(st.integers(-3, 3))
    u, _ = variables[draw(st.integers(0, len(names) - 1))]
    b = draw(st.integers(-2, 2))
    c = draw(st.integers(0, 5))
    inner = v * a + u * b + c
    if kind == "div_mod":
        return (inner // draw(st.integers(1, 3))) % extent, None
    return inner % extent, None


def _read(draw, tensor, variables):
    indices, guards = [], []
    for extent in tensor.shape:
        idx, guard = _index(draw, variables, extent)
        indices.append(idx)
        if guard is not None:
            guards.append(guard)
    value = tensor[tuple(indices)]
    if guards:
        return tg.if_then_else(tg.all(*guards), value, 0.0)
    return value


def _body(draw, inputs, variables):
    terms = [_read(draw, draw(st.sampled_from(inputs)), variables)
             for _ in range(draw(st.integers(1, 3)))]
    out = terms[0]
    for t in terms[1:]:
        op = draw(st.sampled_from(["add", "mul", "sub"]))
        out = out + t if op == "add" else (out * t if op == "mul" else out - t)
    wrap = draw(st.sampled_from(["none", "tanh", "exp", "select"]))
    if wrap == "tanh":
        out = tg.tanh(out)
    elif wrap == "exp":
        out = tg.exp(out * 0.1)
    elif wrap == "select":
        v, _ = variables[0]
        out = tg.if_then_else(v % 2 == 0, out, out * 2.0)
    return out


@st.composite
def programs(draw):
    x = tg.placeholder((draw(st.integers(2, 5)), draw(st.integers(2, 5))), dtype=F64, name="x")
    inputs = [x]
    n_stages = draw(st.integers(1, 2))
    for s in range(n_stages):
        shape = (draw(st.integers(1, 4)), draw(st.integers(1, 4)))
        reduce = draw(st.sampled_from(["none", "sum", "max"]))
        extent = draw(st.integers(1, 4))
        k = tg.reduce_axis((0, extent), name=f"k{s}")

        def fcompute(i, j, reduce=reduce, k=k, shape=shape):
            variables = [(i, shape[0]), (j, shape[1])]
            if reduce == "none":
                return _body(draw, inputs, variables)
            variables.append((k, extent))
            body = _body(draw, inputs, variables)
            return (tg.sum if reduce == "sum" else tg.max)(body, axis=k)

        inputs = inputs + [tg.compute(shape, fcompute, name=f"s{s}")]
    return x, inputs[-1]


@settings(max_examples=60, deadline=None, print_blob=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(programs(), st.integers(0, 2**31 - 1))
def test_optimised_gradient_of_random_program_equals_naive(program, seed):
    x, out = program
    rng = np.random.default_rng(seed)
    head = tg.placeholder(out.shape, dtype=F64, name="head")
    feed = {x: rng.standard_normal(x.shape), head: rng.standard_normal(out.shape)}
    res = tg.differentiate(out, [x], head=head)
    optimised, naive = tg.evaluate([res[0], res.naive[0]], feed)
    np.testing.assert_allclose(optimised, naive, rtol=1e-9, atol=1e-12,
                               err_msg=tg.format(res.naive[0]) + "\n---\n" + tg.format(res[0]))
