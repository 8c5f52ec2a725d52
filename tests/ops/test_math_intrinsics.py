"""tan, asin, acos, atan, atan2, sinh, cosh, asinh, acosh, atanh, log1p and expm1: the
operators and their derivative rules against PyTorch (float32 and float64), the compiled
code against numpy on special values (the compiled gradients are checked through the
operator gradient table of tests/conftest.py)."""
import numpy as np
import pytest
import torch

import tegrad as tg
from tegrad import ops

#: operator -> (torch function, lowest and highest sample where the derivative is finite)
UNARY = {
    "tan": (torch.tan, -1.4, 1.4),
    "asin": (torch.asin, -0.95, 0.95),
    "acos": (torch.acos, -0.95, 0.95),
    "atan": (torch.atan, -5.0, 5.0),
    "sinh": (torch.sinh, -4.0, 4.0),
    "cosh": (torch.cosh, -4.0, 4.0),
    "asinh": (torch.asinh, -5.0, 5.0),
    "acosh": (torch.acosh, 1.05, 6.0),
    "atanh": (torch.atanh, -0.95, 0.95),
    "log1p": (torch.log1p, -0.9, 5.0),
    "expm1": (torch.expm1, -4.0, 4.0),
}

TOL = {"float64": dict(rtol=1e-12, atol=1e-14), "float32": dict(rtol=2e-6, atol=1e-6)}

SPECIAL = np.array([0.0, -0.0, 1e-30, -1e-30, 1e-8, -1e-8, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5,
                    3.0, -3.0, 30.0, -30.0, 100.0, -100.0, 1e5, -1e5, np.inf, -np.inf, np.nan])


def _torch_grads(fn, values, head):
    ts = [torch.tensor(v, requires_grad=True) for v in values]
    out = fn(*ts)
    out.backward(torch.tensor(head))
    return out.detach().numpy(), [t.grad.numpy() for t in ts]


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_unary_against_pytorch(dtype):
    # compiled forward and gradient: the operator gradient table (tests/conftest.py)
    rng = np.random.default_rng(5)
    x = tg.placeholder((4, 5), dtype=dtype, name="x")
    head = tg.placeholder((4, 5), dtype=dtype, name="head")
    outputs, feeds, wants = [], {head: rng.standard_normal((4, 5)).astype(dtype)}, []
    for name in sorted(UNARY):
        fn, lo, hi = UNARY[name]
        x = tg.placeholder((4, 5), dtype=dtype, name=f"x_{name}")
        feeds[x] = rng.uniform(lo, hi, size=(4, 5)).astype(dtype)
        y = getattr(ops, name)(x)
        (dx,) = tg.differentiate(y, [x], head=head)
        outputs += [y, dx]
        want_y, (want_dx,) = _torch_grads(fn, [feeds[x]], feeds[head])
        wants += [want_y, want_dx]
    for t, g, w in zip(outputs, tg.evaluate(outputs, feeds), wants):
        np.testing.assert_allclose(g, w, err_msg=t.name, **TOL[dtype])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_compiled_special_values_match_numpy(dtype):
    # signed zeros, infinities, NaN and out-of-domain values (NaN) as numpy gives them
    xv = SPECIAL.astype(dtype)
    x = tg.placeholder(xv.shape, dtype=dtype, name="x")
    outs = [getattr(ops, name)(x) for name in sorted(UNARY)]
    got = tg.build([x], outs, threads=1)(xv)
    want = tg.evaluate(outs, {x: xv})
    for name, g, w in zip(sorted(UNARY), got, want):
        np.testing.assert_allclose(g, w, rtol=TOL[dtype]["rtol"], atol=0, equal_nan=True,
                                   err_msg=name)
        zeros = w == 0
        np.testing.assert_array_equal(np.signbit(g[zeros]), np.signbit(w[zeros]),
                                      err_msg=name)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_atan2_against_pytorch_with_broadcasting(dtype):
    rng = np.random.default_rng(3)
    yv = rng.uniform(-2, 2, size=(3, 4)).astype(dtype)
    xv = rng.uniform(-2, 2, size=(4,)).astype(dtype)
    headv = rng.standard_normal((3, 4)).astype(dtype)
    y = tg.placeholder((3, 4), dtype=dtype, name="y")
    x = tg.placeholder((4,), dtype=dtype, name="x")
    head = tg.placeholder((3, 4), dtype=dtype, name="head")
    out = ops.atan2(y, x)
    dy, dx = tg.differentiate(out, [y, x], head=head)
    want, (want_dy, want_dx) = _torch_grads(torch.atan2, [yv, xv], headv)
    feeds = {y: yv, x: xv, head: headv}
    for got in (tg.evaluate([out, dy, dx], feeds),
                tg.build([y, x, head], [out, dy, dx], threads=1)(yv, xv, headv)):
        for g, w in zip(got, [want, want_dy, want_dx]):
            np.testing.assert_allclose(g, w, **TOL[dtype])


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_atan2_quadrants_and_signed_zeros_compiled(dtype):
    grid = np.array([0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 1e-300 if dtype ==
                     "float64" else 1e-40])
    yv, xv = (a.ravel().astype(dtype) for a in np.meshgrid(grid, grid))
    y = tg.placeholder(yv.shape, dtype=dtype, name="y")
    x = tg.placeholder(xv.shape, dtype=dtype, name="x")
    out = ops.atan2(y, x)
    (got,) = tg.build([y, x], [out], threads=1)(yv, xv)
    want = np.arctan2(yv, xv)
    np.testing.assert_allclose(got, want, rtol=TOL[dtype]["rtol"], atol=0, equal_nan=True)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


def test_tiny_arguments_keep_full_precision():
    # log1p and expm1 exist for these: log(1 + x) and exp(x) - 1 would lose every digit
    xv = np.array([1e-18, -3e-17, 2.5e-12])
    x = tg.placeholder(xv.shape, dtype="float64", name="x")
    got = tg.build([x], [ops.log1p(x), ops.expm1(x)], threads=1)(xv)
    np.testing.assert_allclose(got[0], np.log1p(xv), rtol=1e-15)
    np.testing.assert_allclose(got[1], np.expm1(xv), rtol=1e-15)


def test_integer_operands_are_refused_naming_the_tensor():
    i = tg.placeholder((3,), dtype="int32", name="ids")
    with pytest.raises(tg.DTypeError, match="ids"):
        ops.tan(i)
    with pytest.raises(tg.DTypeError, match="atan2: tensor 'ids' has dtype int32"):
        ops.atan2(i, 1.0)
