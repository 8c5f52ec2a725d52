"""The scan stage: exclusive prefix and suffix reductions along one axis."""
import numpy as np
import pytest

import tegrad as tg
from tegrad.ir.rewrite import map_stage, retarget
from tegrad.ir.stages import stage_exprs

F64 = "float64"
LSE = tg.comm_reducer(lambda a, b: tg.log(tg.exp(a) + tg.exp(b)),
                      lambda dtype: tg.min_value(dtype), name="LSE")


def _numpy_scan(values, combine, identity, axis, reverse):
    values = np.moveaxis(values, axis, -1)
    out = np.empty_like(values)
    acc = np.full(values.shape[:-1], identity)
    steps = range(values.shape[-1] - 1, -1, -1) if reverse else range(values.shape[-1])
    for a in steps:
        out[..., a] = acc
        acc = combine(acc, values[..., a])
    return np.moveaxis(out, -1, axis)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("axis", [0, 1, 2])
@pytest.mark.parametrize("name, reducer, combine, identity", [
    ("sum", tg.sum, np.add, 0.0), ("prod", tg.prod, np.multiply, 1.0),
    ("max", tg.max, np.maximum, -np.inf),
    ("LSE", LSE, np.logaddexp, np.finfo(np.float64).min)])
def test_scan_matches_a_sequential_numpy_loop(name, reducer, combine, identity, axis, reverse):
    x = tg.placeholder((3, 4, 5), dtype=F64, name="x")
    s = tg.scan((3, 4, 5), lambda i, j, k: x[i, j, k] * 0.5, reducer, axis=axis,
                reverse=reverse, name="S")
    xs = np.random.default_rng(axis).standard_normal((3, 4, 5))
    with np.errstate(all="ignore"):
        expected = _numpy_scan(xs * 0.5, combine, identity, axis, reverse)
    np.testing.assert_allclose(tg.evaluate(s, {x: xs}), expected, rtol=1e-12)
    # the equivalent reduction computes the same values
    same = tg.compute((3, 4, 5), lambda i, j, k: s.op.as_reduce(), name="R")
    np.testing.assert_allclose(tg.evaluate(same, {x: xs}), expected, rtol=1e-12)


def test_scan_prints_counts_and_rewrites_like_other_stages():
    x = tg.placeholder((2, 6), dtype=F64, name="x")
    s = tg.scan((2, 6), lambda i, a: x[i, a] * 2.0, tg.prod, reverse=True, name="S")
    assert tg.format(s).splitlines()[-1] == "S[i, a] = exclusive suffix prod(x[i, a] * 2.0) along a"
    # one point per element (n points per line of n), a combine and a multiplication each
    assert (tg.cost(s).iterations, tg.cost(s).flops) == (12, 24)
    assert s.inputs == [x] and stage_exprs(s) == [s.op.source]
    y = tg.placeholder((2, 6), dtype=F64, name="y")
    s2 = retarget(s, {x: y})
    assert s2.inputs == [y] and s2.op.reverse and map_stage(s, lambda e: e) is s
    with pytest.raises(tg.ImmutableError):
        s.op.axis = 0  # stage ops are immutable


def test_gradients_flow_through_a_scan():
    x = tg.placeholder((2, 5), dtype=F64, name="x")
    for reducer in (tg.sum, tg.prod):
        for reverse in (False, True):
            s = tg.scan((2, 5), lambda i, a: x[i, a] * x[i, a], reducer, reverse=reverse,
                        name="S")
            assert tg.testing.check_grad(s, [x], head="random", rng=1) < 1e-5


def test_scan_errors_name_the_stage():
    x = tg.placeholder((2, 5), dtype=F64, name="x")
    with pytest.raises(tg.ShapeError, match=r"'Sbad'.*axis 2"):
        tg.scan((2, 5), lambda i, a: x[i, a], tg.sum, axis=2, name="Sbad")
    with pytest.raises(tg.TegradError, match=r"'Snot'.*reducer"):
        tg.scan((2, 5), lambda i, a: x[i, a], "sum", name="Snot")
    b = tg.placeholder((2, 5), dtype="bool", name="b")
    with pytest.raises(tg.DTypeError, match=r"'Sbool'"):
        tg.scan((2, 5), lambda i, a: b[i, a], tg.sum, name="Sbool")
    with pytest.raises(tg.TegradError, match=r"'Shuge'.*memory limit"):
        tg.evaluate(tg.scan((4096, 4096), lambda i, a: tg.cast(i, F64), tg.sum, name="Shuge"),
                    {}, memory_limit=10**6)
